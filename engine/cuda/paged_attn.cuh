// Paged decode attention kernels on raw pointers: a generic block kernel and a warp-split-KV core
// (templated on elements per lane and query heads per KV row) shared by the warp arm (head_dim 128) and the
// split-KV group swap, both by-name arms of the kernel table.
#pragma once

#include <math_constants.h>

#include "common.cuh"

namespace vt {

constexpr int kWarp = 32;
constexpr int kDecodeWarps = 4;                    // warps per block in the warp-split-KV core
constexpr int kDecodeThreads = kDecodeWarps * kWarp;
constexpr int kGenericThreads = 128;               // threads per block in the generic kernel
constexpr int kGenericMaxHeadDim = 256;

// Layouts (elements): q/out [batch, num_q_heads, head_dim]; caches [num_blocks, block_size,
// num_kv_heads, head_dim]; block_tables [batch, max_blocks] int32; context_lens [batch] int32.
struct PagedArgs {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  const int* block_tables;
  const int* context_lens;
  int num_q_heads, num_kv_heads, head_dim, block_size, max_blocks;
  float scale;
  int window;  // 0: full context; else attend to the last `window` positions
};

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Load N consecutive elements as fp32 with the widest aligned loads (16 bytes when N*sizeof(T) allows).
template <typename T, int N>
__device__ __forceinline__ void load_f32(const T* __restrict__ p, float (&out)[N]) {
  constexpr int kBytes = N * sizeof(T);
  if constexpr (kBytes % 16 == 0) {
    constexpr int per = 16 / sizeof(T);
#pragma unroll
    for (int c = 0; c < N / per; ++c) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + c);
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < per; ++i) out[c * per + i] = to_f32<T>(e[i]);
    }
  } else if constexpr (kBytes == 8) {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_f32<T>(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_f32<T>(p[i]);
  }
}

__device__ __forceinline__ int window_begin(int len, int window) {
  return (window > 0 && len > window) ? len - window : 0;
}

// ---------------------------------------------------------------------------------------------
// Generic block kernel: grid (num_q_heads, batch), the reference's rounding points in order.
// Pass 1: one warp per token, lanes over head_dim: logit = T(T(q.k) * scale) into the fp32 workspace
// row, block max. Pass 2: block sum of exp(logit - max). Pass 3: probabilities T(exp(..)/sum) in
// place. Pass 4: each thread owns output dims and accumulates p*v in fp32 in token order.
template <typename T>
__device__ __forceinline__ float round_to(float x) { return to_f32<T>(from_f32<T>(x)); }

__device__ __forceinline__ float block_reduce(float x, float* red_s, bool is_max) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nwarps = blockDim.x / kWarp;
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, o);
    x = is_max ? fmaxf(x, y) : x + y;
  }
  __syncthreads();  // red_s may still be read from the previous reduction
  if (lane == 0) red_s[warp] = x;
  __syncthreads();
  x = red_s[0];
  for (int w = 1; w < nwarps; ++w) x = is_max ? fmaxf(x, red_s[w]) : x + red_s[w];
  return x;
}

