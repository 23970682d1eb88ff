// Compile-time tile shapes of the backward kernels, checked with static_asserts.
//
// One thread block owns kBlockN keys (K_j, V_j stay in shared memory; dK_j, dV_j in registers) and
// walks the query row blocks of kBlockM rows. Its kNWarps warps are arranged differently for the
// three kinds of product (each a warp tile of whole m16 x n8 mma tiles):
//   S = Q K^T and dP = dO V^T   [kBlockM x kBlockN]: kWarpsMSdP warps along the queries
//   dV += P^T dO, dK += dS^T Q  [kBlockN x W]:       kWarpsNdKV warps along the keys
//   dQ  = dS K                  [kBlockM x W]:       kWarpsMdQ warps along the queries
// P and dS go through shared memory between the first and the other two.
//
// Shared-memory rows: fp16/bf16 tiles are padded by 16 bytes per row (odd row pitch in 16-byte
// units: ldmatrix, plain or .trans, conflict-free without a swizzle, as in the forward); fp32 tiles
// by 4 floats (pitch = 4 mod 32 words: the k-contiguous tf32 fragment reads (row g, column t) hit
// 32 distinct banks; the transposed reads (row t, column g) are 2-way).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/bwd_args.cuh"

namespace fa {
namespace cuda {

constexpr int kBwdMaxSmem = 227 * 1024;  // sm_90 opt-in limit; the launcher checks the device's

// Main-kernel options (BwdTraits::kOpts, a bit mask).
// kOptDqPerm: the dQ accumulator in the mma fragment order (DqLayout::perm, bwd_args.cuh): one
//   reduction instruction covers 256 contiguous bytes instead of eight 32-byte pieces of eight rows.
// kOptDqV4: with kOptDqPerm, two register pairs per 16-byte reduction (DqLayout::vec = 4).
// kOptNoDq, kOptRedGuard: timing only (wrong dQ), for the tuning build's leave-one-out timings:
//   no dQ product at all / the product kept but its reductions skipped.
// Variants measured and dropped (staggered row loops, dQ between dV and dK, dQ in two passes,
// scalar reductions, bulk TMA reductions from shared memory): bench/NOTES-bwd.md, runs 4-7.
constexpr int kOptNoDq = 4, kOptRedGuard = 256, kOptDqPerm = 512, kOptDqV4 = 1024;

template <typename T_, int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kWarpsMSdP_, int kWarpsNdKV_,
          int kWarpsMdQ_, bool kFuse_ = false, int kStages_ = 2, int kOpts_ = 0>
struct BwdTraits {
  using T = T_;
  // Main-kernel options (kOptDqPerm etc. above).
  static constexpr int kOpts = kOpts_;
  // 2: main kernel double-buffers Q / dO (and the dQ kernel K / V), so block i+1 loads during
  // block i. 1: single buffers (the next block loads after a barrier, exposed): the fallback for
  // devices whose shared memory per block is too small for 2 (sm_80: 163 KB).
  static constexpr int kStages = kStages_;
  using SingleStage = BwdTraits<T_, kHeadDim_, kBlockM_, kBlockN_, kNWarps_, kWarpsMSdP_, kWarpsNdKV_, kWarpsMdQ_,
                                kFuse_, 1, kOpts_>;
  // S / dP (and dV / dK) products interleaved in one k loop (warp_gemm2).
  static constexpr bool kFuse = kFuse_;
  static constexpr bool kIsFp32 = sizeof(T) == 4;
  static constexpr int kElem = sizeof(T);
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kThreads = kNWarps * 32;

  // mma tile: m16 x n8 x k16 (fp16/bf16) or k8 (tf32).
  static constexpr int kK = kIsFp32 ? 8 : 16;
  // fp16/bf16 B fragments come in pairs of n8 tiles (one ldmatrix.x4).
  static constexpr int kNPair = kIsFp32 ? 1 : 2;

  // S / dP warp tile.
  static constexpr int kWarpsMSdP = kWarpsMSdP_;
  static constexpr int kWarpsNSdP = kNWarps / kWarpsMSdP;
  static constexpr int kTileMSdP = kBlockM / kWarpsMSdP;
  static constexpr int kTileNSdP = kBlockN / kWarpsNSdP;
  // dK / dV warp tile.
  static constexpr int kWarpsNdKV = kWarpsNdKV_;
  static constexpr int kWarpsDdKV = kNWarps / kWarpsNdKV;
  static constexpr int kTileNdKV = kBlockN / kWarpsNdKV;
  static constexpr int kTileDdKV = kHeadDim / kWarpsDdKV;
  // dQ warp tile.
  static constexpr int kWarpsMdQ = kWarpsMdQ_;
  static constexpr int kWarpsDdQ = kNWarps / kWarpsMdQ;
  static constexpr int kTileMdQ = kBlockM / kWarpsMdQ;
  static constexpr int kTileDdQ = kHeadDim / kWarpsDdQ;

