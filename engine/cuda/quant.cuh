// Int4 (AWQ, GPTQ) and NVFP4 dequant and fused dequant-GEMV kernels on raw pointers.
#pragma once

#include "common.cuh"

namespace vt_quant {

// Tuning parameters, declared once.
constexpr int kWarp = 32;
constexpr int kDequantThreads = 256;
constexpr int kGemvCols = 32;    // packed words (AWQ) or columns (GPTQ) per block, one per lane
constexpr int kGemvKSplit = 8;   // warps splitting the reduction over K, summed in shared memory
constexpr int kAwqRowsPerUnit = 16;   // K rows per unit of the AWQ GEMV's K split
constexpr int kGptqWordsPerUnit = 2;  // packed rows (8 K rows each) per unit of the GPTQ GEMV's K split
constexpr int kGemvTargetBlocks = 264;  // aim for two blocks per SM of a 132-SM H100/H200 ...
constexpr int kGemvMaxKBlocks = 32;     // ... with at most this many K-split blocks (partial rows)
constexpr int kFinalizeThreads = 256;
constexpr int kNvfp4RowsPerBlock = 4;  // one warp per output row
constexpr int kNvfp4Unroll = 4;        // scale groups in flight per lane
constexpr int kPack = 8;         // int4 values per int32 word
constexpr int kNvfp4Group = 16;  // values per fp8 scale

// Column j of an AWQ word sits in nibble (j % 2) * 4 + j / 2: the nibbles hold columns 0,2,4,6,1,3,5,7,
// i.e. reading nibbles in the order 0,4,1,5,2,6,3,7 gives columns 0..7.
__device__ __forceinline__ int awq_shift(int j) { return 4 * ((j % 2) * 4 + j / 2); }

using vt::from_f32;
using vt::to_f32;

// Int4 value minus zero, times scale, in fp32 (exact for a 16-bit scale: a 5-bit integer times an 11-bit
// significand), then one rounding to the output dtype: the reference's fp32 product cast once.
template <typename TS, typename TOut>
__device__ __forceinline__ TOut int4_value(int q, int z, TS s) {
  return from_f32<TOut>((float)(q - z) * to_f32<TS>(s));
}

// e2m1 magnitude codes 0..7; bit 3 is the sign.
__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
  const float mag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = mag[code & 7u];
  return (code & 8u) ? -v : v;
}

