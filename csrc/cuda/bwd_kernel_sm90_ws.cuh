// FlashAttention backward main kernel on Hopper (sm_90a), warp-specialised: the TMA mainloop beside
// the cp.async one of bwd_kernel_sm90.cuh, for dense fp16 / bf16 calls (packed sequences keep the
// cp.async kernel), in both modes: the deterministic one orders the dQ writer's adds into each row
// block by key block (bwd_det_rank). One kernel, two ways of splitting the work that share the
// producer and the dQ writer (bwd_ws_load, bwd_ws_write_dq): the key split at head-dim tiles 64 and
// 128, described here, and the row split at 256 (Sm90BwdWsTraits::kRowSplit: 64 keys per block; its
// consumers' comment in the kernel says how it differs).
//
// One thread block per (key block j of 128 keys, kv head, batch), 384 threads: a producer warpgroup
// and two consumer warpgroups. The block walks the 64-row query blocks i of every query head of the
// GQA group that see its keys, as the cp.async kernel does with its key split:
//   - producer warp 0, one thread: K_j and V_j once, then per block i Q_i and dO_i as tensor-map
//     copies into the 128-byte swizzled layout and the lse2 / dsum slices as bulk copies, into a
//     ring of kStages stages; a stage completes on its "full" mbarrier (expect-tx) and is refilled
//     after its "empty" mbarrier has seen every consumer thread.
//   - producer warp 1, one thread, the dQ writer: per block i, once every consumer warp has put its
//     share of dQ_i (this key block's part, fp32) into dQ buffer i % 2, in the workspace's fragment
//     order (DqLayout, sm90_dq_layout), it adds the whole 64-row image into the fp32 workspace with
//     one bulk reduce-add (cp.reduce.async.bulk .add.f32) and hands the buffer back once the copy
//     engine has read it. Several key blocks add into the same rows; L2 does the additions.
//   - consumer warpgroup w (setmaxnreg up), keys [64w, 64w + 64): S^T = K_j Q_i^T and dP^T =
//     V_j dO_i^T (SS wgmma), P^T and dS^T in registers (sm90_bwd_pds), dS^T into shared memory (two
//     buffers, alternating per block), dV += P^T dO_i and dK += dS^T Q_i (RS wgmma; dK, dV stay in
//     registers for the whole walk), then a named barrier of the 256 consumer threads (both halves
//     of dS^T written) and dQ_i = dS K_j for its half of the columns (SS wgmma), into the dQ buffer.
//     At W 128 (FA_BWD_WS_DQ_FIRST) dK is issued after the barrier, behind the dQ product, so that
//     the dQ share goes into its buffer while dK runs.
// Two walks of the consumers: the plain one (S^T / dP^T, then P^T and dS^T together) and, at W 128
// without a score modifier, the overlapped one (P^T while dP^T is in flight, dS^T while dV is).
// No consumer warp issues a global load or a global reduction; the producer joins no barrier after
// the set-up. Two dS^T buffers make one consumer barrier per block enough: a warpgroup writing
// buffer i % 2 has passed block i-1's barrier, which the other reaches only after block i-2's dQ
// product (the last reader of that buffer) is complete.
#pragma once
#include <type_traits>
#include "cuda/bwd_kernel_sm90.cuh"

#ifndef FA_BWD_WS_TMA_DKDV
// CMake option FA_BWD_WS_TMA_DKDV (development, OFF; measured equal to the staged one): the key split's
// epilogue through K's and V's tiles in their tensor maps' layout, written by tensor-map stores
// (sm90_bwd_stage_dkdv_tma); the row split ignores it
#define FA_BWD_WS_TMA_DKDV 0
#endif

namespace fa {
namespace cuda {

// FA_WS_TRACE builds (FA_TRACE=1 npm run build:native; development only): a timeline of each of the
// launch's first kBwdTraceCtas blocks, in global-timer nanoseconds: the block's entry (thread 0), K /
// V landed, the walk done and the dK / dV epilogue issued (the first consumer thread), the dQ
// writer's last reduction done (its thread), and the block's SM and walk length, so that a tile's
// fixed cost splits into its fill, its epilogue, the writer's tail and the gap before the next block
// on the same SM (bwd_launch.cuh, bwd_trace_report).
#ifdef FA_WS_TRACE
constexpr int kBwdTraceCtas = 8192, kBwdTraceFields = 7;
static __device__ unsigned long long g_bwd_trace[kBwdTraceCtas][kBwdTraceFields];  // one per translation unit
#define FA_BWD_MARK(field, value)                                                   \
  do {                                                                              \
    if (blockIdx.x < kBwdTraceCtas) g_bwd_trace[blockIdx.x][(field)] = (value);     \
  } while (0)
#else
#define FA_BWD_MARK(field, value) \
  do {                            \
  } while (0)
#endif

// One warp's m64nN dQ accumulator tile (its 16 rows x N columns) stored to shared memory at dst in
// the workspace's fragment order (DqLayout perm, vec 4: the order of the cp.async kernel's 16-byte
// reductions), so that a bulk reduce-add of the whole tile lands every value in place.
template <int N>
__device__ __forceinline__ void bwd_ws_stage_dq(float* dst, const float (&dq)[N / 2], int lane) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr)
#pragma unroll
    for (int nt = 0; nt < N / 8; nt += 2)
      *reinterpret_cast<float4*>(dst + (((hr * (N / 8) + nt) / 2) * 32 + lane) * 4) =
          make_float4(dq[4 * nt + 2 * hr], dq[4 * nt + 2 * hr + 1], dq[4 * (nt + 1) + 2 * hr], dq[4 * (nt + 1) + 2 * hr + 1]);
}

