// Fused M=1 dequant-GEMV kernels for int4 checkpoints (AWQ, GPTQ) on raw pointers; tuning constants are in
// quant.cuh.
//
// Numerics: each weight is dequantized in fp32 exactly as the reference does, rounded once to the
// activation dtype TX (as dequant-then-linear would), and multiplied into an fp32 accumulator. Every sum
// runs in a fixed order (split-K partial sums included), so results are deterministic.
#pragma once

#include "quant.cuh"

namespace vt_quant {

// ---- dequant arithmetic ---------------------------------------------------------------------------

// The int4 fields of `word` at bits sh..sh+3 and sh+16..sh+19, each plus kInt4Bias, as exact fp32: the
// field is OR-ed into the mantissa of the bf16 128 (0x4300), and a bf16 widens to fp32 by a shift.
constexpr float kInt4Bias = 128.f;
__device__ __forceinline__ void int4_pair_biased(uint32_t word, int sh, float& lo, float& hi) {
  const uint32_t t = ((word >> sh) & 0x000F000Fu) | 0x43004300u;
  lo = __uint_as_float(t << 16);
  hi = __uint_as_float(t & 0xFFFF0000u);
}

// Per column constants (a, b) of the int4 dequant (q - z) * s for a biased code f = q + 128:
// 16-bit scales: a = s, b = -(z + 128) * s, and fmaf(f, a, b) is (q - z) * s exactly (every product
// has at most 19 significant bits, and the exact sum is representable, so the one rounding is exact;
// for bf16 scales this needs |s| < 2^120, where (z + 128) * s cannot overflow);
// fp32 scales: a = s, b = z + 128, and (f - b) * a is the reference's one fp32 rounding of (q - z) * s.
template <typename TS>
__device__ __forceinline__ void int4_consts(int z, TS s, float& a, float& b) {
  a = to_f32<TS>(s);
  if constexpr (sizeof(TS) == 4) {
    b = (float)z + kInt4Bias;
  } else {
    b = -((float)z + kInt4Bias) * a;
  }
}

template <typename TS>
__device__ __forceinline__ float int4_dequant(float f, float a, float b) {
  if constexpr (sizeof(TS) == 4) {
    return (f - b) * a;
  } else {
    return fmaf(f, a, b);
  }
}

// ---- split-K finish -------------------------------------------------------------------------------

// End of an int4 GEMV block: red[slot][c] holds each K slot's sums for tile column c (columns col0 + c).
// The slots are added in slot order. With one K split the block writes out; otherwise it writes its row
// of partial[gridDim.y][N], and the last block of this column tile to arrive (counted in
// counters[blockIdx.x], which it resets to 0) adds the rows in split order and writes out.
template <int kSlots, int kTileCols, typename TX, typename TOut>
__device__ __forceinline__ void finish_tile(float (&red)[kSlots][kTileCols], int col0, int n_dim,
                                            const TX* __restrict__ bias, float* __restrict__ partial,
                                            int* __restrict__ counters, TOut* __restrict__ out) {
  __shared__ bool last;
  __syncthreads();
  for (int c = threadIdx.x; c < kTileCols; c += blockDim.x) {
    const int n = col0 + c;
    if (n >= n_dim) continue;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kSlots; ++w) s += red[w][c];
    if (gridDim.y == 1)
      out[n] = from_f32<TOut>(with_bias(s, bias, n));
    else
      partial[(int64_t)blockIdx.y * n_dim + n] = s;
  }
  if (gridDim.y == 1) return;
  __threadfence();  // this block's partial sums are visible device-wide before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.x], 1) == (int)gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int c = threadIdx.x; c < kTileCols; c += blockDim.x) {
    const int n = col0 + c;
    if (n >= n_dim) continue;
    float s = 0.f;
    for (int y = 0; y < (int)gridDim.y; ++y) s += __ldcg(&partial[(int64_t)y * n_dim + n]);
    out[n] = from_f32<TOut>(with_bias(s, bias, n));
  }
  if (threadIdx.x == 0) counters[blockIdx.x] = 0;  // ready for the next launch (and graph replay)
}

// This thread's K units [begin, end): the gridDim.y * kSlots threads along K take near-equal contiguous runs.
template <int kSlots>
__device__ __forceinline__ void k_units(int units, int slot, int& begin, int& end) {
  const int64_t threads = (int64_t)gridDim.y * kSlots, t = (int64_t)blockIdx.y * kSlots + slot;
  begin = (int)(t * units / threads);
  end = (int)((t + 1) * units / threads);
}

// ---- AWQ ------------------------------------------------------------------------------------------

