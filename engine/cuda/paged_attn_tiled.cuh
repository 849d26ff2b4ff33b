// Tiled paged decode attention on tensor cores, in two passes so that the probabilities are rounded
// where the eager reference rounds them. One block per (KV head, split, sequence) streams its
// positions' K (pass 1) or V (pass 2) rows through a cp.async pipeline of 64-token tiles in shared
// memory; every query head of the KV head's group is one row of a 16-row mma.sync tile, so each K/V
// byte is read from global memory once for the whole group.
//
// Pass 1 (tiled_scores_kernel): S = Q K^T (m16n8k16; rows >= group are zero), each score rounded as
// the reference rounds it, T(T(q.k) * scale), stored in T (exactly), and each split's max and sum of
// exponentials per query head. Pass 2 (tiled_pv_kernel): every block merges the splits' max and sum,
// so p = T(exp(s - max) / sum) is the reference's normalised, rounded probability; O += P V in fp32.
// One split writes the output; several write fp32 partial sums that tiled_sum_kernel adds, or, in the
// pipelined P.V pass (VT_ATTN_PV_PIPELINED), the last split to finish adds them itself.
// (A single online-softmax pass rounded unnormalised probabilities and failed the near-tie razor.)
#pragma once

#include <cstdint>

#include "gemv.cuh"  // the programmatic-dependent-launch helpers
#include "paged_attn.cuh"

namespace vt_tiled {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpTokens = 16;              // tokens per warp per tile: one P.V mma's k extent
constexpr int kTile = kWarps * kWarpTokens;  // tokens per pipeline stage
constexpr int kStages = 3;                   // two tiles in flight while one is computed
constexpr int kMaxGroup = 8;                 // query heads per KV head: rows 0..7 of the m16 tile
constexpr int kRowPad = 8;                   // elements after each smem row: ldmatrix rows hit distinct banks
constexpr int kMaxSplits = 64;               // bounds the partial buffers the binding allocates
// one-tile splits lose to their partial writes; four-tile ones leave a short context on too few SMs
// (scripts/bench/attn_split_sweep.py, H200, batch 1: ctx 1024 with 4 splits 19.7 us, 8 splits 14.7 us)
constexpr int kMinTilesPerSplit = 2;
constexpr int kSumThreads = 128;

// One pass streams one cache (K or V), so a stage is kTile rows of one tensor: 52 KB of shared memory
// at head_dim 128 for three stages, and four blocks share an SM.
template <int D> __host__ __device__ constexpr int row_elems() { return D + kRowPad; }
template <typename T, int D> __host__ __device__ constexpr int smem_bytes() {
  constexpr int pipe = static_cast<int>(sizeof(T)) * kTile * row_elems<D>() * kStages;
  constexpr int merge = static_cast<int>(sizeof(float)) * kWarps * kMaxGroup * (D + 2);
  return pipe > merge ? pipe : merge;
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool full) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = full ? 16 : 0;  // 0: nothing is read and the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// d += A B for A rows 0..7 only (a1 = a3 = 0): d0, d1 are row lane/4; rows 8..15 land in `pad`.
template <typename T>
__device__ __forceinline__ void mma_rows8(float& d0, float& d1, float (&pad)[2], uint32_t a0, uint32_t a2,
                                          uint32_t b0, uint32_t b1) {
  const uint32_t z = 0;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d0), "+f"(d1), "+f"(pad[0]), "+f"(pad[1])
                 : "r"(a0), "r"(z), "r"(a2), "r"(z), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d0), "+f"(d1), "+f"(pad[0]), "+f"(pad[1])
                 : "r"(a0), "r"(z), "r"(a2), "r"(z), "r"(b0), "r"(b1));
  }
}

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The positions a block covers: tiles [t_lo, t_lo + n) of the window [begin, len) of its sequence.
struct Span {
  int len, begin, t_lo, n;
};

__device__ __forceinline__ Span split_span(const vt::PagedArgs& a, int b, int split, int num_splits) {
  const int len = a.context_lens[b];
  const int begin = vt::window_begin(len, a.window);
  const int first = begin / kTile, n_all = vt::ceil_div(len, kTile) - first;
  const int per = vt::ceil_div(n_all, num_splits);
  return {len, begin, first + split * per, max(0, min(per, n_all - split * per))};
}

