// FlashAttention-2 backward main kernel for fp16 / bf16 on Hopper (sm_90a): the mma.sync main
// kernel's algorithm (bwd_kernel.cuh, atomic dQ) with the five products on wgmma.
//
// One thread block (2 warpgroups, 256 threads, one per SM) per (key block j, kv head, batch); it
// walks the 64-row query blocks i of every query head of the GQA group. Per block i, warpgroup w
// (the two ways of splitting the work between the warpgroups: Sm90BwdTraits in bwd_traits.cuh):
//   S^T, dP^T = K_j Q_i^T, V_j dO_i^T for its keys x rows
//   P^T = 2^(S^T * scale*log2e - lse*log2e), dS^T = P^T * (dP^T - D)          (registers, fp32)
//   dS^T (and, row split, P^T) -> shared memory as T, [key][row] rows contiguous    (barrier)
//   dV_j += P^T dO_i, dK_j += dS^T Q_i for its keys x columns              (accumulators)
//   dQ_i += dS K_j for its dQ columns, 64 at a time, added into the fp32 workspace with 16-byte
//   reductions in the mma fragment order (DqLayout perm, tile 16 x 64; the convert kernel reads it);
//   key split (FA_BWD_WS_DQ_FIRST): dK_j += dS^T Q_i is issued behind the dQ product, not beside
//   dV, so that the dQ reductions go out while dK runs
// Operands come from shared memory through descriptors (wgmma.cuh): K, V, Q, dO in the 128-byte
// swizzled layout (K-major where the head dim is the k of the product, MN-major through the
// transpose bit where it is the n), dS^T MN-major as the A of dQ; P^T / dS^T as the A of dV / dK
// from registers (key split) or K-major from shared memory (row split). Q_i, dO_i and the lse2 /
// dsum slices are double-buffered with cp.async (block i+1 loads during block i). The block's
// dK / dV go out through K's and V's tiles with 16-byte stores (sm90_bwd_store_dkdv_staged).
#pragma once

#include "cuda/bwd_args.cuh"
#include "cuda/bwd_common.cuh"
#include "cuda/bwd_gemm.cuh"
#include "cuda/bwd_traits.cuh"
#include "cuda/lpt.cuh"
#include "cuda/wgmma.cuh"

#ifndef FA_BWD_WS_STAGED_DKDV
// CMake option FA_BWD_WS_STAGED_DKDV (ON by default; OFF for comparisons): the Hopper backward
// kernels' dK / dV epilogue through shared memory with 16-byte stores (sm90_bwd_store_dkdv_staged):
// the warp-specialised kernel's two splits and, from the forty-second session, the cp.async kernel
// (packed batches, and dense calls whose tensor maps cannot be made)
#define FA_BWD_WS_STAGED_DKDV 1
#endif

#ifndef FA_BWD_WS_DQ_FIRST
// CMake option FA_BWD_WS_DQ_FIRST (ON by default; OFF for comparisons): at the end of a row block the
// Hopper backward kernels' key split issues dK += dS^T Q behind the dQ product, waits for dQ only
// and writes it out while dK runs (the order FlashAttention-3's backward uses), instead of writing
// dQ once every product is done with the tensor cores idle meanwhile. The warp-specialised kernel
// at W 128 (its dQ image into shared memory; 1.01-1.03x at N >= 2k on an H100) and the cp.async
// kernel at W 64 / 128 (its reduce-adds into the workspace; 1.03-1.07x), forty-third session. (The
// warp-specialised W 64 dQ turns keep their order: 0.99-1.00x, 72524bd; the row split's form, dQ
// chunk 0 staged in dO's columns while dK runs, measured 0.99x at W 256: c7b4a6c.)
#define FA_BWD_WS_DQ_FIRST 1
#endif

