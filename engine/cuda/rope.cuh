// Neox RoPE and Qwen3's per-head q/k RMSNorm fused with it, on raw pointers, rounding where the reference rounds.
#pragma once
#include "common.cuh"

namespace vt_rope {

constexpr int kRopeThreads = 256;     // plain RoPE: one thread per rotated pair
constexpr int kWarpsPerBlock = 4;     // fused: one warp per (token, head) row
constexpr int kWarpSize = 32;
constexpr int kMaxPairsPerLane = 8;   // fused: head_dim up to 2 * 32 * 8 = 512 held in registers

// One rotated pair (x1 at i, x2 at i + half) with the reference's rounding in T: each product is rounded
// to T, then the sum is rounded to T. rotate_half negates x2 before the multiply (exact), as torch does.
template <typename T>
__device__ __forceinline__ void rotate_pair(float x1, float x2, float c1, float s1, float c2, float s2, T& o1, T& o2) {
  const float a1 = vt::to_f32(vt::from_f32<T>(__fmul_rn(x1, c1)));
  const float b1 = vt::to_f32(vt::from_f32<T>(__fmul_rn(-x2, s1)));
  const float a2 = vt::to_f32(vt::from_f32<T>(__fmul_rn(x2, c2)));
  const float b2 = vt::to_f32(vt::from_f32<T>(__fmul_rn(x1, s2)));
  o1 = vt::from_f32<T>(__fadd_rn(a1, b1));
  o2 = vt::from_f32<T>(__fadd_rn(a2, b2));
}

// x: [tokens, heads, head_dim] (strides x_tok, x_head; last dim contiguous), cos/sin: [tokens, head_dim]
// (contiguous, T), out: [tokens, heads, head_dim] (contiguous)
template <typename T>
__global__ void rope_neox_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ cos,
                                 const T* __restrict__ sin, long long tokens, int heads, int head_dim,
                                 long long x_tok, long long x_head) {
  const int half = head_dim / 2;
  const long long pair = static_cast<long long>(blockIdx.x) * kRopeThreads + threadIdx.x;
  if (pair >= tokens * heads * half) return;
  const int i = static_cast<int>(pair % half);
  const long long row = pair / half;  // token * heads + head
  const long long t = row / heads;
  const int h = static_cast<int>(row % heads);
  const T* src = x + t * x_tok + h * x_head;
  const T* ct = cos + t * head_dim;
  const T* st = sin + t * head_dim;
  T* dst = out + row * head_dim;
  rotate_pair<T>(vt::to_f32(src[i]), vt::to_f32(src[i + half]), vt::to_f32(ct[i]), vt::to_f32(st[i]),
                 vt::to_f32(ct[i + half]), vt::to_f32(st[i + half]), dst[i], dst[i + half]);
}

// Warp-wide sum in a fixed butterfly, so a row's result never depends on scheduling.
__device__ __forceinline__ float warp_sum(float v) {
  for (int off = kWarpSize / 2; off > 0; off >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// qk_norm then RoPE of one head row by one warp. The norm rounds as rms_norm does (fp32 statistics, round to T,
// weight multiply rounded to T); only the order of the fp32 sum of squares differs from torch's.
// src: [head_dim], weight: [head_dim], ct/st: this token's cos/sin [head_dim]; the result goes to dst and, when
// not null, to dst2 as well (the KV cache slot of a k row).
template <typename T>
__device__ __forceinline__ void norm_rope_row(const T* __restrict__ src, const T* __restrict__ weight,
                                              const T* __restrict__ ct, const T* __restrict__ st, int head_dim,
                                              float mean_scale, float eps, T* __restrict__ dst, T* dst2) {
  const int lane = threadIdx.x % kWarpSize;
  const int half = head_dim / 2;
  float x1[kMaxPairsPerLane], x2[kMaxPairsPerLane];
  float sum_sq = 0.0f;
#pragma unroll
  for (int p = 0; p < kMaxPairsPerLane; ++p) {
    const int i = lane + p * kWarpSize;
    x1[p] = i < half ? vt::to_f32(src[i]) : 0.0f;
    x2[p] = i < half ? vt::to_f32(src[i + half]) : 0.0f;
    sum_sq = __fadd_rn(sum_sq, __fadd_rn(__fmul_rn(x1[p], x1[p]), __fmul_rn(x2[p], x2[p])));
  }
  const float scale = rsqrtf(__fadd_rn(__fmul_rn(warp_sum(sum_sq), mean_scale), eps));
#pragma unroll
  for (int p = 0; p < kMaxPairsPerLane; ++p) {
    const int i = lane + p * kWarpSize;
    if (i >= half) break;
    const T n1 = vt::from_f32<T>(__fmul_rn(x1[p], scale));
    const T n2 = vt::from_f32<T>(__fmul_rn(x2[p], scale));
    const float y1 = vt::to_f32(vt::from_f32<T>(__fmul_rn(vt::to_f32(weight[i]), vt::to_f32(n1))));
    const float y2 = vt::to_f32(vt::from_f32<T>(__fmul_rn(vt::to_f32(weight[i + half]), vt::to_f32(n2))));
    T o1, o2;
    rotate_pair<T>(y1, y2, vt::to_f32(ct[i]), vt::to_f32(st[i]), vt::to_f32(ct[i + half]), vt::to_f32(st[i + half]),
                   o1, o2);
    dst[i] = o1;
    dst[i + half] = o2;
    if (dst2 != nullptr) {
      dst2[i] = o1;
      dst2[i + half] = o2;
    }
  }
}

// qk_norm then RoPE on one (token, head) row per warp.
// x: [tokens, heads, head_dim] (strides x_tok, x_head), weight: [head_dim], cos/sin: [tokens, head_dim],
// out: [tokens, heads, head_dim] (contiguous)
template <typename T>
__global__ void qk_norm_rope_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                                    const T* __restrict__ cos, const T* __restrict__ sin, long long tokens, int heads,
                                    int head_dim, long long x_tok, long long x_head, float mean_scale,
                                    float eps) {
  const long long row = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= tokens * heads) return;  // whole warps exit together, so the shuffles below stay full-warp
  const long long t = row / heads;
  const int h = static_cast<int>(row % heads);
  norm_rope_row<T>(x + t * x_tok + h * x_head, weight, cos + t * head_dim, sin + t * head_dim, head_dim, mean_scale,
                   eps, out + row * head_dim, nullptr);
}