// One warp's dS^T (its 16 keys kbase.. x the BM rows) from its dK A fragments x (the packed dS^T
// accumulators: fragment kk holds the 8 x 8 tiles (rows 16 kk.., keys kbase..), (rows 16 kk..,
// keys kbase + 8..), (rows 16 kk + 8.., kbase..), (rows 16 kk + 8.., kbase + 8..), each thread
// its pair of adjacent rows of one key) into the [key][row] buffer at sdst, 128 bytes per key with
// the 128-byte swizzle: a key's 8 rows 8 j.. are the 16-byte chunk j ^ (key & 7). One stmatrix per
// fragment (four tiles; lane l gives the address of row l % 8 of tile l / 8) in place of 16
// 4-byte stores and their packs (twentieth session: the dS^T stores and their MIO throttle, NOTES-bwd.md).
template <int BM>
__device__ __forceinline__ void bwd_ws_store_dst(uint32_t sdst, const uint32_t (&x)[BM / 16][4], int kbase, int lane) {
  const int m = lane >> 3, key = kbase + 8 * (m & 1) + (lane & 7);
#pragma unroll
  for (int kk = 0; kk < BM / 16; ++kk) {
    const int j = 2 * kk + (m >> 1);
    const uint32_t addr = sdst + key * 128 + ((j ^ (key & 7)) << 4);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(x[kk][0]),
                 "r"(x[kk][1]), "r"(x[kk][2]), "r"(x[kk][3])
                 : "memory");
  }
}

// Row block of block it of a key block's walk: m_begin + it % n_m upwards, in each query head of the
// group; deterministic calls without a mask start at row block rot and wrap (bwd_det_rank_rot).
__device__ __forceinline__ int bwd_ws_row(int it, int n_m, int m_begin, int rot) {
  int r = it % n_m + rot;
  if (r >= n_m) r -= n_m;
  return m_begin + r;
}

// Producer warp 0, one thread: K_j and V_j once, then per block it of the walk Q_i and dO_i as
// tensor-map copies and the lse2 / dsum slices as bulk copies into stage it % S of the ring; fill
// it waits for the release of fill it - S on the stage's "empty" mbarrier. Block it is query head
// hk * group + it / n_m, row block bwd_ws_row(it, ..).
template <class Tr>
__device__ __forceinline__ void bwd_ws_load(const BwdTmaArgs& ta, uint32_t base, float* sL, float* sD, uint32_t bar_kv,
                                            uint32_t bar_qf, uint32_t bar_qe, int key0, int hk, int b, int total, int n_m,
                                            int m_begin, int rot, int64_t ws_b) {
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, kCB = Tr::kColBlocks, S = Tr::kStages;
  const BwdArgs& a = ta.a;
  mbar_arrive_expect_tx(bar_kv, 2 * Tr::kTileKV);
#pragma unroll
  for (int cb = 0; cb < kCB; ++cb) {
    tma_load_4d(base + Tr::kOffK + cb * BN * 128, &ta.tk, cb * 64, key0, hk, b, bar_kv);
    tma_load_4d(base + Tr::kOffV + cb * BN * 128, &ta.tv, cb * 64, key0, hk, b, bar_kv);
  }
  for (int it = 0; it < total; ++it) {
    const int st = it % S;
    if (it >= S) mbar_wait(bar_qe + 8 * st, ((it / S) - 1) & 1);
    const int hq = hk * a.group + it / n_m, row0 = bwd_ws_row(it, n_m, m_begin, rot) * BM;
    const uint32_t full = bar_qf + 8 * st;
    mbar_arrive_expect_tx(full, 2 * Tr::kTileQ + 2 * BM * 4);
#pragma unroll
    for (int cb = 0; cb < kCB; ++cb) {
      tma_load_4d(base + Tr::kOffQ + st * Tr::kTileQ + cb * BM * 128, &ta.tq, cb * 64, row0, hq, b, full);
      tma_load_4d(base + Tr::kOffDo + st * Tr::kTileQ + cb * BM * 128, &ta.tdo, cb * 64, row0, hq, b, full);
    }
    const int64_t roff = ws_b + hq * a.ws_head + row0;
    bulk_g2s(smem_u32(sL + st * BM), a.lse2 + roff, BM * 4, full);
    bulk_g2s(smem_u32(sD + st * BM), a.dsum + roff, BM * 4, full);
  }
}

