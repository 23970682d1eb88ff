// Argument checks shared by fa_fwd_cuda and fa_bwd_cuda (host code). Each returns FA_OK or the
// failing status with the message set through fa::fail (fa_last_error).
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>

#include <cmath>
#include <string>

#include "common/errors.h"
#include "fa_core.h"

namespace fa {
namespace cuda {

// Development switches read from the environment (comparisons and tests; each caller reads its
// own once and keeps it): the text of `name` (null when unset or empty), a 0 / 1 flag (anything
// not starting with '0' is 1), an integer, or whether the text is `value`.
inline const char* env_text(const char* name) {
  const char* e = getenv(name);
  return e != nullptr && e[0] != '\0' ? e : nullptr;
}
inline int env_flag(const char* name, int def) {
  const char* e = env_text(name);
  return e == nullptr ? def : (e[0] == '0' ? 0 : 1);
}
inline int env_int(const char* name, int def) {
  const char* e = env_text(name);
  return e == nullptr ? def : atoi(e);
}
inline bool env_is(const char* name, const char* value) {
  const char* e = env_text(name);
  return e != nullptr && std::string(e) == value;
}

// Multiprocessors of the current device (cached per device; 108 where it cannot be read).
inline int sm_count() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return 108;
  int v = dev < kMaxDevices ? cache[dev].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) v = 108;
    if (dev < kMaxDevices) cache[dev].store(v, std::memory_order_relaxed);
  }
  return v;
}

// The Hopper (wgmma) kernels run where the build has sm_90a code (FA_HAVE_SM90A: FA_CUDA_ARCHS lists
// 90a) and the current device is compute capability 9.0 exactly (sm_90a code runs nowhere else);
// FA_NO_WGMMA=1 in the environment keeps the mma.sync kernels (for comparisons).
inline bool sm90_kernels_usable() {
#if defined(FA_HAVE_SM90A)
  static const bool disabled = env_flag("FA_NO_WGMMA", 0) != 0;
  if (disabled) return false;
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cc[kMaxDevices];  // 0 = not yet read, else major * 10 + minor
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return false;
  int v = dev < kMaxDevices ? cc[dev].load(std::memory_order_relaxed) : 0;
  if (v == 0) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
      return false;
    v = major * 10 + minor;
    if (dev < kMaxDevices) cc[dev].store(v, std::memory_order_relaxed);
  }
  return v == 90;
#else
  return false;
#endif
}

// Whether launch_pdl asks for programmatic dependent launch: where the Hopper kernels run, unless
// FA_PDL=0 (plain stream order, for comparisons).
inline bool pdl_usable() {
  static const bool on = env_flag("FA_PDL", 1) != 0;
  return on && sm90_kernels_usable();
}

// FA_PROFILE_HOST=1: host time inside cudaLaunchKernelEx (launch_pdl_if), read by
// fa_profile_launches (issue 10's per-call cost: the launch's share of the core call).
struct LaunchProfile {
  bool on = env_flag("FA_PROFILE_HOST", 0) != 0;
  std::atomic<long long> ns{0};
  std::atomic<long> count{0};
};
LaunchProfile& launch_profile();  // fwd_api.cu

// Launches `kernel` with programmatic dependent launch when `pdl` (and pdl_usable()): its blocks
// may be scheduled while the previous kernel on the stream finishes (the launch latency between
// the decode kernel and its combine, and between back-to-back calls, overlaps). The kernel
// must call pdl_wait() (ptx.cuh) before it reads or writes global memory.
template <typename... Params, typename... Args>
cudaError_t launch_pdl_if(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl && pdl_usable() ? 1 : 0;
  LaunchProfile& prof = launch_profile();
  const auto t0 = prof.on ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, static_cast<Args&&>(args)...);
  if (prof.on) {
    prof.ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    ++prof.count;
  }
  if (e != cudaSuccess) (void)cudaGetLastError();  // reported by the caller, not left for the next call
  return e;
}

template <typename... Params, typename... Args>
cudaError_t launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
  return launch_pdl_if(true, kernel, grid, block, smem, stream, static_cast<Args&&>(args)...);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

