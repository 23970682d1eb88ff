// FlashAttention forward on Hopper (sm_90a), warp-specialised: the TMA mainloop beside the cp.async
// one of fwd_kernel_sm90.cuh, for dense, packed (varlen) and paged fp16 / bf16 calls.
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
//
// Paged K/V (kPaged; fwd_api.cu, encode_paged_maps): the K and V maps are over cache rows (page *
// page size + slot) with boxes of ta.box_rows rows, a divisor of both the page size and the key
// block, so that a box lies in one page; the whole producer warp loads a key block, lane r the box
// r (its page looked up one block ahead). A box past the sequence's end starts outside the map
// (zeros). The box holding the sequence's end brings in whatever its page holds past the end: the
// mask gives those keys weight 0, and the consumers zero those V rows before the first P V of the
// tile (0 * NaN is NaN). Where the head dim fills a tile of two or more column blocks (ta.kv_rows =
// 8), K and V come in one box per page holding every column block (a quarter of K's copies at W 256,
// half at W 128), and both stages are read in that layout, [8-row group][column block][8][128 bytes]:
// S = Q K^T walks the keys in 8-row groups at one stride (column blocks x 1 KiB), P V the same.
// Paged calls issue the next block's K before this block's V (the producer loop says why).
#pragma once
#include "cuda/fwd_common.cuh"
#include "cuda/fwd_kernel_sm90.cuh"
#include "cuda/lpt.cuh"
#include "cuda/wgmma.cuh"

#ifndef FA_WS_SPLIT_O
#define FA_WS_SPLIT_O 1  // CMake option FA_WS_SPLIT_O (default ON; OFF for comparisons): see Sm90WsTraits::kHalfO
#endif
#ifndef FA_WS_SKIP_IDLE_WG
#define FA_WS_SKIP_IDLE_WG 1  // CMake option FA_WS_SKIP_IDLE_WG (default ON; OFF for comparisons): see kSkipIdle in the consumer
#endif
#ifndef FA_WS_QREG
#define FA_WS_QREG 1  // CMake option FA_WS_QREG (default ON; OFF for comparisons): see Sm90WsTraits::kQReg
#endif

namespace fa {
namespace cuda {

#ifndef FA_WS_EARLY_TEST
#define FA_WS_EARLY_TEST 1
#endif
#ifndef FA_WS_RESCALE_IN_SOFTMAX
#define FA_WS_RESCALE_IN_SOFTMAX 1
#endif
#ifndef FA_WS_LAZY_RESCALE
#define FA_WS_LAZY_RESCALE 1  // CMake option FA_WS_LAZY_RESCALE (default ON; OFF for comparisons): see Sm90WsTraits::kLazy
#endif

// Most sequences whose dealing order the producer sets (ws_deal_order): a warp ranks them in B steps.
constexpr int kWsDealMax = 64;
// ... and the fewest tile indices (row blocks of the longest sequence x heads x sequences) per block
// of the grid: the ranking's reads put ~0.9 us before a block's first tile (H200: packed calls of
// 4 and 8 short sequences, 11.1 -> 12.1 and 21.6 -> 22.6 us per call back to back), more than an
// order can gain where every block has a tile or two.
constexpr int kWsDealWaves = 8;

template <typename T_, int kHeadDim_, int kConsumers_, int kBlockN_ = sm90_ws_block_n(kHeadDim_)>
struct Sm90WsTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;  // consumer warpgroups, 64 rows each
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = kBlockN_;  // keys per K / V tile (176 / 80: the long-key tiles of W 128 without a right bound / of W 256)
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kTileQ = kBlockM * kHeadDim * 2;  // bytes
  static constexpr int kTileKV = kBlockN * kHeadDim * 2;
  // O is staged in its own buffer where it fits next to a ring of two stages (D <= 192 at 128 keys
  // per tile): Q's buffer is then free after the tile's last S = Q K^T and the next tile's Q loads
  // while this tile's O is written out. At D 256, and W 128 with 176 keys, O is staged through Q's,
  // so the next Q loads only after the epilogue (D 256: ~3000 cycles of hand-over per tile,
  // NOTES-fwd.md, ninth session). With FA_WS_SPLIT_O (the default) those two get a buffer of half
  // O's width instead (32 / 16 KiB, in what the sm_90 limit leaves above kBudget), filled and
  // written out in two column passes of kOPass columns, so that Q is free after the last S there
  // too. H200 A/B (tenth session, fp16 forward, public API): D 256 full N 512 / 1k / 2k +4.0 /
  // +3.6 / +2.0%, N 4k-16k +0-2%; causal N 512-2k +3-4%, longer +0.4-1.1%.
  static constexpr int kBudget = 220 * 1024;
  static constexpr int kSplitBudget = 227 * 1024 - 1024 - 256;  // the limit less the alignment slack, barriers and slots
  static constexpr bool kFullO = 2 * kTileQ + 4 * kTileKV <= kBudget;
  static constexpr bool kHalfO = FA_WS_SPLIT_O && !kFullO && kHeadDim % 128 == 0 && kTileQ + kTileQ / 2 + 4 * kTileKV <= kSplitBudget;
  static constexpr bool kOwnO = kFullO || kHalfO;
  static constexpr int kOPass = kHalfO ? kHeadDim / 2 : kHeadDim;  // columns per staging pass
  static constexpr int kTileO = kFullO ? kTileQ : kHalfO ? kTileQ / 2 : 0;
  // Q in registers (FA_WS_QREG, the default; tenth session's H200 A/B: +0.5-2% on fp16 D 128
  // causal N 512-16k, within the +-2% noise on full N <= 4k, against the +3-6% predicted): each
  // consumer warp copies its 16 rows of Q into wgmma A fragments (ldmatrix) when the tile starts
  // and releases Q's buffer at once; S = Q K^T is then the register-A form, reading only
  // K from shared memory. Why: at D 128 the SS form reads 6 KiB of shared memory per 64 tensor-core
  // cycles (Q 2 + K 4), the P V product 4, the TMA writes ~1 more per 64 cycles: ~110 of the 128
  // bytes per cycle an SM's shared memory delivers at the tensor cores' full rate; Q in registers
  // takes ~16 off. Needs O's own buffer (Q's is gone during the epilogue) and D / 16 * 4 registers
  // (32 at D 128); D <= 128, two consumer warpgroups (the three of W 64 spill 120 bytes with it).
  static constexpr bool kQReg = FA_WS_QREG && kFullO && kHeadDim <= 128 && kConsumers == 2;
  // The next step's K / V full barriers tested while the warp waits for S (mbar_test), their waits
  // at the step's start skipped where both had landed (FA_WS_EARLY_TEST=0 at compile time:
  // comparisons).
  // (H200 A/B, eighteenth session: +0.2-1.7% at D 128, +3% at D 64 with two consumers; -2-4% with
  // the three of W 64 and -0.3-1% at D 256, where it stays off.)
  static constexpr bool kEarlyTest = FA_WS_EARLY_TEST != 0 && kConsumers_ == 2 && kHeadDim_ <= 128;
  // The wait for the previous block's P V before the softmax, O rescaled inside it (see the loop;
  // FA_WS_RESCALE_IN_SOFTMAX=0 at compile time: comparisons). (H200 A/B, eighteenth session, public
  // API, 3 runs: D 64 +0.5-2.5%, D 128 -0.7..+1.3% (geometric mean +0.1%), D 256 -0.1..-2%, where
  // it stays off: there the wait moved before the softmax leaves less to hide behind the P V.)
  static constexpr bool kRescaleInSoftmax = FA_WS_RESCALE_IN_SOFTMAX != 0 && kHeadDim_ <= 128;
  // The lazy step after a tile's first key block (fwd_common.cuh, lazy_softmax_step): the exponentials against
  // the reference max, O rescaled only where a row's max passes it by more than 2^8 (FA_WS_LAZY_RESCALE=0 builds:
  // comparisons). H100 A/B, public API, in turns (NOTES-fwd.md, sixty-eighth session): D 128 +1-3.5%, D 64 on three
  // consumers +3-6.5%, D 256 (kLazyMax below) +4-9%. Where the rescale sits in the softmax;
  // not in the W 64 two-consumer kernel (kPlain), whose dense instantiation ptxas then compiled with its wgmmas
  // serialized (C7511).
  static constexpr bool kLazy = FA_WS_LAZY_RESCALE != 0 && kRescaleInSoftmax && !(kHeadDim_ == 64 && kConsumers_ == 2);
  // Where the softmax runs before the wait for P V (D 192 / 256), the same builds keep the reference max per row
  // (lazy_max_softmax_step) so that the vote after that wait skips O's rescale in nearly every block.
  static constexpr bool kLazyMax = FA_WS_LAZY_RESCALE != 0 && !kRescaleInSoftmax;
  // Ring depth: as deep as the shared memory allows, up to 4 (D 64: 4, D 128: 2, D 192: 2, D 256: 2).
  // (Without a full O buffer, O's staging takes Q's or a half-width one, and the ring may use what
  // the sm_90 limit leaves: D 256 with 80-key tiles fits two stages there.)
  static constexpr int kStagesFit = ((kFullO ? kBudget : kSplitBudget) - kTileQ - kTileO) / (2 * kTileKV);
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kConsumerWarps = 4 * kConsumers;
  static constexpr int kProducerRegs = 24, kConsumerRegs = kConsumers == 2 ? 240 : 160;  // 24 x 128 + 240 x 256 = 384 x 168, the launch's allocation
  // Barriers after the tiles: Q full, Q empty, then K full, V full, K empty, V empty per stage.
  static constexpr int kBarOffset = kTileQ + kTileO + 2 * kStages * kTileKV;
  // Then two int slots: the tile index the producer hands to the consumers (tile j in slot j % 2).
  static constexpr int kSlotOffset = kBarOffset + 8 * (2 + 4 * kStages);
  // Then the producer's dealing order of a packed or paged batch's sequences (ws_deal_order).
  static constexpr int kOrderOffset = kSlotOffset + 8;
  static constexpr int kSmemBytes = 1024 + kOrderOffset + kWsDealMax;
  // W 64 with two consumers is left without two later additions, each for its own measured
  // reason: the dealing order of large packed or paged batches (ws_deal_order: with the ranking in
  // it ptxas serialized that kernel's wgmmas, C7511) and, in its dense instantiation, the idle
  // warpgroup's walk (kSkipIdle in the consumer: it cost the dense causal N 512 / 1k cells 1-2.6%;
  // the packed / paged instantiation, kWalk, has it).
  static constexpr bool kPlain = kHeadDim_ == 64 && kConsumers_ == 2;
  // The producer deals a large packed or paged batch's sequences the most keys first.
  static constexpr bool kDeal = !kPlain;
  static_assert(sizeof(T) == 2 && (kConsumers == 2 || kConsumers == 3), "fp16 / bf16, two or three consumers");
  static_assert(kStages >= 2, "a ring of at least two stages");
  // setmaxnreg moves registers within the block's launch allocation (168 per thread at 384 threads):
  // asking for more than it holds blocks the consumers' setmaxnreg.inc forever.
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= (65536 / kThreads) / 8 * 8 * kThreads,
                "register split over the launch allocation");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256, "wgmma n = head dim");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256 && (kBlockN * 128) % 1024 == 0, "key tile: whole k16 steps, one TMA box, 1 KiB-aligned column blocks");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
};

