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

// grid (num_splits, num_q_heads / GROUP, batch). Sequence b's nb = ceil(len / block_size) blocks
// are split evenly: split s owns positions [s*per, (s+1)*per) with per = ceil(nb / num_splits) *
// block_size, clipped to the (windowed) context. GROUP 1: one query head per block; GROUP = q/kv
// ratio: the group swap, the query heads of one KV head as rows of one block. Scores stay fp32.
// o_part: [batch, num_splits, num_q_heads, head_dim] fp32; lse: [batch, num_splits, num_q_heads] fp32.
template <typename T, int EPL, int GROUP>
__global__ void __launch_bounds__(kDecodeThreads)
    splitkv_partial_kernel(PagedArgs a, float* __restrict__ o_part, float* __restrict__ lse) {
  __shared__ MergeSmem<EPL, GROUP> sm;
  const int split = blockIdx.x, num_splits = gridDim.x, b = blockIdx.z, hd = kWarp * EPL;
  const int q_head = blockIdx.y * GROUP;
  const int kv_head = q_head / (a.num_q_heads / a.num_kv_heads);
  const int len = a.context_lens[b];
  const int per = ceil_div(ceil_div(len, a.block_size), num_splits) * a.block_size;
  const int lo = max(split * per, window_begin(len, a.window)), hi = min(len, (split + 1) * per);
  const T* q = static_cast<const T*>(a.q) + ((int64_t)b * a.num_q_heads + q_head) * hd;
  warp_core<T, EPL, GROUP, false>(a, b, q, kv_head, lo, hi, sm);
  for (int idx = threadIdx.x; idx < GROUP * hd; idx += kDecodeThreads) {
    const int g = idx / hd, d = idx % hd;
    const int64_t row = ((int64_t)b * num_splits + split) * a.num_q_heads + q_head + g;
    float l;
    o_part[row * hd + d] = merge_warps<EPL, GROUP>(sm, idx, &l);
    if (d == 0) lse[row] = l;
  }
}

// grid (num_q_heads, batch): out = sum_s exp(lse_s - M) * o_s / sum_s exp(lse_s - M), M the max lse.
template <typename T>
__global__ void __launch_bounds__(kCombineThreads)
    splitkv_combine_kernel(const float* __restrict__ o_part, const float* __restrict__ lse, T* __restrict__ out,
                           int num_q_heads, int head_dim, int num_splits) {
  __shared__ float w_s[kMaxSplits];
  const int h = blockIdx.x, b = blockIdx.y;
  const int64_t stride = num_q_heads;  // between splits, in rows
  const int64_t first = (int64_t)b * num_splits * num_q_heads + h;  // row of split 0
  float mx = -CUDART_INF_F;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, lse[first + s * stride]);
  float total = 0.f;
  for (int s = 0; s < num_splits; ++s) total += mx == -CUDART_INF_F ? 0.f : expf(lse[first + s * stride] - mx);
  for (int s = threadIdx.x; s < num_splits; s += kCombineThreads)
    w_s[s] = mx == -CUDART_INF_F ? 0.f : expf(lse[first + s * stride] - mx);
  __syncthreads();
  const float inv = total > 0.f ? 1.f / total : 0.f;
  for (int d = threadIdx.x; d < head_dim; d += kCombineThreads) {
    float acc = 0.f;
    for (int s = 0; s < num_splits; ++s) acc += w_s[s] * o_part[(first + s * stride) * head_dim + d];
    out[((int64_t)b * num_q_heads + h) * head_dim + d] = from_f32<T>(acc * inv);
  }
}

}  // namespace vt