// ws: [batch, num_q_heads, ws_stride] fp32 scratch (ws_stride >= every context length).
template <typename T>
__global__ void __launch_bounds__(kGenericThreads)
    decode_generic_kernel(PagedArgs a, T* __restrict__ out, float* __restrict__ ws, int ws_stride) {
  __shared__ float q_s[kGenericMaxHeadDim];
  __shared__ float red_s[kGenericThreads / kWarp];
  const int h = blockIdx.x, b = blockIdx.y, tid = threadIdx.x;
  const int warp = tid / kWarp, lane = tid % kWarp, nwarps = kGenericThreads / kWarp;
  const int hd = a.head_dim, kvh = h / (a.num_q_heads / a.num_kv_heads);
  const T* q = static_cast<const T*>(a.q) + ((int64_t)b * a.num_q_heads + h) * hd;
  for (int d = tid; d < hd; d += kGenericThreads) q_s[d] = to_f32<T>(q[d]);
  const int len = a.context_lens[b];
  const int begin = window_begin(len, a.window);
  const int* table = a.block_tables + (int64_t)b * a.max_blocks;
  const int64_t row_stride = (int64_t)a.num_kv_heads * hd;
  const T* kc = static_cast<const T*>(a.k_cache) + (int64_t)kvh * hd;
  const T* vc = static_cast<const T*>(a.v_cache) + (int64_t)kvh * hd;
  float* logits = ws + ((int64_t)b * a.num_q_heads + h) * ws_stride;
  __syncthreads();
  float mx = -CUDART_INF_F;
  for (int t = begin + warp; t < len; t += nwarps) {
    const T* k = kc + ((int64_t)table[t / a.block_size] * a.block_size + t % a.block_size) * row_stride;
    float dot = 0.f;
    for (int d = lane; d < hd; d += kWarp) dot += q_s[d] * to_f32<T>(k[d]);
    const float x = round_to<T>(round_to<T>(warp_sum(dot)) * a.scale);
    if (lane == 0) logits[t] = x;
    mx = fmaxf(mx, x);
  }
  mx = block_reduce(mx, red_s, true);  // its barriers also publish the logits to the block
  float sum = 0.f;
  for (int t = begin + tid; t < len; t += kGenericThreads) sum += expf(logits[t] - mx);
  sum = block_reduce(sum, red_s, false);
  for (int t = begin + tid; t < len; t += kGenericThreads) logits[t] = round_to<T>(expf(logits[t] - mx) / sum);
  __syncthreads();
  T* o = out + ((int64_t)b * a.num_q_heads + h) * hd;
  for (int d = tid; d < hd; d += kGenericThreads) {
    float acc = 0.f;
    for (int t = begin; t < len; ++t) {
      const T* v = vc + ((int64_t)table[t / a.block_size] * a.block_size + t % a.block_size) * row_stride;
      acc += logits[t] * to_f32<T>(v[d]);
    }
    o[d] = from_f32<T>(acc);
  }
}

// ---------------------------------------------------------------------------------------------
// Warp-split-KV core: the block's warps take interleaved tokens of [begin, end); each lane holds
// EPL consecutive elements of head_dim (head_dim == 32*EPL), and GROUP query heads share each K/V
// row loaded (GROUP 1: one query head per block; GROUP = q/kv ratio: the split-KV group swap).
// The warps' online-softmax states are merged in smem; the result is written either final
// (normalized, cast to T) or as a split-KV partial (fp32 normalized output and its log-sum-exp).
template <int EPL, int GROUP>
struct MergeSmem {
  float m[kDecodeWarps][GROUP];
  float l[kDecodeWarps][GROUP];
  float acc[kDecodeWarps][GROUP][kWarp * EPL];
};

// q_row: the first of GROUP consecutive query heads. kRound: round q.k and its scaling to T as the
// eager reference does (the paged arms); off: fp32 scores (the split-KV reference).
template <typename T, int EPL, int GROUP, bool kRound>
__device__ __forceinline__ void warp_core(const PagedArgs& a, int b, const T* __restrict__ q_row, int kv_head,
                                          int begin, int end, MergeSmem<EPL, GROUP>& sm) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int hd = kWarp * EPL;
  float q[GROUP][EPL], acc[GROUP][EPL], m[GROUP], l[GROUP];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    load_f32<T, EPL>(q_row + g * hd + lane * EPL, q[g]);
    m[g] = -CUDART_INF_F;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < EPL; ++e) acc[g][e] = 0.f;
  }
  const int* table = a.block_tables + (int64_t)b * a.max_blocks;
  const int64_t row_stride = (int64_t)a.num_kv_heads * hd;
  const T* kc = static_cast<const T*>(a.k_cache) + (int64_t)kv_head * hd + lane * EPL;
  const T* vc = static_cast<const T*>(a.v_cache) + (int64_t)kv_head * hd + lane * EPL;
  for (int t = begin + warp; t < end; t += kDecodeWarps) {
    const int64_t row = ((int64_t)table[t / a.block_size] * a.block_size + t % a.block_size) * row_stride;
    float k[EPL], v[EPL];
    load_f32<T, EPL>(kc + row, k);
    load_f32<T, EPL>(vc + row, v);
    float s[GROUP];
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      s[g] = 0.f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) s[g] += q[g][e] * k[e];
    }
