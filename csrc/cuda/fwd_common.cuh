// Pieces shared by the fp16/bf16 and fp32 forward kernels: block coordinates, the causal key bound,
// predicated tile loads, and the "row sees no key" epilogue.
#pragma once
#include <math.h>
#include <stdint.h>

#include "cuda/fwd_args.cuh"
#include "cuda/ptx.cuh"

namespace fa {
namespace cuda {

struct BlockCoord {
  int m_block, h, b;
};

// One flat grid.x index per (row block, head, batch): row blocks of one head are adjacent so that
// the CTAs resident at one time share that head's K/V in L2; grid.x allows 2^31-1 blocks, so long
// sequences and large B*H never hit the 65535 limit of grid.y/z. Causal: within a head the row blocks
// that see the most keys start first, so the cheap ones fill the tail of the launch.
__device__ __forceinline__ BlockCoord block_coord(const FwdArgs& a) {
  const int bid = static_cast<int>(blockIdx.x);
  const int mb = bid % a.num_m_blocks;
  const int bh = bid / a.num_m_blocks;
  BlockCoord c;
  c.h = bh % a.heads;
  c.b = bh / a.heads;
  c.m_block = a.causal ? a.num_m_blocks - 1 - mb : mb;
  return c;
}

// Global pointers of one thread block (row block starting at row0 of query head bc.h): its Q and O
// rows, the kv head's K and V (key 0), its lse entries (null when not asked). E: element bytes.
struct FwdBlockPtrs {
  const char* q;
  const char* k;
  const char* v;
  char* o;
  float* lse;
};
template <int E>
__device__ __forceinline__ FwdBlockPtrs block_ptrs(const FwdArgs& a, const BlockCoord& bc, int row0) {
  const int hk = bc.h / a.group;
  FwdBlockPtrs p;
  p.q = static_cast<const char*>(a.q) + E * (bc.b * a.q_batch + bc.h * a.q_head + row0 * a.q_row);
  p.k = static_cast<const char*>(a.k) + E * (bc.b * a.k_batch + hk * a.k_head);
  p.v = static_cast<const char*>(a.v) + E * (bc.b * a.v_batch + hk * a.v_head);
  p.o = static_cast<char*>(a.o) + E * (bc.b * a.o_batch + bc.h * a.o_head + row0 * a.o_row);
  p.lse = a.lse == nullptr ? nullptr : a.lse + (static_cast<int64_t>(bc.b) * a.heads + bc.h) * a.seqlen_q + row0;
  return p;
}

// Number of key blocks that the rows [row0, row0 + block_m) of this block can see: 0 when none of
// them sees a key (causal with Nq > Nk, or Nk == 0). Causal is bottom-right aligned: row i sees keys
// j <= i + Nk - Nq.
template <int kBlockM, int kBlockN>
__device__ __forceinline__ int visible_key_blocks(const FwdArgs& a, int row0) {
  int n_keys = a.seqlen_k;
  if (a.causal) {
    const int last_row = min(a.seqlen_q, row0 + kBlockM) - 1;
    n_keys = min(n_keys, max(last_row + a.seqlen_k - a.seqlen_q + 1, 0));
  }
  return (n_keys + kBlockN - 1) / kBlockN;
}

// Copies [kRows x kChunks*16 bytes] tiles from global (row pitch row_bytes) to shared (row pitch
// kPitchBytes) with cp.async; rows >= valid_rows and 16-byte chunks >= valid_chunks are zero-filled.
// Thread layout: kTPR threads per row (the largest power of two <= 8 dividing kChunks), each taking
// chunks c0, c0 + kTPR, ... of rows r0, r0 + kRowStep, ...: a thread keeps one 64-bit base and one
// 64-bit row step, every other offset is an immediate, so the loader holds few registers across the
// main loop.
template <int kRows, int kChunks, int kPitchBytes, int kThreads>
struct TileLoader {
  static constexpr int kTPR = (kChunks % 8 == 0) ? 8 : (kChunks % 4 == 0) ? 4 : (kChunks % 2 == 0) ? 2 : 1;
  static constexpr int kChunksPerThread = kChunks / kTPR;
  static constexpr int kRowStep = kThreads / kTPR;
  static constexpr int kPasses = kRows / kRowStep;
  static_assert(kThreads % kTPR == 0 && kRows % kRowStep == 0, "tile rows must split evenly over the threads");

  int r0, c0;
  uint32_t s_off;  // this thread's first smem byte offset within the tile