inline bool strides_ok(const fa_strides& s, int vec) {
  return s.batch % vec == 0 && s.row % vec == 0 && s.head % vec == 0;
}

inline const char* dtype_name(fa_dtype d) {
  switch (d) {
    case FA_FLOAT32: return "float32";
    case FA_FLOAT16: return "float16";
    case FA_BFLOAT16: return "bfloat16";
  }
  return "unknown";
}

// dtype, sizes, the GQA ratio, the head dim, a compiled tile width for it and a finite scale, in
// that order. fn: the entry point ("fa_fwd_cuda"); what: the pass ("CUDA forward"); width: the
// caller's smallest compiled tile width >= head_dim for this dtype (0 when none).
inline fa_status check_common_args(const char* fn, const char* what, fa_dtype dtype, int batch, int seqlen_q,
                                   int seqlen_k, int heads, int heads_k, int head_dim, float scale, int width) {
  const std::string f(fn);
  if (dtype != FA_FLOAT32 && dtype != FA_FLOAT16 && dtype != FA_BFLOAT16)
    return fa::fail(FA_ERR_INVALID, f + ": unknown dtype " + std::to_string(static_cast<int>(dtype)));
  if (batch < 0 || seqlen_q < 0 || seqlen_k < 0 || heads < 0 || heads_k <= 0)
    return fa::fail(FA_ERR_INVALID, f + ": negative size (batch " + std::to_string(batch) + ", seqlen_q " +
                                        std::to_string(seqlen_q) + ", seqlen_k " + std::to_string(seqlen_k) +
                                        ", heads " + std::to_string(heads) + ", heads_k " + std::to_string(heads_k) +
                                        ")");
  if (heads % heads_k != 0)
    return fa::fail(FA_ERR_INVALID, f + ": heads (" + std::to_string(heads) + ") must be a multiple of heads_k (" +
                                        std::to_string(heads_k) + ")");
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0)
    return fa::fail(FA_ERR_UNSUPPORTED, std::string(what) +
                                            " supports head_dim = 8, 16, ..., 256 (a multiple of 8); got " +
                                            std::to_string(head_dim));
  if (width == 0)
    return fa::fail(FA_ERR_UNSUPPORTED, std::string(what) + ": this build has no " + dtype_name(dtype) +
                                            " kernel for head_dim " + std::to_string(head_dim) +
                                            " (head-dim tiles limited by FA_HEAD_DIMS at build time)");
  if (!std::isfinite(scale)) return fa::fail(FA_ERR_INVALID, f + ": scale must be finite, got " + std::to_string(scale));
  return FA_OK;
}

// The mask of a call in the kernels' form: the window sides (-1 = unbounded), causal folded in as
// window_right = 0 (both may be given: the tighter bound wins, and causal is the tightest).
inline void kernel_window(int causal, int has_window, int left, int right, int* out_left, int* out_right) {
  *out_left = has_window && left >= 0 ? left : -1;
  *out_right = causal ? 0 : has_window && right >= 0 ? right : -1;
}

// Raises a kernel's dynamic shared-memory limit once per (kernel, device): `ready` is the
// kernel's own per-device flag array (kMaxDevices entries). what: "CUDA forward" etc.
constexpr int kMaxDevices = 64;
template <class Kernel>
fa_status smem_optin(Kernel kernel, int bytes, const char* what, int width, std::atomic<bool>* ready) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess)
    return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) + " (cudaGetDevice)");
  if (dev < kMaxDevices && ready[dev].load(std::memory_order_acquire)) return FA_OK;
  int optin = 0;
  err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err != cudaSuccess)
    return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) +
                                     " (cudaDeviceGetAttribute)");
  if (bytes > optin)
    return fa::fail(FA_ERR_UNSUPPORTED, std::string(what) + ": head-dim tile " + std::to_string(width) + " needs " +
                                            std::to_string(bytes) + " bytes of shared memory per block; this device allows " +
                                            std::to_string(optin));
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess)
    return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) +
                                     " (cudaFuncSetAttribute)");
  if (dev < kMaxDevices) ready[dev].store(true, std::memory_order_release);
  return FA_OK;
}

}  // namespace cuda
}  // namespace fa
