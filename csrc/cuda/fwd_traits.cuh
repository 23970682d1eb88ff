// Compile-time tile shapes of the forward kernels, checked with static_asserts.
//
// Shared-memory layout: each tile row of kHeadDim elements is followed by a 16-byte pad, so the
// row pitch in 16-byte units is odd (kHeadDim/8 + 1 with kHeadDim a multiple of 16). The eight row
// addresses of every ldmatrix 8x8 matrix (eight consecutive rows, same 16-byte column) therefore fall
// in eight different 16-byte bank groups: conflict-free without a swizzle.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace fa {
namespace cuda {

constexpr int kMaxSmemPerBlock = 227 * 1024;  // sm_90 opt-in limit; the launcher checks the device's

// fp16 / bf16 kernel (mma.sync m16n8k16).
//   kBlockM rows of Q per thread block, kNWarps warps each owning kBlockM / kNWarps consecutive rows
//   (kMTiles m16 tiles); kBlockN keys per K/V tile; kQInRegs: Q's A fragments stay in registers for
//   the whole loop (else they are re-read from shared memory with ldmatrix every key tile).
//   kStages = 1: one K and one V buffer, loads alternate (V(n) lands during S = Q K(n)^T, K(n-1)
//   during softmax and P V(n)); two barriers per key block. kStages = 2: K and V double-buffered,
//   block n-1 loads during all of block n's compute; one barrier per key block, twice the smem.
template <typename T_, int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, bool kQInRegs_, int kStages_,
          int kMinBlocks_>
struct FwdTraits {
  using T = T_;
  static constexpr bool kIsFp32 = false;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr bool kQInRegs = kQInRegs_;
  static constexpr int kStages = kStages_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kNWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;
  static constexpr int kPitch = kHeadDim + 8;  // elements per smem row
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks
  static constexpr int kSmemQ = kBlockM * kPitch * 2;
  static constexpr int kSmemK = kBlockN * kPitch * 2;  // one K (or V) stage
  static constexpr int kSmemBytes = kSmemQ + 2 * kStages * kSmemK;  // Q, K stages, V stages (Q also stages O)

  static_assert(sizeof(T) == 2, "fp16 / bf16 only");
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "tile widths are multiples of 32 up to 256");
  static_assert(kBlockM % (16 * kNWarps) == 0, "each warp owns whole m16 tiles");
  static_assert(kMTiles >= 1 && kMTiles <= 2, "one or two m16 tiles per warp");
  static_assert(kStages == 1 || kStages == 2, "single or double-buffered K/V");
  static_assert(kBlockN % 16 == 0, "P is fed to the PV mma in k16 slices");
  static_assert((kBlockM * kChunksPerRow) % kThreads == 0, "Q tile load: whole chunks per thread");
  static_assert((kBlockN * kChunksPerRow) % kThreads == 0, "K/V tile load: whole chunks per thread");
  static_assert(((kPitch / 8) & 1) == 1, "odd pitch in 16-byte units keeps ldmatrix conflict-free");
  static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory over the sm_90 limit");
};

// fp32 kernel (3xTF32 on mma.sync m16n8k8). Q and K rows are read as float2 (pitch = 8 mod 32
// words: each half-warp's 16 8-byte reads cover all 32 banks once); V is read as single words of
// two rows 2t, 2t+1 (pitch = 4 mod 32 words: rows 2t, 2t+1, columns g land in 32 distinct banks).
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNWarps_, int kMinBlocks_>
struct Fp32FwdTraits {
  using T = float;
  static constexpr bool kIsFp32 = true;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kNWarps = kNWarps_;
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr int kThreads = kNWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kNWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;
  static constexpr int kPitchQK = kHeadDim + 8;  // floats
  static constexpr int kPitchV = kHeadDim + 4;
  static constexpr int kChunksPerRow = kHeadDim / 4;  // 16-byte chunks
  static constexpr int kSmemQ = kBlockM * kPitchQK * 4;
  static constexpr int kSmemK = kBlockN * kPitchQK * 4;
  static constexpr int kSmemV = kBlockN * kPitchV * 4;
  static constexpr int kSmemBytes = kSmemQ + kSmemK + kSmemV;
  // k-steps (8 head-dim columns each) summed in one tensor-core accumulator before it is folded into
  // S with a round-to-nearest FADD (see fwd_kernel_fp32.cuh). 4 verified on the H200; 1 measured
  // no more accurate (the long-key error was the softmax rescale drift, see bench/NOTES-fwd.md).
  static constexpr int kSChunkSteps = 4;

  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "tile widths are multiples of 32 up to 256");
  static_assert(kBlockM % (16 * kNWarps) == 0, "each warp owns whole m16 tiles");
  static_assert(kMTiles >= 1 && kMTiles <= 2, "one or two m16 tiles per warp");
  static_assert((kHeadDim / 8) % kSChunkSteps == 0, "whole S chunks");
  static_assert(kBlockN % 8 == 0, "key tiles of n8");
  static_assert((kBlockM * kChunksPerRow) % kThreads == 0, "Q tile load: whole chunks per thread");
  static_assert((kBlockN * kChunksPerRow) % kThreads == 0, "K/V tile load: whole chunks per thread");
  static_assert(kPitchQK % 32 == 8 && kPitchV % 32 == 4, "bank-conflict-free pitches");
  static_assert(kSmemBytes <= kMaxSmemPerBlock, "shared memory over the sm_90 limit");
};


