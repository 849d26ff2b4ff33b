// MoE kernels on raw pointers: top-k softmax routing, token-to-expert alignment, grouped expert GEMMs.
#pragma once

#include "common.cuh"

namespace vt_moe {

// Tuning parameters, declared once.
constexpr int kWarp = 32;
constexpr int kRouteWarpsPerBlock = 4;       // one warp routes one token
constexpr int kRouteMaxExpertsPerLane = 16;  // experts <= 512
constexpr int kMaxExperts = kWarp * kRouteMaxExpertsPerLane;
constexpr int kMaxTopK = 32;
constexpr int kAlignThreads = 256;            // one block aligns all tokens
constexpr int kMaxAlignExperts = 1024;        // shared memory: (2 + warps) ints per expert
constexpr int kAlignWarps = kAlignThreads / kWarp;
constexpr int kGemmBlockM = 16;               // rows (token, slot) pairs per tile; the alignment block
constexpr int kGemmBlockN = 32;               // output columns per tile
constexpr int kGemmBlockK = 32;               // reduction depth per shared-memory stage
constexpr int kGemmThreads = 256;
constexpr int kGemmOutPerThread = kGemmBlockM * kGemmBlockN / kGemmThreads;
constexpr int kCombineThreads = 256;

using vt::from_f32;
using vt::to_f32;

// Round through the model dtype: the reference rounds each matmul output to it.
template <typename T> __device__ __forceinline__ float round_to(float v) { return to_f32<T>(from_f32<T>(v)); }

__device__ __forceinline__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Route: fp32 softmax over each token's logits, then the top_k probabilities (larger first; on equal
// probabilities the lower expert index first, as a stable descending sort), optionally renormalised.
// logits: [tokens, experts]; weights: [tokens, top_k]; ids: [tokens, top_k]
template <typename TIn, typename TOut>
__global__ void route_kernel(const TIn* __restrict__ logits, TOut* __restrict__ weights, int64_t* __restrict__ ids,
                             int tokens, int experts, int top_k, int renormalize) {
  const int lane = threadIdx.x % kWarp;
  const int token = blockIdx.x * kRouteWarpsPerBlock + threadIdx.x / kWarp;
  if (token >= tokens) return;
  const TIn* row = logits + (int64_t)token * experts;
  float p[kRouteMaxExpertsPerLane];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRouteMaxExpertsPerLane; ++i) {
    const int e = lane + i * kWarp;
    p[i] = e < experts ? to_f32<TIn>(row[e]) : -INFINITY;
    mx = fmaxf(mx, p[i]);
  }
  mx = warp_max(mx);
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kRouteMaxExpertsPerLane; ++i) {
    const int e = lane + i * kWarp;
    p[i] = e < experts ? expf(p[i] - mx) : 0.f;
    sum += p[i];
  }
  sum = warp_sum(sum);
#pragma unroll
  for (int i = 0; i < kRouteMaxExpertsPerLane; ++i) p[i] = p[i] / sum;

  float picked[kMaxTopK];
  int picked_id[kMaxTopK];
  float picked_sum = 0.f;
  for (int k = 0; k < top_k; ++k) {
    // Lane-local best (lowest index on ties: i ascends, so a later equal value never wins).
    float best = -1.f;
    int best_e = experts;
#pragma unroll
    for (int i = 0; i < kRouteMaxExpertsPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e < experts && p[i] > best) { best = p[i]; best_e = e; }
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ov > best || (ov == best && oe < best_e)) { best = ov; best_e = oe; }
    }
    picked[k] = best;
    picked_id[k] = best_e;
    picked_sum += best;
    // Remove the winner from further rounds (probabilities are >= 0, so -1 never wins).
#pragma unroll
    for (int i = 0; i < kRouteMaxExpertsPerLane; ++i)
      if (lane + i * kWarp == best_e) p[i] = -1.f;
  }
  if (lane == 0) {
    for (int k = 0; k < top_k; ++k) {
      const float w = renormalize ? picked[k] / picked_sum : picked[k];
      weights[(int64_t)token * top_k + k] = from_f32<TOut>(w);
      ids[(int64_t)token * top_k + k] = picked_id[k];
    }
  }
}

