// fa_fwd_cuda / fa_cuda_supports: argument checks, then dispatch to the instantiation whose head-dim
// tile width is the smallest compiled one >= head_dim (the pad columns are zero-filled on load and
// never written).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <math.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <vector>
#include <string>
#include <type_traits>

#include "common/errors.h"
#include "cuda/api_checks.h"
#include "cuda/fwd_args.cuh"
#include "cuda/inference_api.cuh"
#include "cuda/lpt.cuh"
#include "cuda/tma_maps.h"
#include "fa_core.h"
#include "cuda/widths.cuh"

namespace fa {
namespace cuda {
namespace {

// Tile widths that scripts/generate_kernels.py writes a file for (keep the lists in step; a width
// listed here without its file is a link error, not a silent miss).
constexpr int kWidths16[] = {32, 64, 96, 128, 160, 192, 256};  // fp16 and bf16
constexpr int kWidths32[] = {32, 64, 128, 256};                 // fp32
// Paged K/V (pagedAttention): the row-block kernels and the decode kernel (fp16 / bf16).
constexpr int kPagedWidths16[] = {64, 128, 256};
constexpr int kPagedWidths32[] = {64, 128, 256};
// The Hopper (wgmma) forward kernels (sm90_kernels_usable in api_checks.h says where they run).
constexpr int kWidthsSm90[] = {64, 128, 192, 256};  // fp16 and bf16; keep equal to WIDTHS_SM90 in generate_kernels.py

// Smallest compiled width >= d for this dtype, or 0.
int pick_compiled_width(fa_dtype dtype, int d, bool paged) {
  return paged ? fa::cuda::pick_width(kPagedWidths16, kPagedWidths32, dtype, d)
               : fa::cuda::pick_width(kWidths16, kWidths32, dtype, d);
}

template <typename T, int W, bool kPaged>
bool try_run(int width, const FwdArgs& a, cudaStream_t s, fa_status* st) {
  constexpr bool kListed = std::is_same<T, float>::value
                               ? (kPaged ? listed(kPagedWidths32, W) : listed(kWidths32, W))
                               : (kPaged ? listed(kPagedWidths16, W) : listed(kWidths16, W));
  constexpr bool kCompiled = width_built(W) && kListed;
  if constexpr (kCompiled) {
    if (width == W) {
      *st = run_fwd<T, W, kPaged>(a, s);
      return true;
    }
  }
  return false;
}

template <typename T, int W, bool kPaged>
bool try_run_sm90(int width, const FwdArgs& a, cudaStream_t s, fa_status* st) {
  // Paged calls: only the paged widths have paged instantiations.
  constexpr bool kCompiled = width_built(W) && listed(kWidthsSm90, W) && !std::is_same<T, float>::value &&
                             (!kPaged || listed(kPagedWidths16, W));
#if defined(FA_HAVE_SM90A)
  if constexpr (kCompiled) {
    if (width == W && sm90_kernels_usable()) {
      *st = run_fwd_sm90<T, W, kPaged>(a, s);
      return true;
    }
  }
#else
  (void)width, (void)a, (void)s, (void)st, (void)kCompiled;
#endif
  return false;
}

// Q, K and V of a dense or packed call as the warp-specialised kernel's tensor maps (FwdTmaArgs;
// tma_maps.h): Q in boxes of a tile's rows, K and V in boxes of a key block; packed sequences
// (varlen) are one batch of total_q / total_k rows. False when a map cannot be made (the cp.async
// kernel runs instead).
bool encode_dense_maps(const FwdArgs& a, int bn, int block_m, FwdTmaArgs* ta) {
  const bool packed = a.cu_seqlens_q != nullptr;
  const int nq = packed ? a.total_q : a.seqlen_q, nk = packed ? a.total_k : a.seqlen_k, nb = packed ? 1 : a.batch;
  return encode_rows_map(a.q, a.head_dim, nq, a.heads, nb, a.q_row, a.q_head, a.q_batch, block_m, &ta->tq) &&
         encode_rows_map(a.k, a.head_dim, nk, a.heads_k, nb, a.k_row, a.k_head, a.k_batch, bn, &ta->tk) &&
         encode_rows_map(a.v, a.head_dim, nk, a.heads_k, nb, a.v_row, a.v_head, a.v_batch, bn, &ta->tv);
}

// A paged call's maps: Q as a packed call's, K and V over the cache's rows (page * page size +
// slot) in boxes of ta->box_rows rows, a divisor of the page size and of the key block (so that a
// box never crosses a page). False when the page size is not a multiple of 8 (a box of the 128-byte
// swizzle starts on a whole 8-row atom), the cache has 2^31 rows or more (coordinates are int32), or
// a map cannot be made: the cp.async kernel runs instead.
// Where the head dim fills a tile of two or more column blocks (W 128 / 256), K and V come in one box
// per page holding every column block (encode_grouped_map; ta->kv_rows = 8, the consumers read both
// stages in that layout): at page 16, W 128, 8 copies of K per key block instead of 16. Else (W 64,
// or a head dim below the width, whose columns past it must come in as zeros) a box per page and
// column block, as {head dim, rows, kv heads, 1} (kv_rows = the key block).
bool encode_paged_maps(const FwdArgs& a, int width, int block_m, FwdTmaArgs* ta) {
  const int bn = sm90_ws_block_n(width);
  const int64_t rows = int64_t(a.num_pages) * a.page_size;
  if (a.page_size % 8 != 0 || rows == 0 || rows >= int64_t(INT32_MAX)) return false;
  ta->box_rows = std::gcd(a.page_size, bn);
  if (!encode_rows_map(a.q, a.head_dim, a.total_q, a.heads, 1, a.q_row, a.q_head, 0, block_m, &ta->tq)) return false;
  static const bool grouped = env_flag("FA_WS_PAGED_GROUPS", 1) != 0;  // 0: a box per column block (comparisons)
  if (grouped && a.head_dim == width && width >= 128 &&
      encode_grouped_map(a.k, uint64_t(rows), a.k_row, a.k_head, width, a.heads_k, ta->box_rows, &ta->tk) &&
      encode_grouped_map(a.v, uint64_t(rows), a.v_row, a.v_head, width, a.heads_k, ta->box_rows, &ta->tv)) {
    ta->kv_rows = 8;
    return true;
  }
  ta->kv_rows = bn;
  return encode_rows_map(a.k, a.head_dim, int(rows), a.heads_k, 1, a.k_row, a.k_head, 0, ta->box_rows, &ta->tk) &&
         encode_rows_map(a.v, a.head_dim, int(rows), a.heads_k, 1, a.v_row, a.v_head, 0, ta->box_rows, &ta->tv);
}

// FA_FWD_SM90=cpasync keeps dense, packed and paged calls on the cp.async wgmma kernel (comparisons).
bool sm90_ws_enabled() {
  static const bool on = !env_is("FA_FWD_SM90", "cpasync");
  return on;
}

fa_status stream_counters(cudaStream_t s, int kind, int64_t n, int** out);

template <typename T, int W, bool kPaged>
bool try_run_sm90_ws(int width, const FwdArgs& a, cudaStream_t s, fa_status* st) {
  constexpr bool kCompiled = width_built(W) && listed(kWidthsSm90, W) && !std::is_same<T, float>::value &&
                             (!kPaged || listed(kPagedWidths16, W));
#if defined(FA_HAVE_SM90A)
  if constexpr (kCompiled) {
    if (width == W && sm90_kernels_usable()) {
      // W 64: three consumer warpgroups (192-row tiles), except under a right-bounded mask with
      // short queries, where the coarser diagonal tiles cost more than the third warpgroup gains
      // (NOTES-fwd.md, run 9: causal N 512 / 1k at 0.78x / 0.88x of two warpgroups).
      // Queries that fit one 128-row tile (the tiny calls of issue 10's per-call cost) take two:
      // the third warpgroup would hold only rows past the end, and a 512-thread block with a
      // 192-row Q tile starts later than a 384-thread one.
      // FA_WS_W64_TWO_MAX=n moves the causal bound (comparisons).
      static const int w64_two_max = env_int("FA_WS_W64_TWO_MAX", 1024);
      const bool three = W == 64 && !(a.causal && a.seqlen_q <= w64_two_max) && a.seqlen_q > 128;
      // W 128, dense or packed, no window on either side, from 8192 keys: key tiles of 176 (FA3's
      // choice there; fewer softmax rounds and ping-pong turns per key, but O staged through Q's
      // buffer, or a half-width one of its own with FA_WS_SPLIT_O, the default). H200 A/B in one run
      // (NOTES-fwd.md): fp16 / bf16 N 16k +2-3%, N 8k +1-2%, N 4k -1-2%, N 512 -10-13%.
      // FA_WS_BN176=0 keeps 128 keys everywhere and FA_WS_BN176_MIN=n moves the bound
      // (comparisons, tests).
      static const int bn176 = env_flag("FA_WS_BN176", 1);
      static const int bn176_min = env_int("FA_WS_BN176_MIN", 8192);
      // (A left-bounded window sees a few key blocks per tile, the short-key case where 176 loses.)
      const bool long_keys = W == 128 && !kPaged && !a.causal && a.window_left < 0 && bn176 && a.seqlen_k >= bn176_min;
      // W 256, dense or packed, from 2048 keys: key tiles of 80 (FA3's choice there; a fifth fewer
      // softmax rounds and ping-pong turns per key than 64, S in 40 registers; O staged through Q's
      // buffer, the ring of two 80 KiB stages filling what the sm_90 limit leaves). H200 A/B in one
      // run (NOTES-fwd.md, sixteenth session; fp16 / bf16, full / causal): N 4k-16k +1.6-6.7%, N 2k
      // -0.2 to +2.1%, N 1k -2.2 to +2.3%, N 512 -4 to -8% (the last tile's padding, 560 keys for 512).
      // FA_WS_D256_BN=64 | 80 forces one tile (comparisons, tests).
      static const int d256_bn = env_int("FA_WS_D256_BN", 0);
      const bool keys80 = W == 256 && !kPaged && (d256_bn == 80 || (d256_bn != 64 && a.seqlen_k >= 2048));
      FwdTmaArgs ta;
      ta.f = a;
      // Comparisons: FA_WS_PINGPONG, FA_WS_RESCALE_ALWAYS, FA_WS_RING_ACROSS, FA_WS_PERSISTENT (0 / 1), FA_WS_TRIM_S (below).
      static const int pingpong = env_flag("FA_WS_PINGPONG", 1);
      static const int rescale_always = env_flag("FA_WS_RESCALE_ALWAYS", 0);
      static const int ring_across = env_flag("FA_WS_RING_ACROSS", 1);
      static const int persistent = env_flag("FA_WS_PERSISTENT", 1);
      ta.pingpong = pingpong;
      ta.rescale_always = rescale_always;
      ta.ring_across = ring_across;
      // FA_WS_TRIM_S: 0 off, 1 the first block's S only, 3 (the default) its P V as well.
      static const int trim_s = env_int("FA_WS_TRIM_S", 3);
      ta.trim_s = trim_s;
      // Persistent: one block per SM walks the tiles (FA_WS_PERSISTENT=0: one block per tile).
      ta.ctas = persistent ? sm_count() : 0;
      ta.tile_counter = nullptr;
      ta.box_rows = 0;
      ta.kv_rows = 0;
#if FA_WS_LPT
      // Sections of (batch, head) pairs whose K and V fit in L2 (lpt.cuh), causal dense calls
      // without a left window bound only (a packed call's idle-tile skip needs each pair's row
      // blocks adjacent; a window's tiles are all about as long).
      ta.lpt_groups = 0;
      if (a.causal && a.window_left < 0 && a.cu_seqlens_q == nullptr && !kPaged)
        ta.lpt_groups = lpt_section_pairs(int64_t(a.heads) * a.batch,
                                          int64_t(a.seqlen_k) * a.head_dim * 2 * 2 / std::max(a.group, 1), a.group);
#endif
      // (the maps first: a call they refuse goes to the cp.async kernel with nothing queued)
      if (!(kPaged ? encode_paged_maps(a, W, three ? 192 : 128, &ta)
                   : encode_dense_maps(a, long_keys ? 176 : keys80 ? 80 : sm90_ws_block_n(W), three ? 192 : 128, &ta)))
        return false;
      if (ta.ctas > 0) {
        const fa_status cs = stream_counters(s, 1, 2, &ta.tile_counter);
        if (cs != FA_OK) {
          *st = cs;
          return true;
        }
      }
      constexpr int BN = sm90_ws_block_n(W);
      if constexpr (W == 64) {
        // (two consumers, packed or paged: the instantiation with the idle warpgroup's walk, where a
        // sequence's last row tile holding 64 rows or fewer leaves the second warpgroup nothing to do)
        if constexpr (kPaged)
          *st = three ? run_fwd_sm90_ws<T, W, 3, true, BN>(ta, s) : run_fwd_sm90_ws<T, W, 2, true, BN, false, true>(ta, s);
        else
          *st = three                     ? run_fwd_sm90_ws<T, W, 3, false, BN>(ta, s)
                : a.cu_seqlens_q != nullptr ? run_fwd_sm90_ws<T, W, 2, false, BN, false, true>(ta, s)
                                            : run_fwd_sm90_ws<T, W, 2, false, BN>(ta, s);
      } else if constexpr (W == 128 && !kPaged) {
        *st = long_keys ? run_fwd_sm90_ws<T, W, 2, kPaged, 176>(ta, s) : run_fwd_sm90_ws<T, W, 2, kPaged, BN>(ta, s);
      } else if constexpr (W == 256 && !kPaged) {
        *st = keys80 ? run_fwd_sm90_ws<T, W, 2, kPaged, 80>(ta, s) : run_fwd_sm90_ws<T, W, 2, kPaged, BN>(ta, s);
      } else if constexpr (kPaged && W >= 128) {
        // the grouped stage layout (one box per page) or a box per page and column block
        *st = ta.kv_rows == 8 ? run_fwd_sm90_ws<T, W, 2, true, BN, true>(ta, s) : run_fwd_sm90_ws<T, W, 2, true, BN, false>(ta, s);
      } else {
        *st = run_fwd_sm90_ws<T, W, 2, kPaged, BN>(ta, s);
      }
      return true;
    }
  }
#else
  (void)width, (void)a, (void)s, (void)st, (void)kCompiled;
#endif
  return false;
}

// The row-block kernels (every query row of a block from one head).
template <typename T, bool kPaged>
fa_status dispatch(int width, const FwdArgs& a, cudaStream_t s) {
  fa_status st = FA_ERR_UNSUPPORTED;
  if constexpr (!std::is_same<T, float>::value) {
    if (sm90_ws_enabled() &&
        (try_run_sm90_ws<T, 64, kPaged>(width, a, s, &st) || try_run_sm90_ws<T, 128, kPaged>(width, a, s, &st) ||
         try_run_sm90_ws<T, 192, kPaged>(width, a, s, &st) || try_run_sm90_ws<T, 256, kPaged>(width, a, s, &st)))
      return st;
  }
  if (try_run_sm90<T, 64, kPaged>(width, a, s, &st) || try_run_sm90<T, 128, kPaged>(width, a, s, &st) ||
      try_run_sm90<T, 192, kPaged>(width, a, s, &st) || try_run_sm90<T, 256, kPaged>(width, a, s, &st))
    return st;
  const bool ran = try_run<T, 32, kPaged>(width, a, s, &st) || try_run<T, 64, kPaged>(width, a, s, &st) ||
                   try_run<T, 96, kPaged>(width, a, s, &st) || try_run<T, 128, kPaged>(width, a, s, &st) ||
                   try_run<T, 160, kPaged>(width, a, s, &st) || try_run<T, 192, kPaged>(width, a, s, &st) ||
                   try_run<T, 256, kPaged>(width, a, s, &st);
  if (!ran) return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward: no kernel for tile width " + std::to_string(width));
  return st;
}

template <typename T, int W>
bool try_decode(int width, const DecodeArgs& d, cudaStream_t s, fa_status* st) {
  constexpr bool kCompiled = width_built(W) && listed(kPagedWidths16, W) && !std::is_same<T, float>::value;
  if constexpr (kCompiled) {
    if (width == W) {
      *st = run_fwd_decode<T, W>(d, s);
      return true;
    }
  }
  return false;
}

fa_status cuda_err(cudaError_t e, const char* what) {
  return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " (" + what + ")");
}


// Split-KV factor for the decode kernel (H200, TMA loader, runs 12-13 of NOTES-inference.md): the
// largest split count whose blocks are all resident at once (units * splits <= slots) and spread
// evenly over the SMs (blocks / SMs within 95% of a whole number of blocks per SM, the best such
// balance), each split at least kMinChunks 64-key chunks. At B 1 x 16k (8 kv heads) that is 32
// splits (2 blocks on nearly every SM: 27.4 us) where 28 left 40 SMs with one block and 92 with
// two (30.9 us) and 20 was worse still (34.1 us); at B 16, 2 splits (the sweeps: 1-8 within 1-5%).
constexpr int kMinChunks = 2;
int decode_splits(int units, int n_chunks, int slots, int sms) {
  if (n_chunks <= 1 || units >= slots) return 1;
  const int max_splits = std::min({kDecodeMaxSplits, std::max(1, n_chunks / kMinChunks), std::max(1, slots / units)});
  double best = 0;
  double eff[kDecodeMaxSplits + 1] = {0};
  for (int s = 1; s <= max_splits; ++s) {
    const double waves = double(units) * s / sms;
    eff[s] = waves / std::ceil(waves);
    best = std::max(best, eff[s]);
  }
  for (int s = max_splits; s >= 1; --s)
    if (eff[s] >= 0.95 * best) return s;
  return 1;
}


// Counters in device memory that kernels leave at zero when they finish, one buffer per (device,
// stream, kind), so that kernels of different streams never share one: kind 0, the decode kernel's
// split counters (DecodeArgs::counters, one per (sequence, kv head) group; the last block of a group
// resets its counter); kind 1, the warp-specialised forward's tile scheduler (FwdTmaArgs, two ints;
// its last block resets them). Zeroed once; a buffer grows (after draining the stream that uses it)
// when a call needs more than it holds.
fa_status stream_counters(cudaStream_t s, int kind, int64_t n, int** out) {
  struct Buf {
    int dev;
    cudaStream_t stream;
    int kind;
    int* p;
    int64_t n;
  };
  static std::mutex mu;
  static std::vector<Buf> bufs;
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return cuda_err(e, "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  Buf* buf = nullptr;
  for (auto& x : bufs)
    if (x.dev == dev && x.stream == s && x.kind == kind) buf = &x;
  if (buf != nullptr && buf->n >= n) {
    *out = buf->p;
    return FA_OK;
  }
  const int64_t want = std::max<int64_t>(n, 65536);
  if (buf != nullptr) {  // in use by queued kernels until the stream drains
    e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) return cuda_err(e, "draining the stream before growing the kernel counters");
    (void)cudaFree(buf->p);
    buf->p = nullptr;
    buf->n = 0;
  }
  int* p = nullptr;
  e = cudaMalloc(reinterpret_cast<void**>(&p), size_t(want) * sizeof(int));
  if (e != cudaSuccess) return cuda_err(e, "cudaMalloc of the kernel counters");
  e = cudaMemsetAsync(p, 0, size_t(want) * sizeof(int), s);
  if (e != cudaSuccess) {
    (void)cudaFree(p);
    return cuda_err(e, "cudaMemsetAsync of the kernel counters");
  }
  if (buf == nullptr) {
    bufs.push_back({dev, s, kind, p, want});
  } else {
    buf->p = p;
    buf->n = want;
  }
  *out = p;
  return FA_OK;
}

// One paged cache (K or V) as a rank-4 tensor map {64 elements, cache rows, width / 64 column blocks,
// kv heads} with boxes of {64, box_rows, width / 64, 1} and the 128-byte swizzle: a box lands as
// [column block][box_rows][128 bytes]. The head dim must equal the width.
bool encode_cache_map(const void* base, uint64_t rows, int64_t row, int64_t head, int width, int heads_k, int box_rows,
                      CUtensorMap* m) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[4] = {64, rows, cuuint64_t(width / 64), cuuint64_t(heads_k)};
  const cuuint64_t strides[3] = {cuuint64_t(row) * 2, 128, cuuint64_t(head) * 2};  // bytes, dims 1..3
  const cuuint32_t box[4] = {64, cuuint32_t(box_rows), cuuint32_t(width / 64), 1};
  const cuuint32_t estr[4] = {1, 1, 1, 1};
  return encode(m, CU_TENSOR_MAP_DATA_TYPE_UINT16, 4, const_cast<void*>(base), dims, strides, box, estr,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The paged K and V caches as the decode kernel's tensor maps (DecodeArgs::tmap_k / tmap_v): rank 4,
// {64 elements, cache rows, width / 64 column blocks, kv heads}, boxes of {64, 16 rows, width / 64,
// 1} with the 128-byte swizzle. False when the driver has no tensor maps or refuses these.
bool encode_cache_maps(const FwdArgs& a, int width, CUtensorMap* mk, CUtensorMap* mv) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const uint64_t rows = uint64_t(a.num_pages) * uint64_t(a.page_size);
  if (rows == 0 || rows > (uint64_t(1) << 32)) return false;
  // The maps of recent caches (a model's layers each have their own), per host thread: a map
  // depends only on the addresses and the shape, so a hit skips the driver's encoding.
  struct Key {
    const void* k;
    const void* v;
    uint64_t rows;
    int64_t k_row, k_head, v_row, v_head;
    int width, heads_k;
    bool operator==(const Key& o) const {
      return k == o.k && v == o.v && rows == o.rows && k_row == o.k_row && k_head == o.k_head && v_row == o.v_row &&
             v_head == o.v_head && width == o.width && heads_k == o.heads_k;
    }
  };
  struct Entry {
    CUtensorMap mk, mv;
    Key key;
    bool used;
  };
  constexpr int kEntries = 64;
  thread_local Entry recent[kEntries];
  thread_local int next_slot = 0;
  const Key key{a.k, a.v, rows, a.k_row, a.k_head, a.v_row, a.v_head, width, a.heads_k};
  for (const Entry& e : recent) {
    if (e.used && e.key == key) {
      *mk = e.mk;
      *mv = e.mv;
      return true;
    }
  }
  auto one = [&](const void* base, int64_t row, int64_t head, CUtensorMap* m) {
    return encode_cache_map(base, rows, row, head, width, a.heads_k, 16, m);
  };
  if (!one(a.k, a.k_row, a.k_head, mk) || !one(a.v, a.v_row, a.v_head, mv)) return false;
  Entry& e = recent[next_slot];
  next_slot = (next_slot + 1) % kEntries;
  e.mk = *mk;
  e.mv = *mv;
  e.key = key;
  e.used = true;
  return true;
}

template <typename T>
fa_status run_paged(int width, FwdArgs a, const fa_fwd_params* p, cudaStream_t s) {
  // Decode kernel (fp16 / bf16): sequences with nq * group <= kDecodeRows; the row-block kernel the
  // others (it skips the decode kernel's sequences).
  // A GQA group wider than the decode kernel's rows leaves it nothing to take, and so does a call
  // whose every non-empty sequence has more query rows than it packs (p->min_seqlen_q, known with
  // host index arrays): a prefill call then launches the row-block kernel alone, which takes every
  // sequence (decode_rows 0), instead of also a decode launch whose blocks all return (and, where it
  // would split, its workspace; back to back on the H200 no change in GPU time: NOTES-inference.md).
  const bool any_decode = p->min_seqlen_q <= 0 || int64_t(p->min_seqlen_q) * a.group <= kDecodeRows;
  const bool has_decode = !std::is_same<T, float>::value && a.group <= kDecodeRows && any_decode;
  a.decode_rows = has_decode ? kDecodeRows : 0;
  const bool need_rows = !has_decode || int64_t(a.seqlen_q) * a.group > kDecodeRows;
  if (has_decode) {
    DecodeArgs d{};
    d.f = a;
    // Loader (H200, runs 7-8 and 13 of NOTES-inference.md), on sm_90: tensor-map tiles where a
    // 16-key tile is one box (page sizes that are multiples of 16, head dim equal to the tile
    // width); one bulk copy per cache row for page sizes that are not multiples of 16, where the
    // cp.async loader looks up every key's page on its critical path (page 1, B 16 x 16k: 3.38
    // against 3.07 TB/s); cp.async for the rest and on other GPUs. FA_DECODE_LOADER=tma|bulk|cpasync
    // fixes the choice where it can run (comparisons).
    static const int loader_forced = env_is("FA_DECODE_LOADER", "bulk")      ? kDecodeBulkRows
                                     : env_is("FA_DECODE_LOADER", "cpasync") ? kDecodeCpAsync
                                     : env_is("FA_DECODE_LOADER", "tma")     ? kDecodeTmaTiles
                                                                             : -1;
    const bool sm90 = sm90_kernels_usable();
    const bool tma_fits = sm90 && a.page_size % 16 == 0 && a.head_dim == width;
    int loader = !sm90 ? kDecodeCpAsync : a.page_size % 16 != 0 ? kDecodeBulkRows : tma_fits ? kDecodeTmaTiles : kDecodeCpAsync;
    if (sm90 && loader_forced >= 0 && (loader_forced != kDecodeTmaTiles || tma_fits)) loader = loader_forced;
    if (loader == kDecodeTmaTiles && !encode_cache_maps(a, width, &d.tmap_k, &d.tmap_v)) loader = kDecodeCpAsync;
    d.loader = loader;
    const int n_chunks = (a.seqlen_k + kDecodeChunk - 1) / kDecodeChunk;
    // Waves counted in resident decode blocks (per_sm per SM) fill the GPU for batches (run 4,
    // counted in SMs: B 16 x 16k at 1 split, 3.34 TB/s, against 3.77 at 2 splits in run 2). Run 8
    // (the combine no longer a loop of dependent loads): B 1 x 16k 2.0 TB/s at 24-32 splits against
    // 1.91 at 14, B 1 x 64k 3.26 at 32 against 3.08 at 14; before it, short splits had lost to the
    // combine's cost and the count had fallen back to SMs for few long sequences.
    const int units = a.batch * a.heads_k;
    // Blocks of eight warps (the tensor-map loader at W 128) where the (sequence, kv head) groups
    // alone nearly fill the SMs (90-100%) and four-warp blocks would split them in two: one block
    // of eight warps per group and SM streams what two blocks of four did, with no split combine.
    // H200, public API back to back (NOTES-inference.md, twenty-sixth session): B 16 x 4k 69.1 ->
    // 67.8 us, B 16 x 16k 262.8 -> 261.3, B 16 x 64k 1022.9 -> 1021.3; where they would still split
    // (B 1 x 16k: 16 splits of eight warps, 22.3 us, against 32 of four, 21.5) or run in waves (B
    // 64: +2.5%), four. FA_DECODE_WARPS=4 | 8 fixes the choice where it can run (comparisons).
    static const int warps_env = env_int("FA_DECODE_WARPS", 0);
    const int sms = sm_count();
    const bool can8 = loader == kDecodeTmaTiles && width == 128;
    const bool fill8 = units <= sms && 10 * units >= 9 * sms && decode_splits(units, n_chunks, 2 * sms, sms) > 1;
    d.warps = can8 && (warps_env == 8 || (warps_env != 4 && p->num_splits <= 0 && fill8)) ? 8 : 4;
    const int per_sm = d.warps == 8 ? 1 : width <= 64 ? 3 : width <= 128 ? 2 : 1;
    int splits = p->num_splits;
    if (splits <= 0) {
      splits = decode_splits(units, n_chunks, sms * per_sm, sms);
    }
    // The in-kernel merge (split_combine) takes at most kDecodeMaxSplits partials: more splits than
    // that never pay here anyway.
    splits = std::max(1, std::min({splits, kDecodeMaxSplits, std::max(n_chunks, 1)}));
    d.num_splits = splits;
    // The bulk loader's rings are sized for the blocks that share an SM: one when the grid fits
    // the SMs once, per_sm otherwise. FA_DECODE_STAGES=n fixes the ring depth (comparisons).
    d.blocks_per_sm = int64_t(units) * splits > sm_count() ? per_sm : 1;
    static const int stages_forced = env_int("FA_DECODE_STAGES", 0);
    d.stages = stages_forced >= 2 ? std::min(stages_forced, 8) : 0;
    static const int stage_combine = env_int("FA_DECODE_STAGED", 1) != 0 ? 1 : 0;  // comparisons
    d.stage_combine = stage_combine;
    static const int pt_prefetch = env_int("FA_DECODE_PT_PREFETCH", 1) != 0 ? 1 : 0;  // comparisons
    d.pt_prefetch = pt_prefetch;
    static const int rescale_always = env_is("FA_DECODE_RESCALE", "always") ? 1 : 0;
    d.rescale_always = rescale_always;
    static const bool early_off = env_int("FA_DECODE_EARLY", 1) == 0;  // comparisons
    d.early_kv = p->decode_early_kv != 0 && !early_off ? 1 : 0;
    // Partials only for the queries a decode sequence can have: a call with long prefill chunks
    // and few kv heads (B 2 x 8k, splits 16) would otherwise size them for every query, GBs of
    // workspace, and run the combine over every row.
    d.rows_per_seq = std::max(1, std::min(kDecodeRows / a.group, a.seqlen_q));
    const int64_t part_rows = int64_t(a.batch) * d.rows_per_seq;
    void* ws = nullptr;
    if (splits > 1) {
      const size_t o_bytes = size_t(splits) * part_rows * a.heads * width * 4;
      const size_t l_bytes = size_t(splits) * a.heads * part_rows * 4;
      const cudaError_t e = cudaMallocAsync(&ws, o_bytes + l_bytes, s);
      if (e != cudaSuccess) return cuda_err(e, "cudaMallocAsync of the split-KV workspace");
      d.partial_o = static_cast<float*>(ws);
      d.partial_lse = reinterpret_cast<float*>(static_cast<char*>(ws) + o_bytes);
      const fa_status cs = stream_counters(s, 0, int64_t(a.batch) * a.heads_k, &d.counters);
      if (cs != FA_OK) {
        (void)cudaFreeAsync(ws, s);
        return cs;
      }
    }
    fa_status st = FA_ERR_UNSUPPORTED;
    const bool ran = try_decode<T, 64>(width, d, s, &st) || try_decode<T, 128>(width, d, s, &st) ||
                     try_decode<T, 256>(width, d, s, &st);
    if (!ran) st = fa::fail(FA_ERR_UNSUPPORTED, "CUDA paged decode: no kernel for tile width " + std::to_string(width));
    if (ws != nullptr) {
      const cudaError_t e = cudaFreeAsync(ws, s);
      if (e != cudaSuccess && st == FA_OK) st = cuda_err(e, "cudaFreeAsync of the split-KV workspace");
    }
    if (st != FA_OK) return st;
  }
  if (!need_rows) return FA_OK;
  return dispatch<T, true>(width, a, s);
}

}  // namespace
}  // namespace cuda
}  // namespace fa

