// The L2 prefetch kernel (sm_90): asks L2 for up to kMaxRanges byte ranges of global memory with bulk prefetches
// (cp.async.bulk.prefetch.L2: no destination and nothing to wait on), so that a later kernel's loads of them hit L2.
// A decode layer launches it before its attention, which leaves DRAM nearly idle, for the weights it reads after.
#pragma once
#include "common.cuh"

namespace vt_prefetch {

constexpr int kMaxRanges = 4;  // the ranges one launch takes, by value (a layer's o_proj, gate/up and down)
// One warp per block and one chunk per thread: 512 KB per block, so a layer's ~22 MB (Qwen3-0.6B) is issued by
// about 44 SMs' bulk-copy units side by side rather than queued on one.
constexpr int kThreads = 32;
constexpr int kChunkBytes = 16 * 1024;  // one bulk prefetch; a range's last one may be shorter
constexpr int kAlign = 16;              // the bulk prefetch's address and size granule

struct Ranges {
  const char* base[kMaxRanges];
  long long bytes[kMaxRanges];  // each a multiple of kAlign; 0: an unused range
};

// Thread t of the grid asks L2 for chunk t of the ranges taken in turn. Compiled out below sm_90, where the
// launcher refuses.
__global__ void l2_prefetch_kernel(Ranges r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  long long chunk = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x;
  const char* base = nullptr;  // the chunk's range, picked by selects: indexing r by a variable puts it on the stack
  long long left = 0;          // the bytes of that range from the chunk on
#pragma unroll
  for (int i = 0; i < kMaxRanges; ++i) {
    const long long chunks = (r.bytes[i] + kChunkBytes - 1) / kChunkBytes;
    const bool here = base == nullptr && chunk < chunks;
    base = here ? r.base[i] + chunk * kChunkBytes : base;
    left = here ? r.bytes[i] - chunk * kChunkBytes : left;
    chunk -= chunks;
  }
  if (base != nullptr) {
    const unsigned bytes = static_cast<unsigned>(min(static_cast<long long>(kChunkBytes), left));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base), "r"(bytes) : "memory");
  }
#endif
}

}  // namespace vt_prefetch
