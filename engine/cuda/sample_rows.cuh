// The serving sampler's draw (engine/ops/sample.py sample_rows, unfiltered rows) in one pass over the logits:
// per element the counter-based Gumbel noise of (seed, step, vocabulary index), the logit over the row's
// temperature plus that noise, and the row's argmax (the lowest index wins a tie, a NaN wins as in
// torch.argmax). The integer hash is the reference's exactly; u, log, division and sum are the same fp32
// operations in the same order, so the draw is the reference's token.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace vt_sample_rows {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr uint32_t kGolden = 0x9E3779B9u;  // engine/ops/sample.py GOLDEN32

// lowbias32: engine/ops/sample.py _mix on 32-bit values
__device__ __forceinline__ uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  return x ^ (x >> 16);
}

// (v, i) beats (w, j): a NaN beats any number (the first NaN wins), else the larger value, else the lower index
__device__ __forceinline__ bool beats(float v, int i, float w, int j) {
  const bool vn = v != v, wn = w != w;
  if (vn || wn) return vn && (!wn || i < j);
  return v > w || (v == w && i < j);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    gumbel_argmax_kernel(long long* out, const T* logits, int vocab, long long ld, const float* temperature,
                         const long long* seeds, const long long* steps) {
  const int row = blockIdx.x;
  const float t = temperature[row];
  const float div = t > 0.f ? t : 1.f;
  const uint64_t s = static_cast<uint64_t>(seeds[row]);
  const uint32_t st = static_cast<uint32_t>(static_cast<uint64_t>(steps[row]));
  const uint32_t rh = mix(mix(static_cast<uint32_t>(s) ^ mix(static_cast<uint32_t>(s >> 32))) ^ st);
  const T* x = logits + row * ld;
  float best = -INFINITY;
  int idx = vocab;  // past the row: any element beats it once compared (see below)
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    const uint32_t bits = mix(static_cast<uint32_t>(j) * kGolden + rh);
    const float u = (static_cast<float>(bits >> 8) + 0.5f) * (1.0f / 16777216.0f);
    const float g = -logf(-logf(u));
    const float v = vt::to_f32<T>(x[j]) / div + g;
    if (idx == vocab || beats(v, j, best, idx)) best = v, idx = j;
  }
  // a thread with no element keeps idx == vocab, which loses to every real one
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, best, o);
    const int j = __shfl_xor_sync(0xffffffffu, idx, o);
    if (j != vocab && (idx == vocab || beats(w, j, best, idx))) best = w, idx = j;
  }
  __shared__ float s_val[kWarps];
  __shared__ int s_idx[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) s_val[warp] = best, s_idx[warp] = idx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (s_idx[w] != vocab && (idx == vocab || beats(s_val[w], s_idx[w], best, idx))) best = s_val[w], idx = s_idx[w];
    }
    out[row] = idx;
  }
}

}  // namespace vt_sample_rows