// Copy one tile's rows of one cache into a stage. Thread tid copies chunk tid % kChunks of tokens
// tid / kChunks + i * kStep: the block index and offset advance by kStep per token, so only the first
// token of a tile pays a division. Positions past len are zero-filled and never read from the cache.
template <typename T, int D>
__device__ __forceinline__ void load_tile(T* stage, const T* base, const int* table, int block_size,
                                          int64_t row_stride, int len, int tile) {
  constexpr int kChunks = D / 8, kStep = kThreads / kChunks, R = row_elems<D>();
  const int my_chunk = threadIdx.x % kChunks, my_tok = threadIdx.x / kChunks;
  T* dst = stage + my_tok * R + my_chunk * 8;
  int pos = tile * kTile + my_tok, blk = pos / block_size, off = pos - blk * block_size;
#pragma unroll
  for (int i = 0; i < kTile / kStep; ++i) {
    const bool live = pos < len;  // pos >= 0: tiles start at or after position 0
    const int64_t src = live ? ((int64_t)table[blk] * block_size + off) * row_stride + my_chunk * 8 : 0;
    cp_async16(dst + i * kStep * R, base + src, live);
    pos += kStep;
    for (off += kStep; off >= block_size; off -= block_size) ++blk;
  }
}

// Run body(tile, stage) over the span's tiles with kStages - 1 tiles in flight. On return every copy
// has landed and every warp is past its last body, so the shared memory may be reused.
// The first S - 1 tiles' copies of a pipeline (pipeline_body runs the rest), so that a caller can
// start them before other work.
template <typename T, int D, int S = kStages>
__device__ __forceinline__ void pipeline_prologue(T* smem, const T* base, const vt::PagedArgs& a, int b,
                                                  const Span& sp) {
  static_assert(S >= 2, "a pipeline needs a stage in flight besides the one computed");
  constexpr int R = row_elems<D>();
  const int* table = a.block_tables + (int64_t)b * a.max_blocks;
  const int64_t row_stride = (int64_t)a.num_kv_heads * D;
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < sp.n) load_tile<T, D>(smem + i * kTile * R, base, table, a.block_size, row_stride, sp.len, sp.t_lo + i);
    cp_async_commit();
  }
}

template <typename T, int D, int S = kStages, typename Body>
__device__ __forceinline__ void pipeline_body(T* smem, const T* base, const vt::PagedArgs& a, int b, const Span& sp,
                                              Body&& body) {
  constexpr int R = row_elems<D>();
  const int* table = a.block_tables + (int64_t)b * a.max_blocks;
  const int64_t row_stride = (int64_t)a.num_kv_heads * D;
  for (int i = 0; i < sp.n; ++i) {
    cp_async_wait<S - 2>();
    __syncthreads();  // tile i is visible to all warps, and every warp is done with stage (i - 1) % S
    const int next = i + S - 1;
    if (next < sp.n)
      load_tile<T, D>(smem + (next % S) * kTile * R, base, table, a.block_size, row_stride, sp.len, sp.t_lo + next);
    cp_async_commit();
    body(sp.t_lo + i, smem + (i % S) * kTile * R);
  }
  cp_async_wait<0>();
  __syncthreads();
}

template <typename T, int D, int S = kStages, typename Body>
__device__ __forceinline__ void pipeline(T* smem, const T* base, const vt::PagedArgs& a, int b, const Span& sp,
                                         Body&& body) {
  pipeline_prologue<T, D, S>(smem, base, a, b, sp);
  pipeline_body<T, D, S>(smem, base, a, b, sp, body);
}