namespace fa {
namespace cuda {

// This thread block's key block and (batch, kv head): the key blocks of a head next to each other,
// numbered from the last down in deterministic mode (`det`: the highest key block of a head starts
// first, the order its dQ turns follow, bwd_det_rank; in calls without a mask the warp-specialised
// kernel's turns go by arrival instead, bwd_det_rank_rot). FA_WS_LPT builds with a.lpt_groups = G
// (causal calls, not deterministic): key-block-major inside sections of G pairs (sized by the host
// so that the rows those tiles stream fit in L2), so that the longest tiles (key block 0 sees every
// row) of all the section's pairs run first and the grid ends on short ones.
__device__ __forceinline__ void bwd_block_of(const BwdArgs& a, bool det, int* n_block, int* bh) {
  const unsigned n_nb = static_cast<unsigned>(a.num_n_blocks);
#if FA_WS_LPT
  if (!det && a.lpt_groups > 0) {
    lpt_tile(static_cast<int>(blockIdx.x), a.lpt_groups, static_cast<int>(n_nb), static_cast<int>(gridDim.x / n_nb), n_block, bh);
    return;
  }
#endif
  const int j = static_cast<int>(blockIdx.x % n_nb);
  *n_block = det ? static_cast<int>(n_nb) - 1 - j : j;
  *bh = static_cast<int>(blockIdx.x / n_nb);
}

// Row blocks [*m_begin, *m_end) of bm rows hold the rows that see any key of the key block at key0.
template <int BM, int BN>
__device__ __forceinline__ void bwd_row_blocks(const BwdArgs& a, const SeqInfo& seq, int key0, int* m_begin, int* m_end) {
  int rmin, rmax;
  KeyWindow(seq, a.window_left, a.window_right).rows_of_keys(key0, min(key0 + BN, seq.nk) - 1, &rmin, &rmax);
  *m_begin = max(0, rmin) / BM;
  *m_end = (max(0, min(seq.nq, rmax)) + BM - 1) / BM;
}

// Deterministic mode: the turn of key block n_block at row block mm, its rank among the key blocks
// whose rows reach mm, the highest key block first. Those form a contiguous range [j_lo, j_hi]
// (first and last row blocks of a key block, bwd_row_blocks, are nondecreasing in the key block);
// j_hi, the last key block of the sequence whose first row block is at most mm, is found by
// bisection. Why highest first: under a causal mask a key block's first row block is the one on
// its diagonal, where it then goes first; walking its row blocks upwards it reaches row block
// m + 1 one step after the key block above it was there, so no key block waits at its start (with
// the lowest key block first, key block j waited j turns at its first row block: D 256 causal
// 1.37-1.44x the default backward's time, tenth session). The key block above one has a lower
// index (bwd_block_of), so every key block waited for has started already.
template <int BM, int BN>
__device__ __forceinline__ int bwd_det_rank(const BwdArgs& a, const SeqInfo& seq, int n_block, int mm) {
  const KeyWindow kw(seq, a.window_left, a.window_right);
  int lo = n_block, hi = max(n_block, (seq.nk - 1) / BN);
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    int rmin, rmax;
    kw.rows_of_keys(mid * BN, min(mid * BN + BN, seq.nk) - 1, &rmin, &rmax);
    if (max(0, rmin) / BM <= mm) lo = mid;
    else hi = mid - 1;
  }
  return lo - n_block;
}

// Deterministic mode without a mask, warp-specialised kernel (BwdTmaArgs::det_rot): every key block
// sees every row block, and with the ranks above all of a head's key blocks, started together, would
// queue at row block 0 and then move in lockstep, one turn behind each other (key block u of the head,
// counted from the first launched, u turns late at every row block; D 256 N 1k 1.29-1.31x the default
// backward's time). Instead key block u starts its walk at row block u mod n_m and wraps around, so
// at any step the key blocks are at different row blocks. Its turn at row block mm (relative to the
// walk's first, here 0) is its rank among the head's key blocks by the step at which each gets there,
// t = (mm - u) mod n_m, ties (same start) by u: the blocks that arrive earlier go first, so in a walk
// at even pace none waits. A key block waits only for key blocks at an earlier step of their walk (or
// at the same step and started earlier), which wait only for earlier steps again: no cycle. Those can
// have higher block indices than the waiting one, so the host turns this on only for heads of at most
// SMs / 8 key blocks (run_bwd_sm90_ws: why that bound, also with other processes' kernels on the
// GPU): each head's blocks then all get to run once the heads before it are done. Closed form: q = n_nb / n_m key blocks start at each
// row block, one more at the first n_nb % n_m; the rank adds those of the steps before t (row blocks
// mm, mm - 1, .. mm - t + 1 mod n_m) and the key blocks of the same start before u.
__device__ __forceinline__ int bwd_det_rank_rot(int n_nb, int n_m, int n_block, int mm) {
  const int u = n_nb - 1 - n_block;
  const int t = ((mm - u) % n_m + n_m) % n_m;
  const int q = n_nb / n_m, rem = n_nb % n_m;
  const int lo = mm - t + 1;  // the earliest start row block among the steps before t (may wrap)
  const int extra = lo >= 0 ? max(0, min(mm, rem - 1) - lo + 1) : min(mm + 1, rem) + max(0, rem - (lo + n_m));
  return t * q + u / n_m + extra;
}

// Epilogue of a key block: dK (times scale) and dV from one warpgroup's m64nNC accumulators, this
// lane's keys key_l, key_l + 8 (relative to key0; only those below nk exist) and columns col_l + 8j.
template <typename T, int NC>
__device__ __forceinline__ void sm90_bwd_store_dkdv(const BwdArgs& a, const float (&dk)[NC / 2], const float (&dv)[NC / 2],
                                                    int b, int hk, int key0, int nk, int key_l, int col_l) {
  const int64_t kr = bwd_seq(a, b).k_row0 + key0;
  char* const gdk = static_cast<char*>(a.dk) + 2 * (b * a.dk_batch + hk * a.dk_head + kr * a.dk_row);
  char* const gdv = static_cast<char*>(a.dv) + 2 * (b * a.dv_batch + hk * a.dv_head + kr * a.dv_row);
  const float sc = a.scale;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int key = key_l + 8 * hr;
    if (key < nk - key0) {
#pragma unroll
      for (int j = 0; j < NC / 8; ++j) {
        const int col = col_l + 8 * j;
        if (col < a.head_dim) {
          *reinterpret_cast<uint32_t*>(gdk + (key * a.dk_row + col) * 2) =
              pack2<T>(dk[4 * j + 2 * hr] * sc, dk[4 * j + 2 * hr + 1] * sc);
          *reinterpret_cast<uint32_t*>(gdv + (key * a.dv_row + col) * 2) = pack2<T>(dv[4 * j + 2 * hr], dv[4 * j + 2 * hr + 1]);
        }
      }
    }
  }
}

