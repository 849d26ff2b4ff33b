// Fused M=1 dequant-GEMV kernel for NVFP4 checkpoints on raw pointers; tuning constants are in quant.cuh.
//
// Numerics: each weight is e2m1 times its e4m3 block scale (exact in fp32), times the global scale (one
// fp32 rounding), rounded once to the activation dtype TX, and multiplied into an fp32 accumulator; each
// output row is one warp's fixed-order sum, so results are deterministic.
#pragma once

#include "quant.cuh"

namespace vt_quant {

// The e2m1 codes in nibbles i and i + 4 of `word` (i in 0..3) as fp32, each times 2^-14, exactly: the sign
// and three magnitude bits are moved into an fp16's sign, low exponent and top mantissa bits (fp16's bias
// is 14 more than e2m1's; an e2m1 subnormal lands on an fp16 subnormal), then widened.
template <int kI>
__device__ __forceinline__ float2 e2m1_pair_scaled(uint32_t word) {
  constexpr int kMag = 9 - 4 * kI, kSign = 12 - 4 * kI;  // left shifts (kMag is -3 for nibbles 3 and 7)
  uint32_t mag;
  if constexpr (kMag >= 0) {
    mag = word << kMag;
  } else {
    mag = word >> -kMag;
  }
  const uint32_t sign = word << kSign;
  const uint32_t h = (mag & 0x0E000E00u) | (sign & 0x80008000u);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}
constexpr float kE2m1Unscale = 16384.f;  // 2^14, folded into the block scale (exact)

// ---- NVFP4 ----------------------------------------------------------------------------------------

// acc += x . W over one 16-byte chunk of a row: 32 e2m1 codes (word w, nibble e: value 8w + e) under two
// block scales (words 0-1 and 2-3), each weight e2m1 * scale exactly, times gs (one fp32 rounding),
// rounded once to TX. bs14: the block scales times 2^14 (e2m1_pair_scaled's values are 2^-14 too small).
template <typename TX>
__device__ __forceinline__ float nvfp4_chunk_dot(const uint32_t (&w)[4], const float (&xv)[kNvfp4Chunk],
                                                 float bs14_lo, float bs14_hi, float gs, float acc) {
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const float bs14 = v < 2 ? bs14_lo : bs14_hi;
    float2 e[4] = {e2m1_pair_scaled<0>(w[v]), e2m1_pair_scaled<1>(w[v]), e2m1_pair_scaled<2>(w[v]),
                   e2m1_pair_scaled<3>(w[v])};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // e[i]: values 8v + i (x) and 8v + i + 4 (y)
      float w0 = (e[i].x * bs14) * gs, w1 = (e[i].y * bs14) * gs;
      round_pair<TX>(w0, w1);
      acc = fmaf(xv[8 * v + i], w0, acc);
      acc = fmaf(xv[8 * v + i + 4], w1, acc);
    }
  }
  return acc;
}

// NVFP4 GEMV at M=1: each warp takes kNvfp4RowsPerWarp output rows; lane l takes the 32-value chunks l,
// l + 32, ... of K, kNvfp4ChunksInFlight at a time, and loads each chunk of x once for all its rows; a
// shuffle tree adds the lanes. kVec: K a multiple of 32 and x, packed, scales aligned (16, 16, 2 bytes;
// the launcher checks); otherwise a chunk is read byte by byte and x element by element (K % 16 == 0).
// x: [K]; packed: [N, K/2]; scales: [N, K/16]; bias: [N] or null; out: [N]
template <typename TX, typename TOut, bool kVec>
__global__ void __launch_bounds__(kNvfp4Warps * kWarp)
nvfp4_gemv_kernel(const TX* __restrict__ x, const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scales,
                  const float* __restrict__ gs_ptr, float gs_value, const TX* __restrict__ bias,
                  TOut* __restrict__ out, int n_dim, int k_dim) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n0 = ((int64_t)blockIdx.x * kNvfp4Warps + threadIdx.x / kWarp) * kNvfp4RowsPerWarp;
  if (n0 >= n_dim) return;  // the whole warp
  const float gs = global_scale_of(gs_ptr, gs_value);
  const int chunks = (k_dim + kNvfp4Chunk - 1) / kNvfp4Chunk;  // the last one is half a chunk when K % 32 == 16
  const int row_bytes = k_dim / 2, row_groups = k_dim / kNvfp4Group;
  float acc[kNvfp4RowsPerWarp];