// Packed and paged calls of 2..kWsDealMax sequences with kWsDealWaves tile indices per block or more
// (the host's ta.deal) deal their tiles sequence by sequence in order of key count, the most keys
// first, whatever the batch's order: the tiles of a long sequence are the longest (under a causal
// mask its last row blocks see all its keys), and dealt last they end the grid with a few SMs busy
// and the rest idle (H200, the varlen bench's lengths with the 8k sequence first / in the middle /
// last: 0.665 / 0.678 / 0.696 ms, NOTES-inference.md). Warp 0 ranks the sequences once per block
// (lane l holds sequences l and l + 32; ties keep the batch's order; sequences without rows for
// this kernel go last) into ord[rank] = sequence; the producer maps each dealt index through it
// (ws_tile) before resolving the tile, and hands the consumers the batch-order index, so they
// resolve it as before. Other calls keep the batch's order.
//
// Warp 0 runs it before the block's first barrier, where ta.deal is set (never with PDL: those are
// one-wave calls), in a function of its own: inlined, called from the producer's branch, with the
// gate computed here rather than by the host, or with ord as a generic pointer, it made ptxas
// serialize the wgmmas (C7511) of one instantiation or another, and the W 64 kernel with two
// consumers does so with any form of it (Sm90WsTraits::kDeal). Called by every block whatever
// ta.deal (the form that compiled first), it cost small calls 0.3-0.9 us each (H200).
// kWsDealMax bytes at ord.
static __device__ __noinline__ void ws_deal_order(const FwdTmaArgs& ta, bool paged, uint32_t ord, int lane) {
  (void)paged;  // (the host's ta.deal covers it)
  const FwdArgs& a = ta.f;
  const int B = a.batch;
  auto key_of = [&](int b) {
    if (b >= B) return -2;
    const SeqInfo s = fwd_seq(a, b);
    return s.nq <= 0 || fwd_decode_seq(a, s) ? -1 : s.nk;
  };
  const int k0 = key_of(lane), k1 = key_of(lane + 32);
  int r0 = 0, r1 = 0;
  for (int j = 0; j < B; ++j) {
    const int kj = __shfl_sync(0xffffffffu, j < 32 ? k0 : k1, j & 31);
    r0 += kj > k0 || (kj == k0 && j < lane);
    r1 += kj > k1 || (kj == k1 && j < lane + 32);
  }
  if (lane < B) sts_u8(ord + r0, lane);
  if (lane + 32 < B) sts_u8(ord + r1, lane + 32);
  __syncwarp();
}
// One tile of the persistent loop: row block, head and sequence, and its key blocks.
struct WsTile {
  BlockCoord bc;
  SeqInfo seq;
  int row0, n_min, n_max;
  int index;  // the tile's index in the batch's order (the producer's dealt index may differ: ws_deal_order)
  bool idle;  // nothing to compute or write: rows past the sequence, or a paged call's decode sequence
};
// Tile idx's (row block, head, batch). Default: block_coord_of (the row blocks of one (batch, head)
// adjacent, the longest first under a causal mask). FA_WS_LPT builds with ta.lpt_groups = G > 0
// (causal dense calls): the (batch, head) pairs in sections of G, and inside a section the row
// blocks by length across all its pairs (every pair's last row block, then every pair's last but
// one, ...), so that the last tiles handed out are short ones of every pair instead of the whole
// run of the last pair, while the K / V that a section's tiles read (G pairs, sized by the host to
// fit in L2) stay shared by the blocks running at one time.
__device__ __forceinline__ BlockCoord ws_coord(const FwdTmaArgs& ta, int idx) {
#if FA_WS_LPT
  const FwdArgs& a = ta.f;
  if (ta.lpt_groups > 0) {
    int rank, bh;
    lpt_tile(idx, ta.lpt_groups, a.num_m_blocks, a.heads * a.batch, &rank, &bh);
    BlockCoord c;
    c.h = bh % a.heads;
    c.b = bh / a.heads;
    c.m_block = a.num_m_blocks - 1 - rank;
    return c;
  }
#endif
  return block_coord_of(ta.f, idx);
}