// The same epilogue through shared memory (FA_BWD_WS_STAGED_DKDV builds, the default; both Hopper
// kernels: the warp-specialised one in both splits, and the cp.async one): one warp's 16 keys wkey..
// (relative to key0) x NC columns col0.. of dK (times scale) and dV, packed to 16 bits into its own
// regions sk / sv of 16 rows x 2 NC bytes (16-byte chunks XOR-swizzled by key % 8, so that the 8 keys
// of one store instruction hit distinct banks), then written with 16-byte global stores of whole row
// chunks. In place of sm90_bwd_store_dkdv's 4-byte stores (at W 128, 64 per thread, each warp
// instruction half of 8 sectors): 1.02-1.11x the warp-specialised backward and 1.03-1.10x the
// cp.async one on an H100 (NOTES-bwd.md, forty-first and forty-second sessions).
// head_dim % 8 == 0 and 16-byte aligned rows on CUDA (bwd_api.cu checks), so a chunk is all in or
// all out.
template <typename T, int NC>
__device__ __forceinline__ void sm90_bwd_store_dkdv_staged(const BwdArgs& a, const float (&dk)[NC / 2],
                                                           const float (&dv)[NC / 2], int b, int hk, int key0, int nk,
                                                           int wkey, unsigned char* sk, unsigned char* sv, int lane,
                                                           int col0 = 0) {
  constexpr int kRowBytes = NC * 2, kChunks = NC / 8;
  const int g = lane >> 2, t = lane & 3;
  const float sc = a.scale;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = g + 8 * hr;  // r % 8 == g
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int off = r * kRowBytes + ((j ^ g) << 4) + t * 4;
      *reinterpret_cast<uint32_t*>(sk + off) = pack2<T>(dk[4 * j + 2 * hr] * sc, dk[4 * j + 2 * hr + 1] * sc);
      *reinterpret_cast<uint32_t*>(sv + off) = pack2<T>(dv[4 * j + 2 * hr], dv[4 * j + 2 * hr + 1]);
    }
  }
  __syncwarp();
  const int64_t kr = bwd_seq(a, b).k_row0 + key0 + wkey;
  char* const gdk = static_cast<char*>(a.dk) + 2 * (b * a.dk_batch + hk * a.dk_head + kr * a.dk_row);
  char* const gdv = static_cast<char*>(a.dv) + 2 * (b * a.dv_batch + hk * a.dv_head + kr * a.dv_row);
  const int keys = nk - key0 - wkey;  // this warp's keys inside the sequence (may be <= 0)
#pragma unroll
  for (int i = 0; i < 16 * kChunks / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = idx / kChunks, c = idx % kChunks;
    if (r < keys && col0 + c * 8 < a.head_dim) {
      const int src = r * kRowBytes + ((c ^ (r & 7)) << 4);
      *reinterpret_cast<uint4*>(gdk + (r * a.dk_row + col0 + c * 8) * 2) = *reinterpret_cast<const uint4*>(sk + src);
      *reinterpret_cast<uint4*>(gdv + (r * a.dv_row + col0 + c * 8) * 2) = *reinterpret_cast<const uint4*>(sv + src);
    }
  }
}

// dK (times scale) and dV of one warp into K's and V's shared-memory tiles in the layout their
// tensor maps load (FA_BWD_WS_TMA_DKDV builds; the warp-specialised key split only), for the
// tensor-map stores that follow: per 64-column block cb, [BN keys][128 bytes] with 16-byte chunk c of
// key k at chunk c ^ (k % 8) (the 128-byte swizzle). This lane's keys are key_l and key_l + 8 (in the
// tile; key_l % 8 == lane / 4) and its columns 8j + 2t. One store instruction (fixed j, hr) puts the
// warp's 8 keys x 4 lanes in 32 distinct banks.
template <typename T, int NC, int BN>
__device__ __forceinline__ void sm90_bwd_stage_dkdv_tma(const float (&dk)[NC / 2], const float (&dv)[NC / 2], float sc,
                                                        int key_l, int t, unsigned char* sk, unsigned char* sv) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int key = key_l + 8 * hr;
#pragma unroll
    for (int j = 0; j < NC / 8; ++j) {
      const int off = (j / 8) * BN * 128 + key * 128 + (((j % 8) ^ (key & 7)) << 4) + t * 4;
      *reinterpret_cast<uint32_t*>(sk + off) = pack2<T>(dk[4 * j + 2 * hr] * sc, dk[4 * j + 2 * hr + 1] * sc);
      *reinterpret_cast<uint32_t*>(sv + off) = pack2<T>(dv[4 * j + 2 * hr], dv[4 * j + 2 * hr + 1]);
    }
  }
}

