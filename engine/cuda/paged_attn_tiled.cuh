// Tiled paged decode attention on tensor cores. One block per (KV head, split, sequence): the K/V
// rows of the block's positions stream through a cp.async pipeline of tile<D>()-token stages in shared
// memory, and every query head of the KV head's group is one row of a 16-row mma.sync tile, so each
// K/V byte is read from global memory once for the whole group.
//
// Per stage each warp owns kWarpTokens consecutive tokens: S = Q K^T (m16n8k16, rows = query heads,
// rows >= group are zero), scores rounded as the eager reference rounds them (T(T(q.k) * scale)),
// an online softmax per row, then O += P V with P packed to T. The warps' states merge in shared
// memory at the end; one split writes the final output, several write fp32 partials and their
// log-sum-exp for splitkv_combine_kernel.
#pragma once

#include <cstdint>

#include "paged_attn.cuh"

namespace vt_tiled {

constexpr int kWarpTokens = 16;              // tokens per warp per stage: one P.V mma's k extent
constexpr int kMaxGroup = 8;                 // query heads per KV head: rows 0..7 of the m16 tile
constexpr int kRowPad = 8;                   // elements after each smem row: ldmatrix rows hit distinct banks
constexpr int kMaxSplits = 64;               // splitkv_combine_kernel keeps its weights in smem
constexpr int kMinTilesPerSplit = 4;         // shorter splits cost more in partial writes than they hide
constexpr float kLog2e = 1.4426950408889634f;

// Warps per block (each owns kWarpTokens tokens of a stage) and stages. Shared memory bounds the blocks
// per SM: two stages (one tile in flight while one is computed) let three head_dim-128 blocks fit an
// SM (ncu: at three stages two fit, and their eight warps left the issue slots idle on dependency
// stalls); head_dim 256 rows are twice as wide, so three warps (48-token tiles) let two blocks fit
// where four warps let one. The narrow head_dim 64 rows keep three stages.
template <int D> __host__ __device__ constexpr int warps() { return D >= 256 ? 3 : 4; }
template <int D> __host__ __device__ constexpr int threads() { return warps<D>() * 32; }
template <int D> __host__ __device__ constexpr int tile() { return warps<D>() * kWarpTokens; }
template <int D> __host__ __device__ constexpr int stages() { return D <= 64 ? 3 : 2; }
template <int D> __host__ __device__ constexpr int row_elems() { return D + kRowPad; }
template <typename T, int D> constexpr int smem_bytes() {
  constexpr int pipe = static_cast<int>(sizeof(T)) * 2 * tile<D>() * row_elems<D>() * stages<D>();
  constexpr int merge = static_cast<int>(sizeof(float)) * warps<D>() * kMaxGroup * (D + 2);
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

// grid (num_kv_heads, num_splits, batch), threads<D>() threads, smem_bytes<T, D>() dynamic shared memory.
// Split s covers tile-aligned tiles [first + s*per, first + (s+1)*per) of the window [begin, len).
// num_splits == 1: out [batch, num_q_heads, D] in T. Else o_part [batch, num_splits, num_q_heads, D]
// fp32 (normalized) and lse [batch, num_splits, num_q_heads] (-inf and zeros for an empty split).
template <typename T, int D>
__global__ void __launch_bounds__(threads<D>())
    tiled_decode_kernel(vt::PagedArgs a, int num_splits, T* __restrict__ out, float* __restrict__ o_part,
                        float* __restrict__ lse_part) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  constexpr int S = stages<D>(), R = row_elems<D>(), kChunks = D / 8;
  constexpr int kWarps = warps<D>(), kThreads = threads<D>(), kTile = tile<D>();
  const int kvh = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, row = lane / 4, quad = lane % 4;
  const int group = a.num_q_heads / a.num_kv_heads;
  const int len = a.context_lens[b];
  const int begin = vt::window_begin(len, a.window);
  const int first = begin / kTile, n_all = vt::ceil_div(len, kTile) - first;
  const int per = vt::ceil_div(n_all, num_splits);
  const int t_lo = first + split * per;
  const int n = max(0, min(per, n_all - split * per));

  const int* table = a.block_tables + (int64_t)b * a.max_blocks;
  const int64_t row_stride = (int64_t)a.num_kv_heads * D;
  const T* kbase = static_cast<const T*>(a.k_cache) + (int64_t)kvh * D;
  const T* vbase = static_cast<const T*>(a.v_cache) + (int64_t)kvh * D;
  // Thread tid copies chunk tid % kChunks of tokens tid / kChunks + i * kStep of a tile: the block
  // index and offset advance by kStep per token, so only the first token of a tile pays a division.
  constexpr int kStep = kThreads / kChunks;
  const int my_chunk = threadIdx.x % kChunks, my_tok = threadIdx.x / kChunks;
  auto load_tile = [&](int tile, int stage) {
    T* ks = smem + (size_t)stage * 2 * kTile * R + my_tok * R + my_chunk * 8;
    T* vs = ks + kTile * R;
    int pos = tile * kTile + my_tok, blk = pos / a.block_size, off = pos - blk * a.block_size;
#pragma unroll
    for (int i = 0; i < kTile / kStep; ++i) {
      const bool live = pos < len;  // pos >= 0: tiles start at or after position 0
      const int64_t src = live ? ((int64_t)table[blk] * a.block_size + off) * row_stride + my_chunk * 8 : 0;
      cp_async16(ks + i * kStep * R, kbase + src, live);
      cp_async16(vs + i * kStep * R, vbase + src, live);
      pos += kStep;
      for (off += kStep; off >= a.block_size; off -= a.block_size) ++blk;
    }
  };

  // Q as the A operand: this lane's row (query head kvh*group + row) at columns quad*2 and quad*2+8
  // of each 16-wide k step; rows past the group stay zero.
  const bool row_live = row < group;
  const T* qrow = static_cast<const T*>(a.q) + ((int64_t)b * a.num_q_heads + kvh * group + (row_live ? row : 0)) * D;
  uint32_t qa[D / 16][2];
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    qa[k][0] = row_live ? *reinterpret_cast<const uint32_t*>(qrow + k * 16 + quad * 2) : 0u;
    qa[k][1] = row_live ? *reinterpret_cast<const uint32_t*>(qrow + k * 16 + 8 + quad * 2) : 0u;
  }

