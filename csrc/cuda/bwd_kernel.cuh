// FlashAttention-2 backward on sm_80+ (mma.sync; fp16/bf16 operands or 3xTF32, fp32 accumulation).
//
// Main kernel: one thread block per (key block of kBlockN keys, kv head, batch). K_j and V_j are
// loaded once; dK_j and dV_j accumulate in registers over every query row block of every query
// head of the GQA group (so the group sum needs no expanded copy and no atomics), and are written
// once. Per row block i (Q_i, dO_i and the lse2 / dsum slices double-buffered with cp.async: block
// i+1 loads during block i):
//   S  = Q_i K_j^T,  dP = dO_i V_j^T                      (warp grid kWarpsMSdP x kWarpsNSdP)
//   P  = 2^(S * scale * log2e - lse * log2e)              (0 where masked: keys >= Nk, causal, and
//                                                          lse = +inf rows, i.e. rows that see no key)
//   dS = P * (dP - D_i)                                   P and dS -> shared memory (as T)
//   dV_j += P^T dO_i,  dK_j += dS^T Q_i                   (warp grid kWarpsNdKV x kWarpsDdKV)
//   atomic mode: dQ_i += dS K_j, added to the fp32 workspace with red.global.add.v2/.v4.f32; with
//                kOptDqPerm (the fp16/bf16 defaults) the workspace holds each warp's tile in the mma
//                fragment order, so one reduction instruction covers 256 / 512 contiguous bytes
//                (DqLayout in bwd_args.cuh; the convert kernel reads it back)
// Masks (KeyWindow, attn_pieces.cuh: causal and sliding window, bottom-right aligned per sequence):
// the row loop covers only the row blocks that can see key block j (and the dQ kernel's key loop
// only the key blocks its rows can see); only blocks crossing a window edge or the ragged end of the
// keys evaluate the mask. Packed (varlen) sequences: each block finds its sequence's rows through
// bwd_seq; blocks past a sequence's end return at once. Softcap: bwd_prob (bwd_common.cuh).
//
// dQ kernel (deterministic mode): one thread block per (row block, head, batch), FA2's forward loop
// order: Q_i, dO_i stay in shared memory, K_j / V_j double-buffered; S, dP, P, dS are recomputed
// and dQ_i accumulates in registers, written once (times scale) in the input dtype. No atomics
// anywhere, so dQ, dK, dV are bit-identical run to run.
#pragma once
#include "cuda/bwd_common.cuh"
#include "cuda/bwd_gemm.cuh"
#include "cuda/bwd_traits.cuh"
#include "cuda/fwd_common.cuh"