// P^T and dS^T of one warpgroup's S^T / dP^T accumulators (m64nNS, [key][row]), in place: s
// becomes P^T, dp becomes dS^T; dS^T (and P^T when kStoreP) also go to shared memory as [key][row]
// rows of 64 query rows (128 bytes, the 128-byte swizzle), where the dQ product (and, row split, the
// dV / dK products) read them. This lane holds keys key_l, key_l + 8 (relative to the block's
// first key key0) and rows row_l + 8j, row_l + 8j + 1 (relative to the row block's first row row0);
// l_s / d_s are the row block's lse2 / dsum slices. Four versions (softcap or not, mask or not)
// chosen per block, so that the common one carries neither. kStoreDs = false: dS^T stays in
// registers (the caller stores it from its packed A fragments, bwd_ws_store_dst).
template <typename T, int NS, bool kStoreP, bool kCap, bool kMask, bool kStoreDs = true>
__device__ __forceinline__ void sm90_bwd_pds_tile(const BwdArgs& a, float (&s)[NS / 8][4], float (&dp)[NS / 8][4],
                                                  const float* l_s, const float* d_s, unsigned char* sdst,
                                                  unsigned char* spt, const KeyWindow& w, int key0, int row0,
                                                  int key_l, int row_l) {
  const float sl2 = a.p_scale_log2;
#pragma unroll
  for (int j = 0; j < NS / 8; ++j) {
    const int r = row_l + 8 * j;
    const float2 lse = *reinterpret_cast<const float2*>(l_s + r);
    const float2 dsum = *reinterpret_cast<const float2*>(d_s + r);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int key = key_l + 8 * hr;
      float p0, p1, dm0 = 1.f, dm1 = 1.f;
      if constexpr (kCap) {
        p0 = bwd_prob<false>(a, s[j][2 * hr], lse.x, &dm0);
        p1 = bwd_prob<false>(a, s[j][2 * hr + 1], lse.y, &dm1);
      } else {
        p0 = fast_exp2(fmaf(s[j][2 * hr], sl2, -lse.x));
        p1 = fast_exp2(fmaf(s[j][2 * hr + 1], sl2, -lse.y));
      }
      if constexpr (kMask) {
        const int kk = key0 + key;  // key within the sequence; rows row0 + r, row0 + r + 1
        if (kk < w.lo(row0 + r) || kk >= w.hi(row0 + r)) p0 = 0.f;
        if (kk < w.lo(row0 + r + 1) || kk >= w.hi(row0 + r + 1)) p1 = 0.f;
      }
      float ds0 = p0 * (dp[j][2 * hr] - dsum.x), ds1 = p1 * (dp[j][2 * hr + 1] - dsum.y);
      if constexpr (kCap) ds0 *= dm0, ds1 *= dm1;
      const int off = key * 128 + ((((r >> 3)) ^ (key & 7)) << 4) + (r & 7) * 2;
      if constexpr (kStoreDs) *reinterpret_cast<uint32_t*>(sdst + off) = pack2<T>(ds0, ds1);
      if constexpr (kStoreP) *reinterpret_cast<uint32_t*>(spt + off) = pack2<T>(p0, p1);
      s[j][2 * hr] = p0, s[j][2 * hr + 1] = p1;
      dp[j][2 * hr] = ds0, dp[j][2 * hr + 1] = ds1;
    }
  }
}
// The same in two steps without a score modifier, so that each can run while a product is in
// flight (bwd_kernel_sm90_ws.cuh): P^T in place of S^T (masked as above), then dS^T = P^T (dP^T - D)
// in place of dP^T and into shared memory.
template <int NS, bool kMask>
__device__ __forceinline__ void sm90_bwd_p_tile(const BwdArgs& a, float (&s)[NS / 8][4], const float* l_s,
                                                const KeyWindow& w, int key0, int row0, int key_l, int row_l) {
  const float sl2 = a.p_scale_log2;
#pragma unroll
  for (int j = 0; j < NS / 8; ++j) {
    const int r = row_l + 8 * j;
    const float2 lse = *reinterpret_cast<const float2*>(l_s + r);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float p0 = fast_exp2(fmaf(s[j][2 * hr], sl2, -lse.x));
      float p1 = fast_exp2(fmaf(s[j][2 * hr + 1], sl2, -lse.y));
      if constexpr (kMask) {
        const int kk = key0 + key_l + 8 * hr;
        if (kk < w.lo(row0 + r) || kk >= w.hi(row0 + r)) p0 = 0.f;
        if (kk < w.lo(row0 + r + 1) || kk >= w.hi(row0 + r + 1)) p1 = 0.f;
      }
      s[j][2 * hr] = p0, s[j][2 * hr + 1] = p1;
    }
  }
}
template <int NS>
__device__ __forceinline__ void sm90_bwd_p(const BwdArgs& a, float (&s)[NS / 8][4], const float* l_s, int nq, int nk,
                                           int key0, int bn, int row0, int bm, int key_l, int row_l) {
  const KeyWindow w(SeqInfo{nq, nk, 0, 0}, a.window_left, a.window_right);
  if (w.needs_mask(key0, bn, row0, row0 + bm - 1)) sm90_bwd_p_tile<NS, true>(a, s, l_s, w, key0, row0, key_l, row_l);
  else sm90_bwd_p_tile<NS, false>(a, s, l_s, w, key0, row0, key_l, row_l);
}
template <typename T, int NS, bool kStoreDs = true>
__device__ __forceinline__ void sm90_bwd_ds(const float (&p)[NS / 8][4], float (&dp)[NS / 8][4], const float* d_s,
                                            unsigned char* sdst, int key_l, int row_l) {
#pragma unroll
  for (int j = 0; j < NS / 8; ++j) {
    const int r = row_l + 8 * j;
    const float2 dsum = *reinterpret_cast<const float2*>(d_s + r);
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int key = key_l + 8 * hr;
      const float ds0 = p[j][2 * hr] * (dp[j][2 * hr] - dsum.x), ds1 = p[j][2 * hr + 1] * (dp[j][2 * hr + 1] - dsum.y);
      if constexpr (kStoreDs) {
        const int off = key * 128 + ((((r >> 3)) ^ (key & 7)) << 4) + (r & 7) * 2;
        *reinterpret_cast<uint32_t*>(sdst + off) = pack2<T>(ds0, ds1);
      }
      dp[j][2 * hr] = ds0, dp[j][2 * hr + 1] = ds1;
    }
  }
}