  float m = -CUDART_INF_F, l = 0.f, o[D / 8][2], pad[2] = {0.f, 0.f};
#pragma unroll
  for (int j = 0; j < D / 8; ++j) o[j][0] = o[j][1] = 0.f;

  // ldmatrix lane addresses. K (S = Q K^T, B operand k = dims, n = tokens): matrices (tokens 0-7,
  // dims 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15). V (O += P V, transposed loads, k = tokens,
  // n = dims): (tokens 0-7, dims 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
  const int k_tok = (lane % 8) + (lane / 16) * 8, k_dim = ((lane / 8) % 2) * 8;
  const int v_tok = (lane % 8) + ((lane / 8) % 2) * 8, v_dim = (lane / 16) * 8;

#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < n) load_tile(t_lo + i, i);
    cp_async_commit();
  }
  for (int i = 0; i < n; ++i) {
    cp_async_wait<S - 2>();
    __syncthreads();  // tile i is visible to all warps, and every warp is done with stage (i - 1) % S
    if (i + S - 1 < n) load_tile(t_lo + i + S - 1, (i + S - 1) % S);
    cp_async_commit();

    const T* ks = smem + (size_t)(i % S) * 2 * kTile * R + warp * kWarpTokens * R;
    const T* vs = ks + kTile * R;
    float s[2][2] = {{0.f, 0.f}, {0.f, 0.f}};  // token tiles 0-7 and 8-15: columns quad*2, quad*2+1
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t kb[4];
      ldmatrix_x4(kb, ks + k_tok * R + k * 16 + k_dim);
      mma_rows8<T>(s[0][0], s[0][1], pad, qa[k][0], qa[k][1], kb[0], kb[1]);
      mma_rows8<T>(s[1][0], s[1][1], pad, qa[k][0], qa[k][1], kb[2], kb[3]);
    }
    const int pos0 = (t_lo + i) * kTile + warp * kWarpTokens + quad * 2;
    float x[4], mt = -CUDART_INF_F;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int pos = pos0 + (e / 2) * 8 + e % 2;
      const float v = vt::round_to<T>(vt::round_to<T>(s[e / 2][e % 2]) * a.scale);
      x[e] = (pos >= begin && pos < len) ? v : -CUDART_INF_F;
      mt = fmaxf(mt, x[e]);
    }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float m_new = fmaxf(m, mt);
    const float base = m_new == -CUDART_INF_F ? 0.f : m_new;  // a fully masked row keeps p = 0
    const float corr = m == -CUDART_INF_F ? 0.f : exp2f((m - base) * kLog2e);
    float p[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) p[e] = exp2f((x[e] - base) * kLog2e);
    l = l * corr + (p[0] + p[1]) + (p[2] + p[3]);
    m = m_new;
    const uint32_t pa0 = pack2<T>(p[0], p[1]), pa2 = pack2<T>(p[2], p[3]);
