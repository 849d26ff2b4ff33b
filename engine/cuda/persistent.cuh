// The persistent decode layer: one launch of SM-count blocks runs a Qwen3 layer's task table
// (engine/cuda/persistent_schedule.py `Schedule.encode`) in queue order. Each block takes the next task from a global
// atomic head, asks L2 for the task's weights (prefetch_weights), takes its following task (and prefetches that
// one's weights, so they stream while this task waits and runs), waits (thread 0 spinning on acquire loads with
// __nanosleep backoff) until the task's counters reach their targets, runs the task with all 256 threads, and
// signals its counter with a release (the block's barrier, then thread 0's red.release: no round trip to wait on).
// No grid barrier and no cooperative launch: a task is only taken after every task before it in the queue was
// taken, and the table queues every producer before its consumers (its static check: lab/persistent/check.py). So a
// waiting task waits on earlier tasks only, each running or held behind a block's current task, which is earlier
// still: every chain of waits ends at a task that can run.
//
// Every kind of the table runs: QKV (the input's norm staged, then q/k/v columns), SCORES (q/k norm and RoPE of
// its sequence's group, q.k over a split of the keys; the split holding the newest key stores K and V into the paged
// cache), ATTN_OUT (softmax and P.V), O_PROJ (+ residual), GATE_UP (the residual's norm staged, SiLU * up) and DOWN
// (+ residual); and a whole step's ends: EMBED (a token's embedding row), FINAL_NORM (the model's norm) and HEAD
// (LM-head columns: the logits). A row's `layer` column picks the layer's descriptors: one launch runs one layer (the
// kernel table's arm) or every layer of a step (persistent_schedule.build_step / build_model_step). A block meeting
// an unknown kind records it in the error word and signals anyway (so nothing hangs).
//
// Numerics against today's chain:
// - the norms (a GEMV tile's staged rows, FINAL_NORM) are the norm kernel's operations in its order (each thread's
//   elements t, t + 256, ..., vt_norm::block_sum's tree, rms_scale, scale_and_weight; the add rounded to T first):
//   bit-equal to rms_norm / fused_add_rms_norm, as the chain's GEMV prologue.
// - a GEMV column is summed as the GEMV's fast path at split 1 (each lane's 16-byte chunks in order, fma in element
//   order, then the warp butterfly). The chain's GEMV splits K over two warps where its grid is short of warps
//   (kSplitBelowWarpsPerSm) and at b > 8 the chain takes cuBLAS or the small GEMM: there the order differs, a
//   numerics the razor judges (bf16 GEMV tolerance, not bits).
// - q/k norm and RoPE are vt_rope::norm_rope_row per head row (the fused qkv_norm_rope_store kernel's and
//   qk_norm_rope's function, one warp per row), the cache getting k_rot's bits and v copied: bit-equal to the chain.
// - SCORES and ATTN_OUT round where the generic paged-attention kernel does (vt::decode_generic_kernel: T(T(q.k) *
//   scale); the block max and sum of exp; p = T(exp(s - max) / sum); P.V in fp32, rounded once) but sum q.k and P.V
//   in their own order (16-byte lanes, several keys in flight; see each): the eager reference's rounding points in
//   another summation order, as the chain's default arm (the tiled mma kernels): held to the chain within the dtype's
//   tolerance. The logits stay logits: every P.V slice of a (seq, kv) reads them all for its softmax.
// - O_PROJ rounds the product to T and adds the residual in fp32 rounded to T (fused_add_rms_norm's sum); GATE_UP
//   rounds gate and up to T and applies vt_act::silu_mul (the GLU GEMV's epilogue); DOWN rounds the product to T
//   (the layer's output) and writes its sum with res2 (the next layer's residual) the same way.
// Activations written in this launch are read with ld.global.cg (L2): L1 is not coherent across SMs, and a line
// may hold cells that another SM wrote after this SM cached it. Weights (constant) stream with ld.global.nc.
#pragma once
#include "act.cuh"
#include "common.cuh"
#include "gemv.cuh"
#include "norm.cuh"
#include "paged_attn.cuh"
#include "rope.cuh"

