// Launchers of the small decode GEMM (gemm_small.cuh): plain, and with the residual add + RMSNorm prologue; argument
// checks, the tile width and dtype dispatch (1=bf16, 2=fp16; y in the input's dtype; fp32 is refused).
#include "gemm_small.cuh"

namespace {

using vt_gemm_small::NormArgs;

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
    return 1;
  return sms > 0 ? sms : 1;
}

// Columns per block: the widest tile (x staged, and read from L2, once per block) that still gives every SM a block.
// Two blocks per SM took q/k/v's 8-column tiles: 512 blocks each staging all 32 rows of x, 4x W's bytes from L2;
// at one, q/k/v went from 0.46x to 0.65x cuBLAS (H100, the spec's sixth GPU run). Wider still measured the same.
int tiles_for(int n) {
  const int sms = sm_count();
  for (int nt : {4, 2})
    if (vt::ceil_div(n, vt_gemm_small::kTileN * nt) >= sms) return nt;
  return 1;
}

template <typename T, int MT, int NT, bool NORM>
int launch_nt(T* y, const T* w, const T* x, const NormArgs& na, int m, int n, int k, long long ldw, long long ldx,
              long long ldy, cudaStream_t stream) {
  auto kernel = vt_gemm_small::gemm_small_kernel<T, T, MT, NT, NORM>;
  const size_t smem = vt_gemm_small::gemm_small_smem(m, k, NT, sizeof(T));
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)))
    return vt::fail(static_cast<int>(e), "gemm_small: %zu bytes of shared memory for %d rows of %d: %s", smem, m, k,
                    cudaGetErrorString(e));
  const int blocks = vt::ceil_div(n, vt_gemm_small::kTileN * NT);
  kernel<<<blocks, vt_gemm_small::kThreads, smem, stream>>>(y, w, x, na, m, n, k, ldw, ldx, ldy);
  return vt::kOk;
}

template <typename T, int MT, bool NORM>
int launch_mt(T* y, const T* w, const T* x, const NormArgs& na, int m, int n, int k, long long ldw, long long ldx,
              long long ldy, cudaStream_t s) {
  switch (tiles_for(n)) {
    case 4: return launch_nt<T, MT, 4, NORM>(y, w, x, na, m, n, k, ldw, ldx, ldy, s);
    case 2: return launch_nt<T, MT, 2, NORM>(y, w, x, na, m, n, k, ldw, ldx, ldy, s);
    default: return launch_nt<T, MT, 1, NORM>(y, w, x, na, m, n, k, ldw, ldx, ldy, s);
  }
}

// One m16 tile up to 16 rows (half the MMAs and x reads of two), two past it.
template <typename T, bool NORM>
int launch(void* y, const void* w, const void* x, const NormArgs& na, int m, int n, int k, long long ldw,
           long long ldx, long long ldy, cudaStream_t s) {
  auto* yo = static_cast<T*>(y);
  auto* wi = static_cast<const T*>(w);
  auto* xi = static_cast<const T*>(x);
  if (m <= vt_gemm_small::kOneTileRows) return launch_mt<T, 1, NORM>(yo, wi, xi, na, m, n, k, ldw, ldx, ldy, s);
  return launch_mt<T, 2, NORM>(yo, wi, xi, na, m, n, k, ldw, ldx, ldy, s);
}

template <bool NORM>
int dispatch(int dtype, void* y, const void* w, const void* x, const NormArgs& na, int m, int n, int k, long long ldw,
             long long ldx, long long ldy, cudaStream_t s) {
  switch (dtype) {
    case vt::kBF16: return launch<__nv_bfloat16, NORM>(y, w, x, na, m, n, k, ldw, ldx, ldy, s);
    case vt::kF16: return launch<__half, NORM>(y, w, x, na, m, n, k, ldw, ldx, ldy, s);
    default: return vt::fail(vt::kUnsupported, "gemm_small: dtype code %d is not 1 (bf16) or 2 (fp16)", dtype);
  }
}

