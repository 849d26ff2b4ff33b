// Launcher for the decode GEMV: argument checks, dispatch on the input and output dtype codes (0=fp32, 1=bf16, 2=fp16).
#include <type_traits>

#include "gemv_prologue.cuh"

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

// Programmatic dependent launch needs sm_90; elsewhere the same kernel is launched plainly.
bool pdl_supported() {
  static int cached[kMaxDevices] = {};  // 0 unknown, 1 no, 2 yes
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
  if (cached[dev] == 0) {
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cached[dev] = major >= 9 ? 2 : 1;
  }
  return cached[dev] == 2;
}

// Launch `kernel` on `stream`; with `pdl` (and sm_90) as a programmatic dependent of the work before it,
// so its blocks start (and issue their W loads) while that work drains. The kernel waits for its inputs.
template <typename... KArgs, typename... Args>
int launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                  Args... args) {
  if (!pdl || !pdl_supported()) {
    kernel<<<grid, block, smem, stream>>>(args...);
    return vt::kOk;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
  if (err != cudaSuccess) return vt::fail(static_cast<int>(err), "gemv: PDL launch: %s", cudaGetErrorString(err));
  return vt::kOk;
}

// Warps that share one W row: kSplitK when one warp per row group would leave the SMs short of loads in flight.
// A function of (n, the device) only, so a row of x gets the same sum order whatever the other rows are.
static_assert(vt_gemv::kWarpsPerBlock % vt_gemv::kSplitK == 0, "split-K groups tile the warps of a block");

int split_for(int n) {
  const long long warps = vt::ceil_div(n, vt_gemv::kRowsPerWarp);
  return warps < static_cast<long long>(vt_gemv::kSplitBelowWarpsPerSm) * sm_count() ? vt_gemv::kSplitK : 1;
}

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
  // PDL for the engine's own case (y in x's dtype, x staged: its copy reads L2, never a cache filled earlier)
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

// The prologue GEMV (gemv_prologue.cuh): the fast path only; its checks are the caller's (vt_gemv_prologue_gemv).
template <typename T, typename OutT, int MT, int PRO>
int launch_prologue_mt(OutT* y, const T* w, const T* bias, const vt_gemv::PrologueArgs& pa, int m, int n, int k,
                       long long ldw, long long ldy, bool pdl, cudaStream_t stream) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  constexpr int min_blocks = MT == 1 ? vt_gemv::kMinBlocksPerSm : vt_gemv::kMinBlocksPerSmRows;
  const int split = split_for(n);  // the plain GEMV's rule: the same sum order as the two launches
  const int rows_per_block = vt_gemv::kWarpsPerBlock / split * vt_gemv::kRowsPerWarp;
  const dim3 grid(vt::ceil_div(n, rows_per_block));
  const dim3 block(vt_gemv::kWarpsPerBlock * vt_gemv::kWarpSize);
  const size_t x_bytes = static_cast<size_t>(m) * k * sizeof(T);
  if (pdl)
    return launch_kernel(vt_gemv::gemv_prologue_kernel<T, OutT, vec, MT, PRO, true, min_blocks>, grid, block,
                         x_bytes, stream, true, y, w, bias, pa, m, n, k, ldw, ldy, split);
  return launch_kernel(vt_gemv::gemv_prologue_kernel<T, OutT, vec, MT, PRO, false, min_blocks>, grid, block, x_bytes,
                       stream, false, y, w, bias, pa, m, n, k, ldw, ldy, split);
}