namespace vt_persistent {

constexpr int kThreads = vt_norm::kThreadsPerBlock;  // 256: the norm's block_sum tree needs exactly this
constexpr int kWarps = kThreads / 32;
constexpr int kRowWidth = 11;  // kind, layer, 4 args, (counter, target) x 2, signal (Schedule.encode)
constexpr int kMaxWaits = 2;
constexpr int kTraceWidth = 5;  // a traced task: SM, taken, waits met, input staged, signalled (ns)
constexpr int kRowsPerPass = 8;  // rows of x staged in shared memory per pass of a GEMV tile (b32: 4 passes)
constexpr int kUnroll = vt_gemv::kUnroll;  // W chunks in flight per lane
constexpr int kAhead = 2;  // of them, a GEMV warp's next column's first chunks, loaded while this column is summed
static_assert(kAhead <= kUnroll, "the chunks loaded ahead are the first of a batch");
constexpr int kVec = 8;  // 16 bytes of a 2-byte type
constexpr int kKvUnroll = 4;  // K or V rows a lane has in flight at once, 16 bytes of each
constexpr int kPvHeads = 4;  // heads of a group one P.V pass accumulates (8 floats a head a lane)
constexpr int kPvChunk = 1024;  // keys whose probabilities a P.V pass holds in shared memory at once
constexpr int kTableInts = kPvChunk + 4;  // a chunk's block-table entries, padded to 16 bytes
constexpr unsigned kMaxSleepNs = 128;  // a wait's poll back-off, at most (it starts at 32 ns)
constexpr long long kWaitLimitNs = 2000000000LL;  // a wait this long is a broken table: record it and go on
// control: [error, head], then the counters. The launcher zeroes the head and the counters and leaves the error
// word, so a caller that keeps one control block across launches (a decode step's) reads every launch's first error.
constexpr int kControlWords = 2;
// A step's layers in one launch: their descriptors travel as one __grid_constant__ kernel parameter (64 x 344 bytes
// and the model's ends, under the 32764 bytes CUDA 12.1+ allows on sm_70+), read in place, never copied per thread.
constexpr int kMaxLayers = 64;

enum Kind : int { kQkv = 0, kScores = 1, kAttnOut = 2, kOProj = 3, kGateUp = 4, kDown = 5, kEmbed = 6,
                  kFinalNorm = 7, kHead = 8 };

// Error word: 0, or the first failure: kErrKind + kind (a kind this kernel does not run, or a model kind in a launch
// without the model's tensors), kErrWait + task (a wait that timed out), kErrLayer + task (a layer index outside the
// launch's layers), kErrToken + row (a token id outside the vocabulary: its x row is zeros).
constexpr int kErrKind = 1 << 20, kErrWait = 2 << 20, kErrLayer = 3 << 20, kErrToken = 4 << 20;

// One layer's buffers, [batch, width] contiguous (rows of x, residual, res1, res2, mlp, out: hidden; q:
// q_dim; k, v: kv_dim; attn: q_dim; act: inter) and weights, row-major [out, in] contiguous.
template <typename T>
struct Layer {
  const T* x;
  const T* residual;  // null: layer 0 of the model (res1 = x)
  T* res1;  // x + residual: written by the layer's first q/k/v tile, added by o_proj
  T* q;
  T* k;
  T* v;
  T* attn;  // written by ATTN_OUT (an input when a caller runs only the back of the table)
  T* res2;
  T* act;
  T* mlp;
  T* out;
  const T* ln1;
  const T* ln2;
  const T* wq;
  const T* wk;
  const T* wv;
  const T* wo;
  const T* wg;
  const T* wu;
  const T* wd;
  T* q_rot;  // [batch, q_dim]: q after q_norm and RoPE
  T* k_rot;  // [batch, kv_dim]: k after k_norm and RoPE (also written to the cache)
  T* k_cache;  // [blocks, block_size, kv_heads, head_dim]
  T* v_cache;
  const long long* slots;  // [batch]: this token's cache slot (-1: no cache write)
  const T* cos;  // [batch, head_dim]
  const T* sin;
  const T* q_norm;  // [head_dim]
  const T* k_norm;
  const int* block_tables;  // [batch, max_blocks]
  const int* context_lens;  // [batch], this step's token included
  float* scores;  // [batch * heads, ld_scores] fp32 scratch: the logits (exact in T), then the probabilities in place
  int batch, hidden, q_dim, kv_dim, inter, heads, kv_heads, head_dim;
  int block_size, max_blocks, ld_scores, window;  // window 0: the full context
  float mean_scale, q_mean_scale, k_mean_scale, eps;  // the norm and rope kernels' (binding: rows / numel as float)
  float scale;  // the attention's softmax scale
};

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread 0, once the block's barrier has ordered every thread's writes before it: add one to the counter with release
// semantics (prior writes visible at GPU scope before the add is), as a reduction: nothing comes back to wait for.
__device__ __forceinline__ void signal_release(int* counter) {
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;" ::"l"(counter) : "memory");
}

__device__ __forceinline__ long long global_ns() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// When the block's current task had its input in hand (thread 0; 0 until then, reset as the block turns to a task):
// a GEMV tile's rows staged (and normed), a score split's q rotated, a P.V slice's softmax statistics. The trace's
// `staged` time splits a task's run into its input's round trips and the rest.
__shared__ long long staged_at;

__device__ __forceinline__ void mark_staged() {
  if (threadIdx.x == 0 && staged_at == 0) staged_at = global_ns();
}

// Thread 0: spin until counters[c] >= target for each of the row's waits; false after kWaitLimitNs.
__device__ bool wait_for(const int* row, const int* counters) {
  for (int w = 0; w < kMaxWaits; ++w) {
    const int c = row[6 + 2 * w], target = row[7 + 2 * w];
    if (c < 0) continue;
    unsigned sleep_ns = 32;
    const long long start = global_ns();
    while (load_acquire(counters + c) < target) {
      __nanosleep(sleep_ns);
      // short: the sleep after the signal lands is the consumer's wake latency, on every phase's critical path; a
      // poll is one L2 load of thread 0 of each waiting block
      sleep_ns = min(sleep_ns * 2, kMaxSleepNs);
      if (global_ns() - start > kWaitLimitNs) return false;
    }
  }
  return true;
}

template <typename T>
__device__ __forceinline__ T load_l2(const T* p) {
  static_assert(sizeof(T) == 2, "2-byte activations");
  const unsigned short bits = __ldcg(reinterpret_cast<const unsigned short*>(p));
  return *reinterpret_cast<const T*>(&bits);
}

// NORM1 / NORM2 on one row: `add` (x + residual rounded to T, written to res) or a copy of x to res (norm1 of
// layer 0, res != null) or nothing (norm2, res null); out = rms_norm(sum). The norm kernel's order.
template <typename T>
__device__ void norm_row(T* out, T* res, const T* x, const T* residual, const T* weight, int hidden,
                         float mean_scale, float eps) {
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    const T xv = load_l2(x + i);
    const T summed = residual != nullptr ? vt::from_f32<T>(__fadd_rn(vt::to_f32(xv), vt::to_f32(load_l2(residual + i))))
                                         : xv;
    if (res != nullptr) res[i] = summed;
    const float v = vt::to_f32(summed);
    sum_sq = __fadd_rn(sum_sq, __fmul_rn(v, v));
  }
  const float scale = vt_norm::rms_scale(vt_norm::block_sum(sum_sq), mean_scale, eps);
  for (int i = threadIdx.x; i < hidden; i += kThreads) {
    const T xv = load_l2(x + i);
    const T summed = residual != nullptr ? vt::from_f32<T>(__fadd_rn(vt::to_f32(xv), vt::to_f32(load_l2(residual + i))))
                                         : xv;  // recomputed, not re-read: res may be the buffer another SM reads
    out[i] = vt_norm::scale_and_weight(vt::to_f32(summed), scale, weight[i]);
  }
}