extern "C" int fa_cuda_supports(fa_dtype dtype, int head_dim) {
  if (dtype != FA_FLOAT32 && dtype != FA_FLOAT16 && dtype != FA_BFLOAT16) return 0;
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0) return 0;
  return fa::cuda::pick_compiled_width(dtype, head_dim, false) != 0 ? 1 : 0;
}

fa::cuda::LaunchProfile& fa::cuda::launch_profile() {
  static LaunchProfile prof;
  return prof;
}

extern "C" void fa_profile_launches(double* total_us, long* count) {
  fa::cuda::LaunchProfile& prof = fa::cuda::launch_profile();
  if (total_us != nullptr) *total_us = double(prof.ns.load()) / 1000.0;
  if (count != nullptr) *count = prof.count.load();
}

extern "C" fa_status fa_fwd_cuda(const fa_fwd_params* p, void* stream) {
  using namespace fa::cuda;
  if (p == nullptr) return fa::fail(FA_ERR_INVALID, "fa_fwd_cuda: params is NULL");
  const int d = p->head_dim;
  const bool paged = p->page_table != nullptr;
  const bool packed = p->cu_seqlens_q != nullptr;
  if (paged && (!packed || p->seqlens_k == nullptr))
    return fa::fail(FA_ERR_INVALID, "fa_fwd_cuda: paged K/V needs cu_seqlens_q and seqlens_k");
  if (packed && !paged && p->cu_seqlens_k == nullptr)
    return fa::fail(FA_ERR_INVALID, "fa_fwd_cuda: packed sequences need cu_seqlens_k (or a page table)");
  if (paged && (p->page_size < 1 || p->max_pages_per_seq < 0 || p->num_pages < 0))
    return fa::fail(FA_ERR_INVALID, "fa_fwd_cuda: page_size must be >= 1 and the page counts >= 0");
  if (p->softcap < 0.f || !std::isfinite(p->softcap))
    return fa::fail(FA_ERR_INVALID, "fa_fwd_cuda: softcap must be finite and >= 0");
  // The paged loaders multiply a cache row index by the row pitch in 32 bits (PagedRows::offset).
  if (paged && (std::max(std::abs(p->k_str.row), std::abs(p->v_str.row)) * 4 > int64_t(INT32_MAX)))
    return fa::fail(FA_ERR_UNSUPPORTED, "fa_fwd_cuda: paged cache rows of 2^31 bytes or more");
  int width = pick_compiled_width(p->dtype, d, paged);
  // On Hopper a wgmma tile (64 / 128 / 192 / 256) with up to a third of its columns padding beats
  // the mma.sync tile of the head dim's own width: D 96 runs the W 128 kernel, D 160 the W 192 one
  // (NOTES-fwd.md, "Head dims 96 and 192 on Hopper"). The backward has only 64 / 128 / 256.
  if (!paged && width != 0 && p->dtype != FA_FLOAT32 && sm90_kernels_usable()) {
    const int w90 = fa::cuda::pick_width(kWidthsSm90, kWidthsSm90, p->dtype, d);
    if (w90 > width && 3 * w90 <= 4 * width) width = w90;
  }
  const fa_status bad = check_common_args("fa_fwd_cuda", paged ? "CUDA paged attention" : "CUDA forward", p->dtype,
                                          p->batch, p->seqlen_q, p->seqlen_k, p->heads, p->heads_k, d, p->scale, width);
  if (bad != FA_OK) return bad;
  if (p->batch == 0 || p->seqlen_q == 0 || p->heads == 0 || (packed && p->total_q == 0)) return FA_OK;
  if (p->q == nullptr || p->o == nullptr || p->lse == nullptr || (p->seqlen_k > 0 && (p->k == nullptr || p->v == nullptr)))
    return fa::fail(FA_ERR_INVALID, "fa_fwd_cuda: q, k, v, o and lse must be device pointers, got NULL");

  // 16-byte vector loads and stores: pointers 16-byte aligned, strides whole 16-byte chunks.
  const int elem = p->dtype == FA_FLOAT32 ? 4 : 2;
  const int vec = 16 / elem;
  if (!aligned16(p->q) || !aligned16(p->k) || !aligned16(p->v) || !aligned16(p->o))
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward needs q, k, v and o 16-byte aligned");
  if (!strides_ok(p->q_str, vec) || !strides_ok(p->k_str, vec) || !strides_ok(p->v_str, vec) ||
      !strides_ok(p->o_str, vec))
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward needs batch/row/head strides that are multiples of " +
                                            std::to_string(vec) + " elements (16 bytes); contiguous tensors are");

  FwdArgs a{};
  a.q = p->q;
  a.k = p->k;
  a.v = p->v;
  a.o = p->o;
  a.lse = p->lse;
  a.q_batch = p->q_str.batch, a.q_row = p->q_str.row, a.q_head = p->q_str.head;
  a.k_batch = p->k_str.batch, a.k_row = p->k_str.row, a.k_head = p->k_str.head;
  a.v_batch = p->v_str.batch, a.v_row = p->v_str.row, a.v_head = p->v_str.head;
  a.o_batch = p->o_str.batch, a.o_row = p->o_str.row, a.o_head = p->o_str.head;
  if (packed) a.q_batch = a.o_batch = a.k_batch = a.v_batch = 0;
  a.batch = p->batch;
  a.heads = p->heads;
  a.heads_k = p->heads_k;
  a.seqlen_q = p->seqlen_q;
  a.seqlen_k = p->seqlen_k;
  a.head_dim = d;
  a.group = p->heads / p->heads_k;
  kernel_window(p->causal, p->has_window, p->window_left, p->window_right, &a.window_left, &a.window_right);
  a.causal = a.window_right >= 0 ? 1 : 0;
  if (p->softcap > 0.f) {
    a.softcap = p->softcap;
    a.softcap_scale = p->scale / p->softcap;
    a.negate_s = 0;
    a.scale_log2 = 1.4426950408889634f;
  } else {
    a.negate_s = p->scale < 0.f ? 1 : 0;
    // scale == 0 (uniform attention) still needs masked -inf entries to give 0, not NaN: a tiny
    // positive factor keeps every unmasked exponent at 0 and -inf at -inf.
    const float s2 = fabsf(p->scale) * 1.4426950408889634f;
    a.scale_log2 = s2 > 1e-30f ? s2 : 1e-30f;
  }
  a.cu_seqlens_q = p->cu_seqlens_q;
  a.cu_seqlens_k = paged ? nullptr : p->cu_seqlens_k;
  a.seqlens_k = paged ? p->seqlens_k : nullptr;
  a.page_table = p->page_table;
  a.total_q = p->total_q;
  a.total_k = 0;
  a.page_size = p->page_size;
  a.page_div = FastDiv::make(p->page_size);
  a.max_pages = p->max_pages_per_seq;
  a.num_pages = p->num_pages;
  if (packed && !paged) a.total_k = p->total_k;
  a.lse_batch = packed ? 0 : int64_t(p->heads) * p->seqlen_q;
  a.lse_head = packed ? p->total_q : p->seqlen_q;

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (paged) {
    switch (p->dtype) {
      case FA_FLOAT16: return run_paged<__half>(width, a, p, s);
      case FA_BFLOAT16: return run_paged<__nv_bfloat16>(width, a, p, s);
      default: return run_paged<float>(width, a, p, s);
    }
  }
  switch (p->dtype) {
    case FA_FLOAT16: return dispatch<__half, false>(width, a, s);
    case FA_BFLOAT16: return dispatch<__nv_bfloat16, false>(width, a, s);
    default: return dispatch<float, false>(width, a, s);
  }
}
