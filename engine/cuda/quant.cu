// Launchers for the AWQ, GPTQ and NVFP4 dequant and dequant-GEMV kernels: checks, dtype dispatch; torch-free.
#include <algorithm>

#include "quant_int4_gemv.cuh"
#include "quant_nvfp4_gemv.cuh"

namespace {

using vt::kBF16;
using vt::kF16;
using vt::kF32;

// Call f with a value of the C++ type of a 16-bit float dtype code; false for any other code.
template <typename F>
bool with_half(int code, F&& f) {
  if (code == kBF16) { f(__nv_bfloat16{}); return true; }
  if (code == kF16) { f(__half{}); return true; }
  return false;
}

// The same over every float dtype code (fp32 included).
template <typename F>
bool with_float(int code, F&& f) {
  if (code == kF32) { f(float{}); return true; }
  return with_half(code, f);
}

int grid_1d(long long n, int threads) { return (int)((n + threads - 1) / threads); }

// The K-split block count of an int4 GEMV: at most one wave of kGemvTargetBlocks blocks, a K unit for
// every thread along K, and at most kGemvMaxSplits rows of partial sums.
int gemv_splits(int tiles, int k_units, int slots) {
  int splits = vt_quant::kGemvTargetBlocks / std::max(tiles, 1);
  splits = std::min(splits, k_units / slots);
  splits = std::min(splits, vt_quant::kGemvMaxSplits);
  return std::max(splits, 1);
}

bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The fused GEMVs write x's dtype only: every other output dtype would multiply their (heavy)
// instantiations, and the ops never ask for one.
int out_dtype_error(const char* what, int x_dtype, int out_dtype) {
  return vt::fail(vt::kUnsupported, "%s: out dtype code %d must equal x's (%d)", what, out_dtype, x_dtype);
}

// A split-K launch needs the partial-sum rows and the zeroed arrival counters of its column tiles.
int check_split_workspace(const char* what, int splits, int tiles, const float* partial, const int* counters) {
  if (splits > 1 && (!partial || !counters))
    return vt::fail(vt::kBadArgument, "%s: partial and counters workspaces are required", what);
  if (splits > 1 && tiles > vt_quant::kGemvMaxTiles)
    return vt::fail(vt::kBadArgument, "%s: %d column tiles exceed the %d split-K counters", what, tiles,
                    vt_quant::kGemvMaxTiles);
  return vt::kOk;
}

// N is packed eight to a word in both formats; K only in GPTQ's (k_multiple 8 there, 1 for AWQ).
int check_int4(const char* what, int k_dim, int n_dim, int k_multiple) {
  if (k_dim < 1 || k_dim % k_multiple || n_dim < 1 || n_dim % vt_quant::kPack)
    return vt::fail(vt::kBadArgument, "%s: need K a positive multiple of %d and N of 8 (got K=%d, N=%d)",
                    what, k_multiple, k_dim, n_dim);
  return vt::kOk;
}

}  // namespace

VT_DEFINE_LAST_ERROR(quant)

// qweight, qzeros: [K, N/8], [K/group, N/8]; scales: [K/group, N]; out: [K, N]
VT_EXPORT int vt_quant_awq_dequant(const int32_t* qweight, const int32_t* qzeros, const void* scales, void* out,
                                   int k_dim, int n_dim, int group, int scale_dtype, int out_dtype, void* stream) {
  if (int rc = check_int4("awq", k_dim, n_dim, 1)) return rc;
  if (group < 1 || k_dim % group)
    return vt::fail(vt::kBadArgument, "awq: group_size must divide K (got %d)", group);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = grid_1d((long long)k_dim * (n_dim / vt_quant::kPack), vt_quant::kDequantThreads);
  bool ok = false;
  with_float(scale_dtype, [&](auto ts) {
    ok = with_float(out_dtype, [&](auto to) {
      using TS = decltype(ts);
      using TO = decltype(to);
      vt_quant::awq_dequant_kernel<TS, TO><<<blocks, vt_quant::kDequantThreads, 0, s>>>(
          qweight, qzeros, static_cast<const TS*>(scales), static_cast<TO*>(out), k_dim, n_dim, group);
    });
  });
  if (!ok)
    return vt::fail(vt::kUnsupported, "awq: dtype codes must be 0, 1 or 2 (scales %d, out %d)", scale_dtype, out_dtype);
  return vt::launch_status("quant");
}