// What a GEMV tile stages as its rows of x: `x` as it is ([*, k] contiguous), or, with `norm`, the norm of x (plus
// `residual`, the sum rounded to T first and also written to `res_out` when that is not null), as the norm kernels
// compute it: the chain's GEMV prologue, so the tile needs no norm task before it.
template <typename T>
struct Input {
  const T* x;
  const T* residual;
  const T* norm;  // [k], or null: x is staged as it is
  T* res_out;
  float mean_scale, eps;
};

// Rows [r0, r0 + m) of the input into shared memory through L2 as 16-byte loads (the residual added in place, the
// norm's weight vector after them), then a barrier; with a norm, its sums of squares then run over the staged rows
// and its scale and weight rewrite them.
template <typename T>
__device__ void stage_input(T* xs, const Input<T>& in, int r0, int m, int k) {
  const int vecs = m * (k / kVec);
  const long long first = static_cast<long long>(r0) * (k / kVec);
  const uint4* x = reinterpret_cast<const uint4*>(in.x) + first;
  const uint4* res = in.residual != nullptr ? reinterpret_cast<const uint4*>(in.residual) + first : nullptr;
  uint4* dst = reinterpret_cast<uint4*>(xs);
  T* ws = xs + static_cast<long long>(m) * k;  // the norm's weight, staged beside the rows in the same round trip
  const int wvecs = in.norm != nullptr ? k / kVec : 0;
  for (int i = threadIdx.x; i < vecs + wvecs; i += kThreads) {
    if (i >= vecs) {
      reinterpret_cast<uint4*>(ws)[i - vecs] = __ldg(reinterpret_cast<const uint4*>(in.norm) + (i - vecs));
      continue;
    }
    uint4 xv = __ldcg(x + i);
    if (res != nullptr) {
      const uint4 rv = __ldcg(res + i);
      T* a = reinterpret_cast<T*>(&xv);
      const T* b = reinterpret_cast<const T*>(&rv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) a[e] = vt::from_f32<T>(__fadd_rn(vt::to_f32(a[e]), vt::to_f32(b[e])));
    }
    dst[i] = xv;
  }
  if (in.res_out != nullptr)  // a thread's own vectors, from shared memory: no global store between the loads above
    for (int i = threadIdx.x; i < vecs; i += kThreads) reinterpret_cast<uint4*>(in.res_out)[first + i] = dst[i];
  __syncthreads();
  if (in.norm == nullptr) return;
  float sq[kRowsPerPass];  // each row's sum of squares, each thread's elements in the norm kernel's order
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) {
    sq[r] = 0.0f;
    if (r < m)
      for (int i = threadIdx.x; i < k; i += kThreads) {
        const float v = vt::to_f32(xs[static_cast<long long>(r) * k + i]);
        sq[r] = __fadd_rn(sq[r], __fmul_rn(v, v));
      }
  }
  vt_norm::block_sum_n(sq, m);  // every row's total in the norm kernel's tree, one barrier for the pass
#pragma unroll
  for (int r = 0; r < kRowsPerPass; ++r) {
    if (r >= m) break;
    const float scale = vt_norm::rms_scale(sq[r], in.mean_scale, in.eps);
    T* row = xs + static_cast<long long>(r) * k;
    for (int i = threadIdx.x; i < k; i += kThreads)
      row[i] = vt_norm::scale_and_weight(vt::to_f32(row[i]), scale, ws[i]);
  }
  __syncthreads();  // the rows are whole; block_sum_n's partials are free for the next pass
}

// What a GEMV tile does with a column's sums: one weight (QKV, O_PROJ, DOWN) or two (GATE_UP: gate and up).
enum class Epi { kStore, kAddResidual, kGlu, kDownResidual };