template <typename T, typename OutT, int PRO>
int launch_prologue(void* y, const void* w, const void* bias, const vt_gemv::PrologueArgs& pa, int m, int n, int k,
                    long long ldw, long long ldy, bool pdl, cudaStream_t stream) {
  auto* yo = static_cast<OutT*>(y);
  auto* wi = static_cast<const T*>(w);
  auto* bi = static_cast<const T*>(bias);
  if (m == 1) return launch_prologue_mt<T, OutT, 1, PRO>(yo, wi, bi, pa, m, n, k, ldw, ldy, pdl, stream);
  if (m <= 2) return launch_prologue_mt<T, OutT, 2, PRO>(yo, wi, bi, pa, m, n, k, ldw, ldy, pdl, stream);
  if (m <= 4) return launch_prologue_mt<T, OutT, 4, PRO>(yo, wi, bi, pa, m, n, k, ldw, ldy, pdl, stream);
  return launch_prologue_mt<T, OutT, vt_gemv::kMaxRows, PRO>(yo, wi, bi, pa, m, n, k, ldw, ldy, pdl, stream);
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

template <int PRO>
int prologue_dtype(int dtype, int out_dtype, void* y, const void* w, const void* bias,
                   const vt_gemv::PrologueArgs& pa, int m, int n, int k, long long ldw, long long ldy, bool pdl,
                   cudaStream_t s) {
  if (out_dtype != dtype)  // the engine's case only: y in the input's dtype
    return vt::fail(vt::kUnsupported, "gemv prologue: out dtype code %d differs from the dtype code %d", out_dtype, dtype);
  switch (dtype) {
    case vt::kF32: return launch_prologue<float, float, PRO>(y, w, bias, pa, m, n, k, ldw, ldy, pdl, s);
    case vt::kBF16:
      return launch_prologue<__nv_bfloat16, __nv_bfloat16, PRO>(y, w, bias, pa, m, n, k, ldw, ldy, pdl, s);
    case vt::kF16: return launch_prologue<__half, __half, PRO>(y, w, bias, pa, m, n, k, ldw, ldy, pdl, s);
    default: return vt::fail(vt::kUnsupported, "gemv: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
}

int dtype_size(int dtype) { return dtype == vt::kF32 ? 4 : 2; }

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

// y: [m, n] (row stride ldy, out_dtype); w: [n, k] (row stride ldw); x: [m, k] (row stride ldx);
// bias: [n] or null; w, x, bias share dtype
VT_EXPORT int vt_gemv_gemv(void* y, const void* w, const void* x, const void* bias, int m, int n, int k, long long ldw,
                           long long ldx, long long ldy, int dtype, int out_dtype, void* stream) {
  return gemv_impl(y, w, x, bias, m, n, k, ldw, ldx, ldy, dtype, out_dtype, false, stream);
}

// vt_gemv_gemv with pdl != 0: the fast path launched as a programmatic dependent (sm_90; plain elsewhere)
VT_EXPORT int vt_gemv_gemv_pdl(void* y, const void* w, const void* x, const void* bias, int m, int n, int k,
                               long long ldw, long long ldx, long long ldy, int dtype, int out_dtype, int pdl,
                               void* stream) {
  return gemv_impl(y, w, x, bias, m, n, k, ldw, ldx, ldy, dtype, out_dtype, pdl != 0, stream);
}

// y = rms_norm(x + residual) W^T (+ bias), the norm in the GEMV's prologue. y: [m, n] (row stride ldy);
// w: [n, k] (ldw); x: [m, k] (ldx); residual: [m, k] (ldr) or null (the norm of x alone);
// residual_out: [m, k] (ldro) or null, gets (x + residual) rounded (must not alias residual or x);
// norm_weight: [k]; mean_scale: torch's mean factor (as vt_norm_rms_norm); 1 <= m <= 8
VT_EXPORT int vt_gemv_add_rms_norm_gemv(void* y, const void* w, const void* bias, const void* x, const void* residual,
                                        void* residual_out, const void* norm_weight, int m, int n, int k,
                                        long long ldw, long long ldx, long long ldr, long long ldro, long long ldy,
                                        float mean_scale, float eps, int dtype, int out_dtype, int pdl,
                                        void* stream) {
  if (int rc = check_prologue(w, x, m, n, k, ldw, ldx, dtype)) return rc;
  if (m > 1 && (ldx < k || ldy < n || (residual && ldr < k) || (residual_out && ldro < k)))
    return vt::fail(vt::kBadArgument, "gemv prologue: a row stride is below its row length");
  if (residual_out != nullptr && (residual_out == residual || residual_out == x))
    return vt::fail(vt::kBadArgument, "gemv prologue: residual_out must not alias x or residual (blocks read them)");
  const vt_gemv::PrologueArgs pa{x, residual, residual_out, norm_weight, ldx, ldr, ldro, mean_scale, eps};
  const int rc = prologue_dtype<vt_gemv::kAddRmsNorm>(dtype, out_dtype, y, w, bias, pa, m, n, k, ldw, ldy, pdl != 0,
                                                      static_cast<cudaStream_t>(stream));
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemv_add_rms_norm_gemv");
}

// y = silu_and_mul(gate_up) W^T (+ bias), the activation in the GEMV's prologue. gate_up: [m, 2k] (row stride
// ldg; gate first); w: [n, k] (ldw); y: [m, n] (ldy); 1 <= m <= 8
VT_EXPORT int vt_gemv_silu_mul_gemv(void* y, const void* w, const void* bias, const void* gate_up, int m, int n, int k,
                                    long long ldw, long long ldg, long long ldy, int dtype, int out_dtype, int pdl,
                                    void* stream) {
  if (int rc = check_prologue(w, gate_up, m, n, k, ldw, ldg, dtype)) return rc;
  if (m > 1 && (ldg < 2LL * k || ldy < n))
    return vt::fail(vt::kBadArgument, "gemv prologue: a row stride is below its row length");
  const vt_gemv::PrologueArgs pa{gate_up, nullptr, nullptr, nullptr, ldg, 0, 0, 0.0f, 0.0f};
  const int rc = prologue_dtype<vt_gemv::kSiluMul>(dtype, out_dtype, y, w, bias, pa, m, n, k, ldw, ldy, pdl != 0,
                                                   static_cast<cudaStream_t>(stream));
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemv_silu_mul_gemv");
}