// What the one-launch q/k norm + RoPE + KV store reads and writes. q, k, v: [tokens, heads, head_dim] with their
// own (token, head) strides (views of one merged q/k/v row); q_out, k_out: contiguous; caches: [blocks,
// block_size, kv_heads, head_dim] contiguous; slots: [tokens] int64, -1 skips the token's cache writes.
struct QkvArgs {
  void* q_out;
  void* k_out;
  void* k_cache;
  void* v_cache;
  const void* q;
  const void* k;
  const void* v;
  const void* q_weight;
  const void* k_weight;
  const void* cos;
  const void* sin;
  const long long* slots;
  long long tokens;
  int heads, kv_heads, head_dim;
  long long q_tok, q_head, k_tok, k_head, v_tok, v_head;
  float q_mean_scale, k_mean_scale, eps;
};

// One warp per (token, row) over heads + 2 * kv_heads rows per token: a q head is normed and rotated into q_out;
// a k head into k_out and its cache slot; a v head is copied to its cache slot. Each q and k row is computed as
// qk_norm_rope_kernel computes it (norm_rope_row), and the cache gets the bits k_out gets.
template <typename T>
__global__ void qkv_norm_rope_store_kernel(QkvArgs a) {
  const int per_token = a.heads + 2 * a.kv_heads;
  const long long row = static_cast<long long>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= a.tokens * per_token) return;  // whole warps exit together
  const long long t = row / per_token;
  const int h = static_cast<int>(row % per_token);
  const int d = a.head_dim;
  const long long slot = a.slots[t];
  const T* ct = static_cast<const T*>(a.cos) + t * d;
  const T* st = static_cast<const T*>(a.sin) + t * d;
  if (h < a.heads) {
    norm_rope_row<T>(static_cast<const T*>(a.q) + t * a.q_tok + h * a.q_head, static_cast<const T*>(a.q_weight), ct,
                     st, d, a.q_mean_scale, a.eps, static_cast<T*>(a.q_out) + (t * a.heads + h) * d, nullptr);
    return;
  }
  const int kh = h < a.heads + a.kv_heads ? h - a.heads : h - a.heads - a.kv_heads;
  const long long cache_row = (slot * a.kv_heads + kh) * d;
  if (h < a.heads + a.kv_heads) {
    T* cached = slot >= 0 ? static_cast<T*>(a.k_cache) + cache_row : nullptr;
    norm_rope_row<T>(static_cast<const T*>(a.k) + t * a.k_tok + kh * a.k_head, static_cast<const T*>(a.k_weight), ct,
                     st, d, a.k_mean_scale, a.eps, static_cast<T*>(a.k_out) + (t * a.kv_heads + kh) * d, cached);
    return;
  }
  if (slot < 0) return;
  const T* src = static_cast<const T*>(a.v) + t * a.v_tok + kh * a.v_head;
  T* dst = static_cast<T*>(a.v_cache) + cache_row;
  for (int i = threadIdx.x % kWarpSize; i < d; i += kWarpSize) dst[i] = src[i];
}

}  // namespace vt_rope