// The version for this block: the mask only where the block [key0, key0 + bn) x [row0, row0 + bm)
// crosses a bound of the window or the keys, the score modifier only with a softcap.
template <typename T, int NS, bool kStoreP, bool kStoreDs = true>
__device__ __forceinline__ void sm90_bwd_pds(const BwdArgs& a, float (&s)[NS / 8][4], float (&dp)[NS / 8][4],
                                             const float* l_s, const float* d_s, unsigned char* sdst,
                                             unsigned char* spt, int nq, int nk, int key0, int bn, int row0, int bm,
                                             int key_l, int row_l) {
  const KeyWindow w(SeqInfo{nq, nk, 0, 0}, a.window_left, a.window_right);
  const bool need_mask = w.needs_mask(key0, bn, row0, row0 + bm - 1);
  if (a.softcap > 0.f) {
    if (need_mask) sm90_bwd_pds_tile<T, NS, kStoreP, true, true, kStoreDs>(a, s, dp, l_s, d_s, sdst, spt, w, key0, row0, key_l, row_l);
    else sm90_bwd_pds_tile<T, NS, kStoreP, true, false, kStoreDs>(a, s, dp, l_s, d_s, sdst, spt, w, key0, row0, key_l, row_l);
  } else {
    if (need_mask) sm90_bwd_pds_tile<T, NS, kStoreP, false, true, kStoreDs>(a, s, dp, l_s, d_s, sdst, spt, w, key0, row0, key_l, row_l);
    else sm90_bwd_pds_tile<T, NS, kStoreP, false, false, kStoreDs>(a, s, dp, l_s, d_s, sdst, spt, w, key0, row0, key_l, row_l);
  }
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) bwd_kernel_sm90(const BwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename Tr::T;
  constexpr bool kKeySplit = Tr::kKeySplit;
  constexpr bool kCpDqFirst = FA_BWD_WS_DQ_FIRST && kKeySplit;  // (dK behind the dQ product, below)
  constexpr int W = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int kCB = Tr::kColBlocks;
  constexpr int NS = Tr::kSRows;   // S^T columns (query rows) per warpgroup
  constexpr int NC = Tr::kCols;    // dK / dV columns per warpgroup
  constexpr int NQ = Tr::kDqCols;  // dQ columns per warpgroup
  constexpr int QC = Tr::kDqChunk; // dQ columns per wgmma

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sK = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (sK - raw);  // generic pointer to sK
  const uint32_t sV = sK + Tr::kTileKV;
  const uint32_t sQ = sV + Tr::kTileKV;       // 2 stages
  const uint32_t sdO = sQ + 2 * Tr::kTileQ;   // 2 stages
  const uint32_t sdSt = sdO + 2 * Tr::kTileQ;
  const uint32_t sPt = sdSt + Tr::kTileP;     // row split only
  float* const sL = reinterpret_cast<float*>(smem + (sdSt + Tr::kNumP * Tr::kTileP - sK));  // [2][BM] lse2
  float* const sDs = sL + 2 * BM;                                                          // [2][BM] dsum

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = sm90::warp_uniform(warp >> 2), wq = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  // Block order: key blocks of a head next to each other (they read the same Q / dO rows at about
  // the same time), from the last down in deterministic mode (bwd_block_of). Key-block-major order
  // (key block j of every head, then j - 1), once the deterministic order at W 64, measured slower
  // everywhere with the highest-first turns (eleventh session, fp16 full N 512-16k: D 64 1.10-1.40x
  // the default's time against 1.02-1.15x adjacent, D 128 1.06-1.37x against 1.00-1.07x, D 256
  // 1.37-1.58x against 1.06-1.38x; under a causal mask the grid ended on the longest key blocks).
  int n_block, bh;
  bwd_block_of(a, a.dq_sem != nullptr, &n_block, &bh);
  const int hk = bh % a.heads_k;
  const int b = bh / a.heads_k;
  const SeqInfo seq = bwd_seq(a, b);
  const int Nq = seq.nq, Nk = seq.nk;
  const int key0 = n_block * BN;
  if (key0 >= Nk) return;  // past this sequence's keys (packed batches size the grid by the longest)
  const int valid_chunks = a.head_dim / 8;
  const int wkey0 = kKeySplit ? wg * 64 : 0;  // this warpgroup's first key (S^T rows) in the block
  const int wrow0 = kKeySplit ? 0 : wg * NS;  // and first query row (S^T columns)

  int m_begin, m_end;
  bwd_row_blocks<BM, BN>(a, seq, key0, &m_begin, &m_end);
  const int n_m = max(0, m_end - m_begin);
  const int total = n_m * a.group;  // iterations: (query head of the group, row block)

  {
    const SwizzledTileLoader<BN, kCB, Tr::kThreads> kv_loader(tid);
    const int64_t kr = seq.k_row0 + key0;
    const char* gk = static_cast<const char*>(a.k) + 2 * (b * a.k_batch + hk * a.k_head + kr * a.k_row);
    const char* gv = static_cast<const char*>(a.v) + 2 * (b * a.v_batch + hk * a.v_head + kr * a.v_row);
    kv_loader.load(sK, gk, a.k_row * 2, Nk - key0, valid_chunks);
    kv_loader.load(sV, gv, a.v_row * 2, Nk - key0, valid_chunks);
  }
  const SwizzledTileLoader<BM, kCB, Tr::kThreads> q_loader(tid);
  // Per-sequence bases (the head and row block are added per load).
  const char* const gq_b = static_cast<const char*>(a.q) + 2 * (b * a.q_batch + seq.q_row0 * a.q_row);
  const char* const gdo_b = static_cast<const char*>(a.dout) + 2 * (b * a.do_batch + seq.q_row0 * a.do_row);
  const int64_t ws_b = bwd_ws_base(a, b, 0, seq);
  auto load_rows = [&](int hq, int m, int stage) {
    const int row0 = m * BM;
    const char* gq = gq_b + 2 * (hq * a.q_head + static_cast<int64_t>(row0) * a.q_row);
    const char* gdo = gdo_b + 2 * (hq * a.do_head + static_cast<int64_t>(row0) * a.do_row);
    q_loader.load(sQ + stage * Tr::kTileQ, gq, a.q_row * 2, Nq - row0, valid_chunks);
    q_loader.load(sdO + stage * Tr::kTileQ, gdo, a.do_row * 2, Nq - row0, valid_chunks);
    const int64_t roff = ws_b + hq * a.ws_head + row0;
    if (tid < BM / 4)
      cp_async_16(smem_u32(sL + stage * BM) + tid * 16, a.lse2 + roff + tid * 4, true);
    else if (tid < BM / 2)
      cp_async_16(smem_u32(sDs + stage * BM) + (tid - BM / 4) * 16, a.dsum + roff + (tid - BM / 4) * 4, true);
  };
  // Row blocks walk upwards, in deterministic mode too (bwd_det_rank: the highest key block goes
  // first at every row block, so a key block's first row block under a causal mask is its turn).
  int hq = hk * a.group, m = m_begin;
  if (total > 0) load_rows(hq, m, 0);
  cp_async_commit();

  float dv[NC / 2], dk[NC / 2];
#pragma unroll
  for (int i = 0; i < NC / 2; ++i) dv[i] = dk[i] = 0.f;

  // Descriptors. K-major: 8-row groups 1024 bytes apart, k-step ks at column block ks / 4 (a block
  // is rows x 128 bytes), byte 32 (ks % 4). MN-major: 16 k-rows = 2048 bytes per k-step, 64-column
  // blocks rows x 128 bytes apart.
  constexpr uint32_t kMnStep = 2048 >> 4;
  constexpr uint32_t kStage = Tr::kTileQ >> 4;
  const sm90::SmemDesc dK_a = sm90::smem_desc_w(sK + wkey0 * 128, 16, 1024);   // A of S^T: this warpgroup's keys
  const sm90::SmemDesc dV_a = sm90::smem_desc_w(sV + wkey0 * 128, 16, 1024);   // A of dP^T
  const sm90::SmemDesc dQ_b = sm90::smem_desc_w(sQ + wrow0 * 128, 16, 1024);   // B of S^T: this warpgroup's rows
  const sm90::SmemDesc ddO_b = sm90::smem_desc_w(sdO + wrow0 * 128, 16, 1024);  // B of dP^T
  const sm90::SmemDesc ddSt_mn = sm90::smem_desc_w(sdSt, BN * 128, 1024);       // A of dQ (MN-major)
  // B of dV / dK (MN-major): dO / Q columns from this warpgroup's first dK / dV column.
  const uint32_t col_off = (kKeySplit ? 0 : wg * (NC / 64)) * BM * 128;
  const sm90::SmemDesc ddO_mn = sm90::smem_desc_w(sdO + col_off, BM * 128, 1024);
  const sm90::SmemDesc dQ_mn = sm90::smem_desc_w(sQ + col_off, BM * 128, 1024);
  // B of dQ (MN-major): the K tile; each chunk adds its first column's offset.
  const sm90::SmemDesc dK_mn = sm90::smem_desc_w(sK, BN * 128, 1024);

  // Deterministic mode: key block n_block's turn at row block mm (bwd_det_rank).
  auto rank_of = [&](int mm) { return bwd_det_rank<BM, BN>(a, seq, n_block, mm); };
  // A turn is handed on only once every thread's adds of it are done in memory: each thread's
  // fence (membar) waits for its own reductions, a barrier gathers the block, then thread 0's
  // release. Right after the adds the fence waits out their round trip (~1 us per step, with the
  // block idle), so it runs at the start of the next iteration while the S^T / dP^T products are in
  // flight (after the last iteration, at the end). Released later in that iteration (after its
  // next barrier), every hand-on waited ~1/3 of an iteration longer: without a causal mask the key
  // blocks of a head follow each other at every row block, and D 256 full N 512-4k went from
  // 1.14-1.31x the default's time to 1.30-1.44x (eleventh session).
  // (Released after a barrier alone, a turn could be passed on with adds of other warps still in
  // flight: the next key block's adds could then land first, and D 256 sums came out in a varying
  // order once the turns followed each other closely.)
  bool pending = false;     // a turn whose release waits for the next iteration (block-uniform)
  int* pend_sem = nullptr;  // thread 0: its counter and rank
  int pend_rank = 0;
  for (int it = 0; it < total; ++it) {
    const int st = it & 1;
    const int row0 = m * BM;
    int next_h = hq, next_m = m + 1;
    if (next_m == m_end) next_m = m_begin, ++next_h;
    cp_async_wait<0>();
    sm90::fence_proxy_async_smem();
    __syncthreads();  // Q_i, dO_i, slices visible; every warp is done with block i-1 (dS^T, P^T, stage st^1)
    int* sem = nullptr;
    int rank = 0;
    if (a.dq_sem != nullptr) {
      static_assert(BM == 64, "one dq_sem counter per 64 workspace rows");
      sem = a.dq_sem + ((ws_b + hq * a.ws_head + row0) >> 6);
      if (tid == 0) rank = rank_of(m);
    }
    if (it + 1 < total) load_rows(next_h, next_m, st ^ 1);
    cp_async_commit();

    // S^T and dP^T: this warpgroup's 64 keys x NS rows.
    float s[1][NS / 8][4], dp[1][NS / 8][4];
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < W / 16; ++ks)
      sm90::Wgmma<T, NS>::ss(&s[0][0][0], dK_a + sm90::kstep(ks, BN), dQ_b + st * kStage + sm90::kstep(ks, BM), ks > 0);
#pragma unroll
    for (int ks = 0; ks < W / 16; ++ks)
      sm90::Wgmma<T, NS>::ss(&dp[0][0][0], dV_a + sm90::kstep(ks, BN), ddO_b + st * kStage + sm90::kstep(ks, BM), ks > 0);
    sm90::wgmma_commit();
    if (pending) {  // the previous row block's turn, handed on while the products run
      __threadfence();  // this thread's adds of it done in memory
      __syncthreads();
      if (tid == 0) st_release_gpu(pend_sem, pend_rank + 1);
      pending = false;
    }
    sm90::wgmma_wait<0>();
    sm90::reg_fence<NS / 2>(&s[0][0][0]);
    sm90::reg_fence<NS / 2>(&dp[0][0][0]);

    // P^T, dS^T in place of S^T, dP^T, and into shared memory (sm90_bwd_pds).
    sm90_bwd_pds<T, NS, !kKeySplit>(a, s[0], dp[0], sL + st * BM, sDs + st * BM, smem + (sdSt - sK), smem + (sPt - sK),
                                    Nq, Nk, key0, BN, row0, BM, wkey0 + wq * 16 + g, wrow0 + 2 * t);
    sm90::fence_proxy_async_smem();

    // dV += P^T dO, dK += dS^T Q for this warpgroup's keys x columns.
    uint32_t pa[kKeySplit ? BM / 16 : 1][4], dsa[kKeySplit ? BM / 16 : 1][4];
    if constexpr (kKeySplit) {
      // From registers: the S^T / dP^T accumulators of adjacent n8 tiles are the A fragments.
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        pa[kk][0] = pack2<T>(s[0][2 * kk][0], s[0][2 * kk][1]);
        pa[kk][1] = pack2<T>(s[0][2 * kk][2], s[0][2 * kk][3]);
        pa[kk][2] = pack2<T>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
        pa[kk][3] = pack2<T>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
        dsa[kk][0] = pack2<T>(dp[0][2 * kk][0], dp[0][2 * kk][1]);
        dsa[kk][1] = pack2<T>(dp[0][2 * kk][2], dp[0][2 * kk][3]);
        dsa[kk][2] = pack2<T>(dp[0][2 * kk + 1][0], dp[0][2 * kk + 1][1]);
        dsa[kk][3] = pack2<T>(dp[0][2 * kk + 1][2], dp[0][2 * kk + 1][3]);
      }
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        sm90::Wgmma<T, NC>::rs(dv, pa[kk], ddO_mn + st * kStage + kk * kMnStep, 1);
      if constexpr (!kCpDqFirst) {
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk)
          sm90::Wgmma<T, NC>::rs(dk, dsa[kk], dQ_mn + st * kStage + kk * kMnStep, 1);
      }
      sm90::wgmma_commit();
      __syncthreads();  // dS^T of both warpgroups visible (the dV / dK products run meanwhile)
    } else {
      __syncthreads();  // P^T, dS^T of both warpgroups visible
      const sm90::SmemDesc dPt_a = sm90::smem_desc_w(sPt, 16, 1024);
      const sm90::SmemDesc ddSt_a = sm90::smem_desc_w(sdSt, 16, 1024);
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        sm90::Wgmma<T, NC>::template ss<0, 1>(dv, dPt_a + sm90::kstep(kk, BN), ddO_mn + st * kStage + kk * kMnStep, 1);
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        sm90::Wgmma<T, NC>::template ss<0, 1>(dk, ddSt_a + sm90::kstep(kk, BN), dQ_mn + st * kStage + kk * kMnStep, 1);
      sm90::wgmma_commit();
    }

    // Deterministic mode: thread 0 waits for this row block's turn (rank_of), the block follows.
    // Blocks start in index order and a higher key block of the same head has a lower index in
    // either block order (bwd_block_of), so every key block waited for has started already; a
    // block holds no turn while it waits for one (the previous one was handed on above): no cycle.
    if (sem != nullptr) {
      if (tid == 0)
        while (ld_acquire_gpu(sem) != rank) __nanosleep(64);
      __syncthreads();
    }
    sm90::wgmma_fence();  // the dQ products follow a branch: fenced here (else ptxas injects an arrive)

    // dQ += dS K for this warpgroup's dQ columns, kDqChunk (64, or 32 at W 64) at a time.
    float* const head_acc = a.dq_acc + (ws_b + hq * a.ws_head + row0) * W;