// Columns [c0, c1) of y = x W^T (NW = 2: W0 gate, W1 up) for every row of the input (x, or its norm), in passes of
// kRowsPerPass rows. Warp w takes columns c0 + w, c0 + w + kWarps, ...; per column the GEMV's split-1 order (see the
// header). `residual`: what the kAddResidual and kDownResidual epilogues add.
template <typename T, int NW, Epi E>
__device__ void gemv_tile(const Input<T>& in, const T* w0, const T* w1, int rows, int k, int c0, int c1, T* y, int ldy,
                          const T* residual, T* y2, T* xs) {
  using P = vt_gemv::Pack<T, kVec>;
  constexpr int kChunk = 32 * kVec;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int nchunks = vt::ceil_div(k, kChunk);
  for (int r0 = 0; r0 < rows; r0 += kRowsPerPass) {
    const int m = min(kRowsPerPass, rows - r0);
    if (r0 > 0) __syncthreads();  // every warp is done with the last pass's rows
    P wv[NW][kUnroll], nx[kAhead];  // this batch of chunks; the next column's first kAhead chunks (one matrix)
    // chunks c + u, u in [u0, kUnroll), of the column's weight rows
    auto load = [&](int col, int c, int u0) {
      const T* wrow[NW];
      wrow[0] = w0 + static_cast<long long>(col) * k;
      if constexpr (NW == 2) wrow[1] = w1 + static_cast<long long>(col) * k;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int j = 0; j < NW; ++j)
          if (u >= u0 && (c + u) * kChunk + lane * kVec < k)
            wv[j][u] = vt_gemv::load_streamed<T, kVec>(wrow[j] + (c + u) * kChunk + lane * kVec);
    };
    bool loaded = c0 + warp < c1;  // the warp's first chunks are in flight while x is staged: they do not need it
    if (loaded) load(c0 + warp, 0, 0);
    bool ahead = false;  // nx holds the column's first chunks
    stage_input(xs, in, r0, m, k);
    mark_staged();
    for (int col = c0 + warp; col < c1; col += kWarps) {
      float acc[NW][kRowsPerPass];
#pragma unroll
      for (int j = 0; j < NW; ++j)
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) acc[j][r] = 0.0f;
      for (int c = 0; c < nchunks; c += kUnroll) {
        if (ahead) {  // the first chunks came ahead: load the rest of the batch behind them
#pragma unroll
          for (int u = 0; u < kAhead; ++u) wv[0][u] = nx[u];
          load(col, c, kAhead);
          ahead = false;
        } else if (!loaded) {
          load(col, c, 0);
        }
        loaded = false;
        // the column's last batch: the next column's first chunks fly while this one is summed, not after its
        // butterfly (one weight matrix, kAhead chunks: more would pass the kernel's register cap)
        if (NW == 1 && c + kUnroll >= nchunks && col + kWarps < c1) {
          const T* next = w0 + static_cast<long long>(col + kWarps) * k;
#pragma unroll
          for (int u = 0; u < kAhead; ++u)
            if (u * kChunk + lane * kVec < k) nx[u] = vt_gemv::load_streamed<T, kVec>(next + u * kChunk + lane * kVec);
          ahead = true;
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int off = (c + u) * kChunk + lane * kVec;
          if (off >= k) continue;
#pragma unroll
          for (int r = 0; r < kRowsPerPass; ++r) {
            if (r >= m) break;
            const P xp = *reinterpret_cast<const P*>(xs + static_cast<long long>(r) * k + off);
#pragma unroll
            for (int j = 0; j < NW; ++j) vt_gemv::fma_pack<T, kVec>(acc[j][r], wv[j][u], xp);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < NW; ++j)
#pragma unroll
        for (int r = 0; r < kRowsPerPass; ++r) acc[j][r] = vt_gemv::warp_sum(acc[j][r]);
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (lane != 0 || r >= m) break;  // lane 0 holds every sum after the butterfly
        const long long at = static_cast<long long>(r0 + r) * ldy + col;
        const T prod = vt::from_f32<T>(acc[0][r]);
        if constexpr (E == Epi::kStore) {
          y[at] = prod;
        } else if constexpr (E == Epi::kGlu) {
          y[at] = vt_act::silu_mul(prod, vt::from_f32<T>(acc[NW - 1][r]));
        } else if constexpr (E == Epi::kAddResidual) {
          y[at] = vt::from_f32<T>(__fadd_rn(vt::to_f32(prod), vt::to_f32(load_l2(residual + at))));
        } else {  // kDownResidual: the layer's output and the next layer's residual sum
          y[at] = prod;
          y2[at] = vt::from_f32<T>(__fadd_rn(vt::to_f32(prod), vt::to_f32(load_l2(residual + at))));
        }
      }
    }
  }
}

// The model's ends of a whole decode step (EMBED, FINAL_NORM, HEAD); all null in a launch of layers alone.
template <typename T>
struct Model {
  const long long* ids;  // [batch]: each row's token
  const T* embed;  // [vocab, hidden]
  const T* final_norm;  // [hidden]
  const T* head;  // [vocab, hidden]: the LM head (Qwen3-0.6B: the embedding itself); null: no HEAD tasks
  T* final;  // [batch, hidden]: the final norm's output
  T* logits;  // [batch, vocab]; null with head
  int vocab;
};

// When a block takes its next task from the queue head. While a block holds a task no other block can run it, so the
// earlier it takes, the longer a ready task may sit behind the block's current one; the later, the more of the take
// (the head's contended atomic, the task's row, its weights' prefetch) lies between one task's run and the next's.
// Taken before the current task's waits, every block held two tasks for most of a phase and each phase took twice
// as long (the step 0.43x the chain, against 0.62x at kTakeAtRun). Traced in one process, the step took 2,035 us at
// kTakeAtRun, 1,903 after the signal and 1,891 async, the engine's (the ENGINE-PERSISTENT spec's "Fourth GPU run").
enum Take : int {
  kTakeAtRun = 0,  // once the current task's waits are met: its atomic, row and prefetch before the run starts
  kTakeAsync = 1,  // the atomic issued then, its value first read after the run: the row and prefetch come later
  kTakeAfterSignal = 2,  // once the current task signalled: no task held while another runs
};

// One launch's descriptors: `layers` layers (the table's `layer` column indexes them) and the model's ends.
template <typename T, int N>
struct Step {
  Layer<T> layer[N];
  Model<T> model;
  int layers;
  int take;  // Take
};

// EMBED of one row: the row's token's embedding row into layer 0's x (the step's input), 16 bytes a thread.
template <typename T>
__device__ void embed_row(int r, const Layer<T>& p, const Model<T>& m, int* error) {
  const long long id = m.ids[r];
  uint4* dst = reinterpret_cast<uint4*>(const_cast<T*>(p.x) + static_cast<long long>(r) * p.hidden);
  const int vecs = p.hidden / kVec;
  if (id < 0 || id >= m.vocab) {
    for (int i = threadIdx.x; i < vecs; i += kThreads) dst[i] = make_uint4(0, 0, 0, 0);
    if (threadIdx.x == 0) atomicCAS(error, 0, kErrToken + r);
    return;
  }
  const uint4* src = reinterpret_cast<const uint4*>(m.embed + id * p.hidden);
  for (int i = threadIdx.x; i < vecs; i += kThreads) dst[i] = __ldg(src + i);
}

