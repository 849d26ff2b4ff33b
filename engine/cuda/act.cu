// Launcher for SiLU-and-mul: argument checks, dtype dispatch (0=fp32, 1=bf16, 2=fp16).
#include "act.cuh"

namespace {

constexpr int kMaxGridY = 65535;  // CUDA's limit on gridDim.y, which indexes the column chunks

template <typename T>
void launch(void* out, const void* x, int rows, int inter, long long xs, long long os, cudaStream_t stream) {
  const dim3 grid(rows, vt::ceil_div(inter, vt_act::kThreadsPerBlock));
  vt_act::silu_and_mul_kernel<T><<<grid, vt_act::kThreadsPerBlock, 0, stream>>>(
      static_cast<T*>(out), static_cast<const T*>(x), inter, xs, os);
}

}  // namespace

VT_DEFINE_LAST_ERROR(act)

// out: [rows, inter] (row stride out_stride); x: [rows, 2 * inter] (row stride x_stride)
VT_EXPORT int vt_act_silu_and_mul(void* out, const void* x, int rows, int inter, long long x_stride,
                                  long long out_stride, int dtype, void* stream) {
  if (rows < 0) return vt::fail(vt::kBadArgument, "act: rows must be >= 0 (got %d)", rows);
  if (inter <= 0 || inter > kMaxGridY * vt_act::kThreadsPerBlock)
    return vt::fail(vt::kBadArgument, "act: intermediate size %d outside [1, %d]", inter,
                    kMaxGridY * vt_act::kThreadsPerBlock);
  if (x_stride < 2LL * inter)
    return vt::fail(vt::kBadArgument, "act: x row stride %lld < 2 * inter (%d)", x_stride, 2 * inter);
  if (out_stride < inter) return vt::fail(vt::kBadArgument, "act: out row stride %lld < inter %d", out_stride, inter);
  if (rows == 0) return vt::kOk;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: launch<float>(out, x, rows, inter, x_stride, out_stride, s); break;
    case vt::kBF16: launch<__nv_bfloat16>(out, x, rows, inter, x_stride, out_stride, s); break;
    case vt::kF16: launch<__half>(out, x, rows, inter, x_stride, out_stride, s); break;
    default: return vt::fail(vt::kUnsupported, "act: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
  return vt::launch_status("vt_act_silu_and_mul");
}