#pragma unroll
    for (int c = 0; c < NQ / QC; ++c) {
      const int colq = wg * NQ + c * QC;  // first dQ column of this chunk
      float dq[QC / 2];
      // The chunk's accumulators may sit in the registers the previous chunk's reductions still
      // read: the fence (PTX: required between a register access and a wgmma writing the same
      // register) orders those reads before the wgmmas write them.
      if (c > 0) sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
        sm90::Wgmma<T, QC>::template ss<1, 1>(
            dq, ddSt_mn + kk * kMnStep, dK_mn + ((((colq / 64) * BN * 128) + (colq % 64) * 2) >> 4) + kk * kMnStep,
            kk > 0);
      sm90::wgmma_commit();
      if constexpr (kCpDqFirst) {  // dK behind the dQ product: the adds below go out while it runs
        static_assert(NQ == QC, "the key split's dQ is one chunk");
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BM / 16; ++kk)
          sm90::Wgmma<T, NC>::rs(dk, dsa[kk], dQ_mn + st * kStage + kk * kMnStep, 1);
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();  // dV and dQ
      } else {
        sm90::wgmma_wait<0>();
      }
      sm90::reg_fence<QC / 2>(dq);
      float* const base = head_acc + (wq * (W / QC) + colq / QC) * (16 * QC);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int nt = 0; nt < QC / 8; nt += 2)
          red_add_f32x4(base + (((hr * (QC / 8) + nt) / 2) * 32 + lane) * 4, dq[4 * nt + 2 * hr],
                        dq[4 * nt + 2 * hr + 1], dq[4 * (nt + 1) + 2 * hr], dq[4 * (nt + 1) + 2 * hr + 1]);
    }
    sm90::wgmma_wait<0>();
    sm90::reg_fence<NC / 2>(dv);
    sm90::reg_fence<NC / 2>(dk);
    if constexpr (kKeySplit) {
      sm90::reg_fence_u32<BM / 4>(&pa[0][0]);
      sm90::reg_fence_u32<BM / 4>(&dsa[0][0]);
    }
    if (sem != nullptr) {  // handed on in the next iteration, or after the loop
      pending = true;
      if (tid == 0) pend_sem = sem, pend_rank = rank;
    }
    hq = next_h, m = next_m;
  }
  cp_async_wait<0>();
  if (pending) {  // the last turn
    __threadfence();
    __syncthreads();
    if (tid == 0) st_release_gpu(pend_sem, pend_rank + 1);
  }

  // Epilogue: dK (times scale) and dV, this lane's keys wkey0 + wq*16 + g (+8), columns
  // wg * NC + 8j + 2t (row split) or 8j + 2t (key split).
