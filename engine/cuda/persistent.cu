// Launcher of the persistent decode layer (persistent.cuh): argument checks, the control words zeroed on the stream,
// SM-count blocks, dtype dispatch (1=bf16, 2=fp16; fp32 refused: the tiles load 16-byte vectors of 2-byte elements).
#include "persistent.cuh"

namespace {

using vt_persistent::Layer;

constexpr int kPointers = 34;  // the order of Layer's pointer fields; persistent.py POINTERS names them

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
    return 1;
  return sms > 0 ? sms : 1;
}

struct Sizes {
  int batch, hidden, heads, kv_heads, head_dim, inter, block_size, max_blocks, ld_scores, window;
  float mean_scale, q_mean_scale, k_mean_scale, eps, scale;
};

template <typename T>
Layer<T> layer_of(const void* const* ptr, const Sizes& z) {
  auto in = [&](int i) { return static_cast<const T*>(ptr[i]); };
  auto out = [&](int i) { return static_cast<T*>(const_cast<void*>(ptr[i])); };
  return Layer<T>{in(0),   in(1),   out(2),  out(3),  out(4),  out(5),  out(6),  out(7),  out(8),  out(9),  out(10),
                  out(11), out(12), in(13),  in(14),  in(15),  in(16),  in(17),  in(18),  in(19), in(20), in(21),
                  out(22), out(23), out(24), out(25), static_cast<const long long*>(ptr[26]), in(27), in(28), in(29),
                  in(30),  static_cast<const int*>(ptr[31]), static_cast<const int*>(ptr[32]),
                  static_cast<float*>(const_cast<void*>(ptr[33])), z.batch, z.hidden, z.heads * z.head_dim,
                  z.kv_heads * z.head_dim, z.inter, z.heads, z.kv_heads, z.head_dim, z.block_size, z.max_blocks,
                  z.ld_scores, z.window, z.mean_scale, z.q_mean_scale, z.k_mean_scale, z.eps, z.scale};
}

template <typename T>
int launch(const int* table, int tasks, int* control, const Layer<T>& p, size_t smem, cudaStream_t stream) {
  auto kernel = vt_persistent::persistent_layer_kernel<T>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)))
    return vt::fail(static_cast<int>(e), "persistent: %zu bytes of shared memory: %s", smem, cudaGetErrorString(e));
  kernel<<<sm_count(), vt_persistent::kThreads, smem, stream>>>(table, tasks, control, p);
  return vt::kOk;
}

}  // namespace

VT_DEFINE_LAST_ERROR(persistent)

// The table's fixed row width and the control words before the counters (a CPU test holds the binding to them).
VT_EXPORT int vt_persistent_row_width() { return vt_persistent::kRowWidth; }
VT_EXPORT int vt_persistent_control_words() { return vt_persistent::kControlWords; }

// Dynamic shared memory of a launch: kRowsPerPass (or fewer) staged rows of the widest GEMV input, and at least a
// KV group's staged q, k and v heads (ROPE_STORE) and its q heads in fp32 (SCORES).
VT_EXPORT long long vt_persistent_smem_bytes(int batch, int hidden, int heads, int kv_heads, int head_dim, int inter,
                                             int elt) {
  const int rows = batch < vt_persistent::kRowsPerPass ? batch : vt_persistent::kRowsPerPass;
  const int q_dim = heads * head_dim, g = heads / kv_heads;
  const int k = hidden > q_dim ? (hidden > inter ? hidden : inter) : (q_dim > inter ? q_dim : inter);
  const long long gemv = static_cast<long long>(rows) * k * elt;
  const long long rope = static_cast<long long>(g + 2) * head_dim * elt;
  const long long score = static_cast<long long>(g) * head_dim * static_cast<long long>(sizeof(float));
  const long long most = gemv > rope ? gemv : rope;
  return most > score ? most : score;
}

// table: device [tasks, kRowWidth] int32; control: device [kControlWords + counters] int32, zeroed here (on the
// stream, so a graph replays it); ptr: host array of kPointers device pointers in Layer's order (residual may be null).
VT_EXPORT int vt_persistent_layer(const int* table, int tasks, int* control, int counters, const void* const* ptr,
                                  int batch, int hidden, int heads, int kv_heads, int head_dim, int inter,
                                  int block_size, int max_blocks, int ld_scores, int window, float mean_scale,
                                  float q_mean_scale, float k_mean_scale, float eps, float scale, int dtype,
                                  void* stream) {
  if (dtype != vt::kBF16 && dtype != vt::kF16)
    return vt::fail(vt::kUnsupported, "persistent: dtype code %d (bf16 and fp16 only)", dtype);
  if (tasks <= 0 || counters <= 0 || batch <= 0)
    return vt::fail(vt::kBadArgument, "persistent: tasks %d, counters %d, batch %d must be > 0", tasks, counters, batch);
  if (hidden % 8 || head_dim % 8 || head_dim > 2 * 32 * vt_rope::kMaxPairsPerLane || inter % 8 || kv_heads <= 0 ||
      heads % kv_heads)
    return vt::fail(vt::kBadArgument,
                    "persistent: hidden %d, inter %d (multiples of 8), head_dim %d (a multiple of 8, at most %d), "
                    "heads %d / kv_heads %d",
                    hidden, inter, head_dim, 2 * 32 * vt_rope::kMaxPairsPerLane, heads, kv_heads);
  if (block_size <= 0 || max_blocks <= 0 || ld_scores <= 0 || window < 0)
    return vt::fail(vt::kBadArgument, "persistent: block_size %d, max_blocks %d, ld_scores %d must be > 0, window %d >= 0",
                    block_size, max_blocks, ld_scores, window);
  for (int i = 0; i < kPointers; ++i)
    if (i != 1 && i < 26 && !vt::aligned16(ptr[i]))  // residual may be null; the 16-byte loads' tensors
      return vt::fail(vt::kBadArgument, "persistent: pointer %d is not 16-byte aligned", i);
  for (int i = 0; i < kPointers; ++i)
    if (i != 1 && ptr[i] == nullptr) return vt::fail(vt::kBadArgument, "persistent: pointer %d is null", i);
  auto s = static_cast<cudaStream_t>(stream);
  const size_t bytes = static_cast<size_t>(vt_persistent::kControlWords + counters) * sizeof(int);
  if (cudaError_t e = cudaMemsetAsync(control, 0, bytes, s))
    return vt::fail(static_cast<int>(e), "persistent: zeroing the counters: %s", cudaGetErrorString(e));
  const size_t smem = static_cast<size_t>(vt_persistent_smem_bytes(batch, hidden, heads, kv_heads, head_dim, inter, 2));
  const Sizes z{batch,      hidden,    heads,  kv_heads,     head_dim,     inter, block_size,
                max_blocks, ld_scores, window, mean_scale,   q_mean_scale, k_mean_scale, eps, scale};
  const int rc = dtype == vt::kBF16 ? launch(table, tasks, control, layer_of<__nv_bfloat16>(ptr, z), smem, s)
                                    : launch(table, tasks, control, layer_of<__half>(ptr, z), smem, s);
  return rc != vt::kOk ? rc : vt::launch_status("vt_persistent_layer");
}
