// FlashAttention-2 backward main kernel for fp16 / bf16 on Hopper (sm_90a): the mma.sync main
// kernel's algorithm (bwd_kernel.cuh, atomic dQ) with the five products on wgmma.
//
// One thread block (2 warpgroups, 256 threads, one per SM) per (64-key block j, kv head, batch); it
// walks the 64-row query blocks i of every query head of the GQA group. Per block i, warpgroup w:
//   S^T, dP^T = K_j Q_i^T, V_j dO_i^T for rows [32w, 32w + 32) of the block   (64 keys x 32 rows)
//   P^T = 2^(S^T * scale*log2e - lse*log2e), dS^T = P^T * (dP^T - D)          (registers, fp32)
//   P^T, dS^T -> shared memory as T, [key][row] rows contiguous             (barrier: both halves)
//   dV_j += P^T dO_i, dK_j += dS^T Q_i for head-dim columns [W/2 w, W/2 (w+1))  (accumulators)
//   dQ_i += dS K_j for the same columns, 64 at a time, added into the fp32 workspace with 16-byte
//   reductions in the mma fragment order (DqLayout perm, tile 16 x 64; the convert kernel reads it)
// Operands come from shared memory through descriptors (wgmma.cuh): K, V, Q, dO in the 128-byte
// swizzled layout (K-major where the head dim is the k of the product, MN-major through the
// transpose bit where it is the n), P^T / dS^T K-major as the A of dV / dK and MN-major as the A of
// dQ. Q_i, dO_i and the lse2 / dsum slices are double-buffered with cp.async (block i+1 loads during
// block i). Accumulators: dK, dV W/4 floats each per thread, S^T, dP^T 16, dQ 32.
#pragma once
#include "cuda/bwd_args.cuh"
#include "cuda/bwd_gemm.cuh"
#include "cuda/bwd_traits.cuh"
#include "cuda/wgmma.cuh"

namespace fa {
namespace cuda {

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) bwd_kernel_sm90(const BwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename Tr::T;
  constexpr int W = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int kCB = Tr::kColBlocks;
  constexpr int kTile = Tr::kTile;
  constexpr int WH = Tr::kHalf;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sK = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (sK - raw);  // generic pointer to sK
  const uint32_t sV = sK + kTile;
  const uint32_t sQ = sV + kTile;       // 2 stages
  const uint32_t sdO = sQ + 2 * kTile;  // 2 stages
  const uint32_t sPt = sdO + 2 * kTile;
  const uint32_t sdSt = sPt + Tr::kTileP;
  float* const sL = reinterpret_cast<float*>(smem + (sdSt + Tr::kTileP - sK));  // [2][BM] lse2
  float* const sDs = sL + 2 * BM;                                                // [2][BM] dsum

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2, wq = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  const int n_block = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.num_n_blocks));
  const int bh = static_cast<int>(blockIdx.x / static_cast<unsigned>(a.num_n_blocks));
  const int hk = bh % a.heads_k;
  const int b = bh / a.heads_k;
  const int Nq = a.seqlen_q, Nk = a.seqlen_k;
  const int key0 = n_block * BN;
  const int valid_chunks = a.head_dim / 8;

  // First row block with a row that sees key0 (causal: row i sees key j iff j <= i + Nk - Nq).
  const int m_begin = a.causal ? max(0, key0 - (Nk - Nq)) / BM : 0;
  const int n_m = max(0, a.num_m_blocks - m_begin);
  const int total = n_m * a.group;  // iterations: (query head of the group, row block)

  const SwizzledTileLoader<64, kCB, Tr::kThreads> loader(tid);  // K, V, Q, dO tiles: 64 rows each
  {
    const char* gk = static_cast<const char*>(a.k) + 2 * (b * a.k_batch + hk * a.k_head + key0 * a.k_row);
    const char* gv = static_cast<const char*>(a.v) + 2 * (b * a.v_batch + hk * a.v_head + key0 * a.v_row);
    loader.load(sK, gk, a.k_row * 2, Nk - key0, valid_chunks);
    loader.load(sV, gv, a.v_row * 2, Nk - key0, valid_chunks);
  }
  auto load_rows = [&](int hq, int m, int stage) {
    const int row0 = m * BM;
    const char* gq = static_cast<const char*>(a.q) + 2 * (b * a.q_batch + hq * a.q_head + row0 * a.q_row);
    const char* gdo = static_cast<const char*>(a.dout) + 2 * (b * a.do_batch + hq * a.do_head + row0 * a.do_row);
    loader.load(sQ + stage * kTile, gq, a.q_row * 2, Nq - row0, valid_chunks);
    loader.load(sdO + stage * kTile, gdo, a.do_row * 2, Nq - row0, valid_chunks);
    const int64_t roff = (static_cast<int64_t>(b) * a.heads + hq) * a.nq_pad + row0;
    if (tid < BM / 4)
      cp_async_16(smem_u32(sL + stage * BM) + tid * 16, a.lse2 + roff + tid * 4, true);
    else if (tid < BM / 2)
      cp_async_16(smem_u32(sDs + stage * BM) + (tid - BM / 4) * 16, a.dsum + roff + (tid - BM / 4) * 4, true);
  };
  int hq = hk * a.group, m = m_begin;
  if (total > 0) load_rows(hq, m, 0);
  cp_async_commit();

  float dv[WH / 2], dk[WH / 2];
