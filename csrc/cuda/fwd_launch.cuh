// Launcher for one forward instantiation (the tile configuration per width is FwdConfig in
// fwd_traits.cuh). Included only by the generated instantiation files (and the tuning build of
// csrc/tools/fwd_check.cu), so each kernel is compiled exactly once.
#pragma once
#include <cuda_runtime.h>
#include <limits.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "common/errors.h"
#include "cuda/api_checks.h"
#include "cuda/fwd_args.cuh"
#include "cuda/fwd_decode.cuh"
#include "cuda/fwd_kernel.cuh"
#include "cuda/fwd_kernel_fp32.cuh"
#include "cuda/fwd_kernel_sm90.cuh"
#include "cuda/fwd_kernel_sm90_ws.cuh"
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

template <class Tr, bool kPaged>
constexpr auto fwd_kernel_for() {
  if constexpr (IsSm90Traits<Tr>::value)
    return &fwd_kernel_sm90<Tr, kPaged>;
  else if constexpr (Tr::kIsFp32)
    return &fwd_kernel_fp32<Tr, kPaged>;
  else
    return &fwd_kernel<Tr, kPaged>;
}

// Enqueues one forward launch on `stream` (current device). Never synchronises, never allocates.
// The dynamic shared-memory opt-in is set once per (kernel, device); concurrent first calls from
// several host threads may both set it, which is harmless (same value).
template <class Tr, bool kPaged>
fa_status launch_fwd(FwdArgs a, cudaStream_t stream) {
  static std::atomic<bool> smem_ready[kMaxDevices];
  const auto kernel = fwd_kernel_for<Tr, kPaged>();

  a.num_m_blocks = (a.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int64_t blocks = static_cast<int64_t>(a.num_m_blocks) * a.heads * a.batch;
  if (blocks == 0) return FA_OK;
  if (blocks > INT_MAX)
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward: batch * heads * ceil(seqlen_q / " +
                                            std::to_string(Tr::kBlockM) + ") = " + std::to_string(blocks) +
                                            " thread blocks exceeds the grid limit 2^31-1");
  // Paged fp16 / bf16 kernels keep their page-index ring after the tiles (PageRing, fwd_common.cuh).
  constexpr int kSmem = Tr::kSmemBytes + (kPaged && !Tr::kIsFp32 ? PageRing<Tr::kBlockN, Tr::kThreads>::kBytes : 0);
  const fa_status st = smem_optin(kernel, kSmem, "CUDA forward", Tr::kHeadDim, smem_ready);
  if (st != FA_OK) return st;
  (void)cudaGetLastError();  // drop a stale non-sticky error so it is not blamed on this launch
  kernel<<<static_cast<unsigned>(blocks), Tr::kThreads, kSmem, stream>>>(a);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_fail(err, "fwd launch");
  return FA_OK;
}

template <typename T, int W, bool kPaged>
fa_status run_fwd(FwdArgs args, cudaStream_t stream) {
  if constexpr (std::is_same<T, float>::value)
    return launch_fwd<typename Fp32FwdConfig<W>::Traits, kPaged>(args, stream);
  else
    return launch_fwd<typename FwdConfig<T, W>::Traits, kPaged>(args, stream);
}

// The Hopper (wgmma) kernel: fp16 / bf16, tile widths 64, 128, 256; launched only on compute
// capability 9.0 by a build that includes sm_90a code (fwd_api.cu decides).
template <typename T, int W, bool kPaged>
fa_status run_fwd_sm90(FwdArgs args, cudaStream_t stream) {
  return launch_fwd<Sm90FwdTraits<T, W>, kPaged>(args, stream);
}

#ifdef FA_WS_TRACE
// FA_WS_TRACE builds: a trace buffer's device address (nullptr when it cannot be had), and how
// often a launch is reported (FA_WS_TRACE_EVERY, default every 50th).
template <class Buffer>
void* trace_buffer(const Buffer& symbol) {
  void* p = nullptr;
  return cudaGetSymbolAddress(&p, symbol) == cudaSuccess ? p : nullptr;
}
inline int trace_every() {
  static const int every = std::max(1, env_int("FA_WS_TRACE_EVERY", 50));
  return every;
}
// Waits for the stream and copies a trace buffer back into `host`; false (with the CUDA error
// printed as `what: name`) when either fails.
inline bool trace_read(cudaStream_t stream, void* trace, void* host, size_t bytes, const char* what) {
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) e = cudaMemcpy(host, trace, bytes, cudaMemcpyDeviceToHost);
  if (e == cudaSuccess) return true;
  fprintf(stderr, "%s: %s\n", what, cudaGetErrorName(e));
  (void)cudaGetLastError();
  return false;
}