// Producer warp 1, one thread: the dQ writer. Per block it, once the consumers have put their dQ
// shares (fp32, fragment order) into shared memory and arrived on dQ barrier it % 2, `issue(dst, it)`
// adds them into the workspace rows at dst with bulk reduce-adds; once the copy engine has read
// them (deterministic mode: once the adds are done in global memory), `done(it)` hands the
// memory back. Deterministic mode: the adds into a row block wait for this key block's turn
// (bwd_det_rank) and complete before the next key block's turn is released, so the sums run in
// key-block order; the consumers, one buffer ahead, do not wait.
template <class Tr, class Issue, class Done>
__device__ __forceinline__ void bwd_ws_write_dq(const BwdArgs& a, const SeqInfo& seq, bool det, int n_block, int total,
                                                int n_m, int m_begin, int rot, bool rotated, int hk, int64_t ws_b,
                                                uint32_t bar_dqf, Issue&& issue, Done&& done) {
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN;
  for (int it = 0; it < total; ++it) {
    const int d = it & 1;
    mbar_wait(bar_dqf + 8 * d, (it >> 1) & 1);
    const int mm = bwd_ws_row(it, n_m, m_begin, rot);
    const int64_t wrow = ws_b + (hk * a.group + it / n_m) * a.ws_head + mm * BM;
    int* sem = nullptr;
    int rank = 0;
    if (det) {
      static_assert(BM == 64, "one dq_sem counter per 64 workspace rows");
      sem = a.dq_sem + (wrow >> 6);
      rank = rotated ? bwd_det_rank_rot(a.num_n_blocks, n_m, n_block, mm - m_begin) : bwd_det_rank<BM, BN>(a, seq, n_block, mm);
      while (ld_acquire_gpu(sem) != rank) __nanosleep(32);
      fence_proxy_async_global();  // the reduction after the acquire
    }
    issue(a.dq_acc + wrow * Tr::kHeadDim, it);
    bulk_commit_group();
    if (det) {
      bulk_wait_group<0, false>();  // the adds done in global memory
      fence_proxy_async_global();
      st_release_gpu(sem, rank + 1);
    } else {
      bulk_wait_group<0, true>();
    }
    done(it);
  }
  bulk_wait_group<0, false>();
}

template <class Tr, int kWalk>
__global__ void __launch_bounds__(Tr::kThreads, 1) bwd_kernel_sm90_ws(const __grid_constant__ BwdTmaArgs ta) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename Tr::T;
  constexpr int W = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int S = Tr::kStages;
  constexpr int NQ = Tr::kDqCols;
  // W 64: dQ of a block is one warpgroup's, in turns (block it: warpgroup it % 2), over all 128 keys
  // and all 64 columns; the other warpgroup goes on to block it+1 meanwhile (see finish below).
  constexpr bool kTurnDq = !Tr::kRowSplit && Tr::kHeadDim == 64;
  constexpr bool kDqFirst = FA_BWD_WS_DQ_FIRST && !kTurnDq;  // (the key split's finish below)
  // (W 128 in turns, m64n128 over the 128 keys: 0.87-0.94x, the one dQ product per block as long as
  // the rest of a warpgroup's block; NOTES-bwd.md.)
  const BwdArgs& a = ta.a;
#ifdef FA_WS_TRACE
  if (threadIdx.x == 0) {
    FA_BWD_MARK(0, trace_now_ns());
    FA_BWD_MARK(5, trace_smid());
  }