#pragma unroll
  for (int r = 0; r < kNvfp4RowsPerWarp; ++r) acc[r] = 0.f;
  for (int c0 = lane; c0 < chunks; c0 += kWarp * kNvfp4ChunksInFlight) {
    uint32_t w[kNvfp4ChunksInFlight][kNvfp4RowsPerWarp][4];
    uint32_t sc[kNvfp4ChunksInFlight][kNvfp4RowsPerWarp];  // the chunk's two scale bytes
#pragma unroll
    for (int h = 0; h < kNvfp4ChunksInFlight; ++h) {
      const int c = c0 + h * kWarp;
#pragma unroll
      for (int r = 0; r < kNvfp4RowsPerWarp; ++r) {
        const int64_t n = n0 + r;
        w[h][r][0] = w[h][r][1] = w[h][r][2] = w[h][r][3] = 0u;
        sc[h][r] = 0u;
        if (c >= chunks || n >= n_dim) continue;
        const uint8_t* p = packed + n * row_bytes + (int64_t)c * (kNvfp4Chunk / 2);
        const uint8_t* s = scales + n * row_groups + 2 * c;
        if constexpr (kVec) {
          const uint4 t = __ldg(reinterpret_cast<const uint4*>(p));
          w[h][r][0] = t.x; w[h][r][1] = t.y; w[h][r][2] = t.z; w[h][r][3] = t.w;
          sc[h][r] = __ldg(reinterpret_cast<const unsigned short*>(s));
        } else {
          const int bytes = min(kNvfp4Chunk / 2, row_bytes - c * (kNvfp4Chunk / 2));  // 16, or 8 at a tail
#pragma unroll
          for (int i = 0; i < kNvfp4Chunk / 2; ++i)
            if (i < bytes) w[h][r][i / 4] |= (uint32_t)p[i] << (8 * (i % 4));
          sc[h][r] = s[0] | (bytes > kNvfp4Group / 2 ? (uint32_t)s[1] << 8 : 0u);
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kNvfp4ChunksInFlight; ++h) {
      const int c = c0 + h * kWarp;
      if (c >= chunks) break;
      float xv[kNvfp4Chunk];
      if constexpr (kVec) {
        load_vec<TX, kNvfp4Chunk>(x + (int64_t)c * kNvfp4Chunk, xv);
      } else {
#pragma unroll
        for (int i = 0; i < kNvfp4Chunk; ++i) {
          const int k = c * kNvfp4Chunk + i;
          xv[i] = k < k_dim ? to_f32<TX>(x[k]) : 0.f;  // a half chunk's codes are zero: 0 * 0
        }
      }
#pragma unroll
      for (int r = 0; r < kNvfp4RowsPerWarp; ++r) {
        const float lo = e4m3_to_f32(sc[h][r] & 0xffu) * kE2m1Unscale;
        const float hi = e4m3_to_f32(sc[h][r] >> 8) * kE2m1Unscale;
        acc[r] = nvfp4_chunk_dot<TX>(w[h][r], xv, lo, hi, gs, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kNvfp4RowsPerWarp; ++r) {
    float s = acc[r];
    for (int o = kWarp / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0 && n0 + r < n_dim) out[n0 + r] = from_f32<TOut>(with_bias(s, bias, n0 + r));
  }
}

}  // namespace vt_quant