// FA_WS_TRACE builds: after every FA_WS_TRACE_EVERY-th launch of an instantiation (default 50; the
// stream is synchronised there, so its timing is not a performance figure), the split of that
// launch's tiles (fwd_kernel_sm90_ws.cuh, g_ws_trace), in SM cycles per consumer warpgroup:
// hand-over (previous tile's epilogue done -> this tile's Q-full wait passed), fill (-> first key
// block's softmax done; a block's first tile left out: launch and cold caches), steady key blocks
// (-> last P V done, per block after the first, the trailing P V included), epilogue (-> O
// written), and what a tile costs beyond its key blocks at the steady rate, in key blocks.
template <class Tr, bool kPaged>
void ws_trace_report(cudaStream_t stream, void* trace) {
  static long long h[kTraceCtas][kTraceTiles][kTraceWgs][kTraceFields];
  if (!trace_read(stream, trace, h, sizeof(h), "fa ws trace")) return;
  double gap = 0, fill = 0, steady = 0, steady_blocks = 0, epi = 0, nb = 0;
  long n_gap = 0, n = 0, n_fill = 0;
  for (int c = 0; c < kTraceCtas; ++c)
    for (int w = 0; w < Tr::kConsumers; ++w)
      for (int j = 0; j < kTraceTiles; ++j) {
        const long long* t = h[c][j][w];
        if (t[0] == 0 || t[3] == 0 || t[4] <= 0) continue;  // not reached, or an idle tile
        ++n;
        epi += double(t[3] - t[2]);
        nb += double(t[4]);
        steady += double(t[2] - t[1]), steady_blocks += double(t[4] - 1);
        if (j > 0) fill += double(t[1] - t[0]), ++n_fill;
        if (j > 0 && h[c][j - 1][w][3] != 0) gap += double(t[0] - h[c][j - 1][w][3]), ++n_gap;
      }
  if (n == 0) return;
  // The per-step split of the second tiles' steady steps (g_ws_btrace): means over the steps that
  // have both their own marks and the next step's top.
  static long long hb[kTraceCtas][kBTraceBlocks][kTraceWgs][kBTraceFields];
  static void* btrace = trace_buffer(g_ws_btrace);
  if (btrace != nullptr && trace_read(stream, btrace, hb, sizeof(hb), "fa ws block trace")) {
    double d[kBTraceFields + 1] = {0};
    long nd = 0;
    for (int c = 0; c < kTraceCtas; ++c)
      for (int w = 0; w < Tr::kConsumers; ++w)
        for (int i = 0; i + 1 < kBTraceBlocks; ++i) {
          const long long* t = hb[c][i][w];
          const long long next = hb[c][i + 1][w][0];
          bool ok = next != 0;
          for (int f = 0; f < kBTraceFields; ++f) ok = ok && t[f] != 0;
          if (!ok) continue;
          ++nd;
          for (int f = 0; f + 1 < kBTraceFields; ++f) d[f] += double(t[f + 1] - t[f]);
          d[kBTraceFields - 1] += double(next - t[kBTraceFields - 1]);
          d[kBTraceFields] += double(next - t[0]);
        }
    // Marks 5 and 6 close the step's fourth and fifth phases: the softmax, then the wait for P V;
    // with the P V wait before the softmax (Tr::kRescaleInSoftmax) the other way round.
    const char* const phase5 = Tr::kRescaleInSoftmax ? "P V wait" : "softmax";
    const char* const phase6 = Tr::kRescaleInSoftmax ? "softmax" : "P V wait";
    if (nd > 0)
      fprintf(stderr,
              "fa ws step trace: W %d, %d consumers, %d keys: %ld steps; cycles: K/V wait %.0f, turn wait %.0f, issue %.0f, "
              "S wait %.0f, %s %.0f, %s %.0f, rescale+pack+loop %.0f; period %.0f\n",
              Tr::kHeadDim, Tr::kConsumers, Tr::kBlockN, nd, d[0] / nd, d[1] / nd, d[2] / nd, d[3] / nd, phase5, d[4] / nd,
              phase6, d[5] / nd, d[6] / nd, d[7] / nd);
  }
  // The last consumer warpgroup's lag behind warpgroup 0 on the same tile, at each mark (the
  // ping-pong ring orders their turns; what one waits for at a tile's start or end shows here), and
  // the mean tile period (Q-full passed to the next tile's, warpgroup 0).
  {
    double lag[4] = {0}, period = 0, period_blocks = 0;
    long nl = 0, np = 0;
    for (int c = 0; c < kTraceCtas; ++c)
      for (int j = 0; j < kTraceTiles; ++j) {
        const long long* t0 = h[c][j][0];
        const long long* tl = h[c][j][Tr::kConsumers - 1];
        if (t0[0] == 0 || t0[3] == 0 || tl[0] == 0 || tl[3] == 0 || t0[4] <= 0) continue;
        ++nl;
        for (int f = 0; f < 4; ++f) lag[f] += double(tl[f] - t0[f]);
        if (j + 1 < kTraceTiles && h[c][j + 1][0][0] != 0) period += double(h[c][j + 1][0][0] - t0[0]), period_blocks += double(t0[4]), ++np;
      }
    if (nl > 0)
      fprintf(stderr,
              "fa ws trace lag: W %d, last warpgroup behind warpgroup 0 (cycles): Q-full %.0f, first softmax %.0f, last P V %.0f, "
              "epilogue %.0f; warpgroup 0's tile period %.0f (%.1f blocks)\n",
              Tr::kHeadDim, lag[0] / nl, lag[1] / nl, lag[2] / nl, lag[3] / nl, np ? period / np : 0.0, np ? period_blocks / np : 0.0);
  }
  const double per_block = steady_blocks > 0 ? steady / steady_blocks : 0;
  const double hand = n_gap ? gap / n_gap : 0, first = n_fill ? fill / n_fill : 0;
  const double extra = hand + first + epi / n - per_block;
  fprintf(stderr,
          "fa ws trace: W %d, %d consumers, %d keys per block%s: %ld warpgroup-tiles (mean %.1f key blocks); cycles: "
          "hand-over %.0f, fill %.0f, steady %.0f per block, epilogue %.0f; a tile's cost beyond its blocks %.0f cycles "
          "= %.2f blocks\n",
          Tr::kHeadDim, Tr::kConsumers, Tr::kBlockN, kPaged ? ", paged" : "", n, nb / n, hand, first, per_block, epi / n,
          extra, per_block > 0 ? extra / per_block : 0.0);
}
#endif

