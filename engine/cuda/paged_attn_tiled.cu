// Launcher for the tiled (tensor-core, cp.async-pipelined, two-pass) paged decode attention: argument
// checks, the split count from the device's occupancy, dtype and head_dim dispatch, the split sum.
// bf16 and fp16; head_dim 64, 128 or 256; 1 to 8 query heads per KV head. Another shape or dtype
// returns kUnsupported (the binding says which; the caller picks another arm).
#include <utility>

#include "gemv_launch.cuh"
#include "paged_attn_tiled.cuh"

VT_DEFINE_LAST_ERROR(paged_attn_tiled)

namespace {

constexpr int kMaxGridZ = 65535;  // CUDA's limit on gridDim.z, which indexes the sequences

template <typename T, int D>
int opt_in_smem() {
  const std::pair<const void*, int> kernels[] = {
      {reinterpret_cast<const void*>(vt_tiled::tiled_scores_kernel<T, D>), vt_tiled::smem_bytes<T, D>()},
      {reinterpret_cast<const void*>(vt_tiled::tiled_pv_kernel<T, D, false>), vt_tiled::smem_bytes<T, D>()},
      {reinterpret_cast<const void*>(vt_tiled::tiled_pv_kernel<T, D, true>), vt_tiled::pipelined_smem_bytes<T, D>()}};
  for (const auto& [kernel, bytes] : kernels) {
    const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess)
      return vt::fail(static_cast<int>(err), "paged_attn_tiled: %d bytes of shared memory for head_dim %d: %s", bytes,
                      D, cudaGetErrorString(err));
  }
  return vt::kOk;
}

// The fewer resident blocks of the two passes (the split count serves both).
template <typename T, int D>
int blocks_per_sm(int* out) {
  if (int rc = opt_in_smem<T, D>()) return rc;
  int scores = 0, pv = 0;
  cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &scores, vt_tiled::tiled_scores_kernel<T, D>, vt_tiled::kThreads, vt_tiled::smem_bytes<T, D>());
  if (err == cudaSuccess)
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&pv, vt_tiled::tiled_pv_kernel<T, D, false>, vt_tiled::kThreads,
                                                        vt_tiled::smem_bytes<T, D>());
  if (err != cudaSuccess)
    return vt::fail(static_cast<int>(err), "paged_attn_tiled occupancy: %s", cudaGetErrorString(err));
  *out = scores < pv ? scores : pv;
  return vt::kOk;
}

template <typename T>
int blocks_per_sm_for(int head_dim, int* out) {
  switch (head_dim) {
    case 64: return blocks_per_sm<T, 64>(out);
    case 128: return blocks_per_sm<T, 128>(out);
    case 256: return blocks_per_sm<T, 256>(out);
    default: return vt::fail(vt::kUnsupported, "paged_attn_tiled: head_dim %d not in {64, 128, 256}", head_dim);
  }
}

struct Buffers {
  void* out;
  void* scores;
  float* m_part;
  float* l_part;
  float* o_part;
  int cap;
  bool pipelined = false;     // the pipelined P.V pass (VT_ATTN_PV_PIPELINED)
  int* counters = nullptr;  // with it and several splits: its last split adds the partial sums
  bool pdl = false;         // with it: the P.V pass a programmatic dependent of the scores pass (VT_ATTN_PDL)
};

template <typename T, int D>
int launch_d(const vt::PagedArgs& a, int batch, int num_splits, const Buffers& buf, cudaStream_t s) {
  if (int rc = opt_in_smem<T, D>()) return rc;
  const dim3 grid(a.num_kv_heads, num_splits, batch);
  constexpr int smem = vt_tiled::smem_bytes<T, D>();
  T* scores = static_cast<T*>(buf.scores);
  vt_tiled::tiled_scores_kernel<T, D><<<grid, vt_tiled::kThreads, smem, s>>>(a, num_splits, buf.cap, scores,
                                                                              buf.m_part, buf.l_part);
  if (int rc = vt::launch_status("tiled_scores_kernel")) return rc;
  if (buf.pipelined) {
    const int rc = vt_gemv_launch::launch_kernel(vt_tiled::tiled_pv_kernel<T, D, true>, grid, dim3(vt_tiled::kThreads),
                                                 vt_tiled::pipelined_smem_bytes<T, D>(), s, buf.pdl, a, num_splits,
                                                 buf.cap, static_cast<const T*>(scores),
                                                 static_cast<const float*>(buf.m_part),
                                                 static_cast<const float*>(buf.l_part), static_cast<T*>(buf.out),
                                                 buf.o_part, buf.counters);
    if (rc != vt::kOk) return rc;
  } else
    vt_tiled::tiled_pv_kernel<T, D, false><<<grid, vt_tiled::kThreads, smem, s>>>(
        a, num_splits, buf.cap, scores, buf.m_part, buf.l_part, static_cast<T*>(buf.out), buf.o_part);
  if (int rc = vt::launch_status("tiled_pv_kernel")) return rc;
  if (num_splits == 1 || (buf.pipelined && buf.counters != nullptr)) return vt::kOk;  // no partial sums left
  vt_tiled::tiled_sum_kernel<T><<<dim3(a.num_q_heads, batch), vt_tiled::kSumThreads, 0, s>>>(
      buf.o_part, static_cast<T*>(buf.out), a.num_q_heads, D, num_splits);
  return vt::launch_status("tiled_sum_kernel");
}

