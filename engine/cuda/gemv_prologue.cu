// Launcher of the prologue GEMV (gemv_prologue.cuh): residual add + RMSNorm, then the decode GEMV, in one launch;
// argument checks and dtype dispatch (0=fp32, 1=bf16, 2=fp16; y in the input's dtype).
#include "gemv_launch.cuh"
#include "gemv_prologue.cuh"

namespace {

using vt_gemv_launch::launch_kernel;
using vt_gemv_launch::split_for;

// The prologue GEMV (gemv_prologue.cuh): the fast path only; its checks are the caller's (vt_gemv_prologue_gemv).
template <typename T, typename OutT, int MT, int PRO>
int launch_prologue_mt(OutT* y, const T* w, const T* bias, const vt_gemv::PrologueArgs& pa, int m, int n, int k,
                       long long ldw, long long ldy, bool pdl, bool glu, cudaStream_t stream) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  constexpr int min_blocks = MT == 1 ? vt_gemv::kMinBlocksPerSm : vt_gemv::kMinBlocksPerSmRows;
  const dim3 block(vt_gemv::kWarpsPerBlock * vt_gemv::kWarpSize);
  const size_t x_bytes = static_cast<size_t>(m) * k * sizeof(T);
  if constexpr (PRO == vt_gemv::kAddRmsNorm) {
    if (glu) {  // n outputs of a [2n, k] gate/up W, one warp per output, split 1 (the caller checked)
      constexpr int glu_blocks = MT == 1 ? vt_gemv::kGluBlocksPerSm : vt_gemv::kMinBlocksPerSmRows;
      const dim3 grid(vt::ceil_div(n, vt_gemv::kWarpsPerBlock));
      if (pdl)
        return launch_kernel(vt_gemv::gemv_prologue_kernel<T, OutT, vec, MT, PRO, true, glu_blocks, true>, grid, block,
                             x_bytes, stream, true, y, w, bias, pa, m, n, k, ldw, ldy, 1);
      return launch_kernel(vt_gemv::gemv_prologue_kernel<T, OutT, vec, MT, PRO, false, glu_blocks, true>, grid, block,
                           x_bytes, stream, false, y, w, bias, pa, m, n, k, ldw, ldy, 1);
    }
  }
  const int split = split_for(n);  // the plain GEMV's rule: the same sum order as the two launches
  const int rows_per_block = vt_gemv::kWarpsPerBlock / split * vt_gemv::kRowsPerWarp;
  const dim3 grid(vt::ceil_div(n, rows_per_block));
  if (pdl)
    return launch_kernel(vt_gemv::gemv_prologue_kernel<T, OutT, vec, MT, PRO, true, min_blocks>, grid, block,
                         x_bytes, stream, true, y, w, bias, pa, m, n, k, ldw, ldy, split);
  return launch_kernel(vt_gemv::gemv_prologue_kernel<T, OutT, vec, MT, PRO, false, min_blocks>, grid, block, x_bytes,
                       stream, false, y, w, bias, pa, m, n, k, ldw, ldy, split);
}

template <typename T, typename OutT, int PRO>
int launch_prologue(void* y, const void* w, const void* bias, const vt_gemv::PrologueArgs& pa, int m, int n, int k,
                    long long ldw, long long ldy, bool pdl, bool glu, cudaStream_t stream) {
  auto* yo = static_cast<OutT*>(y);
  auto* wi = static_cast<const T*>(w);
  auto* bi = static_cast<const T*>(bias);
  if (m == 1) return launch_prologue_mt<T, OutT, 1, PRO>(yo, wi, bi, pa, m, n, k, ldw, ldy, pdl, glu, stream);
  if (m <= 2) return launch_prologue_mt<T, OutT, 2, PRO>(yo, wi, bi, pa, m, n, k, ldw, ldy, pdl, glu, stream);
  if (m <= 4) return launch_prologue_mt<T, OutT, 4, PRO>(yo, wi, bi, pa, m, n, k, ldw, ldy, pdl, glu, stream);
  return launch_prologue_mt<T, OutT, vt_gemv::kMaxRows, PRO>(yo, wi, bi, pa, m, n, k, ldw, ldy, pdl, glu, stream);
}

