// Launchers for neox RoPE and fused q/k norm + RoPE: argument checks, dtype dispatch (0=fp32, 1=bf16, 2=fp16).
#include "rope.cuh"

namespace {

constexpr long long kMaxBlocks = 2147483647LL;  // CUDA's limit on gridDim.x

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
void launch_rope(void* out, const void* x, const void* cos, const void* sin, long long tokens, int heads,
                 int head_dim, long long x_tok, long long x_head, long long blocks, cudaStream_t stream) {
  vt_rope::rope_neox_kernel<T><<<static_cast<unsigned>(blocks), vt_rope::kRopeThreads, 0, stream>>>(
      static_cast<T*>(out), static_cast<const T*>(x), static_cast<const T*>(cos), static_cast<const T*>(sin), tokens,
      heads, head_dim, x_tok, x_head);
}

template <typename T>
void launch_fused(void* out, const void* x, const void* w, const void* cos, const void* sin, long long tokens,
                  int heads, int head_dim, long long x_tok, long long x_head, float eps, long long blocks,
                  cudaStream_t stream) {
  vt_rope::qk_norm_rope_kernel<T><<<static_cast<unsigned>(blocks), vt_rope::kWarpsPerBlock * vt_rope::kWarpSize, 0,
                                    stream>>>(static_cast<T*>(out), static_cast<const T*>(x),
                                              static_cast<const T*>(w), static_cast<const T*>(cos),
                                              static_cast<const T*>(sin), tokens, heads, head_dim, x_tok, x_head, eps);
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
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: launch_rope<float>(out, x, cos, sin, tokens, heads, head_dim, x_tok, x_head, blocks, s); break;
    case vt::kBF16:
      launch_rope<__nv_bfloat16>(out, x, cos, sin, tokens, heads, head_dim, x_tok, x_head, blocks, s);
      break;
    case vt::kF16: launch_rope<__half>(out, x, cos, sin, tokens, heads, head_dim, x_tok, x_head, blocks, s); break;
    default: return vt::fail(vt::kUnsupported, "rope: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
  return vt::launch_status("vt_rope_neox");
}

// qk_norm (weight: [head_dim]) then neox RoPE; shapes as vt_rope_neox; head_dim <= 2 * 32 * kMaxPairsPerLane
VT_EXPORT int vt_rope_qk_norm_rope(void* out, const void* x, const void* weight, const void* cos, const void* sin,
                                   long long tokens, int heads, int head_dim, long long x_tok, long long x_head,
                                   float eps, int dtype, void* stream) {
  if (int rc = check_args(tokens, heads, head_dim, x_tok, x_head)) return rc;
  if (head_dim > 2 * vt_rope::kWarpSize * vt_rope::kMaxPairsPerLane)
    return vt::fail(vt::kUnsupported, "rope: fused q/k norm supports head_dim <= %d (got %d)",
                    2 * vt_rope::kWarpSize * vt_rope::kMaxPairsPerLane, head_dim);
  if (tokens == 0) return vt::kOk;
  const long long rows = tokens * heads;
  const long long blocks = (rows + vt_rope::kWarpsPerBlock - 1) / vt_rope::kWarpsPerBlock;
  if (blocks > kMaxBlocks) return vt::fail(vt::kBadArgument, "rope: %lld rows exceed one launch", rows);
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32:
      launch_fused<float>(out, x, weight, cos, sin, tokens, heads, head_dim, x_tok, x_head, eps, blocks, s);
      break;
    case vt::kBF16:
      launch_fused<__nv_bfloat16>(out, x, weight, cos, sin, tokens, heads, head_dim, x_tok, x_head, eps, blocks, s);
      break;
    case vt::kF16:
      launch_fused<__half>(out, x, weight, cos, sin, tokens, heads, head_dim, x_tok, x_head, eps, blocks, s);
      break;
    default: return vt::fail(vt::kUnsupported, "rope: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
  return vt::launch_status("vt_rope_qk_norm_rope");
}
