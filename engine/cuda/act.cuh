// SiLU-and-mul kernel on raw pointers, rounding where the torch reference rounds.
#pragma once
#include "common.cuh"

namespace vt_act {

constexpr int kThreadsPerBlock = 256;  // threads along the intermediate dim; grid.x walks the rows

// silu(g) * u with two roundings, as `F.silu(gate) * up`: torch's silu is `g / (1 + exp(-g))` in fp32
// rounded to T, then the product with up is rounded to T.
template <typename T>
__device__ __forceinline__ T silu_mul(T gate, T up) {
  const float g = vt::to_f32(gate);
  const T silu = vt::from_f32<T>(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
  return vt::from_f32<T>(__fmul_rn(vt::to_f32(silu), vt::to_f32(up)));
}

// x: [rows, 2 * inter] (row stride x_stride; gate = first half, up = second half), out: [rows, inter]
// (row stride out_stride)
template <typename T>
__global__ void silu_and_mul_kernel(T* __restrict__ out, const T* __restrict__ x, int inter, long long x_stride,
                                    long long out_stride) {
  const int i = blockIdx.y * kThreadsPerBlock + threadIdx.x;
  if (i >= inter) return;
  const T* row = x + blockIdx.x * x_stride;
  out[blockIdx.x * out_stride + i] = silu_mul(row[i], row[inter + i]);
}

}  // namespace vt_act
