// Test and benchmark hooks. fa_internal_debug_fault: a kernel that traps, for tests of how a failure inside queued work surfaces (see
// debugFault in csrc/binding/tensors.cpp). Never used by the attention paths.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include <string>

#include "common/errors.h"
#include "fa_core.h"

namespace {
__global__ void fa_trap_kernel() { __trap(); }
}  // namespace

extern "C" fa_status fa_internal_debug_fault(void* stream) {
  fa_trap_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>();
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(e)) + ": debug fault launch");
  return FA_OK;
}

// Benchmark hook: fills n elements (fp32 / fp16 / bf16) with approximately standard-normal values
// from a counter-based hash (sum of 4 uniforms, centred and scaled), so large inputs need not be
// generated on the host. Never used by the attention paths.
namespace {
__device__ __forceinline__ uint32_t fa_hash(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}
template <typename T>
__global__ void fa_fill_kernel(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t base = fa_hash(static_cast<uint32_t>(i) ^ fa_hash(seed ^ static_cast<uint32_t>(i >> 32)));
    float s = 0.f;
    for (int j = 0; j < 4; ++j) s += (fa_hash(base + 0x9e3779b9u * j) >> 8) * (1.f / 16777216.f);
    const float v = (s - 2.f) * 1.7320508f;  // variance of a sum of 4 uniforms is 1/3
    if constexpr (sizeof(T) == 4) p[i] = v;
    else if constexpr (std::is_same<T, __half>::value) p[i] = __float2half_rn(v);
    else p[i] = __float2bfloat16_rn(v);
  }
}
}  // namespace

extern "C" fa_status fa_internal_fill_random(void* ptr, size_t n, int dtype, unsigned seed, void* stream) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = static_cast<unsigned>(n / 256 + 1 > 65535 ? 65535 : n / 256 + 1);
  if (dtype == FA_FLOAT32) fa_fill_kernel<float><<<blocks, 256, 0, s>>>(static_cast<float*>(ptr), n, seed);
  else if (dtype == FA_FLOAT16) fa_fill_kernel<__half><<<blocks, 256, 0, s>>>(static_cast<__half*>(ptr), n, seed);
  else fa_fill_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>(static_cast<__nv_bfloat16*>(ptr), n, seed);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(e)) + ": fill launch");
  return FA_OK;
}
