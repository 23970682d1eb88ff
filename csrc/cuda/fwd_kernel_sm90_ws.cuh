// FlashAttention forward on Hopper (sm_90a), warp-specialised: the TMA mainloop beside the cp.async
// one of fwd_kernel_sm90.cuh, for dense and packed (varlen) fp16 / bf16 calls (not paged K/V).
//
// A persistent grid (one block per SM) of a producer and two consumer warpgroups (three at W 64); a
// tile is a 64 x consumers-row Q block of one head, and the blocks draw tiles from a counter in
// global memory (longest causal tiles first):
//   - warpgroup 0 is the producer: it gives its registers away (setmaxnreg down) and one thread
//     issues every load as a tensor-map (TMA) copy into the 128-byte swizzled layout wgmma reads:
//     per tile Q, then K and V of each key block into a ring of kStages stages that runs on across
//     tiles. A copy completes on its stage's "full" mbarrier (expect-tx counts its bytes); before
//     refilling a stage the producer waits on its "empty" mbarrier, which every consumer warp
//     arrives on once its wgmmas have read the stage. Q has the same pair, so the next tile's Q
//     and first K load while the consumers finish the current tile.
//   - warpgroups 1, 2 (, 3) are the consumers (setmaxnreg up), 64 rows each: S = Q K^T and O += P V
//     on wgmma, the online softmax in registers, the P V product of block i-1 overlapping the
//     softmax of block i (within a warpgroup), and the two warpgroups taking turns to issue their
//     products (ping-pong, named barriers), so that one's softmax runs while another's products
//     keep the tensor cores busy. No block-wide barrier anywhere in the loop.
// The mask, the score modifier, the softmax step and the epilogue are the shared pieces
// (fwd_common.cuh, sm90_store_rows); the epilogue stages O in shared memory for 16-byte stores.
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

template <typename T_, int kHeadDim_, int kConsumers_>
struct Sm90WsTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;  // consumer warpgroups, 64 rows each
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = sm90_ws_block_n(kHeadDim_);
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kTileQ = kBlockM * kHeadDim * 2;  // bytes
  static constexpr int kTileKV = kBlockN * kHeadDim * 2;
  // O is staged in its own buffer where it fits next to a ring of two stages (D <= 192): Q's buffer
  // is then free after the tile's last S = Q K^T and the next tile's Q loads while this tile's O is
  // written out. At D 256 O is staged through Q's buffer.
  static constexpr bool kOwnO = 2 * kTileQ + 4 * kTileKV <= 200 * 1024;
  static constexpr int kTileO = kOwnO ? kTileQ : 0;
  // Ring depth: as deep as the shared memory allows, up to 4 (D 64: 4, D 128: 2, D 192: 2, D 256: 2).
  static constexpr int kStagesFit = (200 * 1024 - kTileQ - kTileO) / (2 * kTileKV);
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 2 ? 240 : 160;  // 24 x 128 + 240 x 256 = 384 x 168, the launch's allocation
  // Barriers after the tiles: Q full, Q empty, then K full, V full, K empty, V empty per stage.
  static constexpr int kBarOffset = kTileQ + kTileO + 2 * kStages * kTileKV;
  // Then two int slots: the tile index the producer hands to the consumers (tile j in slot j % 2).
  static constexpr int kSlotOffset = kBarOffset + 8 * (2 + 4 * kStages);
  static constexpr int kSmemBytes = 1024 + kSlotOffset + 8;
  static_assert(sizeof(T) == 2 && (kConsumers == 2 || kConsumers == 3), "fp16 / bf16, two or three consumers");
  static_assert(kStages >= 2, "a ring of at least two stages");
  // setmaxnreg moves registers within the block's launch allocation (168 per thread at 384 threads):
  // asking for more than it holds blocks the consumers' setmaxnreg.inc forever.
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= (65536 / kThreads) / 8 * 8 * kThreads,
                "register split over the launch allocation");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256, "wgmma n = head dim");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
};