#pragma unroll
  for (int i = 0; i < WH / 2; ++i) dv[i] = dk[i] = 0.f;

  // Descriptors. K-major: 8-row groups 1024 bytes apart, k-step ks at column block ks / 4, byte
  // 32 (ks % 4). MN-major: 16 k-rows = 2048 bytes per k-step, 64-column blocks 64 * 128 bytes apart.
  auto kstep = [](int ks) -> uint64_t { return static_cast<uint64_t>(((ks / 4) * 64 * 128 + (ks % 4) * 32) >> 4); };
  constexpr uint64_t kMnStep = 2048 >> 4;
  constexpr uint64_t kStage = kTile >> 4;
  const uint64_t dK_a = sm90::smem_desc(sK, 16, 1024);                     // A of S^T
  const uint64_t dV_a = sm90::smem_desc(sV, 16, 1024);                     // A of dP^T
  const uint64_t dQ_b = sm90::smem_desc(sQ + wg * 32 * 128, 16, 1024);     // B of S^T: rows 32w..
  const uint64_t ddO_b = sm90::smem_desc(sdO + wg * 32 * 128, 16, 1024);   // B of dP^T
  const uint64_t dPt_a = sm90::smem_desc(sPt, 16, 1024);                   // A of dV (K-major)
  const uint64_t ddSt_a = sm90::smem_desc(sdSt, 16, 1024);                 // A of dK (K-major)
  const uint64_t ddSt_mn = sm90::smem_desc(sdSt, 64 * 128, 1024);          // A of dQ (MN-major)
  const uint64_t ddO_mn = sm90::smem_desc(sdO + wg * (WH / 64) * 64 * 128, 64 * 128, 1024);  // B of dV
  const uint64_t dQ_mn = sm90::smem_desc(sQ + wg * (WH / 64) * 64 * 128, 64 * 128, 1024);    // B of dK
  const uint64_t dK_mn = sm90::smem_desc(sK + wg * (WH / 64) * 64 * 128, 64 * 128, 1024);    // B of dQ

  const float sl2 = a.scale_log2;
  const int mask_base = Nk - key0;  // keys (relative to key0) below this exist
  float* const acc_head0 = a.dq_acc + static_cast<int64_t>(b) * a.heads * a.nq_pad * W;

  for (int it = 0; it < total; ++it) {
    const int st = it & 1;
    const int row0 = m * BM;
    int next_h = hq, next_m = m + 1;
    if (next_m == a.num_m_blocks) next_m = m_begin, ++next_h;
    cp_async_wait<0>();
    sm90::fence_proxy_async_smem();
    __syncthreads();  // Q_i, dO_i, slices visible; every warp is done with block i-1 (P^T, dS^T, stage st^1)
    if (it + 1 < total) load_rows(next_h, next_m, st ^ 1);
    cp_async_commit();

    // S^T and dP^T for this warpgroup's 32 rows.
    float s[1][4][4], dp[1][4][4];
    sm90::wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < W / 16; ++ks)
      sm90::Wgmma<T, 32>::ss(&s[0][0][0], dK_a + kstep(ks), dQ_b + st * kStage + kstep(ks), ks > 0);
