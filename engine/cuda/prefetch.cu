// Launcher of the L2 prefetch (prefetch.cuh): checks the ranges, refuses a device below sm_90, launches on the stream.
#include "prefetch.cuh"

namespace {

namespace vp = vt_prefetch;
constexpr int kMinMajor = 9;  // cp.async.bulk.prefetch is sm_90's

}  // namespace

VT_DEFINE_LAST_ERROR(prefetch)

VT_EXPORT int vt_prefetch_max_ranges() { return vp::kMaxRanges; }

// Range i: n_i bytes from p_i (a multiple of 16 from a 16-byte aligned base); n_i = 0 leaves it unused (p_i may be
// null). The argument checks come first: they answer the same on every machine, with or without a GPU.
VT_EXPORT int vt_prefetch_l2(const void* p0, long long n0, const void* p1, long long n1, const void* p2, long long n2,
                             const void* p3, long long n3, void* stream) {
  const void* base[vp::kMaxRanges] = {p0, p1, p2, p3};
  const long long bytes[vp::kMaxRanges] = {n0, n1, n2, n3};
  vp::Ranges r{};
  long long chunks = 0;
  for (int i = 0; i < vp::kMaxRanges; ++i) {
    if (bytes[i] < 0 || bytes[i] % vp::kAlign)
      return vt::fail(vt::kBadArgument, "prefetch: range %d: %lld bytes, not a multiple of %d", i, bytes[i],
                      vp::kAlign);
    if (bytes[i] > 0 && (base[i] == nullptr || !vt::aligned16(base[i])))
      return vt::fail(vt::kBadArgument, "prefetch: range %d: base %p is not %d-byte aligned", i, base[i], vp::kAlign);
    r.base[i] = static_cast<const char*>(base[i]);
    r.bytes[i] = bytes[i];
    chunks += (bytes[i] + vp::kChunkBytes - 1) / vp::kChunkBytes;
  }
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
    return vt::fail(vt::kUnsupported, "prefetch: no current CUDA device");
  if (major < kMinMajor)
    return vt::fail(vt::kUnsupported, "prefetch: the bulk L2 prefetch needs sm_90 (this device is sm_%d)", major);
  if (chunks == 0) return vt::kOk;
  const auto blocks = static_cast<unsigned>((chunks + vp::kThreads - 1) / vp::kThreads);
  vp::l2_prefetch_kernel<<<blocks, vp::kThreads, 0, static_cast<cudaStream_t>(stream)>>>(r);
  return vt::launch_status("vt_prefetch_l2");
}
