// Forward for fp32 inputs at fp32 accuracy: the same block / warp / pipeline structure as
// fwd_kernel.cuh, with every product done as 3xTF32 on mma.sync m16n8k8: x = hi + lo (hi the nearest
// tf32, lo the remainder), a*b ~ a_lo*b_hi + a_hi*b_lo + a_hi*b_hi, accumulated in fp32. The dropped
// a_lo*b_lo term and lo's own truncation are ~2^-22 relative, so S and O carry about fp32 error
// (relative L2 ~1e-6 vs float64) at tensor-core rates, provided no accumulator takes too many mma
// adds: the tensor cores round the fp32 accumulator toward zero, and that bias adds up coherently.
// S is therefore summed in 32-column chunks and O per key block, each chunk folded in with a
// round-to-nearest FADD / FFMA (see the two loops below).
//
// The reduction dimension of each mma may be visited in any order, which removes every shuffle:
//   S = Q K^T, k-step of 8 head-dim columns: slot t <-> column 2t, slot t+4 <-> column 2t+1, so each
//   lane reads Q[row][2t..2t+1] and K[key][2t..2t+1] as one float2.
//   O = P V, k-step of 8 keys: slot t <-> key 2t, slot t+4 <-> key 2t+1, which is exactly where the
//   S accumulator (C fragment) already holds P: a = (c0, c2, c1, c3); V is read as V[2t][g], V[2t+1][g].
#pragma once
#include "cuda/fwd_common.cuh"
#include "cuda/fwd_traits.cuh"