template <int BM, int BN>
__device__ __forceinline__ WsTile ws_tile(const FwdTmaArgs& ta, int idx, uint32_t ord = 0) {
  const FwdArgs& a = ta.f;
  WsTile w;
  w.bc = ws_coord(ta, idx);
  w.index = idx;
  if (ord != 0 && ta.deal) {  // the producer: idx is a dealt index (ws_deal_order)
    const int b = lds_u8(ord + w.bc.b);
    w.index += (b - w.bc.b) * a.heads * a.num_m_blocks;
    w.bc.b = b;
  }
  w.seq = fwd_seq(a, w.bc.b);
  w.row0 = w.bc.m_block * BM;
  const KeyWindow win(w.seq, a.window_left, a.window_right);
  key_block_range<BM, BN>(win, w.row0, &w.n_min, &w.n_max);
  w.idle = fwd_block_idle(a, w.seq, w.row0);  // (dense calls: never)
  if (w.idle) w.n_max = w.n_min;
  return w;
}

// The first tile index past the run of idle tiles that holds tile idx (w: its tile), in the order of
// block_coord_of: the row blocks of one (sequence, head) are adjacent, the T that hold rows first
// under a right-bounded mask (longest first), last otherwise. T counts the row blocks that
// fwd_block_idle calls busy (the same decode test), so every index of the run is idle.
template <int BM>
__device__ __forceinline__ int ws_idle_run_end(const FwdArgs& a, const WsTile& w, int idx) {
  const int M = a.num_m_blocks;
  const int T = fwd_decode_seq(a, w.seq) ? 0 : min((w.seq.nq + BM - 1) / BM, M);
  const int base = idx - idx % M;
  return a.causal ? base + M - T : base + M;
}

// FA_WS_TRACE builds (FA_TRACE=1 npm run build:native; development only, never the default):
// each consumer warpgroup's first thread records clock64 at four points of each of its block's
// first kTraceTiles tiles (the tile's Q-full wait passed, its first key block's softmax done, its
// last P V done, its epilogue done) and the tile's key-block count, so that the per-tile cost can
// be split into the hand-over, the pipeline fill, the steady key blocks and the epilogue
// (fwd_launch.cuh prints the split after every FA_WS_TRACE_EVERY-th launch).
#ifdef FA_WS_TRACE
constexpr int kTraceCtas = 264, kTraceTiles = 64, kTraceWgs = 3, kTraceFields = 5;
static __device__ long long g_ws_trace[kTraceCtas][kTraceTiles][kTraceWgs][kTraceFields];  // one per translation unit
#define FA_WS_MARK(j, cw, field, value)                                                           \
  do {                                                                                            \
    if ((threadIdx.x & 127) == 0 && blockIdx.x < kTraceCtas && (j) < kTraceTiles)                 \
      g_ws_trace[blockIdx.x][(j)][(cw)][(field)] = (value);                                       \
  } while (0)
// The steady loop of each block's second tile (j == 1), key-block steps 1..kBTraceBlocks: clock64 at
// the step's top, its K / V waits passed, its turn taken, its products issued (turn passed), S
// done, the softmax done, P V done (fields 0-6), for fwd_launch.cuh's per-step split.
constexpr int kBTraceBlocks = 16, kBTraceFields = 7;
static __device__ long long g_ws_btrace[kTraceCtas][kBTraceBlocks][kTraceWgs][kBTraceFields];
#define FA_WS_BMARK(j, it, cw, field, value)                                                      \
  do {                                                                                            \
    if ((threadIdx.x & 127) == 0 && blockIdx.x < kTraceCtas && (j) == 1 && (it) >= 1 && (it) <= kBTraceBlocks) \
      g_ws_btrace[blockIdx.x][(it) - 1][(cw)][(field)] = (value);                                 \
  } while (0)
// clock64 read after `dep` is computed (a plain clock64() may be scheduled before it).
__device__ __forceinline__ long long clock_after(uint32_t dep) {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t) : "r"(dep) : "memory");
  return t;
}
#else
#define FA_WS_MARK(j, cw, field, value) \
  do {                                  \
  } while (0)
#define FA_WS_BMARK(j, it, cw, field, value) \
  do {                                       \
  } while (0)
#endif