// One tile of the persistent loop: row block, head and sequence, and its key blocks.
struct WsTile {
  BlockCoord bc;
  SeqInfo seq;
  int row0, n_min, n_max;
};
template <int BM, int BN>
__device__ __forceinline__ WsTile ws_tile(const FwdArgs& a, int idx) {
  WsTile w;
  w.bc = block_coord_of(a, idx);
  w.seq = fwd_seq(a, w.bc.b);
  w.row0 = w.bc.m_block * BM;
  const KeyWindow win(w.seq, a.window_left, a.window_right);
  key_block_range<BM, BN>(win, w.row0, &w.n_min, &w.n_max);
  if (w.row0 >= w.seq.nq) w.n_max = w.n_min;  // (dense calls: never)
  return w;
}

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
  unsigned char* const smem_o = smem + Tr::kTileQ;  // O staging (kOwnO)
  const uint32_t sK = sQ + Tr::kTileQ + Tr::kTileO;  // stages 0 .. S-1
  const uint32_t sV = sK + S * kTileKV;              // stages 0 .. S-1
  const uint32_t bar_qf = sQ + Tr::kBarOffset, bar_qe = bar_qf + 8;
  const uint32_t bar_kf = bar_qe + 8, bar_vf = bar_kf + 8 * S, bar_ke = bar_vf + 8 * S, bar_ve = bar_ke + 8 * S;
  volatile int* const slots = reinterpret_cast<volatile int*>(smem + Tr::kSlotOffset);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;
  const int n_tiles = a.num_m_blocks * a.heads * a.batch;

  if (tid == 0) {
    mbar_init(bar_qf, 1);
    mbar_init(bar_qe, Tr::kConsumerWarps);
    for (int s = 0; s < S; ++s) {
      mbar_init(bar_kf + 8 * s, 1);
      mbar_init(bar_vf + 8 * s, 1);
      mbar_init(bar_ke + 8 * s, Tr::kConsumerWarps);
      mbar_init(bar_ve + 8 * s, Tr::kConsumerWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();

  // Persistent loop (ta.ctas blocks, at most one per SM): block i starts with tile i, then takes
  // the next tile from a counter in global memory (tile order as the hardware would run one block
  // per tile: row blocks of a head together, the longest first under a causal mask), so a block
  // that drew short tiles draws more. The producer draws and hands each tile index to the
  // consumers in a shared slot published by the Q-full barrier; -1 ends the loop. With one block
  // per tile (ta.ctas = 0) every block has exactly its own tile. The ring's stage and phase run on
  // across tiles (c: key blocks so far), Q's phase per tile (j).
  if (wg == 0) {
    // Producer. Key blocks run high to low (the masked ones first). Per tile: K of its first block,
    // then Q (once the consumers are done with the previous tile's), then V, K, V, ...
    sm90::setmaxnreg_dec<Tr::kProducerRegs>();
    if (tid == 0) {
      int c = 0;
      int idx = blockIdx.x;
      const bool dynamic = ta.ctas > 0;
      for (int j = 0;; ++j) {
        const bool done = idx >= n_tiles || (j > 0 && !dynamic);
        WsTile w{};
        int n_blocks = 0;
        int next = n_tiles;
        if (!done) {
          // The next tile is drawn when this tile's last key block is loaded (its latency hides
          // behind that block's waits). Drawn at the start of the tile instead, a block holds a
          // tile it cannot start for a whole tile: causal N 16k lost 6% (NOTES-fwd.md).
          w = ws_tile<BM, BN>(a, idx);
          n_blocks = max(w.n_max - w.n_min, 0);
        }
        const int hk = w.bc.h / a.group;
        // Map coordinates: packed sequences are rows of one [total, heads, D] tensor (batch 0);
        // rows of the next sequence that a ragged tile reads are masked (keys) or not stored (rows).
        const bool packed = a.cu_seqlens_q != nullptr;
        const int bm = packed ? 0 : w.bc.b;
        const int q_row0 = static_cast<int>(w.seq.q_row0), k_row0 = static_cast<int>(w.seq.k_row0);
        auto load_k = [&](int n, int s, uint32_t ph) {
          if (c >= S) mbar_wait(bar_ke + 8 * s, ph);
          mbar_arrive_expect_tx(bar_kf + 8 * s, kTileKV);
#pragma unroll
          for (int cb = 0; cb < kCB; ++cb)
            tma_load_4d(sK + s * kTileKV + cb * BN * 128, &ta.tk, cb * 64, k_row0 + n * BN, hk, bm, bar_kf + 8 * s);
        };
        auto load_v = [&](int n, int s, uint32_t ph) {
          if (c >= S) mbar_wait(bar_ve + 8 * s, ph);
          mbar_arrive_expect_tx(bar_vf + 8 * s, kTileKV);
#pragma unroll
          for (int cb = 0; cb < kCB; ++cb)
            tma_load_4d(sV + s * kTileKV + cb * BN * 128, &ta.tv, cb * 64, k_row0 + n * BN, hk, bm, bar_vf + 8 * s);
        };
        // fill c / S of stage c % S waits for the consumers' release of the previous fill
        if (n_blocks > 0) load_k(w.n_max - 1, c % S, ((c / S) - 1) & 1);
        if (j > 0) mbar_wait(bar_qe, (j - 1) & 1);
        slots[j & 1] = done ? -1 : idx;
        if (n_blocks > 0) {
          mbar_arrive_expect_tx(bar_qf, Tr::kTileQ);
#pragma unroll
          for (int cb = 0; cb < kCB; ++cb)
            tma_load_4d(sQ + cb * BM * 128, &ta.tq, cb * 64, q_row0 + w.row0, w.bc.h, bm, bar_qf);
        } else {
          mbar_arrive(bar_qf);  // the slot alone (a tile without keys, or the end)
        }
        if (done) break;
        if (dynamic && n_blocks == 0) next = ta.ctas + atomicAdd(ta.tile_counter, 1);
        for (int it = 0; it < n_blocks; ++it, ++c) {
          const int n = w.n_max - 1 - it;
          const int s = c % S;
          const uint32_t ph = ((c / S) - 1) & 1;
          if (dynamic && it == n_blocks - 1) next = ta.ctas + atomicAdd(ta.tile_counter, 1);
          if (it > 0) load_k(n, s, ph);
          load_v(n, s, ph);
        }
        idx = next;
      }
      // The last block to finish drawing leaves the counters at zero for the next launch.
      if (dynamic && atomicAdd(ta.tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        atomicExch(ta.tile_counter, 0);
        atomicExch(ta.tile_counter + 1, 0);
      }
    }
    return;
  }
  sm90::setmaxnreg_inc<Tr::kConsumerRegs>();

  // Consumers: warpgroup cw owns rows [64 cw, 64 cw + 64) of each tile.
  const int cw = wg - 1;
  const int ctid = tid - 128;
  const int g = lane >> 2, t = lane & 3;
  const int wrow0 = cw * 64 + (warp & 3) * 16;
  const uint64_t dQ = sm90::smem_desc(sQ + cw * 64 * 128, 16, 1024);
  const uint64_t dK = sm90::smem_desc(sK, 16, 1024);
  const uint64_t dV = sm90::smem_desc(sV, BN * 128, 1024);
  auto kstep = [](int ks, int rows) -> uint64_t {
    return static_cast<uint64_t>(((ks / 4) * rows * 128 + (ks % 4) * 32) >> 4);
  };
  constexpr uint64_t kStageDesc = kTileKV >> 4;
  const float sl2 = a.scale_log2;
  const bool pp = ta.pingpong != 0;
  const bool rescale_always = ta.rescale_always != 0;

  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  int c = 0;
  for (int j = 0;; ++j) {
    mbar_wait(bar_qf, j & 1);
    const int idx = slots[j & 1];
    if (idx < 0) break;
    const WsTile w = ws_tile<BM, BN>(a, idx);
    const int n_blocks = w.n_max - w.n_min;
    const int row0 = w.row0, n_max = w.n_max, Nq = w.seq.nq;
    const FwdBlockPtrs gp = block_ptrs<2>(a, w.bc, w.seq, row0);
    if (n_blocks <= 0) {
      if (row0 < Nq) write_empty_rows<BM, 128 * Tr::kConsumers>(a, gp.o, gp.lse, min(BM, Nq - row0), 2, ctid);
      release(bar_qe);
      continue;
    }
    const KeyWindow win(w.seq, a.window_left, a.window_right);

    float s[1][BN / 8][4];
    float o[1][D / 8][4];
    uint32_t p[BN / 16][4];
    float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};
    float alpha[1][2];
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

    // Ping-pong (ta.pingpong): the consumer warpgroups take turns issuing their products, in a ring
    // (0, 1, [2,] 0, ...), so that one's softmax runs while another's products occupy the tensor
    // cores. Named barrier 8 + cw is "cw may issue": 256 arrivals, cw's own 128 waiting and its
    // predecessor's 128 signalling after its issue. Warpgroup 0 goes first (the last one signals it
    // once at the start of a tile); all have the same n_blocks + 1 turns in a tile, and the last
    // turn of the last warpgroup signals nobody (balanced at the end of every tile).
    int turns_left = n_blocks + 1;
    auto my_turn = [&]() {
      if (pp) sm90::named_bar_sync(8 + cw, 256);
    };
    auto pass_turn = [&]() {
      --turns_left;
      if (pp && (cw < Tr::kConsumers - 1 || turns_left > 0))
        sm90::named_bar_arrive(8 + (cw + 1) % Tr::kConsumers, 256);
    };
    if (pp && cw == Tr::kConsumers - 1) sm90::named_bar_arrive(8, 256);

    // Block 0 of the loop order (key block n_max - 1): S, softmax, P. O needs no initialisation:
    // the first P V overwrites it.
    int sc = c % S;                // stage of the block before the current one
    uint32_t phc = (c / S) & 1;    // its fill parity
    mbar_wait(bar_kf + 8 * sc, phc);
    my_turn();
    sm90::wgmma_fence();
    issue_s(sc);
    pass_turn();
    sm90::wgmma_wait<0>();
    sm90::reg_fence<BN / 2>(sf);
    release(bar_ke + 8 * sc);
    constexpr bool q_early = Tr::kOwnO;  // Q's buffer is free after the last S
    if (q_early && n_blocks == 1) release(bar_qe);  // the tile's last read of Q
    mask_and_softmax(n_max - 1);
    pack_p();

    // Step it: S(it) and P(it-1) V(it-1) in flight together, the softmax of S(it) while P V runs.
    for (int it = 1; it < n_blocks; ++it) {
      int sn = sc + 1;
      uint32_t phn = phc;
      if (sn == S) sn = 0, phn ^= 1u;
      mbar_wait(bar_kf + 8 * sn, phn);
      mbar_wait(bar_vf + 8 * sc, phc);
      my_turn();
      sm90::wgmma_fence();
      issue_s(sn);
      issue_pv(sc, it > 1 ? 1 : 0);
      pass_turn();
      sm90::wgmma_wait<1>();
      sm90::reg_fence<BN / 2>(sf);
      release(bar_ke + 8 * sn);
      if (q_early && it == n_blocks - 1) release(bar_qe);
      mask_and_softmax(n_max - 1 - it);
      sm90::wgmma_wait<0>();
      sm90::reg_fence<D / 2>(of);
      sm90::reg_fence_u32<BN / 4>(&p[0][0]);  // P(it-1) stays in its registers until its wgmma is done
      release(bar_ve + 8 * sc);
      // O *= alpha; skipped when no row of the warp moved its max (alpha exactly 1 then).
      if (rescale_always || __any_sync(0xffffffffu, alpha[0][0] != 1.f || alpha[0][1] != 1.f)) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
          for (int e = 0; e < 4; ++e) o[0][dt][e] *= alpha[0][e >> 1];
      }
      pack_p();
      sc = sn;
      phc = phn;
    }
    mbar_wait(bar_vf + 8 * sc, phc);
    my_turn();
    sm90::wgmma_fence();
    issue_pv(sc, n_blocks > 1 ? 1 : 0);
    pass_turn();
    sm90::wgmma_wait<0>();
    sm90::reg_fence<D / 2>(of);
    release(bar_ve + 8 * sc);
    c += n_blocks;

    // Epilogue: each warp writes only its own rows (through its rows of the O buffer, or directly).
    // At D 256 (no O buffer) through the warpgroup's rows of Q's buffer, free once its four warps
    // are past their last wgmma; the next Q then loads after every consumer warp has written its
    // rows out. (4-byte stores straight from the registers instead, releasing Q after the last S,
    // measured 4-7% slower at N 1k-4k.)
    if constexpr (Tr::kOwnO) {
      sm90_store_rows<T, D, BM>(o, row_max, row_sum, sl2, smem_o, gp, a, row0, wrow0, Nq, lane);
    } else {
      sm90::named_bar_sync(1 + cw, 128);
      sm90_store_rows<T, D, BM>(o, row_max, row_sum, sl2, smem, gp, a, row0, wrow0, Nq, lane);
      release(bar_qe);
    }
  }
#else
  __trap();  // only the sm_90a build has this kernel; the dispatcher never launches it elsewhere
#endif
}

}  // namespace cuda
}  // namespace fa
