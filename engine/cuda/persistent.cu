// Launcher of the persistent decode layer (persistent.cuh): argument checks, the control words zeroed on the stream,
// SM-count blocks, dtype dispatch (1=bf16, 2=fp16; fp32 refused: the tiles load 16-byte vectors of 2-byte elements).
#include "persistent.cuh"

namespace {

using vt_persistent::Layer;
using vt_persistent::Model;
using vt_persistent::Step;

constexpr int kPointers = 32;  // the order of Layer's pointer fields; persistent.py POINTERS names them
constexpr int kModelPointers = 6;  // ids, embed, final_norm, head, final, logits: persistent.py MODEL_POINTERS
// the step's descriptors and the launch's other arguments within the 32764 bytes of kernel parameters
static_assert(sizeof(Step<__nv_bfloat16, vt_persistent::kMaxLayers>) + 40 <= 32764, "kMaxLayers too large");

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
    return 1;
  return sms > 0 ? sms : 1;
}

struct Sizes {
  int batch, hidden, heads, kv_heads, head_dim, inter, block_size, max_blocks, ld_scores, window;
  float mean_scale, q_mean_scale, k_mean_scale, eps, scale;
  int take;  // vt_persistent::Take
};

template <typename T>
Layer<T> layer_of(const void* const* ptr, const Sizes& z) {
  auto in = [&](int i) { return static_cast<const T*>(ptr[i]); };
  auto out = [&](int i) { return static_cast<T*>(const_cast<void*>(ptr[i])); };
  return Layer<T>{in(0),   in(1),   out(2),  out(3),  out(4),  out(5),  out(6),  out(7),  out(8),  out(9),  out(10),
                  in(11),  in(12),  in(13),  in(14),  in(15),  in(16),  in(17),  in(18),  in(19), out(20), out(21),
                  out(22), out(23), static_cast<const long long*>(ptr[24]), in(25), in(26), in(27), in(28),
                  static_cast<const int*>(ptr[29]), static_cast<const int*>(ptr[30]),
                  static_cast<float*>(const_cast<void*>(ptr[31])), z.batch, z.hidden, z.heads * z.head_dim,
                  z.kv_heads * z.head_dim, z.inter, z.heads, z.kv_heads, z.head_dim, z.block_size, z.max_blocks,
                  z.ld_scores, z.window, z.mean_scale, z.q_mean_scale, z.k_mean_scale, z.eps, z.scale};
}

template <typename T>
Model<T> model_of(const void* const* ptr, int vocab) {
  if (ptr == nullptr) return Model<T>{nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0};
  auto in = [&](int i) { return static_cast<const T*>(ptr[i]); };
  auto out = [&](int i) { return static_cast<T*>(const_cast<void*>(ptr[i])); };
  return Model<T>{static_cast<const long long*>(ptr[0]), in(1), in(2), in(3), out(4), out(5), vocab};
}

// `layers` layers' pointers (kPointers each, in order) and the model's (or null) into the launch's descriptors.
template <typename T, int N>
int launch(const int* table, int tasks, int* control, long long* trace, const void* const* ptr, int layers,
           const void* const* model, int vocab, const Sizes& z, size_t smem, cudaStream_t stream) {
  Step<T, N> step{};
  for (int l = 0; l < layers; ++l) step.layer[l] = layer_of<T>(ptr + static_cast<size_t>(l) * kPointers, z);
  step.model = model_of<T>(model, vocab);
  step.layers = layers;
  step.take = z.take;
  auto kernel = vt_persistent::persistent_layer_kernel<T, N>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)))
    return vt::fail(static_cast<int>(e), "persistent: %zu bytes of shared memory: %s", smem, cudaGetErrorString(e));
  kernel<<<sm_count(), vt_persistent::kThreads, smem, stream>>>(table, tasks, control, trace, step);
  return vt::kOk;
}

template <typename T>
int launch_any(const int* table, int tasks, int* control, long long* trace, const void* const* ptr, int layers,
               const void* const* model, int vocab, const Sizes& z, size_t smem, cudaStream_t stream) {
  if (layers == 1)  // the decode layer's launch: one descriptor, a small parameter block
    return launch<T, 1>(table, tasks, control, trace, ptr, 1, model, vocab, z, smem, stream);
  return launch<T, vt_persistent::kMaxLayers>(table, tasks, control, trace, ptr, layers, model, vocab, z, smem, stream);
}

}  // namespace

