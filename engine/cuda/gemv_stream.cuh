// The streamed decode GEMV (sm_90): W goes through shared memory, not registers. Each warp owns a ring of `slots`
// row buffers in shared memory; its lane 0 fills a slot with one bulk copy per W row (cp.async.bulk, completed on
// the slot's mbarrier), so the bytes in flight cost no registers: a resident grid of one block per SM keeps up to
// 96 KB of W in flight per SM and leaves room on the SM for the next kernel's block. The grid issues its first W
// copies before it waits for its input (programmatic dependent launch) and lets the next grid launch right after,
// so a chain of these GEMVs overlaps each one's ramp with the drain of the one before.
// Per output the sum order is the fast path's (gemv.cuh gemv_body): each lane's chunks in order, split-K partials in
// chunk order (chunk c to partial c % SPLIT, SPLIT from the fast path's rule), the warp butterfly, then the partials
// added to 0 in order; so the bits of gemv_vec_kernel (and, with the prologues, of the fused kernels before it).
#pragma once
#include <cstdint>

#include "gemv_prologue.cuh"

namespace vt_gemv_stream {

using vt_gemv::kWarpSize;
using vt_gemv::Pack;
constexpr int kWarps = vt_gemv::kWarpsPerBlock;  // 8 warps per block, each with its own ring
constexpr int kThreads = kWarps * kWarpSize;
constexpr int kMaxSlots = 8;                      // row buffers per warp at most
constexpr int kRingBytes = 96 * 1024;             // the rings of one block, at most (two blocks fit an H200 SM)
constexpr int kBlocksPerSm = 1;                   // the resident grid: one block per SM
constexpr int kMinResident = 2;                   // register cap: this grid's block and the next grid's fit one SM
constexpr int kXAlign = 128;                      // the rings start on a 128-byte boundary after the staged x

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// The barriers' initialisation made visible to the async proxy (the bulk copies complete on them).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// This thread's generic-proxy reads of a slot ordered before the async-proxy write that refills it.
__device__ __forceinline__ void proxy_fence() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// An L2 policy that evicts W first: W is read once per step, what the kernels around it write stays in L2.
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// bytes (a multiple of 16; both addresses 16-byte aligned) from global src to shared dst, completing on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::
          "r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
#endif

// y = x W^T (+ bias), x built in shared memory by `stage` (after the grid's input is ready). Items are outputs: a
// warp with global index g takes items g, g + G, ... (G warps in the grid), item t of the warp in slot t % slots.
// An item is RPW rows of W: one row (plain), or GLU's gate row j and up row j + n of a [2n, k] W (y = silu(gate) *
// up, y: [m, n], in x's dtype). w: [n or 2n, k] (row stride ldw, 16-byte rows); y: [m, n] (row stride ldy).
// Shared memory: the staged x (m * k, aligned up to kXAlign bytes), then kWarps rings of slots * RPW rows of k.
template <typename T, typename OutT, int VEC, int MT, int RPW, int SPLIT, bool PDL, typename Stage>
__device__ __forceinline__ void stream_body(OutT* __restrict__ y, const T* __restrict__ w, const T* __restrict__ bias,
                                            int m, int n, int k, long long ldw, long long ldy, int slots,
                                            int x_region, Stage stage) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kGlu = RPW == 2;
  static_assert(!kGlu || SPLIT == 1, "GLU: one warp per gate/up pair, K unsplit (the GLU GEMV's order)");
  static_assert(!kGlu || std::is_same_v<T, OutT>, "GLU: y in x's dtype");
  using P = Pack<T, VEC>;
  constexpr int kChunk = kWarpSize * VEC;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[kWarps][kMaxSlots];
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int g = blockIdx.x * kWarps + warp;
  const int stride = gridDim.x * kWarps;
  const int count = g < n ? vt::ceil_div(n - g, stride) : 0;  // this warp's items
  const uint32_t row_bytes = static_cast<uint32_t>(k) * sizeof(T);
  T* xs = reinterpret_cast<T*>(smem_raw);
  T* ring = reinterpret_cast<T*>(smem_raw + x_region) + static_cast<long long>(warp) * slots * RPW * k;

