// One-pass paged decode attention on tensor cores (VT_ATTN_ONEPASS): the tiled arm's geometry (one block
// per (KV head, split, sequence); the group's query heads are rows 0..7 of a 16-row mma.sync tile; 64-token
// tiles, 16 tokens per warp) with K and V of each tile through a cp.async pipeline and an online softmax. At
// head_dim 64 and 128 a pipeline stage holds a tile's K and V; at 256 it holds its K or its V (`kParts`), so
// that the same three stages fit two blocks per SM (the arithmetic is at `kParts`).
//
// Numerics differ from the two-pass arms on purpose, as production decode kernels do: scores stay in fp32,
// each warp keeps a running max and sum (in log2 units, exp2), and the probabilities are rounded to the
// dtype only as the P.V MMA's A operand; the sum of exponentials is fp32 and unrounded. So the arm is held
// to the near-tie razor's fp32-probabilities setting, not to bitwise agreement with the eager reference.
// The staging does not touch the arithmetic: every head_dim runs the same operations in the same order.
//
// A stage's K and V rows are unpadded (head_dim elements) with each row's 16-byte chunks XOR-swizzled (chunk c
// of row t at chunk c ^ (t % 8), `kv_at`): every 8-lane group of a cp.async copy writes one aligned 128-byte
// line, and an ldmatrix's 8 rows at one chunk fall in 8 distinct 16-byte bank groups. Q's rows (head_dim 256)
// keep the tiled arms' pad.
//
// At the end of a split the four warps merge their (max, sum, O) in shared memory. One split writes the
// output; several write their (max, sum, unnormalised O) and the last split of a (sequence, KV head) to
// finish (the tiled arms' arrival counters) combines them, so a call is one launch.
#pragma once

#include <cstdint>

#include "paged_attn_tiled.cuh"