// The warp-specialised Hopper kernel (dense, packed or paged fp16 / bf16; fwd_api.cu encodes the
// tensor maps).
template <typename T, int W, int C, bool kPaged, int BN, bool kGrouped, bool kWalk>
fa_status run_fwd_sm90_ws(FwdTmaArgs ta, cudaStream_t stream) {
  using Tr = Sm90WsTraits<T, W, C, BN>;
  static std::atomic<bool> smem_ready[kMaxDevices];
  const auto kernel = &fwd_kernel_sm90_ws<Tr, kPaged, kGrouped, kWalk>;
  FwdArgs& a = ta.f;
  a.num_m_blocks = (a.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int64_t blocks = static_cast<int64_t>(a.num_m_blocks) * a.heads * a.batch;
  if (blocks == 0) return FA_OK;
  if (blocks > INT_MAX)
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward: batch * heads * ceil(seqlen_q / " + std::to_string(Tr::kBlockM) + ") = " + std::to_string(blocks) +
                                            " thread blocks exceeds the grid limit 2^31-1");
  const fa_status st = smem_optin(kernel, Tr::kSmemBytes, "CUDA forward", W, smem_ready);
  if (st != FA_OK) return st;
  (void)cudaGetLastError();
  // A call whose tiles fit one wave gains nothing from the persistent loop (every block would draw
  // one tile and then the end): one block per tile, no tile counter, so the producer's two
  // counter round trips (the draw that ends its loop, the count that resets the counter) leave
  // the end of a tiny call's critical path.
  const bool one_wave = ta.ctas > 0 && blocks <= ta.ctas;
  if (one_wave) ta.ctas = 0;
  const int64_t grid = ta.ctas > 0 ? std::min<int64_t>(blocks, ta.ctas) : blocks;
  // Packed and paged batches of 2..kWsDealMax sequences with kWsDealWaves tile indices per block or
  // more and a longest sequence of kWsDealWaves row blocks or more: the producer deals the sequences
  // the most keys first (ws_deal_order). Where every sequence is short, every tile is a few key
  // blocks long and the order cannot gain what the ranking costs (H200: 64 sequences of 60-760
  // tokens, 0.215 -> 0.218 ms). FA_WS_DEAL=0: batch order (comparisons); 2: every packed or paged
  // batch of 2..kWsDealMax sequences (tests).
  static const int deal = env_int("FA_WS_DEAL", 1);
  ta.deal = Tr::kDeal && deal != 0 && (kPaged || a.cu_seqlens_q != nullptr) && a.batch >= 2 && a.batch <= kWsDealMax &&
            (deal == 2 || (blocks >= static_cast<int64_t>(kWsDealWaves) * grid && a.num_m_blocks >= kWsDealWaves));
  // Programmatic dependent launch for calls whose tiles fit one wave (blocks <= the persistent
  // grid): the block's launch and set-up (the mbarrier init) overlap the previous kernel's tail, the
  // latency that a small call's GPU time mostly is (issue 10's per-call cost). The kernel then waits
  // (pdl_wait, ta.pdl) before its first global access. Larger calls launch as before: their GPU time
  // hides the launch, and every cell of the PERF.md grid is one of them. FA_FWD_PDL=1: always,
  // FA_FWD_PDL=0: never (comparisons). H200 (NOTES-inference.md, thirteenth session): the tiny call
  // back to back 6.8-8.9 us with it against 9.0-9.6 without (launcher thread on; GPU-bound there,
  // 7.6-8.4 us of kernel per call); the GPU suite, memcheck and racecheck clean with PDL on every
  // launch (racecheck had not finished the smoke workload with it in the ninth session).
  static const int pdl_mode = env_int("FA_FWD_PDL", -1);
  // (Not with ta.deal: the ranking reads the index arrays before the kernel's PDL wait. The default
  // sets ta.deal only on calls of many waves, which never launch with PDL.)
  const bool want_pdl = !ta.deal && (pdl_mode > 0 || (pdl_mode < 0 && one_wave));
#ifdef FA_WS_TRACE
  // (the instantiations of one translation unit share its buffer: cleared before each launch,
  // read right after the reported one)
  static void* trace = trace_buffer(g_ws_trace);
  static std::atomic<int> launches{0};
  static void* btrace = trace_buffer(g_ws_btrace);
  if (trace != nullptr) (void)cudaMemsetAsync(trace, 0, sizeof(g_ws_trace), stream);
  if (btrace != nullptr) (void)cudaMemsetAsync(btrace, 0, sizeof(g_ws_btrace), stream);
#endif
  ta.pdl = want_pdl && pdl_usable() ? 1 : 0;
  const cudaError_t err = launch_pdl_if(ta.pdl != 0, kernel, dim3(static_cast<unsigned>(grid)), dim3(Tr::kThreads), Tr::kSmemBytes, stream, ta);
  if (err != cudaSuccess) return cuda_fail(err, "fwd launch (warp-specialised)");
#ifdef FA_WS_TRACE
  if (trace != nullptr && ++launches % trace_every() == 0) ws_trace_report<Tr, kPaged>(stream, trace);
#endif
  return FA_OK;
}

