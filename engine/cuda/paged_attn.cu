// Launcher for paged decode attention: argument checks, arm and dtype dispatch, launch on the caller's stream.
//
// Arms: 0 generic block kernel (any head_dim <= 256, fp32/bf16/fp16); 1 warp-split-KV at head_dim 128
// (EPL 4; fp32 and bf16), kept by name for the kernel set this engine mirrors. Another shape or dtype
// returns kUnsupported. The GQA-fused arm and the warp arm's head_dim-256 instantiation lost their A/Bs
// at every measured shape and were retired (docs/BENCHMARKS.md, "Arm outcomes").
#include "paged_attn.cuh"

VT_DEFINE_LAST_ERROR(paged_attn)

namespace {

constexpr int kArmGeneric = 0;
constexpr int kArmWarp = 1;

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
    if (a.head_dim != 128)
      return vt::fail(vt::kUnsupported, "paged_attn warp arm: head_dim %d is not 128", a.head_dim);
    vt::decode_warp_kernel<T, 4, 1>
        <<<dim3(a.num_q_heads, batch), vt::kDecodeThreads, 0, s>>>(a, static_cast<T*>(out));
    return vt::launch_status("decode_warp_kernel");
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
  if (arm < kArmGeneric || arm > kArmWarp) return vt::fail(vt::kBadArgument, "paged_attn: unknown arm %d", arm);
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