// The block-table entries of keys [k0, k0 + n) (n <= kPvChunk) into shared memory, so a K or V load waits on one
// load, not two; the caller's barrier publishes them. Key t's entry is then tbl[t / block_size - k0 / block_size].
__device__ __forceinline__ void stage_table(int* tbl, const int* table, int k0, int n, int block_size) {
  const int first = k0 / block_size, count = (k0 + n - 1) / block_size - first + 1;
  for (int i = threadIdx.x; i < count; i += kThreads) tbl[i] = __ldg(table + first + i);
}

template <typename T>
__device__ __forceinline__ const T* staged_row(const T* cache, const Layer<T>& p, const int* tbl, int k0, int t,
                                               int kv) {
  const int bs = p.block_size;
  const long long slot = static_cast<long long>(tbl[t / bs - k0 / bs]) * bs + t % bs;
  return cache + (slot * p.kv_heads + kv) * p.head_dim;
}

// Row `seq`'s q heads of KV group `kv` normed and rotated into `rot` (and, with `newest`, into q_rot too), read through
// L2 from the q/k/v tiles' output, staged in `raw` (the norms' weights, cos and sin staged after `rot`); with
// `newest` (the split holding the newest key) also its k head normed and rotated into k_rot and the key's cache
// slot, and its v head copied to the slot. One warp per head row: norm_rope_row's shuffles stay full-warp. Ends
// with a barrier: the cache rows are then visible to the whole block.
template <typename T>
__device__ void rotate(int seq, int kv, bool newest, const Layer<T>& p, T* raw, T* rot) {
  const int g = p.heads / p.kv_heads, d = p.head_dim, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int qv = g * d / kVec, hv = d / kVec;  // 16-byte vectors of the q heads and of one head
  const uint4* q = reinterpret_cast<const uint4*>(p.q + static_cast<long long>(seq) * p.q_dim + kv * g * d);
  const uint4* k = reinterpret_cast<const uint4*>(p.k + static_cast<long long>(seq) * p.kv_dim + kv * d);
  const uint4* v = reinterpret_cast<const uint4*>(p.v + static_cast<long long>(seq) * p.kv_dim + kv * d);
  // with the heads, in the same round trip: the q and k norms' weights and the row's cos and sin, [4, d] after rot
  T* aux = rot + g * d;
  const T* cos_row = p.cos + static_cast<long long>(seq) * d;
  const T* sin_row = p.sin + static_cast<long long>(seq) * d;
  uint4* dst = reinterpret_cast<uint4*>(raw);
  for (int i = threadIdx.x; i < qv + 4 * hv + (newest ? 2 * hv : 0); i += kThreads) {
    if (i < qv) {
      dst[i] = __ldcg(q + i);
    } else if (i < qv + 4 * hv) {
      const int j = i - qv, part = j / hv;
      const T* from = part == 0 ? p.q_norm : part == 1 ? p.k_norm : part == 2 ? cos_row : sin_row;
      reinterpret_cast<uint4*>(aux)[j] = __ldg(reinterpret_cast<const uint4*>(from) + j % hv);
    } else {
      const int j = i - qv - 4 * hv;  // k, then v: the newest key's heads
      dst[qv + j] = __ldcg(j < hv ? k + j : v + (j - hv));
    }
  }
  __syncthreads();
  const long long slot = p.slots[seq];
  const long long cache_row = (slot * p.kv_heads + kv) * d;
  const T *q_norm = aux, *k_norm = aux + d, *ct = aux + 2 * d, *st = aux + 3 * d;
  for (int h = warp; h < g + (newest ? 2 : 0); h += kWarps) {
    const T* src = raw + h * d;
    if (h < g) {
      T* out = newest ? p.q_rot + static_cast<long long>(seq) * p.q_dim + (kv * g + h) * d : nullptr;
      vt_rope::norm_rope_row<T>(src, q_norm, ct, st, d, p.q_mean_scale, p.eps, rot + h * d, out);
    } else if (h == g) {
      vt_rope::norm_rope_row<T>(src, k_norm, ct, st, d, p.k_mean_scale, p.eps,
                                p.k_rot + static_cast<long long>(seq) * p.kv_dim + kv * d,
                                slot >= 0 ? p.k_cache + cache_row : nullptr);
    } else if (slot >= 0) {
      for (int i = lane; i < d; i += 32) p.v_cache[cache_row + i] = src[i];
    }
  }
  __syncthreads();
}