// qweight: [K/8, N]; qzeros: [G, N/8]; scales: [G, N]; g_idx: [K] in [0, G) (rows outside: NaN); out: [K, N]
VT_EXPORT int vt_quant_gptq_dequant(const int32_t* qweight, const int32_t* qzeros, const void* scales,
                                    const int32_t* g_idx, void* out, int k_dim, int n_dim, int groups,
                                    int zero_offset, int scale_dtype, int out_dtype, void* stream) {
  if (int rc = check_int4("gptq", k_dim, n_dim, vt_quant::kPack)) return rc;
  if (groups < 1) return vt::fail(vt::kBadArgument, "gptq: groups must be >= 1 (got %d)", groups);
  if (zero_offset != 0 && zero_offset != 1)
    return vt::fail(vt::kBadArgument, "gptq: zero offset must be 1 (v1) or 0 (v2) (got %d)", zero_offset);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = grid_1d((long long)(k_dim / vt_quant::kPack) * n_dim, vt_quant::kDequantThreads);
  bool ok = false;
  with_float(scale_dtype, [&](auto ts) {
    ok = with_float(out_dtype, [&](auto to) {
      using TS = decltype(ts);
      using TO = decltype(to);
      vt_quant::gptq_dequant_kernel<TS, TO><<<blocks, vt_quant::kDequantThreads, 0, s>>>(
          qweight, qzeros, static_cast<const TS*>(scales), g_idx, static_cast<TO*>(out), k_dim, n_dim, groups,
          zero_offset);
    });
  });
  if (!ok)
    return vt::fail(vt::kUnsupported,
                    "gptq: dtype codes must be 0, 1 or 2 (scales %d, out %d)", scale_dtype, out_dtype);
  return vt::launch_status("quant");
}

// packed: [N, K/2] uint8; scales: [N, K/16] fp8 e4m3 bytes; the global scale: *gs_ptr (device fp32) when
// gs_ptr is set, else gs_value (passed by value: no host-to-device copy); out: [N, K]
VT_EXPORT int vt_quant_nvfp4_dequant(const uint8_t* packed, const uint8_t* scales, const float* gs_ptr,
                                     float gs_value, void* out, int n_dim, int k_dim, int out_dtype, void* stream) {
  if (n_dim < 1) return vt::fail(vt::kBadArgument, "nvfp4: N must be >= 1 (got %d)", n_dim);
  if (k_dim < 1 || k_dim % vt_quant::kNvfp4Group)
    return vt::fail(vt::kBadArgument, "nvfp4: K must be a positive multiple of 16 (got %d)", k_dim);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = grid_1d((long long)n_dim * (k_dim / 2), vt_quant::kDequantThreads);
  const bool ok = with_float(out_dtype, [&](auto to) {
    using TO = decltype(to);
    vt_quant::nvfp4_dequant_kernel<TO><<<blocks, vt_quant::kDequantThreads, 0, s>>>(
        packed, scales, gs_ptr, gs_value, static_cast<TO*>(out), n_dim, k_dim);
  });
  if (!ok)
    return vt::fail(vt::kBadArgument, "nvfp4: out dtype code must be 0, 1 or 2 (got %d)", out_dtype);
  return vt::launch_status("quant");
}

// The rows of fp32 partial sums an int4 GEMV needs as workspace: [vt_quant_gemv_max_splits(), N].
VT_EXPORT int vt_quant_gemv_max_splits() { return vt_quant::kGemvMaxSplits; }

// The int32 arrival counters an int4 GEMV needs (zeroed once; each launch leaves them zero).
VT_EXPORT int vt_quant_gemv_max_tiles() { return vt_quant::kGemvMaxTiles; }