// Pass 1. grid (num_kv_heads, num_splits, batch), kThreads threads, smem_bytes<T, D>() dynamic smem.
// scores: [batch, num_q_heads, cap] in T (positions of the window only); m_part, l_part: [batch,
// num_splits, num_q_heads] fp32, the split's max score and sum of exp(score - max) (-inf and 0 if empty).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    tiled_scores_kernel(vt::PagedArgs a, int num_splits, int cap, T* __restrict__ scores, float* __restrict__ m_part,
                        float* __restrict__ l_part) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int R = row_elems<D>();
  const int kvh = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 4, quad = lane % 4;
  const int group = a.num_q_heads / a.num_kv_heads;
  const Span sp = split_span(a, b, split, num_splits);
  // the P.V pass, a programmatic dependent (sm_90), may launch now and issue its V loads (no-op otherwise)
  vt_gemv::allow_dependents();

  // Q as the A operand: this lane's row (query head kvh*group + row) at columns quad*2 and quad*2+8
  // of each 16-wide k step; rows past the group stay zero.
  const bool row_live = row < group;
  const int64_t q_head = (int64_t)b * a.num_q_heads + kvh * group + (row_live ? row : 0);
  const T* qrow = static_cast<const T*>(a.q) + q_head * D;
  uint32_t qa[D / 16][2];
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    qa[k][0] = row_live ? *reinterpret_cast<const uint32_t*>(qrow + k * 16 + quad * 2) : 0u;
    qa[k][1] = row_live ? *reinterpret_cast<const uint32_t*>(qrow + k * 16 + 8 + quad * 2) : 0u;
  }
  T* srow = scores + q_head * cap;
  // ldmatrix lane address (S = Q K^T, B operand k = dims, n = tokens): matrices (tokens 0-7, dims
  // 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15).
  const int k_tok = (lane % 8) + (lane / 16) * 8, k_dim = ((lane / 8) % 2) * 8;
  float m = -CUDART_INF_F, l = 0.f, pad[2] = {0.f, 0.f};
  const T* kbase = static_cast<const T*>(a.k_cache) + (int64_t)kvh * D;
  pipeline<T, D>(reinterpret_cast<T*>(smem_raw), kbase, a, b, sp, [&](int tile, const T* stage) {
    const T* ks = stage + warp * kWarpTokens * R;
    float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // token tiles 0-7 and 8-15: columns quad*2, quad*2+1
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t kb[4];
      ldmatrix_x4(kb, ks + k_tok * R + k * 16 + k_dim);
      mma_rows8<T>(s[0][0], s[0][1], pad, qa[k][0], qa[k][1], kb[0], kb[1]);
      mma_rows8<T>(s[1][0], s[1][1], pad, qa[k][0], qa[k][1], kb[2], kb[3]);
    }
    const int pos0 = tile * kTile + warp * kWarpTokens + quad * 2;
    float x[4], mt = -CUDART_INF_F;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = pos0 + (e / 2) * 8 + e % 2;
      const bool valid = pos >= sp.begin && pos < sp.len;
      const float v = vt::round_to<T>(vt::round_to<T>(s[e / 2][e % 2]) * a.scale);
      if (valid && row_live) srow[pos] = vt::from_f32<T>(v);  // exact: v is a T value
      x[e] = valid ? v : -CUDART_INF_F;
      mt = fmaxf(mt, x[e]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float m_new = fmaxf(m, mt);
    const float base = m_new == -CUDART_INF_F ? 0.f : m_new;  // a fully masked row keeps l = 0
    l = (m == -CUDART_INF_F ? 0.f : l * expf(m - base)) + (expf(x[0] - base) + expf(x[1] - base)) +
        (expf(x[2] - base) + expf(x[3] - base));
    m = m_new;
  });

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* ms = reinterpret_cast<float*>(smem_raw);  // [kWarps][kMaxGroup]
  float* ls = ms + kWarps * kMaxGroup;             // [kWarps][kMaxGroup]
  if (quad == 0) {
    ms[warp * kMaxGroup + row] = m;
    ls[warp * kMaxGroup + row] = l;
  }
  __syncthreads();
  if (threadIdx.x < group) {
    const int g = threadIdx.x;
    float mx = -CUDART_INF_F, sum = 0.f;
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, ms[w * kMaxGroup + g]);
    if (mx != -CUDART_INF_F)
      for (int w = 0; w < kWarps; ++w) sum += ls[w * kMaxGroup + g] * expf(ms[w * kMaxGroup + g] - mx);
    const int64_t idx = ((int64_t)b * num_splits + split) * a.num_q_heads + kvh * group + g;
    m_part[idx] = mx;
    l_part[idx] = sum;
  }
}

// The split statistics a P.V block reads: the max and the sum of exp(score - max) of row `row` over every
// split, the sum in split order (as tiled_sum_kernel and the reference add). Pipelined, the loads are issued
// kStatChunk at a time instead of one dependent load per split, so their latency is paid once per chunk.
constexpr int kStatChunk = 8;
template <bool Pipelined>
__device__ __forceinline__ void merge_split_stats(const float* __restrict__ m_part, const float* __restrict__ l_part,
                                                  int64_t first, int stride, int num_splits, float& mx, float& sum) {
  mx = -CUDART_INF_F;
  sum = 0.f;
  if constexpr (!Pipelined) {
    for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, m_part[first + (int64_t)s * stride]);
    for (int s = 0; s < num_splits; ++s) {
      const float ms = m_part[first + (int64_t)s * stride];
      if (ms != -CUDART_INF_F) sum += l_part[first + (int64_t)s * stride] * expf(ms - mx);
    }
  } else {
    for (int s0 = 0; s0 < num_splits; s0 += kStatChunk) {
      float mv[kStatChunk];
#pragma unroll
      for (int j = 0; j < kStatChunk; ++j)
        mv[j] = s0 + j < num_splits ? m_part[first + (int64_t)(s0 + j) * stride] : -CUDART_INF_F;
#pragma unroll
      for (int j = 0; j < kStatChunk; ++j) mx = fmaxf(mx, mv[j]);
    }
    for (int s0 = 0; s0 < num_splits; s0 += kStatChunk) {
      float mv[kStatChunk], lv[kStatChunk];
#pragma unroll
      for (int j = 0; j < kStatChunk; ++j) {
        const bool in = s0 + j < num_splits;
        mv[j] = in ? m_part[first + (int64_t)(s0 + j) * stride] : -CUDART_INF_F;
        lv[j] = in ? l_part[first + (int64_t)(s0 + j) * stride] : 0.f;
      }
#pragma unroll
      for (int j = 0; j < kStatChunk; ++j)
        if (mv[j] != -CUDART_INF_F) sum += lv[j] * expf(mv[j] - mx);
    }
  }
}