#endif

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (base - raw);
  const uint32_t sK = base + Tr::kOffK, sV = base + Tr::kOffV;
  const uint32_t sQ = base + Tr::kOffQ, sdO = base + Tr::kOffDo;
  const uint32_t sdS = base + Tr::kOffDs, sDq = base + Tr::kOffDq;
  float* const sL = reinterpret_cast<float*>(smem + Tr::kOffL);
  float* const sD = reinterpret_cast<float*>(smem + Tr::kOffD);
  const uint32_t bar_kv = base + Tr::kOffBar;
  const uint32_t bar_qf = bar_kv + 8, bar_qe = bar_qf + 8 * S;
  const uint32_t bar_dqf = bar_qe + 8 * S, bar_dqe = bar_dqf + 16;  // two each (dQ buffers)

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;
  // Block order as the cp.async kernel's: the key blocks of a head next to each other, from the last
  // down in deterministic mode (bwd_kernel_sm90.cuh).
  const bool det = a.dq_sem != nullptr;
  int n_block, bh;
  bwd_block_of(a, det, &n_block, &bh);
  const int hk = bh % a.heads_k;
  const int b = bh / a.heads_k;
  const SeqInfo seq = bwd_seq(a, b);
  const int Nq = seq.nq, Nk = seq.nk;
  const int key0 = n_block * BN;
  int m_begin, m_end;
  bwd_row_blocks<BM, BN>(a, seq, key0, &m_begin, &m_end);
  const int n_m = max(0, m_end - m_begin);
  const int total = n_m * a.group;  // blocks i: (query head of the group, row block), head-major
  if (threadIdx.x == 0) FA_BWD_MARK(6, static_cast<unsigned long long>(total));
  const int64_t ws_b = bwd_ws_base(a, b, 0, seq);
  // Block it of the walk: query head hk * group + it / n_m, row block m_begin + it % n_m (upwards
  // in deterministic mode too: bwd_det_rank), or, in deterministic calls without a mask
  // (ta.det_rot), from row block rot on, wrapping (bwd_det_rank_rot).
  const bool rotated = det && ta.det_rot != 0 && n_m > 0;
  const int rot = rotated ? (a.num_n_blocks - 1 - n_block) % n_m : 0;
  auto row0_of = [&](int it) { return bwd_ws_row(it, n_m, m_begin, rot) * BM; };

  if (tid == 0) {
    mbar_init(bar_kv, 1);
    for (int s = 0; s < S; ++s) {
      mbar_init(bar_qf + 8 * s, 1);
      // Every consumer thread (it read the stage's lse2 / dsum slices itself; row split: and the dQ
      // writer, which reads its dQ images out of the stage). One arrival per warp after __syncwarp
      // orders the other lanes' reads as well, but compute-sanitizer's racecheck does not follow
      // that and reported each refill of the slices as a hazard (forty-fifth session).
      mbar_init(bar_qe + 8 * s, 256 + (Tr::kRowSplit ? 1 : 0));
    }
    for (int d = 0; d < 2; ++d) {
      mbar_init(bar_dqf + 8 * d, kTurnDq ? 4 : 8);  // the consumer warps that write an image
      mbar_init(bar_dqe + 8 * d, 1);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    sm90::setmaxnreg_dec<Tr::kProducerRegs>();
    if (tid == 0) {
      bwd_ws_load<Tr>(ta, base, sL, sD, bar_kv, bar_qf, bar_qe, key0, hk, b, total, n_m, m_begin, rot, ws_b);
    } else if (tid == 32) {
      if constexpr (Tr::kRowSplit) {
        // dQ writer: block it's image, 16 warp tiles of 16 rows x 64 columns (4 KiB, in the
        // workspace's fragment order), from the Q / dO tiles of stage it % 2 (the row split's
        // consumers below), then the stage goes back to the producer.
        bwd_ws_write_dq<Tr>(
            a, seq, det, n_block, total, n_m, m_begin, rot, rotated, hk, ws_b, bar_dqf,
            [&](float* dst, int it) {
              const uint32_t stage = (it & 1) * Tr::kTileQ;
#pragma unroll
              for (int tile = 0; tile < 16; ++tile) {  // tile = 4 wq + 2 cw + c
                const uint32_t src = ((tile & 1) ? sdO : sQ) + stage + (tile & 2) * (Tr::kTileQ / 4) + (tile >> 2) * 4096;
                bulk_reduce_add_f32(dst + tile * 1024, src, 4096);
              }
            },
            [&](int it) { mbar_arrive(bar_qe + 8 * (it & 1)); });
      } else {
        // dQ writer: the image of block it from buffer it % 2, handed back on its empty barrier.
        bwd_ws_write_dq<Tr>(
            a, seq, det, n_block, total, n_m, m_begin, rot, rotated, hk, ws_b, bar_dqf,
            [&](float* dst, int it) { bulk_reduce_add_f32(dst, sDq + (it & 1) * Tr::kTileDq, Tr::kTileDq); },
            [&](int it) { mbar_arrive(bar_dqe + 8 * (it & 1)); });
      }
      FA_BWD_MARK(4, trace_now_ns());  // the writer's last reduction done
    }
    return;
  }
  sm90::setmaxnreg_inc<Tr::kConsumerRegs>();
#if FA_BWD_WS_TMA_DKDV
  if (!Tr::kRowSplit && threadIdx.x == 128) {  // the epilogue's store maps, fetched while the tile runs
    prefetch_tensormap(&ta.tdk);
    prefetch_tensormap(&ta.tdv);
  }
#endif
  // Consumers (both splits): warpgroup cw, warp wq of it; descriptors as the cp.async kernel's.
  // K-major: 8-row groups 1024 bytes apart, k-step ks at column block ks / 4, byte 32 (ks % 4).
  // MN-major: 16 k-rows = 2048 bytes per k-step, 64-column blocks rows x 128 bytes apart.
  const int cw = sm90::warp_uniform(wg - 1);
  const int wq = warp & 3;
  const int g = lane >> 2, t = lane & 3;
  constexpr uint32_t kMnStep = 2048 >> 4;
  constexpr uint32_t kStage = Tr::kTileQ >> 4;
  if constexpr (Tr::kRowSplit) {
    // Row split (W 256): warpgroup cw owns rows [NS cw, NS cw + NS) of S^T / dP^T (all 64 keys) and
    // columns [NC cw, NC cw + NC) of dK / dV / dQ; warp wq of it the keys 16 wq.. of S^T and the
    // rows 16 wq.. of dQ. Per block it (stage st = it % 2, P^T / dS^T buffer db = it & 1):
    //   S^T, dP^T (SS wgmma) -> P^T, dS^T (sm90_bwd_pds) into buffer db -> barrier of the 256
    //   consumer threads (both halves written) -> dV += P^T dO, dK += dS^T Q for its columns (SS,
    //   A = buffer db) -> dQ = dS K for its columns, two chunks of QC, each into its own columns of
    //   the stage's Q tile (chunk 0) and dO tile (chunk 1): only its own dV / dK products read those
    //   once both warpgroups have passed the barrier (S^T / dP^T of every row are done). The stage
    //   goes back to the producer once the writer has read them and every consumer thread has
    //   arrived (its lse2 / dsum reads done).
    // Two P^T / dS^T buffers make the one barrier per block enough: a warpgroup writing buffer db at
    // block it has passed block it-1's barrier, which the other reaches only after its products of
    // block it-2 (the readers of buffer db) are complete.
    constexpr int NS = Tr::kSRows, NC = Tr::kCols, QC = Tr::kDqChunk;
    const int wrow0 = cw * NS;
    constexpr uint32_t kBuf = 2 * Tr::kTileP;  // one P^T / dS^T buffer: P^T, then dS^T
    const sm90::SmemDesc dK_a = sm90::smem_desc_w(sK, 16, 1024);                 // A of S^T: all 64 keys
    const sm90::SmemDesc dV_a = sm90::smem_desc_w(sV, 16, 1024);                 // A of dP^T
    const sm90::SmemDesc dQ_b = sm90::smem_desc_w(sQ + wrow0 * 128, 16, 1024);   // B of S^T: this warpgroup's rows
    const sm90::SmemDesc ddO_b = sm90::smem_desc_w(sdO + wrow0 * 128, 16, 1024);  // B of dP^T
    const uint32_t col_off = cw * (NC / 64) * BM * 128;                  // this warpgroup's columns
    const sm90::SmemDesc ddO_mn = sm90::smem_desc_w(sdO + col_off, BM * 128, 1024);  // B of dV (MN-major)
    const sm90::SmemDesc dQ_mn = sm90::smem_desc_w(sQ + col_off, BM * 128, 1024);    // B of dK
    const sm90::SmemDesc dK_mn = sm90::smem_desc_w(sK, BN * 128, 1024);             // B of dQ
    const sm90::SmemDesc dPt_a = sm90::smem_desc_w(sdS, 16, 1024);                  // A of dV (K-major)
    const sm90::SmemDesc ddSt_a = sm90::smem_desc_w(sdS + Tr::kTileP, 16, 1024);    // A of dK
    const sm90::SmemDesc ddSt_mn = sm90::smem_desc_w(sdS + Tr::kTileP, BN * 128, 1024);  // A of dQ (MN-major)

    float dv[NC / 2], dk[NC / 2];
#pragma unroll
    for (int i = 0; i < NC / 2; ++i) dv[i] = dk[i] = 0.f;

    mbar_wait(bar_kv, 0);
    for (int it = 0; it < total; ++it) {
      const int st = it & 1;
      const uint32_t buf = st * kBuf;
      const int row0 = row0_of(it);
      mbar_wait(bar_qf + 8 * st, (it >> 1) & 1);
      float s[NS / 8][4], dp[NS / 8][4];
      sm90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < W / 16; ++ks)
        sm90::Wgmma<T, NS>::ss(&s[0][0], dK_a + sm90::kstep(ks, BN), dQ_b + st * kStage + sm90::kstep(ks, BM), ks > 0);
#pragma unroll
      for (int ks = 0; ks < W / 16; ++ks)
        sm90::Wgmma<T, NS>::ss(&dp[0][0], dV_a + sm90::kstep(ks, BN), ddO_b + st * kStage + sm90::kstep(ks, BM), ks > 0);
      sm90::wgmma_commit();
      sm90::wgmma_wait<0>();
      sm90::reg_fence<NS / 2>(&s[0][0]);
      sm90::reg_fence<NS / 2>(&dp[0][0]);
      sm90_bwd_pds<T, NS, true>(a, s, dp, sL + st * BM, sD + st * BM, smem + Tr::kOffDs + buf + Tr::kTileP,
                                smem + Tr::kOffDs + buf, Nq, Nk, key0, BN, row0, BM, wq * 16 + g, wrow0 + 2 * t);
      sm90::fence_proxy_async_smem();  // P^T, dS^T for both warpgroups' products
      sm90::named_bar_sync(1, 256);
      sm90::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        sm90::Wgmma<T, NC>::template ss<0, 1>(dv, dPt_a + (buf >> 4) + sm90::kstep(kk, BN), ddO_mn + st * kStage + kk * kMnStep, 1);
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk)
        sm90::Wgmma<T, NC>::template ss<0, 1>(dk, ddSt_a + (buf >> 4) + sm90::kstep(kk, BN), dQ_mn + st * kStage + kk * kMnStep, 1);
      sm90::wgmma_commit();
#pragma unroll
      for (int c = 0; c < NC / QC; ++c) {
        const int colq = cw * NC + c * QC;  // first dQ column of this chunk
        float dq[QC / 2];
        // The chunk's accumulators may sit in the registers the previous chunk's shared-memory
        // stores still read: the fence orders those reads before the wgmmas write them.
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
          sm90::Wgmma<T, QC>::template ss<1, 1>(
              dq, ddSt_mn + (buf >> 4) + kk * kMnStep,
              dK_mn + ((((colq / 64) * BN * 128) + (colq % 64) * 2) >> 4) + kk * kMnStep, kk > 0);
        sm90::wgmma_commit();
        sm90::wgmma_wait<0>();  // (chunk 0: also dV / dK, the last readers of this warpgroup's columns)
        sm90::reg_fence<QC / 2>(dq);
        // Warp wq's 16 x QC tile, in its warpgroup's columns of the stage's Q (c = 0) or dO tile.
        bwd_ws_stage_dq<QC>(reinterpret_cast<float*>(smem + (c ? Tr::kOffDo : Tr::kOffQ) + st * Tr::kTileQ +
                                                     cw * (Tr::kTileQ / 2) + wq * (16 * QC * 4)),
                            dq, lane);
      }
      sm90::reg_fence<NC / 2>(dv);
      sm90::reg_fence<NC / 2>(dk);
      sm90::fence_proxy_async_smem();  // for the writer's bulk reductions
      mbar_arrive(bar_qe + 8 * st);     // this thread is done with the stage's lse2 / dsum slices
      __syncwarp();
      if (lane == 0) mbar_arrive(bar_dqf + 8 * st);
    }
    // Epilogue: dK (times scale) and dV, this lane's keys wq*16 + g (+8), columns NC cw + 8j + 2t.
