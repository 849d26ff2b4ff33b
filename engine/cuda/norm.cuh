// RMSNorm and fused add+RMSNorm kernels on raw pointers, rounding where the torch reference rounds.
#pragma once
#include "common.cuh"

namespace vt_norm {

constexpr int kThreadsPerBlock = 256;  // one block per row; 8 warps cover a 4096-wide row in 16 steps
constexpr int kWarpSize = 32;

// Sum over the block in a fixed tree, so a row's result never depends on scheduling: the first n of N values at once
// (the rows of a GEMV tile's staged input), one barrier for all of them; every thread holds every total. Its shared
// partials are read after the barrier: a caller barriers before the next call.
template <int N>
__device__ __forceinline__ void block_sum_n(float (&v)[N], int n) {
  __shared__ float partial[N][kThreadsPerBlock / kWarpSize];
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i >= n) break;
    for (int off = kWarpSize / 2; off > 0; off >>= 1) v[i] = __fadd_rn(v[i], __shfl_xor_sync(0xffffffffu, v[i], off));
    if (lane == 0) partial[i][warp] = v[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (i >= n) break;
    v[i] = lane < kThreadsPerBlock / kWarpSize ? partial[i][lane] : 0.0f;
    for (int off = kWarpSize / 2; off > 0; off >>= 1) v[i] = __fadd_rn(v[i], __shfl_xor_sync(0xffffffffu, v[i], off));
  }
}

__device__ __forceinline__ float block_sum(float v) {
  float s[1] = {v};
  block_sum_n(s, 1);
  return s[0];
}

// The reference's scale: rsqrt(mean(x*x) + eps) in fp32. torch's CUDA mean multiplies the sum by a float
// factor (rows / numel, both as float), which the binding computes the same way and passes as mean_scale.
__device__ __forceinline__ float rms_scale(float sum_sq, float mean_scale, float eps) {
  return rsqrtf(__fadd_rn(__fmul_rn(sum_sq, mean_scale), eps));
}

// out = weight * (x * scale).to(T): two roundings, matching `weight * normed.to(dtype)`.
template <typename T>
__device__ __forceinline__ T scale_and_weight(float x, float scale, T w) {
  const T normed = vt::from_f32<T>(__fmul_rn(x, scale));
  return vt::from_f32<T>(__fmul_rn(vt::to_f32(w), vt::to_f32(normed)));
}

// Let a programmatic dependent (the decode GEMV after the final norm, under VT_GEMV_PDL) launch now, so its blocks
// issue their W loads while the norm runs; it still waits for this grid to finish before it reads the output.
// A no-op where the next kernel is launched plainly, and below sm_90.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// x: [rows, hidden] (row stride x_stride), weight: [hidden], out: [rows, hidden] (row stride out_stride)
template <typename T>
__global__ void rms_norm_kernel(T* __restrict__ out, const T* __restrict__ x, const T* __restrict__ weight,
                                int hidden, long long x_stride, long long out_stride, float mean_scale,
                                float eps) {
  allow_dependents();
  const T* row = x + blockIdx.x * x_stride;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += kThreadsPerBlock) {
    const float v = vt::to_f32(row[i]);
    sum_sq = __fadd_rn(sum_sq, __fmul_rn(v, v));
  }
  const float scale = rms_scale(block_sum(sum_sq), mean_scale, eps);
  T* dst = out + blockIdx.x * out_stride;
  for (int i = threadIdx.x; i < hidden; i += kThreadsPerBlock)
    dst[i] = scale_and_weight(vt::to_f32(row[i]), scale, weight[i]);
}

// residual_out <- (x + residual_in).to(T); out <- rms_norm(residual_out). The rounded sum is what the reference
// returns as the next layer's residual. residual_out may alias residual_in (in place): each thread reads an
// element before writing it and re-reads only the elements it wrote.
// x, residual_in, residual_out, out: [rows, hidden]; strides.x/.res_in/.res_out/.out are their row strides
struct RowStrides {
  long long x, res_in, res_out, out;
};

template <typename T>
__global__ void fused_add_rms_norm_kernel(T* __restrict__ out, T* residual_out, const T* residual_in,
                                          const T* __restrict__ x, const T* __restrict__ weight, int hidden,
                                          RowStrides strides, float mean_scale, float eps) {
  allow_dependents();
  const T* xrow = x + blockIdx.x * strides.x;
  const T* rin = residual_in + blockIdx.x * strides.res_in;
  T* rout = residual_out + blockIdx.x * strides.res_out;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += kThreadsPerBlock) {
    const T summed = vt::from_f32<T>(__fadd_rn(vt::to_f32(xrow[i]), vt::to_f32(rin[i])));
    rout[i] = summed;
    const float v = vt::to_f32(summed);
    sum_sq = __fadd_rn(sum_sq, __fmul_rn(v, v));
  }
  const float scale = rms_scale(block_sum(sum_sq), mean_scale, eps);
  T* dst = out + blockIdx.x * strides.out;
  for (int i = threadIdx.x; i < hidden; i += kThreadsPerBlock)
    dst[i] = scale_and_weight(vt::to_f32(rout[i]), scale, weight[i]);
}

}  // namespace vt_norm
