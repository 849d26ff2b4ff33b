// The small decode GEMM: y[m, n] = x[m, k] W[n, k]^T for 2 <= m <= 32 rows (a batch of decode tokens), with an
// optional residual add + RMSNorm prologue. Past the GEMV's 8 rows the step fell to cuBLAS, whose 32-row GEMMs read
// W at a quarter to a third of DRAM bandwidth; this kernel is built to stream W once at full width instead. From 2
// to 8 rows it stands beside the GEMV, whose fp32 FMAs cost 8 instructions per W element at 8 rows, where one MMA
// takes 16 x 8 x 16 products.
//
// Each block owns 8 * NT output columns and all m rows. Its 8 warps split K into 32-wide chunks (warp w takes chunks
// w, w + 8, ...), each warp reading W straight from DRAM in 16-byte loads, a group of chunks ahead of the one it
// multiplies, and x from shared memory, where the block staged it (copied, or added and normalised as the norm
// kernel does). The product is mma.sync m16n8k16 with fp32 accumulators, the rows padded to MT m16 tiles (one up to
// 16 rows, two past it; the pad rows a copy of the last row, never stored). The warps' partial sums meet in shared
// memory and are added in warp order, so the bits depend on neither the tile width nor the schedule.
//
// The k order inside a chunk is permuted, the same way for x and W: a lane of quad t loads the 8 consecutive k at
// chunk + 8t (one 16-byte vector of W's row and of each x row it needs), and feeds elements 4s..4s+3 to the MMA of
// step s in the slots the fragment layout calls k = 2t, 2t+1 (A regs 0/1, B reg 0) and 2t+8, 2t+9 (A regs 2/3,
// B reg 1). A dot product is a sum over k, so any permutation shared by both operands is the same product.
#pragma once
#include <cstdint>

#include "common.cuh"
#include "norm.cuh"

namespace vt_gemm_small {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMinRows = 2;       // one row takes the GEMV (an m16 tile would be 15 rows of pad)
constexpr int kMaxRows = 32;      // two m16 tiles
constexpr int kOneTileRows = 16;  // rows one m16 tile holds: up to here a launch takes MT = 1
constexpr int kChunk = 32;        // k per warp step: 4 lanes of a quad x 8 elements
constexpr int kTileN = 8;         // columns of one MMA n tile
constexpr int kVec = 8;           // 16-byte vectors of 2-byte elements
constexpr int kXPad = 32;         // elements past k in a staged x row: rows 64 bytes apart in banks, no conflicts
constexpr int kStaticReserve = 1024;  // bytes of opt-in shared memory left for the static (the norm's block_sum_n)
constexpr int kNormRows = 8;  // rows whose sums of squares the prologue reduces at once (block_sum_n's 256 bytes)
constexpr int kBytesInFlight = 64;  // W bytes a lane loads per group (NT tiles x U chunks x 16 bytes)

static_assert(kThreads == vt_norm::kThreadsPerBlock, "the prologue sums a row over the block in the norm kernel's tree");

struct NormArgs {
  const void* residual;      // [m, k] (row stride ldr), or null: the norm of x alone
  void* residual_out;        // [m, k] (row stride ldro): x + residual rounded (block 0 writes it), or null
  const void* norm_weight;   // [k]
  long long ldr, ldro;
  float mean_scale, eps;     // torch's mean factor (rows / numel as floats) and the norm's eps
};

template <typename T> struct Mma;
template <> struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// x rows into shared memory (row stride ldxs): a plain 16-byte copy, warp w taking rows w, w + 8, ...
template <typename T>
__device__ __forceinline__ void stage_copy(T* xs, int ldxs, const T* x, long long ldx, int m, int k) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < m; r += kWarps)
    for (int i = lane * kVec; i < k; i += 32 * kVec)
      *reinterpret_cast<uint4*>(xs + r * ldxs + i) = __ldg(reinterpret_cast<const uint4*>(x + r * ldx + i));
}