// kGrouped (paged only, two or more column blocks): K's and V's stages in the grouped layout (ta.kv_rows
// = 8) as a compile-time fact, so that their wgmma descriptors are constants. Chosen at run time, it
// put ~17 more (mostly uniform) instructions in each consumer step, whose count the paged kernel's
// time followed (H200 ncu: 525 instructions per step against the packed kernel's 490, 5% more cycles).
template <class Tr, bool kPaged, bool kGrouped = false, bool kWalk = false>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_kernel_sm90_ws(const __grid_constant__ FwdTmaArgs ta) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename Tr::T;
  constexpr int D = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int kCB = Tr::kColBlocks;
  static_assert(!kGrouped || (kPaged && kCB > 1), "the grouped stage layout is a paged layout of two or more column blocks");
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
    // The maps are kernel parameters, not written by the kernel before this one: their descriptors
    // are fetched while a PDL launch waits below, instead of by the first copies after it (the
    // critical path of a one-tile call).
    prefetch_tensormap(&ta.tq);
    prefetch_tensormap(&ta.tk);
    prefetch_tensormap(&ta.tv);
  }
  const uint32_t ord = Tr::kDeal ? sQ + Tr::kOrderOffset : 0u;
  if constexpr (Tr::kDeal) {
    if (warp == 0 && ta.deal) ws_deal_order(ta, kPaged, ord, lane);
  }
  __syncthreads();
  // Launched with programmatic dependent launch (run_fwd_sm90_ws): the block may start while the
  // kernel before it on the stream finishes. Everything above touches only shared memory (but the
  // ranking of ws_deal_order, which the host never combines with PDL); every
  // thread waits here before its first global access (tile counter, sequence bounds, Q / K / V,
  // O / lse). The next PDL-launched kernel may be scheduled once every block has passed the wait,
  // so the kernel before this one has finished by then (fwd_decode.cuh relies on that). Only
  // launches that asked for it run these (ta.pdl): the default launch runs the measured kernel.
  if (ta.pdl) {
    pdl_wait();
    pdl_launch_dependents();
  }

  // Persistent loop (ta.ctas blocks, at most one per SM): block i starts with tile i, then takes
  // the next tile from a counter in global memory (tile order as the hardware would run one block
  // per tile: row blocks of a head together, the longest first under a causal mask; a packed or
  // paged batch's sequences in ord's order), so a block
  // that drew short tiles draws more. The producer draws and hands each tile index to the
  // consumers in a shared slot published by the Q-full barrier; -1 ends the loop. With one block
  // per tile (ta.ctas = 0) every block has exactly its own tile. The ring's stage and phase run on
  // across tiles (c: key blocks so far), Q's phase per tile (j).
  if (wg == 0) {
    // Producer. Key blocks run high to low (the masked ones first). Per tile: K of its first block,
    // then Q (once the consumers are done with the previous tile's), then V, K, V, ... (paged: K of
    // block i + 1 before V of block i). One thread
    // issues every copy of a dense call; a paged call runs warp 0 through the same steps, lane 0
    // alone doing what is done once (barrier arrivals, Q, the tile counter) and lane r issuing box
    // r of each key block.
    sm90::setmaxnreg_dec<Tr::kProducerRegs>();
    if (kPaged ? warp == 0 : tid == 0) {
      const bool lead = !kPaged || lane == 0;
      // Tile counter draw by the lead thread, seen by the whole warp.
      auto draw = [&]() {
        int v = 0;
        if (lead) v = atomicAdd(ta.tile_counter, 1);
        if constexpr (kPaged) v = __shfl_sync(0xffffffffu, v, 0);
        return ta.ctas + v;
      };
      // Paged: boxes per key block, and this lane's box's cache row (-box: outside the map, zeros).
      const int box = kPaged ? ta.box_rows : BN;
      const int n_box = BN / box;
      int c = 0;
      int idx = blockIdx.x;
      const bool dynamic = ta.ctas > 0;
      for (int j = 0;; ++j) {
        bool done = idx >= n_tiles || (j > 0 && !dynamic);
        WsTile w{};
        int n_blocks = 0;
        int next = n_tiles;
        if (!done) {
          // The next tile is drawn when this tile's last key block is loaded (its latency hides
          // behind that block's waits). Drawn at the start of the tile instead, a block holds a
          // tile it cannot start for a whole tile: causal N 16k lost 6% (NOTES-fwd.md).
          w = ws_tile<BM, BN>(ta, idx, ord);
          // Idle tiles (row blocks past a short sequence's end: a packed call has ceil(max length /
          // BM) per sequence and head; a paged call's decode sequences) never reach the consumers:
          // the producer moves the counter past the idle run (every index in it is idle, so no
          // tile is lost) and draws again. Handed over one by one, each cost a hand-over and two
          // dependent reads with the tensor cores idle.
          while (dynamic && w.idle) {
            const int end = ws_idle_run_end<BM>(a, w, idx);
            if (lead) atomicMax(ta.tile_counter, end - ta.ctas);
            idx = draw();
            if (idx >= n_tiles) {
              done = true;
              break;
            }
            w = ws_tile<BM, BN>(ta, idx, ord);
          }
          if (!done) n_blocks = max(w.n_max - w.n_min, 0);
        }
        const int hk = w.bc.h / a.group;
        // Map coordinates: packed sequences are rows of one [total, heads, D] tensor (batch 0);
        // rows of the next sequence that a ragged tile reads are masked (keys) or not stored (rows).
        const bool packed = a.cu_seqlens_q != nullptr;
        const int bm = packed ? 0 : w.bc.b;
        const int q_row0 = static_cast<int>(w.seq.q_row0), k_row0 = static_cast<int>(w.seq.k_row0);
        // Paged: this lane's box of key block n is key t0 = n * BN + lane * box, in page-table entry
        // t0 / page size. The entry is read a loop step ahead (page_of) and turned into the cache row
        // only where the copies are issued, after the stage's wait (box_row): the read's latency
        // then overlaps the wait instead of delaying the copies of every block.
        const int32_t* const table = kPaged ? a.page_table + static_cast<int64_t>(w.bc.b) * a.max_pages : nullptr;
        auto page_of = [&](int n) {
          const int t0 = n * BN + lane * box;
          return kPaged && lane < n_box && t0 < w.seq.nk ? __ldg(table + a.page_div.div(t0)) : -1;
        };
        auto box_row = [&](int n, int pg) {
          const int t0 = n * BN + lane * box;
          return static_cast<unsigned>(pg) < static_cast<unsigned>(a.num_pages)
                     ? pg * a.page_size + (t0 - a.page_div.div(t0) * a.page_size)
                     : -box;  // outside the map: zeros
        };
        // (paged with ta.kv_rows = 8: one box per page holding every column block, at [8-row
        // group][column block][8][128 bytes], coordinates {0, 0, 0, row / 8, kv head})
        auto load_kv = [&](const CUtensorMap* map, uint32_t dst, uint32_t full, int n, int pg) {
          if constexpr (kPaged) {
            const int krow = box_row(n, pg);
            __syncwarp();  // the lead's expect-tx before any copy completes on the barrier
            if (lane < n_box) {
              if constexpr (kGrouped) {
                tma_load_5d(dst + lane * box * kCB * 128, map, 0, 0, 0, krow / 8, hk, full);
              } else {
#pragma unroll
                for (int cb = 0; cb < kCB; ++cb) tma_load_4d(dst + cb * BN * 128 + lane * box * 128, map, cb * 64, krow, hk, 0, full);
              }
            }
          } else {
            (void)pg;
#pragma unroll
            for (int cb = 0; cb < kCB; ++cb) tma_load_4d(dst + cb * BN * 128, map, cb * 64, k_row0 + n * BN, hk, bm, full);
          }
        };
        // Fill cc / S of stage cc % S (cc: key blocks of the ring so far) waits for the consumers'
        // release of the previous fill. pg: paged, the page of this lane's box of block n.
        auto load_k = [&](int n, int cc, int pg) {
          const int s = cc % S;
          if (cc >= S) mbar_wait(bar_ke + 8 * s, ((cc / S) - 1) & 1);
          if (lead) mbar_arrive_expect_tx(bar_kf + 8 * s, kTileKV);
          load_kv(&ta.tk, sK + s * kTileKV, bar_kf + 8 * s, n, pg);
        };
        auto load_v = [&](int n, int cc, int pg) {
          const int s = cc % S;
          if (cc >= S) mbar_wait(bar_ve + 8 * s, ((cc / S) - 1) & 1);
          if (lead) mbar_arrive_expect_tx(bar_vf + 8 * s, kTileKV);
          load_kv(&ta.tv, sV + s * kTileKV, bar_vf + 8 * s, n, pg);
        };
        // Paged: the pages of this lane's boxes of the block whose V is loaded next (pg_cur) and of
        // the block after it (pg_next), each read a loop step before its copies.
        int pg_cur = -1, pg_next = -1;
        if (kPaged && n_blocks > 0) pg_cur = page_of(w.n_max - 1);
        if (n_blocks > 0) load_k(w.n_max - 1, c, pg_cur);
        if (kPaged && n_blocks > 1) pg_next = page_of(w.n_max - 2);
        // The tile's batch-order index for the consumers, written before the Q-empty wait so that it
        // need not stay in a register through it (slot j % 2 was last read for tile j - 2, whose Q the
        // consumers released before this block's producer went past tile j - 1's Q-empty wait).
        if (Tr::kDeal && lead) slots[j & 1] = done ? -1 : w.index;
        if (j > 0) mbar_wait(bar_qe, (j - 1) & 1);
        if (lead) {
          if constexpr (!Tr::kDeal) slots[j & 1] = done ? -1 : idx;
          if (n_blocks > 0) {
            mbar_arrive_expect_tx(bar_qf, Tr::kTileQ);
#pragma unroll
            for (int cb = 0; cb < kCB; ++cb)
              tma_load_4d(sQ + cb * BM * 128, &ta.tq, cb * 64, q_row0 + w.row0, w.bc.h, bm, bar_qf);
          } else {
            mbar_arrive(bar_qf);  // the slot alone (a tile without keys, or the end)
          }
        }
        if (done) break;
        if (dynamic && n_blocks == 0) next = draw();
        // Per block: its K (the first block's went before Q), then its V. Paged calls: K of the
        // next block, then V of this one. The consumers release a K stage once S = Q K^T has read
        // it, mid-step, and a V stage only after P V, at the step's end; in this order a K copy
        // waits for the first and has about one and a half consumer steps to land instead of one.
        // With a box per page (16 copies per key block at page 16, D 128) the consumers waited on K
        // for 9% of their time, 1% at page 256 (ncu, NOTES-inference.md, seventeenth session).
        // (Dense calls keep the first order: their K is on time, and the second costs the 24-register
        // producer spills at W 64.)
        for (int it = 0; it < n_blocks; ++it, ++c) {
          const int n = w.n_max - 1 - it;
          if (dynamic && it == n_blocks - 1) next = draw();
          if constexpr (kPaged) {
            if (it + 1 < n_blocks) {
              int pg_after = -1;
              if (it + 2 < n_blocks) pg_after = page_of(n - 2);  // read while the waits run
              load_k(n - 1, c + 1, pg_next);
              load_v(n, c, pg_cur);
              pg_cur = pg_next;
              pg_next = pg_after;
            } else {
              load_v(n, c, pg_cur);
            }
          } else {
            if (it > 0) load_k(n, c, -1);
            load_v(n, c, -1);
          }
        }
        idx = next;
      }
      // The last block to finish drawing leaves the counters at zero for the next launch.
      if (lead && dynamic && atomicAdd(ta.tile_counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        atomicExch(ta.tile_counter, 0);
        atomicExch(ta.tile_counter + 1, 0);
      }
    }
    return;
  }
  sm90::setmaxnreg_inc<Tr::kConsumerRegs>();

  // Consumers: warpgroup cw owns rows [64 cw, 64 cw + 64) of each tile.
  const int cw = sm90::warp_uniform(wg - 1);
  const int ctid = tid - 128;
  const int g = lane >> 2, t = lane & 3;
  const int wrow0 = cw * 64 + (warp & 3) * 16;
  const sm90::SmemDesc dQ = sm90::smem_desc_w(sQ + cw * 64 * 128, 16, 1024);
  // K's and V's stages: [key block / kv_rows][column block][kv_rows][128 bytes] (kv_rows = BN: the
  // column blocks whole; paged with ta.kv_rows = 8: the column blocks of 8 keys, then of the next 8).
  // The stride of 8-key groups is the descriptors' stride byte offset (K: along S's N; V: along P V's
  // k) and the column-block stride V's leading byte offset and K's k-step past 64 columns; a k16
  // step of P V moves two groups.
  constexpr bool grouped = kGrouped;  // (the host launches it where ta.kv_rows = 8)
  constexpr uint32_t group_stride = grouped ? kCB * 1024 : 1024;
  const sm90::SmemDesc dK = sm90::smem_desc_w(sK, 16, group_stride);
  constexpr int krows = grouped ? 8 : BN;  // kstep's rows of a column block
  const sm90::SmemDesc dV = sm90::smem_desc_w(sV, grouped ? 1024 : BN * 128, group_stride);
  constexpr uint32_t vstep16 = (2 * group_stride) >> 4;  // descriptor units
  constexpr uint32_t kStageDesc = kTileKV >> 4;
  const float sl2 = a.scale_log2;
  const bool pp = ta.pingpong != 0;
  const bool rescale_always = ta.rescale_always != 0;

  auto release = [&](uint32_t bar) {
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
  };
  const bool ring_across = ta.ring_across != 0;
  if (pp && ring_across && cw == Tr::kConsumers - 1) sm90::named_bar_arrive(8, 256);  // warpgroup 0's first turn
  int c = 0;
  for (int j = 0;; ++j) {
    mbar_wait(bar_qf, j & 1);
    const int idx = slots[j & 1];
    if (idx < 0) break;
    const WsTile w = ws_tile<BM, BN>(ta, idx);
    const int n_blocks = w.n_max - w.n_min;
    FA_WS_MARK(j, cw, 0, clock64());
    FA_WS_MARK(j, cw, 4, n_blocks);
    const int row0 = w.row0, n_max = w.n_max, Nq = w.seq.nq;
    const FwdBlockPtrs gp = block_ptrs<2>(a, w.bc, w.seq, row0);
    if (n_blocks <= 0) {
      if (!w.idle) write_empty_rows<BM, 128 * Tr::kConsumers>(a, gp.o, gp.lse, min(BM, Nq - row0), 2, ctid);
      release(bar_qe);
      continue;
    }
    const KeyWindow win(w.seq, a.window_left, a.window_right);

    float s[1][BN / 8][4];
    float o[1][D / 8][4];
    uint32_t p[BN / 16][4];
    // kQReg: this warp's 16 rows of Q as wgmma A fragments (ldmatrix from the 128-byte swizzled
    // tile: lanes 0-15 address rows 0-15 of a 16-column step, lanes 16-31 the same rows 8 columns
    // on, giving the m16n8k16 A layout), then Q's buffer goes back to the producer.
    uint32_t qf[Tr::kQReg ? D / 16 : 1][4];
    if constexpr (Tr::kQReg) {
      const int r = wrow0 + (lane & 15);
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        const int chunk = ks * 2 + (lane >> 4);  // 16-byte chunk over the row
        ldmatrix_x4(qf[ks], sQ + (chunk / 8) * BM * 128 + r * 128 + (((chunk % 8) ^ (r & 7)) << 4));
      }
      sm90::reg_fence_u32<D / 4>(&qf[0][0]);
      release(bar_qe);
    }
    float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};
    float alpha[1][2];
    float* const sf = &s[0][0][0];
    float* const of = &o[0][0][0];

    auto issue_s = [&](int stage) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) {
        if constexpr (Tr::kQReg)
          sm90::Wgmma<T, BN>::template rs<0>(sf, qf[ks], dK + stage * kStageDesc + sm90::kstep(ks, krows), ks > 0);
        else
          sm90::Wgmma<T, BN>::ss(sf, dQ + sm90::kstep(ks, BM), dK + stage * kStageDesc + sm90::kstep(ks, krows), ks > 0);
      }
      sm90::wgmma_commit();
    };
    // The first key block's S over its lower 64 keys (m64n64), for a warpgroup whose rows see none
    // of the upper half (see half_s below). 128-key blocks only.
    auto issue_s_lower = [&](int stage) {
      if constexpr (BN == 128) {
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          if constexpr (Tr::kQReg)
            sm90::Wgmma<T, BN / 2>::template rs<0>(sf, qf[ks], dK + stage * kStageDesc + sm90::kstep(ks, krows), ks > 0);
          else
            sm90::Wgmma<T, BN / 2>::ss(sf, dQ + sm90::kstep(ks, BM), dK + stage * kStageDesc + sm90::kstep(ks, krows), ks > 0);
        }
        sm90::wgmma_commit();
      }
    };
    // hi = 0 (128-key blocks, dense and packed): the k-steps over the block's lower 64 keys only,
    // for a first block whose S was trimmed to them (pv_first_hi below).
    auto issue_pv = [&](int stage, int accumulate, int hi) {
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        if (BN != 128 || kPaged || kk < BN / 32)
          sm90::Wgmma<T, D>::rs(of, p[kk], dV + stage * kStageDesc + kk * vstep16, accumulate | (kk > 0));
        else
          sm90::Wgmma<T, D>::rs_if(of, p[kk], dV + stage * kStageDesc + kk * vstep16, 1, hi);
      }
      sm90::wgmma_commit();
    };
    auto rescale_o = [&]() {
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[0][dt][e] *= alpha[0][e >> 1];
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
    // The key blocks this warpgroup's rows see whole (no mask test on them) and the score modifier,
    // once per tile: the loop's per-block test is two compares. Over the warpgroup's rows (values
    // uniform across its warps): with each warp's own rows the paged W 128 kernel's wgmmas
    // serialized (C7511).
    int free_first, free_last;
    win.unmasked_blocks(BN, row0 + cw * 64, row0 + cw * 64 + 63, &free_first, &free_last);
    const int smod = score_mod_of(a);
    auto mask_scores = [&](int nb, bool vote_lower_only) {
      score_mod_and_mask_at<BN, false>(s, a, win, nb, smod, nb < free_first || nb > free_last, row0 + wrow0 + g, t,
                                       vote_lower_only);
    };
    auto mask_and_softmax = [&](int nb, bool vote_lower_only) {
      mask_scores(nb, vote_lower_only);
      online_softmax_step(s, row_max, row_sum, alpha, sl2);
    };

    // Ping-pong (ta.pingpong): the consumer warpgroups take turns issuing their products, in a ring
    // (0, 1, [2,] 0, ...), so that one's softmax runs while another's products occupy the tensor
    // cores. Named barrier 8 + cw is "cw may issue": 256 arrivals, cw's own 128 waiting and its
    // predecessor's 128 signalling after its issue. All warpgroups have the same n_blocks + 1 turns
    // in a tile. The ring runs on across tiles (ring_across, the default): the last warpgroup's last
    // turn of a tile (its last P V issued) lets warpgroup 0 take the next tile's first turn, so
    // warpgroup 0's next S = Q K^T and softmax run while the others finish this tile and write their
    // O (one signal before the loop starts it, one wait after the loop balances it). Otherwise
    // (FA_WS_RING_ACROSS=0, comparisons) the last warpgroup signals warpgroup 0 when it starts the
    // next tile, after its epilogue, and its last turn of a tile signals nobody.
    int turns_left = n_blocks + 1;
    auto my_turn = [&]() {
      if (pp) sm90::named_bar_sync(8 + cw, 256);
    };
    auto pass_turn = [&]() {
      --turns_left;
      if (pp && (cw < Tr::kConsumers - 1 || turns_left > 0 || ring_across))
        sm90::named_bar_arrive(8 + (cw + 1) % Tr::kConsumers, 256);
    };
    if (pp && !ring_across && cw == Tr::kConsumers - 1) sm90::named_bar_arrive(8, 256);

    // Paged: V rows [tail0, tail1) of the tile's first key block (n_max - 1) lie past the sequence's
    // end inside the box that holds it, and hold whatever the page holds. The consumers zero them
    // together (one barrier of all consumer threads, once per tile that reads the end) after the
    // block's V has landed and before its P V.
    int tail0 = BN, tail1 = BN;
    if constexpr (kPaged) {
      tail0 = w.seq.nk - (n_max - 1) * BN;
      tail1 = min(BN, (tail0 + ta.box_rows - 1) / ta.box_rows * ta.box_rows);
    }
    auto zero_rows = [&](uint32_t tile) {
      const int rows = tail1 - tail0;
      for (int i = ctid; i < kCB * rows * 8; i += 128 * Tr::kConsumers) {
        // 16 bytes of row r, column block cb: a whole 128-byte line, no swizzle to follow
        const int cb = i / (rows * 8), rem = i - cb * rows * 8, r = tail0 + rem / 8;
        const uint32_t line = grouped ? (r / 8) * group_stride + cb * 1024 + (r % 8) * 128 : cb * BN * 128 + r * 128;
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(tile + line + (rem % 8) * 16), "r"(0u) : "memory");
      }
      sm90::fence_proxy_async_smem();  // the zeros, for the wgmma's reads
      sm90::named_bar_sync(13, 128 * Tr::kConsumers);
    };
    auto zero_tail = [&](int stage) {
      if (kPaged && tail1 > tail0) zero_rows(sV + stage * kTileKV);
    };
    // The same rows of K, before the block's first S, in calls with a softcap only: their scores are masked whatever
    // they are, but softcap_scores' warp vote reads them, and a large value past the end (a page's garbage) sent the
    // whole warp's tile to tanh_fast, whose absolute error the softcap multiplies (fuzz seed 58001 cases 432 / 1404:
    // lse 1.5-2.6x the rule at softcaps 723-993, sixty-first session). A second barrier of all consumers per tile that
    // reads the end; calls without a softcap skip it (uniform branch).
    const bool zero_k = kPaged && a.softcap > 0.f && tail1 > tail0;
    auto zero_k_tail = [&](int stage) {
      if (zero_k) zero_rows(sK + stage * kTileKV);
    };

    int sc = c % S;                // stage of the block before the current one
    uint32_t phc = (c / S) & 1;    // its fill parity

    // A warpgroup whose rows all lie past the sequence's last query (the third warpgroup of a
    // 192-row tile over a sequence's last 128 or 64 rows, the second of a packed sequence's last
    // row block with 64 rows or fewer) walks the tile without products: per key block the same
    // waits, turns and releases as the others, no wgmma, no softmax, no stores, so that the tensor
    // cores serve the other warpgroups alone. H200 (NOTES-fwd.md, thirty-second session): W 64
    // with three consumers (D 64 full masks, causal from N 2k) +1.4-6% at N 512-4k, packed calls of
    // short sequences -2.5% (lengths 60-760) to -19% (5-64 tokens), the dense W 128 / 256 cells
    // 0.99-1.02; paged prefill (thirty-third session) -2 to -7% on batches of short sequences. In
    // the paged kernels the walk takes its share of the first block's V-tail zeros (zero_tail: a
    // barrier of all consumer threads) where the others do. The W 64 two-consumer kernel (Tr::kPlain)
    // has it only in its packed / paged instantiation (kWalk): a dense call has an idle warpgroup
    // there only in its last row tile and only where N % 128 is in 1..64, and the added path cost the
    // dense causal N 512 / 1k cells 1-2.6%.
    // FA_WS_SKIP_IDLE_WG=0 builds leave it out everywhere (comparisons). (Guards on the wgmmas
    // themselves, the thirty-first session's first form, made ptxas fence every guarded wgmma: the
    // packed call 30% slower.)
    constexpr bool kSkipIdle = FA_WS_SKIP_IDLE_WG && (!Tr::kPlain || kWalk);
    if constexpr (kSkipIdle) {
      if (row0 + cw * 64 >= Nq) {
        if constexpr (!Tr::kQReg) release(bar_qe);  // (kQReg: released above)
        mbar_wait(bar_kf + 8 * sc, phc);
        zero_k_tail(sc);  // (its share, and the barrier)
        my_turn();
        pass_turn();
        release(bar_ke + 8 * sc);
        for (int it = 1; it < n_blocks; ++it) {
          int sn = sc + 1;
          uint32_t phn = phc;
          if (sn == S) sn = 0, phn ^= 1u;
          mbar_wait(bar_kf + 8 * sn, phn);
          mbar_wait(bar_vf + 8 * sc, phc);
          if (it == 1) zero_tail(sc);  // (paged: its share of the zeros, and the barrier of all consumers)
          my_turn();
          pass_turn();
          release(bar_ke + 8 * sn);
          release(bar_ve + 8 * sc);
          sc = sn;
          phc = phn;
        }
        mbar_wait(bar_vf + 8 * sc, phc);
        if (n_blocks == 1) zero_tail(sc);
        my_turn();
        pass_turn();
        release(bar_ve + 8 * sc);
        c += n_blocks;
        continue;
      }
    }

    // Block 0 of the loop order (key block n_max - 1): S, softmax, P. O needs no initialisation:
    // the first P V overwrites it.
    mbar_wait(bar_kf + 8 * sc, phc);
    zero_k_tail(sc);
    // The first key block's S where the warpgroup's rows see little of it (win.hi of its last row:
    // one past the last key they see): with 128-key blocks, none of the upper half (warpgroup 0 on
    // the causal diagonal) -> the lower half only; with 64 / 80-key blocks (W 192 / 256), none of
    // the block -> no S. The mask removes the skipped keys for every row of the warpgroup (the block is
    // not free for it: nb > free_last), whatever their registers hold; the softcap's vote leaves the
    // unset upper half out (vote_lower_only), and a skipped block's registers are set to 0 (in the
    // polynomial's range: the vote passes). (Until the fifty-ninth session the fill set sf[BN / 2, BN),
    // past the array, to -inf, and left the upper half unset.) ptxas serializes the wgmmas
    // (C7511) unless a kernel has just these two paths, each waiting for its own wgmmas; in the paged
    // W 64 kernels it did even then, so they keep the whole S.
    constexpr bool kTrimS = !(kPaged && D == 64);
    const bool half_s = kTrimS && BN == 128 && ta.trim_s && win.hi(row0 + cw * 64 + 63) <= (n_max - 1) * BN + BN / 2;
    const bool none_s = kTrimS && BN != 128 && ta.trim_s && win.hi(row0 + cw * 64 + 63) <= (n_max - 1) * BN;
    // The same block's P V where the S was halved: P is zero over the upper 64 keys, so the k-steps
    // over them are issued under a guard predicate that is off for that block (ta.trim_s bit 1;
    // FA_WS_TRIM_S=1 keeps the whole P V, for comparisons). Only inside the loop (tiles of two or
    // more blocks): the same guard on the P V after the loop made the W 128 kernel's wgmmas
    // serialize (C7511), with one path or two. Not at 64 / 80 / 176-key blocks: the guards cost the
    // 80-key D 256 kernel 1.5-2.5% at N 2k-4k, full masks included; not in the paged kernels, where
    // the varlen bench's paged calls read -0.4% / +1.5% at page 16 / 64 against none of it (H200,
    // thirty-first session; NOTES-fwd.md).
    const int pv_first_hi = !(half_s && (ta.trim_s & 2));
    my_turn();
    sm90::wgmma_fence();
    if constexpr (BN == 128) {
      if (half_s) {
        issue_s_lower(sc);
        pass_turn();
        sm90::wgmma_wait<0>();
      } else {
        issue_s(sc);
        pass_turn();
        sm90::wgmma_wait<0>();
      }
    } else {
      if (none_s) {
        pass_turn();
      } else {
        issue_s(sc);
        pass_turn();
        sm90::wgmma_wait<0>();
      }
    }
    sm90::reg_fence<BN / 2>(sf);
    if constexpr (BN != 128) {
      if (none_s) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) sf[i] = 0.f;
      }
    }
    release(bar_ke + 8 * sc);
    constexpr bool q_early = Tr::kOwnO && !Tr::kQReg;  // Q's buffer is free after the last S (kQReg: released at the start)
    if (q_early && n_blocks == 1) release(bar_qe);  // the tile's last read of Q
    mask_and_softmax(n_max - 1, half_s);
    pack_p();
    FA_WS_MARK(j, cw, 1, clock_after(p[BN / 16 - 1][3]));

    // Step it: S(it) and P(it-1) V(it-1) in flight together, the softmax of S(it) while P V runs.
    // The next step's K and V full barriers are tested while the warp waits for S (kEarlyTest):
    // where both had landed, that step starts without their round trips.
    uint32_t kv_ready = 0;
    for (int it = 1; it < n_blocks; ++it) {
      int sn = sc + 1;
      uint32_t phn = phc;
      if (sn == S) sn = 0, phn ^= 1u;
      FA_WS_BMARK(j, it, cw, 0, clock64());
      if (!kv_ready) {
        mbar_wait(bar_kf + 8 * sn, phn);
        mbar_wait(bar_vf + 8 * sc, phc);
      }
      if (it == 1) zero_tail(sc);
      FA_WS_BMARK(j, it, cw, 1, clock64());
      my_turn();
      FA_WS_BMARK(j, it, cw, 2, clock64());
      sm90::wgmma_fence();
      issue_s(sn);
      issue_pv(sc, it > 1 ? 1 : 0, (it > 1) | pv_first_hi);
      pass_turn();
      FA_WS_BMARK(j, it, cw, 3, clock64());
      if constexpr (Tr::kEarlyTest) {
        int sn2 = sn + 1;
        uint32_t phn2 = phn;
        if (sn2 == S) sn2 = 0, phn2 ^= 1u;
        kv_ready = it + 1 < n_blocks ? mbar_test(bar_kf + 8 * sn2, phn2) & mbar_test(bar_vf + 8 * sn, phn) : 0u;
      }
      sm90::wgmma_wait<1>();
      sm90::reg_fence<BN / 2>(sf);
      FA_WS_BMARK(j, it, cw, 4, clock_after(__float_as_uint(sf[0])));
      release(bar_ke + 8 * sn);
      if (q_early && it == n_blocks - 1) release(bar_qe);
      if constexpr (Tr::kRescaleInSoftmax) {
        // P(it-1) V(it-1) waited for before the softmax, and O *= alpha (exactly 1 for a row whose
        // max stayed) in it, every time: the multiplies fill the FMA pipe while the exponentials
        // hold the MUFU, where the rescale after the softmax (and the vote that skipped it) sat
        // on the step's critical path. Why not the softmax beside P V: ptxas hoists this wait to
        // the top of the softmax anyway (it reads no register; the H200's ncu source view,
        // eighteenth session: WARPGROUP.DEPBAR.LE gsb0, 0x0 before the row max), and a branch that
        // pins it after the softmax makes every kernel spill (P(it-1), O, S and Q live at once:
        // 56-570 bytes of stack). cuDNN's kernel orders its step this way too.
        sm90::wgmma_wait<0>();
        sm90::reg_fence<D / 2>(of);
        // (marks 5 and 6 in this order here; a plain clock64, kept after the wait by the volatile
        // fence before it: one bound to of[0] made ptxas serialize the trace build's wgmmas)
        FA_WS_BMARK(j, it, cw, 5, clock64());
        sm90::reg_fence_u32<BN / 4>(&p[0][0]);  // P(it-1) stays in its registers until its wgmma is done
        release(bar_ve + 8 * sc);
        if constexpr (Tr::kLazy) {
          mask_scores(n_max - 1 - it, false);
          if (lazy_softmax_step<T>(s, p, row_max, row_sum, alpha, sl2)) rescale_o();
          FA_WS_BMARK(j, it, cw, 6, clock_after(p[BN / 16 - 1][3]));
        } else {
          mask_and_softmax(n_max - 1 - it, false);
          FA_WS_BMARK(j, it, cw, 6, clock_after(__float_as_uint(sf[BN / 2 - 1])));
        }
      } else {
        if constexpr (Tr::kLazyMax) {
          mask_scores(n_max - 1 - it, false);
          lazy_max_softmax_step(s, row_max, row_sum, alpha, sl2);
        } else {
          mask_and_softmax(n_max - 1 - it, false);
        }
        FA_WS_BMARK(j, it, cw, 5, clock_after(__float_as_uint(sf[BN / 2 - 1])));
        sm90::wgmma_wait<0>();
        sm90::reg_fence<D / 2>(of);
        FA_WS_BMARK(j, it, cw, 6, clock_after(__float_as_uint(of[0])));
        sm90::reg_fence_u32<BN / 4>(&p[0][0]);  // P(it-1) stays in its registers until its wgmma is done
        release(bar_ve + 8 * sc);
      }
      // O *= alpha: every block where the wait came first (the multiplies join the softmax's
      // instruction stream), else skipped when no row of the warp moved its max (alpha exactly 1).
      // (kLazy: done above where a row's max passed its reference, and P is packed)
      if constexpr (!Tr::kLazy) {
        if (Tr::kRescaleInSoftmax || rescale_always ||
            __any_sync(0xffffffffu, alpha[0][0] != 1.f || alpha[0][1] != 1.f))
          rescale_o();
        pack_p();
      }
      sc = sn;
      phc = phn;
    }
    mbar_wait(bar_vf + 8 * sc, phc);
    if (n_blocks == 1) zero_tail(sc);
    my_turn();
    sm90::wgmma_fence();
    issue_pv(sc, n_blocks > 1 ? 1 : 0, 1);
    pass_turn();
    sm90::wgmma_wait<0>();
    sm90::reg_fence<D / 2>(of);
    release(bar_ve + 8 * sc);
    c += n_blocks;
    FA_WS_MARK(j, cw, 2, clock64());

    // Epilogue: each warp writes only its own rows (through its rows of the O buffer, or directly).
    // At D 256 and W 128 with 176 keys (no O buffer; FA_WS_SPLIT_O, the default: a half-width one, in
    // two passes) through the warpgroup's rows of Q's buffer, free once its four warps are past
    // their last wgmma; the next Q then loads after every consumer warp has written its rows out.
    // (4-byte stores straight from the registers instead, releasing Q after the last S, measured
    // 4-7% slower at N 1k-4k.)
    if constexpr (Tr::kOwnO) {
      sm90_store_rows<T, D, BM, Tr::kOPass>(o, row_max, row_sum, sl2, smem_o, gp, a, row0, wrow0, Nq, lane);
    } else {
      sm90::named_bar_sync(1 + cw, 128);
      sm90_store_rows<T, D, BM>(o, row_max, row_sum, sl2, smem, gp, a, row0, wrow0, Nq, lane);
      release(bar_qe);
    }
    FA_WS_MARK(j, cw, 3, clock64());
  }
  if (pp && ring_across && cw == 0) sm90::named_bar_sync(8, 256);  // the last warpgroup's last signal
#else
  __trap();  // only the sm_90a build has this kernel; the dispatcher never launches it elsewhere
#endif
}

}  // namespace cuda
}  // namespace fa