// SCORES of (seq, kv), split `split` of `splits`: its keys are that share of the allowed keys, in order, computed
// here from the context length (persistent_schedule.key_range's integer bounds), so the table holds no length and
// one table serves every step of a batch size (a CUDA graph replays it). The last split holds the newest key: it
// also rotates k and stores K and V (`rotate`), so its own read of that key follows the store in the block. The
// group's rotated q heads are staged as fp32, and per chunk of kPvChunk keys their block-table entries; a key's row
// is read by head_dim / 8 lanes, 16 bytes each, kKvUnroll rows a lane in flight (a warp covers 32 / (head_dim / 8)
// keys a load), every head of the group against it (each K row read once); a lane sums its 8 products in order,
// then the key's lanes by butterfly; rounded as the generic kernel: T(T(q.k) * scale).
template <typename T>
__device__ void scores(int seq, int kv, int split, int splits, const Layer<T>& p, float* qs) {
  const int g = p.heads / p.kv_heads, d = p.head_dim, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int* tbl = reinterpret_cast<int*>(qs + g * d);  // a chunk's block-table entries
  T* raw = reinterpret_cast<T*>(tbl + kTableInts);  // the staged q (k, v) heads, then the rotated q heads
  const int* table = p.block_tables + static_cast<long long>(seq) * p.max_blocks;
  const int len = p.context_lens[seq], allowed = vt::window_begin(len, p.window);  // keys before it are never read
  const long long span = len - allowed;
  const int begin = allowed + static_cast<int>(split * span / splits);
  const int k1 = allowed + static_cast<int>((split + 1) * span / splits);
  // the first chunk's block-table entries load while q is rotated (rotate's barriers publish them)
  if (begin < k1) stage_table(tbl, table, begin, min(k1, begin + kPvChunk) - begin, p.block_size);
  rotate(seq, kv, split == splits - 1, p, raw, raw + (g + 2) * d);
  for (int i = threadIdx.x; i < g * d; i += kThreads) qs[i] = vt::to_f32(raw[(g + 2) * d + i]);
  __syncthreads();
  mark_staged();
  float* rows = p.scores + static_cast<long long>(seq * p.heads + kv * g) * p.ld_scores;
  const int lpk = d / kVec, kpw = 32 / lpk, sub = lane / lpk, c = (lane % lpk) * kVec;  // launcher: lpk divides 32
  const int step = kWarps * kpw;
  for (int c0 = begin; c0 < k1; c0 += kPvChunk) {
    const int c1 = min(k1, c0 + kPvChunk);
    if (c0 != begin) {  // a later chunk: its entries, once every warp is done with the last chunk's
      __syncthreads();
      stage_table(tbl, table, c0, c1 - c0, p.block_size);
      __syncthreads();
    }
    for (int base = c0 + warp * kpw; base < c1; base += step * kKvUnroll) {  // base: the same for the whole warp
      uint4 kr[kKvUnroll];
#pragma unroll
      for (int u = 0; u < kKvUnroll; ++u) {
        const int t = base + u * step + sub;  // the newest key was written by this launch: through L2
        kr[u] = t < c1 ? __ldcg(reinterpret_cast<const uint4*>(staged_row(p.k_cache, p, tbl, c0, t, kv) + c))
                       : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kKvUnroll; ++u) {
        if (base + u * step >= c1) break;  // no key of the warp left: uniform, so the shuffles below stay whole
        const int t = base + u * step + sub;
        const T* kv8 = reinterpret_cast<const T*>(&kr[u]);
        for (int h = 0; h < g; ++h) {
          float dot = 0.f;
#pragma unroll
          for (int e = 0; e < kVec; ++e) dot += qs[h * d + c + e] * vt::to_f32(kv8[e]);
          for (int off = lpk / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
          if (t < c1 && c == 0)
            rows[static_cast<long long>(h) * p.ld_scores + t] = vt::round_to<T>(vt::round_to<T>(dot) * p.scale);
        }
      }
    }
  }
}

// ATTN_OUT of (seq, kv), slice `part` of `parts` of head_dim: per pass of up to kPvHeads heads of the group, each
// head's block max and sum of exp over the allowed keys (the generic kernel's reductions; the logits are only read,
// so the slices of one (seq, kv) run at once), then per chunk of kPvChunk keys the probabilities T(exp(s - max) /
// sum) and the keys' block-table entries into shared memory, then P.V on the slice's columns: a V row's slice read
// by (head_dim / parts) / 8 lanes, 16 bytes each, kKvUnroll rows a lane in flight, each row read once for every head
// of the pass. A lane sums its keys in order in fp32, the lanes of a column by butterfly, the warps in order through
// shared memory; rounded to T once. Not the generic kernel's key order: held to the chain within the dtype's
// tolerance, as the tiled arms.
template <typename T>
__device__ void attn_out(int seq, int kv, int part, int parts, const Layer<T>& p, float* smem, int* error) {
  __shared__ float red_s[kWarps];
  __shared__ float stat_s[2 * kPvHeads];  // the pass's heads' max, then sum
  const int g = p.heads / p.kv_heads, d = p.head_dim, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int w = parts > 0 ? d / parts : 0, lpr = w / kVec;  // the slice's columns; lanes a V row
  if (parts < 1 || part < 0 || part >= parts || d % parts || w % kVec || lpr == 0 || 32 % lpr) {
    if (tid == 0) atomicCAS(error, 0, kErrKind + kAttnOut);  // a slice the tile cannot take: the table is broken
    return;
  }
  const int rpw = 32 / lpr, sub = lane / lpr, col = (lane % lpr) * kVec, c = part * w + col;
  const int len = p.context_lens[seq], begin = vt::window_begin(len, p.window);
  const int* table = p.block_tables + static_cast<long long>(seq) * p.max_blocks;
  float* ps = smem;  // [kPvHeads, kPvChunk]: a chunk's probabilities
  float* part_s = smem + kPvHeads * kPvChunk;  // [kWarps, kPvHeads, w]: the warps' sums
  int* tbl = reinterpret_cast<int*>(part_s + kWarps * kPvHeads * d);  // a chunk's block-table entries
  const int step = kWarps * rpw;
  // every allowed key in one chunk (the common decode case): the logits come from L2 once, into ps, where the max,
  // the sum and the probabilities read them, and the block-table entries load beside them
  const int keys = len - begin;
  const bool whole = keys <= kPvChunk;
  if (whole) stage_table(tbl, table, begin, keys, p.block_size);
  for (int h0 = 0; h0 < g; h0 += kPvHeads) {
    const int nh = min(kPvHeads, g - h0);
    const float* logits0 = p.scores + static_cast<long long>(seq * p.heads + kv * g + h0) * p.ld_scores;
    if (whole) {
      for (int i = tid; i < nh * keys; i += kThreads)
        ps[(i / keys) * kPvChunk + i % keys] = __ldcg(logits0 + static_cast<long long>(i / keys) * p.ld_scores + begin +
                                                      i % keys);
      __syncthreads();
    }
    auto logit = [&](int h, int t) {
      return whole ? ps[h * kPvChunk + t - begin] : __ldcg(logits0 + static_cast<long long>(h) * p.ld_scores + t);
    };
    // each head reduced on its own: the several-value reduction over every head of the pass measured 56 us a step
    // slower on the H100 (2026-12-05 bisect), its arrays live across the P.V loop below
    for (int h = 0; h < nh; ++h) {
      float mx = -CUDART_INF_F;
      for (int t = begin + tid; t < len; t += kThreads) mx = fmaxf(mx, logit(h, t));
      mx = vt::block_reduce(mx, red_s, true);
      float sum = 0.f;
      for (int t = begin + tid; t < len; t += kThreads) sum += expf(logit(h, t) - mx);
      sum = vt::block_reduce(sum, red_s, false);
      if (tid == 0) {
        stat_s[h] = mx;
        stat_s[kPvHeads + h] = sum;
      }
    }
    mark_staged();
    float acc[kPvHeads][kVec];
#pragma unroll
    for (int h = 0; h < kPvHeads; ++h)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[h][e] = 0.f;
    for (int k0 = begin; k0 < len; k0 += kPvChunk) {
      const int n = min(kPvChunk, len - k0);
      __syncthreads();  // stat_s is written; every warp is done with the last chunk's probabilities
      for (int i = tid; i < nh * n; i += kThreads) {  // whole: in place, each thread its own logits
        const int h = i / n, j = i % n;
        ps[h * kPvChunk + j] = vt::round_to<T>(expf(logit(h, k0 + j) - stat_s[h]) / stat_s[kPvHeads + h]);
      }
      if (!whole) stage_table(tbl, table, k0, n, p.block_size);
      __syncthreads();
      for (int base = warp * rpw; base < n; base += step * kKvUnroll) {
        uint4 vr[kKvUnroll];
#pragma unroll
        for (int u = 0; u < kKvUnroll; ++u) {
          const int j = base + u * step + sub;  // the newest value was written by this launch: through L2
          vr[u] = j < n ? __ldcg(reinterpret_cast<const uint4*>(staged_row(p.v_cache, p, tbl, k0, k0 + j, kv) + c))
                        : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kKvUnroll; ++u) {
          const int j = base + u * step + sub;
          if (j >= n) continue;
          const T* v8 = reinterpret_cast<const T*>(&vr[u]);
#pragma unroll
          for (int h = 0; h < kPvHeads; ++h) {
            if (h >= nh) break;
            const float pr = ps[h * kPvChunk + j];
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[h][e] += pr * vt::to_f32(v8[e]);
          }
        }
      }
    }
#pragma unroll
    for (int h = 0; h < kPvHeads; ++h)
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        for (int off = lpr; off < 32; off *= 2) acc[h][e] += __shfl_xor_sync(0xffffffffu, acc[h][e], off);
    if (sub == 0)
      for (int h = 0; h < nh; ++h)
#pragma unroll
        for (int e = 0; e < kVec; ++e) part_s[(warp * kPvHeads + h) * w + col + e] = acc[h][e];
    __syncthreads();
    for (int i = tid; i < nh * w; i += kThreads) {
      const int h = i / w, e = i % w;
      float total = 0.f;
      for (int v = 0; v < kWarps; ++v) total += part_s[(v * kPvHeads + h) * w + e];
      p.attn[static_cast<long long>(seq) * p.q_dim + (kv * g + h0 + h) * d + part * w + e] = vt::from_f32<T>(total);
    }
    __syncthreads();  // part_s, stat_s and red_s are free for the next pass
  }
}

// Thread 0, once it holds a task and before its waits: ask L2 for the task's weights (one bulk prefetch per matrix
// tile, its rows contiguous), so a tile waiting on its input already streams the bytes that do not depend on it;
// its ld.global.nc loads then hit L2. sm_90's cp.async.bulk.prefetch; nothing on older devices.
template <typename T>
__device__ void prefetch_weights(const int* row, const Layer<T>& p, const Model<T>& m) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int kind = row[0], a0 = row[2], a1 = row[3], a2 = row[4];
  const T* w[2] = {nullptr, nullptr};
  int c0 = a0, c1 = a1, k = p.hidden;  // the tile's weight rows [c0, c1), each k long
  switch (kind) {
    case kQkv:
      w[0] = a0 == 0 ? p.wq : a0 == 1 ? p.wk : p.wv;
      c0 = a1, c1 = a2;
      break;
    case kOProj:
      w[0] = p.wo, k = p.q_dim;
      break;
    case kGateUp:
      w[0] = p.wg, w[1] = p.wu;
      break;
    case kDown:
      w[0] = p.wd, k = p.inter;
      break;
    case kHead:
      w[0] = m.head;
      break;
    default:
      return;
  }
  const long long first = static_cast<long long>(c0) * k;
  const unsigned bytes = static_cast<unsigned>(static_cast<long long>(c1 - c0) * k * sizeof(T));  // 16-byte rows
  for (const T* base : w)
    if (base != nullptr && bytes > 0)
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(base + first), "r"(bytes) : "memory");
#endif
}

