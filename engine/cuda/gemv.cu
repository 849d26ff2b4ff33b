// Launcher for the decode GEMV: argument checks, dispatch on the input and output dtype codes (0=fp32, 1=bf16, 2=fp16).
#include "gemv.cuh"

namespace {

constexpr int kMaxGridY = 65535;  // CUDA's limit on gridDim.y, which indexes the rows of x

// The 16-byte path needs every row start aligned: base pointers and row strides.
template <typename T>
bool vector_ok(const void* w, const void* x, int k, long long ldw, long long ldx) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  return vt::aligned16(w) && vt::aligned16(x) && k % vec == 0 && ldw % vec == 0 && ldx % vec == 0;
}

template <typename T, typename OutT>
void launch(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw,
            long long ldx, long long ldy, cudaStream_t stream) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  const dim3 grid(vt::ceil_div(n, vt_gemv::kWarpsPerBlock), m);
  const dim3 block(vt_gemv::kWarpsPerBlock * vt_gemv::kWarpSize);
  auto* yo = static_cast<OutT*>(y);
  auto* wi = static_cast<const T*>(w);
  auto* xi = static_cast<const T*>(x);
  auto* bi = static_cast<const T*>(bias);
  if (vector_ok<T>(w, x, k, ldw, ldx))
    vt_gemv::gemv_kernel<T, OutT, vec><<<grid, block, 0, stream>>>(yo, wi, xi, bi, n, k, ldw, ldx, ldy);
  else
    vt_gemv::gemv_kernel<T, OutT, 1><<<grid, block, 0, stream>>>(yo, wi, xi, bi, n, k, ldw, ldx, ldy);
}

// The output type follows the caller's out dtype code.
template <typename T>
int launch_out(int out_dtype, void* y, const void* w, const void* x, const void* bias, int m, int n, int k,
               long long ldw, long long ldx, long long ldy, cudaStream_t stream) {
  switch (out_dtype) {
    case vt::kF32: launch<T, float>(y, w, x, bias, m, n, k, ldw, ldx, ldy, stream); return vt::kOk;
    case vt::kBF16: launch<T, __nv_bfloat16>(y, w, x, bias, m, n, k, ldw, ldx, ldy, stream); return vt::kOk;
    case vt::kF16: launch<T, __half>(y, w, x, bias, m, n, k, ldw, ldx, ldy, stream); return vt::kOk;
    default:
      return vt::fail(vt::kUnsupported, "gemv: out dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", out_dtype);
  }
}

}  // namespace

VT_DEFINE_LAST_ERROR(gemv)

// y: [m, n] (row stride ldy, out_dtype); w: [n, k] (row stride ldw); x: [m, k] (row stride ldx);
// bias: [n] or null; w, x, bias share dtype
VT_EXPORT int vt_gemv_gemv(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw,
                           long long ldx, long long ldy, int dtype, int out_dtype, void* stream) {
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
    case vt::kF32: rc = launch_out<float>(out_dtype, y, w, x, bias, m, n, k, ldw, ldx, ldy, s); break;
    case vt::kBF16: rc = launch_out<__nv_bfloat16>(out_dtype, y, w, x, bias, m, n, k, ldw, ldx, ldy, s); break;
    case vt::kF16: rc = launch_out<__half>(out_dtype, y, w, x, bias, m, n, k, ldw, ldx, ldy, s); break;
    default: return vt::fail(vt::kUnsupported, "gemv: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemv_gemv");
}
