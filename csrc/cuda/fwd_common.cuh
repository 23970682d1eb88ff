// Pieces shared by the fp16/bf16 and fp32 forward kernels: block coordinates, the block's
// sequence and pointers, its key-block range, predicated tile loads (dense and paged), the score
// modifier and mask, and the "row sees no key" epilogue. (Sequence, window and paging rules
// themselves: attn_pieces.cuh.)
#pragma once
#include <math.h>
#include <stdint.h>

#include "cuda/attn_pieces.cuh"
#include "cuda/fwd_args.cuh"
#include "cuda/ptx.cuh"

namespace fa {
namespace cuda {

struct BlockCoord {
  int m_block, h, b;
};

// One flat grid.x index per (row block, head, batch): row blocks of one head are adjacent so that
// the CTAs resident at one time share that head's K/V in L2; grid.x allows 2^31-1 blocks, so long
// sequences and large B*H never hit the 65535 limit of grid.y/z. With a right-bounded mask (causal,
// window) the row blocks that see the most keys start first, so the cheap ones fill the tail.
__device__ __forceinline__ BlockCoord block_coord_of(const FwdArgs& a, int bid) {
  const int mb = bid % a.num_m_blocks;
  const int bh = bid / a.num_m_blocks;
  BlockCoord c;
  c.h = bh % a.heads;
  c.b = bh / a.heads;
  c.m_block = a.causal ? a.num_m_blocks - 1 - mb : mb;
  return c;
}
__device__ __forceinline__ BlockCoord block_coord(const FwdArgs& a) { return block_coord_of(a, static_cast<int>(blockIdx.x)); }

__device__ __forceinline__ SeqInfo fwd_seq(const FwdArgs& a, int b) {
  return seq_info(b, a.seqlen_q, a.seqlen_k, a.cu_seqlens_q, a.cu_seqlens_k, a.page_table ? a.seqlens_k : nullptr,
                  a.total_q, a.total_k, a.max_pages * a.page_size);
}

// True when a paged call's sequence belongs to the decode kernel (the row-block kernels skip it).
__device__ __forceinline__ bool fwd_decode_seq(const FwdArgs& a, const SeqInfo& seq) {
  return a.decode_rows > 0 && seq.nq * a.group <= a.decode_rows;
}
// True when this thread block has nothing to do: its row block lies past its sequence's queries,
// or (paged calls) the sequence belongs to the decode kernel.
__device__ __forceinline__ bool fwd_block_idle(const FwdArgs& a, const SeqInfo& seq, int row0) {
  return row0 >= seq.nq || fwd_decode_seq(a, seq);
}

// Global pointers of one thread block (row block starting at row0 of query head bc.h of its
// sequence): its Q and O rows, the kv head's K and V (key 0; dense / packed K/V), its lse entries.
// E: element bytes.
struct FwdBlockPtrs {
  const char* q;
  const char* k;
  const char* v;
  char* o;
  float* lse;
};
template <int E>
__device__ __forceinline__ FwdBlockPtrs block_ptrs(const FwdArgs& a, const BlockCoord& bc, const SeqInfo& seq, int row0) {
  const int hk = bc.h / a.group;
  const int64_t qr = seq.q_row0 + row0;
  FwdBlockPtrs p;
  p.q = static_cast<const char*>(a.q) + E * (bc.b * a.q_batch + bc.h * a.q_head + qr * a.q_row);
  p.k = static_cast<const char*>(a.k) + E * (bc.b * a.k_batch + hk * a.k_head + seq.k_row0 * a.k_row);
  p.v = static_cast<const char*>(a.v) + E * (bc.b * a.v_batch + hk * a.v_head + seq.k_row0 * a.v_row);
  p.o = static_cast<char*>(a.o) + E * (bc.b * a.o_batch + bc.h * a.o_head + qr * a.o_row);
  p.lse = a.lse == nullptr ? nullptr : a.lse + bc.b * a.lse_batch + bc.h * a.lse_head + qr;
  return p;
}

// The paged K (or V) rows of one block's kv head.
template <int E>
__device__ __forceinline__ PagedRows paged_rows(const FwdArgs& a, const BlockCoord& bc, const void* cache,
                                                int64_t head_stride, int64_t row_stride) {
  PagedRows r;
  r.base = static_cast<const char*>(cache) + E * ((bc.h / a.group) * head_stride);
  r.table = a.page_table + static_cast<int64_t>(bc.b) * a.max_pages;
  r.page = a.page_div;
  r.num_pages = a.num_pages;
  r.row_bytes = E * row_stride;
  return r;
}

// Cache rows of key blocks for the paged row-block kernels: one ring slot of kBlockN ints per key
// block in shared memory, each the cache row (page * page_size + slot) of one key, or -1 (past the
// sequence, or a page index out of range). Thread r < kBlockN owns row r of every slot. Two steps
// per block, a loop iteration apart: prefetch() reads the block's page indices from the table into
// a register, commit() turns them into cache rows in the ring; a loader then needs one shared read
// and one multiply per row (run 3: with the page arithmetic in the loaders, 16 rows per thread per
// block, paged prefill ran at 0.67x dense). At step n the kernels commit block n - 2 and prefetch
// block n - 3, while their loaders read the slots of n and n - 1: kSlots = 4 keeps them apart.
template <int kBlockN, int kThreads>
struct PageRing {
  static_assert(kBlockN <= kThreads, "one ring row per thread");
  static constexpr int kSlots = 4;
  static constexpr int kBytes = kSlots * kBlockN * 4;
  int* rows;    // the ring in shared memory
  int pending;  // page index of row tid of the prefetched block (-1: none)
  __device__ __forceinline__ void prefetch(const PagedRows& pr, int nb, int nk, int tid) {
    const int t = nb * kBlockN + tid;
    pending = nb >= 0 && tid < kBlockN && t < nk ? __ldg(pr.table + pr.page.div(t)) : -1;
  }
  __device__ __forceinline__ void commit(const PagedRows& pr, int nb, int nk, int tid) {
    const int t = nb * kBlockN + tid;
    if (nb >= 0 && tid < kBlockN) rows[(nb & (kSlots - 1)) * kBlockN + tid] = t < nk ? pr.row_index(t, pending) : -1;
  }
  // Both steps at once (the prologue; the caller synchronises before the rows are read).
  __device__ __forceinline__ void fill_now(const PagedRows& pr, int nb, int nk, int tid) {
    prefetch(pr, nb, nk, tid);
    commit(pr, nb, nk, tid);
  }
  __device__ __forceinline__ int row(int nb, int r) const { return rows[(nb & (kSlots - 1)) * kBlockN + r]; }
};

// Key blocks [*n_min, *n_max) that the rows [row0, row0 + block_m) of this block may see (empty
// when none of them sees a key).
template <int kBlockM, int kBlockN>
__device__ __forceinline__ void key_block_range(const KeyWindow& w, int row0, int* n_min, int* n_max) {
  int kmin, kmax;
  w.keys_of_rows(row0, row0 + kBlockM - 1, &kmin, &kmax);
  *n_min = kmin / kBlockN;
  *n_max = kmax > kmin ? (kmax + kBlockN - 1) / kBlockN : *n_min;
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
  // The same tile from a paged cache, block nb of `pr`, its cache rows read from `ring` (a row the
  // ring marks -1 is zero-filled like a row past valid_rows).
  template <class Ring>
  __device__ __forceinline__ void load(uint32_t s_tile, const PagedRows& pr, const Ring& ring, int nb,
                                       int valid_chunks) const {
    const int chunks_left = valid_chunks - c0;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int ri = ring.row(nb, r0 + i * kRowStep);
      const char* src = pr.base + pr.offset(ri) + c0 * 16;
#pragma unroll
      for (int j = 0; j < kChunksPerThread; ++j) {
        const bool pred = ri >= 0 && j * kTPR < chunks_left;
        cp_async_16(s_tile + s_off + i * kRowStep * kPitchBytes + j * kTPR * 16, pred ? src + j * kTPR * 16 : pr.base,
                    pred);
      }
    }
  }
  // Paged, reading each row's page index directly (kernels without a PageRing: fp32).
  __device__ __forceinline__ void load(uint32_t s_tile, const PagedRows& pr, int key0, int valid_rows,
                                       int valid_chunks) const {
    const int rows_left = valid_rows - r0;
    const int chunks_left = valid_chunks - c0;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      bool ok = i * kRowStep < rows_left;
      const char* src = ok ? pr.row(key0 + r0 + i * kRowStep, &ok) : pr.base;
      src += c0 * 16;
#pragma unroll
      for (int j = 0; j < kChunksPerThread; ++j) {
        const bool pred = ok && j * kTPR < chunks_left;
        cp_async_16(s_tile + s_off + i * kRowStep * kPitchBytes + j * kTPR * 16, pred ? src + j * kTPR * 16 : pr.base,
                    pred);
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

// Score modifier, sign and mask of one key block's scores (C fragments of this warp's rows):
// softcap (s -> softcap * tanh(s * softcap_scale)), else s = -s when the scale is negative
// (a.negate_s: the kernels use |scale|); then -inf for keys the row does not see (KeyWindow: past
// the sequence's keys, causal, window). The mask is evaluated only on tiles that need it for some
// row of this warp (rows [warp_row0, warp_row1]). n: the key block (kBlockN keys); row_base: this
// lane's first row within the sequence (row0 + the warp's first row + g). kPrecise: fp32-accurate tanh (fp32).
// score_mod_and_mask_at: the same with the modifier (kScoreNone / kScoreSoftcap / kScoreNegate,
// score_mod_of) and the mask test (masked) decided by the caller once per call or tile.
constexpr int kScoreNone = 0, kScoreSoftcap = 1, kScoreNegate = 2;
__device__ __forceinline__ int score_mod_of(const FwdArgs& a) {
  return a.softcap > 0.f ? kScoreSoftcap : a.negate_s ? kScoreNegate : kScoreNone;
}
template <int kBlockN, bool kPrecise, int kMT, int kNT>
__device__ __forceinline__ void score_mod_and_mask_at(float (&s)[kMT][kNT][4], const FwdArgs& a, const KeyWindow& w,
                                                      int n, int mod, bool masked, int row_base, int t,
                                                      bool vote_lower_only = false) {
  if (mod == kScoreSoftcap) {
    // the polynomial for the whole tile where its scores are in range, else the per-score form (softcap_scores). The
    // branch is around whole loops: a per-score select ran both forms (fwd-softcap-poly.patch, fp32: 1.36-1.44x the
    // time without softcap at D 64 against 1.14-1.24x for tanhf alone, H100, fifty-third session); this form, fp32,
    // 1.09-1.14x at D 64, 1.04-1.06x at D 128 (against 1.15-1.17x / 1.07-1.10x for tanhf in the same run, H100,
    // fifty-fourth session). The fp16 / bf16 kernels take it too since the fifty-seventh session.
    // vote_lower_only: the upper half of the keys out of the vote (softcap_scores' lower_only), which is s[0, kN / 2)
    // only for a fragment of one m-tile (the Hopper forward's); ignored for any other.
    softcap_scores<kPrecise, kMT * kNT * 4>(&s[0][0][0], a.softcap, a.softcap_scale, kMT == 1 && vote_lower_only);
  } else if (mod == kScoreNegate) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = -s[mt][nt][e];
  }
  if (masked) {
    const int col0 = n * kBlockN + 2 * t;
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int row = row_base + mt * 16 + 8 * hr;
        const int lo = w.lo(row) - col0, hi = w.hi(row) - col0;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int c = nt * 8 + e;
            if (c < lo || c >= hi) s[mt][nt][2 * hr + e] = -INFINITY;
          }
      }
  }
}
template <int kBlockN, bool kPrecise, int kMT, int kNT>
__device__ __forceinline__ void score_mod_and_mask(float (&s)[kMT][kNT][4], const FwdArgs& a, const KeyWindow& w,
                                                   int n, int warp_row0, int warp_row1, int row_base, int t) {
  score_mod_and_mask_at<kBlockN, kPrecise>(s, a, w, n, score_mod_of(a), w.needs_mask(n * kBlockN, kBlockN, warp_row0, warp_row1),
                                           row_base, t);
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

// The lazy online-softmax step (FA_WS_LAZY_RESCALE; FlashAttention-4's conditional rescale, our
// own form) for one m-tile of wgmma C fragments, 16-bit P. The block's exponentials are taken
// against the row's reference max (row_max: the largest max so far, kept until a block's max passes
// it by more than kLazyRescaleLog2 in log2 units), so they need not wait for this block's max, its
// shuffles or a vote, and O is not rescaled at all in the common case: P then stays below 2^8
// (no 16-bit overflow; its relative rounding is the same at any magnitude) and l / lse are over the
// same reference, so the epilogue's O / l and lse = m + log(l) are unchanged in meaning. The block's
// max is computed beside the exponentials; where some row of the warp passes the bound (or a row sees
// its first key: a reference of -inf), the warp takes the exact step instead: the new max, alpha, and
// the exponentials again from s (still intact: P is written packed, never into s). Returns true when
// it did (warp-uniform), with alpha the factor O must be rescaled by; P packed as pack_p packs it.
constexpr float kLazyRescaleLog2 = 8.f;
template <typename T, int kNT>
__device__ __forceinline__ void exp_pack_sum(const float (&s)[1][kNT][4], uint32_t (&p)[kNT / 2][4], float m0, float m1,
                                             float sl2, float& rs0, float& rs1) {
  rs0 = 0.f;
  rs1 = 0.f;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    const float e0 = fast_exp2(fmaf(s[0][nt][0], sl2, -m0));
    const float e1 = fast_exp2(fmaf(s[0][nt][1], sl2, -m0));
    const float e2 = fast_exp2(fmaf(s[0][nt][2], sl2, -m1));
    const float e3 = fast_exp2(fmaf(s[0][nt][3], sl2, -m1));
    rs0 += e0;
    rs0 += e1;
    rs1 += e2;
    rs1 += e3;
    p[nt / 2][2 * (nt & 1)] = pack2<T>(e0, e1);
    p[nt / 2][2 * (nt & 1) + 1] = pack2<T>(e2, e3);
  }
}
template <typename T, int kNT>
__device__ __forceinline__ bool lazy_softmax_step(const float (&s)[1][kNT][4], uint32_t (&p)[kNT / 2][4],
                                                  float (&row_max)[1][2], float (&row_sum)[1][2], float (&alpha)[1][2],
                                                  float sl2) {
  const float r0 = row_max[0][0], r1 = row_max[0][1];
  const float m0 = r0 == -INFINITY ? 0.f : __fmul_rn(r0, sl2);
  const float m1 = r1 == -INFINITY ? 0.f : __fmul_rn(r1, sl2);
  float rs0, rs1;
  exp_pack_sum<T>(s, p, m0, m1, sl2, rs0, rs1);
  float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    x0 = fmaxf(x0, fmaxf(s[0][nt][0], s[0][nt][1]));
    x1 = fmaxf(x1, fmaxf(s[0][nt][2], s[0][nt][3]));
  }
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
  const bool need0 = r0 == -INFINITY ? x0 != -INFINITY : __fmul_rn(x0, sl2) - m0 > kLazyRescaleLog2;
  const bool need1 = r1 == -INFINITY ? x1 != -INFINITY : __fmul_rn(x1, sl2) - m1 > kLazyRescaleLog2;
  if (__any_sync(0xffffffffu, need0 || need1)) {
    const float n0 = fmaxf(r0, x0), n1 = fmaxf(r1, x1);
    const float k0 = n0 == -INFINITY ? 0.f : __fmul_rn(n0, sl2);
    const float k1 = n1 == -INFINITY ? 0.f : __fmul_rn(n1, sl2);
    const float a0 = r0 == -INFINITY ? 0.f : fast_exp2(m0 - k0);
    const float a1 = r1 == -INFINITY ? 0.f : fast_exp2(m1 - k1);
    exp_pack_sum<T>(s, p, k0, k1, sl2, rs0, rs1);
    row_max[0][0] = n0;
    row_max[0][1] = n1;
    row_sum[0][0] = fmaf(row_sum[0][0], a0, rs0);
    row_sum[0][1] = fmaf(row_sum[0][1], a1, rs1);
    alpha[0][0] = a0;
    alpha[0][1] = a1;
    return true;
  }
  row_sum[0][0] += rs0;
  row_sum[0][1] += rs1;
  return false;
}