// What every launch needs: the row range, 16-byte rows and bases, the staged rows within the opt-in shared memory.
int check(const void* w, const void* x, int m, int n, int k, long long ldw, long long ldx, long long ldy) {
  if (m < vt_gemm_small::kMinRows || m > vt_gemm_small::kMaxRows)
    return vt::fail(vt::kUnsupported, "gemm_small: rows %d outside [%d, %d]", m, vt_gemm_small::kMinRows,
                    vt_gemm_small::kMaxRows);
  if (n <= 0 || k <= 0) return vt::fail(vt::kBadArgument, "gemm_small: n %d and k %d must be > 0", n, k);
  if (ldw < k || ldx < k || ldy < n) return vt::fail(vt::kBadArgument, "gemm_small: a row stride is below its row length");
  constexpr int vec = vt_gemm_small::kVec;
  if (!vt::aligned16(w) || !vt::aligned16(x) || k % vec || ldw % vec || ldx % vec)
    return vt::fail(vt::kUnsupported, "gemm_small: k %d and the row strides must be multiples of %d, the bases 16-byte "
                    "aligned", k, vec);
  int dev = 0, optin = 0;
  if (cudaGetDevice(&dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
      vt_gemm_small::gemm_small_smem(m, k, 4, 2) + vt_gemm_small::kStaticReserve > static_cast<size_t>(optin))
    return vt::fail(vt::kUnsupported, "gemm_small: %d rows of %d exceed the %d bytes of shared memory a block may use",
                    m, k, optin);
  return vt::kOk;
}

}  // namespace

VT_DEFINE_LAST_ERROR(gemm_small)

// y = x W^T. y: [m, n] (row stride ldy); w: [n, k] (ldw); x: [m, k] (ldx); 2 <= m <= 32; no bias.
VT_EXPORT int vt_gemm_small_gemm(void* y, const void* w, const void* x, int m, int n, int k, long long ldw,
                                 long long ldx, long long ldy, int dtype, void* stream) {
  if (int rc = check(w, x, m, n, k, ldw, ldx, ldy)) return rc;
  const NormArgs none{nullptr, nullptr, nullptr, 0, 0, 0.0f, 0.0f};
  const int rc = dispatch<false>(dtype, y, w, x, none, m, n, k, ldw, ldx, ldy, static_cast<cudaStream_t>(stream));
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemm_small_gemm");
}

// y = rms_norm(x + residual) W^T: gemv_prologue.cu's vt_gemv_prologue_add_rms_norm signature (so the GEMV binding's
// prologue launcher calls it), with no bias, glu or pdl (refused). residual: [m, k] (ldr) or null; residual_out:
// [m, k] (ldro) or null, must not alias x or residual (every block reads them); norm_weight: [k].
VT_EXPORT int vt_gemm_small_add_rms_norm(void* y, const void* w, const void* bias, const void* x,
                                         const void* residual, void* residual_out, const void* norm_weight, int m,
                                         int n, int k, long long ldw, long long ldx, long long ldr, long long ldro,
                                         long long ldy, float mean_scale, float eps, int dtype, int out_dtype,
                                         int glu, int pdl, void* stream) {
  if (bias != nullptr || glu || pdl || out_dtype != dtype)
    return vt::fail(vt::kUnsupported, "gemm_small: a bias, glu, pdl or another out dtype is not taken");
  if (int rc = check(w, x, m, n, k, ldw, ldx, ldy)) return rc;
  if ((residual && ldr < k) || (residual_out && ldro < k))
    return vt::fail(vt::kBadArgument, "gemm_small: a residual row stride is below its row length");
  constexpr int vec = vt_gemm_small::kVec;  // the prologue moves whole rows in 16-byte vectors
  if ((residual && (!vt::aligned16(residual) || ldr % vec)) ||
      (residual_out && (!vt::aligned16(residual_out) || ldro % vec)))
    return vt::fail(vt::kUnsupported, "gemm_small: the residual's row strides must be multiples of %d, the bases "
                    "16-byte aligned", vec);
  if (residual_out != nullptr && (residual_out == residual || residual_out == x))
    return vt::fail(vt::kBadArgument, "gemm_small: residual_out must not alias x or residual (blocks read them)");
  const NormArgs na{residual, residual_out, norm_weight, ldr, ldro, mean_scale, eps};
  const int rc = dispatch<true>(dtype, y, w, x, na, m, n, k, ldw, ldx, ldy, static_cast<cudaStream_t>(stream));
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemm_small_add_rms_norm");
}