#ifdef FA_WS_TRACE
// FA_WS_TRACE builds: after every FA_WS_TRACE_EVERY-th decode launch of an instantiation, the
// timeline of that launch (fwd_decode.cuh, g_dec_trace; the stream is synchronised there, after the
// launch, so the launch itself ran behind its predecessors as usual), in microseconds from its first
// block's entry: block entries, the PDL wait passed, the first tile landed (warp 0), warp 0's loop
// end, every warp done, the kernel's end, the longest split combine, the gap since the previous
// launch's end (negative: overlap), and the K / V rate over the whole launch and over the span
// from the median first tile to the last loop end.
inline void decode_trace_report(cudaStream_t stream, void* trace, int slot, int blocks, int head_dim) {
  static unsigned long long h[2][kDecTraceBlocks][kDecTraceFields];
  if (!trace_read(stream, trace, h, sizeof(h), "fa decode trace")) return;
  const int n = std::min(blocks, kDecTraceBlocks);
  auto& c = h[slot & 1];
  unsigned long long t0 = ~0ull, tend = 0, prev_end = 0;
  for (int i = 0; i < n; ++i) t0 = std::min(t0, c[i][0]), tend = std::max(tend, c[i][6]);
  for (int i = 0; i < n; ++i) prev_end = std::max(prev_end, h[(slot + 1) & 1][i][6]);
  std::vector<double> f[8];
  double combine = 0, tiles = 0;
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < 7; ++k)
      if (c[i][k] != 0) f[k].push_back((double(c[i][k]) - double(t0)) / 1000.0);
    if (c[i][5] != 0) combine = std::max(combine, (double(c[i][6]) - double(c[i][5])) / 1000.0);
    tiles += double(c[i][7] >> 32);
  }
  auto q = [](std::vector<double>& v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
  };
  // FA_DEC_TRACE_DUMP=path: every reported launch's blocks appended to path, one line each: the
  // launch's number, the block's linear index, its SM, its tile count and the seven marks in us
  // from the launch's first entry (-1: not reached).
  if (const char* dump = std::getenv("FA_DEC_TRACE_DUMP")) {
    static int reported = 0;
    ++reported;
    if (FILE* fp = std::fopen(dump, "a")) {
      for (int i = 0; i < n; ++i) {
        fprintf(fp, "%d %d %u %u", reported, i, unsigned(c[i][7] & 0xffffffffu), unsigned(c[i][7] >> 32));
        for (int k = 0; k < 7; ++k) fprintf(fp, " %.3f", c[i][k] ? (double(c[i][k]) - double(t0)) / 1000.0 : -1.0);
        fputc('\n', fp);
      }
      std::fclose(fp);
    }
  }
  const double bytes = tiles * 16 * head_dim * 2 * 2;
  const double span = (double(tend) - double(t0)) / 1000.0;
  const double data = q(f[3], 1.0) - q(f[2], 0.5);
  fprintf(stderr,
          "fa decode trace: %d blocks, %.1f MB; us from first entry: entry med %.2f max %.2f | wait passed min %.2f med %.2f "
          "max %.2f | first tile med %.2f p90 %.2f max %.2f | loop end min %.2f med %.2f p90 %.2f max %.2f | all warps max "
          "%.2f | end %.2f (combine max %.2f) | gap after previous launch %.2f | TB/s whole %.2f, data span %.2f\n",
          n, bytes / 1e6, q(f[0], 0.5), q(f[0], 1.0), q(f[1], 0.0), q(f[1], 0.5), q(f[1], 1.0), q(f[2], 0.5), q(f[2], 0.9),
          q(f[2], 1.0), q(f[3], 0.0), q(f[3], 0.5), q(f[3], 0.9), q(f[3], 1.0), q(f[4], 1.0), span, combine,
          prev_end ? (double(t0) - double(prev_end)) / 1000.0 : 0.0, span > 0 ? bytes / span / 1e6 : 0.0,
          data > 0 ? bytes / data / 1e6 : 0.0);
}
#endif