namespace fa {
namespace cuda {

// P and dS of one S/dP warp tile from the S and dP accumulators, stored to shared memory (P only
// when kStoreP). r0 / c0: the warp tile's first row / column within the block; row0 / key0: the
// block's first query row and key within the sequence. kMask: evaluate the key window (KeyWindow:
// keys past the sequence, causal, sliding window).
// fp16/bf16: P = 2^(S * scale*log2e - lse*log2e) (l_s holds lse*log2e). fp32: P = 2^((S * scale -
// lse) * log2e) with l_s holding lse itself: one rounding of the small difference instead of two
// roundings of large products that cancel (~1e-6 relative on P when |lse| ~ 20). With softcap the
// score is softcap * tanh(S * scale / softcap) and dS gets the factor 1 - tanh^2 (bwd_prob).
template <class Tr, bool kStoreP, bool kMask, bool kCap, int MT, int NT>
__device__ __forceinline__ void softmax_grad_tile(float (&s)[MT][NT][4], float (&dp)[MT][NT][4], const float* l_s,
                                                  const float* d_s, unsigned char* sP, unsigned char* sdS, int r0,
                                                  int c0, const KeyWindow& win, int row0, int key0, const BwdArgs& a,
                                                  int lane) {
  using T = typename Tr::T;
  constexpr int E = Tr::kElem;
  constexpr int PPB = Tr::kPitchPB;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = r0 + mt * 16 + g + 8 * hr;
      const float lse = l_s[r];
      const float dsum = d_s[r];
      int lo = 0, hi = 0;
      if constexpr (kMask) {
        const int base = key0 + c0 + 2 * t;
        lo = win.lo(row0 + r) - base;
        hi = win.hi(row0 + r) - base;
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        float pv[2], dv[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float dmod = 1.f;
          float p;
          if constexpr (kCap) {
            if constexpr (Tr::kIsFp32)
              p = bwd_prob_f32(a, s[mt][nt][2 * hr + e], lse, &dmod);
            else
              p = bwd_prob<false>(a, s[mt][nt][2 * hr + e], lse, &dmod);
          } else if constexpr (Tr::kIsFp32) {
            p = fast_exp2(fmaf(s[mt][nt][2 * hr + e], a.p_scale, -lse) * 1.4426950408889634f);
          } else {
            p = fast_exp2(fmaf(s[mt][nt][2 * hr + e], a.p_scale_log2, -lse));
          }
          if constexpr (kMask) {
            const int c = nt * 8 + e;
            if (c < lo || c >= hi) p = 0.f;
          }
          pv[e] = p;
          dv[e] = kCap ? p * (dp[mt][nt][2 * hr + e] - dsum) * dmod : p * (dp[mt][nt][2 * hr + e] - dsum);
        }
        const int off = r * PPB + (c0 + nt * 8 + 2 * t) * E;
        if constexpr (kStoreP) store_pair<T>(sP + off, pv[0], pv[1]);
        store_pair<T>(sdS + off, dv[0], dv[1]);
      }
    }
}

// Loads one query row block of head h: Q_i and dO_i (zero-filled past Nq and past head_dim) and the
// block's lse2 / dsum slices (the workspace pads them to nq_pad rows, so whole 16-byte chunks).
template <class Tr, class Loader>
__device__ __forceinline__ void load_row_block(const Loader& loader, unsigned char* q_s, unsigned char* do_s, float* l_s,
                                               float* d_s, const BwdArgs& a, int b, int h, const SeqInfo& seq,
                                               int row0, int tid, int valid_chunks) {
  constexpr int E = Tr::kElem;
  constexpr int BM = Tr::kBlockM;
  const int64_t qr = seq.q_row0 + row0;
  const char* gq = static_cast<const char*>(a.q) + E * (b * a.q_batch + h * a.q_head + qr * a.q_row);
  const char* gdo = static_cast<const char*>(a.dout) + E * (b * a.do_batch + h * a.do_head + qr * a.do_row);
  loader.load(smem_u32(q_s), gq, a.q_row * E, seq.nq - row0, valid_chunks);
  loader.load(smem_u32(do_s), gdo, a.do_row * E, seq.nq - row0, valid_chunks);
  const int64_t roff = bwd_ws_base(a, b, h, seq) + row0;
  if (tid < BM / 4)
    cp_async_16(smem_u32(l_s) + tid * 16, a.lse2 + roff + tid * 4, true);
  else if (tid < BM / 2)
    cp_async_16(smem_u32(d_s) + (tid - BM / 4) * 16, a.dsum + roff + (tid - BM / 4) * 4, true);
}

// S = Q_i K_j^T and dP = dO_i V_j^T for this warp's S/dP tile, then P and dS to shared memory
// (softmax_grad_tile; the mask is evaluated only on blocks crossing the diagonal or the ragged end of
// the keys). row0 / key0: the block's first query row and key.
template <class Tr, bool kStoreP>
__device__ __forceinline__ void sdp_softmax_grad(const unsigned char* q_s, const unsigned char* do_s,
                                                 const unsigned char* k_s, const unsigned char* v_s, const float* l_s,
                                                 const float* d_s, unsigned char* sP, unsigned char* sdS,
                                                 const BwdArgs& a, const KeyWindow& win, int row0, int key0, int warp,
                                                 int lane) {
  constexpr int MTs = Tr::kTileMSdP / 16, NTs = Tr::kTileNSdP / 8;
  constexpr int PB = Tr::kPitchB;
  const int wm = warp / Tr::kWarpsNSdP, wn = warp % Tr::kWarpsNSdP;
  float s[MTs][NTs][4], dp[MTs][NTs][4];
  zero_acc(s);
  zero_acc(dp);
  warp_gemm2<Tr, MTs, NTs, Tr::kHeadDim, false, false, PB, PB>(s, q_s + wm * Tr::kTileMSdP * PB,
                                                                k_s + wn * Tr::kTileNSdP * PB, dp,
                                                                do_s + wm * Tr::kTileMSdP * PB,
                                                                v_s + wn * Tr::kTileNSdP * PB, lane);
  // Four versions (softcap or not, mask or not), chosen per tile: the common one carries neither.
  const bool need_mask = win.needs_mask(key0, Tr::kBlockN, row0, row0 + Tr::kBlockM - 1);
  const int r0 = wm * Tr::kTileMSdP, c0 = wn * Tr::kTileNSdP;
  if (a.softcap > 0.f) {
    if (need_mask)
      softmax_grad_tile<Tr, kStoreP, true, true>(s, dp, l_s, d_s, sP, sdS, r0, c0, win, row0, key0, a, lane);
    else
      softmax_grad_tile<Tr, kStoreP, false, true>(s, dp, l_s, d_s, sP, sdS, r0, c0, win, row0, key0, a, lane);
  } else {
    if (need_mask)
      softmax_grad_tile<Tr, kStoreP, true, false>(s, dp, l_s, d_s, sP, sdS, r0, c0, win, row0, key0, a, lane);
    else
      softmax_grad_tile<Tr, kStoreP, false, false>(s, dp, l_s, d_s, sP, sdS, r0, c0, win, row0, key0, a, lane);
  }
}

// Adds this warp's dQ tile (C fragments: rows g and g + 8 of each m16 tile, columns 2t, 2t + 1 of
// each n8 tile) into one head's fp32 accumulator (nq_pad x W floats, DqLayout in bwd_args.cuh).
// Fragment order (kDqPerm): the warp's tile_m x tile_d floats are contiguous, register pair
// j = (mt * 2 + hr) * NT + nt of every lane at j * 64 + 2 * lane (kDqVec 4: pairs j, j + 1 together
// at (j / 2 * 32 + lane) * 4), so one reduction instruction covers 256 / 512 contiguous bytes. Pad
// rows (>= Nq) and pad columns (>= head_dim) add zeros there (zero-filled Q rows and K columns, lse2
// = +inf), inside the workspace. Row-major: element (i, c) at i * W + c; pads skipped.
template <class Tr, int MT, int NT>
__device__ __forceinline__ void add_dq_tile(const float (&dq)[MT][NT][4], float* head_acc, int row0, int warp,
                                            int lane, int Nq, int D) {
  constexpr int W = Tr::kHeadDim;
  if constexpr (Tr::kDqPerm) {
    float* const base = head_acc + static_cast<int64_t>(row0) * W + warp * (Tr::kTileMdQ * Tr::kTileDdQ);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        if constexpr (Tr::kDqVec == 4) {
#pragma unroll
          for (int nt = 0; nt < NT; nt += 2)
            red_add_f32x4(base + (((mt * 2 + hr) * NT + nt) / 2 * 32 + lane) * 4, dq[mt][nt][2 * hr],
                          dq[mt][nt][2 * hr + 1], dq[mt][nt + 1][2 * hr], dq[mt][nt + 1][2 * hr + 1]);
        } else {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            red_add_f32x2(base + ((mt * 2 + hr) * NT + nt) * 64 + 2 * lane, dq[mt][nt][2 * hr],
                          dq[mt][nt][2 * hr + 1]);
        }
      }
  } else {
    const int r0 = row0 + warp / Tr::kWarpsDdQ * Tr::kTileMdQ + (lane >> 2);  // this lane's first row
    const int c0 = warp % Tr::kWarpsDdQ * Tr::kTileDdQ + 2 * (lane & 3);       // and first column
    float* const p = head_acc + static_cast<int64_t>(r0) * W + c0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        if (r0 + mt * 16 + 8 * hr < Nq) {
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            if (c0 + nt * 8 < D) red_add_f32x2(p + (mt * 16 + 8 * hr) * W + nt * 8, dq[mt][nt][2 * hr], dq[mt][nt][2 * hr + 1]);
        }
      }
  }
}

