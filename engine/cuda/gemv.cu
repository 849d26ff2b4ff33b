// Launcher for the decode GEMV: argument checks, dispatch on the input and output dtype codes (0=fp32, 1=bf16, 2=fp16).
#include "gemv.cuh"

namespace {

constexpr int kMaxGridY = 65535;  // CUDA's limit on gridDim.y, which indexes the rows of x on the scalar path
constexpr int kMaxDevices = 64;   // SM counts are cached per device ordinal below this

// The 16-byte path needs every row start aligned: base pointers and row strides.
template <typename T>
bool vector_ok(const void* w, const void* x, int k, long long ldw, long long ldx) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  return vt::aligned16(w) && vt::aligned16(x) && k % vec == 0 && ldw % vec == 0 && ldx % vec == 0;
}

int sm_count() {
  static int cached[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 1;
  if (cached[dev] == 0) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    cached[dev] = sms > 0 ? sms : 1;
  }
  return cached[dev];
}

// Warps that share one W row: kSplitK when one warp per row group would leave the SMs short of loads in flight.
// A function of (n, the device) only, so a row of x gets the same sum order whatever the other rows are.
static_assert(vt_gemv::kWarpsPerBlock % vt_gemv::kSplitK == 0, "split-K groups tile the warps of a block");

int split_for(int n) {
  const long long warps = vt::ceil_div(n, vt_gemv::kRowsPerWarp);
  return warps < static_cast<long long>(vt_gemv::kSplitBelowWarpsPerSm) * sm_count() ? vt_gemv::kSplitK : 1;
}

template <typename T, typename OutT, int MT>
void launch_vec(OutT* y, const T* w, const T* x, const T* bias, int m, int n, int k, long long ldw, long long ldx,
                long long ldy, cudaStream_t stream) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  const int split = split_for(n);
  const int rows_per_block = vt_gemv::kWarpsPerBlock / split * vt_gemv::kRowsPerWarp;
  const dim3 grid(vt::ceil_div(n, rows_per_block));
  const dim3 block(vt_gemv::kWarpsPerBlock * vt_gemv::kWarpSize);
  const size_t x_bytes = static_cast<size_t>(m) * k * sizeof(T);
  constexpr int min_blocks = MT == 1 ? vt_gemv::kMinBlocksPerSm : vt_gemv::kMinBlocksPerSmRows;
  if (vt_gemv::kStageX && x_bytes <= static_cast<size_t>(vt_gemv::kMaxSmemXBytes))
    vt_gemv::gemv_vec_kernel<T, OutT, vec, MT, vt_gemv::kRowsPerWarp, vt_gemv::kUnroll, true, min_blocks>
        <<<grid, block, x_bytes, stream>>>(y, w, x, bias, m, n, k, ldw, ldx, ldy, split);
  else
    vt_gemv::gemv_vec_kernel<T, OutT, vec, MT, vt_gemv::kRowsPerWarp, vt_gemv::kUnroll, false, min_blocks>
        <<<grid, block, 0, stream>>>(y, w, x, bias, m, n, k, ldw, ldx, ldy, split);
}

template <typename T, typename OutT>
void launch(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw,
            long long ldx, long long ldy, cudaStream_t stream) {
  auto* yo = static_cast<OutT*>(y);
  auto* wi = static_cast<const T*>(w);
  auto* xi = static_cast<const T*>(x);
  auto* bi = static_cast<const T*>(bias);
  if (m <= vt_gemv::kMaxRows && vector_ok<T>(w, x, k, ldw, ldx)) {  // x rows share each W load: MT >= m
    if (m == 1) launch_vec<T, OutT, 1>(yo, wi, xi, bi, m, n, k, ldw, ldx, ldy, stream);
    else if (m <= 2) launch_vec<T, OutT, 2>(yo, wi, xi, bi, m, n, k, ldw, ldx, ldy, stream);
    else if (m <= 4) launch_vec<T, OutT, 4>(yo, wi, xi, bi, m, n, k, ldw, ldx, ldy, stream);
    else launch_vec<T, OutT, vt_gemv::kMaxRows>(yo, wi, xi, bi, m, n, k, ldw, ldx, ldy, stream);
    return;
  }
  const dim3 grid(vt::ceil_div(n, vt_gemv::kWarpsPerBlock), m);
  const dim3 block(vt_gemv::kWarpsPerBlock * vt_gemv::kWarpSize);
  vt_gemv::gemv_scalar_kernel<T, OutT><<<grid, block, 0, stream>>>(yo, wi, xi, bi, n, k, ldw, ldx, ldy);
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
