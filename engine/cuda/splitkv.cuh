// Split-KV decode attention kernels: per-split partials (fp32 output and log-sum-exp) from the
// warp-split-KV core, and the fp32 log-sum-exp combine.
#pragma once

#include "paged_attn.cuh"

namespace vt {

constexpr int kMaxSplits = 64;        // upper bound on splits (combine weights live in smem)
constexpr int kSplitMinTokens = 256;  // fewest tokens per split worth a partial write and combine
constexpr int kSplitWaves = 2;        // target blocks = kSplitWaves * SM count
constexpr int kCombineThreads = 128;

// The split count: enough blocks for kSplitWaves waves over the SMs, but no split shorter than
// kSplitMinTokens of the longest context; clamped to [1, kMaxSplits].
__host__ __device__ inline int splitkv_num_splits(int rows, int max_context, int sm_count) {
  if (rows <= 0 || max_context <= 0 || sm_count <= 0) return 1;
  const int by_occupancy = ceil_div(kSplitWaves * sm_count, rows);
  const int by_work = ceil_div(max_context, kSplitMinTokens);
  const int n = by_occupancy < by_work ? by_occupancy : by_work;
  return n < 1 ? 1 : (n > kMaxSplits ? kMaxSplits : n);
}

// grid (num_splits, num_q_heads / GROUP, batch). Split s covers positions [s*chunk, (s+1)*chunk)
// clipped to the sequence's (windowed) range; the last split runs to the end of the context. GROUP 1: one query head per block; GROUP = q/kv
// ratio: the group swap, the query heads of one KV head as rows of one block.
// o_part: [batch, num_q_heads, num_splits, head_dim] fp32; lse: [batch, num_q_heads, num_splits] fp32.
template <typename T, int EPL, int GROUP>
__global__ void __launch_bounds__(kDecodeThreads)
    splitkv_partial_kernel(PagedArgs a, int chunk, float* __restrict__ o_part, float* __restrict__ lse) {
  __shared__ MergeSmem<EPL, GROUP> sm;
  const int split = blockIdx.x, num_splits = gridDim.x, b = blockIdx.z, hd = kWarp * EPL;
  const int q_head = blockIdx.y * GROUP;
  const int kv_head = q_head / (a.num_q_heads / a.num_kv_heads);
  const int len = a.context_lens[b];
  const int lo = max(split * chunk, window_begin(len, a.window)), hi = split == num_splits - 1 ? len : min(len, (split + 1) * chunk);
  const T* q = static_cast<const T*>(a.q) + ((int64_t)b * a.num_q_heads + q_head) * hd;
  warp_core<T, EPL, GROUP>(a, b, q, kv_head, lo, hi, sm);
  for (int idx = threadIdx.x; idx < GROUP * hd; idx += kDecodeThreads) {
    const int g = idx / hd, d = idx % hd;
    const int64_t row = ((int64_t)b * a.num_q_heads + q_head + g) * num_splits + split;
    float l;
    o_part[row * hd + d] = merge_warps<EPL, GROUP>(sm, idx, &l);
    if (d == 0) lse[row] = l;
  }
}

// grid (num_q_heads, batch): out = sum_s exp(lse_s - LSE) * o_s, LSE the log-sum-exp over splits.
template <typename T>
__global__ void __launch_bounds__(kCombineThreads)
    splitkv_combine_kernel(const float* __restrict__ o_part, const float* __restrict__ lse, T* __restrict__ out,
                           int num_q_heads, int head_dim, int num_splits) {
  __shared__ float w_s[kMaxSplits];
  const int64_t row = (int64_t)blockIdx.y * num_q_heads + blockIdx.x;
  const float* l = lse + row * num_splits;
  float mx = -CUDART_INF_F;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, l[s]);
  float total = 0.f;
  for (int s = 0; s < num_splits; ++s) total += mx == -CUDART_INF_F ? 0.f : expf(l[s] - mx);
  for (int s = threadIdx.x; s < num_splits; s += kCombineThreads)
    w_s[s] = total > 0.f ? expf(l[s] - mx) / total : 0.f;
  __syncthreads();
  const float* o = o_part + row * num_splits * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += kCombineThreads) {
    float acc = 0.f;
    for (int s = 0; s < num_splits; ++s) acc += w_s[s] * o[(int64_t)s * head_dim + d];
    out[row * head_dim + d] = from_f32<T>(acc);
  }
}

}  // namespace vt
