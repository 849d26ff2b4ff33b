// The decode GEMV with the op before it folded into its prologue: each block builds the GEMV's input rows in
// shared memory (residual add + RMSNorm) while its first W loads are in flight, so the norm is no launch of its
// own. The prologue calls the norm kernel's own device functions in the same order per element, so the GEMV
// input is bit for bit what that kernel writes, and the output bit for bit the two launches' (same GEMV body
// and split rule). (The SiLU-and-mul prologue lost its A/B and was retired.)
#pragma once
#include "act.cuh"
#include "gemv.cuh"
#include "norm.cuh"

namespace vt_gemv {

static_assert(kWarpsPerBlock * kWarpSize == vt_norm::kThreadsPerBlock,
              "the norm prologue sums over the block in the norm kernel's tree");
constexpr int kNormLoadsInFlight = 4;  // norm prologue: elements of a row a thread loads before it sums them

enum Prologue : int { kAddRmsNorm = 0 };

// What the prologue reads and writes (pointers of the GEMV's dtype; strides in elements).
struct PrologueArgs {
  const void* a;             // add+norm: the sublayer output [m, k]
  const void* residual;      // add+norm: the running sum [m, k], or null (the first layer: the norm of a alone)
  void* residual_out;        // add+norm: a + residual rounded, [m, k] (block 0 writes it), or null
  const void* norm_weight;   // add+norm: [k]
  long long lda, ldr, ldro;  // row strides of a, residual, residual_out
  float mean_scale, eps;     // add+norm: torch's mean factor (rows / numel as floats) and the norm's eps
};

// Loads of what earlier grids wrote go to L2 (ld.global.cg): under PDL the grid started before they were written.
template <typename T>
__device__ __forceinline__ T load_l2(const T* p) {
  return __ldcg(p);
}

// residual_out = (a + residual).to(T); xs = rms_norm(residual_out) * weight, row by row, exactly as
// fused_add_rms_norm_kernel (rms_norm_kernel without a residual): thread t owns elements t, t + 256, ...
template <typename T>
struct StageAddRmsNorm {
  PrologueArgs pa;
  int m, k;
  __device__ __forceinline__ void operator()(T* xs) const {
    const T* a = static_cast<const T*>(pa.a);
    const T* res = static_cast<const T*>(pa.residual);
    T* rout = blockIdx.x == 0 ? static_cast<T*>(pa.residual_out) : nullptr;
    const T* nw = static_cast<const T*>(pa.norm_weight);
    for (int r = 0; r < m; ++r) {
      const T* ar = a + r * pa.lda;
      T* xr = xs + static_cast<long long>(r) * k;
      float sum_sq = 0.0f;
#pragma unroll kNormLoadsInFlight
      for (int i = threadIdx.x; i < k; i += vt_norm::kThreadsPerBlock) {
        const T summed = res != nullptr
                             ? vt::from_f32<T>(__fadd_rn(vt::to_f32(load_l2(ar + i)), vt::to_f32(load_l2(res + r * pa.ldr + i))))
                             : load_l2(ar + i);
        xr[i] = summed;
        if (rout != nullptr) rout[r * pa.ldro + i] = summed;
        const float v = vt::to_f32(summed);
        sum_sq = __fadd_rn(sum_sq, __fmul_rn(v, v));
      }
      const float scale = vt_norm::rms_scale(vt_norm::block_sum(sum_sq), pa.mean_scale, pa.eps);
      for (int i = threadIdx.x; i < k; i += vt_norm::kThreadsPerBlock)
        xr[i] = vt_norm::scale_and_weight(vt::to_f32(xr[i]), scale, nw[i]);
      __syncthreads();  // block_sum's partials are reused by the next row; xs is whole before the GEMV reads it
    }
  }
};

// y = prologue(a, ...) W^T (+ bias): the fast path of gemv_vec_kernel with x built in shared memory.
// w: [n, k] (row stride ldw); y: [m, n] (row stride ldy); m <= MT.
// GLU: the add+norm prologue before gemv_glu_kernel's body (a [2n, k] gate/up W, y = silu(gate) * up: [m, n]).
template <typename T, typename OutT, int VEC, int MT, int PRO, bool PDL, int MIN_BLOCKS, bool GLU = false>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize, MIN_BLOCKS)
gemv_prologue_kernel(OutT* __restrict__ y, const T* __restrict__ w, const T* __restrict__ bias, PrologueArgs pa,
                     int m, int n, int k, long long ldw, long long ldy, int split) {
  constexpr int rpw = GLU ? 2 : kRowsPerWarp;
  static_assert(PRO == kAddRmsNorm, "the add+norm prologue is the one left");
  gemv_body<T, OutT, VEC, MT, rpw, kUnroll, true, PDL, GLU>(y, w, nullptr, bias, m, n, k, ldw, k, ldy, split,
                                                           StageAddRmsNorm<T>{pa, m, k});
}

}  // namespace vt_gemv