// x: [K]; AWQ weights as in vt_quant_awq_dequant; bias: [N] (x dtype) or null; partial:
// [vt_quant_gemv_max_splits(), N] fp32 and counters: [vt_quant_gemv_max_tiles()] int32, zero (split-K
// workspace; one launch at a time may use a counters buffer); out: [N]
VT_EXPORT int vt_quant_awq_gemv(const void* x, const int32_t* qweight, const int32_t* qzeros, const void* scales,
                                const void* bias, float* partial, int* counters, void* out, int k_dim, int n_dim,
                                int group, int x_dtype, int scale_dtype, int out_dtype, void* stream) {
  using namespace vt_quant;
  if (int rc = check_int4("awq gemv", k_dim, n_dim, 1)) return rc;
  if (group < 1 || k_dim % group)
    return vt::fail(vt::kBadArgument, "awq gemv: group_size must divide K (got %d)", group);
  const int words = n_dim / kPack;
  const bool vec = words % kAwqWordsPerLoad == 0 && k_dim % kPack == 0 && aligned(x, 16) &&
                   aligned(qweight, 4 * kAwqWordsPerLoad) && aligned(qzeros, 4 * kAwqWordsPerLoad);
  const int per_block = kAwqLanes * (vec ? kAwqWordsPerLoad : kScalarWords);  // packed words of a tile row
  const int tiles = grid_1d(words, per_block);
  const int splits = gemv_splits(tiles, vt::ceil_div(k_dim, kPack), kGemvThreads / kAwqLanes);
  if (int rc = check_split_workspace("awq gemv", splits, tiles, partial, counters)) return rc;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(tiles, splits);
  bool ok = false;
  if (out_dtype != x_dtype) return out_dtype_error("awq gemv", x_dtype, out_dtype);
  with_float(x_dtype, [&](auto tx) {
    ok = with_float(scale_dtype, [&](auto ts) {
      using TX = decltype(tx);
      using TS = decltype(ts);
      using TO = TX;  // the output in x's dtype: one instantiation per (x, scales) pair
      const auto* xp = static_cast<const TX*>(x);
      const auto* sp = static_cast<const TS*>(scales);
      const auto* bp = static_cast<const TX*>(bias);
      auto* op = static_cast<TO*>(out);
      if (vec)
        awq_gemv_kernel<TX, TS, TO, kAwqWordsPerLoad><<<grid, kGemvThreads, 0, s>>>(
            xp, qweight, qzeros, sp, bp, partial, counters, op, k_dim, n_dim, group);
      else
        awq_gemv_kernel<TX, TS, TO, kScalarWords><<<grid, kGemvThreads, 0, s>>>(
            xp, qweight, qzeros, sp, bp, partial, counters, op, k_dim, n_dim, group);
    });
  });
  if (!ok)
    return vt::fail(vt::kUnsupported,
                    "awq gemv: dtype codes must be 0, 1 or 2 (x %d, scales %d, out %d)", x_dtype, scale_dtype,
                    out_dtype);
  return vt::launch_status("quant");
}