#if FA_BWD_WS_STAGED_DKDV
    // (through K's and V's tiles. Warpgroup cw's image of its 64 keys x NC columns, [key][2 NC bytes],
    // is exactly the size of K's (V's) column blocks of its columns, [NC / 64][BN keys][128 bytes].
    // Once both warpgroups are past their last products (each waited for its own), nothing reads K or
    // V again: the last block's S^T / dP^T were before its barrier, and its dQ products are waited
    // (the last chunk's wgmma_wait<0> above; keep one before this barrier if the loop changes).)
    static_assert(Tr::kTileKV == 2 * BN * 2 * NC, "row split: K's tile holds both images");
    sm90::named_bar_sync(1, 256);
    {
      const uint32_t off = cw * (BN * 2 * NC) + wq * 16 * (2 * NC);
      sm90_bwd_store_dkdv_staged<T, NC>(a, dk, dv, b, hk, key0, Nk, wq * 16, smem + Tr::kOffK + off,
                                        smem + Tr::kOffV + off, lane, cw * NC);
    }
#else
    sm90_bwd_store_dkdv<T, NC>(a, dk, dv, b, hk, key0, Nk, wq * 16 + g, cw * NC + 2 * t);
#endif
  } else {
    // Key split: warpgroup cw owns keys [64 cw, 64 cw + 64) of the block and dQ columns
    // [NQ cw, NQ cw + NQ); warp wq of it the S^T rows (keys) 16 wq.. and dQ rows 16 wq..
    const int wkey0 = cw * 64;
    constexpr uint32_t kDsBuf = Tr::kTileP >> 4;
    const sm90::SmemDesc dK_a = sm90::smem_desc_w(sK + wkey0 * 128, 16, 1024);  // A of S^T: this warpgroup's keys
    const sm90::SmemDesc dV_a = sm90::smem_desc_w(sV + wkey0 * 128, 16, 1024);  // A of dP^T
    const sm90::SmemDesc dQ_b = sm90::smem_desc_w(sQ, 16, 1024);                // B of S^T: the 64 rows
    const sm90::SmemDesc ddO_b = sm90::smem_desc_w(sdO, 16, 1024);              // B of dP^T
    const sm90::SmemDesc ddS_mn = sm90::smem_desc_w(sdS, BN * 128, 1024);       // A of dQ (MN-major)
    const sm90::SmemDesc ddO_mn = sm90::smem_desc_w(sdO, BM * 128, 1024);       // B of dV (MN-major)
    const sm90::SmemDesc dQ_mn = sm90::smem_desc_w(sQ, BM * 128, 1024);         // B of dK (MN-major)
    const int colq = kTurnDq ? 0 : cw * NQ;  // first dQ column (in turns: the block's all)
    const sm90::SmemDesc dK_mn = sm90::smem_desc_w(sK, BN * 128, 1024) + ((((colq / 64) * BN * 128) + (colq % 64) * 2) >> 4);
    // This warp's tile of the dQ image (16 rows x NQ columns; DqLayout perm, vec 4) in buffer 0.
    float* const sdq_warp = reinterpret_cast<float*>(smem + Tr::kOffDq) + (wq * (W / NQ) + colq / NQ) * (16 * NQ);

    float dv[W / 2], dk[W / 2];
#pragma unroll
    for (int i = 0; i < W / 2; ++i) dv[i] = dk[i] = 0.f;

    auto release = [&](uint32_t bar) {
      __syncwarp();
      if (lane == 0) mbar_arrive(bar);
    };
    const int key_l = wkey0 + wq * 16 + g, row_l = 2 * t;  // this lane's first key and row
    // Block it's dQ share into buffer it % 2, once the writer has read block it-2's image out of it.
    auto store_dq = [&](const float (&dq)[NQ / 2], int it) {
      const int d = it & 1;
      if (it >= 2) mbar_wait(bar_dqe + 8 * d, ((it >> 1) - 1) & 1);
      bwd_ws_stage_dq<NQ>(sdq_warp + d * (Tr::kTileDq / 4), dq, lane);
      sm90::fence_proxy_async_smem();  // for the writer's bulk reduction
      release(bar_dqf + 8 * d);
    };
    auto issue_dvdk = [&](uint32_t (&x)[BM / 16][4], float* acc, sm90::SmemDesc b_desc) {
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) sm90::Wgmma<T, W>::rs(acc, x[kk], b_desc + kk * kMnStep, 1);
    };
    // The A fragments of dV / dK from the S^T / dP^T-shaped accumulators (adjacent n8 tiles).
    auto pack_a = [&](const float (&x)[BM / 8][4], uint32_t (&y)[BM / 16][4]) {
#pragma unroll
      for (int kk = 0; kk < BM / 16; ++kk) {
        y[kk][0] = pack2<T>(x[2 * kk][0], x[2 * kk][1]);
        y[kk][1] = pack2<T>(x[2 * kk][2], x[2 * kk][3]);
        y[kk][2] = pack2<T>(x[2 * kk + 1][0], x[2 * kk + 1][1]);
        y[kk][3] = pack2<T>(x[2 * kk + 1][2], x[2 * kk + 1][3]);
      }
    };

    // S^T and dP^T of block it: this warpgroup's 64 keys x the 64 rows, in one wgmma group or (two,
    // a constant at each call) one group each.
    auto issue_sdp = [&](bool two, int st, float (&s)[BM / 8][4], float (&dp)[BM / 8][4]) {
      sm90::wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < W / 16; ++ks)
        sm90::Wgmma<T, BM>::ss(&s[0][0], dK_a + sm90::kstep(ks, BN), dQ_b + st * kStage + sm90::kstep(ks, BM), ks > 0);
      if (two) sm90::wgmma_commit();