// This thread's elements idx = threadIdx.x + k * kThreads (< n) of the splits' partial rows at o_part + (head0 +
// s * num_q_heads) * D, accumulated in split order: acc[k] = add(acc[k], value, idx / D, s). A chunk of splits'
// loads is issued before its adds: one dependent L2 load per split cost about half a microsecond each (16 us of
// a 63 us call at 32 splits).
template <int D, typename Add>
__device__ __forceinline__ void add_split_rows(const float* __restrict__ o_part, int64_t head0, int num_q_heads,
                                               int num_splits, int n, float (&acc)[kMaxGroup * D / kThreads], Add add) {
  constexpr int kPer = kMaxGroup * D / kThreads;
  constexpr int kChunk = kPer < 32 ? 32 / kPer : 1;  // 32 values in registers: no more than the main loop holds
  for (int s0 = 0; s0 < num_splits; s0 += kChunk) {
    float v[kChunk][kPer];
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      const float* src = o_part + (head0 + (int64_t)(s0 + j) * num_q_heads) * D;
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int idx = threadIdx.x + k * kThreads;
        v[j][k] = s0 + j < num_splits && idx < n ? __ldcg(src + idx) : 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < kChunk; ++j)
#pragma unroll
      for (int k = 0; k < kPer; ++k)
        if (s0 + j < num_splits && threadIdx.x + k * kThreads < n)
          acc[k] = add(acc[k], v[j][k], (threadIdx.x + k * kThreads) / D, s0 + j);
  }
}

// The split sum, folded into a kernel: the last block of this (sequence, KV head) to call it (after writing
// its partial sums) adds the splits' partial sums in split order, as tiled_sum_kernel does, writes the
// output and sets *done back to zero for the next launch. Returns whether this block was the last.
template <typename T, int D>
__device__ __forceinline__ bool fold_split_sum(const vt::PagedArgs& a, int b, int kvh, int group, int num_splits,
                                               const float* __restrict__ o_part, T* __restrict__ out, int* done) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(done, 1) == num_splits - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
  constexpr int kPer = kMaxGroup * D / kThreads;
  const int n = group * D;
  float acc[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) acc[k] = 0.f;
  const int64_t head0 = (int64_t)b * num_splits * a.num_q_heads + kvh * group;
  add_split_rows<D>(o_part, head0, a.num_q_heads, num_splits, n, acc, [](float sum, float v, int, int) { return sum + v; });
  T* dst = out + ((int64_t)b * a.num_q_heads + kvh * group) * D;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int idx = threadIdx.x + k * kThreads;
    if (idx < n) dst[idx] = vt::from_f32<T>(acc[k]);
  }
  if (threadIdx.x == 0) *done = 0;
  return true;
}

// The pipelined P.V pass's shared memory after the pipeline: two probability tiles of kMaxGroup rows of a
// tile's kTile positions in T (kPRowPad keeps the lanes' 32-bit loads of a fragment on distinct banks), then
// each row's max and sum over the splits.
constexpr int kPRowPad = 8;
constexpr int kPRow = kTile + kPRowPad;
template <typename T> __host__ __device__ constexpr int p_tile_bytes() {
  return 2 * kMaxGroup * kPRow * static_cast<int>(sizeof(T)) + 2 * kMaxGroup * static_cast<int>(sizeof(float));
}
template <typename T, int D> __host__ __device__ constexpr int pipelined_smem_bytes() { return smem_bytes<T, D>() + p_tile_bytes<T>(); }
constexpr int kPPerThread = kMaxGroup * kTile / kThreads;  // a tile's probabilities each thread computes, at most