VT_DEFINE_LAST_ERROR(persistent)

// The table's fixed row width and the control words before the counters (a CPU test holds the binding to them).
VT_EXPORT int vt_persistent_row_width() { return vt_persistent::kRowWidth; }
VT_EXPORT int vt_persistent_control_words() { return vt_persistent::kControlWords; }

// Dynamic shared memory of a launch: kRowsPerPass (or fewer) staged rows of the widest GEMV input (and a norm's
// weight after a normed tile's rows), and at least a KV group's q heads in fp32 with a chunk's block-table entries,
// its staged q, k and v heads, rotated q heads and the q/k norms' weights, cos and sin (SCORES), and a P.V pass's
// probabilities and warps' sums with a chunk's entries (ATTN_OUT: kPvHeads heads' rows of kPvChunk keys and kWarps
// x head_dim floats, the widest slice).
VT_EXPORT long long vt_persistent_smem_bytes(int batch, int hidden, int heads, int kv_heads, int head_dim, int inter,
                                             int elt) {
  const int rows = batch < vt_persistent::kRowsPerPass ? batch : vt_persistent::kRowsPerPass;
  const int q_dim = heads * head_dim, g = heads / kv_heads;
  const int k = hidden > q_dim ? (hidden > inter ? hidden : inter) : (q_dim > inter ? q_dim : inter);
  const long long staged = static_cast<long long>(rows) * k, normed = static_cast<long long>(rows + 1) * hidden;
  const long long gemv = (staged > normed ? staged : normed) * elt;  // a normed tile stages its norm's weight too
  const long long table = vt_persistent::kTableInts * static_cast<long long>(sizeof(int));  // a chunk's entries
  const long long score = static_cast<long long>(g) * head_dim * static_cast<long long>(sizeof(float)) + table +
                          static_cast<long long>(2 * g + 6) * head_dim * elt;
  const long long pv = static_cast<long long>(vt_persistent::kPvHeads) *
                           (vt_persistent::kPvChunk + vt_persistent::kWarps * head_dim) * sizeof(float) +
                       table;
  const long long attn = score > pv ? score : pv;
  return gemv > attn ? gemv : attn;
}

