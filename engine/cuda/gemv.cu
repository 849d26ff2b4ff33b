// Launcher for the decode GEMV: argument checks, dispatch on the input and output dtype codes (0=fp32, 1=bf16, 2=fp16).
#include <type_traits>

#include "gemv_launch.cuh"

namespace {

constexpr int kMaxGridY = 65535;  // CUDA's limit on gridDim.y, which indexes the rows of x on the scalar path

// The 16-byte path needs every row start aligned: base pointers and row strides.
template <typename T>
bool vector_ok(const void* w, const void* x, int k, long long ldw, long long ldx) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  return vt::aligned16(w) && vt::aligned16(x) && k % vec == 0 && ldw % vec == 0 && ldx % vec == 0;
}

using vt_gemv_launch::launch_kernel;
using vt_gemv_launch::split_for;

template <typename T, typename OutT, int MT>
int launch_vec(OutT* y, const T* w, const T* x, const T* bias, int m, int n, int k, long long ldw, long long ldx,
               long long ldy, bool pdl, cudaStream_t stream) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  const int split = split_for(n);
  const int rows_per_block = vt_gemv::kWarpsPerBlock / split * vt_gemv::kRowsPerWarp;
  const dim3 grid(vt::ceil_div(n, rows_per_block));
  const dim3 block(vt_gemv::kWarpsPerBlock * vt_gemv::kWarpSize);
  const size_t x_bytes = static_cast<size_t>(m) * k * sizeof(T);
  constexpr int min_blocks = MT == 1 ? vt_gemv::kMinBlocksPerSm : vt_gemv::kMinBlocksPerSmRows;
  constexpr int rpw = vt_gemv::kRowsPerWarp, unroll = vt_gemv::kUnroll;
  const bool staged = vt_gemv::kStageX && x_bytes <= static_cast<size_t>(vt_gemv::kMaxSmemXBytes);
  // PDL for the engine's own case (y in x's dtype, x staged: under PDL its copy reads L2, never a cache filled
  // earlier)
  if constexpr (std::is_same_v<T, OutT>) {
    if (pdl && staged)
      return launch_kernel(vt_gemv::gemv_vec_kernel<T, OutT, vec, MT, rpw, unroll, true, min_blocks, true>, grid,
                           block, x_bytes, stream, true, y, w, x, bias, m, n, k, ldw, ldx, ldy, split);
  }
  if (staged)
    vt_gemv::gemv_vec_kernel<T, OutT, vec, MT, rpw, unroll, true, min_blocks>
        <<<grid, block, x_bytes, stream>>>(y, w, x, bias, m, n, k, ldw, ldx, ldy, split);
  else
    vt_gemv::gemv_vec_kernel<T, OutT, vec, MT, rpw, unroll, false, min_blocks>
        <<<grid, block, 0, stream>>>(y, w, x, bias, m, n, k, ldw, ldx, ldy, split);
  return vt::kOk;
}

template <typename T, typename OutT>
int launch(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw, long long ldx,
           long long ldy, bool pdl, cudaStream_t stream) {
  auto* yo = static_cast<OutT*>(y);
  auto* wi = static_cast<const T*>(w);
  auto* xi = static_cast<const T*>(x);
  auto* bi = static_cast<const T*>(bias);
  if (m <= vt_gemv::kMaxRows && vector_ok<T>(w, x, k, ldw, ldx)) {  // x rows share each W load: MT >= m
    if (m == 1) return launch_vec<T, OutT, 1>(yo, wi, xi, bi, m, n, k, ldw, ldx, ldy, pdl, stream);
    if (m <= 2) return launch_vec<T, OutT, 2>(yo, wi, xi, bi, m, n, k, ldw, ldx, ldy, pdl, stream);
    if (m <= 4) return launch_vec<T, OutT, 4>(yo, wi, xi, bi, m, n, k, ldw, ldx, ldy, pdl, stream);
    return launch_vec<T, OutT, vt_gemv::kMaxRows>(yo, wi, xi, bi, m, n, k, ldw, ldx, ldy, pdl, stream);
  }
  const dim3 grid(vt::ceil_div(n, vt_gemv::kWarpsPerBlock), m);
  const dim3 block(vt_gemv::kWarpsPerBlock * vt_gemv::kWarpSize);
  vt_gemv::gemv_scalar_kernel<T, OutT><<<grid, block, 0, stream>>>(yo, wi, xi, bi, n, k, ldw, ldx, ldy);
  return vt::kOk;
}