// Align: group the flat (token, slot) indices by expert, in ascending order within each expert, each
// expert's segment padded to a multiple of block_m with the sentinel `numel` (= tokens * top_k).
// ids: [numel]; sorted_ids: [capacity]; block_expert: [capacity / block_m]; offsets: [experts + 1]
// Ids outside [0, experts) belong to no local expert and are skipped.
__global__ void align_kernel(const int64_t* __restrict__ ids, int32_t* __restrict__ sorted_ids,
                             int32_t* __restrict__ block_expert, int32_t* __restrict__ offsets, int numel,
                             int experts, int block_m, int capacity) {
  extern __shared__ int32_t smem[];
  int32_t* count = smem;                   // [experts]
  int32_t* start = count + experts;        // [experts + 1]
  int32_t* warp_count = start + experts + 1;  // [kAlignWarps][experts]
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  for (int e = tid; e < experts; e += kAlignThreads) count[e] = 0;
  for (int i = tid; i < kAlignWarps * experts; i += kAlignThreads) warp_count[i] = 0;
  __syncthreads();
  for (int i = tid; i < numel; i += kAlignThreads) {
    const int64_t e = ids[i];
    if (e >= 0 && e < experts) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (tid == 0) {
    int acc = 0;
    for (int e = 0; e < experts; ++e) {
      start[e] = acc;
      acc += (count[e] + block_m - 1) / block_m * block_m;
    }
    start[experts] = acc;
  }
  __syncthreads();
  const int total = start[experts];
  for (int e = tid; e <= experts; e += kAlignThreads) offsets[e] = start[e];
  for (int i = tid; i < capacity; i += kAlignThreads) sorted_ids[i] = numel;
  for (int b = tid; b < capacity / block_m; b += kAlignThreads) {
    // Blocks past the last expert's segment carry -1: no work.
    int owner = -1;
    if (b * block_m < total) {
      int lo = 0, hi = experts - 1;  // the last expert whose start <= b * block_m
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (start[mid] <= b * block_m) lo = mid; else hi = mid - 1;
      }
      owner = lo;
    }
    block_expert[b] = owner;
  }
  for (int e = tid; e < experts; e += kAlignThreads) count[e] = 0;  // reused as the running fill
  __syncthreads();
  // Stable placement, one tile of kAlignThreads indices at a time: the rank of an index is its expert's
  // running fill, plus the same-expert indices of earlier warps in the tile, plus earlier lanes in its warp.
  for (int base = 0; base < numel; base += kAlignThreads) {
    const int i = base + tid;
    const int64_t id = i < numel ? ids[i] : -1;
    const bool valid = id >= 0 && id < experts;
    const int e = valid ? (int)id : -1;
    const unsigned same = __match_any_sync(0xffffffffu, valid ? e : -1);
    const int rank = __popc(same & ((1u << lane) - 1u));
    if (valid && rank == 0) warp_count[warp * experts + e] = __popc(same);
    __syncthreads();
    if (valid) {
      int pos = start[e] + count[e] + rank;
      for (int w = 0; w < warp; ++w) pos += warp_count[w * experts + e];
      sorted_ids[pos] = i;
    }
    __syncthreads();
    for (int x = tid; x < experts; x += kAlignThreads) {
      for (int w = 0; w < kAlignWarps; ++w) {
        count[x] += warp_count[w * experts + x];
        warp_count[w * experts + x] = 0;
      }
    }
    __syncthreads();
  }
}

