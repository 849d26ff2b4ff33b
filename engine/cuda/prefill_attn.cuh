// Varlen prefill/extend attention on tensor cores: each sequence's new tokens (causal within the chunk)
// against its cached prefix, read through the block table (or, for a plain prefill, from contiguous K/V).
//
// Grid (tiles, Hq): block x owns one 64-row query tile of one sequence, found on the device by a scan of
// seq_lens (x runs over ceil(tokens / 64) + num_seqs, an upper bound on the tiles; the spare blocks exit),
// so no length is read on the host. Each of the 4 warps owns 16 query rows: one m16n8k16 mma.sync row
// tile. Two passes over the keys, so that probabilities are rounded where the eager reference rounds
// them (engine/ops/paged_attn.py): pass 1 S = Q K^T, each score T(T(q.k) * scale), the row max and sum of
// exp(s - max); pass 2 recomputes S, p = T(exp(s - max) / sum), O += P V in fp32, O rounded to T once.
#pragma once

#include <cstdint>

#include "common.cuh"

namespace vt_prefill {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;                // query rows per warp: one mma row tile
constexpr int kBlockM = kWarps * kRows;  // query rows per block
constexpr int kRowPad = 8;               // elements after each smem row: the fragment loads hit distinct banks

// keys per tile: 64 up to head_dim 128; 32 at 256, where the O accumulator takes 128 registers per thread
template <int D> __host__ __device__ constexpr int block_n() { return D >= 256 ? 32 : 64; }
template <int D> __host__ __device__ constexpr int row_elems() { return D + kRowPad; }
template <typename T, int D> constexpr int smem_bytes() {
  return static_cast<int>(sizeof(T)) * row_elems<D>() * (kBlockM + 2 * block_n<D>());
}

struct Args {
  const void* q;            // [tokens, Hq, D], rows q_stride elements apart
  const void* k;            // paged: [num_blocks, block_size, Hkv, D]; contiguous: [tokens, Hkv, D]
  const void* v;            // as k
  void* out;                // [tokens, Hq, D] contiguous
  const int* block_tables;  // [num_seqs, max_blocks], or null: k/v are the new tokens' own rows
  const int* seq_lens;      // [num_seqs] new tokens per sequence
  const int* prefix_lens;   // [num_seqs] cached tokens before them (null: all 0)
  int64_t q_stride;         // elements between query tokens
  int num_seqs, num_q_heads, num_kv_heads, block_size, max_blocks, window;  // window 0: none
  float scale;
};

template <typename T> __device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                               uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
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
__device__ __forceinline__ uint32_t pack_bits(uint16_t lo, uint16_t hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// The reference's score: T(T(acc) * scale), as fp32.
template <typename T> __device__ __forceinline__ float round_score(float acc, float scale) {
  return vt::to_f32<T>(vt::from_f32<T>(vt::to_f32<T>(vt::from_f32<T>(acc)) * scale));
}

// Which query tile this block owns: (sequence, tile within it, first packed token of the sequence);
// seq = -1 when the block is past the last tile. A block-wide scan of the tiles and tokens per sequence.
struct Tile {
  int seq, tile, q_begin;
};

__device__ __forceinline__ int warp_inclusive_sum(int x) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  return x;
}

__device__ __forceinline__ Tile find_tile(const int* seq_lens, int num_seqs) {
  __shared__ int s_tiles[kWarps], s_toks[kWarps];
  __shared__ Tile s_found;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, me = blockIdx.x;
  if (tid == 0) s_found = {-1, 0, 0};
  int tile_base = 0, tok_base = 0;
  for (int c = 0; c < num_seqs; c += kThreads) {
    const int s = c + tid;
    const int len = s < num_seqs ? seq_lens[s] : 0;
    const int tiles = vt::ceil_div(len, kBlockM);
    const int t_inc = warp_inclusive_sum(tiles), l_inc = warp_inclusive_sum(len);
    if (lane == 31) s_tiles[warp] = t_inc, s_toks[warp] = l_inc;
    __syncthreads();
    int t_off = 0, l_off = 0, t_all = 0, l_all = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) t_off += s_tiles[w], l_off += s_toks[w];
      t_all += s_tiles[w], l_all += s_toks[w];
    }
    const int first = tile_base + t_off + t_inc - tiles;
    if (s < num_seqs && me >= first && me < first + tiles) s_found = {s, me - first, tok_base + l_off + l_inc - len};
    tile_base += t_all, tok_base += l_all;
    __syncthreads();
  }
  __syncthreads();  // num_seqs == 0: thread 0's initial value
  return s_found;
}

