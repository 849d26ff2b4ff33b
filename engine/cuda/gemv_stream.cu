// Launchers of the streamed decode GEMV (gemv_stream.cuh): plain, GLU, and with the residual add + RMSNorm prologue
// (plain or GLU). Argument checks, the ring's size, dtype dispatch (0=fp32, 1=bf16, 2=fp16; y in x's dtype).
#include <algorithm>

#include "gemv_launch.cuh"
#include "gemv_stream.cuh"

namespace {

using vt_gemv_launch::kMaxDevices;
using vt_gemv_launch::launch_kernel;
using vt_gemv_launch::split_for;
namespace vs = vt_gemv_stream;

int smem_optin() {  // the dynamic shared memory one block may opt in to, per device
  static int cached[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return 0;
  if (cached[dev] == 0) {
    int bytes = 0;
    cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    cached[dev] = bytes > 0 ? bytes : 1;
  }
  return cached[dev];
}

// Opt `Kernel` in to `bytes` of dynamic shared memory on this device (once per kernel, device and larger size; the
// kernel is a template argument, so each instantiation keeps its own record).
template <auto Kernel>
int allow_smem(int bytes) {
  static int granted[kMaxDevices] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices)
    return vt::fail(vt::kUnsupported, "gemv stream: no current device below ordinal %d", kMaxDevices);
  if (bytes <= granted[dev]) return vt::kOk;
  const cudaError_t err = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess)
    return vt::fail(static_cast<int>(err), "gemv stream: %d bytes of shared memory: %s", bytes, cudaGetErrorString(err));
  granted[dev] = bytes;
  return vt::kOk;
}

struct Plan {
  dim3 grid;
  int slots = 0, x_region = 0;
  size_t smem = 0;
};

// The resident grid and each warp's ring: as many slots as the items a warp takes (at most kMaxSlots), within
// kRingBytes and what the device lets a block opt in to (less the static barriers and norm partials).
int plan(int m, int n, int k, int elt, int rpw, Plan* out) {
  constexpr int kStaticReserve = 1024;
  const int blocks = std::min(vt::ceil_div(n, vs::kWarps), vs::kBlocksPerSm * vt_gemv_launch::sm_count());
  const int per_warp = vt::ceil_div(n, blocks * vs::kWarps);
  const int x_region = vt::ceil_div(m * k * elt, vs::kXAlign) * vs::kXAlign;
  const long long slot_bytes = static_cast<long long>(vs::kWarps) * rpw * k * elt;
  const long long budget = std::min<long long>(vs::kRingBytes, smem_optin() - kStaticReserve - x_region);
  const int slots = static_cast<int>(std::min<long long>({vs::kMaxSlots, per_warp, budget / slot_bytes}));
  if (slots < std::min(2, per_warp))
    return vt::fail(vt::kUnsupported, "gemv stream: rows of %d x %d bytes leave fewer than 2 slots per warp in %lld "
                    "bytes of shared memory", rpw, k * elt, budget);
  out->grid = dim3(blocks);
  out->slots = slots;
  out->x_region = x_region;
  out->smem = static_cast<size_t>(x_region) + static_cast<size_t>(slot_bytes) * slots;
  return vt::kOk;
}

// What every streamed launch needs: 1 to 8 rows whose K values fit the staged x, 16-byte rows of W, sm_90.
int check(const void* w, const void* x, int m, int n, int k, long long ldw, long long ldx, int elt) {
  if (m < 1 || m > vt_gemv::kMaxRows)
    return vt::fail(vt::kUnsupported, "gemv stream: rows %d outside [1, %d]", m, vt_gemv::kMaxRows);
  if (n <= 0 || k <= 0) return vt::fail(vt::kBadArgument, "gemv stream: n %d and k %d must be > 0", n, k);
  if (ldw < k) return vt::fail(vt::kBadArgument, "gemv stream: weight row stride %lld < in features %d", ldw, k);
  const int vec = vt_gemv::kVectorBytes / elt;
  if (!vt::aligned16(w) || !vt::aligned16(x) || k % vec || ldw % vec || ldx % vec)
    return vt::fail(vt::kUnsupported, "gemv stream: k %d and the row strides must be multiples of %d, the bases "
                    "16-byte aligned", k, vec);
  if (static_cast<long long>(m) * k * elt > vt_gemv::kMaxSmemXBytes)
    return vt::fail(vt::kUnsupported, "gemv stream: %d rows of %d in features exceed %d bytes of shared memory", m,
                    k, vt_gemv::kMaxSmemXBytes);
  if (!vt_gemv_launch::pdl_supported())  // last: the checks above answer the same on every machine
    return vt::fail(vt::kUnsupported, "gemv stream: bulk copies into shared memory need sm_90 or newer");
  return vt::kOk;
}