// The output type follows the caller's out dtype code.
template <typename T>
int launch_out(int out_dtype, void* y, const void* w, const void* x, const void* bias, int m, int n, int k,
               long long ldw, long long ldx, long long ldy, bool pdl, cudaStream_t stream) {
  switch (out_dtype) {
    case vt::kF32: return launch<T, float>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, stream);
    case vt::kBF16: return launch<T, __nv_bfloat16>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, stream);
    case vt::kF16: return launch<T, __half>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, stream);
    default:
      return vt::fail(vt::kUnsupported, "gemv: out dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", out_dtype);
  }
}

template <typename T, int MT>
int launch_glu(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw,
               long long ldx, long long ldy, bool pdl, cudaStream_t stream) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  constexpr int min_blocks = MT == 1 ? vt_gemv::kGluBlocksPerSm : vt_gemv::kMinBlocksPerSmRows;
  const dim3 grid(vt::ceil_div(n, vt_gemv::kWarpsPerBlock));
  const dim3 block(vt_gemv::kWarpsPerBlock * vt_gemv::kWarpSize);
  const size_t x_bytes = static_cast<size_t>(m) * k * sizeof(T);
  auto* yo = static_cast<T*>(y);
  auto* wi = static_cast<const T*>(w);
  auto* xi = static_cast<const T*>(x);
  auto* bi = static_cast<const T*>(bias);
  if (pdl)
    return launch_kernel(vt_gemv::gemv_glu_kernel<T, vec, MT, min_blocks, true>, grid, block, x_bytes, stream, true, yo,
                         wi, xi, bi, m, n, k, ldw, ldx, ldy);
  return launch_kernel(vt_gemv::gemv_glu_kernel<T, vec, MT, min_blocks, false>, grid, block, x_bytes, stream, false,
                       yo, wi, xi, bi, m, n, k, ldw, ldx, ldy);
}

template <typename T>
int glu_rows(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw,
             long long ldx, long long ldy, bool pdl, cudaStream_t s) {
  if (!vector_ok<T>(w, x, k, ldw, ldx))
    return vt::fail(vt::kUnsupported, "gemv glu: k %d and the row strides must be whole 16-byte vectors", k);
  if (static_cast<long long>(m) * k * static_cast<long long>(sizeof(T)) > vt_gemv::kMaxSmemXBytes)
    return vt::fail(vt::kUnsupported, "gemv glu: %d rows of %d in features exceed %d bytes of shared memory", m, k,
                    vt_gemv::kMaxSmemXBytes);
  if (m == 1) return launch_glu<T, 1>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, s);
  if (m <= 2) return launch_glu<T, 2>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, s);
  if (m <= 4) return launch_glu<T, 4>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, s);
  return launch_glu<T, vt_gemv::kMaxRows>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, s);
}

}  // namespace

VT_DEFINE_LAST_ERROR(gemv)