// Pass 2. Same grid and shared memory as pass 1 (pipelined: pipelined_smem_bytes). num_splits == 1: out
// [batch, num_q_heads, D] in T. Else o_part [batch, num_splits, num_q_heads, D] fp32: each split's sum of
// p * v over its positions.
// Pipelined (VT_ATTN_PV_PIPELINED; the same arithmetic in the same order, so bitwise the plain pass): the
// plain pass computes a tile's probabilities in the MMA layout, where the lanes of rows past the group (6 of 8
// at two query heads per KV head) issue every exp and division for nothing; pipelined, the block's threads
// compute each probability of the tile once (thread t: position t % kTile of rows t / kTile + 2i), a tile
// ahead, into a shared-memory tile the warps then read as the MMA's A fragments. The first V tiles are
// requested before the split statistics are read (by warp 0, in chunks of loads, then shared), and with several
// splits and `counters` (the fused kernel's: 2 int32 per (sequence, KV head), zero, left zero; the second one
// is used) the last split adds the partial sums, so there is no tiled_sum_kernel launch.
template <typename T, int D, bool Pipelined = false>
__global__ void __launch_bounds__(kThreads)
    tiled_pv_kernel(vt::PagedArgs a, int num_splits, int cap, const T* __restrict__ scores,
                    const float* __restrict__ m_part, const float* __restrict__ l_part, T* __restrict__ out,
                    float* __restrict__ o_part, int* __restrict__ counters = nullptr) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int R = row_elems<D>();
  const int kvh = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 4, quad = lane % 4;
  const int group = a.num_q_heads / a.num_kv_heads;
  const Span sp = split_span(a, b, split, num_splits);
  const bool row_live = row < group;
  const int64_t q_head = (int64_t)b * a.num_q_heads + kvh * group + (row_live ? row : 0);
  T* pipe_smem = reinterpret_cast<T*>(smem_raw);
  const T* vbase = static_cast<const T*>(a.v_cache) + (int64_t)kvh * D;
  const int64_t stats0 = (int64_t)b * num_splits * a.num_q_heads + kvh * group;
  // ldmatrix lane address (O += P V, transposed loads, k = tokens, n = dims): matrices (tokens 0-7,
  // dims 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
  const int v_tok = (lane % 8) + ((lane / 8) % 2) * 8, v_dim = (lane / 16) * 8;
  float o[D / 8][2], pad[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = 0.f;
  const auto mma_tile = [&](const T* stage, uint32_t pa0, uint32_t pa2) {
    const T* vs = stage + warp * kWarpTokens * R;
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, vs + v_tok * R + j * 16 + v_dim);
      mma_rows8<T>(o[2 * j][0], o[2 * j][1], pad, pa0, pa2, vb[0], vb[1]);
      mma_rows8<T>(o[2 * j + 1][0], o[2 * j + 1][1], pad, pa0, pa2, vb[2], vb[3]);
    }
  };

  if constexpr (!Pipelined) {
    // The row's max and sum over every split: the softmax's statistics over the whole window.
    float mx = -CUDART_INF_F, sum = 0.f;
    if (row_live) merge_split_stats<false>(m_part, l_part, stats0 + row, a.num_q_heads, num_splits, mx, sum);
    const T* srow = scores + q_head * cap;
    pipeline<T, D>(pipe_smem, vbase, a, b, sp, [&](int tile, const T* stage) {
      const int pos0 = tile * kTile + warp * kWarpTokens + quad * 2;
      float p[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int pos = pos0 + (e / 2) * 8 + e % 2;
        const bool valid = row_live && pos >= sp.begin && pos < sp.len;
        p[e] = valid ? vt::round_to<T>(expf(vt::to_f32<T>(srow[pos]) - mx) / sum) : 0.f;
      }
      mma_tile(stage, pack2<T>(p[0], p[1]), pack2<T>(p[2], p[3]));  // exact: p are T values
    });
  } else {
    pipeline_prologue<T, D>(pipe_smem, vbase, a, b, sp);
    vt_gemv::wait_for_inputs();  // V is the cache as the step stored it; the scores are the scores pass's to finish
    T* ptile = reinterpret_cast<T*>(smem_raw + smem_bytes<T, D>());  // [2][kMaxGroup][kPRow]
    float* stat_smem = reinterpret_cast<float*>(ptile + 2 * kMaxGroup * kPRow);
    float* mx_s = stat_smem;               // [kMaxGroup]
    float* sum_s = stat_smem + kMaxGroup;  // [kMaxGroup]
    if (warp == 0 && quad == 0 && row_live) {
      float mx, sum;
      merge_split_stats<true>(m_part, l_part, stats0 + row, a.num_q_heads, num_splits, mx, sum);
      mx_s[row] = mx;
      sum_s[row] = sum;
    }
    __syncthreads();
    // This thread's probabilities of a tile: position tok of rows r0, r0 + 2, ... below the group.
    const int tok = threadIdx.x % kTile, r0 = threadIdx.x / kTile;
    float mx_r[kPPerThread], sum_r[kPPerThread];
    const T* srow_r[kPPerThread];
#pragma unroll
    for (int i = 0; i < kPPerThread; ++i) {
      const int r = r0 + i * (kThreads / kTile);
      mx_r[i] = r < group ? mx_s[r] : 0.f;
      sum_r[i] = r < group ? sum_s[r] : 1.f;
      srow_r[i] = scores + ((int64_t)b * a.num_q_heads + kvh * group + (r < group ? r : 0)) * cap;
    }
    T next[kPPerThread];
    const auto load_scores = [&](int tile) {
      const int pos = tile * kTile + tok;
      const bool in = pos >= sp.begin && pos < sp.len;
#pragma unroll
      for (int i = 0; i < kPPerThread; ++i)
        next[i] = in && r0 + i * (kThreads / kTile) < group ? srow_r[i][pos] : vt::from_f32<T>(0.f);
    };
    const auto store_probs = [&](int tile, T* dst) {  // from next[], the scores load_scores(tile) loaded
      const int pos = tile * kTile + tok;
      const bool in = pos >= sp.begin && pos < sp.len;
#pragma unroll
      for (int i = 0; i < kPPerThread; ++i) {
        const int r = r0 + i * (kThreads / kTile);
        if (r < group)
          dst[r * kPRow + tok] =
              vt::from_f32<T>(in ? vt::round_to<T>(expf(vt::to_f32<T>(next[i]) - mx_r[i]) / sum_r[i]) : 0.f);
      }
    };
    if (sp.n > 0) {
      load_scores(sp.t_lo);
      store_probs(sp.t_lo, ptile);  // tile 0's buffer: the body's first barrier publishes it
      if (sp.n > 1) load_scores(sp.t_lo + 1);
    }
    // The A fragment of rows 0-7 (k = this warp's 16 tokens): rows past the group read zeros.
    const T* pa_row = ptile + row * kPRow + warp * kWarpTokens + quad * 2;
    pipeline_body<T, D>(pipe_smem, vbase, a, b, sp, [&](int tile, const T* stage) {
      const int i = tile - sp.t_lo, buf = i % 2;
      uint32_t pa0 = 0u, pa2 = 0u;
      if (row_live) {
        pa0 = *reinterpret_cast<const uint32_t*>(pa_row + buf * kMaxGroup * kPRow);
        pa2 = *reinterpret_cast<const uint32_t*>(pa_row + buf * kMaxGroup * kPRow + 8);
      }
      mma_tile(stage, pa0, pa2);
      if (i + 1 < sp.n) {  // the next tile's probabilities into the other buffer, read after the next barrier
        store_probs(tile + 1, ptile + (1 - buf) * kMaxGroup * kPRow);
        if (i + 2 < sp.n) load_scores(tile + 2);
      }
    });
  }

  // The probabilities are normalised already, so the warps' partial sums simply add (in warp order).
  float* os = reinterpret_cast<float*>(smem_raw);  // [kWarps][kMaxGroup][D]
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    os[(warp * kMaxGroup + row) * D + j * 8 + quad * 2] = o[j][0];
    os[(warp * kMaxGroup + row) * D + j * 8 + quad * 2 + 1] = o[j][1];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float val = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) val += os[(w * kMaxGroup + g) * D + d];
    const int64_t qh = (int64_t)b * a.num_q_heads + kvh * group + g;
    if (num_splits == 1)
      out[qh * D + d] = vt::from_f32<T>(val);
    else
      o_part[(((int64_t)b * num_splits + split) * a.num_q_heads + kvh * group + g) * D + d] = val;
  }
  if constexpr (Pipelined)
    if (num_splits > 1 && counters != nullptr)
      fold_split_sum<T, D>(a, b, kvh, group, num_splits, o_part, out,
                           counters + 2 * ((int64_t)b * a.num_kv_heads + kvh) + 1);
}