#pragma unroll
      for (int ks = 0; ks < W / 16; ++ks)
        sm90::Wgmma<T, BM>::ss(&dp[0][0], dV_a + sm90::kstep(ks, BN), ddO_b + st * kStage + sm90::kstep(ks, BM), ks > 0);
      sm90::wgmma_commit();
    };
    // The end of block it (dV / dK in flight, dS^T written): once both warpgroups' dS^T are in
    // shared memory, dQ share = dS K_j for this warpgroup's columns over all 128 keys; when every
    // product is done, the stage goes back to the producer and the share into its dQ buffer.
    auto finish = [&](int it, int st, int db, uint32_t (&pa)[BM / 16][4], uint32_t (&dsa)[BM / 16][4]) {
      // Once dV / dK are complete (the last reads of Q_i, dO_i and the slices): the stage goes back.
      auto release_stage = [&]() {
        sm90::reg_fence<W / 2>(dv);
        sm90::reg_fence<W / 2>(dk);
        sm90::reg_fence_u32<BM / 4>(&pa[0][0]);
        sm90::reg_fence_u32<BM / 4>(&dsa[0][0]);
        mbar_arrive(bar_qe + 8 * st);  // every thread (see the barrier's count)
      };
      // dq (+)= dS K_j over the 128 keys, the dQ columns of dK_mn (n = dq's width), one group.
      auto issue_dq = [&](auto& dq) {
        constexpr int n = 2 * static_cast<int>(std::extent_v<std::remove_reference_t<decltype(dq)>>);
        sm90::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
          sm90::Wgmma<T, n>::template ss<1, 1>(dq, ddS_mn + db * kDsBuf + kk * kMnStep, dK_mn + kk * kMnStep, kk > 0);
        sm90::wgmma_commit();
      };
      sm90::named_bar_sync(1, 256);  // both warpgroups' dS^T written (the dV / dK products run meanwhile)
      if constexpr (kTurnDq) {
        // W 64, dQ in turns (cuDNN's order, read in its SASS): block it's whole dQ share (64 rows x
        // 64 columns over the 128 keys, eight m64n64 wgmmas) is warpgroup it % 2's, so that one
        // warpgroup's dQ product runs while the other starts block it+1 (S^T / dP^T and the P^T /
        // dS^T arithmetic) instead of both waiting on a half each and then leaving the tensor cores
        // idle together. dS^T buffer db is rewritten only at block it+2, after both warpgroups have
        // passed block it+1's barrier, which this one reaches after its product is complete.
        if (cw == (it & 1)) {
          float dq[W / 2];
          issue_dq(dq);
          sm90::wgmma_wait<1>();  // dV / dK
          release_stage();
          sm90::wgmma_wait<0>();
          sm90::reg_fence<W / 2>(dq);
          // Buffer it % 2 (this warpgroup's), once the writer has read block it-2's image out of it;
          // warp wq's 16 rows as two 16 x 32 tiles (columns 0.. and 32..), the image's order.
          const int d = it & 1;
          if (it >= 2) mbar_wait(bar_dqe + 8 * d, ((it >> 1) - 1) & 1);
          float* const dst = reinterpret_cast<float*>(smem + Tr::kOffDq) + d * (Tr::kTileDq / 4) + wq * (2 * 16 * NQ);
#pragma unroll
          for (int c = 0; c < 2; ++c)
            bwd_ws_stage_dq<NQ>(dst + c * (16 * NQ), *reinterpret_cast<const float(*)[NQ / 2]>(&dq[c * (NQ / 2)]), lane);
          sm90::fence_proxy_async_smem();  // for the writer's bulk reduction
          release(bar_dqf + 8 * d);
        } else {
          sm90::wgmma_wait<0>();
          release_stage();
        }
        return;
      }
      float dq[NQ / 2];
      issue_dq(dq);
      if constexpr (kDqFirst) {
        // dK += dS^T Q after the dQ product: the dQ image is staged while dK runs on the tensor cores.
        sm90::wgmma_fence();
        issue_dvdk(dsa, dk, dQ_mn + st * kStage);
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();  // dV and dQ (dK may still run)
        sm90::reg_fence<NQ / 2>(dq);
        store_dq(dq, it);
        sm90::wgmma_wait<0>();
        release_stage();
      } else {
        sm90::wgmma_wait<0>();
        sm90::reg_fence<NQ / 2>(dq);
        release_stage();
        store_dq(dq, it);
      }
    };

    // Plain walk (with a score modifier, or FA_BWD_WS_OVERLAP=0): per block, S^T / dP^T, then P^T
    // and dS^T together, dV / dK, dQ.
    auto walk_plain = [&]() {
      for (int it = 0; it < total; ++it) {
        const int st = it % S;
        const int db = it & 1;  // dS^T buffer
        const int row0 = row0_of(it);
        mbar_wait(bar_qf + 8 * st, (it / S) & 1);
        float s[BM / 8][4], dp[BM / 8][4];
        issue_sdp(false, st, s, dp);
        sm90::wgmma_wait<0>();
        sm90::reg_fence<BM / 2>(&s[0][0]);
        sm90::reg_fence<BM / 2>(&dp[0][0]);
        sm90_bwd_pds<T, BM, false, false>(a, s, dp, sL + st * BM, sD + st * BM, nullptr, nullptr, Nq, Nk, key0, BN, row0,
                                          BM, key_l, row_l);
        // dV += P^T dO, dK += dS^T Q; dS^T into shared memory from its A fragments.
        uint32_t pa[BM / 16][4], dsa[BM / 16][4];
        pack_a(s, pa);
        pack_a(dp, dsa);
        bwd_ws_store_dst<BM>(sdS + db * Tr::kTileP, dsa, wkey0 + wq * 16, lane);
        sm90::fence_proxy_async_smem();  // dS^T for the other warpgroup's dQ product
        sm90::wgmma_fence();
        issue_dvdk(pa, dv, ddO_mn + st * kStage);
        if (!kDqFirst) issue_dvdk(dsa, dk, dQ_mn + st * kStage);
        sm90::wgmma_commit();
        finish(it, st, db, pa, dsa);
      }
    };

    // Overlapped walk (no score modifier): P^T is computed while dP^T is in flight and dS^T while
    // dV += P^T dO is. (Issuing block i+1's S^T / dP^T before block i's dQ goes out leaves wgmmas in
    // flight across the loop's back edge, and ptxas then serialises every wgmma of the kernel: 35%
    // slower; bench/NOTES-bwd.md.)
    auto walk_overlapped = [&]() {
      for (int it = 0; it < total; ++it) {
        const int st = it % S;
        const int db = it & 1;
        const int row0 = row0_of(it);
        mbar_wait(bar_qf + 8 * st, (it / S) & 1);
        float s[BM / 8][4], dp[BM / 8][4];
        uint32_t pa[BM / 16][4], dsa[BM / 16][4];
        issue_sdp(true, st, s, dp);
        sm90::wgmma_wait<1>();  // S^T
        sm90::reg_fence<BM / 2>(&s[0][0]);
        sm90_bwd_p<BM>(a, s, sL + st * BM, Nq, Nk, key0, BN, row0, BM, key_l, row_l);
        pack_a(s, pa);
        sm90::wgmma_fence();
        issue_dvdk(pa, dv, ddO_mn + st * kStage);
        sm90::wgmma_commit();
        sm90::wgmma_wait<1>();  // dP^T (dV may still run)
        sm90::reg_fence<BM / 2>(&dp[0][0]);
        sm90_bwd_ds<T, BM, false>(s, dp, sD + st * BM, nullptr, key_l, row_l);
        pack_a(dp, dsa);
        bwd_ws_store_dst<BM>(sdS + db * Tr::kTileP, dsa, wkey0 + wq * 16, lane);
        sm90::fence_proxy_async_smem();  // dS^T for the other warpgroup's dQ product
        if (!kDqFirst) {
          sm90::wgmma_fence();
          issue_dvdk(dsa, dk, dQ_mn + st * kStage);
          sm90::wgmma_commit();
        }
        finish(it, st, db, pa, dsa);
      }
    };

    mbar_wait(bar_kv, 0);
    if (threadIdx.x == 128) FA_BWD_MARK(1, trace_now_ns());
    if constexpr (kWalk == 0) walk_plain();
    else walk_overlapped();
    if (threadIdx.x == 128) FA_BWD_MARK(2, trace_now_ns());

    // Epilogue: dK (times scale) and dV, this lane's keys wkey0 + wq*16 + g (+8), columns 8j + 2t.
