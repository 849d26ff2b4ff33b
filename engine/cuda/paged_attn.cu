// Launcher for paged decode attention: argument checks, arm and dtype dispatch, launch on the caller's stream.
//
// Arms: 0 generic block kernel (any head_dim <= 256, fp32/bf16/fp16); 1 warp-split-KV (EPL 8 for
// head_dim 256, EPL 4 for head_dim 128); 2 GQA-fused (head_dim 64/128/256, q/kv ratio 1, 2, 4 or 8).
// The fast arms take fp32 and bf16; another shape or dtype returns kUnsupported (the binding falls
// back to the generic arm).
#include "paged_attn.cuh"

VT_DEFINE_LAST_ERROR(paged_attn)

namespace {

constexpr int kArmGeneric = 0;
constexpr int kArmWarp = 1;
constexpr int kArmGqa = 2;

template <typename T, int EPL>
int launch_gqa(const vt::PagedArgs& a, int batch, void* out, cudaStream_t s) {
  const int group = a.num_q_heads / a.num_kv_heads;
  const dim3 grid(a.num_kv_heads, batch), block(vt::kDecodeThreads);
  T* o = static_cast<T*>(out);
  switch (group) {
    case 1: vt::decode_warp_kernel<T, EPL, 1><<<grid, block, 0, s>>>(a, o); break;
    case 2: vt::decode_warp_kernel<T, EPL, 2><<<grid, block, 0, s>>>(a, o); break;
    case 4: vt::decode_warp_kernel<T, EPL, 4><<<grid, block, 0, s>>>(a, o); break;
    case 8: vt::decode_warp_kernel<T, EPL, 8><<<grid, block, 0, s>>>(a, o); break;
    default: return vt::fail(vt::kUnsupported, "paged_attn gqa arm: q/kv head ratio %d not in {1,2,4,8}", group);
  }
  return vt::launch_status("decode_warp_kernel (gqa)");
}

template <typename T>
int launch(int arm, const vt::PagedArgs& a, int batch, void* out, float* ws, int ws_stride, cudaStream_t s) {
  if (arm == kArmGeneric) {
    vt::decode_generic_kernel<T>
        <<<dim3(a.num_q_heads, batch), vt::kGenericThreads, 0, s>>>(a, static_cast<T*>(out), ws, ws_stride);
    return vt::launch_status("decode_generic_kernel");
  }
  if constexpr (sizeof(T) == 2 && !std::is_same_v<T, __nv_bfloat16>) {
    return vt::fail(vt::kUnsupported, "paged_attn arm %d: fp16 is served by the generic arm only", arm);
  } else {
    if (arm == kArmWarp) {
      const dim3 grid(a.num_q_heads, batch);
      T* o = static_cast<T*>(out);
      if (a.head_dim == 256)
        vt::decode_warp_kernel<T, 8, 1><<<grid, vt::kDecodeThreads, 0, s>>>(a, o);
      else if (a.head_dim == 128)
        vt::decode_warp_kernel<T, 4, 1><<<grid, vt::kDecodeThreads, 0, s>>>(a, o);
      else
        return vt::fail(vt::kUnsupported, "paged_attn warp arm: head_dim %d not in {128, 256}", a.head_dim);
      return vt::launch_status("decode_warp_kernel");
    }
    switch (a.head_dim) {
      case 64: return launch_gqa<T, 2>(a, batch, out, s);
      case 128: return launch_gqa<T, 4>(a, batch, out, s);
      case 256: return launch_gqa<T, 8>(a, batch, out, s);
      default: return vt::fail(vt::kUnsupported, "paged_attn gqa arm: head_dim %d not in {64, 128, 256}", a.head_dim);
    }
  }
}

}  // namespace

// out, q: [batch, num_q_heads, head_dim]; k_cache, v_cache: [num_blocks, block_size, num_kv_heads,
// head_dim]; block_tables: [batch, max_blocks] int32; context_lens: [batch] int32 (each in
// [1, max_blocks*block_size]); ws (generic arm only, else unused): [batch, num_q_heads,
// max_blocks*block_size] fp32 scratch for the logits and probabilities.
VT_EXPORT int vt_paged_attn_decode(void* out, const void* q, const void* k_cache, const void* v_cache,
                                   const int* block_tables, const int* context_lens, float* ws, int batch,
                                   int num_q_heads, int num_kv_heads, int head_dim, int block_size, int max_blocks,
                                   float scale, int window, int arm, int dtype, void* stream) {
  if (batch < 0 || num_q_heads <= 0 || num_kv_heads <= 0 || block_size <= 0 || max_blocks <= 0 || window < 0)
    return vt::fail(vt::kBadArgument,
                    "paged_attn: bad sizes batch=%d num_q_heads=%d num_kv_heads=%d block_size=%d max_blocks=%d window=%d",
                    batch, num_q_heads, num_kv_heads, block_size, max_blocks, window);
  if (num_q_heads % num_kv_heads != 0)
    return vt::fail(vt::kBadArgument, "paged_attn: num_q_heads %d is not a multiple of num_kv_heads %d",
                    num_q_heads, num_kv_heads);
  if (head_dim <= 0 || head_dim > vt::kGenericMaxHeadDim || head_dim % 8 != 0)
    return vt::fail(vt::kBadArgument, "paged_attn: head_dim %d must be a multiple of 8 in [8, %d]", head_dim,
                    vt::kGenericMaxHeadDim);
  if (arm != kArmGeneric && !(vt::aligned16(q) && vt::aligned16(k_cache) && vt::aligned16(v_cache) &&
                              vt::aligned16(out)))
    return vt::fail(vt::kBadArgument, "paged_attn arm %d: q, caches and out must be 16-byte aligned", arm);
  if (arm < kArmGeneric || arm > kArmGqa) return vt::fail(vt::kBadArgument, "paged_attn: unknown arm %d", arm);
  if (arm == kArmGeneric && ws == nullptr)
    return vt::fail(vt::kBadArgument, "paged_attn generic arm: ws (the logits workspace) is null");
  if (batch == 0) return vt::kOk;
  const vt::PagedArgs a{q, k_cache, v_cache, block_tables, context_lens, num_q_heads, num_kv_heads,
                        head_dim, block_size, max_blocks, scale, window};
  const int ws_stride = max_blocks * block_size;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: return launch<float>(arm, a, batch, out, ws, ws_stride, s);
    case vt::kBF16: return launch<__nv_bfloat16>(arm, a, batch, out, ws, ws_stride, s);
    case vt::kF16: return launch<__half>(arm, a, batch, out, ws, ws_stride, s);
    default: return vt::fail(vt::kBadArgument, "paged_attn: unknown dtype code %d", dtype);
  }
}
