// Dtype-faithful GEMV for decode, y = x W^T (+ bias): fp32 accumulation in a fixed order, output type from the caller.
#pragma once
#include <type_traits>

#include "act.cuh"
#include "common.cuh"

namespace vt_gemv {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;   // 256 threads per block on both paths
constexpr int kVectorBytes = 16;    // one 16-byte load per lane per chunk on the fast path
constexpr int kUnroll = 4;          // chunks of one W row (16 B each) a lane has in flight at once
constexpr int kRowsPerWarp = 1;     // rows of W one warp owns: each x load is reused across them
constexpr int kSplitK = 2;          // warps that share one W row (K interleaved) when the grid is short of warps
constexpr int kSplitBelowWarpsPerSm = 16;  // split K when the unsplit grid has fewer warps than this per SM
constexpr bool kStageX = true;      // stage x in shared memory (else every warp reads it through L1)
constexpr int kMaxSmemXBytes = 46 * 1024;  // ... when all its rows fit here: 48 KB without opt-in, less the
                                           // static split-K partials (1 KB at most)
constexpr int kMinBlocksPerSm = 4;  // fast path, one row of x: register cap 65536 / (256 * this) per thread
constexpr int kMinBlocksPerSmRows = 2;  // fast path, 2 to 8 rows of x (more accumulators per lane)
constexpr int kMaxRows = 8;         // rows of x one launch takes (MAX_ROWS in gemv.py)
constexpr int kGluBlocksPerSm = 3;  // GLU path, one row of x: two W rows per warp in flight (85 registers)

// VEC elements of T per load: kVectorBytes / sizeof(T) on the fast path, 1 on the unaligned path.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  T v[VEC];
};

// A 16-byte load of W that does not allocate in L1: W is streamed once, x stays cached.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_streamed(const T* p) {
  static_assert(sizeof(Pack<T, VEC>) == 16, "the streamed load is 16 bytes");
  Pack<T, VEC> out;
  uint4& r = *reinterpret_cast<uint4*>(&out);
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return out;
}

// A 16-byte read-only load through L1 (x: read by every warp of the SM).
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_cached(const T* p) {
  Pack<T, VEC> out;
  *reinterpret_cast<uint4*>(&out) = __ldg(reinterpret_cast<const uint4*>(p));
  return out;
}

template <typename T, int VEC>
__device__ __forceinline__ void fma_pack(float& acc, const Pack<T, VEC>& a, const Pack<T, VEC>& b) {
#pragma unroll
  for (int e = 0; e < VEC; ++e) acc = fmaf(vt::to_f32(a.v[e]), vt::to_f32(b.v[e]), acc);
}

