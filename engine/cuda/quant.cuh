// Int4 (AWQ, GPTQ) and NVFP4 dequant and fused dequant-GEMV kernels on raw pointers.
#pragma once

#include "common.cuh"

namespace vt_quant {

// Tuning parameters, declared once.
constexpr int kWarp = 32;
constexpr int kDequantThreads = 256;
constexpr int kGemvThreads = 256;       // threads per block of the int4 GEMVs
constexpr int kAwqLanes = 16;           // AWQ GEMV threads along N in a block (16 x 8 bytes: one 128-byte row run)
constexpr int kAwqWordsPerLoad = 2;     // packed words per AWQ load (uint2: 16 columns per thread)
constexpr int kAwqUnitsInFlight = 2;    // 8-row K units loaded before any is used, per thread
constexpr int kGptqLanes = 32;          // GPTQ GEMV threads along N in a block (32 x 16 bytes per packed row)
constexpr int kGptqWordsPerLoad = 4;    // packed words per GPTQ load (uint4: 4 columns x 8 rows per thread)
constexpr int kGptqRowsInFlight = 8;    // packed rows loaded before any is used, per thread
constexpr int kScalarWords = 1;         // words per load on the unaligned / odd-shape paths
constexpr int kGemvTargetBlocks = 264;  // two blocks per SM of a 132-SM H100/H200 ...
constexpr int kGemvMaxSplits = 32;      // ... with at most this many K-split blocks (rows of partial sums)
constexpr int kGemvMaxTiles = 1 << 16;  // column tiles one launch may have (split-K arrival counters)
constexpr int kNvfp4Warps = 4;          // warps per NVFP4 GEMV block
constexpr int kNvfp4RowsPerWarp = 4;    // output rows per warp: x is loaded once for all of them
constexpr int kNvfp4ChunksInFlight = 4; // 16-byte chunks (32 values) per row loaded before use, per lane
constexpr int kPack = 8;                // int4 values per int32 word; also the K rows of a GEMV unit
constexpr int kNvfp4Group = 16;         // values per fp8 scale
constexpr int kNvfp4Chunk = 32;         // values per 16-byte NVFP4 load

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
// in sequential nibble order; scales: [G, N]; g_idx: [K]; zero = nibble + zero_offset; out: [K, N].
// A row whose g_idx lies outside [0, G) comes out NaN (the launch cannot sync to report it).
template <typename TS, typename TOut>
__global__ void gptq_dequant_kernel(const int32_t* __restrict__ qweight, const int32_t* __restrict__ qzeros,
                                    const TS* __restrict__ scales, const int32_t* __restrict__ g_idx,
                                    TOut* __restrict__ out, int k_dim, int n_dim, int groups, int zero_offset) {
  const int64_t i = (int64_t)blockIdx.x * kDequantThreads + threadIdx.x;
  if (i >= (int64_t)(k_dim / kPack) * n_dim) return;
  const int kp = (int)(i / n_dim), n = (int)(i % n_dim);
  const uint32_t qw = (uint32_t)qweight[i];
  const int words = n_dim / kPack;
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    const int k = kp * kPack + j, g = g_idx[k];
    if ((unsigned)g >= (unsigned)groups) {
      out[(int64_t)k * n_dim + n] = from_f32<TOut>(__int_as_float(0x7fc00000));
      continue;
    }
    const int z = (int)(((uint32_t)qzeros[(int64_t)g * words + n / kPack] >> (4 * (n % kPack))) & 0xf) + zero_offset;
    out[(int64_t)k * n_dim + n] = int4_value<TS, TOut>((qw >> (4 * j)) & 0xf, z, scales[(int64_t)g * n_dim + n]);
  }
}

// The global scale: a device fp32 value when the pointer is set, else the value passed by value.
__device__ __forceinline__ float global_scale_of(const float* ptr, float value) { return ptr ? *ptr : value; }

// NVFP4: packed: [N, K/2] uint8, value 2i in the low nibble; scales: [N, K/16] fp8 e4m3; global scale:
// gs_ptr [1] fp32 on the device, or gs_value when gs_ptr is null; out: [N, K]
template <typename TOut>
__global__ void nvfp4_dequant_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                                     const float* __restrict__ gs_ptr, float gs_value, TOut* __restrict__ out,
                                     int n_dim, int k_dim) {
  const int64_t i = (int64_t)blockIdx.x * kDequantThreads + threadIdx.x;  // one byte, two values
  if (i >= (int64_t)n_dim * (k_dim / 2)) return;
  const int64_t n = i / (k_dim / 2);
  const int k = (int)(i % (k_dim / 2)) * 2;
  const float bs = e4m3_to_f32(scales[n * (k_dim / kNvfp4Group) + k / kNvfp4Group]);
  const float gs = global_scale_of(gs_ptr, gs_value);
  const uint32_t b = packed[i];
  out[n * k_dim + k] = from_f32<TOut>(nvfp4_value(b & 0xfu, bs, gs));
  out[n * k_dim + k + 1] = from_f32<TOut>(nvfp4_value(b >> 4, bs, gs));
}

// ---- shared by the GEMVs ------------------------------------------------------------------------

// kV consecutive int32 words (kV = 1, 2 or 4, the pointer aligned to 4 * kV bytes), read-only path.
template <int kV>
__device__ __forceinline__ void load_words(const int32_t* p, uint32_t (&w)[kV]) {
  if constexpr (kV == 4) {
    const uint4 t = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = t.x; w[1] = t.y; w[2] = t.z; w[3] = t.w;
  } else if constexpr (kV == 2) {
    const uint2 t = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = t.x; w[1] = t.y;
  } else {
    w[0] = (uint32_t)__ldg(p);
  }
}

// kCount values of x as fp32 from 16-byte loads (p 16-byte aligned, kCount * sizeof(T) a multiple of 16).
template <typename T, int kCount>
__device__ __forceinline__ void load_vec(const T* p, float (&v)[kCount]) {
  constexpr int kPer = 16 / (int)sizeof(T);
  static_assert(kCount % kPer == 0, "whole 16-byte loads");
#pragma unroll
  for (int i = 0; i < kCount / kPer; ++i) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p) + i);
    const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < kPer; ++j) v[i * kPer + j] = to_f32<T>(t[j]);
  }
}

// Round two fp32 weights to T and back (one instruction for the pair where T is 16-bit).
template <typename T>
__device__ __forceinline__ void round_pair(float& a, float& b) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 r = __floats2bfloat162_rn(a, b);
    a = __low2float(r);
    b = __high2float(r);
  } else if constexpr (std::is_same_v<T, __half>) {
    const float2 r = __half22float2(__floats2half2_rn(a, b));
    a = r.x;
    b = r.y;
  }
}

// The fp32 dot product plus the optional bias (null: none), before the one rounding to the output dtype.
template <typename TX>
__device__ __forceinline__ float with_bias(float acc, const TX* bias, int64_t n) {
  return bias ? acc + to_f32<TX>(bias[n]) : acc;
}

}  // namespace vt_quant
