// Launchers for one backward instantiation (tile configuration per width: BwdConfig in
// bwd_traits.cuh). Included only by the generated instantiation files (and the tuning build of
// csrc/tools/bwd_check.cu), so each kernel is compiled once.
#pragma once
#include <cuda_runtime.h>
#include <limits.h>
#include <stdlib.h>

#include <atomic>
#include <string>
#ifdef FA_WS_TRACE
#include <algorithm>
#include <cstdio>
#include <vector>
#endif

#include "common/errors.h"
#include "cuda/api_checks.h"
#include "cuda/bwd_args.cuh"
#include "cuda/bwd_kernel.cuh"
#include "cuda/bwd_kernel_sm90.cuh"
#include "cuda/bwd_kernel_sm90_ws.cuh"
#include "cuda/bwd_traits.cuh"

namespace fa {
namespace cuda {

inline fa_status bwd_cuda_fail(cudaError_t err, const char* what) {
  return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err) + " (" +
                                   what + ")");
}

// Raises the kernel's dynamic shared-memory limit once per (kernel, device).
template <class Tr, int kWhich>
fa_status bwd_smem_optin(const void* kernel, int bytes) {
  static std::atomic<bool> ready[kMaxDevices];
  return smem_optin(kernel, bytes, "CUDA backward", Tr::kHeadDim, ready);
}

// Thread blocks of a main kernel (one per key block of bn keys, kv head and batch sequence), or
// FA_ERR_UNSUPPORTED past the grid limit.
inline fa_status bwd_key_blocks(BwdArgs* a, int bm, int bn, int64_t* blocks) {
  a->num_m_blocks = (a->seqlen_q + bm - 1) / bm;
  a->num_n_blocks = (a->seqlen_k + bn - 1) / bn;
  *blocks = static_cast<int64_t>(a->num_n_blocks) * a->heads_k * a->batch;
  if (*blocks > INT_MAX)
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA backward: batch * heads_k * ceil(seqlen_k / " + std::to_string(bn) +
                                            ") = " + std::to_string(*blocks) +
                                            " thread blocks exceeds the grid limit 2^31-1");
  return FA_OK;
}

// Main kernel (dK, dV; dQ atomics when kAtomicDQ). Never synchronises, never allocates.
template <class Tr, bool kAtomicDQ>
fa_status launch_bwd_main(BwdArgs a, cudaStream_t stream) {
  int64_t blocks = 0;
  const fa_status gs = bwd_key_blocks(&a, Tr::kBlockM, Tr::kBlockN, &blocks);
  if (gs != FA_OK || blocks == 0) return gs;
  const auto kernel = &bwd_main_kernel<Tr, kAtomicDQ>;
  fa_status st = bwd_smem_optin<Tr, kAtomicDQ ? 1 : 0>(reinterpret_cast<const void*>(kernel), Tr::kSmemMain);
  if (st != FA_OK) return st;
  (void)cudaGetLastError();  // drop a stale non-sticky error so it is not blamed on this launch
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, Tr::kSmemMain, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return bwd_cuda_fail(err, "bwd main launch");
  return FA_OK;
}