// The same reference max where the softmax runs before the wait for P V (FA_WS_LAZY_RESCALE at D 192 / 256: O cannot be
// touched, nor P written, until that wait): a row moves its reference (and gets alpha != 1) only where this block's max
// passes it by more than kLazyRescaleLog2, so the step's vote on alpha skips O's rescale in nearly every block instead
// of only where no row's max moved. The exponentials still follow the block's max (s is overwritten with P, as in
// online_softmax_step); no vote here.
template <int kNT>
__device__ __forceinline__ void lazy_max_softmax_step(float (&s)[1][kNT][4], float (&row_max)[1][2], float (&row_sum)[1][2],
                                                      float (&alpha)[1][2], float sl2) {
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float r = row_max[0][hr];
    float x = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) x = fmaxf(x, fmaxf(s[0][nt][2 * hr], s[0][nt][2 * hr + 1]));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    const float m = r == -INFINITY ? 0.f : __fmul_rn(r, sl2);
    const bool need = r == -INFINITY ? x != -INFINITY : __fmul_rn(x, sl2) - m > kLazyRescaleLog2;
    const float n = need ? fmaxf(r, x) : r;
    const float k = n == -INFINITY ? 0.f : __fmul_rn(n, sl2);
    const float a = !need ? 1.f : r == -INFINITY ? 0.f : fast_exp2(m - k);
    row_max[0][hr] = n;
    float rs = 0.f;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = fast_exp2(fmaf(s[0][nt][2 * hr + e], sl2, -k));
        s[0][nt][2 * hr + e] = p;
        rs += p;
      }
    row_sum[0][hr] = fmaf(row_sum[0][hr], a, rs);
    alpha[0][hr] = a;
  }
}

}  // namespace cuda
}  // namespace fa