__device__ __forceinline__ float warp_sum(float v) {  // a fixed butterfly: the same order on every run
#pragma unroll
  for (int off = kWarpSize / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Programmatic dependent launch (sm_90 and newer; a no-op where the grid was launched without it): wait until the
// grids this one depends on have finished and their writes are visible, or let the next grid start launching.
__device__ __forceinline__ void wait_for_inputs() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Fast path. W: [n, k] (row stride ldw), x: [m, k] (row stride ldx), m <= MT, bias: [n] or null,
// y: [m, n] (row stride ldy). k, ldw, ldx are multiples of VEC and the bases 16-byte aligned.
// A block of kWarpsPerBlock warps; `split` consecutive warps share RPW rows of W, warp s of a group taking
// chunks s, s + split, ... (a chunk is kWarpSize * VEC elements, one load per lane), UNROLL chunks per
// batch. Each W load feeds all MT rows of x; each x load feeds all RPW rows of W. x is read from shared
// memory when XS (staged once per block by `stage(xs)` after the first W batch is issued), else through L1.
// With PDL the grid may start before the one that writes x has finished: only W (constant) is read before
// wait_for_inputs(), and the next grid is let in once this one has consumed its W.
// Sum order per output: each lane's chunks in order, the warp butterfly, then the split partials in warp order.
// GLU (RPW 2, split 1, OutT = T): W holds 2n rows, gate rows then up rows; warp j takes gate row j and up row j + n
// (each summed as above, so each rounds to the bits the plain GEMV writes) and writes silu(gate) * up, y: [m, n].
template <typename T, typename OutT, int VEC, int MT, int RPW, int UNROLL, bool XS, bool PDL, bool GLU, typename Stage>
__device__ __forceinline__ void gemv_body(OutT* __restrict__ y, const T* __restrict__ w, const T* __restrict__ x,
                                          const T* __restrict__ bias, int m, int n, int k, long long ldw,
                                          long long ldx, long long ldy, int split, Stage stage) {
  static_assert(RPW * MT <= kWarpSize, "one lane per output of a warp group in the split-K reduction");
  using P = Pack<T, VEC>;
  constexpr int kChunk = kWarpSize * VEC;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ float partial[kWarpsPerBlock][RPW * MT];
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int sub = warp % split;
  static_assert(!GLU || (RPW == 2 && std::is_same_v<T, OutT>), "GLU: a gate and an up row per warp, y in x's dtype");
  const int row0 = (blockIdx.x * (kWarpsPerBlock / split) + warp / split) * (GLU ? 1 : RPW);
  const int nchunks = vt::ceil_div(k, kChunk);
  const T* wrow[RPW];
#pragma unroll
  for (int rr = 0; rr < RPW; ++rr)  // rows past n read row n-1, never written
    wrow[rr] = GLU ? w + (static_cast<long long>(min(row0, n - 1)) + rr * static_cast<long long>(n)) * ldw
                   : w + static_cast<long long>(min(row0 + rr, n - 1)) * ldw;

  P wv[RPW][UNROLL];
  // Chunk slot u of the batch at c0 is chunk c0 + u * split; a lane's vector lies wholly inside k or outside
  // (k is a multiple of VEC), so one comparison guards it.
  auto in_k = [&](int c0, int u) { return (c0 + u * split) * kChunk + lane * VEC < k; };
  auto load_batch = [&](int c0) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int rr = 0; rr < RPW; ++rr)
        if (in_k(c0, u)) wv[rr][u] = load_streamed<T, VEC>(wrow[rr] + (c0 + u * split) * kChunk + lane * VEC);
  };

  int c = sub;
  load_batch(c);
  if constexpr (PDL) wait_for_inputs();
  T* xs = reinterpret_cast<T*>(smem_raw);
  if constexpr (XS) stage(xs);  // ends with a barrier

  float acc[RPW][MT];
#pragma unroll
  for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
    for (int r = 0; r < MT; ++r) acc[rr][r] = 0.0f;
  for (; c < nchunks; c += UNROLL * split) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if (!in_k(c, u)) continue;
      const int off = (c + u * split) * kChunk + lane * VEC;
#pragma unroll
      for (int r = 0; r < MT; ++r) {
        if (r >= m) break;
        const P xp = XS ? *reinterpret_cast<const P*>(xs + static_cast<long long>(r) * k + off)
                        : load_cached<T, VEC>(x + r * ldx + off);
#pragma unroll
        for (int rr = 0; rr < RPW; ++rr) fma_pack<T, VEC>(acc[rr][r], wv[rr][u], xp);
      }
    }
    if (c + UNROLL * split < nchunks) load_batch(c + UNROLL * split);
  }
  if constexpr (PDL) allow_dependents();

#pragma unroll
  for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
    for (int r = 0; r < MT; ++r) acc[rr][r] = warp_sum(acc[rr][r]);
  if constexpr (GLU) {  // split 1 (the launcher's condition): lane 0 holds both sums of every row of x
    if (lane != 0 || row0 >= n) return;
    const float bg = bias != nullptr ? vt::to_f32(bias[row0]) : 0.0f;
    const float bu = bias != nullptr ? vt::to_f32(bias[row0 + n]) : 0.0f;
#pragma unroll
    for (int r = 0; r < MT; ++r)
      if (r < m) y[r * ldy + row0] = vt_act::silu_mul(vt::from_f32<T>(acc[0][r] + bg), vt::from_f32<T>(acc[1][r] + bu));
    return;
  }
  if (split > 1) {  // the warps of a group hand their partials to shared memory; one thread per output adds them
    if (lane == 0)
#pragma unroll
      for (int rr = 0; rr < RPW; ++rr)
#pragma unroll
        for (int r = 0; r < MT; ++r) partial[warp][rr * MT + r] = acc[rr][r];
    __syncthreads();
    if (sub != 0 || lane >= RPW * MT) return;
    const int rr = lane / MT, r = lane % MT;
    float sum = 0.0f;
    for (int s = 0; s < split; ++s) sum += partial[warp + s][lane];
    const int row = row0 + rr;
    if (row < n && r < m) {
      if (bias != nullptr) sum += vt::to_f32(bias[row]);
      y[r * ldy + row] = vt::from_f32<OutT>(sum);
    }
    return;
  }
  if (lane != 0) return;
