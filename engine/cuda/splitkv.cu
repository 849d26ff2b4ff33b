// Launcher for split-KV decode attention with the GQA group swap (one block per KV head, its query heads as
// rows): split-count heuristic, partial and combine launches. The kernel table's by-name `splitkv_swap` arm;
// the unswapped form (one block per query head) lost its A/B and was retired.
//
// Split count (vt::splitkv_num_splits): rows = batch * num_kv_heads blocks per split;
// splits = min(ceil(2 * SMs / rows), ceil(max_context / 256)), clamped to [1, 64]: short contexts stay
// unsplit, long ones fill two waves of the GPU.
#include "splitkv.cuh"

VT_DEFINE_LAST_ERROR(splitkv)

namespace {

template <typename T, int EPL>
int launch_partial(const vt::PagedArgs& a, int batch, int num_splits, float* o_part, float* lse, cudaStream_t s) {
  const int group = a.num_q_heads / a.num_kv_heads;
  const dim3 grid(num_splits, a.num_kv_heads, batch);
  switch (group) {
    case 1: vt::splitkv_partial_kernel<T, EPL, 1><<<grid, vt::kDecodeThreads, 0, s>>>(a, o_part, lse); break;
    case 2: vt::splitkv_partial_kernel<T, EPL, 2><<<grid, vt::kDecodeThreads, 0, s>>>(a, o_part, lse); break;
    case 4: vt::splitkv_partial_kernel<T, EPL, 4><<<grid, vt::kDecodeThreads, 0, s>>>(a, o_part, lse); break;
    case 8: vt::splitkv_partial_kernel<T, EPL, 8><<<grid, vt::kDecodeThreads, 0, s>>>(a, o_part, lse); break;
    default: return vt::fail(vt::kUnsupported, "splitkv group swap: q/kv head ratio %d not in {1,2,4,8}", group);
  }
  return vt::launch_status("splitkv_partial_kernel (group swap)");
}

template <typename T>
int partial(const vt::PagedArgs& a, int batch, int num_splits, float* o_part, float* lse, cudaStream_t s) {
  switch (a.head_dim) {
    case 64: return launch_partial<T, 2>(a, batch, num_splits, o_part, lse, s);
    case 128: return launch_partial<T, 4>(a, batch, num_splits, o_part, lse, s);
    case 256: return launch_partial<T, 8>(a, batch, num_splits, o_part, lse, s);
    default: return vt::fail(vt::kUnsupported, "splitkv: head_dim %d not in {64, 128, 256}", a.head_dim);
  }
}

template <typename T>
int combine(const float* o_part, const float* lse, void* out, int batch, int num_q_heads, int head_dim,
            int num_splits, cudaStream_t s) {
  vt::splitkv_combine_kernel<T><<<dim3(num_q_heads, batch), vt::kCombineThreads, 0, s>>>(
      o_part, lse, static_cast<T*>(out), num_q_heads, head_dim, num_splits);
  return vt::launch_status("splitkv_combine_kernel");
}

}  // namespace

// rows: blocks per split (batch * num_kv_heads: the group swap).
VT_EXPORT int vt_splitkv_num_splits(int rows, int max_context, int sm_count) {
  return vt::splitkv_num_splits(rows, max_context, sm_count);
}

// q: [batch, num_q_heads, head_dim]; caches: [num_blocks, block_size, num_kv_heads, head_dim];
// block_tables: [batch, max_blocks] int32; context_lens: [batch] int32; split s covers positions
// [s*per, (s+1)*per), per = ceil(ceil(len / block_size) / num_splits) * block_size (engine/ops/splitkv.py);
// o_part: [batch, num_splits, num_q_heads, head_dim] fp32; lse: [batch, num_splits, num_q_heads] fp32
// (-inf and a zero output for an empty split).
VT_EXPORT int vt_splitkv_partial(float* o_part, float* lse, const void* q, const void* k_cache, const void* v_cache,
                                 const int* block_tables, const int* context_lens, int batch, int num_q_heads,
                                 int num_kv_heads, int head_dim, int block_size, int max_blocks, float scale,
                                 int window, int num_splits, int dtype, void* stream) {
  if (batch < 0 || num_q_heads <= 0 || num_kv_heads <= 0 || block_size <= 0 || max_blocks <= 0 || window < 0)
    return vt::fail(vt::kBadArgument,
                    "splitkv: bad sizes batch=%d num_q_heads=%d num_kv_heads=%d block_size=%d max_blocks=%d window=%d",
                    batch, num_q_heads, num_kv_heads, block_size, max_blocks, window);
  if (num_q_heads % num_kv_heads != 0)
    return vt::fail(vt::kBadArgument, "splitkv: num_q_heads %d is not a multiple of num_kv_heads %d", num_q_heads,
                    num_kv_heads);
  if (num_splits < 1 || num_splits > vt::kMaxSplits)
    return vt::fail(vt::kBadArgument, "splitkv: num_splits %d not in [1, %d]", num_splits, vt::kMaxSplits);
  if (!(vt::aligned16(q) && vt::aligned16(k_cache) && vt::aligned16(v_cache)))
    return vt::fail(vt::kBadArgument, "splitkv: q and caches must be 16-byte aligned");
  if (batch == 0) return vt::kOk;
  const vt::PagedArgs a{q, k_cache, v_cache, block_tables, context_lens, num_q_heads, num_kv_heads,
                        head_dim, block_size, max_blocks, scale, window};
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: return partial<float>(a, batch, num_splits, o_part, lse, s);
    case vt::kBF16: return partial<__nv_bfloat16>(a, batch, num_splits, o_part, lse, s);
    default: return vt::fail(vt::kUnsupported, "splitkv: dtype code %d (fp32 and bf16 only)", dtype);
  }
}

// out: [batch, num_q_heads, head_dim] in the dtype; o_part, lse as produced by vt_splitkv_partial.
VT_EXPORT int vt_splitkv_combine(void* out, const float* o_part, const float* lse, int batch, int num_q_heads,
                                 int head_dim, int num_splits, int dtype, void* stream) {
  if (batch < 0 || num_q_heads <= 0 || head_dim <= 0 || num_splits < 1 || num_splits > vt::kMaxSplits)
    return vt::fail(vt::kBadArgument, "splitkv combine: bad sizes batch=%d num_q_heads=%d head_dim=%d num_splits=%d",
                    batch, num_q_heads, head_dim, num_splits);
  if (batch == 0) return vt::kOk;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: return combine<float>(o_part, lse, out, batch, num_q_heads, head_dim, num_splits, s);
    case vt::kBF16: return combine<__nv_bfloat16>(o_part, lse, out, batch, num_q_heads, head_dim, num_splits, s);
    case vt::kF16: return combine<__half>(o_part, lse, out, batch, num_q_heads, head_dim, num_splits, s);
    default: return vt::fail(vt::kBadArgument, "splitkv combine: unknown dtype code %d", dtype);
  }
}