  static constexpr int kPad = kIsFp32 ? 4 : 8;           // elements
  static constexpr int kPitch = kHeadDim + kPad;         // Q, dO, K, V rows (elements)
  static constexpr int kPitchP = kBlockN + kPad;         // P, dS rows (elements)
  static constexpr int kPitchB = kPitch * kElem;         // bytes
  static constexpr int kPitchPB = kPitchP * kElem;
  static constexpr int kChunksPerRow = kHeadDim * kElem / 16;

  static constexpr int kSmemKV = kBlockN * kPitchB;      // one K or V tile
  static constexpr int kSmemQ = kBlockM * kPitchB;       // one Q or dO tile
  static constexpr int kSmemP = kBlockM * kPitchPB;      // P or dS
  static constexpr int kSmemRow = kBlockM * 4;           // one lse2 or dsum slice

  static constexpr bool kDqPerm = (kOpts & kOptDqPerm) != 0;
  static constexpr int kDqVec = kDqPerm && (kOpts & kOptDqV4) != 0 ? 4 : 2;
  // Main kernel: K, V; Q, dO, lse2, dsum (kStages buffers each); P, dS.
  static constexpr int kSmemMain = 2 * kSmemKV + 2 * kStages * kSmemQ + 2 * kSmemP + 2 * kStages * kSmemRow;
  // dQ kernel (deterministic mode): Q, dO, lse2, dsum; K, V (kStages buffers each); dS.
  static constexpr int kSmemDq = 2 * kSmemQ + 2 * kStages * kSmemKV + kSmemP + 2 * kSmemRow;

  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "tile widths are multiples of 32 up to 256");
  static_assert(kStages == 1 || kStages == 2, "single or double buffers");
  static_assert(kNWarps == kWarpsMSdP * kWarpsNSdP && kNWarps == kWarpsNdKV * kWarpsDdKV &&
                    kNWarps == kWarpsMdQ * kWarpsDdQ,
                "warp grids must use every warp");
  static_assert(kTileMSdP % 16 == 0 && kTileNSdP % (8 * kNPair) == 0, "S/dP warp tile: whole mma tiles");
  static_assert(kTileNdKV % 16 == 0 && kTileDdKV % (8 * kNPair) == 0, "dK/dV warp tile: whole mma tiles");
  static_assert(kTileMdQ % 16 == 0 && kTileDdQ % (8 * kNPair) == 0, "dQ warp tile: whole mma tiles");
  static_assert((kOpts & kOptDqV4) == 0 || (kDqPerm && (kTileDdQ / 8) % 2 == 0),
                "16-byte dQ reductions: fragment order, pairs of n8 tiles");
  static_assert(kBlockM % kK == 0 && kBlockN % kK == 0 && kHeadDim % kK == 0, "k steps");
  static_assert(kBwdRowPad % kBlockM == 0, "row blocks tile the padded lse2/dsum rows");
  static_assert(kBlockM % 4 == 0 && kBlockM / 4 * 2 <= kThreads, "lse2/dsum slices: one 16-byte chunk per thread");
  static_assert((kBlockM * kChunksPerRow) % kThreads == 0 && (kBlockN * kChunksPerRow) % kThreads == 0,
                "tile loads: whole chunks per thread");
  static_assert(kIsFp32 || ((kPitchB / 16) & 1) == 1, "odd 16-byte pitch keeps ldmatrix conflict-free");
  static_assert(kIsFp32 || ((kPitchPB / 16) & 1) == 1, "odd 16-byte pitch keeps ldmatrix conflict-free");
  static_assert(!kIsFp32 || (kPitch % 32 == 4 && kPitchP % 32 == 4), "fp32 pitches = 4 mod 32 words");
  static_assert(kSmemMain <= kBwdMaxSmem, "main kernel: shared memory over the sm_90 limit");
  static_assert(kSmemDq <= kBwdMaxSmem, "dQ kernel: shared memory over the sm_90 limit");
};

// The dQ accumulator placement a kernel configuration writes (the convert kernel reads it back).
template <class Tr>
constexpr DqLayout dq_layout_of() {
  return DqLayout{Tr::kDqPerm ? 1 : 0, Tr::kBlockM, Tr::kTileMdQ, Tr::kTileDdQ, Tr::kHeadDim, Tr::kDqVec};
}

// ---- tile configuration per (element type, head-dim tile width) --------------------------------
// BwdTraits<T, width, kBlockM, kBlockN, kNWarps, kWarpsMSdP, kWarpsNdKV, kWarpsMdQ>.
// Measurements: bench/NOTES-bwd.md.
template <typename T, int W>
struct BwdConfig;

template <typename T>
struct BwdConfig<T, 64> {
  // 128 x 128 blocks: S/dP warp tile 32 x 64 (FA2's 4/4/4), dK/dV 32 x 32, dQ 32 x 32; dQ
  // accumulated in fragment order. Run 7 (fp16 bhsd main kernel, N 4k full / 16k full / 16k causal,
  // TFLOP/s): 296/300/304; S/dP 64 x 32 (2/4/4, the run-4 default, row-major dQ): 251/256/257.
  using Traits = BwdTraits<T, 64, 128, 128, 8, 4, 4, 4, false, 2, kOptDqPerm>;
};
template <typename T>
struct BwdConfig<T, 128> {
  // 64 x 128 blocks: S/dP warp tile 32 x 32, dK/dV 32 x 64, dQ 32 x 32 (FA2's shape); dQ in
  // fragment order. Run 7: 315/321/323; row-major dQ: 286/290/293; 16-byte reductions: the same
  // within 1%; 128 x 64 blocks (run 1): 198/205/208 at N 1k/4k/16k full.
  using Traits = BwdTraits<T, 128, 64, 128, 8, 2, 4, 2, false, 2, kOptDqPerm>;
};
template <typename T>
struct BwdConfig<T, 256> {
  // 64 x 64 blocks: S/dP warp tile 16 x 32, dK/dV 32 x 64, dQ 32 x 64; dQ in fragment order with
  // 16-byte reductions. Run 7: 240/240/247; 8-byte reductions 236/238/243; row-major dQ 207/207/212;
  // 64 x 32 blocks (run 1): 125/127 at N 4k/16k full.
  using Traits = BwdTraits<T, 256, 64, 64, 8, 4, 2, 2, false, 2, kOptDqPerm | kOptDqV4>;
};

// fp32 (3xTF32).
template <>
struct BwdConfig<float, 64> {
  using Traits = BwdTraits<float, 64, 64, 64, 8, 2, 4, 4>;
};
template <>
struct BwdConfig<float, 128> {
  using Traits = BwdTraits<float, 128, 32, 64, 8, 2, 4, 2>;
};
template <>
struct BwdConfig<float, 256> {
  using Traits = BwdTraits<float, 256, 32, 32, 8, 2, 2, 2>;
};

// ---- Hopper (wgmma) main kernel, bwd_kernel_sm90.cuh: fp16 / bf16, tile widths 128 and 256 ------------
// 64-row query blocks, 2 warpgroups (256 threads, one block per SM). Two ways to split the work:
// kKeySplit (W 64, 128): 128 keys per block, warpgroup w owns keys [64w, 64w + 64) and every head-dim
//   column: S^T / dP^T m64n64 over all 64 rows, dV / dK from its own P^T / dS^T registers (RS
//   wgmma), dQ columns [64w, 64w + 64) over all 128 keys from dS^T in shared memory.
// row split (W 256, whose dK + dV would not fit 128 keys): 64 keys per block, warpgroup w owns rows
//   [32w, 32w + 32) of S^T / dP^T and columns [128w, 128w + 128) of dK / dV / dQ; P^T and dS^T both
//   go through shared memory.
template <typename T_, int kHeadDim_>
struct Sm90BwdTraits {
  using T = T_;
  static constexpr bool kSm90 = true;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kKeySplit = kHeadDim_ <= 128;
  static constexpr int kBlockM = 64;                     // query rows per block i
  static constexpr int kBlockN = kKeySplit ? 128 : 64;   // keys per thread block
  static constexpr int kThreads = 256;
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kTileKV = kBlockN * kHeadDim * 2;  // K or V (bytes)
  static constexpr int kTileQ = kBlockM * kHeadDim * 2;   // one stage of Q or dO
  static constexpr int kTileP = kBlockN * kBlockM * 2;    // P^T or dS^T, [key][row]
  static constexpr int kNumP = kKeySplit ? 1 : 2;         // dS^T only, or P^T and dS^T
  static constexpr int kSRows = kKeySplit ? kBlockM : kBlockM / 2;       // S^T columns per warpgroup
  static constexpr int kCols = kKeySplit ? kHeadDim : kHeadDim / 2;      // dK / dV columns per warpgroup
  static constexpr int kDqCols = kHeadDim / 2;                           // dQ columns per warpgroup
  static constexpr int kDqChunk = kDqCols < 64 ? kDqCols : 64;           // dQ columns per wgmma (n)
  static constexpr int kSmemBytes = 2 * kTileKV + 4 * kTileQ + kNumP * kTileP + 4 * kBlockM * 4 + 1024;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "head-dim tiles 64, 128 and 256");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
  static_assert(kBwdRowPad % kBlockM == 0, "row blocks tile the padded lse2/dsum rows");
};