namespace {

int gemv_impl(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw,
              long long ldx, long long ldy, int dtype, int out_dtype, bool pdl, void* stream) {
  if (m < 0 || m > kMaxGridY) return vt::fail(vt::kBadArgument, "gemv: rows of x %d outside [0, %d]", m, kMaxGridY);
  if (n <= 0) return vt::fail(vt::kBadArgument, "gemv: out features must be > 0 (got %d)", n);
  if (k <= 0) return vt::fail(vt::kBadArgument, "gemv: in features must be > 0 (got %d)", k);
  if (ldw < k) return vt::fail(vt::kBadArgument, "gemv: weight row stride %lld < in features %d", ldw, k);
  if (ldx < k && m > 1) return vt::fail(vt::kBadArgument, "gemv: x row stride %lld < in features %d", ldx, k);
  if (ldy < n && m > 1) return vt::fail(vt::kBadArgument, "gemv: y row stride %lld < out features %d", ldy, n);
  if (m == 0) return vt::kOk;
  auto s = static_cast<cudaStream_t>(stream);
  int rc = vt::kOk;
  switch (dtype) {
    case vt::kF32: rc = launch_out<float>(out_dtype, y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, s); break;
    case vt::kBF16: rc = launch_out<__nv_bfloat16>(out_dtype, y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, s); break;
    case vt::kF16: rc = launch_out<__half>(out_dtype, y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl, s); break;
    default: return vt::fail(vt::kUnsupported, "gemv: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemv_gemv");
}

}  // namespace

// y: [m, n] (row stride ldy, out_dtype); w: [n, k] (row stride ldw); x: [m, k] (row stride ldx);
// bias: [n] or null; w, x, bias share dtype
VT_EXPORT int vt_gemv_gemv(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw,
                           long long ldx, long long ldy, int dtype, int out_dtype, void* stream) {
  return gemv_impl(y, w, x, bias, m, n, k, ldw, ldx, ldy, dtype, out_dtype, false, stream);
}

// vt_gemv_gemv with options: pdl != 0 launches the fast path as a programmatic dependent (sm_90; plain elsewhere)
VT_EXPORT int vt_gemv_gemv_ex(void* y, const void* w, const void* x, const void* bias, int m, int n, int k,
                              long long ldw, long long ldx, long long ldy, int dtype, int out_dtype, int pdl,
                              void* stream) {
  return gemv_impl(y, w, x, bias, m, n, k, ldw, ldx, ldy, dtype, out_dtype, pdl != 0, stream);
}

// y = silu_and_mul(x W^T (+ bias)) in one launch: w: [2n, k] (gate rows, then up rows; row stride ldw); x: [m, k] (ldx);
// bias: [2n] or null; y: [m, n] (ldy), x's dtype; 1 <= m <= 8. Each gate and up sum is the plain GEMV's (no split:
// 2n rows must not be split, else the launch is refused), so the bits are the GEMV then the SiLU-and-mul kernel's.
VT_EXPORT int vt_gemv_gemv_glu(void* y, const void* w, const void* x, const void* bias, int m, int n, int k,
                               long long ldw, long long ldx, long long ldy, int dtype, int pdl, void* stream) {
  if (m < 1 || m > vt_gemv::kMaxRows) return vt::fail(vt::kUnsupported, "gemv glu: rows %d outside [1, 8]", m);
  if (n <= 0 || k <= 0) return vt::fail(vt::kBadArgument, "gemv glu: n %d and k %d must be > 0", n, k);
  if (ldw < k || (m > 1 && (ldx < k || ldy < n)))
    return vt::fail(vt::kBadArgument, "gemv glu: a row stride is below its row length");
  if (split_for(2 * n) != 1)
    return vt::fail(vt::kUnsupported, "gemv glu: %d gate/up rows would split K (the plain GEMV's rule)", 2 * n);
  auto s = static_cast<cudaStream_t>(stream);
  int rc = vt::kOk;
  switch (dtype) {
    case vt::kF32: rc = glu_rows<float>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl != 0, s); break;
    case vt::kBF16: rc = glu_rows<__nv_bfloat16>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl != 0, s); break;
    case vt::kF16: rc = glu_rows<__half>(y, w, x, bias, m, n, k, ldw, ldx, ldy, pdl != 0, s); break;
    default: return vt::fail(vt::kUnsupported, "gemv: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemv_gemv_glu");
}
