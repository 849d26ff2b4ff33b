// Paged KV store kernel: copy each new token's K/V rows into its cache slot; slot -1 is skipped.
#pragma once

#include "common.cuh"

namespace vt {

constexpr int kKvStoreThreads = 128;  // threads per block; one block per token
constexpr int kVecBytes = 16;         // one 16-byte load/store per thread step

// key/value: [num_tokens, num_heads, head_dim] with token stride `src_stride` (elements) and
// contiguous heads; k_cache/v_cache: [num_blocks, block_size, num_heads, head_dim] contiguous.
template <typename T, bool kVec>
__global__ void kv_store_kernel(const T* __restrict__ key, const T* __restrict__ value,
                                T* __restrict__ k_cache, T* __restrict__ v_cache,
                                const int64_t* __restrict__ slots, int row_elems,
                                int64_t key_stride, int64_t value_stride) {
  const int64_t slot = slots[blockIdx.x];
  if (slot < 0) return;  // padding token: nothing to store
  const T* k_src = key + blockIdx.x * key_stride;
  const T* v_src = value + blockIdx.x * value_stride;
  T* k_dst = k_cache + slot * row_elems;
  T* v_dst = v_cache + slot * row_elems;
  if constexpr (kVec) {
    constexpr int per = kVecBytes / sizeof(T);
    const int n = row_elems / per;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      reinterpret_cast<uint4*>(k_dst)[i] = reinterpret_cast<const uint4*>(k_src)[i];
      reinterpret_cast<uint4*>(v_dst)[i] = reinterpret_cast<const uint4*>(v_src)[i];
    }
  } else {
    for (int i = threadIdx.x; i < row_elems; i += blockDim.x) {
      k_dst[i] = k_src[i];
      v_dst[i] = v_src[i];
    }
  }
}

}  // namespace vt