// residual_out = (x + residual).to(T); xs = rms_norm(residual_out) * norm_weight: per element and per row the norm
// kernel's operations in its order (thread t owns elements t, t + 256, ...; block_sum's tree), so xs holds its bits.
// Every row's loads are in flight at once (16-byte vectors), then the rows' sums meet kNormRows at a time: row by row,
// each row a dependent round trip and three barriers, the prologue took 10x the GEMM itself at 32 rows.
template <typename T>
__device__ __forceinline__ void stage_norm(T* xs, int ldxs, const T* x, long long ldx, const NormArgs& na, int m,
                                           int k) {
  const T* res = static_cast<const T*>(na.residual);
  T* rout = blockIdx.x == 0 ? static_cast<T*>(na.residual_out) : nullptr;
  const T* nw = static_cast<const T*>(na.norm_weight);
  const int row_vecs = k / kVec;
  for (int i = threadIdx.x; i < m * row_vecs; i += kThreads) {
    const int r = i / row_vecs, c = (i % row_vecs) * kVec;
    uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + r * ldx + c));
    if (res != nullptr) {
      const uint4 rv = __ldg(reinterpret_cast<const uint4*>(res + r * na.ldr + c));
      T* a = reinterpret_cast<T*>(&xv);
      const T* b = reinterpret_cast<const T*>(&rv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) a[e] = vt::from_f32<T>(__fadd_rn(vt::to_f32(a[e]), vt::to_f32(b[e])));
    }
    *reinterpret_cast<uint4*>(xs + r * ldxs + c) = xv;
    if (rout != nullptr) *reinterpret_cast<uint4*>(rout + r * na.ldro + c) = xv;
  }
  __syncthreads();
  for (int r0 = 0; r0 < m; r0 += kNormRows) {
    const int rows = min(kNormRows, m - r0);
    float sq[kNormRows];
#pragma unroll
    for (int j = 0; j < kNormRows; ++j) {
      sq[j] = 0.0f;
      if (j < rows)
        for (int i = threadIdx.x; i < k; i += kThreads) {
          const float v = vt::to_f32(xs[(r0 + j) * ldxs + i]);
          sq[j] = __fadd_rn(sq[j], __fmul_rn(v, v));
        }
    }
    vt_norm::block_sum_n(sq, rows);
#pragma unroll
    for (int j = 0; j < kNormRows; ++j) {
      if (j >= rows) break;
      const float scale = vt_norm::rms_scale(sq[j], na.mean_scale, na.eps);
      T* xr = xs + (r0 + j) * ldxs;
      for (int i = threadIdx.x; i < k; i += kThreads) xr[i] = vt_norm::scale_and_weight(vt::to_f32(xr[i]), scale, nw[i]);
    }
    __syncthreads();  // block_sum_n's partials are reused by the next rows
  }
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;  // i is a compile-time constant at every call
}

// One chunk's product: acc[mt][j] += x rows (m tile mt) . W rows (n tile j) over the lane's 8 k (two MMA steps).
template <typename T, int MT, int NT>
__device__ __forceinline__ void multiply(float (&acc)[MT][NT][4], const uint4 (&xv)[MT][2], const uint4 (&wv)[NT]) {
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint32_t a[4] = {word(xv[mt][0], 2 * s), word(xv[mt][1], 2 * s), word(xv[mt][0], 2 * s + 1),
                             word(xv[mt][1], 2 * s + 1)};
#pragma unroll
      for (int j = 0; j < NT; ++j) Mma<T>::run(acc[mt][j], a, word(wv[j], 2 * s), word(wv[j], 2 * s + 1));
    }
}

