// Gated delta net on raw pointers, state in fp32: the decode step (one token: the per-head recurrent state update
// and readout). The chunked prefill kernel lost its A/B (0.567x) and was retired: the prefill runs its reference.
#pragma once

#include "common.cuh"

namespace vt_gdn {

using vt::from_f32;
using vt::to_f32;

// Tuning parameters, declared once.
constexpr int kWarp = 32;
constexpr int kVTile = 32;   // value columns per block, one per lane
constexpr int kKSplit = 8;   // warps splitting the key dimension; partial dot products summed in shared memory
constexpr int kMaxKDim = 256;
constexpr int kRowsPerThread = kMaxKDim / kKSplit;

// Sum of the kKSplit partials of column threadIdx.x, in warp order (the same order for every column).
__device__ __forceinline__ float column_sum(float (&part)[kKSplit][kVTile], float mine) {
  part[threadIdx.y][threadIdx.x] = mine;
  __syncthreads();
  float s = 0.f;
#pragma unroll
  for (int w = 0; w < kKSplit; ++w) s += part[w][threadIdx.x];
  __syncthreads();
  return s;
}

// One decode step for (batch b, value head h, value columns tile*kVTile ..):
//   S = S * exp(g);  kv = k^T S;  delta = (v - kv) * beta;  S = S + k delta^T;  o = (q * scale)^T S
// with q and k optionally l2-normalised first (x * rsqrt(sum x^2 + eps)). Value head h reads key head
// h / (heads / k_heads). Products and sums are separate fp32 roundings, as the reference's tensor ops.
// q, k: [batch, k_heads, k_dim]; v: [batch, heads, v_dim]; g, beta: [batch, heads] fp32;
// state, new_state: [batch, heads, k_dim, v_dim] fp32 (the same buffer updates in place; each element is
// read before it is written, by the same thread); out: [batch, heads, v_dim]
template <typename T, typename TOut>
__global__ void gdn_decode_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  const float* __restrict__ g, const float* __restrict__ beta, const float* state,
                                  float* new_state, TOut* __restrict__ out, int heads, int k_heads, int k_dim,
                                  int v_dim, float scale, int l2norm, float eps) {
  __shared__ float sq[kMaxKDim], sk[kMaxKDim];
  __shared__ float part[kKSplit][kVTile];
  __shared__ float norms[2];
  const int bh = blockIdx.y;  // b * heads + h
  const int b = bh / heads, h = bh % heads;
  const int64_t kh = (int64_t)b * k_heads + h / (heads / k_heads);
  const int tid = threadIdx.y * kVTile + threadIdx.x;
  for (int i = tid; i < k_dim; i += kVTile * kKSplit) {
    sq[i] = to_f32<T>(q[kh * k_dim + i]);
    sk[i] = to_f32<T>(k[kh * k_dim + i]);
  }
  __syncthreads();
  if (l2norm) {
    if (threadIdx.y < 2) {  // warp 0 normalises q, warp 1 k
      const float* x = threadIdx.y == 0 ? sq : sk;
      float ss = 0.f;
      for (int i = threadIdx.x; i < k_dim; i += kWarp) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
      for (int o = kWarp / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (threadIdx.x == 0) norms[threadIdx.y] = rsqrtf(ss + eps);
    }
    __syncthreads();
    for (int i = tid; i < k_dim; i += kVTile * kKSplit) {
      sq[i] = __fmul_rn(sq[i], norms[0]);
      sk[i] = __fmul_rn(sk[i], norms[1]);
    }
    __syncthreads();
  }
  const int j = blockIdx.x * kVTile + threadIdx.x;
  const bool col = j < v_dim;
  const float decay = expf(g[bh]);
  const float bt = beta[bh];
  const float* sp = state + (int64_t)bh * k_dim * v_dim;
  float* np = new_state + (int64_t)bh * k_dim * v_dim;

  float s[kRowsPerThread];
  float kv = 0.f;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = threadIdx.y + r * kKSplit;
    s[r] = 0.f;
    if (col && i < k_dim) {
      s[r] = __fmul_rn(sp[(int64_t)i * v_dim + j], decay);
      kv = __fadd_rn(kv, __fmul_rn(s[r], sk[i]));
    }
  }
  kv = column_sum(part, kv);
  const float delta = col ? __fmul_rn(__fsub_rn(to_f32<T>(v[(int64_t)bh * v_dim + j]), kv), bt) : 0.f;
  float o = 0.f;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = threadIdx.y + r * kKSplit;
    if (col && i < k_dim) {
      s[r] = __fadd_rn(s[r], __fmul_rn(sk[i], delta));
      np[(int64_t)i * v_dim + j] = s[r];
      o = __fadd_rn(o, __fmul_rn(s[r], __fmul_rn(sq[i], scale)));
    }
  }
  o = column_sum(part, o);
  if (col && threadIdx.y == 0) out[(int64_t)bh * v_dim + j] = from_f32<TOut>(o);
}

}  // namespace vt_gdn
