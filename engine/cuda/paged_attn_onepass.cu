// Launcher for the one-pass paged decode attention (VT_ATTN_ONEPASS): argument checks, the split count from
// the device's occupancy, dtype and head_dim dispatch. bf16 and fp16; head_dim 64, 128 or 256 (K and V in
// separate stages there, two blocks per SM on an H200: the arithmetic in the header); 1 to 8 query heads per KV
// head. Another shape or dtype returns kUnsupported (the caller picks another arm).
#include "paged_attn_onepass.cuh"

VT_DEFINE_LAST_ERROR(paged_attn_onepass)

namespace {

constexpr int kMaxGridZ = 65535;  // CUDA's limit on gridDim.z, which indexes the sequences

template <typename T, int D>
int opt_in_smem() {
  constexpr int bytes = vt_onepass::smem_bytes<T, D>();
  const cudaError_t err =
      cudaFuncSetAttribute(vt_onepass::onepass_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess)
    return vt::fail(static_cast<int>(err), "paged_attn_onepass: %d bytes of shared memory for head_dim %d: %s", bytes,
                    D, cudaGetErrorString(err));
  return vt::kOk;
}

template <typename T, int D>
int blocks_per_sm(int* out) {
  if (int rc = opt_in_smem<T, D>()) return rc;
  const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      out, vt_onepass::onepass_kernel<T, D>, vt_onepass::kThreads, vt_onepass::smem_bytes<T, D>());
  if (err != cudaSuccess)
    return vt::fail(static_cast<int>(err), "paged_attn_onepass occupancy: %s", cudaGetErrorString(err));
  return vt::kOk;
}

template <typename T>
int blocks_per_sm_for(int head_dim, int* out) {
  switch (head_dim) {
    case 64: return blocks_per_sm<T, 64>(out);
    case 128: return blocks_per_sm<T, 128>(out);
    case 256: return blocks_per_sm<T, 256>(out);
    default: return vt::fail(vt::kUnsupported, "paged_attn_onepass: head_dim %d not in {64, 128, 256}", head_dim);
  }
}

template <typename T>
int smem_bytes_for(int head_dim, int* out) {
  switch (head_dim) {
    case 64: *out = vt_onepass::smem_bytes<T, 64>(); return vt::kOk;
    case 128: *out = vt_onepass::smem_bytes<T, 128>(); return vt::kOk;
    case 256: *out = vt_onepass::smem_bytes<T, 256>(); return vt::kOk;
    default: return vt::fail(vt::kUnsupported, "paged_attn_onepass: head_dim %d not in {64, 128, 256}", head_dim);
  }
}

// The resident blocks per SM of the head_dim's kernel on the current device (the occupancy calculator's answer,
// after the opt-in: what the split rule sizes its waves by).
int resident_blocks(int head_dim, int dtype, int* out) {
  switch (dtype) {
    case vt::kBF16: return blocks_per_sm_for<__nv_bfloat16>(head_dim, out);
    case vt::kF16: return blocks_per_sm_for<__half>(head_dim, out);
    default: return vt::fail(vt::kUnsupported, "paged_attn_onepass: dtype code %d (bf16 and fp16 only)", dtype);
  }
}

struct Buffers {
  void* out;
  float* m_part;
  float* l_part;
  float* o_part;
  int* counters;
};

template <typename T, int D>
int launch_d(const vt::PagedArgs& a, int batch, int num_splits, const Buffers& buf, cudaStream_t s) {
  if (int rc = opt_in_smem<T, D>()) return rc;
  vt_onepass::onepass_kernel<T, D><<<dim3(a.num_kv_heads, num_splits, batch), vt_onepass::kThreads,
                                     vt_onepass::smem_bytes<T, D>(), s>>>(
      a, num_splits, static_cast<T*>(buf.out), buf.m_part, buf.l_part, buf.o_part, buf.counters);
  return vt::launch_status("onepass_kernel");
}

template <typename T>
int launch(const vt::PagedArgs& a, int batch, int num_splits, const Buffers& buf, cudaStream_t s) {
  switch (a.head_dim) {
    case 64: return launch_d<T, 64>(a, batch, num_splits, buf, s);
    case 128: return launch_d<T, 128>(a, batch, num_splits, buf, s);
    case 256: return launch_d<T, 256>(a, batch, num_splits, buf, s);
    default: return vt::fail(vt::kUnsupported, "paged_attn_onepass: head_dim %d not in {64, 128, 256}", a.head_dim);
  }
}

}  // namespace

// The split count for `rows` = batch * num_kv_heads blocks and the longest context the block tables can hold
// (their capacity, so that no context length is read on the host), on the current device.
VT_EXPORT int vt_paged_attn_onepass_num_splits(int* splits, int rows, int max_context, int head_dim, int dtype) {
  int dev = 0, sms = 0, resident = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
    return vt::fail(vt::kBadArgument, "paged_attn_onepass: no current CUDA device");
  if (int rc = resident_blocks(head_dim, dtype, &resident)) return rc;
  *splits = vt_onepass::onepass_num_splits(rows, max_context, sms, resident);
  return vt::kOk;
}