#pragma unroll
  for (int rr = 0; rr < RPW; ++rr) {
    const int row = row0 + rr;
    if (row >= n) break;
    const float b = bias != nullptr ? vt::to_f32(bias[row]) : 0.0f;
#pragma unroll
    for (int r = 0; r < MT; ++r)
      if (r < m) y[r * ldy + row] = vt::from_f32<OutT>(acc[rr][r] + b);
  }
}

// x's m rows copied into shared memory as they are (the plain GEMV). Under PDL x is read at L2 (ld.global.cg):
// the grid started before x was written, so nothing of it may come from a cache filled earlier.
template <typename T, int VEC, bool PDL>
struct StageCopy {
  const T* x;
  int m, k;
  long long ldx;
  __device__ __forceinline__ void operator()(T* xs) const {
    using P = Pack<T, VEC>;
    const int vecs = k / VEC;
    for (int r = 0; r < m; ++r)
      for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
        const P* src = reinterpret_cast<const P*>(x + r * ldx) + i;
        P v;
        if constexpr (PDL) *reinterpret_cast<uint4*>(&v) = __ldcg(reinterpret_cast<const uint4*>(src));
        else v = *src;
        reinterpret_cast<P*>(xs + static_cast<long long>(r) * k)[i] = v;
      }
    __syncthreads();
  }
};

template <typename T, typename OutT, int VEC, int MT, int RPW = kRowsPerWarp, int UNROLL = kUnroll, bool XS = true,
          int MIN_BLOCKS = kMinBlocksPerSm, bool PDL = false>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize, MIN_BLOCKS)
gemv_vec_kernel(OutT* __restrict__ y, const T* __restrict__ w, const T* __restrict__ x, const T* __restrict__ bias,
                int m, int n, int k, long long ldw, long long ldx, long long ldy, int split) {
  gemv_body<T, OutT, VEC, MT, RPW, UNROLL, XS, PDL, false>(y, w, x, bias, m, n, k, ldw, ldx, ldy, split,
                                                          StageCopy<T, VEC, PDL>{x, m, k, ldx});
}

// y = silu_and_mul(x W^T (+ bias)) for a [2n, k] gate/up W: the GLU form of the fast path (split 1); y: [m, n].
template <typename T, int VEC, int MT, int MIN_BLOCKS, bool PDL>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize, MIN_BLOCKS)
gemv_glu_kernel(T* __restrict__ y, const T* __restrict__ w, const T* __restrict__ x, const T* __restrict__ bias, int m,
                int n, int k, long long ldw, long long ldx, long long ldy) {
  gemv_body<T, T, VEC, MT, 2, kUnroll, true, PDL, true>(y, w, x, bias, m, n, k, ldw, ldx, ldy, 1,
                                                       StageCopy<T, VEC, PDL>{x, m, k, ldx});
}

// Unaligned path (any k, strides, alignment): one row of W per warp, one row of x per grid.y, scalar loads.
// grid: (ceil(n / kWarpsPerBlock), m). Sum order: each lane's elements in order, then the warp butterfly.
template <typename T, typename OutT>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
gemv_scalar_kernel(OutT* __restrict__ y, const T* __restrict__ w, const T* __restrict__ x, const T* __restrict__ bias,
                   int n, int k, long long ldw, long long ldx, long long ldy) {
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= n) return;  // whole warps exit together
  const int lane = threadIdx.x % kWarpSize;
  const T* wrow = w + static_cast<long long>(row) * ldw;
  const T* xrow = x + blockIdx.y * ldx;
  float acc = 0.0f;
  int i = lane;
  for (; i + (kUnroll - 1) * kWarpSize < k; i += kUnroll * kWarpSize) {
    T wv[kUnroll], xv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      wv[u] = wrow[i + u * kWarpSize];
      xv[u] = __ldg(xrow + i + u * kWarpSize);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc = fmaf(vt::to_f32(wv[u]), vt::to_f32(xv[u]), acc);
  }
  for (; i < k; i += kWarpSize) acc = fmaf(vt::to_f32(wrow[i]), vt::to_f32(__ldg(xrow + i)), acc);
  acc = warp_sum(acc);
  if (lane == 0) {
    if (bias != nullptr) acc += vt::to_f32(bias[row]);
    y[blockIdx.y * ldy + row] = vt::from_f32<OutT>(acc);
  }
}

}  // namespace vt_gemv