// Deterministic dQ kernel.
template <class Tr>
fa_status launch_bwd_dq(BwdArgs a, cudaStream_t stream) {
  a.num_m_blocks = (a.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  a.num_n_blocks = (a.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
  const int64_t blocks = static_cast<int64_t>(a.num_m_blocks) * a.heads * a.batch;
  if (blocks == 0) return FA_OK;
  if (blocks > INT_MAX)
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA backward: batch * heads * ceil(seqlen_q / " +
                                            std::to_string(Tr::kBlockM) + ") = " + std::to_string(blocks) +
                                            " thread blocks exceeds the grid limit 2^31-1");
  const auto kernel = &bwd_dq_kernel<Tr>;
  fa_status st = bwd_smem_optin<Tr, 2>(reinterpret_cast<const void*>(kernel), Tr::kSmemDq);
  if (st != FA_OK) return st;
  (void)cudaGetLastError();
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, Tr::kSmemDq, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return bwd_cuda_fail(err, "bwd dq launch");
  return FA_OK;
}

// Shared memory per block this device allows (opt-in), cached per device.
inline fa_status bwd_device_smem(int* bytes) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return bwd_cuda_fail(err, "cudaGetDevice");
  if (dev < kMaxDevices) {
    const int c = cache[dev].load(std::memory_order_relaxed);
    if (c > 0) {
      *bytes = c;
      return FA_OK;
    }
  }
  int optin = 0;
  err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (err != cudaSuccess) return bwd_cuda_fail(err, "cudaDeviceGetAttribute");
  // Testing knob: FA_BWD_SMEM_LIMIT=<bytes> makes a large-memory GPU pick the configurations of a
  // smaller one (e.g. 166912 = sm_80's limit selects the single-buffered kernels).
  static const int limit = env_int("FA_BWD_SMEM_LIMIT", 0);
  if (limit > 0 && optin > limit) optin = limit;
  if (dev < kMaxDevices) cache[dev].store(optin, std::memory_order_relaxed);
  *bytes = optin;
  return FA_OK;
}

inline fa_status bwd_no_fit(int width, int need, int have) {
  return fa::fail(FA_ERR_UNSUPPORTED, "CUDA backward: head-dim tile " + std::to_string(width) + " needs " +
                                          std::to_string(need) + " bytes of shared memory per block; this device allows " +
                                          std::to_string(have));
}

// Double-buffered configuration where the device has the shared memory (sm_90: 227 KB), else the
// single-buffered one (sm_80: 163 KB), else FA_ERR_UNSUPPORTED (sm_86 / sm_89: 99 KB).
template <class Tr>
fa_status launch_bwd_atomic(const BwdArgs& a, cudaStream_t stream) {
  using Tr1 = typename Tr::SingleStage;
  int smem = 0;
  const fa_status st = bwd_device_smem(&smem);
  if (st != FA_OK) return st;
  if (Tr::kSmemMain <= smem) return launch_bwd_main<Tr, true>(a, stream);
  if (Tr1::kSmemMain <= smem) return launch_bwd_main<Tr1, true>(a, stream);
  return bwd_no_fit(Tr::kHeadDim, Tr1::kSmemMain, smem);
}
template <class Tr>
fa_status launch_bwd_det(const BwdArgs& a, cudaStream_t stream) {
  using Tr1 = typename Tr::SingleStage;
  int smem = 0;
  fa_status st = bwd_device_smem(&smem);
  if (st != FA_OK) return st;
  if (Tr::kSmemMain <= smem)
    st = launch_bwd_main<Tr, false>(a, stream);
  else if (Tr1::kSmemMain <= smem)
    st = launch_bwd_main<Tr1, false>(a, stream);
  else
    return bwd_no_fit(Tr::kHeadDim, Tr1::kSmemMain, smem);
  if (st != FA_OK) return st;
  if (Tr::kSmemDq <= smem) return launch_bwd_dq<Tr>(a, stream);
  if (Tr1::kSmemDq <= smem) return launch_bwd_dq<Tr1>(a, stream);
  return bwd_no_fit(Tr::kHeadDim, Tr1::kSmemDq, smem);
}

#if FA_WS_LPT
// FA_WS_LPT builds: sections of (batch, kv head) pairs for bwd_block_of's longest-first order of
// causal dense calls (lpt.cuh), each pair's streamed rows counted: Q and dO of its query heads, and
// the fp32 dQ rows it adds into.
inline int bwd_lpt_groups(const BwdArgs& a) {
  if (!a.causal || a.cu_seqlens_q != nullptr || a.window_left >= 0) return 0;
  return lpt_section_pairs(int64_t(a.heads_k) * a.batch, int64_t(a.seqlen_q) * a.group * a.head_dim * (2 + 2 + 4), 1);
}
#endif

// The Hopper main kernel (atomic dQ); launched only where sm90_kernels_usable() (bwd_api.cu decides).
template <typename T, int W>
fa_status run_bwd_sm90(BwdArgs a, cudaStream_t stream) {
  using Tr = Sm90BwdTraits<T, W>;
  int64_t blocks = 0;
  const fa_status gs = bwd_key_blocks(&a, Tr::kBlockM, Tr::kBlockN, &blocks);
  if (gs != FA_OK || blocks == 0) return gs;
#if FA_WS_LPT
  a.lpt_groups = bwd_lpt_groups(a);
#endif
  const auto kernel = &bwd_kernel_sm90<Tr>;
  const fa_status st = bwd_smem_optin<Tr, 3>(reinterpret_cast<const void*>(kernel), Tr::kSmemBytes);
  if (st != FA_OK) return st;
  (void)cudaGetLastError();
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, Tr::kSmemBytes, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return bwd_cuda_fail(err, "bwd sm90 launch");
  return FA_OK;
}

#ifdef FA_WS_TRACE
// FA_WS_TRACE builds: after every FA_WS_TRACE_EVERY-th launch of an instantiation (default 50; the
// stream is synchronised there, so that launch is no performance figure), the timeline of its blocks
// (bwd_kernel_sm90_ws.cuh, g_bwd_trace; the key split's, W 64 / 128), means in microseconds per block:
// fill (entry -> K / V landed), walk (-> the last row block done) and per row block, the dK / dV
// epilogue's issue, the dQ writer's tail after it, the whole block, and the gap from a block's last
// mark to the entry of the next block on the same SM (launch, teardown, stores draining).
inline void bwd_trace_report(cudaStream_t stream, void* trace, int W, int walk, int64_t blocks) {
  static unsigned long long h[kBwdTraceCtas][kBwdTraceFields];
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) e = cudaMemcpy(h, trace, sizeof(h), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    fprintf(stderr, "fa bwd trace: %s\n", cudaGetErrorName(e));
    (void)cudaGetLastError();
    return;
  }
  const int n = static_cast<int>(std::min<int64_t>(blocks, kBwdTraceCtas));
  double fill = 0, walk_ns = 0, rows = 0, epi = 0, tail = 0, span = 0, gap = 0;
  long nb = 0, ng = 0;
  std::vector<std::vector<int>> by_sm(1024);
  auto end_of = [&](int c) { return std::max(h[c][3], h[c][4]); };
  for (int c = 0; c < n; ++c) {
    const unsigned long long* t = h[c];
    if (t[0] == 0 || t[1] == 0 || t[2] == 0 || t[3] == 0) continue;  // not reached, or the row split
    ++nb;
    fill += double(t[1] - t[0]);
    walk_ns += double(t[2] - t[1]);
    rows += double(t[6]);
    epi += double(t[3] - t[2]);
    tail += double(end_of(c) - t[3]);
    span += double(end_of(c) - t[0]);
    if (t[5] < by_sm.size()) by_sm[t[5]].push_back(c);
  }
  for (auto& v : by_sm) {
    std::sort(v.begin(), v.end(), [&](int x, int y) { return h[x][0] < h[y][0]; });
    for (size_t i = 1; i < v.size(); ++i, ++ng)
      gap += double(static_cast<long long>(h[v[i]][0]) - static_cast<long long>(end_of(v[i - 1])));
  }
  if (nb == 0) return;
  const double us = 1e-3 / double(nb);
  fprintf(stderr,
          "fa bwd trace: W %d walk %d, %ld of %lld blocks; us per block: fill %.2f, walk %.2f (%.2f row blocks, %.3f each), "
          "epilogue issue %.2f, dQ writer tail %.2f, block %.2f; gap to the next block on its SM %.2f (%ld gaps)\n",
          W, walk, nb, static_cast<long long>(blocks), fill * us, walk_ns * us, rows / double(nb), rows > 0 ? walk_ns * 1e-3 / rows : 0.0,
          epi * us, tail * us, span * us, ng > 0 ? gap * 1e-3 / double(ng) : 0.0, ng);
}
#endif

