// Dtype-faithful GEMV for M=1 decode, y = W x (+ bias): fp32 accumulation, output type chosen by the caller.
#pragma once
#include "common.cuh"

namespace vt_gemv {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;      // one output row per warp, so a block writes 8 rows
constexpr int kVectorBytes = 16;       // one 16-byte load per lane per step on the fast path
constexpr int kUnroll = 4;             // independent 16-byte loads of W in flight per lane

// VEC elements of T per load: kVectorBytes / sizeof(T) on the fast path, 1 on the unaligned path.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// W: [N, K] row-major (row stride ldw), x: [M, K] (row stride ldx), bias: [N] or null, y: [M, N] (row stride ldy).
// grid: (ceil(N / kWarpsPerBlock), M). Each lane accumulates in fp32, the warp reduces in a fixed butterfly,
// lane 0 adds the bias and writes OutT: the only rounding.
template <typename T, typename OutT, int VEC>
__global__ void gemv_kernel(OutT* __restrict__ y, const T* __restrict__ w, const T* __restrict__ x,
                            const T* __restrict__ bias, int n, int k, long long ldw, long long ldx, long long ldy) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n) return;  // whole warps exit together
  const int lane = threadIdx.x % kWarpSize;
  const T* wrow = w + row * ldw;
  const T* xrow = x + blockIdx.y * ldx;
  constexpr int kStep = kWarpSize * VEC;
  float acc = 0.0f;
  int base = lane * VEC;
  for (; base + (kUnroll - 1) * kStep < k; base += kUnroll * kStep) {
    Pack<T, VEC> wp[kUnroll], xp[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      wp[u] = *reinterpret_cast<const Pack<T, VEC>*>(wrow + base + u * kStep);
      xp[u] = *reinterpret_cast<const Pack<T, VEC>*>(xrow + base + u * kStep);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc = fmaf(vt::to_f32(wp[u].v[e]), vt::to_f32(xp[u].v[e]), acc);
  }
  for (; base < k; base += kStep) {  // the tail: fewer than kUnroll steps left
    const Pack<T, VEC> wp = *reinterpret_cast<const Pack<T, VEC>*>(wrow + base);
    const Pack<T, VEC> xp = *reinterpret_cast<const Pack<T, VEC>*>(xrow + base);
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc = fmaf(vt::to_f32(wp.v[e]), vt::to_f32(xp.v[e]), acc);
  }
  for (int off = kWarpSize / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    if (bias != nullptr) acc += vt::to_f32(bias[row]);
    y[blockIdx.y * ldy + row] = vt::from_f32<OutT>(acc);
  }
}

}  // namespace vt_gemv