template <int PRO>
int prologue_dtype(int dtype, int out_dtype, void* y, const void* w, const void* bias,
                   const vt_gemv::PrologueArgs& pa, int m, int n, int k, long long ldw, long long ldy, bool pdl,
                   bool glu, cudaStream_t s) {
  if (out_dtype != dtype)  // the engine's case only: y in the input's dtype
    return vt::fail(vt::kUnsupported, "gemv prologue: out dtype code %d differs from the dtype code %d", out_dtype, dtype);
  switch (dtype) {
    case vt::kF32: return launch_prologue<float, float, PRO>(y, w, bias, pa, m, n, k, ldw, ldy, pdl, glu, s);
    case vt::kBF16:
      return launch_prologue<__nv_bfloat16, __nv_bfloat16, PRO>(y, w, bias, pa, m, n, k, ldw, ldy, pdl, glu, s);
    case vt::kF16: return launch_prologue<__half, __half, PRO>(y, w, bias, pa, m, n, k, ldw, ldy, pdl, glu, s);
    default: return vt::fail(vt::kUnsupported, "gemv: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
}

int dtype_size(int dtype) { return dtype == vt::kF32 ? 4 : 2; }

// The prologue GEMVs take the fast path only: what it needs is refused here, with the reason.
int check_prologue(const void* w, const void* a, int m, int n, int k, long long ldw, long long lda, int dtype) {
  if (m < 1 || m > vt_gemv::kMaxRows)
    return vt::fail(vt::kUnsupported, "gemv prologue: rows %d outside [1, %d]", m, vt_gemv::kMaxRows);
  if (n <= 0 || k <= 0) return vt::fail(vt::kBadArgument, "gemv prologue: n %d and k %d must be > 0", n, k);
  if (ldw < k) return vt::fail(vt::kBadArgument, "gemv prologue: weight row stride %lld < in features %d", ldw, k);
  const int vec = vt_gemv::kVectorBytes / dtype_size(dtype);
  if (!vt::aligned16(w) || !vt::aligned16(a) || k % vec || ldw % vec || lda % vec)
    return vt::fail(vt::kUnsupported, "gemv prologue: k %d and the row strides must be multiples of %d, the bases "
                    "16-byte aligned", k, vec);
  if (static_cast<long long>(m) * k * dtype_size(dtype) > vt_gemv::kMaxSmemXBytes)
    return vt::fail(vt::kUnsupported, "gemv prologue: %d rows of %d in features exceed %d bytes of shared memory",
                    m, k, vt_gemv::kMaxSmemXBytes);
  return vt::kOk;
}

}  // namespace

VT_DEFINE_LAST_ERROR(gemv_prologue)

// y = rms_norm(x + residual) W^T (+ bias), the norm in the GEMV's prologue. y: [m, n] (row stride ldy);
// w: [n, k] (ldw); x: [m, k] (ldx); residual: [m, k] (ldr) or null (the norm of x alone);
// residual_out: [m, k] (ldro) or null, gets (x + residual) rounded (must not alias residual or x);
// norm_weight: [k]; mean_scale: torch's mean factor (as vt_norm_rms_norm); 1 <= m <= 8. glu != 0: w is a [2n, k]
// gate/up weight and y = silu_and_mul of the product, [m, n] (2n rows must not split K: refused otherwise)
VT_EXPORT int vt_gemv_prologue_add_rms_norm(void* y, const void* w, const void* bias, const void* x,
                                            const void* residual, void* residual_out, const void* norm_weight, int m,
                                            int n, int k, long long ldw, long long ldx, long long ldr, long long ldro,
                                            long long ldy, float mean_scale, float eps, int dtype, int out_dtype,
                                            int glu, int pdl, void* stream) {
  if (int rc = check_prologue(w, x, m, n, k, ldw, ldx, dtype)) return rc;
  if (glu && split_for(2 * n) != 1)
    return vt::fail(vt::kUnsupported, "gemv prologue: %d gate/up rows would split K (the plain GEMV's rule)", 2 * n);
  if (m > 1 && (ldx < k || ldy < n || (residual && ldr < k) || (residual_out && ldro < k)))
    return vt::fail(vt::kBadArgument, "gemv prologue: a row stride is below its row length");
  if (residual_out != nullptr && (residual_out == residual || residual_out == x))
    return vt::fail(vt::kBadArgument, "gemv prologue: residual_out must not alias x or residual (blocks read them)");
  const vt_gemv::PrologueArgs pa{x, residual, residual_out, norm_weight, ldx, ldr, ldro, mean_scale, eps};
  const int rc = prologue_dtype<vt_gemv::kAddRmsNorm>(dtype, out_dtype, y, w, bias, pa, m, n, k, ldw, ldy, pdl != 0,
                                                      glu != 0, static_cast<cudaStream_t>(stream));
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemv_prologue_add_rms_norm");
}
