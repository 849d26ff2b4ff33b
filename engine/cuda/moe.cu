// Launchers for the MoE kernels: argument checks, dtype dispatch, launch; torch-free.
#include "moe.cuh"

namespace {

using vt::kBF16;
using vt::kF16;
using vt::kF32;

template <typename F>
bool with_dtype(int code, F&& f) {
  if (code == kF32) { f(float{}); return true; }
  if (code == kBF16) { f(__nv_bfloat16{}); return true; }
  if (code == kF16) { f(__half{}); return true; }
  return false;
}

}  // namespace

VT_DEFINE_LAST_ERROR(moe)

// The row block of the grouped GEMM; the alignment must pad to it.
VT_EXPORT int vt_moe_block_m() { return vt_moe::kGemmBlockM; }

// Rows of sorted_ids needed for numel routed slots over `experts` experts, padded per expert to block_m.
VT_EXPORT long long vt_moe_capacity(long long numel, int experts, int block_m) {
  const long long worst = numel + (long long)experts * (block_m - 1);
  return (worst + block_m - 1) / block_m * block_m;
}

// logits: [tokens, experts]; weights: [tokens, top_k] (out dtype); ids: [tokens, top_k] int64
VT_EXPORT int vt_moe_route(const void* logits, void* weights, int64_t* ids, int tokens, int experts, int top_k,
                           int renormalize, int in_dtype, int out_dtype, void* stream) {
  if (tokens < 0) return vt::fail(vt::kBadArgument, "route: tokens must be >= 0 (got %d)", tokens);
  if (experts < 1 || experts > vt_moe::kMaxExperts)
    return vt::fail(vt::kBadArgument, "route: experts must be in [1, 512] (got %d)", experts);
  if (top_k < 1 || top_k > experts || top_k > vt_moe::kMaxTopK)
    return vt::fail(vt::kBadArgument, "route: top_k must be in [1, min(experts, 32)] (got %d)", top_k);
  if (tokens == 0) return 0;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = (tokens + vt_moe::kRouteWarpsPerBlock - 1) / vt_moe::kRouteWarpsPerBlock;
  bool ok = false;
  with_dtype(in_dtype, [&](auto ti) {
    ok = with_dtype(out_dtype, [&](auto to) {
      using TI = decltype(ti);
      using TO = decltype(to);
      vt_moe::route_kernel<TI, TO><<<blocks, vt_moe::kRouteWarpsPerBlock * vt_moe::kWarp, 0, s>>>(
          static_cast<const TI*>(logits), static_cast<TO*>(weights), ids, tokens, experts, top_k, renormalize);
    });
  });
  if (!ok)
    return vt::fail(vt::kUnsupported,
                    "route: logits and weights dtype codes must be 0, 1 or 2 (got %d, %d)", in_dtype, out_dtype);
  return vt::launch_status("moe");
}

// ids: [numel] int64; sorted_ids: [capacity]; block_expert: [capacity / block_m]; offsets: [experts + 1]
VT_EXPORT int vt_moe_align(const int64_t* ids, int32_t* sorted_ids, int32_t* block_expert, int32_t* offsets,
                           int numel, int experts, int block_m, int capacity, void* stream) {
  if (numel < 0) return vt::fail(vt::kBadArgument, "align: numel must be >= 0 (got %d)", numel);
  if (experts < 1 || experts > vt_moe::kMaxAlignExperts)
    return vt::fail(vt::kBadArgument, "align: experts must be in [1, 1024] (got %d)", experts);
  if (block_m < 1) return vt::fail(vt::kBadArgument, "align: block_m must be >= 1 (got %d)", block_m);
  if (capacity % block_m || capacity < vt_moe_capacity(numel, experts, block_m))
    return vt::fail(vt::kBadArgument,
                    "align: capacity must be a block_m multiple >= vt_moe_capacity(numel, experts, block_m) "
                    "(got %d)", capacity);
  const size_t smem = sizeof(int32_t) * ((size_t)experts * (2 + vt_moe::kAlignWarps) + 1);
  vt_moe::align_kernel<<<1, vt_moe::kAlignThreads, smem, static_cast<cudaStream_t>(stream)>>>(
      ids, sorted_ids, block_expert, offsets, numel, experts, block_m, capacity);
  return vt::launch_status("moe");
}

// x: [tokens, hidden]; gate_up: [experts, 2*inter, hidden]; down: [experts, hidden, inter] (all dtype);
// weights: [tokens, top_k] (dtype); ids: [tokens, top_k] int64; sorted_ids, block_expert: from vt_moe_align
// with block_m = vt_moe_block_m(); act: [tokens*top_k, inter], y: [tokens*top_k, hidden] (dtype, scratch);
// out: [tokens, hidden] (out dtype)
VT_EXPORT int vt_moe_experts(const void* x, const void* gate_up, const void* down, const void* weights,
                             const int64_t* ids, const int32_t* sorted_ids, const int32_t* block_expert, void* act,
                             void* y, void* out, int tokens, int hidden, int inter, int experts, int top_k,
                             int capacity, int dtype, int out_dtype, void* stream) {
  if (tokens < 0 || hidden < 1 || inter < 1)
    return vt::fail(vt::kBadArgument, "experts: need tokens >= 0, hidden >= 1, inter >= 1 (got %d, %d, %d)",
                    tokens, hidden, inter);
  if (top_k < 1 || top_k > experts || top_k > vt_moe::kMaxTopK)
    return vt::fail(vt::kBadArgument, "experts: top_k must be in [1, min(experts, 32)] (got %d)", top_k);
  if (capacity % vt_moe::kGemmBlockM)
    return vt::fail(vt::kBadArgument,
                    "experts: capacity must be a multiple of vt_moe_block_m() (got %d)", capacity);
  if (tokens == 0) return 0;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int numel = tokens * top_k;
  const int m_blocks = capacity / vt_moe::kGemmBlockM;
  const dim3 g1(m_blocks, (inter + vt_moe::kGemmBlockN - 1) / vt_moe::kGemmBlockN);
  const dim3 g2(m_blocks, (hidden + vt_moe::kGemmBlockN - 1) / vt_moe::kGemmBlockN);
  bool ok = false;
  with_dtype(dtype, [&](auto tx) {
    ok = with_dtype(out_dtype, [&](auto to) {
      using T = decltype(tx);
      using TO = decltype(to);
      vt_moe::grouped_gemm_kernel<T, true><<<g1, vt_moe::kGemmThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<const T*>(gate_up), act, sorted_ids, block_expert, numel, top_k,
          inter, hidden);
      vt_moe::grouped_gemm_kernel<T, false><<<g2, vt_moe::kGemmThreads, 0, s>>>(
          static_cast<const T*>(act), static_cast<const T*>(down), y, sorted_ids, block_expert, numel, top_k, hidden,
          inter);
      vt_moe::combine_kernel<T, TO><<<tokens, vt_moe::kCombineThreads, 0, s>>>(
          static_cast<const T*>(y), static_cast<const T*>(weights), ids, static_cast<TO*>(out), top_k, hidden,
          experts);
    });
  });
  if (!ok)
    return vt::fail(vt::kUnsupported,
                    "experts: x and out dtype codes must be 0, 1 or 2 (got %d, %d)", dtype, out_dtype);
  return vt::launch_status("moe");
}