// Grouped GEMM over the aligned rows. Tile (m, n): rows sorted_ids[m*BM .. +BM) all of expert
// block_expert[m]; fp32 accumulation, outputs rounded to T where the reference rounds its matmul outputs.
// kGateUp: a = x[token] ([H]), w = gate_up[e] ([2I, H]); out = act[flat] ([I]) = silu(gate) * up.
// else:    a = act[flat] ([I]), w = down[e] ([H, I]); out = y[flat] ([H]).
template <typename T, bool kGateUp>
__global__ void grouped_gemm_kernel(const T* __restrict__ a, const T* __restrict__ w, void* __restrict__ out,
                                    const int32_t* __restrict__ sorted_ids, const int32_t* __restrict__ block_expert,
                                    int numel, int top_k, int n_out, int k_dim) {
  const int expert = block_expert[blockIdx.x];
  if (expert < 0) return;
  constexpr int kWRows = kGateUp ? 2 * kGemmBlockN : kGemmBlockN;
  __shared__ float sa[kGemmBlockM][kGemmBlockK + 1];
  __shared__ float sw[kWRows][kGemmBlockK + 1];
  __shared__ int32_t rows[kGemmBlockM];
  const int tid = threadIdx.x;
  const int n0 = blockIdx.y * kGemmBlockN;
  if (tid < kGemmBlockM) rows[tid] = sorted_ids[blockIdx.x * kGemmBlockM + tid];
  __syncthreads();
  const int64_t w_rows = kGateUp ? 2 * (int64_t)n_out : n_out;
  const T* we = w + (int64_t)expert * w_rows * k_dim;

  float acc[kGemmOutPerThread], acc_up[kGemmOutPerThread];
#pragma unroll
  for (int j = 0; j < kGemmOutPerThread; ++j) acc[j] = acc_up[j] = 0.f;
  // Thread tid owns column c = tid % BN of rows r = tid / BN + j * (threads / BN).
  const int c = tid % kGemmBlockN;
  const int r0 = tid / kGemmBlockN;
  constexpr int kRowStep = kGemmThreads / kGemmBlockN;

  for (int k0 = 0; k0 < k_dim; k0 += kGemmBlockK) {
    for (int i = tid; i < kGemmBlockM * kGemmBlockK; i += kGemmThreads) {
      const int r = i / kGemmBlockK, kk = i % kGemmBlockK;
      const int flat = rows[r];
      float v = 0.f;
      if (flat < numel && k0 + kk < k_dim) {
        const int64_t arow = kGateUp ? flat / top_k : flat;
        v = to_f32<T>(a[arow * k_dim + k0 + kk]);
      }
      sa[r][kk] = v;
    }
    for (int i = tid; i < kWRows * kGemmBlockK; i += kGemmThreads) {
      const int r = i / kGemmBlockK, kk = i % kGemmBlockK;
      // Gate rows n0.. in the first half of the tile, the matching up rows n_out + n0.. in the second.
      const int n = (kGateUp && r >= kGemmBlockN) ? n_out + n0 + r - kGemmBlockN : n0 + r;
      const bool in = (kGateUp ? (n0 + r % kGemmBlockN) : n) < n_out && k0 + kk < k_dim;
      sw[r][kk] = in ? to_f32<T>(we[(int64_t)n * k_dim + k0 + kk]) : 0.f;
    }
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < kGemmBlockK; ++kk) {
      const float wg = sw[c][kk];
      const float wu = kGateUp ? sw[c + kGemmBlockN][kk] : 0.f;
#pragma unroll
      for (int j = 0; j < kGemmOutPerThread; ++j) {
        const float av = sa[r0 + j * kRowStep][kk];
        acc[j] = fmaf(av, wg, acc[j]);
        if (kGateUp) acc_up[j] = fmaf(av, wu, acc_up[j]);
      }
    }
    __syncthreads();
  }
  const int n = n0 + c;
  if (n >= n_out) return;
#pragma unroll
  for (int j = 0; j < kGemmOutPerThread; ++j) {
    const int flat = rows[r0 + j * kRowStep];
    if (flat >= numel) continue;
    if (kGateUp) {
      const float g = round_to<T>(acc[j]), u = round_to<T>(acc_up[j]);
      const float s = round_to<T>(g / (1.f + expf(-g)));  // silu, rounded as the reference's silu output
      static_cast<T*>(out)[(int64_t)flat * n_out + n] = from_f32<T>(s * u);
    } else {
      static_cast<T*>(out)[(int64_t)flat * n_out + n] = from_f32<T>(acc[j]);
    }
  }
}

// Combine, in the reference's order and rounding: a token's slots in ascending expert id, each term
// round(y * w) added to the running sum and the sum rounded to T after every add.
// y: [tokens * top_k, hidden] (T-rounded down outputs); weights, ids: [tokens, top_k]; out: [tokens, hidden]
template <typename T, typename TOut>
__global__ void combine_kernel(const T* __restrict__ y, const T* __restrict__ weights, const int64_t* __restrict__ ids,
                               TOut* __restrict__ out, int top_k, int hidden, int experts) {
  __shared__ int order[kMaxTopK];
  __shared__ int used;
  const int64_t t = blockIdx.x;
  if (threadIdx.x == 0) {
    // Selection of the slots by ascending expert id; ids outside [0, experts) are not routed here.
    int n = 0;
    int64_t prev = -1;
    for (int r = 0; r < top_k; ++r) {
      int best = -1;
      for (int k = 0; k < top_k; ++k) {
        const int64_t e = ids[t * top_k + k];
        if (e > prev && e < experts && (best < 0 || e < ids[t * top_k + best])) best = k;
      }
      if (best < 0) break;
      order[n++] = best;
      prev = ids[t * top_k + best];
    }
    used = n;
  }
  __syncthreads();
  for (int h = threadIdx.x; h < hidden; h += kCombineThreads) {
    float acc = 0.f;
    for (int j = 0; j < used; ++j) {
      const int64_t row = t * top_k + order[j];
      const float term = round_to<T>(to_f32<T>(y[row * hidden + h]) * to_f32<T>(weights[row]));
      acc = round_to<T>(acc + term);
    }
    out[t * hidden + h] = from_f32<TOut>(acc);
  }
}

}  // namespace vt_moe