// The warp-specialised Hopper kernel (bwd_kernel_sm90_ws.cuh): the two splits of Sm90BwdTraits
// with a producer warpgroup and two consumer warpgroups.
//   key split (W 64, 128): 128 keys per block, 64 per consumer warpgroup; dQ images of a row block
//     in two buffers of their own.
//   row split (W 256): 64 keys per block; consumer warpgroup w owns rows [32w, 32w + 32) of S^T /
//     dP^T and columns [128w, 128w + 128) of dK / dV / dQ; P^T and dS^T in two buffers of both;
//     no dQ buffer (227 KB hold K, V, two Q / dO stages and the P^T / dS^T buffers, 224 KB): each
//     warpgroup puts its dQ share into its own columns of the stage's Q and dO tiles, which only its
//     own dV / dK products read once both warpgroups have passed the block's barrier, and the
//     stage goes back to the producer when the dQ writer's reduce-adds have read it.
template <typename T_, int kHeadDim_>
struct Sm90BwdWsTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kRowSplit = kHeadDim == 256;
  static constexpr int kBlockM = 64;                       // query rows per block i
  static constexpr int kBlockN = kRowSplit ? 64 : 128;     // keys per thread block
  static constexpr int kColBlocks = kHeadDim / 64;
  static constexpr int kStages = kHeadDim <= 64 ? 3 : 2;   // Q / dO ring depth
  static constexpr int kTileKV = kBlockN * kHeadDim * 2;   // K or V (bytes)
  static constexpr int kTileQ = kBlockM * kHeadDim * 2;    // one stage of Q or dO
  static constexpr int kTileP = kBlockN * kBlockM * 2;     // one P^T or dS^T tile, [key][row]
  static constexpr int kNumP = kRowSplit ? 2 : 1;          // per buffer: dS^T (and, row split, P^T)
  static constexpr int kTileDq = kBlockM * kHeadDim * 4;   // the fp32 dQ image of a row block
  static constexpr int kDqBufs = kRowSplit ? 0 : 2;        // its own buffers (row split: in the stage)
  static constexpr int kDqCols = kHeadDim / 2;             // dQ columns per consumer warpgroup
  static constexpr int kDqChunk = Sm90BwdTraits<T_, kHeadDim_>::kDqChunk;  // dQ columns per wgmma
  static constexpr int kSRows = kRowSplit ? kBlockM / 2 : kBlockM;         // S^T columns per warpgroup
  static constexpr int kCols = kRowSplit ? kHeadDim / 2 : kHeadDim;        // dK / dV columns per warpgroup
  static constexpr int kThreads = 384;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
  // Shared memory, from a 1024-byte aligned base (tiles first, each a whole number of swizzle atoms).
  static constexpr int kOffK = 0;
  static constexpr int kOffV = kOffK + kTileKV;
  static constexpr int kOffQ = kOffV + kTileKV;
  static constexpr int kOffDo = kOffQ + kStages * kTileQ;
  static constexpr int kOffDs = kOffDo + kStages * kTileQ;  // buffer d: [P^T (row split)] dS^T
  static constexpr int kOffDq = kOffDs + 2 * kNumP * kTileP;
  static constexpr int kOffL = kOffDq + kDqBufs * kTileDq;     // lse2 slices [kStages][kBlockM]
  static constexpr int kOffD = kOffL + kStages * kBlockM * 4;  // dsum slices
  static constexpr int kOffBar = kOffD + kStages * kBlockM * 4;
  // mbarriers: K/V full, Q full x kStages, Q empty x kStages, dQ full x 2, dQ empty x 2 (the row
  // split's dQ full barriers are per stage: kStages == 2 there).
  static constexpr int kSmemBytes = 1024 + kOffBar + 8 * (5 + 2 * kStages);
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256, "tiles 64, 128 and 256");
  static_assert(kRowSplit || kDqCols == kDqChunk, "the dQ placement of the cp.async kernel");
  static_assert(!kRowSplit || (kStages == 2 && kDqCols == 2 * kDqChunk && kBlockM * kDqChunk * 4 == kTileQ / 2),
                "row split: a warpgroup's two dQ chunks fill its columns of a stage's Q and dO tiles");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= (65536 / kThreads) / 8 * 8 * kThreads,
                "register split over the launch allocation");
  static_assert(kBwdRowPad % kBlockM == 0, "row blocks tile the padded lse2/dsum rows");
};

// The dQ accumulator placement of the sm_90 kernel: per 64-row block, warp tiles of 16 rows x
// kDqChunk columns (warp wq of the warpgroup: rows 16 wq; column chunk of the head dim), 16-byte
// reductions.
template <class Tr>
constexpr DqLayout sm90_dq_layout() {
  return DqLayout{1, Tr::kBlockM, 16, Tr::kDqChunk, Tr::kHeadDim, 4};
}

}  // namespace cuda
}  // namespace fa
