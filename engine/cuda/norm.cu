// Launchers for RMSNorm and fused add+RMSNorm: argument checks, dtype dispatch (0=fp32, 1=bf16, 2=fp16).
#include "norm.cuh"

namespace {

constexpr const char* kDtypeError = "norm: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)";

struct NormArgs {
  void* out;
  void* residual_out;  // fused only
  const void* residual_in;  // fused only
  const void* x;
  const void* weight;
  int rows, hidden;
  vt_norm::RowStrides strides;
  float mean_scale, eps;
};

int check_stride(const char* name, long long stride, int hidden) {
  if (stride < hidden) return vt::fail(vt::kBadArgument, "norm: %s row stride %lld < hidden %d", name, stride, hidden);
  return vt::kOk;
}

int check_shape(int rows, int hidden) {
  if (rows < 0) return vt::fail(vt::kBadArgument, "norm: rows must be >= 0 (got %d)", rows);
  if (hidden <= 0) return vt::fail(vt::kBadArgument, "norm: hidden must be > 0 (got %d)", hidden);
  return vt::kOk;
}

template <typename T>
void launch_rms(const NormArgs& a, cudaStream_t stream) {
  vt_norm::rms_norm_kernel<T><<<a.rows, vt_norm::kThreadsPerBlock, 0, stream>>>(
      static_cast<T*>(a.out), static_cast<const T*>(a.x), static_cast<const T*>(a.weight), a.hidden, a.strides.x,
      a.strides.out, a.mean_scale, a.eps);
}

template <typename T>
void launch_fused(const NormArgs& a, cudaStream_t stream) {
  vt_norm::fused_add_rms_norm_kernel<T><<<a.rows, vt_norm::kThreadsPerBlock, 0, stream>>>(
      static_cast<T*>(a.out), static_cast<T*>(a.residual_out), static_cast<const T*>(a.residual_in),
      static_cast<const T*>(a.x), static_cast<const T*>(a.weight), a.hidden, a.strides, a.mean_scale, a.eps);
}

}  // namespace

VT_DEFINE_LAST_ERROR(norm)

// out, x: [rows, hidden] with row strides out_stride, x_stride (elements); weight: [hidden];
// mean_scale: the factor torch's mean applies to the sum of squares (rows / numel as floats)
VT_EXPORT int vt_norm_rms_norm(void* out, const void* x, const void* weight, int rows, int hidden, long long x_stride,
                               long long out_stride, float mean_scale, float eps, int dtype, void* stream) {
  if (int rc = check_shape(rows, hidden)) return rc;
  if (int rc = check_stride("x", x_stride, hidden)) return rc;
  if (int rc = check_stride("out", out_stride, hidden)) return rc;
  if (rows == 0) return vt::kOk;
  const NormArgs a{out, nullptr, nullptr, x, weight, rows, hidden, {x_stride, 0, 0, out_stride}, mean_scale, eps};
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: launch_rms<float>(a, s); break;
    case vt::kBF16: launch_rms<__nv_bfloat16>(a, s); break;
    case vt::kF16: launch_rms<__half>(a, s); break;
    default: return vt::fail(vt::kUnsupported, kDtypeError, dtype);
  }
  return vt::launch_status("vt_norm_rms_norm");
}

// out, residual_out, residual_in, x: [rows, hidden] with their own row strides; weight: [hidden].
// residual_out may equal residual_in (an in-place update). mean_scale as vt_norm_rms_norm.
VT_EXPORT int vt_norm_fused_add_rms_norm(void* out, void* residual_out, const void* residual_in, const void* x,
                                         const void* weight, int rows, int hidden, long long out_stride,
                                         long long res_out_stride, long long res_in_stride, long long x_stride,
                                         float mean_scale, float eps, int dtype, void* stream) {
  if (int rc = check_shape(rows, hidden)) return rc;
  if (int rc = check_stride("out", out_stride, hidden)) return rc;
  if (int rc = check_stride("residual_out", res_out_stride, hidden)) return rc;
  if (int rc = check_stride("residual_in", res_in_stride, hidden)) return rc;
  if (int rc = check_stride("x", x_stride, hidden)) return rc;
  if (rows == 0) return vt::kOk;
  const vt_norm::RowStrides st{x_stride, res_in_stride, res_out_stride, out_stride};
  const NormArgs a{out, residual_out, residual_in, x, weight, rows, hidden, st, mean_scale, eps};
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: launch_fused<float>(a, s); break;
    case vt::kBF16: launch_fused<__nv_bfloat16>(a, s); break;
    case vt::kF16: launch_fused<__half>(a, s); break;
    default: return vt::fail(vt::kUnsupported, kDtypeError, dtype);
  }
  return vt::launch_status("vt_norm_fused_add_rms_norm");
}
