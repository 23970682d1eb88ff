// Test hook: a kernel that traps, for tests of how a failure inside queued work surfaces (see
// debugFault in csrc/binding/tensors.cpp). Never used by the attention paths.
#include <cuda_runtime.h>

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