template <class Tr, bool kAtomicDQ>
__global__ void __launch_bounds__(Tr::kThreads, 1) bwd_main_kernel(const BwdArgs a) {
  constexpr int E = Tr::kElem;
  constexpr int W = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int PB = Tr::kPitchB;
  constexpr int PPB = Tr::kPitchPB;
  constexpr int kThreads = Tr::kThreads;
  constexpr int MTkv = Tr::kTileNdKV / 16, NTkv = Tr::kTileDdKV / 8;
  constexpr int MTq = Tr::kTileMdQ / 16, NTq = Tr::kTileDdQ / 8;

  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* const sK = smem;
  unsigned char* const sV = sK + Tr::kSmemKV;
  constexpr int S = Tr::kStages;
  unsigned char* const sQ = sV + Tr::kSmemKV;        // S stages
  unsigned char* const sdO = sQ + S * Tr::kSmemQ;    // S stages
  unsigned char* const sP = sdO + S * Tr::kSmemQ;
  unsigned char* const sdS = sP + Tr::kSmemP;
  float* const sL = reinterpret_cast<float*>(sdS + Tr::kSmemP);  // [S][BM] lse2
  float* const sDs = sL + S * BM;                                // [S][BM] dsum

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n_block = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.num_n_blocks));
  const int bh = static_cast<int>(blockIdx.x / static_cast<unsigned>(a.num_n_blocks));
  const int hk = bh % a.heads_k;
  const int b = bh / a.heads_k;
  const SeqInfo seq = bwd_seq(a, b);
  const int Nq = seq.nq, Nk = seq.nk;
  const int key0 = n_block * BN;
  if (key0 >= Nk) return;  // past this sequence's keys (packed batches size the grid by the longest)
  const int valid_chunks = a.head_dim * E / 16;
  const KeyWindow win(seq, a.window_left, a.window_right);

  // Row blocks [m_begin, m_end) hold the rows that see any key of this block.
  int rmin, rmax;
  win.rows_of_keys(key0, min(key0 + BN, Nk) - 1, &rmin, &rmax);
  const int m_begin = max(0, rmin) / BM;
  const int m_end = (max(0, min(Nq, rmax)) + BM - 1) / BM;
  const int n_m = max(0, m_end - m_begin);
  const int total = n_m * a.group;  // iterations: (query head of the group, row block)

  const int64_t kr = seq.k_row0 + key0;
  const char* gk = static_cast<const char*>(a.k) + E * (b * a.k_batch + hk * a.k_head + kr * a.k_row);
  const char* gv = static_cast<const char*>(a.v) + E * (b * a.v_batch + hk * a.v_head + kr * a.v_row);
  const TileLoader<BN, Tr::kChunksPerRow, PB, kThreads> kv_loader(tid);
  kv_loader.load(smem_u32(sK), gk, a.k_row * E, Nk - key0, valid_chunks);
  kv_loader.load(smem_u32(sV), gv, a.v_row * E, Nk - key0, valid_chunks);

  const TileLoader<BM, Tr::kChunksPerRow, PB, kThreads> q_loader(tid);
  auto load_rows = [&](int hq, int m, int stage) {
    load_row_block<Tr>(q_loader, sQ + stage * Tr::kSmemQ, sdO + stage * Tr::kSmemQ, sL + stage * BM, sDs + stage * BM,
                       a, b, hq, seq, m * BM, tid, valid_chunks);
  };
  // Iteration it covers query head hq = hk * group + it / n_m and row block m = m_begin + it % n_m,
  // tracked incrementally.
  int hq = hk * a.group, m = m_begin;
  if (total > 0) load_rows(hq, m, 0);
  cp_async_commit();

  float dv_acc[MTkv][NTkv][4], dk_acc[MTkv][NTkv][4];
  zero_acc(dv_acc);
  zero_acc(dk_acc);

  const int wn_kv = warp / Tr::kWarpsDdKV, wd_kv = warp % Tr::kWarpsDdKV;
  const int wm_q = warp / Tr::kWarpsDdQ, wd_q = warp % Tr::kWarpsDdQ;
  const int mask_base = Nk - key0;

  for (int it = 0; it < total; ++it) {
    const int stage = S == 2 ? (it & 1) : 0;
    const int row0 = m * BM;
    int next_h = hq, next_m = m + 1;
    if (next_m == m_end) next_m = m_begin, ++next_h;
    cp_async_wait<0>();
    __syncthreads();  // Q_i, dO_i, slices visible; every warp is done with block i-1's P, dS, buffers
    if constexpr (S == 2) {
      if (it + 1 < total) load_rows(next_h, next_m, stage ^ 1);
      cp_async_commit();
    }

    unsigned char* const q_s = sQ + stage * Tr::kSmemQ;
    unsigned char* const do_s = sdO + stage * Tr::kSmemQ;
    const float* const l_s = sL + stage * BM;
    const float* const d_s = sDs + stage * BM;

    sdp_softmax_grad<Tr, true>(q_s, do_s, sK, sV, l_s, d_s, sP, sdS, a, win, row0, key0, warp, lane);
    __syncthreads();  // P, dS visible

    warp_gemm2<Tr, MTkv, NTkv, BM, true, true, PPB, PB>(dv_acc, sP + wn_kv * Tr::kTileNdKV * E,
                                                         do_s + wd_kv * Tr::kTileDdKV * E, dk_acc,
                                                         sdS + wn_kv * Tr::kTileNdKV * E,
                                                         q_s + wd_kv * Tr::kTileDdKV * E, lane);
    if constexpr (kAtomicDQ && (Tr::kOpts & kOptNoDq) == 0) {
      // dQ_i += dS K_j, added into the fp32 workspace.
      float dq[MTq][NTq][4];
      zero_acc(dq);
      warp_gemm<Tr, MTq, NTq, BN, false, true, PPB, PB>(dq, sdS + wm_q * Tr::kTileMdQ * PPB,
                                                         sK + wd_q * Tr::kTileDdQ * E, lane);
      // kOptRedGuard (timing only): the product stays, the reductions are skipped.
      if ((Tr::kOpts & kOptRedGuard) == 0 || a.scale == 12345.f)
        add_dq_tile<Tr>(dq, a.dq_acc + bwd_ws_base(a, b, hq, seq) * W, row0, warp, lane, Nq, a.head_dim);
    }
    if constexpr (S == 1) {
      if (it + 1 < total) {
        __syncthreads();  // every warp is done reading Q_i, dO_i and the slices
        load_rows(next_h, next_m, 0);
        cp_async_commit();
      }
    }
    hq = next_h, m = next_m;
  }

  // Epilogue: dK (times scale) and dV staged through the K and V tiles, then 16-byte stores.
  cp_async_wait<0>();
  __syncthreads();
  {
    using T = typename Tr::T;
    const float sc = a.scale;
#pragma unroll
    for (int mt = 0; mt < MTkv; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = wn_kv * Tr::kTileNdKV + mt * 16 + g + 8 * hr;
#pragma unroll
        for (int nt = 0; nt < NTkv; ++nt) {
          const int off = r * PB + (wd_kv * Tr::kTileDdKV + nt * 8 + 2 * t) * E;
          store_pair<T>(sK + off, dk_acc[mt][nt][2 * hr] * sc, dk_acc[mt][nt][2 * hr + 1] * sc);
          store_pair<T>(sV + off, dv_acc[mt][nt][2 * hr], dv_acc[mt][nt][2 * hr + 1]);
        }
      }
  }
  __syncthreads();
  char* gdk = static_cast<char*>(a.dk) + E * (b * a.dk_batch + hk * a.dk_head + kr * a.dk_row);
  char* gdv = static_cast<char*>(a.dv) + E * (b * a.dv_batch + hk * a.dv_head + kr * a.dv_row);
  constexpr int kCh = Tr::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < BN * kCh / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kCh, c = idx % kCh;
    if (r < mask_base && c < valid_chunks) {
      *reinterpret_cast<uint4*>(gdk + r * a.dk_row * E + c * 16) = *reinterpret_cast<const uint4*>(sK + r * PB + c * 16);
      *reinterpret_cast<uint4*>(gdv + r * a.dv_row * E + c * 16) = *reinterpret_cast<const uint4*>(sV + r * PB + c * 16);
    }
  }
}

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) bwd_dq_kernel(const BwdArgs a) {
  constexpr int E = Tr::kElem;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int PB = Tr::kPitchB;
  constexpr int PPB = Tr::kPitchPB;
  constexpr int kThreads = Tr::kThreads;
  constexpr int MTq = Tr::kTileMdQ / 16, NTq = Tr::kTileDdQ / 8;

  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char* const sQ = smem;
  unsigned char* const sdO = sQ + Tr::kSmemQ;
  constexpr int S = Tr::kStages;
  unsigned char* const sK = sdO + Tr::kSmemQ;     // S stages
  unsigned char* const sV = sK + S * Tr::kSmemKV;  // S stages
  unsigned char* const sdS = sV + S * Tr::kSmemKV;
  float* const sL = reinterpret_cast<float*>(sdS + Tr::kSmemP);
  float* const sDs = sL + BM;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int mb = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.num_m_blocks));
  const int bh = static_cast<int>(blockIdx.x / static_cast<unsigned>(a.num_m_blocks));
  const int h = bh % a.heads;
  const int b = bh / a.heads;
  const int hk = h / a.group;
  const int m_block = a.causal ? a.num_m_blocks - 1 - mb : mb;  // right-bounded mask: long rows first
  const int row0 = m_block * BM;
  const SeqInfo seq = bwd_seq(a, b);
  if (row0 >= seq.nq) return;  // past this sequence's queries (packed batches)
  const int Nq = seq.nq, Nk = seq.nk;
  const int valid_chunks = a.head_dim * E / 16;
  const KeyWindow win(seq, a.window_left, a.window_right);
  int kmin, kmax;
  win.keys_of_rows(row0, min(row0 + BM, Nq) - 1, &kmin, &kmax);
  const int n_begin = kmin / BN;
  const int n_end = kmax > kmin ? (kmax + BN - 1) / BN : n_begin;

  const TileLoader<BM, Tr::kChunksPerRow, PB, kThreads> q_loader(tid);
  const TileLoader<BN, Tr::kChunksPerRow, PB, kThreads> kv_loader(tid);
  load_row_block<Tr>(q_loader, sQ, sdO, sL, sDs, a, b, h, seq, row0, tid, valid_chunks);
  const char* gk = static_cast<const char*>(a.k) + E * (b * a.k_batch + hk * a.k_head + seq.k_row0 * a.k_row);
  const char* gv = static_cast<const char*>(a.v) + E * (b * a.v_batch + hk * a.v_head + seq.k_row0 * a.v_row);
  auto load_kv = [&](int n, int stage) {
    kv_loader.load(smem_u32(sK + stage * Tr::kSmemKV), gk + n * BN * a.k_row * E, a.k_row * E, Nk - n * BN,
                   valid_chunks);
    kv_loader.load(smem_u32(sV + stage * Tr::kSmemKV), gv + n * BN * a.v_row * E, a.v_row * E, Nk - n * BN,
                   valid_chunks);
  };
  if (n_end > n_begin) load_kv(n_begin, 0);
  cp_async_commit();

  float dq[MTq][NTq][4];
  zero_acc(dq);
  const int wm_q = warp / Tr::kWarpsDdQ, wd_q = warp % Tr::kWarpsDdQ;

  for (int n = n_begin; n < n_end; ++n) {
    const int stage = S == 2 ? ((n - n_begin) & 1) : 0;
    const int key0 = n * BN;
    if constexpr (S == 1) {
      if (n > n_begin) {
        __syncthreads();  // every warp is done with K_{n-1}, V_{n-1}
        load_kv(n, 0);
        cp_async_commit();
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // K_n, V_n (and Q, dO) visible; every warp is done with block n-1's dS and buffers
    if constexpr (S == 2) {
      if (n + 1 < n_end) load_kv(n + 1, stage ^ 1);
      cp_async_commit();
    }
    unsigned char* const k_s = sK + stage * Tr::kSmemKV;
    unsigned char* const v_s = sV + stage * Tr::kSmemKV;
    sdp_softmax_grad<Tr, false>(sQ, sdO, k_s, v_s, sL, sDs, nullptr, sdS, a, win, row0, key0, warp, lane);
    __syncthreads();  // dS visible
    warp_gemm<Tr, MTq, NTq, BN, false, true, PPB, PB>(dq, sdS + wm_q * Tr::kTileMdQ * PPB,
                                                       k_s + wd_q * Tr::kTileDdQ * E, lane);
  }

  // Epilogue: dQ * scale staged through the Q tile, then 16-byte stores.
  cp_async_wait<0>();
  __syncthreads();
  {
    using T = typename Tr::T;
    const float sc = a.scale;
#pragma unroll
    for (int mt = 0; mt < MTq; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = wm_q * Tr::kTileMdQ + mt * 16 + g + 8 * hr;
#pragma unroll
        for (int nt = 0; nt < NTq; ++nt) {
          const int off = r * PB + (wd_q * Tr::kTileDdQ + nt * 8 + 2 * t) * E;
          store_pair<T>(sQ + off, dq[mt][nt][2 * hr] * sc, dq[mt][nt][2 * hr + 1] * sc);
        }
      }
  }
  __syncthreads();
  char* gdq = static_cast<char*>(a.dq) + E * (b * a.dq_batch + h * a.dq_head + (seq.q_row0 + row0) * a.dq_row);
  constexpr int kCh = Tr::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < BM * kCh / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kCh, c = idx % kCh;
    if (row0 + r < Nq && c < valid_chunks)
      *reinterpret_cast<uint4*>(gdq + r * a.dq_row * E + c * 16) = *reinterpret_cast<const uint4*>(sQ + r * PB + c * 16);
  }
}

}  // namespace cuda
}  // namespace fa
