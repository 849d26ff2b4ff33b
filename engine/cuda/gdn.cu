// Launcher for the gated delta net decode step: argument checks, dtype dispatch; torch-free.
#include "gdn.cuh"

namespace {

template <typename F>
bool with_dtype(int code, F&& f) {
  if (code == vt::kF32) { f(float{}); return true; }
  if (code == vt::kBF16) { f(__nv_bfloat16{}); return true; }
  if (code == vt::kF16) { f(__half{}); return true; }
  return false;
}

}  // namespace

VT_DEFINE_LAST_ERROR(gdn)

// q, k: [batch, k_heads, k_dim]; v: [batch, heads, v_dim] (dtype); g, beta: [batch, heads] fp32;
// state, new_state: [batch, heads, k_dim, v_dim] fp32, may be the same buffer; out: [batch, heads, v_dim] (out dtype)
VT_EXPORT int vt_gdn_decode(const void* q, const void* k, const void* v, const float* g, const float* beta,
                            const float* state, float* new_state, void* out, int batch, int heads, int k_heads,
                            int k_dim, int v_dim, float scale, int l2norm, float eps, int dtype, int out_dtype,
                            void* stream) {
  if (batch < 0) return vt::fail(vt::kBadArgument, "gdn: batch must be >= 0 (got %d)", batch);
  if (heads < 1 || k_heads < 1 || heads % k_heads)
    return vt::fail(vt::kBadArgument, "gdn: heads (%d) must be a positive multiple of k_heads (%d)", heads, k_heads);
  if (k_dim < 1 || k_dim > vt_gdn::kMaxKDim)
    return vt::fail(vt::kBadArgument, "gdn: k_dim must be in [1, %d] (got %d)", vt_gdn::kMaxKDim, k_dim);
  if (v_dim < 1) return vt::fail(vt::kBadArgument, "gdn: v_dim must be >= 1 (got %d)", v_dim);
  if (batch == 0) return vt::kOk;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(vt::ceil_div(v_dim, vt_gdn::kVTile), batch * heads);
  const dim3 block(vt_gdn::kVTile, vt_gdn::kKSplit);
  bool ok = false;
  with_dtype(dtype, [&](auto tx) {
    ok = with_dtype(out_dtype, [&](auto to) {
      using T = decltype(tx);
      using TO = decltype(to);
      vt_gdn::gdn_decode_kernel<T, TO><<<grid, block, 0, s>>>(
          static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), g, beta, state, new_state,
          static_cast<TO*>(out), heads, k_heads, k_dim, v_dim, scale, l2norm, eps);
    });
  });
  if (!ok)
    return vt::fail(vt::kUnsupported, "gdn: dtype codes must be 0, 1 or 2 (got q/k/v %d, out %d)", dtype, out_dtype);
  return vt::launch_status("vt_gdn_decode");
}
