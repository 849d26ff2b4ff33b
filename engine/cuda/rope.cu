// Launchers for neox RoPE and fused q/k norm + RoPE: argument checks, dtype dispatch (0=fp32, 1=bf16, 2=fp16).
#include "rope.cuh"

namespace {

constexpr long long kMaxBlocks = 2147483647LL;  // CUDA's limit on gridDim.x
constexpr const char* kDtypeError = "rope: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)";
constexpr int kRowThreads = vt_rope::kWarpsPerBlock * vt_rope::kWarpSize;  // the fused kernels: a warp per head row

struct RopeArgs {
  void* out;
  const void* x;
  const void* weight;  // fused only
  const void* cos;
  const void* sin;
  long long tokens;
  int heads, head_dim;
  long long x_tok, x_head;
  float mean_scale, eps;  // fused only
  long long blocks;
};

int check_args(long long tokens, int heads, int head_dim, long long x_tok, long long x_head) {
  if (tokens < 0) return vt::fail(vt::kBadArgument, "rope: tokens must be >= 0 (got %lld)", tokens);
  if (heads <= 0) return vt::fail(vt::kBadArgument, "rope: heads must be > 0 (got %d)", heads);
  if (head_dim <= 0 || head_dim % 2)
    return vt::fail(vt::kBadArgument, "rope: head_dim must be positive and even (got %d)", head_dim);
  if (x_head < head_dim) return vt::fail(vt::kBadArgument, "rope: x head stride %lld < head_dim %d", x_head, head_dim);
  if (x_tok < x_head * heads && tokens > 1)
    return vt::fail(vt::kBadArgument, "rope: x token stride %lld < heads * head stride %lld", x_tok, x_head * heads);
  return vt::kOk;
}

template <typename T>
void launch_rope(const RopeArgs& a, cudaStream_t stream) {
  vt_rope::rope_neox_kernel<T><<<static_cast<unsigned>(a.blocks), vt_rope::kRopeThreads, 0, stream>>>(
      static_cast<T*>(a.out), static_cast<const T*>(a.x), static_cast<const T*>(a.cos), static_cast<const T*>(a.sin),
      a.tokens, a.heads, a.head_dim, a.x_tok, a.x_head);
}

template <typename T>
void launch_fused(const RopeArgs& a, cudaStream_t stream) {
  vt_rope::qk_norm_rope_kernel<T><<<static_cast<unsigned>(a.blocks), kRowThreads, 0, stream>>>(
      static_cast<T*>(a.out), static_cast<const T*>(a.x), static_cast<const T*>(a.weight),
      static_cast<const T*>(a.cos), static_cast<const T*>(a.sin), a.tokens, a.heads, a.head_dim, a.x_tok, a.x_head,
      a.mean_scale, a.eps);
}

}  // namespace

VT_DEFINE_LAST_ERROR(rope)

// out: [tokens, heads, head_dim] contiguous; x: same shape with strides (x_tok, x_head, 1);
// cos, sin: [tokens, head_dim] contiguous, x's dtype
VT_EXPORT int vt_rope_neox(void* out, const void* x, const void* cos, const void* sin, long long tokens, int heads,
                           int head_dim, long long x_tok, long long x_head, int dtype, void* stream) {
  if (int rc = check_args(tokens, heads, head_dim, x_tok, x_head)) return rc;
  if (tokens == 0) return vt::kOk;
  const long long pairs = tokens * heads * (head_dim / 2);
  const long long blocks = (pairs + vt_rope::kRopeThreads - 1) / vt_rope::kRopeThreads;
  if (blocks > kMaxBlocks) return vt::fail(vt::kBadArgument, "rope: %lld pairs exceed one launch", pairs);
  const RopeArgs a{out, x, nullptr, cos, sin, tokens, heads, head_dim, x_tok, x_head, 0.0f, 0.0f, blocks};
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: launch_rope<float>(a, s); break;
    case vt::kBF16: launch_rope<__nv_bfloat16>(a, s); break;
    case vt::kF16: launch_rope<__half>(a, s); break;
    default: return vt::fail(vt::kUnsupported, kDtypeError, dtype);
  }
  return vt::launch_status("vt_rope_neox");
}

