// Gated delta net on raw pointers, state in fp32: the decode step (one token: the per-head recurrent state update
// and readout) and the chunked prefill (the UT-transform form over chunks of up to kMaxChunk tokens).
#pragma once

#include "common.cuh"

namespace vt_gdn {

using vt::from_f32;
using vt::to_f32;

// Tuning parameters, declared once.
constexpr int kWarp = 32;
constexpr int kVTile = 32;   // value columns per block, one per lane
constexpr int kKSplit = 8;   // warps splitting the key dimension; partial dot products summed in shared memory
constexpr int kMaxKDim = 256;
constexpr int kRowsPerThread = kMaxKDim / kKSplit;

// Sum of the kKSplit partials of column threadIdx.x, in warp order (the same order for every column).
__device__ __forceinline__ float column_sum(float (&part)[kKSplit][kVTile], float mine) {
  part[threadIdx.y][threadIdx.x] = mine;
  __syncthreads();
  float s = 0.f;
#pragma unroll
  for (int w = 0; w < kKSplit; ++w) s += part[w][threadIdx.x];
  __syncthreads();
  return s;
}

// One decode step for (batch b, value head h, value columns tile*kVTile ..):
//   S = S * exp(g);  kv = k^T S;  delta = (v - kv) * beta;  S = S + k delta^T;  o = (q * scale)^T S
// with q and k optionally l2-normalised first (x * rsqrt(sum x^2 + eps)). Value head h reads key head
// h / (heads / k_heads). Products and sums are separate fp32 roundings, as the reference's tensor ops.
// q, k: [batch, k_heads, k_dim]; v: [batch, heads, v_dim]; g, beta: [batch, heads] fp32;
// state, new_state: [batch, heads, k_dim, v_dim] fp32 (the same buffer updates in place; each element is
// read before it is written, by the same thread); out: [batch, heads, v_dim]
template <typename T, typename TOut>
__global__ void gdn_decode_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                  const float* __restrict__ g, const float* __restrict__ beta, const float* state,
                                  float* new_state, TOut* __restrict__ out, int heads, int k_heads, int k_dim,
                                  int v_dim, float scale, int l2norm, float eps) {
  __shared__ float sq[kMaxKDim], sk[kMaxKDim];
  __shared__ float part[kKSplit][kVTile];
  __shared__ float norms[2];
  const int bh = blockIdx.y;  // b * heads + h
  const int b = bh / heads, h = bh % heads;
  const int64_t kh = (int64_t)b * k_heads + h / (heads / k_heads);
  const int tid = threadIdx.y * kVTile + threadIdx.x;
  for (int i = tid; i < k_dim; i += kVTile * kKSplit) {
    sq[i] = to_f32<T>(q[kh * k_dim + i]);
    sk[i] = to_f32<T>(k[kh * k_dim + i]);
  }
  __syncthreads();
  if (l2norm) {
    if (threadIdx.y < 2) {  // warp 0 normalises q, warp 1 k
      const float* x = threadIdx.y == 0 ? sq : sk;
      float ss = 0.f;
      for (int i = threadIdx.x; i < k_dim; i += kWarp) ss = __fadd_rn(ss, __fmul_rn(x[i], x[i]));
      for (int o = kWarp / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
      if (threadIdx.x == 0) norms[threadIdx.y] = rsqrtf(ss + eps);
    }
    __syncthreads();
    for (int i = tid; i < k_dim; i += kVTile * kKSplit) {
      sq[i] = __fmul_rn(sq[i], norms[0]);
      sk[i] = __fmul_rn(sk[i], norms[1]);
    }
    __syncthreads();
  }
  const int j = blockIdx.x * kVTile + threadIdx.x;
  const bool col = j < v_dim;
  const float decay = expf(g[bh]);
  const float bt = beta[bh];
  const float* sp = state + (int64_t)bh * k_dim * v_dim;
  float* np = new_state + (int64_t)bh * k_dim * v_dim;

  float s[kRowsPerThread];
  float kv = 0.f;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = threadIdx.y + r * kKSplit;
    s[r] = 0.f;
    if (col && i < k_dim) {
      s[r] = __fmul_rn(sp[(int64_t)i * v_dim + j], decay);
      kv = __fadd_rn(kv, __fmul_rn(s[r], sk[i]));
    }
  }
  kv = column_sum(part, kv);
  const float delta = col ? __fmul_rn(__fsub_rn(to_f32<T>(v[(int64_t)bh * v_dim + j]), kv), bt) : 0.f;
  float o = 0.f;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int i = threadIdx.y + r * kKSplit;
    if (col && i < k_dim) {
      s[r] = __fadd_rn(s[r], __fmul_rn(sk[i], delta));
      np[(int64_t)i * v_dim + j] = s[r];
      o = __fadd_rn(o, __fmul_rn(s[r], __fmul_rn(sq[i], scale)));
    }
  }
  o = column_sum(part, o);
  if (col && threadIdx.y == 0) out[(int64_t)bh * v_dim + j] = from_f32<TOut>(o);
}