template <typename T>
int launch(const vt::PagedArgs& a, int batch, int num_splits, const Buffers& buf, cudaStream_t s) {
  switch (a.head_dim) {
    case 64: return launch_d<T, 64>(a, batch, num_splits, buf, s);
    case 128: return launch_d<T, 128>(a, batch, num_splits, buf, s);
    case 256: return launch_d<T, 256>(a, batch, num_splits, buf, s);
    default: return vt::fail(vt::kUnsupported, "paged_attn_tiled: head_dim %d not in {64, 128, 256}", a.head_dim);
  }
}

// The one-launch kernel's dynamic shared memory for a split of at most span_tokens positions.
template <typename T, int D, int S>
int fused_smem(int group, int span_tokens) {
  return vt_tiled::fused_pipe_bytes<T, D, S>() + group * span_tokens * static_cast<int>(sizeof(T));
}

// Whether the one-launch kernel with S stages takes this call: its shared memory fits a block and the
// whole grid is resident at once (its blocks wait on each other). A CUDA error is the return code.
template <typename T, int D, int S>
int fused_fits_s(long long blocks, int group, int span_tokens, int sms, int max_smem, bool* fits) {
  const int smem = fused_smem<T, D, S>(group, span_tokens);
  *fits = false;
  if (smem > max_smem) return vt::kOk;
  const auto kernel = vt_tiled::tiled_fused_kernel<T, D, S>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  int resident = 0;
  if (err == cudaSuccess)
    err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, kernel, vt_tiled::kThreads, smem);
  if (err != cudaSuccess)
    return vt::fail(static_cast<int>(err), "paged_attn_tiled fused occupancy: %s", cudaGetErrorString(err));
  *fits = resident > 0 && blocks <= (long long)sms * resident;
  return vt::kOk;
}

// The stages the one-launch kernel runs with for this call: 3 or 2 (the most whose grid is resident at
// once), or 0 where it does not run: one split (the two passes keep more blocks per SM and need no
// wait: 327 against 402 us at batch 64, context 4096, H200), or a grid too large to be resident.
template <typename T, int D>
int fused_stages_d(int batch, int num_kv_heads, int group, int span_tokens, int num_splits, int* stages) {
  *stages = 0;
  if (num_splits == 1) return vt::kOk;
  int dev = 0, sms = 0, max_smem = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) ||
      cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev))
    return vt::fail(vt::kBadArgument, "paged_attn_tiled: no current CUDA device");
  const long long blocks = (long long)batch * num_kv_heads * num_splits;
  bool fits = false;
  if (int rc = fused_fits_s<T, D, 3>(blocks, group, span_tokens, sms, max_smem, &fits)) return rc;
  if (fits) return *stages = 3, vt::kOk;
  if (int rc = fused_fits_s<T, D, 2>(blocks, group, span_tokens, sms, max_smem, &fits)) return rc;
  if (fits) *stages = 2;
  return vt::kOk;
}

template <typename T>
int fused_stages(int head_dim, int batch, int num_kv_heads, int group, int span_tokens, int num_splits, int* stages) {
  switch (head_dim) {
    case 64: return fused_stages_d<T, 64>(batch, num_kv_heads, group, span_tokens, num_splits, stages);
    case 128: return fused_stages_d<T, 128>(batch, num_kv_heads, group, span_tokens, num_splits, stages);
    case 256: return fused_stages_d<T, 256>(batch, num_kv_heads, group, span_tokens, num_splits, stages);
    default: return vt::fail(vt::kUnsupported, "paged_attn_tiled: head_dim %d not in {64, 128, 256}", head_dim);
  }
}