// fp8 e4m3 (bias 7, no infinities, 0x7f/0xff NaN) to fp32, exactly.
__device__ __forceinline__ float e4m3_to_f32(uint32_t b) {
  const uint32_t sign = (b & 0x80u) << 24, exp = (b >> 3) & 0xfu, man = b & 7u;
  if (exp == 15u && man == 7u) return __uint_as_float(sign | 0x7fc00000u);
  if (exp == 0u) {
    const float v = (float)man * 0.001953125f;  // man / 8 * 2^-6
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// NVFP4 value: e2m1 times its block scale (exact in fp32), times the global scale (one fp32 rounding).
__device__ __forceinline__ float nvfp4_value(uint32_t code, float block_scale, float global_scale) {
  return e2m1_to_f32(code) * block_scale * global_scale;
}

// AWQ: qweight, qzeros: [K, N/8], [K/G, N/8] int32 packed along N; scales: [K/G, N]; out: [K, N]
template <typename TS, typename TOut>
__global__ void awq_dequant_kernel(const int32_t* __restrict__ qweight, const int32_t* __restrict__ qzeros,
                                   const TS* __restrict__ scales, TOut* __restrict__ out, int k_dim, int n_dim,
                                   int group) {
  const int words = n_dim / kPack;
  const int64_t i = (int64_t)blockIdx.x * kDequantThreads + threadIdx.x;
  if (i >= (int64_t)k_dim * words) return;
  const int k = (int)(i / words), wc = (int)(i % words), g = k / group;
  const uint32_t qw = (uint32_t)qweight[i];
  const uint32_t zw = (uint32_t)qzeros[(int64_t)g * words + wc];
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    const int sh = awq_shift(j), n = wc * kPack + j;
    out[(int64_t)k * n_dim + n] =
        int4_value<TS, TOut>((qw >> sh) & 0xf, (zw >> sh) & 0xf, scales[(int64_t)g * n_dim + n]);
  }
}

// GPTQ: qweight: [K/8, N] int32 packed along K (row k in bits 4*(k%8)); qzeros: [G, N/8] packed along N
// in sequential nibble order; scales: [G, N]; g_idx: [K]; zero = nibble + zero_offset; out: [K, N]
template <typename TS, typename TOut>
__global__ void gptq_dequant_kernel(const int32_t* __restrict__ qweight, const int32_t* __restrict__ qzeros,
                                    const TS* __restrict__ scales, const int32_t* __restrict__ g_idx,
                                    TOut* __restrict__ out, int k_dim, int n_dim, int zero_offset) {
  const int64_t i = (int64_t)blockIdx.x * kDequantThreads + threadIdx.x;
  if (i >= (int64_t)(k_dim / kPack) * n_dim) return;
  const int kp = (int)(i / n_dim), n = (int)(i % n_dim);
  const uint32_t qw = (uint32_t)qweight[i];
  const int words = n_dim / kPack;
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    const int k = kp * kPack + j, g = g_idx[k];
    const int z = (int)(((uint32_t)qzeros[(int64_t)g * words + n / kPack] >> (4 * (n % kPack))) & 0xf) + zero_offset;
    out[(int64_t)k * n_dim + n] = int4_value<TS, TOut>((qw >> (4 * j)) & 0xf, z, scales[(int64_t)g * n_dim + n]);
  }
}

// NVFP4: packed: [N, K/2] uint8, value 2i in the low nibble; scales: [N, K/16] fp8 e4m3; global_scale: [1]
// fp32; out: [N, K]
template <typename TOut>
__global__ void nvfp4_dequant_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                                     const float* __restrict__ global_scale, TOut* __restrict__ out, int n_dim,
                                     int k_dim) {
  const int64_t i = (int64_t)blockIdx.x * kDequantThreads + threadIdx.x;  // one byte, two values
  if (i >= (int64_t)n_dim * (k_dim / 2)) return;
  const int64_t n = i / (k_dim / 2);
  const int k = (int)(i % (k_dim / 2)) * 2;
  const float bs = e4m3_to_f32(scales[n * (k_dim / kNvfp4Group) + k / kNvfp4Group]);
  const float gs = *global_scale;
  const uint32_t b = packed[i];
  out[n * k_dim + k] = from_f32<TOut>(nvfp4_value(b & 0xfu, bs, gs));
  out[n * k_dim + k + 1] = from_f32<TOut>(nvfp4_value(b >> 4, bs, gs));
}

// The fp32 dot product plus the optional bias (null: none), before the one rounding to the output dtype.
template <typename TX>
__device__ __forceinline__ float with_bias(float acc, const TX* bias, int64_t n) {
  return bias ? acc + to_f32<TX>(bias[n]) : acc;
}

// Sum the kGemvKSplit partial rows of red[kGemvKSplit][kGemvCols * cols] into row 0.
template <int kColsPerLane>
__device__ __forceinline__ void reduce_ksplit(float (&red)[kGemvKSplit][kGemvCols * kColsPerLane]) {
  __syncthreads();
  for (int c = threadIdx.y * kGemvCols + threadIdx.x; c < kGemvCols * kColsPerLane; c += kGemvCols * kGemvKSplit) {
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kGemvKSplit; ++w) s += red[w][c];
    red[0][c] = s;
  }
  __syncthreads();
}

// The int4 GEMVs split K over gridDim.y blocks (and kGemvKSplit warps in each): warp slot
// blockIdx.y * kGemvKSplit + threadIdx.y takes the K units slot, slot + stride, ... Each block writes
// its fp32 column sums to partial[blockIdx.y][n]; gemv_finalize_kernel adds them in block order.
__device__ __forceinline__ int warp_slot() { return blockIdx.y * kGemvKSplit + threadIdx.y; }
__device__ __forceinline__ int slot_stride() { return gridDim.y * kGemvKSplit; }