// The blocks of the head_dim's kernel resident per SM on the current device (the split rule's `blocks_per_sm`).
VT_EXPORT int vt_paged_attn_onepass_blocks_per_sm(int* blocks, int head_dim, int dtype) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess)
    return vt::fail(vt::kBadArgument, "paged_attn_onepass: no current CUDA device");
  return resident_blocks(head_dim, dtype, blocks);
}

// The dynamic shared memory one block of the head_dim's kernel takes (no device needed: the binding's predicate
// and its tests hold their copy of the stage arithmetic to it).
VT_EXPORT int vt_paged_attn_onepass_smem_bytes(int* bytes, int head_dim, int dtype) {
  switch (dtype) {
    case vt::kBF16: return smem_bytes_for<__nv_bfloat16>(head_dim, bytes);
    case vt::kF16: return smem_bytes_for<__half>(head_dim, bytes);
    default: return vt::fail(vt::kUnsupported, "paged_attn_onepass: dtype code %d (bf16 and fp16 only)", dtype);
  }
}

// The split-count rule alone, for a given device shape (no device needed; the tests hold it here).
VT_EXPORT int vt_paged_attn_onepass_split_rule(int rows, int max_context, int sm_count, int blocks_per_sm) {
  return vt_onepass::onepass_num_splits(rows, max_context, sm_count, blocks_per_sm);
}

// out, q: [batch, num_q_heads, head_dim]; caches: [num_blocks, block_size, num_kv_heads, head_dim];
// block_tables: [batch, max_blocks] int32; context_lens: [batch] int32 in [1, max_blocks*block_size].
// With num_splits > 1: m_part, l_part [batch, num_splits, num_q_heads] fp32, o_part [batch, num_splits,
// num_q_heads, head_dim] fp32 and counters int32 [2 * batch * num_kv_heads], zero, left zero (else all four
// unused and may be null).
VT_EXPORT int vt_paged_attn_onepass_decode(void* out, float* m_part, float* l_part, float* o_part, int* counters,
                                           const void* q, const void* k_cache, const void* v_cache,
                                           const int* block_tables, const int* context_lens, int batch,
                                           int num_q_heads, int num_kv_heads, int head_dim, int block_size,
                                           int max_blocks, float scale, int window, int num_splits, int dtype,
                                           void* stream) {
  if (batch < 0 || batch > kMaxGridZ || num_q_heads <= 0 || num_kv_heads <= 0 || block_size <= 0 ||
      max_blocks <= 0 || window < 0)
    return vt::fail(vt::kBadArgument,
                    "paged_attn_onepass: bad sizes batch=%d num_q_heads=%d num_kv_heads=%d block_size=%d "
                    "max_blocks=%d window=%d",
                    batch, num_q_heads, num_kv_heads, block_size, max_blocks, window);
  if (num_q_heads % num_kv_heads != 0)
    return vt::fail(vt::kBadArgument, "paged_attn_onepass: num_q_heads %d is not a multiple of num_kv_heads %d",
                    num_q_heads, num_kv_heads);
  if (num_q_heads / num_kv_heads > vt_onepass::kMaxGroup)
    return vt::fail(vt::kUnsupported, "paged_attn_onepass: %d query heads per KV head (at most %d)",
                    num_q_heads / num_kv_heads, vt_onepass::kMaxGroup);
  if (num_splits < 1 || num_splits > vt_onepass::kMaxSplits)
    return vt::fail(vt::kBadArgument, "paged_attn_onepass: num_splits %d not in [1, %d]", num_splits,
                    vt_onepass::kMaxSplits);
  if (num_splits > 1 && (m_part == nullptr || l_part == nullptr || o_part == nullptr || counters == nullptr))
    return vt::fail(vt::kBadArgument, "paged_attn_onepass: %d splits need m_part, l_part, o_part and counters",
                    num_splits);
  if ((long long)max_blocks * block_size > 0x7fffffffLL)
    return vt::fail(vt::kBadArgument, "paged_attn_onepass: max_blocks %d x block_size %d positions overflow int",
                    max_blocks, block_size);
  if (!(vt::aligned16(q) && vt::aligned16(k_cache) && vt::aligned16(v_cache)))
    return vt::fail(vt::kBadArgument, "paged_attn_onepass: q and caches must be 16-byte aligned");
  if (batch == 0) return vt::kOk;
  const vt::PagedArgs a{q, k_cache, v_cache, block_tables, context_lens, num_q_heads, num_kv_heads,
                        head_dim, block_size, max_blocks, scale, window};
  auto s = static_cast<cudaStream_t>(stream);
  const Buffers buf{out, m_part, l_part, o_part, counters};
  switch (dtype) {
    case vt::kBF16: return launch<__nv_bfloat16>(a, batch, num_splits, buf, s);
    case vt::kF16: return launch<__half>(a, batch, num_splits, buf, s);
    default: return vt::fail(vt::kUnsupported, "paged_attn_onepass: dtype code %d (bf16 and fp16 only)", dtype);
  }
}