#if FA_BWD_WS_STAGED_DKDV
  // Through K's and V's tiles, as the warp-specialised kernel does (sm90_bwd_store_dkdv_staged).
  // Nothing reads them again once every warp is past its last dQ product (each waited for its
  // wgmmas above) and every copy into them has landed (each thread waited for its own above): the
  // barrier. Key split: warp (wg, wq)'s 16 keys are rows wkey0 + 16 wq.. of the [key][2 W bytes]
  // images, which fill the tiles exactly. Row split: warpgroup wg's image, [BN keys][2 NC bytes],
  // is half of a tile.
  static_assert(Tr::kTileKV == (kKeySplit ? BN * 2 * NC : 2 * BN * 2 * NC),
                "the dK / dV images fill K's and V's tiles");
  __syncthreads();
  {
    const int wkey = wkey0 + wq * 16;
    const uint32_t off = (kKeySplit ? 0 : wg * (BN * 2 * NC)) + wkey * (2 * NC);
    sm90_bwd_store_dkdv_staged<T, NC>(a, dk, dv, b, hk, key0, Nk, wkey, smem + off, smem + (sV - sK) + off, lane,
                                      kKeySplit ? 0 : wg * NC);
  }
#else
  sm90_bwd_store_dkdv<T, NC>(a, dk, dv, b, hk, key0, Nk, wkey0 + wq * 16 + g, (kKeySplit ? 0 : wg * NC) + 2 * t);
#endif
#else
  __trap();  // only the sm_90a build has this kernel; the dispatcher never launches it elsewhere
#endif
}

}  // namespace cuda
}  // namespace fa
