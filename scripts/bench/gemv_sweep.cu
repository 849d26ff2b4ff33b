// Tuning sweep for the decode GEMV (bf16, m=1): every variant timed by CUDA-graph replay over rotating W sets.
#include <algorithm>
#include <cstdio>
#include <vector>
#include "../../engine/cuda/gemv.cuh"

using bf = __nv_bfloat16;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1); } } while (0)

__global__ void ref_kernel(float* y, const bf* w, const bf* x, int n, int k) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= n) return;
  double s = 0;
  for (int i = 0; i < k; ++i) s += (double)__bfloat162float(w[(long long)row * k + i]) * __bfloat162float(x[i]);
  y[row] = (float)s;
}
__global__ void fill(bf* p, long long n, unsigned seed, float scale) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)(i * 2654435761ull) ^ seed; h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    p[i] = __float2bfloat16(((h & 0xffff) / 65536.0f - 0.5f) * scale);
  }
}

using Fn = void (*)(bf*, const bf*, const bf*, const bf*, int, int, int, long long, long long, long long, int);
struct Variant { const char* name; Fn fn; int rpw; bool xs; };
#define V(RPW, U, XS, MB) {"rpw" #RPW "_u" #U "_xs" #XS "_mb" #MB, vt_gemv::gemv_vec_kernel<bf, bf, 8, 1, RPW, U, XS, MB>, RPW, XS}

int main() {
  Variant vars[] = {V(1, 4, true, 4), V(1, 2, true, 8), V(1, 2, true, 6), V(1, 3, true, 5), V(1, 4, true, 5),
                    V(2, 4, true, 2), V(2, 2, true, 4), V(2, 2, true, 6), V(1, 8, true, 2), V(1, 6, true, 3),
                    V(1, 4, false, 4)};
  int shapes[][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {1024, 4096}, {2048, 4096}};
  int splits[] = {1, 2, 4, 8};
  cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  // copy ceiling: 1 GiB each way, read + write
  { size_t B = 1ull << 30; void *a, *b; CK(cudaMalloc(&a, B)); CK(cudaMalloc(&b, B));
    float best = 1e9; for (int r = 0; r < 6; ++r) { CK(cudaEventRecord(e0, st)); CK(cudaMemcpyAsync(b, a, B, cudaMemcpyDeviceToDevice, st));
      CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (r) best = std::min(best, ms); }
    printf("copy (read+write) %.3f TB/s\n", 2.0 * B / (best * 1e-3) / 1e12); CK(cudaFree(a)); CK(cudaFree(b)); }
  int sms; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  printf("SMs %d\n", sms);
  for (auto& sh : shapes) {
    int n = sh[0], k = sh[1];
    size_t wbytes = (size_t)n * k * 2;
    int sets = std::max(2, (int)((2 * 64ull * 1024 * 1024 + wbytes - 1) / wbytes));
    std::vector<bf*> W(sets), X(sets); std::vector<bf*> Y(sets);
    for (int s = 0; s < sets; ++s) { CK(cudaMalloc(&W[s], wbytes)); CK(cudaMalloc(&X[s], k * 2)); CK(cudaMalloc(&Y[s], n * 2));
      fill<<<1024, 256>>>(W[s], (long long)n * k, 17 + s, 0.05f); fill<<<64, 256>>>(X[s], k, 99 + s, 2.0f); }
    float* yref; CK(cudaMalloc(&yref, n * 4)); ref_kernel<<<(n + 127) / 128, 128>>>(yref, W[0], X[0], n, k);
    std::vector<float> ref(n); CK(cudaMemcpy(ref.data(), yref, n * 4, cudaMemcpyDeviceToHost));
    int calls = sets * std::max(1, 40 / sets);
    printf("shape n=%d k=%d: %d sets, %d calls per graph, %.1f MB per call\n", n, k, sets, calls, wbytes / 1e6);
    for (auto& v : vars) for (int split : splits) {
      int rows_per_block = vt_gemv::kWarpsPerBlock / split * v.rpw;
      dim3 grid((n + rows_per_block - 1) / rows_per_block), block(vt_gemv::kWarpsPerBlock * 32);
      size_t smem = v.xs ? (size_t)k * 2 : 0;
      v.fn<<<grid, block, smem, st>>>(Y[0], W[0], X[0], nullptr, 1, n, k, k, k, n, split);
      CK(cudaStreamSynchronize(st));
      std::vector<bf> got(n); CK(cudaMemcpy(got.data(), Y[0], n * 2, cudaMemcpyDeviceToHost));
      double maxerr = 0; for (int i = 0; i < n; ++i) maxerr = std::max(maxerr, (double)fabsf(__bfloat162float(got[i]) - ref[i]) / (fabsf(ref[i]) + 1e-2));
      cudaGraph_t g; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      for (int c = 0; c < calls; ++c) { int s = c % sets; v.fn<<<grid, block, smem, st>>>(Y[s], W[s], X[s], nullptr, 1, n, k, k, k, n, split); }
      CK(cudaStreamEndCapture(st, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
      std::vector<float> t;
      for (int r = 0; r < 7; ++r) { CK(cudaEventRecord(e0, st)); CK(cudaGraphLaunch(ge, st)); CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); if (r) t.push_back(ms); }
      std::sort(t.begin(), t.end()); float us = t[t.size() / 2] * 1e3f / calls;
      printf("  %-16s split=%d grid=%6d  %8.2f us  %6.3f TB/s  relerr %.2e\n", v.name, split, grid.x, us, wbytes / (us * 1e-6) / 1e12, maxerr);
      CK(cudaGraphExecDestroy(ge)); CK(cudaGraphDestroy(g));
    }
    for (int s = 0; s < sets; ++s) { cudaFree(W[s]); cudaFree(X[s]); cudaFree(Y[s]); } cudaFree(yref);
  }
  return 0;
}