// AWQ GEMV at M=1, partial sums: sum over this block's K units of x[k] * W[k, n], W dequantized to the
// activation dtype TX (as a dequant-then-linear would), fp32 accumulation. Block (kGemvCols,
// kGemvKSplit); lane x owns one packed word (8 columns); a K unit is kAwqRowsPerUnit rows.
// x: [K]; partial: [gridDim.y, N] fp32
template <typename TX, typename TS>
__global__ void awq_gemv_kernel(const TX* __restrict__ x, const int32_t* __restrict__ qweight,
                                const int32_t* __restrict__ qzeros, const TS* __restrict__ scales,
                                float* __restrict__ partial, int k_dim, int n_dim, int group) {
  __shared__ float red[kGemvKSplit][kGemvCols * kPack];
  const int words = n_dim / kPack;
  const int wc = blockIdx.x * kGemvCols + threadIdx.x;
  float acc[kPack];
#pragma unroll
  for (int j = 0; j < kPack; ++j) acc[j] = 0.f;
  if (wc < words) {
    const int units = (k_dim + kAwqRowsPerUnit - 1) / kAwqRowsPerUnit;
    int cur = -1;  // the group whose zeros and scales are loaded
    float s[kPack];
    int z[kPack];
    for (int u = warp_slot(); u < units; u += slot_stride()) {
      const int k_end = min(k_dim, (u + 1) * kAwqRowsPerUnit);
      for (int k = u * kAwqRowsPerUnit; k < k_end; ++k) {
        if (k / group != cur) {
          cur = k / group;
          const uint32_t zw = (uint32_t)qzeros[(int64_t)cur * words + wc];
#pragma unroll
          for (int j = 0; j < kPack; ++j) {
            s[j] = to_f32<TS>(scales[(int64_t)cur * n_dim + wc * kPack + j]);
            z[j] = (zw >> awq_shift(j)) & 0xf;
          }
        }
        const uint32_t qw = (uint32_t)qweight[(int64_t)k * words + wc];
        const float xv = to_f32<TX>(x[k]);
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const float w = to_f32<TX>(from_f32<TX>((float)((int)((qw >> awq_shift(j)) & 0xf) - z[j]) * s[j]));
          acc[j] = fmaf(xv, w, acc[j]);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kPack; ++j) red[threadIdx.y][threadIdx.x * kPack + j] = acc[j];
  reduce_ksplit<kPack>(red);
  for (int c = threadIdx.y * kGemvCols + threadIdx.x; c < kGemvCols * kPack; c += kGemvCols * kGemvKSplit) {
    const int n = blockIdx.x * kGemvCols * kPack + c;
    if (n < n_dim) partial[(int64_t)blockIdx.y * n_dim + n] = red[0][c];
  }
}

// GPTQ GEMV at M=1, partial sums, act-order aware: each row k reads its own group g_idx[k]. Lane x owns
// column n; a K unit is kGptqWordsPerUnit packed rows. x: [K]; partial: [gridDim.y, N] fp32
template <typename TX, typename TS>
__global__ void gptq_gemv_kernel(const TX* __restrict__ x, const int32_t* __restrict__ qweight,
                                 const int32_t* __restrict__ qzeros, const TS* __restrict__ scales,
                                 const int32_t* __restrict__ g_idx, float* __restrict__ partial, int k_dim,
                                 int n_dim, int zero_offset) {
  __shared__ float red[kGemvKSplit][kGemvCols];
  const int n = blockIdx.x * kGemvCols + threadIdx.x;
  const int words = n_dim / kPack;
  float acc = 0.f;
  if (n < n_dim) {
    const int zshift = 4 * (n % kPack);
    const int packed_rows = k_dim / kPack;
    const int units = (packed_rows + kGptqWordsPerUnit - 1) / kGptqWordsPerUnit;
    for (int u = warp_slot(); u < units; u += slot_stride()) {
      const int kp_end = min(packed_rows, (u + 1) * kGptqWordsPerUnit);
      for (int kp = u * kGptqWordsPerUnit; kp < kp_end; ++kp) {
        const uint32_t qw = (uint32_t)qweight[(int64_t)kp * n_dim + n];
#pragma unroll
        for (int j = 0; j < kPack; ++j) {
          const int k = kp * kPack + j, g = g_idx[k];
          const int z = (int)(((uint32_t)qzeros[(int64_t)g * words + n / kPack] >> zshift) & 0xf) + zero_offset;
          const float s = to_f32<TS>(scales[(int64_t)g * n_dim + n]);
          const float w = to_f32<TX>(from_f32<TX>((float)((int)((qw >> (4 * j)) & 0xf) - z) * s));
          acc = fmaf(to_f32<TX>(x[k]), w, acc);
        }
      }
    }
  }
  red[threadIdx.y][threadIdx.x] = acc;
  reduce_ksplit<1>(red);
  if (threadIdx.y == 0 && n < n_dim) partial[(int64_t)blockIdx.y * n_dim + n] = red[0][threadIdx.x];
}

// out[n] = the K-split partial sums of column n added in block order, plus the bias, rounded once.
// partial: [splits, N] fp32; bias: [N] or null; out: [N]
template <typename TX, typename TOut>
__global__ void gemv_finalize_kernel(const float* __restrict__ partial, const TX* __restrict__ bias,
                                     TOut* __restrict__ out, int n_dim, int splits) {
  const int n = blockIdx.x * kFinalizeThreads + threadIdx.x;
  if (n >= n_dim) return;
  float acc = 0.f;
  for (int y = 0; y < splits; ++y) acc += partial[(int64_t)y * n_dim + n];
  out[n] = from_f32<TOut>(with_bias(acc, bias, n));
}

// NVFP4 GEMV at M=1: one warp per output row n; lane l takes the scale groups l, l + 32, ...
// x: [K]; packed: [N, K/2]; scales: [N, K/16]; bias: [N] or null; out: [N]
template <typename TX, typename TOut>
__global__ void nvfp4_gemv_kernel(const TX* __restrict__ x, const uint8_t* __restrict__ packed,
                                  const uint8_t* __restrict__ scales, const float* __restrict__ global_scale,
                                  const TX* __restrict__ bias, TOut* __restrict__ out, int n_dim, int k_dim) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = (int64_t)blockIdx.x * kNvfp4RowsPerBlock + threadIdx.x / kWarp;
  if (n >= n_dim) return;
  const int groups = k_dim / kNvfp4Group;
  const uint8_t* row = packed + n * (k_dim / 2);
  const float gs = *global_scale;
  float acc = 0.f;
#pragma unroll kNvfp4Unroll
  for (int g = lane; g < groups; g += kWarp) {
    const float bs = e4m3_to_f32(scales[n * groups + g]);
    const uint2 bytes = *reinterpret_cast<const uint2*>(row + g * (kNvfp4Group / 2));
    const TX* xg = x + g * kNvfp4Group;
#pragma unroll
    for (int b = 0; b < kNvfp4Group / 2; ++b) {
      const uint32_t byte = ((b < 4 ? bytes.x : bytes.y) >> (8 * (b % 4))) & 0xffu;
      const float w0 = to_f32<TX>(from_f32<TX>(nvfp4_value(byte & 0xfu, bs, gs)));
      const float w1 = to_f32<TX>(from_f32<TX>(nvfp4_value(byte >> 4, bs, gs)));
      acc = fmaf(to_f32<TX>(xg[2 * b]), w0, acc);
      acc = fmaf(to_f32<TX>(xg[2 * b + 1]), w1, acc);
    }
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) out[n] = from_f32<TOut>(with_bias(acc, bias, n));
}

}  // namespace vt_quant
