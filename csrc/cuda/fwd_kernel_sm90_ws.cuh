// FlashAttention forward on Hopper (sm_90a), warp-specialised: the TMA mainloop beside the cp.async
// one of fwd_kernel_sm90.cuh, for dense fp16 / bf16 calls (no packed sequences, no paged K/V).
//
// One thread block of three warpgroups per 128-row Q block of one head:
//   - warpgroup 0 is the producer: it gives its registers away (setmaxnreg down) and one thread
//     issues every load as a tensor-map (TMA) copy into the 128-byte swizzled layout wgmma reads:
//     Q once, then K and V of each key block into a ring of kStages stages. A copy completes on the
//     stage's "full" mbarrier (expect-tx counts its bytes); before refilling a stage the producer
//     waits on its "empty" mbarrier, which every consumer warp arrives on once its wgmmas have
//     read the stage.
//   - warpgroups 1 and 2 are the consumers (setmaxnreg up), 64 rows each, as in the cp.async
//     kernel: S = Q K^T and O += P V on wgmma, the online softmax in registers, the P V product of
//     block i-1 overlapping the softmax of block i. No block-wide barrier in the loop: each consumer
//     waits only for the stages it reads, so the two warpgroups drift apart and one's softmax runs
//     while the other's products keep the tensor cores busy.
// The mask, the score modifier, the softmax step and the epilogue are the shared pieces
// (fwd_common.cuh, sm90_store_rows).
//
// The tensor maps (fwd_api.cu, encode_dense_maps) are rank 4 {head dim, rows, heads, batch} with
// boxes of {64 columns, rows of a tile, 1, 1}: rows past the sequence and columns past the head dim
// come in as zeros, so ragged tiles need no predicate.
#pragma once
#include "cuda/fwd_common.cuh"
#include "cuda/fwd_kernel_sm90.cuh"
#include "cuda/wgmma.cuh"

namespace fa {
namespace cuda {

template <typename T_, int kHeadDim_>
struct Sm90WsTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kSm90WsBlockM;  // 2 consumer warpgroups x 64 rows
  static constexpr int kBlockN = sm90_ws_block_n(kHeadDim_);
  // Ring depth: as deep as the shared memory allows up to 4 (D 64: 4, D 128: 2, D 192: 3, D 256: 2).
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kTileQ = kBlockM * kHeadDim * 2;  // bytes
  static constexpr int kTileKV = kBlockN * kHeadDim * 2;
  static constexpr int kStagesFit = (200 * 1024 - kTileQ) / (2 * kTileKV);
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  static constexpr int kThreads = 384;
  static constexpr int kConsumerWarps = 8;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  // Barriers after the tiles: Q full, then K full, V full, K empty, V empty per stage.
  static constexpr int kBarOffset = kTileQ + 2 * kStages * kTileKV;
  static constexpr int kSmemBytes = 1024 + kBarOffset + 8 * (1 + 4 * kStages);
  static_assert(sizeof(T) == 2 && kBlockM == 128, "fp16 / bf16, two consumer warpgroups");
  static_assert(kStages >= 2, "a ring of at least two stages");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256, "wgmma n = head dim");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
};