// AWQ GEMV at M=1. Block: kAwqLanes threads along N (kV packed words, 8 * kV columns each) times
// kGemvThreads / kAwqLanes slots along K; grid: (column tiles, K splits). A K unit is kPack rows;
// kAwqUnitsInFlight units are loaded before any is used. kV > 1: N / 8 a multiple of kV, K a multiple
// of 8, x and qweight aligned (the launcher checks); kV == 1 takes any shape.
// x: [K]; bias: [N] or null; partial: [gridDim.y, N]; out: [N]
template <typename TX, typename TS, typename TOut, int kV>
__global__ void __launch_bounds__(kGemvThreads)
awq_gemv_kernel(const TX* __restrict__ x, const int32_t* __restrict__ qweight, const int32_t* __restrict__ qzeros,
                const TS* __restrict__ scales, const TX* __restrict__ bias, float* __restrict__ partial,
                int* __restrict__ counters, TOut* __restrict__ out, int k_dim, int n_dim, int group) {
  constexpr int kSlots = kGemvThreads / kAwqLanes, kCols = kV * kPack;
  __shared__ float red[kSlots][kAwqLanes * kCols];
  const int lane = threadIdx.x % kAwqLanes, slot = threadIdx.x / kAwqLanes;
  const int words = n_dim / kPack;
  const int wc = (blockIdx.x * kAwqLanes + lane) * kV;  // this thread's first packed word of a row
  float acc[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) acc[c] = 0.f;
  if (wc < words) {
    int u, u_end, g_end = 0;  // a, b hold the constants of the group that ends at row g_end
    k_units<kSlots>((k_dim + kPack - 1) / kPack, slot, u, u_end);
    float a[kCols] = {}, b[kCols] = {};
    for (; u < u_end; u += kAwqUnitsInFlight) {
      uint32_t qw[kAwqUnitsInFlight][kPack][kV];
#pragma unroll
      for (int i = 0; i < kAwqUnitsInFlight; ++i) {
#pragma unroll
        for (int r = 0; r < kPack; ++r) {
          const int k = (u + i) * kPack + r;
          if (u + i < u_end && (kV > 1 || k < k_dim)) {
            load_words<kV>(qweight + (int64_t)k * words + wc, qw[i][r]);
          } else {
#pragma unroll
            for (int v = 0; v < kV; ++v) qw[i][r][v] = 0u;
          }
        }
      }
#pragma unroll
      for (int i = 0; i < kAwqUnitsInFlight; ++i) {
        if (u + i >= u_end) break;
        const int k0 = (u + i) * kPack;
        float xv[kPack];
        if constexpr (kV > 1) {
          load_vec<TX, kPack>(x + k0, xv);
        } else {
#pragma unroll
          for (int r = 0; r < kPack; ++r) xv[r] = k0 + r < k_dim ? to_f32<TX>(x[k0 + r]) : 0.f;
        }
#pragma unroll
        for (int r = 0; r < kPack; ++r) {
          const int k = k0 + r;
          if (kV == 1 && k >= k_dim) break;
          if (k >= g_end) {  // a thread's rows only increase
            const int cur = k / group;
            g_end = (cur + 1) * group;
            uint32_t zw[kV];
            load_words<kV>(qzeros + (int64_t)cur * words + wc, zw);
#pragma unroll
            for (int c = 0; c < kCols; ++c)
              int4_consts<TS>((zw[c / kPack] >> awq_shift(c % kPack)) & 0xf,
                              scales[(int64_t)cur * n_dim + wc * kPack + c], a[c], b[c]);
          }
#pragma unroll
          for (int v = 0; v < kV; ++v) {
#pragma unroll
            for (int p = 0; p < kPack / 2; ++p) {  // nibbles p and p + 4 hold columns 2p and 2p + 1
              const int c = v * kPack + 2 * p;
              float w0, w1;
              int4_pair_biased(qw[i][r][v], 4 * p, w0, w1);
              w0 = int4_dequant<TS>(w0, a[c], b[c]);
              w1 = int4_dequant<TS>(w1, a[c + 1], b[c + 1]);
              round_pair<TX>(w0, w1);
              acc[c] = fmaf(xv[r], w0, acc[c]);
              acc[c + 1] = fmaf(xv[r], w1, acc[c + 1]);
            }
          }
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) red[slot][lane * kCols + c] = acc[c];
  finish_tile<kSlots, kAwqLanes * kCols>(red, blockIdx.x * kAwqLanes * kCols, n_dim, bias, partial, counters, out);
}

// ---- GPTQ -----------------------------------------------------------------------------------------

// GPTQ GEMV at M=1, act-order aware (row k reads group g_idx[k]; a row whose g_idx lies outside [0, G)
// contributes NaN). Block: kGptqLanes threads along N (kV columns each, one kV-word load per packed row)
// times kGemvThreads / kGptqLanes warps along K; a K unit is one packed row (8 K rows), kGptqRowsInFlight
// of them loaded before use. kV > 1: x and qweight aligned (the launcher checks).
// x: [K]; g_idx: [K]; bias: [N] or null; partial: [gridDim.y, N]; out: [N]
template <typename TX, typename TS, typename TOut, int kV>
__global__ void __launch_bounds__(kGemvThreads)
gptq_gemv_kernel(const TX* __restrict__ x, const int32_t* __restrict__ qweight, const int32_t* __restrict__ qzeros,
                 const TS* __restrict__ scales, const int32_t* __restrict__ g_idx, const TX* __restrict__ bias,
                 float* __restrict__ partial, int* __restrict__ counters, TOut* __restrict__ out, int k_dim, int n_dim,
                 int groups, int zero_offset) {
  constexpr int kSlots = kGemvThreads / kGptqLanes;
  __shared__ float red[kSlots][kGptqLanes * kV];
  const int lane = threadIdx.x % kGptqLanes, slot = threadIdx.x / kGptqLanes;  // a slot is one warp
  const int n0 = (blockIdx.x * kGptqLanes + lane) * kV;  // this thread's first column
  const int words = n_dim / kPack;
  const bool active = n0 < n_dim;  // N % kV == 0 for kV > 1, so all kV columns are in range
  float acc[kV];
#pragma unroll
  for (int c = 0; c < kV; ++c) acc[c] = 0.f;
  int u, u_end, cur = -1;  // a, b hold the constants of group cur: NaN for the invalid group -1
  k_units<kSlots>(k_dim / kPack, slot, u, u_end);
  float a[kV], b[kV];
#pragma unroll
  for (int c = 0; c < kV; ++c) a[c] = b[c] = __int_as_float(0x7fc00000);
  // The whole warp walks the same rows (lanes differ in N only), so group changes are warp-uniform; each
  // lane reads one of a packed row's eight g_idx entries and a shuffle hands each row's to every lane.
  for (; u < u_end; u += kGptqRowsInFlight) {
    uint32_t qw[kGptqRowsInFlight][kV];
    int gl[kGptqRowsInFlight];  // lane l: the group of row l % 8 of each packed row
#pragma unroll
    for (int i = 0; i < kGptqRowsInFlight; ++i) {
      if (active && u + i < u_end) {
        load_words<kV>(qweight + (int64_t)(u + i) * n_dim + n0, qw[i]);
      } else {
#pragma unroll
        for (int c = 0; c < kV; ++c) qw[i][c] = 0u;
      }
      gl[i] = u + i < u_end ? __ldg(g_idx + (u + i) * kPack + lane % kPack) : 0;
    }
#pragma unroll
    for (int i = 0; i < kGptqRowsInFlight; ++i) {
      if (u + i >= u_end) break;  // uniform over the warp
      const int k0 = (u + i) * kPack;
      float xv[kPack];
      if constexpr (kV > 1) {
        load_vec<TX, kPack>(x + k0, xv);
      } else {
#pragma unroll
        for (int r = 0; r < kPack; ++r) xv[r] = to_f32<TX>(x[k0 + r]);
      }
      // fields r and r + 4 of each word, biased, for the kV columns: f[r][c]
      float f[kPack][kV];
#pragma unroll
      for (int c = 0; c < kV; ++c) {
#pragma unroll
        for (int p = 0; p < kPack / 2; ++p) int4_pair_biased(qw[i][c], 4 * p, f[p][c], f[p + kPack / 2][c]);
      }
#pragma unroll
      for (int r = 0; r < kPack; ++r) {
        const int g = __shfl_sync(0xffffffffu, gl[i], r);
        if (g != cur) {  // warp-uniform
          cur = g;
          if ((unsigned)g < (unsigned)groups) {
            if (active) {
              const uint32_t zw = (uint32_t)__ldg(qzeros + (int64_t)g * words + n0 / kPack);
#pragma unroll
              for (int c = 0; c < kV; ++c)
                int4_consts<TS>((int)((zw >> (4 * ((n0 + c) % kPack))) & 0xf) + zero_offset,
                                scales[(int64_t)g * n_dim + n0 + c], a[c], b[c]);
            }
          } else {
#pragma unroll
            for (int c = 0; c < kV; ++c) a[c] = b[c] = __int_as_float(0x7fc00000);
          }
        }
#pragma unroll
        for (int c = 0; c < kV; c += 2) {
          float w0 = int4_dequant<TS>(f[r][c], a[c], b[c]), w1 = 0.f;
          if constexpr (kV > 1) w1 = int4_dequant<TS>(f[r][c + 1], a[c + 1], b[c + 1]);
          round_pair<TX>(w0, w1);
          acc[c] = fmaf(xv[r], w0, acc[c]);
          if constexpr (kV > 1) acc[c + 1] = fmaf(xv[r], w1, acc[c + 1]);
        }
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kV; ++c) red[slot][lane * kV + c] = acc[c];
  finish_tile<kSlots, kGptqLanes * kV>(red, blockIdx.x * kGptqLanes * kV, n_dim, bias, partial, counters, out);
}

}  // namespace vt_quant
