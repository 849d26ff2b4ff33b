// Launcher for the paged KV store: argument checks, dtype dispatch, launch on the caller's stream.
#include "kv_store.cuh"

VT_DEFINE_LAST_ERROR(kv_store)

namespace {

template <typename T>
int launch(const void* key, const void* value, void* k_cache, void* v_cache, const int64_t* slots,
           int num_tokens, int row_elems, int64_t key_stride, int64_t value_stride, cudaStream_t stream) {
  const bool vec = (row_elems * sizeof(T)) % vt::kVecBytes == 0 && vt::aligned16(key) && vt::aligned16(value) &&
                   vt::aligned16(k_cache) && vt::aligned16(v_cache) &&
                   (key_stride * sizeof(T)) % vt::kVecBytes == 0 && (value_stride * sizeof(T)) % vt::kVecBytes == 0;
  const dim3 grid(num_tokens), block(vt::kKvStoreThreads);
  auto* k = static_cast<const T*>(key);
  auto* v = static_cast<const T*>(value);
  auto* kc = static_cast<T*>(k_cache);
  auto* vc = static_cast<T*>(v_cache);
  if (vec)
    vt::kv_store_kernel<T, true><<<grid, block, 0, stream>>>(k, v, kc, vc, slots, row_elems, key_stride, value_stride);
  else
    vt::kv_store_kernel<T, false><<<grid, block, 0, stream>>>(k, v, kc, vc, slots, row_elems, key_stride, value_stride);
  return vt::launch_status("kv_store_kernel");
}

}  // namespace

// key/value: [num_tokens, num_heads, head_dim] (token strides in elements, heads contiguous);
// caches: [num_blocks, block_size, num_heads, head_dim] contiguous; slots: [num_tokens] int64, -1 skips.
VT_EXPORT int vt_kv_store_store(const void* key, const void* value, void* k_cache, void* v_cache,
                                const int64_t* slots, int num_tokens, int num_heads, int head_dim,
                                int64_t key_stride, int64_t value_stride, int dtype, void* stream) {
  if (num_tokens < 0 || num_heads <= 0 || head_dim <= 0)
    return vt::fail(vt::kBadArgument, "kv_store: bad sizes num_tokens=%d num_heads=%d head_dim=%d",
                    num_tokens, num_heads, head_dim);
  if (key_stride < (int64_t)num_heads * head_dim || value_stride < (int64_t)num_heads * head_dim)
    return vt::fail(vt::kBadArgument, "kv_store: token stride (key %lld, value %lld) below num_heads*head_dim=%d",
                    (long long)key_stride, (long long)value_stride, num_heads * head_dim);
  if (num_tokens == 0) return vt::kOk;
  const int row = num_heads * head_dim;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: return launch<float>(key, value, k_cache, v_cache, slots, num_tokens, row, key_stride, value_stride, s);
    case vt::kBF16: return launch<__nv_bfloat16>(key, value, k_cache, v_cache, slots, num_tokens, row, key_stride, value_stride, s);
    case vt::kF16: return launch<__half>(key, value, k_cache, v_cache, slots, num_tokens, row, key_stride, value_stride, s);
    default: return vt::fail(vt::kBadArgument, "kv_store: unknown dtype code %d", dtype);
  }
}