namespace vt_onepass {

using vt_tiled::kMaxGroup;
using vt_tiled::kMaxSplits;
using vt_tiled::kThreads;
using vt_tiled::kTile;
using vt_tiled::kWarps;
using vt_tiled::kWarpTokens;
using vt_tiled::row_elems;

// A K or V row of a stage: head_dim elements, no pad (the tiled arms' row_elems adds 8 so that ldmatrix's rows hit
// distinct banks). The pad put row t 16 x t bytes off a 128-byte line, so each 8-lane group of a copy (16 B a
// lane, 128 contiguous bytes of the cache) wrote across two lines: ncu counted 24 L2 sectors where 16 would do and
// 12 shared wavefronts per LDGSTS.128 where 4 would. Instead chunk c (8 elements, 16 B) of row t sits at chunk
// c ^ (t % 8): head_dim is 64, 128 or 256, so a row is a whole number of 128-byte lines (8, 16 or 32 chunks) and
// the XOR moves a chunk only within its aligned 8-chunk line. A copy's 8-lane group (one row, 8 consecutive chunks
// of one line) writes that one line; the 8 rows t0..t0+7 (t0 % 8 == 0) an ldmatrix matrix reads at one chunk c sit
// at chunks c ^ 0..7: 8 distinct 16-byte bank groups, no conflict. The stage's base is 128-byte aligned (the
// `smem_raw` alignment, and a stage is a whole number of lines).
template <int D> __host__ __device__ constexpr int kv_row_elems() { return D; }
static_assert(kv_row_elems<64>() % 64 == 0 && kv_row_elems<128>() % 64 == 0 && kv_row_elems<256>() % 64 == 0,
              "a row is whole 128-byte lines of 8 chunks, so the swizzle stays within the row and its line");
// The element offset of chunk `chunk` of K or V row `row`, from a base at a row that is a multiple of 8 (a stage,
// a stage's V half, a warp's 16 rows): relative to such a base, row % 8 is that of the stage row.
template <int D> __device__ __forceinline__ int kv_at(int row, int chunk) {
  return row * kv_row_elems<D>() + ((chunk ^ (row & 7)) * 8);
}

// Three stages: two in flight while one is computed. At head_dim 64 and 128 a stage is a tile's K and V: 96 KB
// at 128, two blocks per SM. Two stages (3 blocks per SM; 70 KB with the padded rows it was measured with) measured
// no faster at any peer shape (H200): occupancy is not what limits this kernel there.
constexpr int kStages = 3;
constexpr float kLog2e = 1.4426950408889634f;

// How many stages a tile's K and V take: 1 (K and V in one stage) or 2 (K in one, V in the next).
// The H200's arithmetic (sm_90: 228 KB = 233472 B of shared memory per SM, at most 227 KB = 232448 B opt-in per
// block, and 1 KB reserved per resident block; a K or V row is D elements of 2 bytes, a Q row D + 8; 128 B of
// static shared memory: fold_combine's 16, padded to `smem_raw`'s 128-byte alignment):
//   head_dim 64, K+V per stage: 2 x 64 x 64 x 2 = 16384 B; 3 stages 49152 B; 4 x (49152 + 1024 + 128) = 201216
//     <= 233472: 4 blocks per SM.
//   head_dim 128, K+V per stage: 2 x 64 x 128 x 2 = 32768 B; 3 stages 98304 B; 2 x (98304 + 1024 + 128) = 198912
//     <= 233472 < 3 x 99456: 2 blocks per SM, two tiles (65536 B) in flight per block.
//   head_dim 256, K+V per stage: 2 x 64 x 256 x 2 = 65536 B; 3 stages 196608 B, and even 2 stages (131072 B, one
//     tile in flight) give 2 x (131072 + 1024 + 128) = 264448 > 233472: 1 block per SM.
//   head_dim 256, K or V per stage: 64 x 256 x 2 = 32768 B; 3 stages 98304 B, and Q's 8 rows 8 x 264 x 2 =
//     4224 B (kQInSmem): 102528 B; 2 x (102528 + 1024 + 128) = 207360 <= 233472: 2 blocks per SM (4 stages,
//     135296 B, would be 1), and two half tiles (65536 B, a whole tile's K and V) in flight per block: per SM the
//     bytes in flight of the head_dim-128 variant.
// Halving the tile to 32 tokens instead would give the same bytes per stage, but 8 tokens per warp: half the k
// extent of the P.V mma (m16n8k16), and another tile unit for the splits than the tiled arms' 64.
// The merge after the pipeline (fp32 O of 4 warps x 8 rows x (D + 2)) is 8448, 16640 and 33024 B at head_dim 64,
// 128 and 256: inside the stages.
template <int D> inline constexpr int kParts = D >= 256 ? 2 : 1;

template <typename T, int D> __host__ __device__ constexpr int stage_elems() {
  return 2 / kParts<D> * kTile * kv_row_elems<D>();
}
// Where K and V take separate stages, Q's rows [kMaxGroup][row_elems] (padded, unswizzled) sit after the stages
// (the kernel's reason).
template <int D> inline constexpr bool kQInSmem = kParts<D> == 2;
// The pipeline (and Q), later reused for the warps' merge: fp32 O [kWarps][kMaxGroup][D], then max and sum.
template <typename T, int D> __host__ __device__ constexpr int smem_bytes() {
  constexpr int q = kQInSmem<D> ? static_cast<int>(sizeof(T)) * kMaxGroup * row_elems<D>() : 0;
  constexpr int pipe = static_cast<int>(sizeof(T)) * stage_elems<T, D>() * kStages + q;
  constexpr int merge = static_cast<int>(sizeof(float)) * kWarps * kMaxGroup * (D + 2);
  return pipe > merge ? pipe : merge;
}
static_assert(smem_bytes<__nv_bfloat16, 256>() == 102528 && smem_bytes<__half, 128>() == 98304 &&
                  smem_bytes<__half, 64>() == 49152,
              "the stage arithmetic above");
// A stage, and the V half of a K+V stage, start on a 128-byte line and at a row that is a multiple of 8, as do a
// warp's rows (the swizzle's row % 8 is the same from each of these bases).
static_assert(kTile % 8 == 0 && kWarpTokens % 8 == 0, "bases at rows that are multiples of 8");
static_assert(stage_elems<__half, 64>() * 2 % 128 == 0 && stage_elems<__half, 128>() * 2 % 128 == 0 &&
                  stage_elems<__half, 256>() * 2 % 128 == 0,
              "stages of whole 128-byte lines");

// The cache rows of the tile positions this thread copies, read from the block table one tile before the
// copies are issued, so that the table load's latency is not paid in front of every tile's cp.async.
// Each warp copies the 16 positions it computes (lane l: chunk l % kChunks of positions warp * kWarpTokens +
// l / kChunks + i * kStep), so a warp waits for its own copies only: no block-wide barrier per tile.
template <int D> struct TileRows {
  static constexpr int kChunks = D / 8, kStep = 32 / kChunks, kN = kWarpTokens / kStep;
  static_assert(32 % kChunks == 0 && kWarpTokens % kStep == 0, "a warp's lanes tile its tokens' 16-byte chunks");
  int block[kN];  // the block-table entry (a load in flight until first used)
  int off[kN];    // the offset inside the block; -1: past the context (zero-filled, never read)

  __device__ __forceinline__ static int first_token() {
    return static_cast<int>(threadIdx.x) / 32 * kWarpTokens + static_cast<int>(threadIdx.x) % 32 / kChunks;
  }

  __device__ __forceinline__ void fetch(const int* table, int block_size, int len, int tile) {
    int pos = tile * kTile + first_token();
    int blk = pos / block_size, o = pos - blk * block_size;
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const bool live = pos < len;
      block[i] = live ? __ldg(table + blk) : 0;
      off[i] = live ? o : -1;
      pos += kStep;
      for (o += kStep; o >= block_size; o -= block_size) ++blk;
    }
  }