namespace fa {
namespace cuda {

template <class Tr, bool kPaged>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) fwd_kernel_fp32(const FwdArgs a) {
  constexpr int W = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int kMT = Tr::kMTiles;
  constexpr int PQ = Tr::kPitchQK;  // floats
  constexpr int PV = Tr::kPitchV;
  constexpr int kThreads = Tr::kThreads;

  extern __shared__ __align__(128) unsigned char smem[];
  float* const fQ = reinterpret_cast<float*>(smem);
  float* const fK = fQ + BM * PQ;
  float* const fV = fK + BN * PQ;
  const uint32_t sQ = smem_u32(fQ), sK = smem_u32(fK), sV = smem_u32(fV);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const BlockCoord bc = block_coord(a);
  const SeqInfo seq = fwd_seq(a, bc.b);
  const int row0 = bc.m_block * BM;
  if (fwd_block_idle(a, seq, row0)) return;
  const int Nq = seq.nq, Nk = seq.nk;
  const int q_rows = min(BM, Nq - row0);
  const int valid_chunks = a.head_dim / 4;

  const FwdBlockPtrs gp = block_ptrs<4>(a, bc, seq, row0);
  const char* const gq = gp.q;
  const char* const gk = gp.k;
  const char* const gv = gp.v;
  char* const go = gp.o;
  float* const glse = gp.lse;

  const KeyWindow win(seq, a.window_left, a.window_right);
  int n_min, n_max;
  key_block_range<BM, BN>(win, row0, &n_min, &n_max);
  if (n_max <= n_min) {
    write_empty_rows<BM, kThreads>(a, go, glse, q_rows, 4, tid);
    return;
  }

  const TileLoader<BM, Tr::kChunksPerRow, PQ * 4, kThreads> q_loader(tid);
  const TileLoader<BN, Tr::kChunksPerRow, PQ * 4, kThreads> k_loader(tid);
  const TileLoader<BN, Tr::kChunksPerRow, PV * 4, kThreads> v_loader(tid);
  PagedRows pk{}, pv{};
  if constexpr (kPaged) {
    pk = paged_rows<4>(a, bc, a.k, a.k_head, a.k_row);
    pv = paged_rows<4>(a, bc, a.v, a.v_head, a.v_row);
  }
  auto load_k = [&](int nb) {
    if constexpr (kPaged) k_loader.load(sK, pk, nb * BN, Nk - nb * BN, valid_chunks);
    else k_loader.load(sK, gk + nb * BN * a.k_row * 4, a.k_row * 4, Nk - nb * BN, valid_chunks);
  };
  auto load_v = [&](int nb) {
    if constexpr (kPaged) v_loader.load(sV, pv, nb * BN, Nk - nb * BN, valid_chunks);
    else v_loader.load(sV, gv + nb * BN * a.v_row * 4, a.v_row * 4, Nk - nb * BN, valid_chunks);
  };
  q_loader.load(sQ, gq, a.q_row * 4, q_rows, valid_chunks);
  cp_async_commit();
  int n = n_max - 1;
  load_k(n);
  cp_async_commit();

  const int g = lane >> 2, t = lane & 3;
  const int wrow0 = warp * Tr::kRowsPerWarp;
  const float* const qw = fQ + (wrow0 + g) * PQ + 2 * t;  // this lane's Q row g, columns 2t, 2t+1
  const float* const kl = fK + g * PQ + 2 * t;
  const float* const vl = fV + 2 * t * PV + g;
  const float sl2 = a.scale_log2;

  float o[kMT][W / 8][4];
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < W / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  for (; n >= n_min; --n) {
    float s[kMT][BN / 8][4];

    cp_async_wait<0>();
    __syncthreads();
    load_v(n);
    cp_async_commit();

    // S = Q K^T (3xTF32). The tensor cores round their fp32 accumulator toward zero, a bias that
    // grows with the number of mma adds into one accumulator (93 at D 248: measured rel. L2 1.1e-5);
    // so each chunk of kSChunkSteps * 8 head-dim columns goes to a fresh accumulator that is folded
    // into S with a round-to-nearest FADD.
    constexpr int kCS = Tr::kSChunkSteps;
#pragma unroll
    for (int c = 0; c < W / (8 * kCS); ++c) {
      float t[kMT][BN / 8][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) t[mt][nt][e] = 0.f;
#pragma unroll
      for (int kq = 0; kq < kCS; ++kq) {
        const int ks = c * kCS + kq;
        uint32_t ah[kMT][4], al[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          const float2 top = *reinterpret_cast<const float2*>(qw + mt * 16 * PQ + ks * 8);
          const float2 bot = *reinterpret_cast<const float2*>(qw + (mt * 16 + 8) * PQ + ks * 8);
          split_tf32(top.x, ah[mt][0], al[mt][0]);
          split_tf32(bot.x, ah[mt][1], al[mt][1]);
          split_tf32(top.y, ah[mt][2], al[mt][2]);
          split_tf32(bot.y, ah[mt][3], al[mt][3]);
        }
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
          const float2 kv = *reinterpret_cast<const float2*>(kl + nt * 8 * PQ + ks * 8);
          uint32_t bh0, bl0, bh1, bl1;
          split_tf32(kv.x, bh0, bl0);
          split_tf32(kv.y, bh1, bl1);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma_1688_tf32(t[mt][nt], al[mt], bh0, bh1);
            mma_1688_tf32(t[mt][nt], ah[mt], bl0, bl1);
            mma_1688_tf32(t[mt][nt], ah[mt], bh0, bh1);
          }
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = c == 0 ? t[mt][nt][e] : s[mt][nt][e] + t[mt][nt][e];
    }

    score_mod_and_mask<BN, true>(s, a, win, n, row0 + wrow0, row0 + wrow0 + Tr::kRowsPerWarp - 1,
                                 row0 + wrow0 + g, t);

    cp_async_wait<0>();
    __syncthreads();
    if (n > n_min) {
      load_k(n - 1);
      cp_async_commit();
    }

    // alphas: O is rescaled when this block's P V is folded in (below).
    float alphas[kMT][2];
    online_softmax_step(s, row_max, row_sum, alphas, sl2);

    // O = O * alpha + P V (3xTF32). This key block's P V goes to a fresh accumulator (at most
    // kBlockN / 8 * 3 mma adds, see the S comment) folded into O with one round-to-nearest FFMA,
    // which is also the online-softmax rescale. The A fragment of k-step kk comes straight from S's
    // C fragment of n8 tile kk.
    uint32_t ph[kMT][BN / 8][4], pl[kMT][BN / 8][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int kk = 0; kk < BN / 8; ++kk) {
        split_tf32(s[mt][kk][0], ph[mt][kk][0], pl[mt][kk][0]);
        split_tf32(s[mt][kk][2], ph[mt][kk][1], pl[mt][kk][1]);
        split_tf32(s[mt][kk][1], ph[mt][kk][2], pl[mt][kk][2]);
        split_tf32(s[mt][kk][3], ph[mt][kk][3], pl[mt][kk][3]);
      }
#pragma unroll
    for (int dt = 0; dt < W / 8; ++dt) {
      float t[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) t[mt][e] = 0.f;
#pragma unroll
      for (int kk = 0; kk < BN / 8; ++kk) {
        uint32_t bh0, bl0, bh1, bl1;
        split_tf32(vl[kk * 8 * PV + dt * 8], bh0, bl0);
        split_tf32(vl[(kk * 8 + 1) * PV + dt * 8], bh1, bl1);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_1688_tf32(t[mt], pl[mt][kk], bh0, bh1);
          mma_1688_tf32(t[mt], ph[mt][kk], bl0, bl1);
          mma_1688_tf32(t[mt], ph[mt][kk], bh0, bh1);
        }
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][dt][e] = fmaf(o[mt][dt][e], alphas[mt][e >> 1], t[mt][e]);
    }
  }

  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = row_sum[mt][hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool seen = l != 0.f;  // (NaN too: see sm90_store_rows)
      const float inv = seen ? 1.f / l : 0.f;
      const int r = wrow0 + mt * 16 + g + 8 * hr;
      if (glse != nullptr && t == 0 && row0 + r < Nq)
        glse[r] = seen ? (__fmul_rn(row_max[mt][hr], sl2) + log2f(l)) * kLn2 : INFINITY;
#pragma unroll
      for (int dt = 0; dt < W / 8; ++dt)
        *reinterpret_cast<float2*>(fQ + r * PQ + dt * 8 + 2 * t) =
            make_float2(o[mt][dt][2 * hr] * inv, o[mt][dt][2 * hr + 1] * inv);
    }
  __syncwarp();
  constexpr int kWarpChunks = Tr::kRowsPerWarp * Tr::kChunksPerRow;
  static_assert(kWarpChunks % 32 == 0, "whole chunks per lane");
#pragma unroll
  for (int i = 0; i < kWarpChunks / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = wrow0 + idx / Tr::kChunksPerRow;
    const int c = idx % Tr::kChunksPerRow;
    if (row0 + r < Nq && c < valid_chunks) {
      const float4 val = *reinterpret_cast<const float4*>(fQ + r * PQ + c * 4);
      *reinterpret_cast<float4*>(go + r * a.o_row * 4 + c * 16) = val;
    }
  }
}

}  // namespace cuda
}  // namespace fa