// x: [K]; GPTQ weights as in vt_quant_gptq_dequant (groups: the rows of scales); bias, partial, counters
// and out as in vt_quant_awq_gemv
VT_EXPORT int vt_quant_gptq_gemv(const void* x, const int32_t* qweight, const int32_t* qzeros, const void* scales,
                                 const int32_t* g_idx, const void* bias, float* partial, int* counters, void* out,
                                 int k_dim, int n_dim, int groups, int zero_offset, int x_dtype, int scale_dtype,
                                 int out_dtype, void* stream) {
  using namespace vt_quant;
  if (int rc = check_int4("gptq gemv", k_dim, n_dim, kPack)) return rc;
  if (groups < 1) return vt::fail(vt::kBadArgument, "gptq gemv: groups must be >= 1 (got %d)", groups);
  if (zero_offset != 0 && zero_offset != 1)
    return vt::fail(vt::kBadArgument,
                    "gptq gemv: zero offset must be 1 (v1) or 0 (v2) (got %d)", zero_offset);
  const bool vec = n_dim % kGptqWordsPerLoad == 0 && aligned(x, 16) && aligned(qweight, 4 * kGptqWordsPerLoad);
  const int per_block = kGptqLanes * (vec ? kGptqWordsPerLoad : kScalarWords);  // columns of a tile
  const int tiles = grid_1d(n_dim, per_block);
  const int splits = gemv_splits(tiles, k_dim / kPack, kGemvThreads / kGptqLanes);
  if (int rc = check_split_workspace("gptq gemv", splits, tiles, partial, counters)) return rc;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const dim3 grid(tiles, splits);
  bool ok = false;
  if (out_dtype != x_dtype) return out_dtype_error("gptq gemv", x_dtype, out_dtype);
  with_float(x_dtype, [&](auto tx) {
    ok = with_float(scale_dtype, [&](auto ts) {
      using TX = decltype(tx);
      using TS = decltype(ts);
      using TO = TX;  // the output in x's dtype: one instantiation per (x, scales) pair
      const auto* xp = static_cast<const TX*>(x);
      const auto* sp = static_cast<const TS*>(scales);
      const auto* bp = static_cast<const TX*>(bias);
      auto* op = static_cast<TO*>(out);
      if (vec)
        gptq_gemv_kernel<TX, TS, TO, kGptqWordsPerLoad><<<grid, kGemvThreads, 0, s>>>(
            xp, qweight, qzeros, sp, g_idx, bp, partial, counters, op, k_dim, n_dim, groups, zero_offset);
      else
        gptq_gemv_kernel<TX, TS, TO, kScalarWords><<<grid, kGemvThreads, 0, s>>>(
            xp, qweight, qzeros, sp, g_idx, bp, partial, counters, op, k_dim, n_dim, groups, zero_offset);
    });
  });
  if (!ok)
    return vt::fail(vt::kUnsupported,
                    "gptq gemv: dtype codes must be 0, 1 or 2 (x %d, scales %d, out %d)", x_dtype, scale_dtype,
                    out_dtype);
  return vt::launch_status("quant");
}

// x: [K]; NVFP4 weights and global scale as in vt_quant_nvfp4_dequant; bias: [N] (x dtype) or null; out: [N]
VT_EXPORT int vt_quant_nvfp4_gemv(const void* x, const uint8_t* packed, const uint8_t* scales, const float* gs_ptr,
                                  float gs_value, const void* bias, void* out, int n_dim, int k_dim, int x_dtype,
                                  int out_dtype, void* stream) {
  using namespace vt_quant;
  if (n_dim < 1) return vt::fail(vt::kBadArgument, "nvfp4 gemv: N must be >= 1 (got %d)", n_dim);
  if (k_dim < 1 || k_dim % kNvfp4Group)
    return vt::fail(vt::kBadArgument, "nvfp4 gemv: K must be a positive multiple of 16 (got %d)", k_dim);
  if (!aligned(packed, 8)) return vt::fail(vt::kBadArgument, "nvfp4 gemv: packed must be 8-byte aligned");
  const bool vec = k_dim % kNvfp4Chunk == 0 && aligned(x, 16) && aligned(packed, 16) && aligned(scales, 2);
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  const int blocks = grid_1d(n_dim, kNvfp4Warps * kNvfp4RowsPerWarp);
  bool ok = false;
  if (out_dtype != x_dtype) return out_dtype_error("nvfp4 gemv", x_dtype, out_dtype);
  ok = with_float(x_dtype, [&](auto tx) {
    using TX = decltype(tx);
    using TO = TX;  // the output in x's dtype
    const auto* xp = static_cast<const TX*>(x);
    const auto* bp = static_cast<const TX*>(bias);
    auto* op = static_cast<TO*>(out);
    if (vec)
      nvfp4_gemv_kernel<TX, TO, true><<<blocks, kNvfp4Warps * kWarp, 0, s>>>(
          xp, packed, scales, gs_ptr, gs_value, bp, op, n_dim, k_dim);
    else
      nvfp4_gemv_kernel<TX, TO, false><<<blocks, kNvfp4Warps * kWarp, 0, s>>>(
          xp, packed, scales, gs_ptr, gs_value, bp, op, n_dim, k_dim);
  });
  if (!ok)
    return vt::fail(vt::kUnsupported, "nvfp4 gemv: dtype codes must be 0, 1 or 2 (x %d, out %d)", x_dtype, out_dtype);
  return vt::launch_status("quant");
}
