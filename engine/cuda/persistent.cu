// Launcher of the persistent decode layer (persistent.cuh): argument checks, the control words zeroed on the stream,
// SM-count blocks, dtype dispatch (1=bf16, 2=fp16; fp32 refused: the tiles load 16-byte vectors of 2-byte elements).
#include "persistent.cuh"

namespace {

using vt_persistent::Layer;

constexpr int kPointers = 22;  // the order of Layer's pointer fields; persistent.py POINTERS names them

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev))
    return 1;
  return sms > 0 ? sms : 1;
}

template <typename T>
Layer<T> layer_of(const void* const* ptr, int batch, int hidden, int q_dim, int kv_dim, int inter, float mean_scale,
                  float eps) {
  auto in = [&](int i) { return static_cast<const T*>(ptr[i]); };
  auto out = [&](int i) { return static_cast<T*>(const_cast<void*>(ptr[i])); };
  return Layer<T>{in(0),  in(1),  out(2),  out(3),  out(4),  out(5),  out(6),  in(7),  out(8),  out(9),  out(10),
                  out(11), out(12), in(13), in(14), in(15), in(16), in(17), in(18), in(19), in(20), in(21),
                  batch,  hidden, q_dim,  kv_dim, inter,  mean_scale, eps};
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

// Dynamic shared memory of a launch: kRowsPerPass (or fewer) staged rows of the widest GEMV input.
VT_EXPORT long long vt_persistent_smem_bytes(int batch, int hidden, int q_dim, int inter, int elt) {
  const int rows = batch < vt_persistent::kRowsPerPass ? batch : vt_persistent::kRowsPerPass;
  const int k = hidden > q_dim ? (hidden > inter ? hidden : inter) : (q_dim > inter ? q_dim : inter);
  return static_cast<long long>(rows) * k * elt;
}

// table: device [tasks, kRowWidth] int32; control: device [kControlWords + counters] int32, zeroed here (on the
// stream, so a graph replays it); ptr: host array of kPointers device pointers in Layer's order (residual may be null).
VT_EXPORT int vt_persistent_layer(const int* table, int tasks, int* control, int counters, const void* const* ptr,
                                  int batch, int hidden, int q_dim, int kv_dim, int inter, float mean_scale, float eps,
                                  int dtype, void* stream) {
  if (dtype != vt::kBF16 && dtype != vt::kF16)
    return vt::fail(vt::kUnsupported, "persistent: dtype code %d (bf16 and fp16 only)", dtype);
  if (tasks <= 0 || counters <= 0 || batch <= 0)
    return vt::fail(vt::kBadArgument, "persistent: tasks %d, counters %d, batch %d must be > 0", tasks, counters, batch);
  if (hidden % 8 || q_dim % 8 || kv_dim % 8 || inter % 8)
    return vt::fail(vt::kBadArgument, "persistent: hidden %d, q_dim %d, kv_dim %d, inter %d must be multiples of 8",
                    hidden, q_dim, kv_dim, inter);
  for (int i = 0; i < kPointers; ++i)
    if (i != 1 && !vt::aligned16(ptr[i]))  // null is aligned; only residual may be null
      return vt::fail(vt::kBadArgument, "persistent: pointer %d is not 16-byte aligned", i);
  for (int i = 0; i < kPointers; ++i)
    if (i != 1 && ptr[i] == nullptr) return vt::fail(vt::kBadArgument, "persistent: pointer %d is null", i);
  auto s = static_cast<cudaStream_t>(stream);
  const size_t bytes = static_cast<size_t>(vt_persistent::kControlWords + counters) * sizeof(int);
  if (cudaError_t e = cudaMemsetAsync(control, 0, bytes, s))
    return vt::fail(static_cast<int>(e), "persistent: zeroing the counters: %s", cudaGetErrorString(e));
  const size_t smem = static_cast<size_t>(vt_persistent_smem_bytes(batch, hidden, q_dim, inter, 2));
  int rc = vt::kOk;
  if (dtype == vt::kBF16)
    rc = launch(table, tasks, control, layer_of<__nv_bfloat16>(ptr, batch, hidden, q_dim, kv_dim, inter, mean_scale, eps),
                smem, s);
  else
    rc = launch(table, tasks, control, layer_of<__half>(ptr, batch, hidden, q_dim, kv_dim, inter, mean_scale, eps),
                smem, s);
  return rc != vt::kOk ? rc : vt::launch_status("vt_persistent_layer");
}
