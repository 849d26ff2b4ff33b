// Greedy argmax (two passes, torch.argmax's tie and NaN rules) and seeded top-k/top-p sampling, on raw pointers.
#pragma once
#include <cstdint>

#include "common.cuh"

namespace vt_sample {

constexpr int kWarpSize = 32;
constexpr int kArgmaxThreads = 256;       // per block, both passes
constexpr int kArgmaxItemsPerThread = 8;  // pass 1: each block covers kArgmaxThreads * kArgmaxItemsPerThread logits
constexpr int kArgmaxChunk = kArgmaxThreads * kArgmaxItemsPerThread;
constexpr int kSampleThreads = 1024;      // top-k/top-p: one block per row
constexpr int kRadixBits = 8;             // the thresholds are found by a radix select over 32-bit keys
constexpr int kRadixBins = 1 << kRadixBits;
constexpr int kRadixPasses = 32 / kRadixBits;
constexpr int kMassFractionBits = 32;     // probability mass in fixed point, so its sums are order-free

// torch.argmax's order on (value, index): NaN beats every number, the lower index wins among NaNs and among
// equal values (-0 == +0). It is a strict total order, so any reduction tree gives torch's answer.
__device__ __forceinline__ bool beats(float a, int ia, float b, int ib) {
  if (isnan(a)) return isnan(b) ? ia < ib : true;
  return a == b ? ia < ib : a > b;
}

__device__ __forceinline__ void warp_best(float& v, int& i) {
  for (int off = kWarpSize / 2; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oi = __shfl_xor_sync(0xffffffffu, i, off);
    if (beats(ov, oi, v, i)) v = ov, i = oi;
  }
}

// The block's best (value, index); every thread gets it. `Threads` is the block size.
template <int Threads>
__device__ __forceinline__ void block_best(float& v, int& i) {
  __shared__ float sv[Threads / kWarpSize];
  __shared__ int si[Threads / kWarpSize];
  warp_best(v, i);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  __syncthreads();  // the buffers may still be read by a previous call
  if (lane == 0) sv[warp] = v, si[warp] = i;
  __syncthreads();
  v = lane < Threads / kWarpSize ? sv[lane] : -INFINITY;
  i = lane < Threads / kWarpSize ? si[lane] : INT32_MAX;
  warp_best(v, i);
}

// Pass 1. logits: [batch, vocab] (row stride ld); part_val/part_idx: [batch, chunks] (chunks = gridDim.x)
template <typename T>
__global__ void argmax_partial_kernel(float* __restrict__ part_val, int* __restrict__ part_idx,
                                      const T* __restrict__ logits, int vocab, long long ld) {
  const T* row = logits + blockIdx.y * ld;
  float best = -INFINITY;
  int best_i = INT32_MAX;  // loses every tie, so an all -inf row still returns index 0
  const int base = blockIdx.x * kArgmaxChunk;
#pragma unroll
  for (int j = 0; j < kArgmaxItemsPerThread; ++j) {
    const int i = base + j * kArgmaxThreads + threadIdx.x;
    if (i < vocab) {
      const float v = vt::to_f32(row[i]);  // exact and order-preserving, NaN stays NaN
      if (beats(v, i, best, best_i)) best = v, best_i = i;
    }
  }
  block_best<kArgmaxThreads>(best, best_i);
  if (threadIdx.x == 0) {
    part_val[blockIdx.y * gridDim.x + blockIdx.x] = best;
    part_idx[blockIdx.y * gridDim.x + blockIdx.x] = best_i;
  }
}

// Pass 2. part_val/part_idx: [batch, chunks]; out: [batch] int64
__global__ void argmax_final_kernel(long long* __restrict__ out, const float* __restrict__ part_val,
                                    const int* __restrict__ part_idx, int chunks) {
  float best = -INFINITY;
  int best_i = INT32_MAX;
  for (int c = threadIdx.x; c < chunks; c += kArgmaxThreads) {
    const float v = part_val[blockIdx.x * chunks + c];
    const int i = part_idx[blockIdx.x * chunks + c];
    if (beats(v, i, best, best_i)) best = v, best_i = i;
  }
  block_best<kArgmaxThreads>(best, best_i);
  if (threadIdx.x == 0) out[blockIdx.x] = best_i;
}

// ---- top-k / top-p sampling ------------------------------------------------------------------------------

// Order-preserving 32-bit key of a float (larger float, larger key); NaN maps to 0, below every number.
__device__ __forceinline__ uint32_t order_key(float f) {
  if (isnan(f)) return 0u;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Counter-based uniform in (0, 1): a splitmix64 finalizer over (seed, row, index), so a draw depends only on
// its coordinates and never on scheduling.
__device__ __forceinline__ float uniform(uint64_t seed, uint64_t row, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (row + 1) + 0xd1b54a32d192ed03ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return (static_cast<float>(z >> 40) + 0.5f) * 0x1p-24f;
}

template <typename T>
__device__ __forceinline__ float logit_at(const T* row, int i) { return vt::to_f32(row[i]); }

// Radix-select weights: a count (top-k), or exp((v - max) / T) in fixed point (top-p mass, at most 2^32 each).
struct CountWeight {
  __device__ unsigned long long operator()(float) const { return 1ull; }
};
struct MassWeight {
  float max_logit, inv_temperature;
  __device__ unsigned long long operator()(float v) const {
    const float e = expf((v - max_logit) * inv_temperature);
    return e > 0.0f ? static_cast<unsigned long long>(ldexpf(e, kMassFractionBits)) : 0ull;  // NaN weighs nothing
  }
};

// The key K with: weight(keys >= K) >= target and weight(keys > K) < target, over keys >= floor_key, where
// weight is a count (top-k) or fixed-point probability mass (top-p). hist: kRadixBins shared counters.
template <typename T, typename Weight>
__device__ uint32_t radix_select(const T* row, int vocab, uint32_t floor_key, unsigned long long target,
                                 unsigned long long* hist, Weight weight) {
  __shared__ uint32_t chosen_prefix;
  __shared__ unsigned long long chosen_above;
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0;  // weight of keys above the current prefix group
  for (int pass = 0; pass < kRadixPasses; ++pass) {
    const int shift = 32 - kRadixBits * (pass + 1);
    for (int b = threadIdx.x; b < kRadixBins; b += kSampleThreads) hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kSampleThreads) {
      const float v = logit_at(row, i);
      const uint32_t key = order_key(v);
      if (key >= floor_key && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & (kRadixBins - 1)], weight(v));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long cum = above;
      int b = kRadixBins - 1;
      for (; b > 0 && cum + hist[b] < target; --b) cum += hist[b];
      chosen_prefix = prefix | (static_cast<uint32_t>(b) << shift);
      chosen_above = cum;
    }
    __syncthreads();
    prefix = chosen_prefix;
    above = chosen_above;
    mask |= static_cast<uint32_t>(kRadixBins - 1) << shift;
  }
  return prefix;
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float sm[kSampleThreads / kWarpSize];
  for (int off = kWarpSize / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  __syncthreads();
  if (threadIdx.x % kWarpSize == 0) sm[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  v = sm[0];
  for (int w = 1; w < kSampleThreads / kWarpSize; ++w) v = fmaxf(v, sm[w]);
  return v;
}

// One block per row. logits: [batch, vocab] (row stride ld); top_k: [batch] (<= 0 or >= vocab: off);
// top_p: [batch] (>= 1: off); temperature: [batch] (> 0); out: [batch] int64.
// The kept set is {key >= k-th largest key} then, over it, the smallest top set whose softmax mass (at the
// temperature) reaches top_p, ties at either cut kept. The token is the exponential-race (Gumbel-max) winner
// over the kept set: argmax of logit / T - log(-log(u)), which draws from the renormalized softmax.
template <typename T>
__global__ void top_k_top_p_kernel(long long* __restrict__ out, const T* __restrict__ logits, int vocab, long long ld,
                                   const int* __restrict__ top_k, const float* __restrict__ top_p,
                                   const float* __restrict__ temperature, uint64_t seed) {
  __shared__ unsigned long long hist[kRadixBins];
  const int r = blockIdx.x;
  const T* row = logits + r * ld;
  const float inv_t = 1.0f / temperature[r];
  uint32_t keep = 0;  // every key >= keep is kept
  const int k = top_k[r];
  if (k > 0 && k < vocab) keep = radix_select(row, vocab, 0u, static_cast<unsigned long long>(k), hist, CountWeight{});
  float m = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kSampleThreads) m = fmaxf(m, logit_at(row, i));
  m = block_max(m);
  const float p = top_p[r];
  if (p < 1.0f) {
    const MassWeight mass{m, inv_t};
    for (int b = threadIdx.x; b < kRadixBins; b += kSampleThreads) hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kSampleThreads) {
      const float v = logit_at(row, i);
      if (order_key(v) >= keep) atomicAdd(&hist[0], mass(v));
    }
    __syncthreads();
    const unsigned long long total = hist[0];
    const double want = ceil(static_cast<double>(p) * static_cast<double>(total));
    const unsigned long long target = want < 1.0 ? 1ull : static_cast<unsigned long long>(want);
    __syncthreads();
    keep = radix_select(row, vocab, keep, target, hist, mass);
  }
  float best = -INFINITY;
  int best_i = INT32_MAX;
  for (int i = threadIdx.x; i < vocab; i += kSampleThreads) {
    const float v = logit_at(row, i);
    if (order_key(v) < keep) continue;
    const float score = (v - m) * inv_t - logf(-logf(uniform(seed, r, i)));
    if (beats(score, i, best, best_i)) best = score, best_i = i;
  }
  block_best<kSampleThreads>(best, best_i);
  if (threadIdx.x == 0) out[r] = best_i;
}

}  // namespace vt_sample
