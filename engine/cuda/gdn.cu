// Launchers for the gated delta net decode step and chunked prefill: argument checks, dtype dispatch; torch-free.
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

// q, k: [batch, seq, k_heads, k_dim]; v: [batch, seq, heads, v_dim] (dtype); g, beta: [batch, seq, heads] fp32;
// state, new_state: [batch, heads, k_dim, v_dim] fp32, may be the same buffer; out: [batch, seq, heads, v_dim]
VT_EXPORT int vt_gdn_chunked(const void* q, const void* k, const void* v, const float* g, const float* beta,
                             const float* state, float* new_state, void* out, int batch, int seq, int heads,
                             int k_heads, int k_dim, int v_dim, int chunk, float scale, int l2norm, float eps,
                             int dtype, int out_dtype, void* stream) {
  if (batch < 0 || seq < 0) return vt::fail(vt::kBadArgument, "gdn: batch (%d) and seq (%d) must be >= 0", batch, seq);
  if (heads < 1 || k_heads < 1 || heads % k_heads)
    return vt::fail(vt::kBadArgument, "gdn: heads (%d) must be a positive multiple of k_heads (%d)", heads, k_heads);
  if (k_dim < 1 || k_dim > vt_gdn::kMaxKDim)
    return vt::fail(vt::kBadArgument, "gdn: k_dim must be in [1, %d] (got %d)", vt_gdn::kMaxKDim, k_dim);
  if (v_dim < 1) return vt::fail(vt::kBadArgument, "gdn: v_dim must be >= 1 (got %d)", v_dim);
  if (chunk < 1 || chunk > vt_gdn::kMaxChunk)
    return vt::fail(vt::kBadArgument, "gdn: chunk must be in [1, %d] (got %d)", vt_gdn::kMaxChunk, chunk);
  const size_t smem = sizeof(float) * vt_gdn::chunked_smem_floats(k_dim, chunk);
  int device = 0, limit = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (smem > static_cast<size_t>(limit))
    return vt::fail(vt::kUnsupported, "gdn: k_dim %d with chunk %d needs %zu bytes of shared memory (device: %d)",
                    k_dim, chunk, smem, limit);
  if (batch == 0 || seq == 0) {  // no tokens: the state passes through
    if (new_state != state && batch > 0)
      cudaMemcpyAsync(new_state, state, sizeof(float) * batch * heads * k_dim * v_dim, cudaMemcpyDeviceToDevice,
                      static_cast<cudaStream_t>(stream));
    return vt::launch_status("vt_gdn_chunked");
  }
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(vt::ceil_div(v_dim, vt_gdn::kVTile), batch * heads);
  const dim3 block(vt_gdn::kVTile, vt_gdn::kKSplit);
  bool ok = false;
  with_dtype(dtype, [&](auto tx) {
    ok = with_dtype(out_dtype, [&](auto to) {
      using T = decltype(tx);
      using TO = decltype(to);
      auto kernel = vt_gdn::gdn_chunked_kernel<T, TO>;
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      kernel<<<grid, block, smem, s>>>(static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
                                       g, beta, state, new_state, static_cast<TO*>(out), seq, heads, k_heads, k_dim,
                                       v_dim, chunk, scale, l2norm, eps);
    });
  });
  if (!ok)
    return vt::fail(vt::kUnsupported, "gdn: dtype codes must be 0, 1 or 2 (got q/k/v %d, out %d)", dtype, out_dtype);
  return vt::launch_status("vt_gdn_chunked");
}