#pragma unroll
    for (int ks = 0; ks < W / 16; ++ks)
      sm90::Wgmma<T, 32>::ss(&dp[0][0][0], dV_a + kstep(ks), ddO_b + st * kStage + kstep(ks), ks > 0);
    sm90::wgmma_commit();
    sm90::wgmma_wait<0>();
    sm90::reg_fence<16>(&s[0][0][0]);
    sm90::reg_fence<16>(&dp[0][0][0]);

    // P^T, dS^T: this lane holds keys wq*16 + g (+8) and rows wg*32 + 8j + 2t (+1).
    {
      const float* const l_s = sL + st * BM;
      const float* const d_s = sDs + st * BM;
      const bool need_mask = key0 + BN > Nk || (a.causal && key0 + BN - 1 > row0 + Nk - Nq);
      const int diag = row0 + Nk - Nq - key0;  // key (rel.) visible from row (rel.) r iff key <= r + diag
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = wg * 32 + 8 * j + 2 * t;
        const float2 lse = *reinterpret_cast<const float2*>(l_s + r);
        const float2 dsum = *reinterpret_cast<const float2*>(d_s + r);
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int key = wq * 16 + g + 8 * hr;
          float p0 = fast_exp2(fmaf(s[0][j][2 * hr], sl2, -lse.x));
          float p1 = fast_exp2(fmaf(s[0][j][2 * hr + 1], sl2, -lse.y));
          if (need_mask) {
            const bool key_ok = key < mask_base;
            if (!key_ok || (a.causal && key > r + diag)) p0 = 0.f;
            if (!key_ok || (a.causal && key > r + 1 + diag)) p1 = 0.f;
          }
          const float ds0 = p0 * (dp[0][j][2 * hr] - dsum.x);
          const float ds1 = p1 * (dp[0][j][2 * hr + 1] - dsum.y);
          const int off = key * 128 + ((((r >> 3)) ^ (key & 7)) << 4) + (r & 7) * 2;
          *reinterpret_cast<uint32_t*>(smem + (sPt - sK) + off) = pack2<T>(p0, p1);
          *reinterpret_cast<uint32_t*>(smem + (sdSt - sK) + off) = pack2<T>(ds0, ds1);
        }
      }
    }
    sm90::fence_proxy_async_smem();
    __syncthreads();  // P^T, dS^T of both warpgroups visible

    // dV += P^T dO, dK += dS^T Q (this warpgroup's columns), then dQ 64 columns at a time.
    sm90::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      sm90::Wgmma<T, WH>::template ss<0, 1>(dv, dPt_a + kstep(kk), ddO_mn + st * kStage + kk * kMnStep, 1);
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk)
      sm90::Wgmma<T, WH>::template ss<0, 1>(dk, ddSt_a + kstep(kk), dQ_mn + st * kStage + kk * kMnStep, 1);
    sm90::wgmma_commit();
    float* const head_acc = acc_head0 + static_cast<int64_t>(hq) * a.nq_pad * W + static_cast<int64_t>(row0) * W;
#pragma unroll
    for (int c = 0; c < WH / 64; ++c) {
      float dq[32];
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk)
        sm90::Wgmma<T, 64>::template ss<1, 1>(dq, ddSt_mn + kk * kMnStep, dK_mn + c * ((64 * 64 * 2) >> 4) + kk * kMnStep,
                                               kk > 0);
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::reg_fence<32>(dq);
      const int chunk = wg * (WH / 64) + c;  // 64-column block of the head dim
      float* const base = head_acc + (wq * kCB + chunk) * (16 * 64);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr)
#pragma unroll
        for (int nt = 0; nt < 8; nt += 2)
          red_add_f32x4(base + (((hr * 8 + nt) / 2) * 32 + lane) * 4, dq[4 * nt + 2 * hr], dq[4 * nt + 2 * hr + 1],
                        dq[4 * (nt + 1) + 2 * hr], dq[4 * (nt + 1) + 2 * hr + 1]);
    }
    sm90::wgmma_wait<0>();
    sm90::reg_fence<WH / 2>(dv);
    sm90::reg_fence<WH / 2>(dk);
    hq = next_h, m = next_m;
  }
  cp_async_wait<0>();

  // Epilogue: dK (times scale) and dV, this lane's keys wq*16 + g (+8), columns wg*WH + 8j + 2t.
  char* const gdk = static_cast<char*>(a.dk) + 2 * (b * a.dk_batch + hk * a.dk_head + key0 * a.dk_row);
  char* const gdv = static_cast<char*>(a.dv) + 2 * (b * a.dv_batch + hk * a.dv_head + key0 * a.dv_row);
  const float sc = a.scale;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int key = wq * 16 + g + 8 * hr;
    if (key < mask_base) {
#pragma unroll
      for (int j = 0; j < WH / 8; ++j) {
        const int col = wg * WH + 8 * j + 2 * t;
        if (col < a.head_dim) {
          *reinterpret_cast<uint32_t*>(gdk + (key * a.dk_row + col) * 2) =
              pack2<T>(dk[4 * j + 2 * hr] * sc, dk[4 * j + 2 * hr + 1] * sc);
          *reinterpret_cast<uint32_t*>(gdv + (key * a.dv_row + col) * 2) = pack2<T>(dv[4 * j + 2 * hr], dv[4 * j + 2 * hr + 1]);
        }
      }
    }
  }
#else
  __trap();  // only the sm_90a build has this kernel; the dispatcher never launches it elsewhere
#endif
}

}  // namespace cuda
}  // namespace fa