template <typename T>
__device__ void run_task(const int* row, const Layer<T>& p, const Model<T>& m, T* xs, int* error) {
  const int kind = row[0], a0 = row[2], a1 = row[3], a2 = row[4];
  // a model kind, but the launch has no model (or, for HEAD, no head: a step that ends at the final norm)
  if (kind >= kEmbed && kind <= kHead && (m.embed == nullptr || (kind == kHead && m.head == nullptr))) {
    if (threadIdx.x == 0) atomicCAS(error, 0, kErrKind + kind);
    return;
  }
  switch (kind) {
    case kQkv: {  // a0: q (0), k (1) or v (2); [a1, a2): its columns. The layer's first tile writes res1.
      const T* w = a0 == 0 ? p.wq : a0 == 1 ? p.wk : p.wv;
      T* y = a0 == 0 ? p.q : a0 == 1 ? p.k : p.v;
      const Input<T> in{p.x, p.residual, p.ln1, a0 == 0 && a1 == 0 ? p.res1 : nullptr, p.mean_scale, p.eps};
      gemv_tile<T, 1, Epi::kStore>(in, w, nullptr, p.batch, p.hidden, a1, a2, y, a0 == 0 ? p.q_dim : p.kv_dim,
                                   nullptr, nullptr, xs);
      break;
    }
    case kScores:
      scores<T>(a0, a1, a2, row[5], p, reinterpret_cast<float*>(xs));
      break;
    case kAttnOut:
      attn_out<T>(a0, a1, a2, row[5], p, reinterpret_cast<float*>(xs), error);
      break;
    case kOProj:
      gemv_tile<T, 1, Epi::kAddResidual>(Input<T>{p.attn}, p.wo, nullptr, p.batch, p.q_dim, a0, a1, p.res2,
                                         p.hidden, p.res1, nullptr, xs);
      break;
    case kGateUp: {
      const Input<T> in{p.res2, nullptr, p.ln2, nullptr, p.mean_scale, p.eps};
      gemv_tile<T, 2, Epi::kGlu>(in, p.wg, p.wu, p.batch, p.hidden, a0, a1, p.act, p.inter, nullptr, nullptr, xs);
      break;
    }
    case kDown:
      gemv_tile<T, 1, Epi::kDownResidual>(Input<T>{p.act}, p.wd, nullptr, p.batch, p.inter, a0, a1, p.mlp, p.hidden,
                                          p.res2, p.out, xs);
      break;
    case kEmbed:
      embed_row<T>(a0, p, m, error);
      break;
    case kFinalNorm: {  // the model's norm of the last layer's output and residual: the engine's fused_add_rms_norm
      const long long at = static_cast<long long>(a0) * p.hidden;
      norm_row<T>(m.final + at, nullptr, p.mlp + at, p.res2 + at, m.final_norm, p.hidden, p.mean_scale, p.eps);
      break;
    }
    case kHead:  // [a0, a1): vocabulary columns of every row
      gemv_tile<T, 1, Epi::kStore>(Input<T>{m.final}, m.head, nullptr, p.batch, p.hidden, a0, a1, m.logits, m.vocab,
                                   nullptr, nullptr, xs);
      break;
    default:  // not a kind of the table
      if (threadIdx.x == 0) atomicCAS(error, 0, kErrKind + kind);
  }
}

