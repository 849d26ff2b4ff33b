// Launchers for greedy argmax and top-k/top-p sampling: argument checks, dtype dispatch (0=fp32, 1=bf16, 2=fp16).
#include "sample.cuh"

namespace {

constexpr int kMaxGridY = 65535;  // CUDA's limit on gridDim.y, which indexes the rows in argmax pass 1

int check_logits(int batch, int vocab, long long ld) {
  if (batch < 0) return vt::fail(vt::kBadArgument, "sample: batch must be >= 0 (got %d)", batch);
  if (vocab <= 0) return vt::fail(vt::kBadArgument, "sample: vocab must be > 0 (got %d)", vocab);
  if (ld < vocab) return vt::fail(vt::kBadArgument, "sample: logits row stride %lld < vocab %d", ld, vocab);
  return vt::kOk;
}

template <typename T>
void launch_argmax(long long* out, float* part_val, int* part_idx, const void* logits, int batch, int vocab,
                   long long ld, cudaStream_t stream) {
  const int chunks = vt::ceil_div(vocab, vt_sample::kArgmaxChunk);
  vt_sample::argmax_partial_kernel<T><<<dim3(chunks, batch), vt_sample::kArgmaxThreads, 0, stream>>>(
      part_val, part_idx, static_cast<const T*>(logits), vocab, ld);
  vt_sample::argmax_final_kernel<<<batch, vt_sample::kArgmaxThreads, 0, stream>>>(out, part_val, part_idx, chunks);
}

template <typename T>
void launch_top_k_top_p(long long* out, const void* logits, int batch, int vocab, long long ld, const int* top_k,
                        const float* top_p, const float* temperature, unsigned long long seed, cudaStream_t stream) {
  vt_sample::top_k_top_p_kernel<T><<<batch, vt_sample::kSampleThreads, 0, stream>>>(
      out, static_cast<const T*>(logits), vocab, ld, top_k, top_p, temperature, seed);
}

}  // namespace

VT_DEFINE_LAST_ERROR(sample)

// Entries of the pass-1 workspace per row: part_val (fp32) and part_idx (int32) each hold batch * this many.
VT_EXPORT int vt_sample_argmax_chunks(int vocab) {
  return vocab <= 0 ? 0 : vt::ceil_div(vocab, vt_sample::kArgmaxChunk);
}

// out: [batch] int64; part_val: [batch, chunks] fp32; part_idx: [batch, chunks] int32;
// logits: [batch, vocab] (row stride ld, last dim contiguous)
VT_EXPORT int vt_sample_argmax(long long* out, float* part_val, int* part_idx, const void* logits, int batch,
                               int vocab, long long ld, int dtype, void* stream) {
  if (int rc = check_logits(batch, vocab, ld)) return rc;
  if (batch > kMaxGridY) return vt::fail(vt::kBadArgument, "sample: argmax batch %d > %d", batch, kMaxGridY);
  if (batch == 0) return vt::kOk;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: launch_argmax<float>(out, part_val, part_idx, logits, batch, vocab, ld, s); break;
    case vt::kBF16: launch_argmax<__nv_bfloat16>(out, part_val, part_idx, logits, batch, vocab, ld, s); break;
    case vt::kF16: launch_argmax<__half>(out, part_val, part_idx, logits, batch, vocab, ld, s); break;
    default: return vt::fail(vt::kUnsupported, "sample: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
  return vt::launch_status("vt_sample_argmax");
}

// out: [batch] int64; logits: [batch, vocab] (row stride ld); top_k: [batch] int32; top_p, temperature: [batch]
// fp32 (device pointers; the values are checked by the binding); seed: any 64 bits
VT_EXPORT int vt_sample_top_k_top_p(long long* out, const void* logits, int batch, int vocab, long long ld,
                                    const int* top_k, const float* top_p, const float* temperature,
                                    long long seed, int dtype, void* stream) {
  if (int rc = check_logits(batch, vocab, ld)) return rc;
  if (batch == 0) return vt::kOk;
  const auto bits = static_cast<unsigned long long>(seed);  // the seed's 64 bits, whatever their sign
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case vt::kF32: launch_top_k_top_p<float>(out, logits, batch, vocab, ld, top_k, top_p, temperature, bits, s); break;
    case vt::kBF16:
      launch_top_k_top_p<__nv_bfloat16>(out, logits, batch, vocab, ld, top_k, top_p, temperature, bits, s);
      break;
    case vt::kF16:
      launch_top_k_top_p<__half>(out, logits, batch, vocab, ld, top_k, top_p, temperature, bits, s);
      break;
    default: return vt::fail(vt::kUnsupported, "sample: dtype code %d is not 0 (fp32), 1 (bf16) or 2 (fp16)", dtype);
  }
  return vt::launch_status("vt_sample_top_k_top_p");
}