template <auto Kernel, typename... Args>
int launch_planned(const Plan& p, bool pdl, cudaStream_t s, Args... args) {
  if (int rc = allow_smem<Kernel>(static_cast<int>(p.smem))) return rc;
  return launch_kernel(Kernel, p.grid, dim3(vs::kThreads), p.smem, s, pdl, args..., p.slots, p.x_region);
}

// The kind of launch: plain (x as it is), GLU (x as it is, [2n, k] gate/up W), the norm prologue (plain or GLU).
enum Kind : int { kPlain = 0, kGlu = 1, kNorm = 2, kNormGlu = 3 };

struct Args {
  void* y;
  const void* w;
  const void* x;
  const void* bias;
  vt_gemv::PrologueArgs pa;
  int m, n, k;
  long long ldw, ldx, ldy;
};

template <typename T, int MT, int SPLIT, bool PDL>
int launch_kind(int kind, const Args& a, const Plan& p, cudaStream_t s) {
  constexpr int vec = vt_gemv::kVectorBytes / sizeof(T);
  auto* y = static_cast<T*>(a.y);
  auto* w = static_cast<const T*>(a.w);
  auto* x = static_cast<const T*>(a.x);
  auto* b = static_cast<const T*>(a.bias);
  switch (kind) {
    case kPlain:
      return launch_planned<vs::stream_kernel<T, vec, MT, SPLIT, PDL>>(p, PDL, s, y, w, x, b, a.m, a.n, a.k, a.ldw,
                            a.ldx, a.ldy);
    case kNorm:
      return launch_planned<vs::stream_norm_kernel<T, vec, MT, 1, SPLIT, PDL>>(p, PDL, s, y, w, b, a.pa, a.m, a.n, a.k,
                            a.ldw, a.ldy);
    default:
      break;
  }
  if constexpr (SPLIT == 1) {
    if (kind == kGlu)
      return launch_planned<vs::stream_glu_kernel<T, vec, MT, PDL>>(p, PDL, s, y, w, x, b, a.m, a.n, a.k, a.ldw,
                            a.ldx, a.ldy);
    return launch_planned<vs::stream_norm_kernel<T, vec, MT, 2, 1, PDL>>(p, PDL, s, y, w, b, a.pa, a.m, a.n, a.k,
                          a.ldw, a.ldy);
  }
  return vt::fail(vt::kUnsupported, "gemv stream: the GLU form takes no split");
}

template <typename T, int MT>
int launch_split(int kind, int split, bool pdl, const Args& a, const Plan& p, cudaStream_t s) {
  if (split == 1)
    return pdl ? launch_kind<T, MT, 1, true>(kind, a, p, s) : launch_kind<T, MT, 1, false>(kind, a, p, s);
  return pdl ? launch_kind<T, MT, vt_gemv::kSplitK, true>(kind, a, p, s)
             : launch_kind<T, MT, vt_gemv::kSplitK, false>(kind, a, p, s);
}

template <typename T>
int launch_rows(int kind, int split, bool pdl, const Args& a, const Plan& p, cudaStream_t s) {
  if (a.m == 1) return launch_split<T, 1>(kind, split, pdl, a, p, s);
  if (a.m <= 2) return launch_split<T, 2>(kind, split, pdl, a, p, s);
  if (a.m <= 4) return launch_split<T, 4>(kind, split, pdl, a, p, s);
  return launch_split<T, vt_gemv::kMaxRows>(kind, split, pdl, a, p, s);
}