// Copy keys [k0, k0 + BN) of one cache into smem rows (zeros past `end`): 16-byte chunks, plain loads.
template <typename T, int D, int BN>
__device__ __forceinline__ void load_keys(T* dst, const T* base, const int* table, int block_size, int64_t tok_stride,
                                          int64_t seq_tok0, int k0, int end) {
  constexpr int kChunks = D / 8, R = row_elems<D>();
  for (int i = threadIdx.x; i < BN * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks, pos = k0 + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (pos < end) {
      const int64_t slot = table ? (int64_t)table[pos / block_size] * block_size + pos % block_size : seq_tok0 + pos;
      val = *reinterpret_cast<const uint4*>(base + slot * tok_stride + c * 8);
    }
    *reinterpret_cast<uint4*>(dst + r * R + c * 8) = val;
  }
}

// S (16 x BN per warp) = Q K^T for the warp's rows, every score rounded and masked (-inf outside).
template <typename T, int D, int BN>
__device__ __forceinline__ void scores(float (&s)[BN / 8][4], const T* sq, const T* sk, int k0, int row_pos0,
                                       int begin, int end, int window, float scale) {
  constexpr int R = row_elems<D>();
  const int lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];
    const T* qa = sq + g * R + kk * 16 + c2;
    a[0] = *reinterpret_cast<const uint32_t*>(qa);
    a[1] = *reinterpret_cast<const uint32_t*>(qa + 8 * R);
    a[2] = *reinterpret_cast<const uint32_t*>(qa + 8);
    a[3] = *reinterpret_cast<const uint32_t*>(qa + 8 * R + 8);
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
      const T* kb = sk + (n * 8 + g) * R + kk * 16 + c2;
      mma16816<T>(s[n], a, *reinterpret_cast<const uint32_t*>(kb), *reinterpret_cast<const uint32_t*>(kb + 8));
    }
  }
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int qpos = row_pos0 + g + (e >> 1) * 8, kpos = k0 + n * 8 + c2 + (e & 1);
      const bool ok = kpos >= begin && kpos < end && kpos <= qpos && (window == 0 || qpos - kpos < window);
      s[n][e] = ok ? round_score<T>(s[n][e], scale) : -INFINITY;
    }
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) prefill_attn_kernel(Args a) {
  constexpr int BN = block_n<D>(), R = row_elems<D>();
  const Tile t = find_tile(a.seq_lens, a.num_seqs);
  if (t.seq < 0) return;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sq = reinterpret_cast<T*>(smem_raw);
  T* sk = sq + kBlockM * R;
  T* sv = sk + BN * R;

  const int h = blockIdx.y, group = a.num_q_heads / a.num_kv_heads, kvh = h / group;
  const int len = a.seq_lens[t.seq], prefix = a.prefix_lens ? a.prefix_lens[t.seq] : 0;
  const int m0 = t.tile * kBlockM, rows = min(kBlockM, len - m0);  // the block's query rows [m0, m0 + rows)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c2 = (lane & 3) * 2;
  const int end = prefix + m0 + rows;  // keys [begin, end) cover every row's causal span
  const int begin = a.window > 0 ? max(0, prefix + m0 - a.window + 1) : 0;
  const int* table = a.block_tables ? a.block_tables + (int64_t)t.seq * a.max_blocks : nullptr;
  const int64_t kv_tok_stride = (int64_t)a.num_kv_heads * D;
  const T* kbase = static_cast<const T*>(a.k) + (int64_t)kvh * D;
  const T* vbase = static_cast<const T*>(a.v) + (int64_t)kvh * D;
  const int64_t seq_tok0 = t.q_begin;  // contiguous k/v: the sequence's first row

  // Q tile into smem (zeros past the sequence's rows)
  {
    constexpr int kChunks = D / 8;
    const T* qbase = static_cast<const T*>(a.q) + (int64_t)h * D;
    for (int i = threadIdx.x; i < kBlockM * kChunks; i += kThreads) {
      const int r = i / kChunks, c = i % kChunks;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < rows) val = *reinterpret_cast<const uint4*>(qbase + (t.q_begin + m0 + r) * a.q_stride + c * 8);
      *reinterpret_cast<uint4*>(sq + r * R + c * 8) = val;
    }
  }
  const T* wq = sq + warp * kRows * R;
  const int row_pos0 = prefix + m0 + warp * kRows;  // position of the warp's row 0
  const int k_first = (begin / BN) * BN;

  // pass 1: row max and sum of exp over the rounded scores (rows g and g + 8 of the warp)
  float mx[2] = {-INFINITY, -INFINITY}, sum[2] = {0.f, 0.f};
  for (int k0 = k_first; k0 < end; k0 += BN) {
    __syncthreads();
    load_keys<T, D, BN>(sk, kbase, table, a.block_size, kv_tok_stride, seq_tok0, k0, end);
    __syncthreads();
    float s[BN / 8][4];
    scores<T, D, BN>(s, wq, sk, k0, row_pos0, begin, end, a.window, a.scale);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tmax = -INFINITY;
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) tmax = fmaxf(tmax, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 2));
      const float nm = fmaxf(mx[r], tmax);
      const float base = nm == -INFINITY ? 0.f : nm;  // nothing visible to the row yet: every term is 0
      float part = 0.f;