template <typename T, int D, int S>
int launch_fused_s(const vt::PagedArgs& a, int batch, int num_splits, int span_tokens, const Buffers& buf,
                   int* counters, cudaStream_t s) {
  const int group = a.num_q_heads / a.num_kv_heads;
  const int smem = fused_smem<T, D, S>(group, span_tokens);
  const auto kernel = vt_tiled::tiled_fused_kernel<T, D, S>;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess)
    return vt::fail(static_cast<int>(err), "paged_attn_tiled fused: %d bytes of shared memory: %s", smem,
                    cudaGetErrorString(err));
  kernel<<<dim3(a.num_kv_heads, num_splits, batch), vt_tiled::kThreads, smem, s>>>(
      a, num_splits, span_tokens, buf.m_part, buf.l_part, static_cast<T*>(buf.out), buf.o_part, counters);
  return vt::launch_status("tiled_fused_kernel");
}

template <typename T, int D>
int launch_fused_d(const vt::PagedArgs& a, int batch, int num_splits, int span_tokens, int stages, const Buffers& buf,
                   int* counters, cudaStream_t s) {
  if (stages == 3) return launch_fused_s<T, D, 3>(a, batch, num_splits, span_tokens, buf, counters, s);
  return launch_fused_s<T, D, 2>(a, batch, num_splits, span_tokens, buf, counters, s);
}

template <typename T>
int launch_fused(const vt::PagedArgs& a, int batch, int num_splits, int span_tokens, int stages, const Buffers& buf,
                 int* counters, cudaStream_t s) {
  switch (a.head_dim) {
    case 64: return launch_fused_d<T, 64>(a, batch, num_splits, span_tokens, stages, buf, counters, s);
    case 128: return launch_fused_d<T, 128>(a, batch, num_splits, span_tokens, stages, buf, counters, s);
    case 256: return launch_fused_d<T, 256>(a, batch, num_splits, span_tokens, stages, buf, counters, s);
    default: return vt::fail(vt::kUnsupported, "paged_attn_tiled: head_dim %d not in {64, 128, 256}", a.head_dim);
  }
}

// Positions of the longest split: kTile times the most tiles a split of a table of `cap` positions holds.
int span_tokens_for(int cap, int num_splits) {
  return vt::ceil_div(vt::ceil_div(cap, vt_tiled::kTile), num_splits) * vt_tiled::kTile;
}

}  // namespace

// The split count for `rows` = batch * num_kv_heads blocks and the longest context the block tables
// can hold (their capacity, so that no context length is read on the host), on the current device.
VT_EXPORT int vt_paged_attn_tiled_num_splits(int* splits, int rows, int max_context, int head_dim, int dtype) {
  int dev = 0, sms = 0, resident = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
    return vt::fail(vt::kBadArgument, "paged_attn_tiled: no current CUDA device");
  int rc = vt::kOk;
  switch (dtype) {
    case vt::kBF16: rc = blocks_per_sm_for<__nv_bfloat16>(head_dim, &resident); break;
    case vt::kF16: rc = blocks_per_sm_for<__half>(head_dim, &resident); break;
    default: return vt::fail(vt::kUnsupported, "paged_attn_tiled: dtype code %d (bf16 and fp16 only)", dtype);
  }
  if (rc != vt::kOk) return rc;
  *splits = vt_tiled::tiled_num_splits(rows, max_context, sms, resident);
  return vt::kOk;
}

// The split-count rule alone, for a given device shape (no device needed; the tests hold it here).
VT_EXPORT int vt_paged_attn_tiled_split_rule(int rows, int max_context, int sm_count, int blocks_per_sm) {
  return vt_tiled::tiled_num_splits(rows, max_context, sm_count, blocks_per_sm);
}