// One launch (VT_ATTN_TILED_FUSED): the arithmetic of the two passes and the split sum above, step for
// step, so its output is bitwise the two-pass output. Each block keeps its split's scores (rounded to T,
// as pass 1 stores them) in shared memory instead of global memory. With several splits, each block
// publishes its split's max and sum and waits until every split of its (sequence, KV head) has, which
// is safe only when the whole grid is resident at once (the launcher checks the occupancy); then it
// streams V as pass 2 does, and the last split to finish adds the splits' partial sums in split order.
// The first V tiles are requested before the wait, so their latency overlaps it. S pipeline stages: three
// where the grid is still resident at once with them, else two (35 KB at head_dim 128 instead of 52);
// the launcher picks. Shared memory: the pipeline (later the P.V merge), the split statistics, the scores.
constexpr int kFusedStatsBytes = 2 * kWarps * kMaxGroup * static_cast<int>(sizeof(float));

template <typename T, int D, int S> __host__ __device__ constexpr int fused_pipe_bytes() {
  constexpr int pipe = static_cast<int>(sizeof(T)) * kTile * row_elems<D>() * S;
  constexpr int merge = static_cast<int>(sizeof(float)) * kWarps * kMaxGroup * D;
  constexpr int bytes = pipe > merge ? pipe : merge;
  return (bytes + 15) / 16 * 16 + kFusedStatsBytes;
}

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// grid (num_kv_heads, num_splits, batch), kThreads threads, fused_pipe_bytes<T, D, S>() + group *
// span_tokens * sizeof(T) dynamic smem. span_tokens: kTile times the most tiles a split can hold. m_part, l_part and
// o_part as in the two passes; counters: 2 ints per (sequence, KV head), zero before the launch and left
// zero by it (used only with num_splits > 1).
template <typename T, int D, int S>
__global__ void __launch_bounds__(kThreads)
    tiled_fused_kernel(vt::PagedArgs a, int num_splits, int span_tokens, float* __restrict__ m_part,
                       float* __restrict__ l_part, T* __restrict__ out, float* __restrict__ o_part,
                       int* __restrict__ counters) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  constexpr int R = row_elems<D>();
  const int kvh = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 4, quad = lane % 4;
  const int group = a.num_q_heads / a.num_kv_heads;
  const Span sp = split_span(a, b, split, num_splits);
  const bool row_live = row < group;
  const int64_t q_head = (int64_t)b * a.num_q_heads + kvh * group + (row_live ? row : 0);
  T* pipe_smem = reinterpret_cast<T*>(smem_raw);
  float* stats = reinterpret_cast<float*>(smem_raw + fused_pipe_bytes<T, D, S>() - kFusedStatsBytes);
  T* srow = reinterpret_cast<T*>(smem_raw + fused_pipe_bytes<T, D, S>()) + (row_live ? row : 0) * span_tokens;
  const int pos_base = sp.t_lo * kTile;  // the split's first tile: srow[pos - pos_base] is position pos

  // Phase 1, as tiled_scores_kernel: S = Q K^T, rounded, into shared memory; the split's max and sum.
  const T* qrow = static_cast<const T*>(a.q) + q_head * D;
  uint32_t qa[D / 16][2];
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    qa[k][0] = row_live ? *reinterpret_cast<const uint32_t*>(qrow + k * 16 + quad * 2) : 0u;
    qa[k][1] = row_live ? *reinterpret_cast<const uint32_t*>(qrow + k * 16 + 8 + quad * 2) : 0u;
  }
  const int k_tok = (lane % 8) + (lane / 16) * 8, k_dim = ((lane / 8) % 2) * 8;
  float m = -CUDART_INF_F, l = 0.f, pad[2] = {0.f, 0.f};
  const T* kbase = static_cast<const T*>(a.k_cache) + (int64_t)kvh * D;
  pipeline<T, D, S>(pipe_smem, kbase, a, b, sp, [&](int tile, const T* stage) {
    const T* ks = stage + warp * kWarpTokens * R;
    float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t kb[4];
      ldmatrix_x4(kb, ks + k_tok * R + k * 16 + k_dim);
      mma_rows8<T>(s[0][0], s[0][1], pad, qa[k][0], qa[k][1], kb[0], kb[1]);
      mma_rows8<T>(s[1][0], s[1][1], pad, qa[k][0], qa[k][1], kb[2], kb[3]);
    }
    const int pos0 = tile * kTile + warp * kWarpTokens + quad * 2;
    float x[4], mt = -CUDART_INF_F;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = pos0 + (e / 2) * 8 + e % 2;
      const bool valid = pos >= sp.begin && pos < sp.len;
      const float v = vt::round_to<T>(vt::round_to<T>(s[e / 2][e % 2]) * a.scale);
      if (valid && row_live) srow[pos - pos_base] = vt::from_f32<T>(v);
      x[e] = valid ? v : -CUDART_INF_F;
      mt = fmaxf(mt, x[e]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float m_new = fmaxf(m, mt);
    const float base = m_new == -CUDART_INF_F ? 0.f : m_new;
    l = (m == -CUDART_INF_F ? 0.f : l * expf(m - base)) + (expf(x[0] - base) + expf(x[1] - base)) +
        (expf(x[2] - base) + expf(x[3] - base));
    m = m_new;
  });
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  const T* vbase = static_cast<const T*>(a.v_cache) + (int64_t)kvh * D;
  pipeline_prologue<T, D, S>(pipe_smem, vbase, a, b, sp);  // the K stages are free: every warp is past them
  {
    float* ms = stats;
    float* ls = ms + kWarps * kMaxGroup;
    if (quad == 0) {
      ms[warp * kMaxGroup + row] = m;
      ls[warp * kMaxGroup + row] = l;
    }
    __syncthreads();
    if (threadIdx.x < group) {
      const int g = threadIdx.x;
      float mx = -CUDART_INF_F, sum = 0.f;
      for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, ms[w * kMaxGroup + g]);
      if (mx != -CUDART_INF_F)
        for (int w = 0; w < kWarps; ++w) sum += ls[w * kMaxGroup + g] * expf(ms[w * kMaxGroup + g] - mx);
      const int64_t idx = ((int64_t)b * num_splits + split) * a.num_q_heads + kvh * group + g;
      m_part[idx] = mx;
      l_part[idx] = sum;
    }
  }
  int* arrive = counters + 2 * ((int64_t)b * a.num_kv_heads + kvh);
  if (num_splits > 1) {  // wait for every split of this (sequence, KV head): the whole grid is resident
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      atomicAdd(arrive, 1);
      while (load_acquire(arrive) < num_splits) __nanosleep(40);
      __threadfence();
    }
  }
  __syncthreads();  // the statistics are visible

  // Phase 2, as tiled_pv_kernel: p = T(exp(s - max) / sum) over the whole window's statistics, O += P V.
  float mx = -CUDART_INF_F, sum = 0.f;
  if (row_live) {
    const int64_t first = (int64_t)b * num_splits * a.num_q_heads + kvh * group + row;
    for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, __ldcg(m_part + first + (int64_t)s * a.num_q_heads));
    for (int s = 0; s < num_splits; ++s) {
      const float ms = __ldcg(m_part + first + (int64_t)s * a.num_q_heads);
      if (ms != -CUDART_INF_F) sum += __ldcg(l_part + first + (int64_t)s * a.num_q_heads) * expf(ms - mx);
    }
  }
  const int v_tok = (lane % 8) + ((lane / 8) % 2) * 8, v_dim = (lane / 16) * 8;
  float o[D / 8][2];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = 0.f;
  pipeline_body<T, D, S>(pipe_smem, vbase, a, b, sp, [&](int tile, const T* stage) {
    const T* vs = stage + warp * kWarpTokens * R;
    const int pos0 = tile * kTile + warp * kWarpTokens + quad * 2;
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = pos0 + (e / 2) * 8 + e % 2;
      const bool valid = row_live && pos >= sp.begin && pos < sp.len;
      p[e] = valid ? vt::round_to<T>(expf(vt::to_f32<T>(srow[pos - pos_base]) - mx) / sum) : 0.f;
    }
    const uint32_t pa0 = pack2<T>(p[0], p[1]), pa2 = pack2<T>(p[2], p[3]);
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, vs + v_tok * R + j * 16 + v_dim);
      mma_rows8<T>(o[2 * j][0], o[2 * j][1], pad, pa0, pa2, vb[0], vb[1]);
      mma_rows8<T>(o[2 * j + 1][0], o[2 * j + 1][1], pad, pa0, pa2, vb[2], vb[3]);
    }
  });
  float* os = reinterpret_cast<float*>(smem_raw);  // [kWarps][kMaxGroup][D]
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    os[(warp * kMaxGroup + row) * D + j * 8 + quad * 2] = o[j][0];
    os[(warp * kMaxGroup + row) * D + j * 8 + quad * 2 + 1] = o[j][1];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float val = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) val += os[(w * kMaxGroup + g) * D + d];
    const int64_t qh = (int64_t)b * a.num_q_heads + kvh * group + g;
    if (num_splits == 1)
      out[qh * D + d] = vt::from_f32<T>(val);
    else
      o_part[(((int64_t)b * num_splits + split) * a.num_q_heads + kvh * group + g) * D + d] = val;
  }
  if (num_splits == 1) return;

  // The split sum, folded (the last split adds the partial sums); then the arrival counter is zero again too.
  if (fold_split_sum<T, D>(a, b, kvh, group, num_splits, o_part, out, arrive + 1) && threadIdx.x == 0) arrive[0] = 0;
}