// The paged decode kernel: grid (heads_k, num_splits, batch), blocks of Tr::kWarps warps.
// d.loader: kDecodeCpAsync, or one of the sm_90 loaders (the caller checks the device, the build and,
// for the tensor maps, the page size and head dim, and encodes the maps). kTmaOnly: the traits'
// kernel exists for the tensor-map loader alone (8 warps).
template <class Tr, bool kTmaOnly>
fa_status run_decode_with(DecodeArgs d, cudaStream_t stream) {
  constexpr int W = Tr::kHeadDim;
  static std::atomic<bool> smem_ready[3][kMaxDevices];
  using Kernel = void (*)(DecodeArgs);
  Kernel kernel = &fwd_decode_kernel<Tr, kDecodeTmaTiles>;
  if constexpr (!kTmaOnly) {
    if (d.loader == kDecodeBulkRows) kernel = &fwd_decode_kernel<Tr, kDecodeBulkRows>;
    if (d.loader == kDecodeCpAsync) kernel = &fwd_decode_kernel<Tr, kDecodeCpAsync>;
  }
  if (d.f.batch == 0 || d.f.heads_k == 0) return FA_OK;
  if (d.num_splits > kDecodeMaxSplits)
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA paged decode: at most " + std::to_string(kDecodeMaxSplits) + " splits");
  if (d.f.batch > 65535)
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA paged decode: at most 65535 sequences per call");
  // sm_90 ring depth: the deepest that keeps the blocks the grid puts on an SM resident together
  // (Hopper: 228 KiB of shared memory per SM, 1 KiB of it reserved per block), 2..8 stages.
  constexpr int kSmemPerSm = 228 * 1024, kMaxBlock = 227 * 1024;
  int smem = Tr::kSmemBytes;
  const bool sm90 = d.loader != kDecodeCpAsync;
  const bool tma = d.loader == kDecodeTmaTiles;
  if (sm90) {
    if (d.stages <= 0) {
      const int per_block = std::min(kMaxBlock, kSmemPerSm / std::max(1, d.blocks_per_sm) - 1024);
      int ns = 2;
      while (ns < 8 && Tr::bulk_smem(ns + 1, tma) <= per_block) ++ns;
      d.stages = ns;
    }
    while (d.stages > 2 && Tr::bulk_smem(d.stages, tma) > kMaxBlock) --d.stages;
    smem = Tr::bulk_smem(d.stages, tma);
  }
  const fa_status st = smem_optin(kernel, sm90 ? kMaxBlock : Tr::kSmemBytes, "CUDA paged decode", W, smem_ready[d.loader]);
  if (st != FA_OK) return st;
  (void)cudaGetLastError();
#ifdef FA_WS_TRACE
  static void* trace = trace_buffer(g_dec_trace);
  static std::atomic<int> launches{0};
  const int launch_no = ++launches;
  d.trace_slot = launch_no & 1;
#endif
  const cudaError_t err = launch_pdl(kernel, dim3(d.f.heads_k, d.num_splits, d.f.batch), dim3(Tr::kThreads), smem, stream, d);
  if (err != cudaSuccess) return cuda_fail(err, "decode launch");
#ifdef FA_WS_TRACE
  if (trace != nullptr && launch_no % trace_every() == 0)
    decode_trace_report(stream, trace, d.trace_slot, d.f.heads_k * d.num_splits * d.f.batch, W);
#endif
  return FA_OK;
}

// d.warps == 8 (the tensor-map loader at W 128; fwd_api.cu chooses): blocks of eight warps.
template <typename T, int W>
fa_status run_fwd_decode(DecodeArgs d, cudaStream_t stream) {
  if constexpr (W == 128) {
    if (d.warps == 8 && d.loader == kDecodeTmaTiles) return run_decode_with<DecodeTraits<T, W, 8>, true>(d, stream);
  }
  return run_decode_with<DecodeTraits<T, W>, false>(d, stream);
}

}  // namespace cuda
}  // namespace fa