  // One cache's rows of the tile into `dst` (kTile swizzled rows of kv_row_elems<D>(), `kv_at`): this lane's chunk
  // of stage rows first_token() + i * kStep. The 8 lanes of a row's aligned 8 chunks write one 128-byte line.
  template <typename T>
  __device__ __forceinline__ void copy(T* dst, const T* base, int block_size, int64_t row_stride) const {
    const int chunk = static_cast<int>(threadIdx.x) % kChunks, t = first_token();
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const bool live = off[i] >= 0;
      const int64_t src = live ? ((int64_t)block[i] * block_size + off[i]) * row_stride + chunk * 8 : 0;
      vt_tiled::cp_async16(dst + kv_at<D>(t + i * kStep, chunk), base + src, live);
    }
  }
};

// The split combine, folded into the kernel: the last block of this (sequence, KV head) to arrive (after its
// partials are written) weighs each split's unnormalised O by exp2(max_s - max) / sum over the splits, in
// split order, writes the output and sets *done back to zero for the next launch.
template <typename T, int D>
__device__ __forceinline__ void fold_combine(const vt::PagedArgs& a, int b, int kvh, int group, int num_splits,
                                             const float* __restrict__ m_part, const float* __restrict__ l_part,
                                             const float* __restrict__ o_part, T* __restrict__ out, int* done,
                                             float* weights /* smem [kMaxGroup][kMaxSplits] */) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(done, 1) == num_splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t head0 = (int64_t)b * num_splits * a.num_q_heads + kvh * group;
  for (int g = warp; g < group; g += kWarps) {  // a warp per row: lanes over the splits (at most 64)
    float m0 = -CUDART_INF_F, m1 = -CUDART_INF_F, l0 = 0.f, l1 = 0.f;
    if (lane < num_splits) m0 = __ldcg(m_part + head0 + (int64_t)lane * a.num_q_heads + g);
    if (lane + 32 < num_splits) m1 = __ldcg(m_part + head0 + (int64_t)(lane + 32) * a.num_q_heads + g);
    if (lane < num_splits) l0 = __ldcg(l_part + head0 + (int64_t)lane * a.num_q_heads + g);
    if (lane + 32 < num_splits) l1 = __ldcg(l_part + head0 + (int64_t)(lane + 32) * a.num_q_heads + g);
    float mx = fmaxf(m0, m1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    const float w0 = m0 == -CUDART_INF_F ? 0.f : exp2f(m0 - mx), w1 = m1 == -CUDART_INF_F ? 0.f : exp2f(m1 - mx);
    const float sum = vt::warp_sum(l0 * w0 + l1 * w1);  // > 0: every context has a position in its window
    if (lane < num_splits) weights[g * kMaxSplits + lane] = w0 / sum;
    if (lane + 32 < num_splits) weights[g * kMaxSplits + lane + 32] = w1 / sum;
  }
  __syncthreads();
  constexpr int kPer = kMaxGroup * D / kThreads;
  const int n = group * D;
  float acc[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) acc[k] = 0.f;
  vt_tiled::add_split_rows<D>(o_part, head0, a.num_q_heads, num_splits, n, acc, [&](float sum, float v, int g, int s) {
    return sum + v * weights[g * kMaxSplits + s];
  });
  T* dst = out + ((int64_t)b * a.num_q_heads + kvh * group) * D;
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int idx = threadIdx.x + k * kThreads;
    if (idx < n) dst[idx] = vt::from_f32<T>(acc[k]);
  }
  if (threadIdx.x == 0) *done = 0;
}