// y = stage(x) W^T. w: [n, k] (row stride ldw); x: [m, k] (ldx); y: [m, n] (ldy); 2 <= m <= 16 * MT; k, ldw, ldx
// multiples of 8 with 16-byte aligned bases (the launcher checks). Dynamic shared memory: gemm_small_smem().
template <typename T, typename OutT, int MT, int NT, bool NORM>
__global__ void __launch_bounds__(kThreads, 2)
gemm_small_kernel(OutT* __restrict__ y, const T* __restrict__ w, const T* __restrict__ x, NormArgs na, int m, int n,
                  int k, long long ldw, long long ldx, long long ldy) {
  constexpr int U = kBytesInFlight / (16 * NT);  // chunks per group
  static_assert(U >= 1 && U * NT * 16 == kBytesInFlight, "NT divides the bytes in flight");
  extern __shared__ __align__(16) unsigned char smem[];
  T* xs = reinterpret_cast<T*>(smem);
  const int ldxs = k + kXPad;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;  // the fragment's group (row of A, column of B) and its quad lane
  const int n0 = blockIdx.x * kTileN * NT;
  const T* wrow[NT];
  bool wok[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int col = n0 + j * kTileN + g;
    wok[j] = col < n;
    wrow[j] = w + static_cast<long long>(wok[j] ? col : 0) * ldw;
  }
  static_assert(MT == 1 || MT == 2, "one or two m16 tiles");
  const T* xrow[MT][2];  // rows mt * 16 + h * 8 + g, the pad rows reading row m - 1
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) xrow[mt][h] = xs + min(mt * 16 + h * 8 + g, m - 1) * ldxs;

  const int chunks = (k + kChunk - 1) / kChunk;
  const int per_warp = (chunks + kWarps - 1) / kWarps;
  const int groups = (per_warp + U - 1) / U;
  // the lane's first k in iteration i (chunk warp + 8 i); k is a multiple of 8, so its 8 are all in or all out
  auto k_of = [&](int i) { return (warp + kWarps * i) * kChunk + t * kVec; };
  auto load_w = [&](int grp, uint4 (&wv)[U][NT]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kk = k_of(grp * U + u);
#pragma unroll
      for (int j = 0; j < NT; ++j)
        wv[u][j] = (wok[j] && kk < k) ? __ldg(reinterpret_cast<const uint4*>(wrow[j] + kk)) : make_uint4(0, 0, 0, 0);
    }
  };
  float acc[MT][NT][4] = {};
  auto compute = [&](int grp, const uint4 (&wv)[U][NT]) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int kk = k_of(grp * U + u);
      uint4 xv[MT][2];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)  // past k: zeros (the pad columns of xs are not written)
          xv[mt][h] = kk < k ? *reinterpret_cast<const uint4*>(xrow[mt][h] + kk) : make_uint4(0, 0, 0, 0);
      multiply<T, MT, NT>(acc, xv, wv[u]);
    }
  };
  // two register buffers: the next group's W loads are in flight while this group multiplies; the first group's
  // are issued before x is staged (W does not depend on it), so the staging hides their latency
  uint4 wa[U][NT], wb[U][NT];
  load_w(0, wa);
  if constexpr (NORM)
    stage_norm(xs, ldxs, x, ldx, na, m, k);
  else
    stage_copy(xs, ldxs, x, ldx, m, k);
  __syncthreads();

  for (int grp = 0; grp < groups; grp += 2) {
    if (grp + 1 < groups) load_w(grp + 1, wb);
    compute(grp, wa);
    if (grp + 1 >= groups) break;
    if (grp + 2 < groups) load_w(grp + 2, wa);
    compute(grp + 1, wb);
  }

  // the warps' partial sums meet in shared memory (over xs, which every warp has finished reading)
  constexpr int bn = kTileN * NT;
  float* red = reinterpret_cast<float*>(smem);  // [kWarps][kMaxRows][bn]
  __syncthreads();
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {  // c0, c1: row g, columns 2t, 2t + 1; c2, c3: row g + 8
        const int row = mt * 16 + g + (e / 2) * 8, col = j * kTileN + t * 2 + e % 2;
        red[(warp * kMaxRows + row) * bn + col] = acc[mt][j][e];
      }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kMaxRows * bn; idx += kThreads) {
    const int row = idx / bn, col = idx % bn;
    if (row >= m || n0 + col >= n) continue;
    float s = red[row * bn + col];
#pragma unroll
    for (int wi = 1; wi < kWarps; ++wi) s = __fadd_rn(s, red[(wi * kMaxRows + row) * bn + col]);
    y[row * ldy + n0 + col] = vt::from_f32<OutT>(s);
  }
}

// Dynamic shared memory of a launch: the staged rows, or the partial sums when they are larger.
inline size_t gemm_small_smem(int m, int k, int nt, int elt) {
  const size_t xs = static_cast<size_t>(m) * (k + kXPad) * elt;
  const size_t red = static_cast<size_t>(kWarps) * kMaxRows * kTileN * nt * sizeof(float);
  return xs > red ? xs : red;
}

}  // namespace vt_gemm_small
