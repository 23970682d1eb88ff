// Launcher for one forward instantiation (the tile configuration per width is FwdConfig in
// fwd_traits.cuh). Included only by the generated instantiation files (and the tuning build of
// csrc/tools/fwd_check.cu), so each kernel is compiled exactly once.
#pragma once
#include <cuda_runtime.h>
#include <limits.h>

#include <atomic>
#include <string>
#include <type_traits>

#include "common/errors.h"
#include "cuda/fwd_args.cuh"
#include "cuda/fwd_kernel.cuh"
#include "cuda/fwd_kernel_fp32.cuh"
#include "cuda/fwd_kernel_sm90.cuh"
#include "cuda/fwd_traits.cuh"

namespace fa {
namespace cuda {

inline fa_status cuda_fail(cudaError_t err, const char* what) {
  return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) + " (" +
                                   what + ")");
}

// Traits with `kSm90 = true` (Sm90FwdTraits) select the wgmma kernel.
template <class Tr, class = void>
struct IsSm90Traits : std::false_type {};
template <class Tr>
struct IsSm90Traits<Tr, std::void_t<decltype(Tr::kSm90)>> : std::bool_constant<Tr::kSm90> {};

template <class Tr>
constexpr auto fwd_kernel_for() {
  if constexpr (IsSm90Traits<Tr>::value)
    return &fwd_kernel_sm90<Tr>;
  else if constexpr (Tr::kIsFp32)
    return &fwd_kernel_fp32<Tr>;
  else
    return &fwd_kernel<Tr>;
}

// Enqueues one forward launch on `stream` (current device). Never synchronises, never allocates.
// The dynamic shared-memory opt-in is set once per (kernel, device); concurrent first calls from
// several host threads may both set it, which is harmless (same value).
template <class Tr>
fa_status launch_fwd(FwdArgs a, cudaStream_t stream) {
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> smem_ready[kMaxDevices];
  const auto kernel = fwd_kernel_for<Tr>();

  a.num_m_blocks = (a.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int64_t blocks = static_cast<int64_t>(a.num_m_blocks) * a.heads * a.batch;
  if (blocks > INT_MAX)
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward: batch * heads * ceil(seqlen_q / " +
                                            std::to_string(Tr::kBlockM) + ") = " + std::to_string(blocks) +
                                            " thread blocks exceeds the grid limit 2^31-1");
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return cuda_fail(err, "cudaGetDevice");
  if (dev >= kMaxDevices || !smem_ready[dev].load(std::memory_order_acquire)) {
    int optin = 0;
    err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err != cudaSuccess) return cuda_fail(err, "cudaDeviceGetAttribute");
    if (Tr::kSmemBytes > optin)
      return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward: head-dim tile " + std::to_string(Tr::kHeadDim) + " needs " +
                                              std::to_string(Tr::kSmemBytes) +
                                              " bytes of shared memory per block; this device allows " +
                                              std::to_string(optin));
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes);
    if (err != cudaSuccess) return cuda_fail(err, "cudaFuncSetAttribute");
    if (dev < kMaxDevices) smem_ready[dev].store(true, std::memory_order_release);
  }
  (void)cudaGetLastError();  // drop a stale non-sticky error so it is not blamed on this launch
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, Tr::kSmemBytes, stream>>>(a);
  err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_fail(err, "fwd launch");
  return FA_OK;
}

template <typename T, int W>
fa_status run_fwd(FwdArgs args, cudaStream_t stream) {
  if constexpr (std::is_same<T, float>::value)
    return launch_fwd<typename Fp32FwdConfig<W>::Traits>(args, stream);
  else
    return launch_fwd<typename FwdConfig<T, W>::Traits>(args, stream);
}

// The Hopper (wgmma) kernel: fp16 / bf16, tile widths 64, 128, 256; launched only on compute
// capability 9.0 by a build that includes sm_90a code (fwd_api.cu decides).
template <typename T, int W>
fa_status run_fwd_sm90(FwdArgs args, cudaStream_t stream) {
  return launch_fwd<Sm90FwdTraits<T, W>>(args, stream);
}

}  // namespace cuda
}  // namespace fa
