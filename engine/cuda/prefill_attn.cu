// Launcher for varlen prefill/extend attention (prefill_attn.cuh): argument checks, head_dim and dtype
// dispatch, launch on the caller's stream. bf16 and fp16 (the tensor-core mma takes 16-bit inputs);
// head_dim 32, 64, 128 or 256; any GQA group; a sliding window or none.
#include "prefill_attn.cuh"

VT_DEFINE_LAST_ERROR(prefill_attn)

namespace {

template <typename T, int D> int launch_d(const vt_prefill::Args& a, int tiles, cudaStream_t s) {
  constexpr int smem = vt_prefill::smem_bytes<T, D>();
  auto* kernel = vt_prefill::prefill_attn_kernel<T, D>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess) return vt::fail(static_cast<int>(err), "prefill_attn: smem %d: %s", smem, cudaGetErrorString(err));
  kernel<<<dim3(tiles, a.num_q_heads), vt_prefill::kThreads, smem, s>>>(a);
  return vt::launch_status("prefill_attn_kernel");
}

template <typename T> int launch(const vt_prefill::Args& a, int head_dim, int tiles, cudaStream_t s) {
  switch (head_dim) {
    case 32: return launch_d<T, 32>(a, tiles, s);
    case 64: return launch_d<T, 64>(a, tiles, s);
    case 128: return launch_d<T, 128>(a, tiles, s);
    case 256: return launch_d<T, 256>(a, tiles, s);
    default: return vt::fail(vt::kUnsupported, "prefill_attn: head_dim %d not in {32, 64, 128, 256}", head_dim);
  }
}

}  // namespace

// out, q: [tokens, num_q_heads, head_dim] (q's tokens q_stride elements apart, out contiguous); paged
// (block_tables non-null): k, v [num_blocks, block_size, num_kv_heads, head_dim], block_tables [num_seqs,
// max_blocks] int32; contiguous (block_tables null): k, v [tokens, num_kv_heads, head_dim], the new tokens'
// own rows. seq_lens, prefix_lens: [num_seqs] int32 on the device (prefix_lens null: all 0), summing to
// tokens. window 0: no sliding window.
VT_EXPORT int vt_prefill_attn(void* out, const void* q, const void* k, const void* v, const int* block_tables,
                              const int* seq_lens, const int* prefix_lens, int tokens, long long q_stride,
                              int num_seqs, int num_q_heads, int num_kv_heads, int head_dim, int block_size,
                              int max_blocks, float scale, int window, int dtype, void* stream) {
  if (tokens < 0 || num_seqs < 0 || num_q_heads <= 0 || num_kv_heads <= 0 || window < 0 || q_stride < 0)
    return vt::fail(vt::kBadArgument,
                    "prefill_attn: bad sizes tokens=%d num_seqs=%d num_q_heads=%d num_kv_heads=%d window=%d", tokens,
                    num_seqs, num_q_heads, num_kv_heads, window);
  if (num_q_heads % num_kv_heads != 0)
    return vt::fail(vt::kBadArgument, "prefill_attn: num_q_heads %d is not a multiple of num_kv_heads %d",
                    num_q_heads, num_kv_heads);
  if (block_tables != nullptr && (block_size <= 0 || max_blocks <= 0))
    return vt::fail(vt::kBadArgument, "prefill_attn: block_size %d and max_blocks %d must be positive", block_size,
                    max_blocks);
  if (q_stride % 8 != 0 || !(vt::aligned16(q) && vt::aligned16(k) && vt::aligned16(v) && vt::aligned16(out)))
    return vt::fail(vt::kBadArgument, "prefill_attn: q, k, v and out must be 16-byte aligned (q_stride %lld)",
                    q_stride);
  if (tokens == 0 || num_seqs == 0) return vt::kOk;
  // ceil(tokens / kBlockM) + num_seqs bounds the query tiles of any split of tokens into num_seqs sequences
  const int tiles = vt::ceil_div(tokens, vt_prefill::kBlockM) + num_seqs;
  const vt_prefill::Args a{q,        k,           v,           out,        block_tables, seq_lens,   prefix_lens,
                           q_stride, num_seqs,    num_q_heads, num_kv_heads, block_size, max_blocks, window,
                           scale};
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kBF16: return launch<__nv_bfloat16>(a, head_dim, tiles, s);
    case vt::kF16: return launch<__half>(a, head_dim, tiles, s);
    default: return vt::fail(vt::kUnsupported, "prefill_attn: dtype code %d (the mma arm takes bf16 and fp16)", dtype);
  }
}