// ---- tile configuration per (element type, head-dim tile width) --------------------------------
// FwdTraits<T, width, kBlockM, kBlockN, kNWarps, kQInRegs, kStages, kMinBlocks>. Every number below
// was measured on the H200 (fp16, B*N = 16384, H = 2048/D (16 for D 256), N = 1k/4k/16k, non-causal /
// causal, TFLOP/s); full tables in bench/NOTES-fwd.md (runs 1 and 2).
//  - kStages = 2 (K/V double-buffered, one barrier per key block) lost 5-10% in every pairing tried
//    (W128: 289/224/308/269/303/282 vs 320/249/342/298/324/309; W64: 285/227/308/283/303/295 vs
//    294/237/322/296/311/302; W96: 291/231/302/274/300/295 vs 300/237/335/296/319/307), so every
//    width uses the FlashAttention-2 K/V alternation.
//  - 8 warps x 16 rows with Q in registers (1 CTA/SM at ~210-250 regs) lost to 4 warps everywhere.
template <typename T, int W>
struct FwdConfig;

template <typename T>
struct FwdConfig<T, 32> {  // not in the PERF grid: the width-64 shape (186 regs, 2 CTAs/SM)
  using Traits = FwdTraits<T, 32, 128, 64, 4, true, 1, 2>;
};
template <typename T>
struct FwdConfig<T, 64> {
  // 4 warps x 32 rows, Q in registers, 250 regs: 294/237/322/296/311/302. Q via smem 288/232/308/
  // 277/303/298; 8 warps x 16 rows 228/225/248/253 (4k/16k); 128x128 tiles 301/274/297/291 (4k/16k).
  using Traits = FwdTraits<T, 64, 128, 64, 4, true, 1, 2>;
};
template <typename T>
struct FwdConfig<T, 96> {
  // 4 warps x 32 rows, Q re-read from smem (Q + O + S do not fit 255 regs): 300/237/335/296/319/307;
  // 8 warps x 16 rows, Q in registers: 219/184/246/233/256/252.
  using Traits = FwdTraits<T, 96, 128, 64, 4, false, 1, 1>;
};
template <typename T>
struct FwdConfig<T, 128> {
  // 4 warps x 32 rows, Q from smem, 255 regs (8 B spill, one L1-resident LDL per key block):
  // 320/249/342/298/324/309. 8 warps x 16 rows, Q regs: 283/258/292/290 (4k/16k); 64-row blocks
  // with Q regs: 300/269/277/280; kBlockN 32: 330/287/315/295; kBlockN 128 (8 warps): 304/276/306/306.
  using Traits = FwdTraits<T, 128, 128, 64, 4, false, 1, 1>;
};
template <typename T>
struct FwdConfig<T, 160> {
  // 4 warps x 16 rows, Q regs: 261/214/282/232/267/266; Q smem 248/206/272/246/260/263;
  // 8 warps x 16 rows 247/195/269/242/275/277.
  using Traits = FwdTraits<T, 160, 64, 64, 4, true, 1, 2>;
};
template <typename T>
struct FwdConfig<T, 192> {
  // 4 warps x 16 rows, Q regs: 288/238/312/285/286/293; Q smem 290/231/313/250/287/294;
  // 8 warps x 16 rows 280/217/302/266/303/306.
  using Traits = FwdTraits<T, 192, 64, 64, 4, true, 1, 2>;
};
template <typename T>
struct FwdConfig<T, 256> {
  // 4 warps x 16 rows, 64x64 tiles, Q smem, 2 CTAs/SM: 303/254/316/270/292/292; 8 warps, 128-row
  // blocks (the FA2 shape): 268/219/283/262/292/293; kBlockN 48: 281/234/294/251/282/281;
  // kBlockN 32: 271/237/259/261 (4k/16k).
  using Traits = FwdTraits<T, 256, 64, 64, 4, false, 1, 2>;
};

// fp32 (3xTF32): Fp32FwdTraits<width, kBlockM, kBlockN, kNWarps, kMinBlocks>. TFLOP/s at N = 1k
// non-causal / causal (torch mem-efficient fp32: 34 / 30 at D 64, 44 / 39 at D 128).
template <int W>
struct Fp32FwdConfig;
template <>
struct Fp32FwdConfig<32> {  // 2 m16 tiles per warp: 50 / 47
  using Traits = Fp32FwdTraits<32, 128, 32, 4, 1>;
};
template <>
struct Fp32FwdConfig<64> {  // 128x32: 59 / 52 (64-row blocks 50 / 44; 128x64: 65 / 46)
  using Traits = Fp32FwdTraits<64, 128, 32, 4, 1>;
};
template <>
struct Fp32FwdConfig<128> {  // 128x16 (2 m16 tiles per warp): 55 / 45 (64x32: 51 / 44; 64x16: 46 / 41)
  using Traits = Fp32FwdTraits<128, 128, 16, 4, 1>;
};
template <>
struct Fp32FwdConfig<256> {  // 64x16: 37 / 32 (64x32 spills 220 B: 26 / 24)
  using Traits = Fp32FwdTraits<256, 64, 16, 4, 1>;
};

}  // namespace cuda
}  // namespace fa