// grid (num_q_heads, batch): out = T(sum over splits of o_part), the splits in order.
template <typename T>
__global__ void __launch_bounds__(kSumThreads)
    tiled_sum_kernel(const float* __restrict__ o_part, T* __restrict__ out, int num_q_heads, int D, int num_splits) {
  const int h = blockIdx.x, b = blockIdx.y;
  for (int d = threadIdx.x; d < D; d += kSumThreads) {
    float acc = 0.f;
    for (int s = 0; s < num_splits; ++s) acc += o_part[(((int64_t)b * num_splits + s) * num_q_heads + h) * D + d];
    out[((int64_t)b * num_q_heads + h) * D + d] = vt::from_f32<T>(acc);
  }
}

// Splits for `rows` = batch * num_kv_heads blocks over `slots` = SMs * resident blocks per SM. Blocks
// of a launch do equal work, so the last wave's fill decides the efficiency: the fewest splits whose
// waves are at least kMinWaveFill full, none shorter than kMinTilesPerSplit tiles of the longest
// possible context (else the best-filled count within that bound); in [1, kMaxSplits].
constexpr float kMinWaveFill = 0.9f;
inline int tiled_num_splits(int rows, int max_context, int sm_count, int blocks_per_sm) {
  if (rows <= 0 || max_context <= 0 || sm_count <= 0) return 1;
  const float slots = static_cast<float>(sm_count * (blocks_per_sm > 0 ? blocks_per_sm : 1));
  int limit = vt::ceil_div(vt::ceil_div(max_context, kTile), kMinTilesPerSplit);
  limit = limit < 1 ? 1 : (limit > kMaxSplits ? kMaxSplits : limit);
  int best = 1;
  float best_fill = 0.f;
  for (int s = 1; s <= limit; ++s) {
    const float waves = rows * s / slots;
    const float fill = waves / ceilf(waves);
    if (fill >= kMinWaveFill) return s;
    if (fill > best_fill) best = s, best_fill = fill;
  }
  return best;
}

}  // namespace vt_tiled