// out, q: [batch, num_q_heads, head_dim]; caches: [num_blocks, block_size, num_kv_heads, head_dim];
// block_tables: [batch, max_blocks] int32; context_lens: [batch] int32 in [1, max_blocks*block_size].
// Scratch: scores [batch, num_q_heads, max_blocks*block_size] in the dtype; m_part, l_part [batch,
// num_splits, num_q_heads] fp32; with num_splits > 1, o_part [batch, num_splits, num_q_heads, head_dim]
// fp32 (else unused and may be null).
namespace {
int tiled_decode(void* out, void* scores, float* m_part, float* l_part, float* o_part, const void* q,
                 const void* k_cache, const void* v_cache, const int* block_tables, const int* context_lens, int batch,
                 int num_q_heads, int num_kv_heads, int head_dim, int block_size, int max_blocks, float scale,
                 int window, int num_splits, int dtype, void* stream, bool pipelined, int* counters, bool pdl) {
  if (batch < 0 || batch > kMaxGridZ || num_q_heads <= 0 || num_kv_heads <= 0 || block_size <= 0 ||
      max_blocks <= 0 || window < 0)
    return vt::fail(vt::kBadArgument,
                    "paged_attn_tiled: bad sizes batch=%d num_q_heads=%d num_kv_heads=%d block_size=%d "
                    "max_blocks=%d window=%d",
                    batch, num_q_heads, num_kv_heads, block_size, max_blocks, window);
  if (num_q_heads % num_kv_heads != 0)
    return vt::fail(vt::kBadArgument, "paged_attn_tiled: num_q_heads %d is not a multiple of num_kv_heads %d",
                    num_q_heads, num_kv_heads);
  if (num_q_heads / num_kv_heads > vt_tiled::kMaxGroup)
    return vt::fail(vt::kUnsupported, "paged_attn_tiled: %d query heads per KV head (at most %d)",
                    num_q_heads / num_kv_heads, vt_tiled::kMaxGroup);
  if (num_splits < 1 || num_splits > vt_tiled::kMaxSplits)
    return vt::fail(vt::kBadArgument, "paged_attn_tiled: num_splits %d not in [1, %d]", num_splits,
                    vt_tiled::kMaxSplits);
  if (scores == nullptr || m_part == nullptr || l_part == nullptr || (num_splits > 1 && o_part == nullptr))
    return vt::fail(vt::kBadArgument, "paged_attn_tiled: missing scratch (scores, m_part, l_part%s)",
                    num_splits > 1 ? ", o_part" : "");
  if ((long long)max_blocks * block_size > 0x7fffffffLL)
    return vt::fail(vt::kBadArgument, "paged_attn_tiled: max_blocks %d x block_size %d positions overflow int",
                    max_blocks, block_size);
  if (!(vt::aligned16(q) && vt::aligned16(k_cache) && vt::aligned16(v_cache)))
    return vt::fail(vt::kBadArgument, "paged_attn_tiled: q and caches must be 16-byte aligned");
  if (batch == 0) return vt::kOk;
  const vt::PagedArgs a{q, k_cache, v_cache, block_tables, context_lens, num_q_heads, num_kv_heads,
                        head_dim, block_size, max_blocks, scale, window};
  auto s = static_cast<cudaStream_t>(stream);
  const Buffers buf{out, scores, m_part, l_part, o_part, max_blocks * block_size, pipelined, counters, pdl};
  switch (dtype) {
    case vt::kBF16: return launch<__nv_bfloat16>(a, batch, num_splits, buf, s);
    case vt::kF16: return launch<__half>(a, batch, num_splits, buf, s);
    default: return vt::fail(vt::kUnsupported, "paged_attn_tiled: dtype code %d (bf16 and fp16 only)", dtype);
  }
}
}  // namespace
VT_EXPORT int vt_paged_attn_tiled_decode(void* out, void* scores, float* m_part, float* l_part, float* o_part,
                                         const void* q, const void* k_cache, const void* v_cache,
                                         const int* block_tables, const int* context_lens, int batch,
                                         int num_q_heads, int num_kv_heads, int head_dim, int block_size,
                                         int max_blocks, float scale, int window, int num_splits, int dtype,
                                         void* stream) {
  return tiled_decode(out, scores, m_part, l_part, o_part, q, k_cache, v_cache, block_tables, context_lens, batch,
                      num_q_heads, num_kv_heads, head_dim, block_size, max_blocks, scale, window, num_splits, dtype,
                      stream, false, nullptr, false);
}
// The same with the pipelined P.V pass (VT_ATTN_PV_PIPELINED): bitwise the same output. counters: the
// fused arm's (int32 [2 * batch * num_kv_heads], zero, left zero), or null, where the split sum is a launch
// of its own as in vt_paged_attn_tiled_decode. pdl != 0 (VT_ATTN_PDL): the P.V pass is launched as a
// programmatic dependent of the scores pass (sm_90; a plain launch elsewhere), the same bits.
VT_EXPORT int vt_paged_attn_tiled_pipelined_decode(void* out, void* scores, float* m_part, float* l_part,
                                                   float* o_part, int* counters, const void* q, const void* k_cache,
                                                   const void* v_cache, const int* block_tables,
                                                   const int* context_lens, int batch, int num_q_heads,
                                                   int num_kv_heads, int head_dim, int block_size, int max_blocks,
                                                   float scale, int window, int num_splits, int dtype, int pdl,
                                                   void* stream) {
  return tiled_decode(out, scores, m_part, l_part, o_part, q, k_cache, v_cache, block_tables, context_lens, batch,
                      num_q_heads, num_kv_heads, head_dim, block_size, max_blocks, scale, window, num_splits, dtype,
                      stream, true, counters, pdl != 0);
}

