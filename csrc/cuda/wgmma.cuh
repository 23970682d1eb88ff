// Inline-PTX wrappers for the Hopper (sm_90a) warpgroup instructions the sm_90 kernels use:
// wgmma's fence / commit / wait, the shared-memory matrix descriptor, and the proxy fence that makes
// cp.async writes visible to the tensor cores, and the cp.async loader of the swizzled layout
// (SwizzledTileLoader, end of file). The wgmma.mma_async m64nNk16 wrappers themselves
// (Wgmma<T, N>::ss / ::rs) are in wgmma_ops.cuh, written by scripts/generate_wgmma.py.
//
// Shared-memory tiles use the 128-byte swizzle: a tile of R rows x 64 16-bit columns is R rows of
// 128 bytes, and the 16-byte chunk j of row r is stored at chunk position j ^ (r % 8); wider tiles
// are several such 64-column blocks one after the other. Every 8-row group is one 1024-byte
// swizzle atom, so tile bases are 1024-byte aligned. The same physical layout serves
//   - K-major operands (Q as A, K as B of S = Q K^T): 8-row groups SBO = 1024 bytes apart, the
//     k-step of 16 columns starts 32 bytes further in the row (the hardware applies the XOR);
//   - the MN-major B of O = P V (V rows are keys = the k dimension, columns are d = the n
//     dimension, read with the transpose bit): 8-key groups SBO = 1024 bytes apart, 64-column
//     blocks LBO = R * 128 bytes apart.
//
// Accumulator fragment (m64nN, per warp w of the warpgroup, g = lane / 4, t = lane % 4):
//   d[4j + e], e = 0,1: row 16w + g,     column 8j + 2t + e
//   d[4j + e], e = 2,3: row 16w + g + 8, column 8j + 2t + e - 2
// i.e. the mma.sync m16n8 C fragment for each n8 tile j; the register A operand of the RS form has
// the mma.sync m16n8k16 A layout for the warp's 16 rows (see ptx.cuh).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/attn_pieces.cuh"
#include "cuda/ptx.cuh"
#include "cuda/wgmma_ops.cuh"

namespace fa {
namespace cuda {
namespace sm90 {

// Swizzle modes of the descriptor's bits 62-63.
constexpr uint64_t kSwizzle128B = 1;

// Descriptor of a shared-memory operand: start address, leading / stride byte offsets (all >> 4),
// base offset 0 (tiles are 1024-byte aligned), 128-byte swizzle.
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16) |
         (static_cast<uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32) | (kSwizzle128B << 62);
}

// A descriptor as its two 32-bit words. Offsets within a tile (k-steps, stages, buffers) change only
// the start-address field of the low word and never carry out of it (addresses are below 256 KiB),
// so adding one is a single 32-bit add; on a uint64_t it is two (add and add-with-carry), and for
// each wgmma ptxas builds the operand in uniform registers, where those adds go.
struct SmemDesc {
  uint32_t lo, hi;
  template <typename I>
  __device__ __forceinline__ SmemDesc operator+(I off) const {
    return SmemDesc{lo + static_cast<uint32_t>(off), hi};
  }
  __device__ __forceinline__ operator uint64_t() const { return (static_cast<uint64_t>(hi) << 32) | lo; }
};
__device__ __forceinline__ SmemDesc smem_desc_w(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  const uint64_t d = smem_desc(addr, lbo_bytes, sbo_bytes);
  return SmemDesc{static_cast<uint32_t>(d), static_cast<uint32_t>(d >> 32)};
}

// The offset of k-step ks (16 columns) in a K-major tile of `rows` rows, in descriptor units: column
// block ks / 4 (each rows x 128 bytes), byte 32 (ks % 4) of the row (the hardware applies the XOR).
__host__ __device__ constexpr uint32_t kstep(int ks, int rows) {
  return static_cast<uint32_t>(((ks / 4) * rows * 128 + (ks % 4) * 32) >> 4);
}

// v of lane 0 in every lane: the compiler then knows the value is the same across the warp (a
// warpgroup index from threadIdx is not, to it), and descriptors built from it can live in
// uniform registers instead of being moved there (R2UR) before each wgmma.
__device__ __forceinline__ int warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy shared-memory writes (cp.async, st.shared) made visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of these registers across an in-flight wgmma.
template <int N>
__device__ __forceinline__ void reg_fence(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void reg_fence_u32(uint32_t* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

// Register reallocation between warpgroups (setmaxnreg): the producer gives registers back, the
// consumers take them; every warp of a warpgroup executes the same one.
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
// Named barriers (ids 1..15; 0 is __syncthreads) over `count` threads, a multiple of 32.
__device__ __forceinline__ void named_bar_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

}  // namespace sm90

// cp.async loader into the swizzled layout: a tile of kRows rows x kColBlocks * 8 chunks of 16 bytes.
// Thread layout: kColBlocks * 8 threads per row, one chunk each, rows r0, r0 + kRowStep, ...; since
// kRowStep is a multiple of 8 the XOR (row % 8) is the same in every pass, so a thread's smem offsets
// are one base plus immediates. Only the first kUsed threads load (a multiple of 8 rows of chunks:
// all 256 at 1, 2 or 4 column blocks, 192 at 3).
template <int kRows, int kColBlocks, int kThreads>
struct SwizzledTileLoader {
  static constexpr int kChunks = kColBlocks * 8;
  static constexpr int kUsed = kThreads / (kChunks * 8) * (kChunks * 8);
  static constexpr int kRowStep = kUsed / kChunks;
  static constexpr int kPasses = kRows / kRowStep;
  static_assert(kUsed > 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0, "loader layout");

  int r0, c;
  uint32_t s_off;
  bool active;
  __device__ __forceinline__ explicit SwizzledTileLoader(int tid) {
    active = kUsed == kThreads || tid < kUsed;
    r0 = tid / kChunks;
    c = tid % kChunks;
    s_off = (c / 8) * kRows * 128 + r0 * 128 + (((c % 8) ^ (r0 & 7)) * 16);
  }
  __device__ __forceinline__ void load(uint32_t s_tile, const char* g, int64_t row_bytes, int valid_rows,
                                       int valid_chunks) const {
    if (!active) return;
    const char* src = g + r0 * row_bytes + c * 16;
    const int64_t step = kRowStep * row_bytes;
    const bool col_ok = c < valid_chunks;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const bool pred = col_ok && r0 + i * kRowStep < valid_rows;
      cp_async_16(s_tile + s_off + i * kRowStep * 128, pred ? src + i * step : g, pred);
    }
  }
  // The same tile from a paged cache: block nb of `pr`, its cache rows from `ring` (fwd_common's
  // PageRing; a row it marks -1 is zero-filled).
  template <class Ring>
  __device__ __forceinline__ void load(uint32_t s_tile, const PagedRows& pr, const Ring& ring, int nb,
                                       int valid_chunks) const {
    if (!active) return;
    const bool col_ok = c < valid_chunks;
    int ri[kPasses];  // every shared read first: no shared-memory latency between two cp.async
#pragma unroll
    for (int i = 0; i < kPasses; ++i) ri[i] = ring.row(nb, r0 + i * kRowStep);
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const bool pred = col_ok && ri[i] >= 0;
      cp_async_16(s_tile + s_off + i * kRowStep * 128, pred ? pr.base + pr.offset(ri[i]) + c * 16 : pr.base, pred);
    }
  }
};

}  // namespace cuda
}  // namespace fa
