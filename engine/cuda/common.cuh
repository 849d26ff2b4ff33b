// Shared launcher helpers: exported symbols, the per-library last-error message, dtype codes, launch status.
#pragma once

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define VT_EXPORT extern "C" __attribute__((visibility("default")))

// Each .cu defines `vt_<family>_last_error()` with this macro; the binding reads it after a nonzero code.
#define VT_DEFINE_LAST_ERROR(family) \
  VT_EXPORT const char* vt_##family##_last_error() { return vt::error_buffer(); }

namespace vt {

// Dtype codes shared with engine/cuda/ffi.py.
enum DType : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

// Error codes returned by launchers before any launch (a CUDA error is returned as its own code).
enum Status : int { kOk = 0, kBadArgument = 1000, kUnsupported = 1001 };

inline char* error_buffer() {
  static thread_local char buf[512] = {0};
  return buf;
}

// Record a message for the binding and return `code`.
inline int fail(int code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(error_buffer(), 512, fmt, args);
  va_end(args);
  return code;
}

// The launch result: the last CUDA error with its name recorded, or kOk.
inline int launch_status(const char* what) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(static_cast<int>(err), "%s: %s", what, cudaGetErrorString(err));
  error_buffer()[0] = 0;
  return kOk;
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }

// fp32 <-> storage type conversions used by every kernel (accumulation is always fp32).
template <typename T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half(x); }

}  // namespace vt