// The pipeline stages vt_paged_attn_tiled_fused_decode runs this shape with on the current device (3 or
// 2), or 0 where it does not take it (one split, or a grid that is not resident at once).
VT_EXPORT int vt_paged_attn_tiled_fused_stages(int* stages, int batch, int num_q_heads, int num_kv_heads, int head_dim,
                                             int block_size, int max_blocks, int num_splits, int dtype) {
  if (batch <= 0 || num_kv_heads <= 0 || num_q_heads % num_kv_heads != 0 || block_size <= 0 || max_blocks <= 0 ||
      num_splits < 1 || num_splits > vt_tiled::kMaxSplits)
    return vt::fail(vt::kBadArgument, "paged_attn_tiled fused: bad sizes");
  const int group = num_q_heads / num_kv_heads;
  const int span = span_tokens_for(max_blocks * block_size, num_splits);
  switch (dtype) {
    case vt::kBF16: return fused_stages<__nv_bfloat16>(head_dim, batch, num_kv_heads, group, span, num_splits, stages);
    case vt::kF16: return fused_stages<__half>(head_dim, batch, num_kv_heads, group, span, num_splits, stages);
    default: return vt::fail(vt::kUnsupported, "paged_attn_tiled: dtype code %d (bf16 and fp16 only)", dtype);
  }
}

// The one-launch arm: the arguments of vt_paged_attn_tiled_decode less the scores scratch, plus counters
// (int32 [2 * batch * num_kv_heads], zero, left zero) and the stages vt_paged_attn_tiled_fused_stages
// returned: a grid that is not resident at once would wait forever, so the caller asks it first.
VT_EXPORT int vt_paged_attn_tiled_fused_decode(void* out, float* m_part, float* l_part, float* o_part, int* counters,
                                               const void* q, const void* k_cache, const void* v_cache,
                                               const int* block_tables, const int* context_lens, int batch,
                                               int num_q_heads, int num_kv_heads, int head_dim, int block_size,
                                               int max_blocks, float scale, int window, int num_splits, int stages,
                                               int dtype, void* stream) {
  if (batch < 0 || batch > kMaxGridZ || num_q_heads <= 0 || num_kv_heads <= 0 || block_size <= 0 ||
      max_blocks <= 0 || window < 0 || num_q_heads % num_kv_heads != 0 ||
      num_q_heads / num_kv_heads > vt_tiled::kMaxGroup || num_splits < 2 || num_splits > vt_tiled::kMaxSplits ||
      (stages != 2 && stages != 3) || (long long)max_blocks * block_size > 0x7fffffffLL)
    return vt::fail(vt::kBadArgument,
                    "paged_attn_tiled fused: bad sizes batch=%d num_q_heads=%d num_kv_heads=%d block_size=%d "
                    "max_blocks=%d window=%d num_splits=%d (at least 2) stages=%d (2 or 3)",
                    batch, num_q_heads, num_kv_heads, block_size, max_blocks, window, num_splits, stages);
  if (m_part == nullptr || l_part == nullptr || o_part == nullptr || counters == nullptr)
    return vt::fail(vt::kBadArgument, "paged_attn_tiled fused: missing scratch (m_part, l_part, o_part, counters)");
  if (!(vt::aligned16(q) && vt::aligned16(k_cache) && vt::aligned16(v_cache)))
    return vt::fail(vt::kBadArgument, "paged_attn_tiled: q and caches must be 16-byte aligned");
  if (batch == 0) return vt::kOk;
  const vt::PagedArgs a{q, k_cache, v_cache, block_tables, context_lens, num_q_heads, num_kv_heads,
                        head_dim, block_size, max_blocks, scale, window};
  auto s = static_cast<cudaStream_t>(stream);
  const Buffers buf{out, nullptr, m_part, l_part, o_part, max_blocks * block_size};
  const int span = span_tokens_for(max_blocks * block_size, num_splits);
  switch (dtype) {
    case vt::kBF16: return launch_fused<__nv_bfloat16>(a, batch, num_splits, span, stages, buf, counters, s);
    case vt::kF16: return launch_fused<__half>(a, batch, num_splits, span, stages, buf, counters, s);
    default: return vt::fail(vt::kUnsupported, "paged_attn_tiled: dtype code %d (bf16 and fp16 only)", dtype);
  }
}