#if FA_BWD_WS_TMA_DKDV
    // (through K's and V's tiles as their tensor maps lay them out, free once both warpgroups are
    // past their last product, as in the staged epilogue below; then one thread stores the 2 x W / 64
    // boxes, which the tensor maps clip at the sequence's end and the head dim, and waits only until
    // they have been read out of shared memory before its exit.)
    sm90::wgmma_wait<0>();
    sm90::named_bar_sync(1, 256);
    sm90_bwd_stage_dkdv_tma<T, W, BN>(dk, dv, a.scale, wkey0 + wq * 16 + g, t, smem + Tr::kOffK, smem + Tr::kOffV);
    sm90::fence_proxy_async_smem();  // for the tensor-map stores
    sm90::named_bar_sync(1, 256);
    if (threadIdx.x == 128) {
#pragma unroll
      for (int cb = 0; cb < Tr::kColBlocks; ++cb) {  // dense calls only: the loads' coordinates
        tma_store_4d(&ta.tdk, sK + cb * BN * 128, cb * 64, key0, hk, b);
        tma_store_4d(&ta.tdv, sV + cb * BN * 128, cb * 64, key0, hk, b);
      }
      bulk_commit_group();
      bulk_wait_group<0, true>();
    }
#elif FA_BWD_WS_STAGED_DKDV
    // (through K's and V's tiles, free once both warpgroups are past their last product: the dQ
    // product reads every key of K; each walk ends with its wgmmas waited for. Warp (cw, wq)'s keys
    // are rows 64 cw + 16 wq.. of the [key][2 W bytes] images, which fill the tiles exactly.)
    sm90::wgmma_wait<0>();
    sm90::named_bar_sync(1, 256);
    {
      const int wkey = wkey0 + wq * 16;
      sm90_bwd_store_dkdv_staged<T, W>(a, dk, dv, b, hk, key0, Nk, wkey, smem + Tr::kOffK + wkey * (2 * W),
                                       smem + Tr::kOffV + wkey * (2 * W), lane);
    }
#else
    sm90_bwd_store_dkdv<T, W>(a, dk, dv, b, hk, key0, Nk, wkey0 + wq * 16 + g, 2 * t);
#endif
    if (threadIdx.x == 128) FA_BWD_MARK(3, trace_now_ns());
  }
#else
  __trap();  // only the sm_90a build has this kernel; the dispatcher never launches it elsewhere
#endif
}

}  // namespace cuda
}  // namespace fa