int dtype_size(int dtype) { return dtype == vt::kF32 ? 4 : 2; }

int launch(int kind, const Args& a, int dtype, bool pdl, cudaStream_t s) {
  if (dtype != vt::kF32 && dtype != vt::kBF16 && dtype != vt::kF16)
    return vt::fail(vt::kUnsupported, "gemv stream: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  const int elt = dtype_size(dtype);
  if (int rc = check(a.w, a.x, a.m, a.n, a.k, a.ldw, a.ldx, elt)) return rc;
  if (a.m > 1 && (a.ldx < a.k || a.ldy < a.n))
    return vt::fail(vt::kBadArgument, "gemv stream: a row stride is below its row length");
  const bool glu = kind == kGlu || kind == kNormGlu;
  const int split = split_for(glu ? 2 * a.n : a.n);  // the fast path's rule: its sum order
  if (glu && split != 1)
    return vt::fail(vt::kUnsupported, "gemv stream: %d gate/up rows would split K (the plain GEMV's rule)", 2 * a.n);
  Plan p;
  if (int rc = plan(a.m, a.n, a.k, elt, glu ? 2 : 1, &p)) return rc;
  switch (dtype) {
    case vt::kF32: return launch_rows<float>(kind, split, pdl, a, p, s);
    case vt::kBF16: return launch_rows<__nv_bfloat16>(kind, split, pdl, a, p, s);
    default: return launch_rows<__half>(kind, split, pdl, a, p, s);
  }
}

}  // namespace

VT_DEFINE_LAST_ERROR(gemv_stream)

// y = x W^T (+ bias) with W streamed through shared memory. y: [m, n] (row stride ldy), x's dtype; w: [n, k] (ldw);
// x: [m, k] (ldx); bias: [n] or null; 1 <= m <= 8; sm_90. glu != 0: w is [2n, k] (gate rows, then up rows) and
// y = silu_and_mul of the product, [m, n]. pdl != 0: launched as a programmatic dependent. The bits of vt_gemv_gemv
// (glu: of vt_gemv_gemv_glu).
VT_EXPORT int vt_gemv_stream_gemv(void* y, const void* w, const void* x, const void* bias, int m, int n, int k,
                                  long long ldw, long long ldx, long long ldy, int dtype, int glu, int pdl,
                                  void* stream) {
  const Args a{y, w, x, bias, {}, m, n, k, ldw, ldx, ldy};
  const int rc = launch(glu ? kGlu : kPlain, a, dtype, pdl != 0, static_cast<cudaStream_t>(stream));
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemv_stream_gemv");
}

// y = rms_norm(x + residual) W^T (+ bias), the norm in the streamed GEMV's prologue; the arguments and bits of
// vt_gemv_prologue_add_rms_norm (y in x's dtype; residual_out must not alias x or residual).
VT_EXPORT int vt_gemv_stream_add_rms_norm(void* y, const void* w, const void* bias, const void* x,
                                          const void* residual, void* residual_out, const void* norm_weight, int m,
                                          int n, int k, long long ldw, long long ldx, long long ldr, long long ldro,
                                          long long ldy, float mean_scale, float eps, int dtype, int glu, int pdl,
                                          void* stream) {
  if (m > 1 && ((residual && ldr < k) || (residual_out && ldro < k)))
    return vt::fail(vt::kBadArgument, "gemv stream: a residual row stride is below its row length");
  if (residual_out != nullptr && (residual_out == residual || residual_out == x))
    return vt::fail(vt::kBadArgument, "gemv stream: residual_out must not alias x or residual (blocks read them)");
  const vt_gemv::PrologueArgs pa{x, residual, residual_out, norm_weight, ldx, ldr, ldro, mean_scale, eps};
  const Args a{y, w, x, bias, pa, m, n, k, ldw, ldx, ldy};
  const int rc = launch(glu ? kNormGlu : kNorm, a, dtype, pdl != 0, static_cast<cudaStream_t>(stream));
  return rc != vt::kOk ? rc : vt::launch_status("vt_gemv_stream_add_rms_norm");
}