// grid (num_kv_heads, num_splits, batch), kThreads threads, smem_bytes<T, D>() dynamic smem.
// num_splits == 1: out [batch, num_q_heads, D]. Else m_part, l_part [batch, num_splits, num_q_heads] fp32 (the
// split's max score in log2 units and sum of exp2(score - max); -inf and 0 if empty), o_part [batch,
// num_splits, num_q_heads, D] fp32 (sum of exp2(score - max) v), and counters: 2 int32 per (sequence, KV head),
// zero before the launch and left zero (the second is used).
template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    onepass_kernel(vt::PagedArgs a, int num_splits, T* __restrict__ out, float* __restrict__ m_part,
                   float* __restrict__ l_part, float* __restrict__ o_part, int* __restrict__ counters) {
  // 128-byte aligned, so the stages' swizzled rows start on lines (with 16 the base sat 16 bytes past one, after
  // fold_combine's 16 static bytes: ptxas -v counts 128 static bytes now)
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr int kRow = kv_row_elems<D>(), kQRow = row_elems<D>(), kStage = stage_elems<T, D>();
  const int kvh = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 4, quad = lane % 4;
  const int group = a.num_q_heads / a.num_kv_heads;
  const vt_tiled::Span sp = vt_tiled::split_span(a, b, split, num_splits);
  const bool row_live = row < group;
  T* smem = reinterpret_cast<T*>(smem_raw);

  const int* table = a.block_tables + (int64_t)b * a.max_blocks;
  const int64_t row_stride = (int64_t)a.num_kv_heads * D;
  const T* kbase = static_cast<const T*>(a.k_cache) + (int64_t)kvh * D;
  const T* vbase = static_cast<const T*>(a.v_cache) + (int64_t)kvh * D;
  // The pipeline's units: unit u is tile u / P's K and V (P = 1) or its K (u even) or V (u odd) (P = 2).
  constexpr int P = kParts<D>;
  const int units = sp.n * P;
  TileRows<D> rows;
  if (sp.n > 0) rows.fetch(table, a.block_size, sp.len, sp.t_lo);
  const auto issue = [&](int u) {  // unit u into stage u % kStages; after a tile's V, the next tile's rows
    T* st = smem + (u % kStages) * kStage;
    if (u % P == 0) rows.copy(st, kbase, a.block_size, row_stride);
    if (u % P == P - 1) {
      rows.copy(st + (P == 1 ? kTile * kRow : 0), vbase, a.block_size, row_stride);
      if (u / P + 1 < sp.n) rows.fetch(table, a.block_size, sp.len, sp.t_lo + u / P + 1);
    }
  };
#pragma unroll
  for (int u = 0; u < kStages - 1; ++u) {
    if (u < units) issue(u);
    vt_tiled::cp_async_commit();
  }
  // Wait for unit u (this warp's slice of it), then start unit u + kStages - 1 in the stage unit u - 1 used; the
  // __syncwarp: the warp's lanes are done with that stage and see each other's copies of unit u. The pointer is the
  // warp's first row, warp x 16: a multiple of 8, so `kv_at` of a row relative to it swizzles as the copy did.
  const auto land = [&](int u) -> const T* {
    vt_tiled::cp_async_wait<kStages - 2>();
    __syncwarp();
    if (u + kStages - 1 < units) issue(u + kStages - 1);
    vt_tiled::cp_async_commit();
    return smem + (u % kStages) * kStage + warp * kWarpTokens * kRow;
  };

  // Q as the A operand (rows past the group are zero), as the tiled scores pass loads it: in registers, or with
  // K and V in separate stages (head_dim 256) in shared memory after the stages, read back by ldmatrix two k steps
  // at a time (in registers its 32 a thread took the kernel to 255 registers and a spill: ptxas, sm_90).
  constexpr bool kQShared = kQInSmem<D>;
  T* qs = smem + kStages * kStage;  // [kMaxGroup][kQRow] where kQShared
  uint32_t qa[kQShared ? 1 : D / 16][2], qf[4];
  if constexpr (kQShared) {
    const T* q0 = static_cast<const T*>(a.q) + ((int64_t)b * a.num_q_heads + kvh * group) * D;
    for (int c = threadIdx.x; c < kMaxGroup * D / 8; c += kThreads) {
      const int g = c / (D / 8), col = c % (D / 8) * 8;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (g < group) v = *reinterpret_cast<const uint4*>(q0 + g * D + col);
      *reinterpret_cast<uint4*>(qs + g * kQRow + col) = v;
    }
    __syncthreads();
  } else {
    const int64_t q_head = (int64_t)b * a.num_q_heads + kvh * group + (row_live ? row : 0);
    const T* qrow = static_cast<const T*>(a.q) + q_head * D;
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      qa[k][0] = row_live ? *reinterpret_cast<const uint32_t*>(qrow + k * 16 + quad * 2) : 0u;
      qa[k][1] = row_live ? *reinterpret_cast<const uint32_t*>(qrow + k * 16 + 8 + quad * 2) : 0u;
    }
  }
  // ldmatrix x4 of Q's rows 0..7 at k steps k, k + 1: lanes 8j..8j+7 address matrix j (k step j / 2, columns
  // (j % 2) * 8), so the fragments are a0, a2 of step k, then of step k + 1.
  const T* q_frag = qs + (lane % 8) * kQRow + (lane / 8) * 8;
  const float scale2 = a.scale * kLog2e;
  const int k_tok = (lane % 8) + (lane / 16) * 8, k_dim = ((lane / 8) % 2) * 8;
  const int v_tok = (lane % 8) + ((lane / 8) % 2) * 8, v_dim = (lane / 16) * 8;
  float m = -CUDART_INF_F, l = 0.f, pad[2] = {0.f, 0.f};
  float o[D / 8][2];
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = 0.f;

  for (int i = 0; i < sp.n; ++i) {
    const T* ks = land(i * P);
    float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // tokens 0-7 and 8-15 of the warp: columns quad*2, quad*2+1
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t kb[4];
      vt_tiled::ldmatrix_x4(kb, ks + kv_at<D>(k_tok, 2 * k + k_dim / 8));  // columns k * 16 + k_dim
      uint32_t a0, a2;
      if constexpr (kQShared) {
        if (k % 2 == 0) vt_tiled::ldmatrix_x4(qf, q_frag + k * 16);
        a0 = qf[(k % 2) * 2], a2 = qf[(k % 2) * 2 + 1];
      } else {
        a0 = qa[k][0], a2 = qa[k][1];
      }
      vt_tiled::mma_rows8<T>(s[0][0], s[0][1], pad, a0, a2, kb[0], kb[1]);
      vt_tiled::mma_rows8<T>(s[1][0], s[1][1], pad, a0, a2, kb[2], kb[3]);
    }
    const int pos0 = (sp.t_lo + i) * kTile + warp * kWarpTokens + quad * 2;
    float x[4], mt = -CUDART_INF_F;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = pos0 + (e / 2) * 8 + e % 2;
      x[e] = pos >= sp.begin && pos < sp.len ? s[e / 2][e % 2] * scale2 : -CUDART_INF_F;
      mt = fmaxf(mt, x[e]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float m_new = fmaxf(m, mt);
    // branch-free (ldmatrix and mma.sync need the whole warp): a row with no position yet keeps O = 0, l = 0
    const float base = m_new == -CUDART_INF_F ? 0.f : m_new;
    const float alpha = exp2f(m - base);  // 0 while m is -inf (O and l are still 0)
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = exp2f(x[e] - base);
    l = l * alpha + ((p[0] + p[1]) + (p[2] + p[3]));
#pragma unroll
    for (int j = 0; j < D / 8; ++j) o[j][0] *= alpha, o[j][1] *= alpha;
    m = m_new;
    const uint32_t pa0 = vt_tiled::pack2<T>(p[0], p[1]), pa2 = vt_tiled::pack2<T>(p[2], p[3]);
    const T* vs = P == 1 ? ks + kTile * kRow : land(i * P + 1);
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      uint32_t vb[4];
      vt_tiled::ldmatrix_x4_trans(vb, vs + kv_at<D>(v_tok, 2 * j + v_dim / 8));  // columns j * 16 + v_dim
      vt_tiled::mma_rows8<T>(o[2 * j][0], o[2 * j][1], pad, pa0, pa2, vb[0], vb[1]);
      vt_tiled::mma_rows8<T>(o[2 * j + 1][0], o[2 * j + 1][1], pad, pa0, pa2, vb[2], vb[3]);
    }
  }
  vt_tiled::cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory is free for the merge

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* os = reinterpret_cast<float*>(smem_raw);  // [kWarps][kMaxGroup][D]
  float* ms = os + kWarps * kMaxGroup * D;         // [kWarps][kMaxGroup]
  float* ls = ms + kWarps * kMaxGroup;             // [kWarps][kMaxGroup]
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    os[(warp * kMaxGroup + row) * D + j * 8 + quad * 2] = o[j][0];
    os[(warp * kMaxGroup + row) * D + j * 8 + quad * 2 + 1] = o[j][1];
  }
  if (quad == 0) {
    ms[warp * kMaxGroup + row] = m;
    ls[warp * kMaxGroup + row] = l;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float mx = -CUDART_INF_F;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, ms[w * kMaxGroup + g]);
    float val = 0.f, sum = 0.f;
    if (mx != -CUDART_INF_F) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float mw = ms[w * kMaxGroup + g];
        const float wt = mw == -CUDART_INF_F ? 0.f : exp2f(mw - mx);
        val += os[(w * kMaxGroup + g) * D + d] * wt;
        sum += ls[w * kMaxGroup + g] * wt;
      }
    }
    const int64_t qh = (int64_t)b * a.num_q_heads + kvh * group + g;
    if (num_splits == 1) {
      out[qh * D + d] = vt::from_f32<T>(val / sum);
    } else {
      const int64_t part = ((int64_t)b * num_splits + split) * a.num_q_heads + kvh * group + g;
      o_part[part * D + d] = val;
      if (d == 0) m_part[part] = mx, l_part[part] = sum;
    }
  }
  if (num_splits == 1) return;
  // (fold_combine's first barrier orders the merge's reads before its weights overwrite shared memory)
  fold_combine<T, D>(a, b, kvh, group, num_splits, m_part, l_part, o_part, out,
                     counters + 2 * ((int64_t)b * a.num_kv_heads + kvh) + 1, reinterpret_cast<float*>(smem_raw));
}

// Splits for `rows` = batch * num_kv_heads blocks over `slots` = SMs * resident blocks per SM, by a cost in
// tile times: the waves a launch runs times the tiles per split, plus a quarter tile per split for its partial
// write and its share of the combine. It picks the measured best count at the six peer shapes (H200; e.g.
// batch 1, context 32768: 32 splits, 58.4 us against 64.0 at the 30 a wave-fill rule picks).
constexpr float kSplitCost = 0.25f;
inline int onepass_num_splits(int rows, int max_context, int sm_count, int blocks_per_sm) {
  if (rows <= 0 || max_context <= 0 || sm_count <= 0) return 1;
  const long long slots = (long long)sm_count * (blocks_per_sm > 0 ? blocks_per_sm : 1);
  const int tiles = vt::ceil_div(max_context, kTile);
  const int limit = tiles < kMaxSplits ? tiles : kMaxSplits;
  int best = 1;
  float best_cost = 0.f;
  for (int s = 1; s <= limit; ++s) {
    const long long waves = ((long long)rows * s + slots - 1) / slots;
    const float cost = static_cast<float>(waves * vt::ceil_div(tiles, s)) + kSplitCost * s;
    if (s == 1 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

}  // namespace vt_onepass
