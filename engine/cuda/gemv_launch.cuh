// Launch helpers shared by the GEMV launchers (gemv.cu, gemv_prologue.cu): the SM count, the split-K rule, and a
// launch that is optionally a programmatic dependent of the work before it.
#pragma once
#include "gemv.cuh"

namespace vt_gemv_launch {

constexpr int kMaxDevices = 64;  // SM counts and compute capabilities are cached per device ordinal below this

inline int sm_count() {
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
inline bool pdl_supported() {
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
inline int launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                         bool pdl, Args... args) {
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
  if (err != cudaSuccess) return vt::fail(static_cast<int>(err), "PDL launch: %s", cudaGetErrorString(err));
  return vt::kOk;
}

// Warps that share one W row: kSplitK when one warp per row group would leave the SMs short of loads in flight.
// A function of (n, the device) only, so a row of x gets the same sum order whatever the other rows are.
static_assert(vt_gemv::kWarpsPerBlock % vt_gemv::kSplitK == 0, "split-K groups tile the warps of a block");

inline int split_for(int n) {
  const long long warps = vt::ceil_div(n, vt_gemv::kRowsPerWarp);
  return warps < static_cast<long long>(vt_gemv::kSplitBelowWarpsPerSm) * sm_count() ? vt_gemv::kSplitK : 1;
}

}  // namespace vt_gemv_launch