template <class Tr>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_kernel_sm90_ws(const __grid_constant__ FwdTmaArgs ta) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename Tr::T;
  constexpr int D = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int kCB = Tr::kColBlocks;
  constexpr int S = Tr::kStages;
  constexpr int kTileKV = Tr::kTileKV;
  const FwdArgs& a = ta.f;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (sQ - raw);
  const uint32_t sK = sQ + Tr::kTileQ;     // stages 0 .. S-1
  const uint32_t sV = sK + S * kTileKV;    // stages 0 .. S-1
  const uint32_t bar_q = sQ + Tr::kBarOffset;
  const uint32_t bar_kf = bar_q + 8, bar_vf = bar_kf + 8 * S, bar_ke = bar_vf + 8 * S, bar_ve = bar_ke + 8 * S;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;
  const BlockCoord bc = block_coord(a);
  const SeqInfo seq = fwd_seq(a, bc.b);
  const int row0 = bc.m_block * BM;
  if (row0 >= seq.nq) return;
  const int Nq = seq.nq;
  const KeyWindow win(seq, a.window_left, a.window_right);
  int n_min, n_max;
  key_block_range<BM, BN>(win, row0, &n_min, &n_max);
  const int n_blocks = n_max - n_min;
  const FwdBlockPtrs gp = block_ptrs<2>(a, bc, seq, row0);
  if (n_blocks <= 0) {
    write_empty_rows<BM, Tr::kThreads>(a, gp.o, gp.lse, min(BM, Nq - row0), 2, tid);
    return;
  }

  if (tid == 0) {
    mbar_init(bar_q, 1);
    for (int s = 0; s < S; ++s) {
      mbar_init(bar_kf + 8 * s, 1);
      mbar_init(bar_vf + 8 * s, 1);
      mbar_init(bar_ke + 8 * s, Tr::kConsumerWarps);
      mbar_init(bar_ve + 8 * s, Tr::kConsumerWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    // Producer. Key blocks run high to low (the masked ones first), K(i) before V(i): a consumer
    // needs K(i) one step before V(i).
    sm90::setmaxnreg_dec<Tr::kProducerRegs>();
    if (tid == 0) {
      const int hk = bc.h / a.group;
      mbar_arrive_expect_tx(bar_q, Tr::kTileQ);
#pragma unroll
      for (int cb = 0; cb < kCB; ++cb) tma_load_4d(sQ + cb * BM * 128, &ta.tq, cb * 64, row0, bc.h, bc.b, bar_q);
      for (int it = 0; it < n_blocks; ++it) {
        const int n = n_max - 1 - it;
        const int s = it % S;
        const uint32_t ph = ((it / S) - 1) & 1;  // fill it / S of stage s waits for the consumers' previous release
        if (it >= S) mbar_wait(bar_ke + 8 * s, ph);
        mbar_arrive_expect_tx(bar_kf + 8 * s, kTileKV);
#pragma unroll
        for (int cb = 0; cb < kCB; ++cb)
          tma_load_4d(sK + s * kTileKV + cb * BN * 128, &ta.tk, cb * 64, n * BN, hk, bc.b, bar_kf + 8 * s);
        if (it >= S) mbar_wait(bar_ve + 8 * s, ph);
        mbar_arrive_expect_tx(bar_vf + 8 * s, kTileKV);
#pragma unroll
        for (int cb = 0; cb < kCB; ++cb)
          tma_load_4d(sV + s * kTileKV + cb * BN * 128, &ta.tv, cb * 64, n * BN, hk, bc.b, bar_vf + 8 * s);
      }
    }
    return;
  }
  sm90::setmaxnreg_inc<Tr::kConsumerRegs>();

  // Consumers: warpgroup cw owns rows [64 cw, 64 cw + 64) of the block.
  const int cw = wg - 1;
  const int g = lane >> 2, t = lane & 3;
  const int wrow0 = cw * 64 + (warp & 3) * 16;
  const uint64_t dQ = sm90::smem_desc(sQ + cw * 64 * 128, 16, 1024);
  const uint64_t dK = sm90::smem_desc(sK, 16, 1024);
  const uint64_t dV = sm90::smem_desc(sV, BN * 128, 1024);
  auto kstep = [](int ks, int rows) -> uint64_t {
    return static_cast<uint64_t>(((ks / 4) * rows * 128 + (ks % 4) * 32) >> 4);
  };
  constexpr uint64_t kStageDesc = kTileKV >> 4;

  float s[1][BN / 8][4];
  float o[1][D / 8][4];
  uint32_t p[BN / 16][4];
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};
  float alpha[1][2];
  const float sl2 = a.scale_log2;
  float* const sf = &s[0][0][0];
  float* const of = &o[0][0][0];

  auto issue_s = [&](int stage) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      sm90::Wgmma<T, BN>::ss(sf, dQ + kstep(ks, BM), dK + stage * kStageDesc + kstep(ks, BN), ks > 0);
    sm90::wgmma_commit();
  };
  auto issue_pv = [&](int stage, int accumulate) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      sm90::Wgmma<T, D>::rs(of, p[kk], dV + stage * kStageDesc + ((kk * 2048) >> 4), accumulate | (kk > 0));
    sm90::wgmma_commit();
  };
  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  auto pack_p = [&]() {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      p[kk][0] = pack2<T>(s[0][2 * kk][0], s[0][2 * kk][1]);
      p[kk][1] = pack2<T>(s[0][2 * kk][2], s[0][2 * kk][3]);
      p[kk][2] = pack2<T>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
      p[kk][3] = pack2<T>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
  };
  auto mask_and_softmax = [&](int nb) {
    score_mod_and_mask<BN, false>(s, a, win, nb, row0 + wrow0, row0 + wrow0 + 15, row0 + wrow0 + g, t);
    online_softmax_step(s, row_max, row_sum, alpha, sl2);
  };

  // Block 0 of the loop order (key block n_max - 1): S, softmax, P. O needs no initialisation: the
  // first P V overwrites it.
  mbar_wait(bar_q, 0);
  mbar_wait(bar_kf, 0);
  sm90::wgmma_fence();
  issue_s(0);
  sm90::wgmma_wait<0>();
  sm90::reg_fence<BN / 2>(sf);
  release(bar_ke);
  mask_and_softmax(n_max - 1);
  pack_p();

  // Step it: S(it) and P(it-1) V(it-1) in flight together, the softmax of S(it) while P V runs.
  int sc = 0;          // stage of block it - 1
  uint32_t phc = 0;    // its fill parity
  for (int it = 1; it < n_blocks; ++it) {
    int sn = sc + 1;
    uint32_t phn = phc;
    if (sn == S) sn = 0, phn ^= 1u;
    mbar_wait(bar_kf + 8 * sn, phn);
    sm90::wgmma_fence();
    issue_s(sn);
    mbar_wait(bar_vf + 8 * sc, phc);
    issue_pv(sc, it > 1 ? 1 : 0);
    sm90::wgmma_wait<1>();
    sm90::reg_fence<BN / 2>(sf);
    release(bar_ke + 8 * sn);
    mask_and_softmax(n_max - 1 - it);
    sm90::wgmma_wait<0>();
    sm90::reg_fence<D / 2>(of);
    sm90::reg_fence_u32<BN / 4>(&p[0][0]);  // P(it-1) stays in its registers until its wgmma is done
    release(bar_ve + 8 * sc);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[0][dt][e] *= alpha[0][e >> 1];
    pack_p();
    sc = sn;
    phc = phn;
  }
  mbar_wait(bar_vf + 8 * sc, phc);
  sm90::wgmma_fence();
  issue_pv(sc, n_blocks > 1 ? 1 : 0);
  sm90::wgmma_wait<0>();
  sm90::reg_fence<D / 2>(of);

  // Epilogue: the warpgroup's rows of Q are free once its four warps are past their last wgmma.
  sm90::named_bar_sync(1 + cw, 128);
  sm90_store_rows<T, D, BM>(o, row_max, row_sum, sl2, smem, gp, a, row0, wrow0, Nq, lane);
#else
  __trap();  // only the sm_90a build has this kernel; the dispatcher never launches it elsewhere
#endif
}

}  // namespace cuda
}  // namespace fa