__device__ __forceinline__ int sm_id() {
  int id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// table: [tasks, kRowWidth] int32; control: [error, head, counters...], the head and counters zeroed before the
// launch. N: the most layers the launch can hold (1: a decode layer, the kernel table's arm; kMaxLayers: a step).
// trace: null, or [tasks, kTraceWidth] int64 that each task's block fills: its SM, and the global timer when the block
// turned to the task (`step.take` says when it took it), when its waits were met (at kTakeAtRun, and its next task
// taken), when its input was staged (`mark_staged`; 0 for a kind without that point) and when it signalled
// (lab/persistent/trace.py reads where the time went).
template <typename T, int N>
__global__ void __launch_bounds__(kThreads, 1)
persistent_layer_kernel(const int* __restrict__ table, int tasks, int* control, long long* trace,
                        const __grid_constant__ Step<T, N> step) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* xs = reinterpret_cast<T*>(smem_raw);
  __shared__ int task_index;
  __shared__ int ready;
  int* error = control;
  int* head = control + 1;
  int* counters = control + kControlWords;
  long long taken = 0, met = 0;  // thread 0's trace times of the current task
  int held = -1;  // thread 0: the task taken ahead while the current one ran (-1: none)
  for (;;) {
    if (threadIdx.x == 0) {
      const bool ahead = held >= 0;
      const int cur = ahead ? held : atomicAdd(head, 1);
      taken = trace != nullptr ? global_ns() : 0;  // when the block turned to it
      ready = 1;
      held = -1;
      if (cur < tasks) {
        const int* row = table + static_cast<long long>(cur) * kRowWidth;
        const bool layer_ok = row[1] >= 0 && row[1] < step.layers;
        // a task taken at run already streams its weights; one taken by kTakeAsync has only its index
        if (layer_ok && !(ahead && step.take == kTakeAtRun)) prefetch_weights<T>(row, step.layer[row[1]], step.model);
        if (!wait_for(row, counters)) {
          atomicCAS(error, 0, kErrWait + cur);
          ready = 0;
        }
        if (!layer_ok) {
          atomicCAS(error, 0, kErrLayer + cur);
          ready = 0;
        }
        if (step.take == kTakeAtRun) {  // the next task, its weights streaming while this one runs
          held = atomicAdd(head, 1);
          const int* next = table + static_cast<long long>(held) * kRowWidth;
          if (held < tasks && next[1] >= 0 && next[1] < step.layers)
            prefetch_weights<T>(next, step.layer[next[1]], step.model);
        } else if (step.take == kTakeAsync) {
          held = atomicAdd(head, 1);  // nothing reads it before the run ends: the round trip overlaps the run
        }
      }
      task_index = cur;
      staged_at = 0;
      met = trace != nullptr ? global_ns() : 0;
    }
    __syncthreads();  // the task's inputs, acquired by thread 0, are now ordered before every thread's reads
    const int t = task_index;
    if (t >= tasks) return;
    const int* row = table + static_cast<long long>(t) * kRowWidth;
    if (ready) run_task<T>(row, step.layer[row[1]], step.model, xs, error);
    __syncthreads();  // every thread's writes happen before the release; task_index is free to overwrite
    if (threadIdx.x == 0) {
      signal_release(counters + row[10]);
      if (trace != nullptr) {
        long long* at = trace + static_cast<long long>(t) * kTraceWidth;
        at[0] = sm_id();
        at[1] = taken;
        at[2] = met;
        at[3] = staged_at;
        at[4] = global_ns();
      }
    }
  }
}

}  // namespace vt_persistent