// --- chunked prefill ----------------------------------------------------------------------------------------
constexpr int kMaxChunk = 64;  // tokens per chunk: the [chunk, chunk] matrices live in shared memory
constexpr int kChunkThreads = kVTile * kKSplit;

// Floats of dynamic shared memory the chunked kernel needs for a key dim and chunk size.
__host__ __device__ constexpr int chunked_smem_floats(int k_dim, int chunk) {
  return 2 * chunk * k_dim      // q, k of the chunk (l2-normalised, q scaled)
         + k_dim * kVTile        // the state tile S[:, columns]
         + 2 * chunk * chunk     // A = beta * (k k^T) * D (strictly lower), (q k^T) * D (lower)
         + 2 * chunk * kVTile    // U (the pseudo-values) and the output's state read
         + 2 * chunk;            // cumulative log decay, beta
}

// The chunked form for (batch b, value head h, value columns tile*kVTile ..), one chunk of n <= chunk tokens at
// a time from the entry state S (as engine/ops/gdn.py `_chunk`, G the cumulative log decay, D[t,i] = exp(G_t - G_i)):
//   A = strictly_lower(diag(beta) (K K^T) * D);  (I + A) U = diag(beta) V - diag(beta exp(G)) K S  (forward
//   substitution, column by column);  O = diag(exp(G)) Q S + ((Q K^T) * D) U;  S' = exp(G_n) S + (exp(G_n - G) K)^T U.
// Every step fp32; the output rounds once to TOut.
// q, k: [batch, T, k_heads, k_dim]; v: [batch, T, heads, v_dim] (T); g, beta: [batch, T, heads] fp32;
// state, new_state: [batch, heads, k_dim, v_dim] fp32 (may be the same buffer: a block reads its tile before it
// writes it); out: [batch, T, heads, v_dim] (TOut).
template <typename T, typename TOut>
__global__ void __launch_bounds__(kChunkThreads)
    gdn_chunked_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                       const float* __restrict__ g, const float* __restrict__ beta, const float* state,
                       float* new_state, TOut* __restrict__ out, int seq, int heads, int k_heads, int k_dim,
                       int v_dim, int chunk, float scale, int l2norm, float eps) {
  extern __shared__ float smem[];
  float* sq = smem;                        // [chunk][k_dim]
  float* sk = sq + chunk * k_dim;          // [chunk][k_dim]
  float* ss = sk + chunk * k_dim;          // [k_dim][kVTile]
  float* sa = ss + k_dim * kVTile;         // [chunk][chunk]
  float* sqk = sa + chunk * chunk;         // [chunk][chunk]
  float* su = sqk + chunk * chunk;         // [chunk][kVTile]
  float* so = su + chunk * kVTile;         // [chunk][kVTile]
  float* scum = so + chunk * kVTile;       // [chunk]
  float* sbeta = scum + chunk;             // [chunk]
  const int bh = blockIdx.y;  // b * heads + h
  const int b = bh / heads, h = bh % heads;
  const int kh = h / (heads / k_heads);
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * kVTile + tx;
  const int j = blockIdx.x * kVTile + tx;
  const bool col = j < v_dim;
  const float* sp = state + (int64_t)bh * k_dim * v_dim;
  for (int r = ty; r < k_dim; r += kKSplit) ss[r * kVTile + tx] = col ? sp[(int64_t)r * v_dim + j] : 0.f;

  for (int lo = 0; lo < seq; lo += chunk) {
    const int n = min(chunk, seq - lo);
    for (int idx = tid; idx < n * k_dim; idx += kChunkThreads) {
      const int t = idx / k_dim, i = idx % k_dim;
      const int64_t src = (((int64_t)b * seq + lo + t) * k_heads + kh) * k_dim + i;
      sq[idx] = to_f32<T>(q[src]);
      sk[idx] = to_f32<T>(k[src]);
    }
    if (tid < n) {
      const int64_t gi = ((int64_t)b * seq + lo + tid) * heads + h;
      scum[tid] = g[gi];
      sbeta[tid] = beta[gi];
    }
    __syncthreads();
    // l2-normalise q and k per token (a warp per token), then scale q: (x * rsqrt(sum x^2 + eps)) * scale
    for (int t = ty; t < n; t += kKSplit) {
      float nq = 1.f, nk = 1.f;
      if (l2norm) {
        float aq = 0.f, ak = 0.f;
        for (int i = tx; i < k_dim; i += kWarp) {
          aq = __fadd_rn(aq, __fmul_rn(sq[t * k_dim + i], sq[t * k_dim + i]));
          ak = __fadd_rn(ak, __fmul_rn(sk[t * k_dim + i], sk[t * k_dim + i]));
        }
        for (int o = kWarp / 2; o > 0; o >>= 1) {
          aq += __shfl_xor_sync(0xffffffffu, aq, o);
          ak += __shfl_xor_sync(0xffffffffu, ak, o);
        }
        nq = rsqrtf(aq + eps);
        nk = rsqrtf(ak + eps);
      }
      for (int i = tx; i < k_dim; i += kWarp) {
        sq[t * k_dim + i] = __fmul_rn(l2norm ? __fmul_rn(sq[t * k_dim + i], nq) : sq[t * k_dim + i], scale);
        if (l2norm) sk[t * k_dim + i] = __fmul_rn(sk[t * k_dim + i], nk);
      }
    }
    if (tid == 0) {  // the cumulative log decay, in token order
      for (int t = 1; t < n; ++t) scum[t] = __fadd_rn(scum[t - 1], scum[t]);
    }
    __syncthreads();
    // A (strictly lower) and (Q K^T) * D (lower, diagonal included)
    for (int idx = tid; idx < n * n; idx += kChunkThreads) {
      const int t = idx / n, i = idx % n;
      float a = 0.f, qk = 0.f;
      if (i <= t) {
        const float d = expf(__fsub_rn(scum[t], scum[i]));
        float kk = 0.f;
        for (int r = 0; r < k_dim; ++r) {
          kk = __fadd_rn(kk, __fmul_rn(sk[t * k_dim + r], sk[i * k_dim + r]));
          qk = __fadd_rn(qk, __fmul_rn(sq[t * k_dim + r], sk[i * k_dim + r]));
        }
        if (i < t) a = __fmul_rn(__fmul_rn(sbeta[t], kk), d);
        qk = __fmul_rn(qk, d);
      }
      sa[t * chunk + i] = a;
      sqk[t * chunk + i] = qk;
    }
    // the right-hand side beta v - beta exp(G) k^T S, and the output's read of the entry state exp(G) q^T S
    for (int t = ty; t < n; t += kKSplit) {
      float ks = 0.f, qs = 0.f;
      for (int r = 0; r < k_dim; ++r) {
        ks = __fadd_rn(ks, __fmul_rn(sk[t * k_dim + r], ss[r * kVTile + tx]));
        qs = __fadd_rn(qs, __fmul_rn(sq[t * k_dim + r], ss[r * kVTile + tx]));
      }
      const float vt = col ? to_f32<T>(v[(((int64_t)b * seq + lo + t) * heads + h) * v_dim + j]) : 0.f;
      const float eg = expf(scum[t]);
      su[t * kVTile + tx] = __fsub_rn(__fmul_rn(sbeta[t], vt), __fmul_rn(__fmul_rn(sbeta[t], eg), ks));
      so[t * kVTile + tx] = __fmul_rn(eg, qs);
    }
    __syncthreads();
    if (ty == 0) {  // (I + A) U = rhs by forward substitution: each lane one column
      for (int t = 1; t < n; ++t) {
        float u = su[t * kVTile + tx];
        for (int i = 0; i < t; ++i) u = __fsub_rn(u, __fmul_rn(sa[t * chunk + i], su[i * kVTile + tx]));
        su[t * kVTile + tx] = u;
      }
    }
    __syncthreads();
    for (int t = ty; t < n; t += kKSplit) {
      float o = 0.f;
      for (int i = 0; i <= t; ++i) o = __fadd_rn(o, __fmul_rn(sqk[t * chunk + i], su[i * kVTile + tx]));
      if (col) out[(((int64_t)b * seq + lo + t) * heads + h) * v_dim + j] = from_f32<TOut>(__fadd_rn(so[t * kVTile + tx], o));
    }
    const float last = scum[n - 1];
    const float chunk_decay = expf(last);
    for (int r = ty; r < k_dim; r += kKSplit) {
      float acc = 0.f;
      for (int i = 0; i < n; ++i)
        acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(expf(__fsub_rn(last, scum[i])), sk[i * k_dim + r]), su[i * kVTile + tx]));
      ss[r * kVTile + tx] = __fadd_rn(__fmul_rn(chunk_decay, ss[r * kVTile + tx]), acc);
    }
    __syncthreads();
  }
  float* np = new_state + (int64_t)bh * k_dim * v_dim;
  if (col)
    for (int r = ty; r < k_dim; r += kKSplit) np[(int64_t)r * v_dim + j] = ss[r * kVTile + tx];
}

}  // namespace vt_gdn