#pragma unroll
    for (int j = 0; j < D / 16; ++j) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, vs + v_tok * R + j * 16 + v_dim);
      o[2 * j][0] *= corr;
      o[2 * j][1] *= corr;
      o[2 * j + 1][0] *= corr;
      o[2 * j + 1][1] *= corr;
      mma_rows8<T>(o[2 * j][0], o[2 * j][1], pad, pa0, pa2, vb[0], vb[1]);
      mma_rows8<T>(o[2 * j + 1][0], o[2 * j + 1][1], pad, pa0, pa2, vb[2], vb[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the merge area

  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  float* ms = reinterpret_cast<float*>(smem_raw);  // [kWarps][kMaxGroup]
  float* ls = ms + kWarps * kMaxGroup;             // [kWarps][kMaxGroup]
  float* os = ls + kWarps * kMaxGroup;             // [kWarps][kMaxGroup][D]
  if (quad == 0) {
    ms[warp * kMaxGroup + row] = m;
    ls[warp * kMaxGroup + row] = l;
  }
#pragma unroll
  for (int j = 0; j < D / 8; ++j) {
    os[(warp * kMaxGroup + row) * D + j * 8 + quad * 2] = o[j][0];
    os[(warp * kMaxGroup + row) * D + j * 8 + quad * 2 + 1] = o[j][1];
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float mx = -CUDART_INF_F;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, ms[w * kMaxGroup + g]);
    float val = 0.f, lse = -CUDART_INF_F;
    if (mx != -CUDART_INF_F) {
      float lt = 0.f, acc = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float c = exp2f((ms[w * kMaxGroup + g] - mx) * kLog2e);
        lt += ls[w * kMaxGroup + g] * c;
        acc += os[(w * kMaxGroup + g) * D + d] * c;
      }
      val = acc / lt;
      lse = mx + logf(lt);
    }
    const int64_t qh = (int64_t)b * a.num_q_heads + kvh * group + g;
    if (num_splits == 1) {
      out[qh * D + d] = vt::from_f32<T>(val);
    } else {
      const int64_t prow = ((int64_t)b * num_splits + split) * a.num_q_heads + kvh * group + g;
      o_part[prow * D + d] = val;
      if (d == 0) lse_part[prow] = lse;
    }
  }
}

// Splits for `rows` = batch * num_kv_heads blocks over `slots` = SMs * resident blocks per SM. Blocks
// of a launch do equal work, so the last wave's fill decides the efficiency: the fewest splits whose
// waves are at least kMinWaveFill full, none shorter than kMinTilesPerSplit tiles of the longest
// possible context (else the best-filled count within that bound); in [1, kMaxSplits].
constexpr float kMinWaveFill = 0.9f;
inline int tiled_num_splits(int rows, int max_context, int tile_tokens, int sm_count, int blocks_per_sm) {
  if (rows <= 0 || max_context <= 0 || sm_count <= 0) return 1;
  const float slots = static_cast<float>(sm_count * (blocks_per_sm > 0 ? blocks_per_sm : 1));
  int limit = vt::ceil_div(vt::ceil_div(max_context, tile_tokens), kMinTilesPerSplit);
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