// qk_norm (weight: [head_dim]; mean_scale: torch's mean factor, rows / numel as floats) then neox RoPE;
// shapes as vt_rope_neox; head_dim <= 2 * kWarpSize * kMaxPairsPerLane
VT_EXPORT int vt_rope_qk_norm_rope(void* out, const void* x, const void* weight, const void* cos, const void* sin,
                                   long long tokens, int heads, int head_dim, long long x_tok, long long x_head,
                                   float mean_scale, float eps, int dtype, void* stream) {
  if (int rc = check_args(tokens, heads, head_dim, x_tok, x_head)) return rc;
  constexpr int max_dim = 2 * vt_rope::kWarpSize * vt_rope::kMaxPairsPerLane;
  if (head_dim > max_dim)
    return vt::fail(vt::kUnsupported, "rope: fused q/k norm supports head_dim <= %d (got %d)", max_dim, head_dim);
  if (tokens == 0) return vt::kOk;
  const long long rows = tokens * heads;
  const long long blocks = (rows + vt_rope::kWarpsPerBlock - 1) / vt_rope::kWarpsPerBlock;
  if (blocks > kMaxBlocks) return vt::fail(vt::kBadArgument, "rope: %lld rows exceed one launch", rows);
  const RopeArgs a{out, x, weight, cos, sin, tokens, heads, head_dim, x_tok, x_head, mean_scale, eps, blocks};
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: launch_fused<float>(a, s); break;
    case vt::kBF16: launch_fused<__nv_bfloat16>(a, s); break;
    case vt::kF16: launch_fused<__half>(a, s); break;
    default: return vt::fail(vt::kUnsupported, kDtypeError, dtype);
  }
  return vt::launch_status("vt_rope_qk_norm_rope");
}

// One launch for a decode layer's q and k: qk_norm + neox RoPE of q (-> q_out) and of k (-> k_out and the k cache
// slot), and v copied to the v cache slot. q/k/v: [tokens, heads or kv_heads, head_dim] with their (token, head)
// strides, last dim contiguous; q_out, k_out: contiguous; q_weight, k_weight: [head_dim]; cos, sin: [tokens,
// head_dim] contiguous; caches: [blocks, block_size, kv_heads, head_dim] contiguous; slots: [tokens] int64 (-1 skips;
// not range-checked); q_mean_scale, k_mean_scale: torch's mean factors of the q and k norms.
VT_EXPORT int vt_rope_qkv_norm_rope_store(void* q_out, void* k_out, void* k_cache, void* v_cache, const void* q,
                                          const void* k, const void* v, const void* q_weight, const void* k_weight,
                                          const void* cos, const void* sin, const void* slots, long long tokens,
                                          int heads, int kv_heads, int head_dim, long long q_tok, long long q_head,
                                          long long k_tok, long long k_head, long long v_tok, long long v_head,
                                          float q_mean_scale, float k_mean_scale, float eps, int dtype, void* stream) {
  if (int rc = check_args(tokens, heads, head_dim, q_tok, q_head)) return rc;
  if (int rc = check_args(tokens, kv_heads, head_dim, k_tok, k_head)) return rc;
  if (int rc = check_args(tokens, kv_heads, head_dim, v_tok, v_head)) return rc;
  constexpr int max_dim = 2 * vt_rope::kWarpSize * vt_rope::kMaxPairsPerLane;
  if (head_dim > max_dim)
    return vt::fail(vt::kUnsupported, "rope: fused q/k norm supports head_dim <= %d (got %d)", max_dim, head_dim);
  if (tokens == 0) return vt::kOk;
  const long long rows = tokens * (heads + 2LL * kv_heads);
  const long long blocks = (rows + vt_rope::kWarpsPerBlock - 1) / vt_rope::kWarpsPerBlock;
  if (blocks > kMaxBlocks) return vt::fail(vt::kBadArgument, "rope: %lld rows exceed one launch", rows);
  const vt_rope::QkvArgs a{q_out,    k_out,    k_cache, v_cache, q,      k,      v,
                           q_weight, k_weight, cos,     sin,     static_cast<const long long*>(slots),
                           tokens,   heads,    kv_heads, head_dim, q_tok, q_head, k_tok, k_head, v_tok, v_head,
                           q_mean_scale, k_mean_scale, eps};
  auto s = static_cast<cudaStream_t>(stream);
  const auto grid = static_cast<unsigned>(blocks);
  switch (dtype) {
    case vt::kF32: vt_rope::qkv_norm_rope_store_kernel<float><<<grid, kRowThreads, 0, s>>>(a); break;
    case vt::kBF16: vt_rope::qkv_norm_rope_store_kernel<__nv_bfloat16><<<grid, kRowThreads, 0, s>>>(a); break;
    case vt::kF16: vt_rope::qkv_norm_rope_store_kernel<__half><<<grid, kRowThreads, 0, s>>>(a); break;
    default: return vt::fail(vt::kUnsupported, kDtypeError, dtype);
  }
  return vt::launch_status("vt_rope_qkv_norm_rope_store");
}