  const uint64_t policy = evict_first_policy();
  auto issue = [&](int t) {  // lane 0: item t's rows into slot t % slots
    const int item = g + t * stride;
    const int s = t % slots;
    mbar_expect_tx(&bars[warp][s], RPW * row_bytes);
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr) {
      const long long row = item + static_cast<long long>(rr) * n;  // GLU: the up row follows the n gate rows
      bulk_copy(ring + (static_cast<long long>(s) * RPW + rr) * k, w + row * ldw, row_bytes, &bars[warp][s], policy);
    }
  };
  if (lane == 0) {
    for (int s = 0; s < slots; ++s) mbar_init(&bars[warp][s], 1);
    mbar_init_fence();
    for (int t = 0; t < min(slots, count); ++t) issue(t);  // W only: it does not depend on the grid before
  }
  __syncwarp();
  vt_gemv::allow_dependents();  // every W copy of the first round is issued: the next grid may take the free room
  if constexpr (PDL) vt_gemv::wait_for_inputs();
  stage(xs);  // ends with a barrier

  const int nchunks = vt::ceil_div(k, kChunk);
  for (int t = 0; t < count; ++t) {
    const int s = t % slots;
    mbar_wait(&bars[warp][s], static_cast<uint32_t>((t / slots) & 1));
    const T* ws = ring + static_cast<long long>(s) * RPW * k;
    float acc[RPW][SPLIT][MT];
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
      for (int p = 0; p < SPLIT; ++p)
#pragma unroll
        for (int r = 0; r < MT; ++r) acc[rr][p][r] = 0.0f;
    for (int c0 = 0; c0 < nchunks; c0 += SPLIT) {
#pragma unroll
      for (int p = 0; p < SPLIT; ++p) {
        const int off = (c0 + p) * kChunk + lane * VEC;
        if (off >= k) break;  // a lane's vector lies wholly inside k or outside (k is a multiple of VEC)
        P wv[RPW];
#pragma unroll
        for (int rr = 0; rr < RPW; ++rr) wv[rr] = *reinterpret_cast<const P*>(ws + rr * k + off);
#pragma unroll
        for (int r = 0; r < MT; ++r) {
          if (r >= m) break;
          const P xp = *reinterpret_cast<const P*>(xs + static_cast<long long>(r) * k + off);
#pragma unroll
          for (int rr = 0; rr < RPW; ++rr) vt_gemv::fma_pack<T, VEC>(acc[rr][p][r], wv[rr], xp);
        }
      }
    }
    __syncwarp();  // every lane has read the slot
    if (lane == 0 && t + slots < count) {
      proxy_fence();
      issue(t + slots);
    }
#pragma unroll
    for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
      for (int p = 0; p < SPLIT; ++p)
#pragma unroll
        for (int r = 0; r < MT; ++r) acc[rr][p][r] = vt_gemv::warp_sum(acc[rr][p][r]);
    if (lane != 0) continue;
    const int item = g + t * stride;
    if constexpr (kGlu) {
      const float bg = bias != nullptr ? vt::to_f32(bias[item]) : 0.0f;
      const float bu = bias != nullptr ? vt::to_f32(bias[item + n]) : 0.0f;
#pragma unroll
      for (int r = 0; r < MT; ++r)
        if (r < m)
          y[r * ldy + item] =
              vt_act::silu_mul(vt::from_f32<T>(acc[0][0][r] + bg), vt::from_f32<T>(acc[1][0][r] + bu));
    } else if constexpr (SPLIT == 1) {
      const float b = bias != nullptr ? vt::to_f32(bias[item]) : 0.0f;
#pragma unroll
      for (int r = 0; r < MT; ++r)
        if (r < m) y[r * ldy + item] = vt::from_f32<OutT>(acc[0][0][r] + b);
    } else {  // the fast path's split sum: 0, then each partial in order, then the bias
#pragma unroll
      for (int r = 0; r < MT; ++r) {
        if (r >= m) break;
        float sum = 0.0f;
#pragma unroll
        for (int p = 0; p < SPLIT; ++p) sum += acc[0][p][r];
        if (bias != nullptr) sum += vt::to_f32(bias[item]);
        y[r * ldy + item] = vt::from_f32<OutT>(sum);
      }
    }
  }
#else
  __trap();  // the launcher refuses below sm_90
#endif
}

// The plain streamed GEMV: x [m, k] (row stride ldx) copied into shared memory as it is.
template <typename T, int VEC, int MT, int SPLIT, bool PDL>
__global__ void __launch_bounds__(kThreads, kMinResident)
stream_kernel(T* __restrict__ y, const T* __restrict__ w, const T* __restrict__ x, const T* __restrict__ bias, int m,
              int n, int k, long long ldw, long long ldx, long long ldy, int slots, int x_region) {
  stream_body<T, T, VEC, MT, 1, SPLIT, PDL>(y, w, bias, m, n, k, ldw, ldy, slots, x_region,
                                            vt_gemv::StageCopy<T, VEC, PDL>{x, m, k, ldx});
}

// The GLU streamed GEMV: y = silu_and_mul(x W^T (+ bias)) for a [2n, k] gate/up W.
template <typename T, int VEC, int MT, bool PDL>
__global__ void __launch_bounds__(kThreads, kMinResident)
stream_glu_kernel(T* __restrict__ y, const T* __restrict__ w, const T* __restrict__ x, const T* __restrict__ bias,
                  int m, int n, int k, long long ldw, long long ldx, long long ldy, int slots, int x_region) {
  stream_body<T, T, VEC, MT, 2, 1, PDL>(y, w, bias, m, n, k, ldw, ldy, slots, x_region,
                                        vt_gemv::StageCopy<T, VEC, PDL>{x, m, k, ldx});
}

// The streamed GEMV with the residual add + RMSNorm in its prologue (gemv_prologue.cuh StageAddRmsNorm: the norm
// kernel's order, block 0 writes the new residual); RPW 2: the GLU form.
template <typename T, int VEC, int MT, int RPW, int SPLIT, bool PDL>
__global__ void __launch_bounds__(kThreads, kMinResident)
stream_norm_kernel(T* __restrict__ y, const T* __restrict__ w, const T* __restrict__ bias, vt_gemv::PrologueArgs pa,
                   int m, int n, int k, long long ldw, long long ldy, int slots, int x_region) {
  stream_body<T, T, VEC, MT, RPW, SPLIT, PDL>(y, w, bias, m, n, k, ldw, ldy, slots, x_region,
                                              vt_gemv::StageAddRmsNorm<T>{pa, m, k});
}

}  // namespace vt_gemv_stream