// The warp-specialised Hopper main kernel (dense, atomic dQ; bwd_api.cu decides and encodes the maps).
template <typename T, int W>
fa_status run_bwd_sm90_ws(BwdTmaArgs ta, cudaStream_t stream) {
  using Tr = Sm90BwdWsTraits<T, W>;
  BwdArgs& a = ta.a;
  int64_t blocks = 0;
  const fa_status gs = bwd_key_blocks(&a, Tr::kBlockM, Tr::kBlockN, &blocks);
  if (gs != FA_OK || blocks == 0) return gs;
#if FA_WS_LPT
  a.lpt_groups = bwd_lpt_groups(a);
#endif
  // Deterministic calls without a mask: rotated walks (bwd_det_rank_rot) for heads of at most an eighth
  // as many key blocks as the GPU has SMs. Unlike the plain ranks, a rotated key block can wait for a
  // block of its head with a higher index; the kernel finishes once each head's blocks can all be
  // resident, which holds alone on the GPU for any head that fits; with kernels of other processes
  // sharing the SMs (MPS), each rotated kernel holds at most one partly dispatched head of spinning
  // blocks, so with heads of <= SMs / 8 key blocks it takes nine such kernels at once to fill the GPU
  // with waiting blocks. The bound also keeps to the measured case (N 1k: 8 and 16 key blocks), where a
  // head fits in one wave with the others. FA_BWD_DET_ROT=0 keeps the plain walks everywhere.
  static const bool rot_off = env_flag("FA_BWD_DET_ROT", 1) == 0;
  ta.det_rot = 0;
  if (a.dq_sem != nullptr && !rot_off && !a.causal && a.window_left < 0) ta.det_rot = 8 * a.num_n_blocks <= sm_count() ? 1 : 0;
  // The walk (bwd_kernel_sm90_ws.cuh): the overlapped one at W 128 without a score modifier
  // (+2-4% at N >= 4k), else the plain one (W 64: the overlapped one is 2-3% slower; NOTES-bwd.md).
  // FA_BWD_WS_OVERLAP=0 / 1 (ta.overlap) fixes the choice where the walk can run (comparisons).
  // The row split (W 256) has one walk.
  const int walk = Tr::kRowSplit || a.softcap > 0.f ? 0 : ta.overlap >= 0 ? ta.overlap : W == 128 ? 1 : 0;
  auto kernel = &bwd_kernel_sm90_ws<Tr, 0>;
  if constexpr (!Tr::kRowSplit) {
    if (walk == 1) kernel = &bwd_kernel_sm90_ws<Tr, 1>;
  }
  const void* kp = reinterpret_cast<const void*>(kernel);
  const fa_status st = walk == 1 ? bwd_smem_optin<Tr, 5>(kp, Tr::kSmemBytes) : bwd_smem_optin<Tr, 4>(kp, Tr::kSmemBytes);
  if (st != FA_OK) return st;
  (void)cudaGetLastError();
#ifdef FA_WS_TRACE
  static void* trace = [] {
    void* p = nullptr;
    return cudaGetSymbolAddress(&p, g_bwd_trace) == cudaSuccess ? p : nullptr;
  }();
  static std::atomic<int> launches{0};
  static const int every = std::max(1, env_int("FA_WS_TRACE_EVERY", 50));
  if (trace != nullptr) (void)cudaMemsetAsync(trace, 0, sizeof(g_bwd_trace), stream);
#endif
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, Tr::kSmemBytes, stream>>>(ta);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return bwd_cuda_fail(err, "bwd sm90 launch (warp-specialised)");
#ifdef FA_WS_TRACE
  if (trace != nullptr && ++launches % every == 0) bwd_trace_report(stream, trace, W, walk, blocks);
#endif
  return FA_OK;
}

template <typename T, int W>
fa_status run_bwd_atomic(BwdArgs args, cudaStream_t stream) {
  return launch_bwd_atomic<typename BwdConfig<T, W>::Traits>(args, stream);
}
template <typename T, int W>
fa_status run_bwd_det(BwdArgs args, cudaStream_t stream) {
  return launch_bwd_det<typename BwdConfig<T, W>::Traits>(args, stream);
}

}  // namespace cuda
}  // namespace fa