#pragma unroll
    for (int o = kWarp / 2; o > 0; o >>= 1)  // the GROUP reductions interleaved for ILP
#pragma unroll
      for (int g = 0; g < GROUP; ++g) s[g] += __shfl_xor_sync(0xffffffffu, s[g], o);
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const float x = kRound ? round_to<T>(round_to<T>(s[g]) * a.scale) : s[g] * a.scale;
      const float m_new = fmaxf(m[g], x);
      const float corr = expf(m[g] - m_new), p = expf(x - m_new);
      l[g] = l[g] * corr + p;
#pragma unroll
      for (int e = 0; e < EPL; ++e) acc[g][e] = acc[g][e] * corr + p * v[e];
      m[g] = m_new;
    }
  }
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    if (lane == 0) {
      sm.m[warp][g] = m[g];
      sm.l[warp][g] = l[g];
    }
#pragma unroll
    for (int e = 0; e < EPL; ++e) sm.acc[warp][g][lane * EPL + e] = acc[g][e];
  }
  __syncthreads();
}

// Merge the warps' states for element `idx` of [GROUP, head_dim]: returns the normalized output and
// writes the log-sum-exp (-inf for an empty range).
template <int EPL, int GROUP>
__device__ __forceinline__ float merge_warps(const MergeSmem<EPL, GROUP>& sm, int idx, float* lse) {
  const int g = idx / (kWarp * EPL), d = idx % (kWarp * EPL);
  float mx = -CUDART_INF_F;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) mx = fmaxf(mx, sm.m[w][g]);
  if (mx == -CUDART_INF_F) {
    *lse = -CUDART_INF_F;
    return 0.f;
  }
  float l = 0.f, acc = 0.f;
#pragma unroll
  for (int w = 0; w < kDecodeWarps; ++w) {
    const float c = expf(sm.m[w][g] - mx);
    l += sm.l[w][g] * c;
    acc += sm.acc[w][g][d] * c;
  }
  *lse = mx + logf(l);
  return acc / l;
}

// The warp arm: GROUP 1, grid (num_q_heads, batch) (GROUP = ratio, grid (num_kv_heads, batch), was the GQA-fused
// arm, retired).
template <typename T, int EPL, int GROUP>
__global__ void __launch_bounds__(kDecodeThreads) decode_warp_kernel(PagedArgs a, T* __restrict__ out) {
  __shared__ MergeSmem<EPL, GROUP> sm;
  const int b = blockIdx.y, hd = kWarp * EPL;
  const int q_head = blockIdx.x * GROUP;  // first query head of this block
  const int kv_head = q_head / (a.num_q_heads / a.num_kv_heads);
  const int len = a.context_lens[b];
  const T* q = static_cast<const T*>(a.q) + ((int64_t)b * a.num_q_heads + q_head) * hd;
  warp_core<T, EPL, GROUP, true>(a, b, q, kv_head, window_begin(len, a.window), len, sm);
  T* o = out + ((int64_t)b * a.num_q_heads + q_head) * hd;
  for (int idx = threadIdx.x; idx < GROUP * hd; idx += kDecodeThreads) {
    float lse;
    o[idx] = from_f32<T>(merge_warps<EPL, GROUP>(sm, idx, &lse));
  }
}

}  // namespace vt
