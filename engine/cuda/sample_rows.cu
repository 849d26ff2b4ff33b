// Launcher for the serving sampler's fused Gumbel-max draw (sample_rows.cuh): argument checks, dtype dispatch.
#include "sample_rows.cuh"

VT_DEFINE_LAST_ERROR(sample_rows)

namespace {

template <typename T>
int launch(long long* out, const void* logits, int batch, int vocab, long long ld, const float* temperature,
           const long long* seeds, const long long* steps, cudaStream_t s) {
  vt_sample_rows::gumbel_argmax_kernel<T><<<batch, vt_sample_rows::kThreads, 0, s>>>(
      out, static_cast<const T*>(logits), vocab, ld, temperature, seeds, steps);
  return vt::launch_status("gumbel_argmax_kernel");
}

}  // namespace

// out: [batch] int64; logits: [batch, vocab] rows ld elements apart; temperature: [batch] fp32 (<= 0: divide
// by 1); seeds, steps: [batch] int64.
VT_EXPORT int vt_sample_rows_gumbel(long long* out, const void* logits, int batch, int vocab, long long ld,
                                    const float* temperature, const long long* seeds, const long long* steps,
                                    int dtype, void* stream) {
  if (batch < 0 || vocab <= 0 || ld < vocab)
    return vt::fail(vt::kBadArgument, "sample_rows: bad sizes batch=%d vocab=%d ld=%lld", batch, vocab, ld);
  if (batch == 0) return vt::kOk;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: return launch<float>(out, logits, batch, vocab, ld, temperature, seeds, steps, s);
    case vt::kBF16: return launch<__nv_bfloat16>(out, logits, batch, vocab, ld, temperature, seeds, steps, s);
    case vt::kF16: return launch<__half>(out, logits, batch, vocab, ld, temperature, seeds, steps, s);
    default: return vt::fail(vt::kBadArgument, "sample_rows: unknown dtype code %d", dtype);
  }
}