  __device__ __forceinline__ explicit TileLoader(int tid) {
    r0 = tid / kTPR;
    c0 = tid % kTPR;
    s_off = r0 * kPitchBytes + c0 * 16;
  }
  // g: tile origin (row 0, column 0) in global memory.
  __device__ __forceinline__ void load(uint32_t s_tile, const char* g, int64_t row_bytes, int valid_rows,
                                       int valid_chunks) const {
    const char* src = g + r0 * row_bytes + c0 * 16;
    const int64_t step = kRowStep * row_bytes;
    const int rows_left = valid_rows - r0;
    const int chunks_left = valid_chunks - c0;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
#pragma unroll
      for (int j = 0; j < kChunksPerThread; ++j) {
        const bool pred = i * kRowStep < rows_left && j * kTPR < chunks_left;
        cp_async_16(s_tile + s_off + i * kRowStep * kPitchBytes + j * kTPR * 16,
                    pred ? src + i * step + j * kTPR * 16 : g, pred);
      }
    }
  }
};

// Every row of this block sees no key: O = 0 and lse = +inf (the API's convention).
template <int kBlockM, int kThreads>
__device__ __forceinline__ void write_empty_rows(const FwdArgs& a, char* go, float* glse, int q_rows,
                                                 int elem_bytes, int tid) {
  const int chunks = a.head_dim * elem_bytes / 16;
  for (int idx = tid; idx < q_rows * chunks; idx += kThreads) {
    const int r = idx / chunks, c = idx % chunks;
    *reinterpret_cast<uint4*>(go + r * a.o_row * elem_bytes + c * 16) = make_uint4(0, 0, 0, 0);
  }
  if (glse != nullptr) {
    for (int r = tid; r < q_rows; r += kThreads) glse[r] = INFINITY;
  }
}

// Sign and mask of one key block's scores (C fragments of this warp's rows): s = -s when the scale is
// negative (a.negate_s: the kernels use |scale|), and -inf for keys >= Nk and (causal) keys
// j > i + Nk - Nq. Only the ragged last key block and the blocks crossing the diagonal of the
// block's first row need the mask. n: the key block (kBlockN keys); row_base: this lane's first row
// (row0 + the warp's first row + g).
template <int kBlockN, int kMT, int kNT>
__device__ __forceinline__ void negate_and_mask(float (&s)[kMT][kNT][4], const FwdArgs& a, int n, int row0,
                                                int row_base, int t) {
  const int Nq = a.seqlen_q, Nk = a.seqlen_k;
  if (a.negate_s) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = -s[mt][nt][e];
  }
  if ((n + 1) * kBlockN > Nk || (a.causal && (n + 1) * kBlockN - 1 > row0 + Nk - Nq)) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = row_base + mt * 16 + 8 * hr;
        int lim = a.causal ? min(Nk, row + Nk - Nq + 1) : Nk;
        lim -= n * kBlockN + 2 * t;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (nt * 8 + e >= lim) s[mt][nt][2 * hr + e] = -INFINITY;
      }
  }
}

constexpr float kLn2 = 0.6931471805599453f;

// One online-softmax step (base 2) for this thread's rows of a key block. s holds the block's
// scores as mma C fragments ([m16 tile][n8 tile][4]: rows g and g+8, two columns each) and is
// overwritten with P = 2^(s*sl2 - m_sc); row_max (raw, unscaled) and row_sum are updated and
// alpha[mt][hr] receives the factor the row's O must be rescaled by. m_sc = m * scale * log2(e) is 0
// while the row has seen no key, so masked entries give 2^-inf = 0 and never NaN.
// alpha comes from the same rounded scaled maxima that P used (__fmul_rn: never contracted into an
// FMA), so it is exactly 1 while the row max is unchanged. Rescaling by 2^(m_old*sl2 - RN(m*sl2))
// instead multiplied l and O by a factor 1 +- 3e-7 at every key block: lse drifted by up to ~1e-5
// per 1000 keys and fp32 outputs lost accuracy (bench/NOTES-fwd.md).
template <int kMT, int kNT>
__device__ __forceinline__ void online_softmax_step(float (&s)[kMT][kNT][4], float (&row_max)[kMT][2],
                                                    float (&row_sum)[kMT][2], float (&alpha)[kMT][2],
                                                    float sl2) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const float m_old = row_max[mt][hr];
      float mx = m_old;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * hr], s[mt][nt][2 * hr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_sc = mx == -INFINITY ? 0.f : __fmul_rn(mx, sl2);
      const float a = m_old == -INFINITY ? 0.f : fast_exp2(__fmul_rn(m_old, sl2) - m_sc);
      row_max[mt][hr] = mx;
      float rs = 0.f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = fast_exp2(fmaf(s[mt][nt][2 * hr + e], sl2, -m_sc));
          s[mt][nt][2 * hr + e] = p;
          rs += p;
        }
      row_sum[mt][hr] = fmaf(row_sum[mt][hr], a, rs);
      alpha[mt][hr] = a;
    }
}

}  // namespace cuda
}  // namespace fa