#pragma unroll
      for (int n = 0; n < BN / 8; ++n) part += expf(s[n][2 * r] - base) + expf(s[n][2 * r + 1] - base);
      part += __shfl_xor_sync(0xffffffffu, part, 1);
      part += __shfl_xor_sync(0xffffffffu, part, 2);
      sum[r] = sum[r] * expf(mx[r] - base) + part;  // mx = -inf: the old sum (0) drops out
      mx[r] = nm;
    }
  }
  float den[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) den[r] = sum[r] > 0.f ? sum[r] : 1.f;

  // pass 2: p = T(exp(s - max) / sum), O += P V
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  for (int k0 = k_first; k0 < end; k0 += BN) {
    __syncthreads();
    load_keys<T, D, BN>(sk, kbase, table, a.block_size, kv_tok_stride, seq_tok0, k0, end);
    load_keys<T, D, BN>(sv, vbase, table, a.block_size, kv_tok_stride, seq_tok0, k0, end);
    __syncthreads();
    float s[BN / 8][4];
    scores<T, D, BN>(s, wq, sk, k0, row_pos0, begin, end, a.window, a.scale);
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      // P (16 x 16 keys) as the A fragment: the accumulators of key groups 2kc and 2kc + 1
      uint32_t p[4];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const float* lo = s[2 * kc + half];
        p[2 * half] = pack2<T>(lo[0] == -INFINITY ? 0.f : expf(lo[0] - mx[0]) / den[0],
                               lo[1] == -INFINITY ? 0.f : expf(lo[1] - mx[0]) / den[0]);
        p[2 * half + 1] = pack2<T>(lo[2] == -INFINITY ? 0.f : expf(lo[2] - mx[1]) / den[1],
                                   lo[3] == -INFINITY ? 0.f : expf(lo[3] - mx[1]) / den[1]);
      }
      const uint32_t a[4] = {p[0], p[1], p[2], p[3]};
      const uint16_t* vb = reinterpret_cast<const uint16_t*>(sv) + (kc * 16 + c2) * R + g;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        const uint16_t* col = vb + n * 8;
        const uint32_t b0 = pack_bits(col[0], col[R]), b1 = pack_bits(col[8 * R], col[9 * R]);
        mma16816<T>(o[n], a, b0, b1);
      }
    }
  }
  // rows g and g + 8 of the warp; columns n * 8 + c2, + 1
  T* obase = static_cast<T*>(a.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp * kRows + g + r * 8;
    if (row >= rows) continue;
    T* orow = obase + ((int64_t)(t.q_begin + m0 + row) * a.num_q_heads + h) * D + c2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(orow + n * 8) = pack2<T>(o[n][2 * r], o[n][2 * r + 1]);
    }
  }
}

}  // namespace vt_prefill