// table: device [tasks, kRowWidth] int32; control: device [kControlWords + counters] int32: [error, head, counters],
// the head and counters zeroed here (on the stream, so a graph replays it), the error word kept (the caller's);
// trace: null, or device [tasks, kTraceWidth] int64 (persistent.cuh); ptr: host array of `layers` x kPointers device
// pointers, each layer's in Layer's order (only layer 0's residual may be null; a later layer's x and residual are the
// previous layer's mlp and res2); model: host array of kModelPointers (ids, embed, final_norm, head, final, logits;
// head and logits both null for a step that ends at the final norm), or null for layers alone. The sizes are every
// layer's; take: when a block takes its next task (vt_persistent::Take). One layer takes the one-descriptor kernel (the
// kernel table's arm), more the step's.
VT_EXPORT int vt_persistent_step(const int* table, int tasks, int* control, int counters, void* trace,
                                 const void* const* ptr, int layers, const void* const* model, int vocab, int batch,
                                 int hidden, int heads, int kv_heads, int head_dim, int inter, int block_size,
                                 int max_blocks, int ld_scores, int window, float mean_scale, float q_mean_scale,
                                 float k_mean_scale, float eps, float scale, int take, int dtype, void* stream) {
  if (take < vt_persistent::kTakeAtRun || take > vt_persistent::kTakeAfterSignal)
    return vt::fail(vt::kBadArgument, "persistent: take %d (0 at run, 1 async, 2 after the signal)", take);
  if (dtype != vt::kBF16 && dtype != vt::kF16)
    return vt::fail(vt::kUnsupported, "persistent: dtype code %d (bf16 and fp16 only)", dtype);
  if (tasks <= 0 || counters <= 0 || batch <= 0)
    return vt::fail(vt::kBadArgument, "persistent: tasks %d, counters %d, batch %d must be > 0", tasks, counters, batch);
  if (layers < 1 || layers > vt_persistent::kMaxLayers)
    return vt::fail(vt::kBadArgument, "persistent: %d layers (1 to %d a launch)", layers, vt_persistent::kMaxLayers);
  const int lanes = head_dim / vt_persistent::kVec;  // a K row's lanes in SCORES: 16 bytes each, dividing a warp
  if (hidden % 8 || head_dim % 8 || lanes < 1 || lanes > 32 || 32 % lanes || inter % 8 || kv_heads <= 0 ||
      heads % kv_heads)
    return vt::fail(vt::kBadArgument,
                    "persistent: hidden %d, inter %d (multiples of 8), head_dim %d (8 x a power of two, at most 256), "
                    "heads %d / kv_heads %d",
                    hidden, inter, head_dim, heads, kv_heads);
  if (block_size <= 0 || max_blocks <= 0 || ld_scores <= 0 || window < 0)
    return vt::fail(vt::kBadArgument, "persistent: block_size %d, max_blocks %d, ld_scores %d must be > 0, window %d >= 0",
                    block_size, max_blocks, ld_scores, window);
  for (int l = 0; l < layers; ++l)
    for (int i = 0; i < kPointers; ++i) {
      const void* q = ptr[static_cast<size_t>(l) * kPointers + i];
      if (i == 1 && l == 0) continue;  // the first layer's residual may be null
      if (q == nullptr) return vt::fail(vt::kBadArgument, "persistent: layer %d pointer %d is null", l, i);
      if (i < 24 && !vt::aligned16(q))  // the 16-byte loads' tensors
        return vt::fail(vt::kBadArgument, "persistent: layer %d pointer %d is not 16-byte aligned", l, i);
    }
  if (model != nullptr) {
    if (vocab <= 0) return vt::fail(vt::kBadArgument, "persistent: vocab %d must be > 0", vocab);
    for (int i = 0; i < kModelPointers; ++i) {
      if (model[i] == nullptr && (i == 3 || i == 5) && model[3] == nullptr && model[5] == nullptr)
        continue;  // no head and no logits: a step ending at the final norm
      if (model[i] == nullptr) return vt::fail(vt::kBadArgument, "persistent: model pointer %d is null", i);
      if (i > 0 && !vt::aligned16(model[i]))
        return vt::fail(vt::kBadArgument, "persistent: model pointer %d is not 16-byte aligned", i);
    }
  }
  auto* tr = static_cast<long long*>(trace);
  if (reinterpret_cast<uintptr_t>(tr) % alignof(long long))
    return vt::fail(vt::kBadArgument, "persistent: trace is not 8-byte aligned");
  auto s = static_cast<cudaStream_t>(stream);
  const size_t bytes = static_cast<size_t>(vt_persistent::kControlWords - 1 + counters) * sizeof(int);
  if (cudaError_t e = cudaMemsetAsync(control + 1, 0, bytes, s))  // the head and counters; the error word stays
    return vt::fail(static_cast<int>(e), "persistent: zeroing the counters: %s", cudaGetErrorString(e));
  const size_t smem = static_cast<size_t>(vt_persistent_smem_bytes(batch, hidden, heads, kv_heads, head_dim, inter, 2));
  const Sizes z{batch,      hidden,    heads,  kv_heads,     head_dim,     inter, block_size,
                max_blocks, ld_scores, window, mean_scale,   q_mean_scale, k_mean_scale, eps, scale, take};
  const int rc = dtype == vt::kBF16
                     ? launch_any<__nv_bfloat16>(table, tasks, control, tr, ptr, layers, model, vocab, z, smem, s)
                     : launch_any<__half>(table, tasks, control, tr, ptr, layers, model, vocab, z, smem, s);
  return rc != vt::kOk ? rc : vt::launch_status("vt_persistent_step");
}

// The launch's descriptor limits (a CPU test holds the binding to them).
VT_EXPORT int vt_persistent_max_layers() { return vt_persistent::kMaxLayers; }
VT_EXPORT int vt_persistent_trace_width() { return vt_persistent::kTraceWidth; }
