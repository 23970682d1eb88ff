// CPU backend: fa_fwd_cpu / fa_bwd_cpu (FlashAttention-2 forward and backward on the host).
//
// Layout of this file. The tile kernels live in the second half (after the #else below) and are
// compiled several times by including this very file again: once for the baseline ISA (SSE2 on
// x86-64, NEON on arm64) and, on x86-64 with GCC or Clang, twice more with the targets
// "avx2,fma,f16c" and "avx512f,avx512vl,avx512bw,avx512dq" + those (`#pragma GCC target` /
// `#pragma clang attribute`). The AVX-512 set is the AVX2 code (8-float vectors, now with 32
// registers) whose GEMMs take 16 columns per zmm register (gemm, FA_KAVX512).
// The entry points at the end pick the widest set the CPU has at run time, so the library needs no
// -march flag. The environment variable FA_CPU_ISA=avx2 or generic asks for a narrower set (used
// by cpu_check and test/cpu/kernel-sets.test.ts to test them all); buildInfo().cpuKernels names
// the set in use.
//
// Scheme (see fa_core.h for the exact semantics):
//   sequences every call is a list of `batch` sequences. Dense batches give them all the same
//             lengths; packed (varlen) ones give sequence b its own Nq_b, Nk_b and row offsets
//             (cu_seqlens), paged K/V a page table. A Seq (seq_of) says where a sequence's rows
//             live, and tiles are loaded through a RowLoc (row n at base + n * row, or in its page),
//             so the kernels below never do offset arithmetic of their own. Work lists are per
//             sequence: task t belongs to the sequence b with start[b] <= t < start[b + 1].
//   masks     causal and sliding window are one rule: query row i of a sequence sits at key
//             position p = i + Nk_b - Nq_b and sees keys [max(0, p - left), min(Nk_b, p + right + 1))
//             (row_lo / row_hi; kUnbounded stands for a side without limit, causal is right = 0).
//             Both ends grow with i, so a query block sees one contiguous key range (block_keys)
//             and a key block is seen by one contiguous range of query rows (block_queries):
//             nothing outside them is visited. Tiles that every row sees completely (tile_full)
//             take the unmasked path; the others get per-row column limits [lo, hi).
//   softcap   right after the S GEMM each score s becomes softcap * tanh(scale * s / softcap) (times
//             log2(e)), with a vectorised tanh (vtanh, ~2e-7 relative). The backward also keeps
//             1 - tanh^2 per score and multiplies dS by it (the exact gradient); it is computed as
//             u (2 - u) with u = 1 - |tanh|, so it stays accurate where tanh rounds to +-1.
//   forward   one task per (sequence, block of query rows, query heads), streaming over the key
//             tiles of block_keys (block_n keys each, starting at its first key; paged K/V read in
//             place also end tiles at page boundaries). A task's tile rows are block_m query rows of
//             one head, or, for sequences shorter than block_m (decode steps, short chunks), the
//             query rows of several heads of one GQA group (FwdPack), which then share each K / V
//             tile; in calls whose sequences all have one query, those of several kv heads
//             (Geometry::kvh), so that a task reads whole token rows of K / V. Per tile:
//             S^T = K Q^T (Q is transposed once per task, so K and V tiles are used as loaded),
//             online softmax in the log2 domain (scores times scale*log2(e), exp2; running max m
//             and sum l per row, old O rescaled when the max grows), O += P V; O is normalised
//             once at the end and LSE = (m + log2 l) * ln 2. Tasks of at most 8 rows per kv head
//             (a decode step's group) compute S and P V with kernels that read K and V in place
//             (narrow_tile) instead of the GEMMs. A call with few tasks and long key ranges splits
//             each task's keys into pieces (fwd_splits), whose partial O, m and l a second pass
//             combines.
//   backward  pass 0: Dvec = rowsum(dO * O) per query row (float32 workspace laid out as lse).
//             Then one of two race-free schemes, chosen from the shape alone (see plan_fused):
//             fused:    (dense batches only) one task per (batch, kv head, group of key blocks).
//                       For each key block, for each query head of the GQA group and each query
//                       block of block_queries: recompute S and P = exp(S - LSE),
//                       dV += P^T dO, dP = dO V^T, dS = P (dP - Dvec), dK += dS^T Q, and
//                       dQpart[key group] += dS K (5 tile GEMMs). A second pass adds the dQ
//                       partials in key-group order.
//             two-pass: one task per (sequence, kv head, key block) for dK, dV as above, then one
//                       task per (sequence, head, query block) recomputing P and dS for dQ (7 tile
//                       GEMMs, but no dQ workspace). Packed batches always use it.
//   Every output element is produced by exactly one task with a fixed summation order, so the
//   results are bit-identical for any thread count or schedule. A row that sees no key gets
//   O = 0, LSE = +inf and dQ = 0; a key that no row sees gets dK = dV = 0. Host index arrays are
//   validated before any work (fwd_sequences / bwd_sequences), paged ones for every page the
//   call reads (and only those: with a window, pages that no query sees may hold any index).
//
// All tile arithmetic but the narrow forward tasks' runs on contiguous float scratch (per thread:
// O((block_m + block_n) * head_dim + block_m * block_n) floats) through one register-blocked GEMM
// micro-kernel (6 rows x 2 vectors of accumulators, any strides for the broadcast operand).
// fp16 / bf16 inputs are converted to float as tiles are loaded (fp32 inputs with head_dim % 8 == 0
// are read in place when the tile's rows are evenly strided, i.e. not spread over several pages);
// outputs are rounded once when stored.

#ifndef FA_CPU_KERNEL_PASS
// =============================================================================================
// Part 1: shared declarations, then the two kernel instantiations, then the C entry points.
// =============================================================================================
#include <cstring>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/half.h"
#include "cpu/thread_pool.h"
#include "fa_core.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define FA_CPU_X86_DISPATCH 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define FA_CPU_X86_DISPATCH 0
#endif

namespace fa {
namespace cpu {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

inline int round_up(int x, int m) { return (x + m - 1) / m * m; }

// Problem geometry shared by all tasks of one call.
// A window side without limit: larger than any distance between two positions of a sequence.
constexpr int64_t kUnbounded = int64_t(1) << 40;

// Problem geometry shared by all tasks of one call.
struct Geometry {
  int B, Nq, Nk, H, Hkv, D, group;  // Nq, Nk: sequence lengths (packed or paged: the largest)
  int64_t left, right;  // query row at key position p sees keys p - left .. p + right (kUnbounded: no limit)
  bool softcap;         // score modifier on: score = softcap * tanh(scale * q.k / softcap)
  float cap_in;         // scale / softcap
  float cap_out;        // softcap * log2(e): the modified score in the log2 domain
  int bm, bn;        // tile sizes
  int kvh;           // forward of single-query calls: kv heads per task (FwdPack; 1 otherwise)
  int Dp;            // D rounded up to 8 (row stride of row-major float tiles)
  int bmp, bnp;      // bm, bn rounded up to 8 (row strides of score tiles and transposed tiles)
  bool direct;       // fp32 with D % 8 == 0: read q/k/v/dO in place instead of converting copies
  bool page_cap;     // paged K/V read in place: forward key tiles also end at page boundaries
  int nqb, nkb;      // dense batches: number of query / key blocks
  float scale;       // softmax scale
  float scale_log2;  // scale * log2(e)
  fa_dtype dtype;
  // Where the sequences live (see seq_of). Dense batches: all null.
  const int32_t* cu_q;        // packed queries: [B + 1] row offsets
  const int32_t* cu_k;        // packed K/V: [B + 1] row offsets
  const int32_t* seqlens_k;   // paged K/V: [B] tokens per sequence
  const int32_t* page_table;  // paged K/V: [B, max_pages]
  int page_size, max_pages;
  int64_t lse_hs;  // lse / dvec: elements between heads (Nq for dense batches, total_q packed)
};

// One sequence of the call: where its rows are and how long it is.
struct Seq {
  int64_t qb, q0;        // q, o, dout, dq: batch index and first row
  int64_t kb, k0;        // k, v, dk, dv: batch index and first row (unused when paged)
  int64_t nq, nk;        // its query rows and keys
  int64_t shift;         // nk - nq: row i sits at key position i + shift
  int64_t lse0;          // lse / dvec offset of (head 0, row 0); heads are g.lse_hs apart
  const int32_t* pages;  // paged K/V: its row of the page table; else null
};

inline Seq seq_of(const Geometry& g, int64_t b) {
  Seq s;
  if (g.cu_q != nullptr) {
    s.qb = 0;
    s.q0 = g.cu_q[b];
    s.nq = (int64_t)g.cu_q[b + 1] - g.cu_q[b];
    s.lse0 = s.q0;
  } else {
    s.qb = b;
    s.q0 = 0;
    s.nq = g.Nq;
    s.lse0 = b * g.H * (int64_t)g.Nq;
  }
  s.pages = nullptr;
  if (g.page_table != nullptr) {
    s.kb = s.k0 = 0;
    s.nk = g.seqlens_k[b];
    s.pages = g.page_table + b * (int64_t)g.max_pages;
  } else if (g.cu_k != nullptr) {
    s.kb = 0;
    s.k0 = g.cu_k[b];
    s.nk = (int64_t)g.cu_k[b + 1] - g.cu_k[b];
  } else {
    s.kb = b;
    s.k0 = 0;
    s.nk = g.Nk;
  }
  s.shift = s.nk - s.nq;
  return s;
}

// Sequence of task t in a work list where sequence b owns tasks start[b] .. start[b + 1] - 1.
inline int64_t task_seq(const int64_t* start, int B, int64_t t) {
  return std::upper_bound(start, start + B + 1, t) - start - 1;
}

inline int64_t elem_offset(const fa_strides& s, int64_t b, int64_t n, int64_t h) {
  return b * s.batch + n * s.row + h * s.head;
}

// Rows of one head of one sequence: row n is at element offset at(n).
struct RowLoc {
  int64_t base;          // offset of row 0 (or of the head, when paged)
  int64_t row;           // elements between consecutive rows (of one page)
  const int32_t* pages;  // paged: rows [j * page_size, (j + 1) * page_size) are in page pages[j]
  int64_t page;          // elements between pages
  int page_size;
  int64_t at(int64_t n) const {
    if (pages == nullptr) return base + n * row;
    return in_page(n / page_size, n % page_size);
  }
  // Paged: row `off` of the sequence's j-th page.
  int64_t in_page(int64_t j, int64_t off) const { return base + (int64_t)pages[j] * page + off * row; }
  // True when rows n0 .. n0 + rows - 1 are evenly strided (one page).
  bool even(int64_t n0, int rows) const { return pages == nullptr || n0 % page_size + rows <= page_size; }
};

inline RowLoc q_rows(const fa_strides& st, const Seq& s, int64_t h) {
  return {elem_offset(st, s.qb, s.q0, h), st.row, nullptr, 0, 1};
}
inline RowLoc k_rows(const Geometry& g, const fa_strides& st, const Seq& s, int64_t hk) {
  if (s.pages != nullptr) return {hk * st.head, st.row, s.pages, st.row * g.page_size, g.page_size};
  return {elem_offset(st, s.kb, s.k0, hk), st.row, nullptr, 0, 1};
}

// ---- visibility (causal / sliding window), see the header ------------------------------------
// Query row i sees keys [row_lo, row_hi); it sees none when row_lo >= row_hi.
inline int64_t row_lo(const Geometry& g, const Seq& s, int64_t i) {
  return std::max<int64_t>(0, i + s.shift - g.left);
}
inline int64_t row_hi(const Geometry& g, const Seq& s, int64_t i) {
  return std::min<int64_t>(s.nk, i + s.shift + g.right + 1);
}

struct Range {
  int64_t lo, hi;  // [lo, hi), empty when lo >= hi
};

// Keys seen by some row of [i0, i0 + rows). Rows that see nothing are those with
// i + shift + right < 0 (left, right >= 0): they come first, and the rest see one contiguous range.
inline Range block_keys(const Geometry& g, const Seq& s, int64_t i0, int64_t rows) {
  const int64_t first = std::max<int64_t>(i0, -s.shift - g.right);  // first row that sees a key
  const int64_t last = i0 + rows - 1;
  if (first > last || s.nk == 0) return {0, 0};
  return {row_lo(g, s, first), row_hi(g, s, last)};
}

// Query rows that see some key of [k0, k0 + nc) (0 <= k0 < k0 + nc <= nk).
inline Range block_queries(const Geometry& g, const Seq& s, int64_t k0, int64_t nc) {
  return {std::max<int64_t>(0, k0 - s.shift - g.right), std::min<int64_t>(s.nq, k0 + nc + g.left - s.shift)};
}

// True when every row of [i0, i0 + rows) sees every key of [k0, k0 + nc): no mask needed.
inline bool tile_full(const Geometry& g, const Seq& s, int64_t i0, int rows, int64_t k0, int nc) {
  return row_lo(g, s, i0 + rows - 1) <= k0 && row_hi(g, s, i0) >= k0 + nc;
}

// Forward tasks of at most this many tile rows per kv head (a decode step's group) use the narrow
// kernels (narrow_tile), which read K / V in place.
constexpr int kNarrowRows = 8;

// GQA packing in the forward. A task takes `heads` query heads of one kv group (a divisor of the
// group) and up to `qrows` = bm / heads query rows of each, as tile rows r = qi * heads + j (query
// row i0 + qi of head h0 + j), so the heads of a group share every K / V tile: it is converted
// (fp16 / bf16) and read once for them instead of once per head. `heads` is the largest divisor
// d of the group with d x (query rows) <= bm: a decode step (one query) packs the whole group, a
// sequence of more than bm / 2 rows keeps one head per task. Calls whose sequences all have one
// query may also pack the groups of g.kvh kv heads (size_fwd_rows): heads = group * kvh, one query
// row, tile row r = head h0 + r (kv head h0 / group + r / group). The choice depends on the shape
// and the tile size only, never on the thread count.
struct FwdPack {
  int heads;  // query heads per task
  int qrows;  // query rows per task (bm / heads)
  int kvh;    // kv heads per task: heads = group * kvh when kvh > 1 (single-query calls, g.kvh)
};
inline FwdPack fwd_pack(const Geometry& g, int64_t nq) {
  if (g.kvh > 1) return {g.group * g.kvh, 1, g.kvh};
  const int64_t used = std::max<int64_t>(1, std::min<int64_t>(nq, g.bm));
  int heads = 1;
  for (int d = g.group; d > 1; --d)
    if (g.group % d == 0 && d * used <= g.bm) {
      heads = d;
      break;
    }
  return {heads, g.bm / heads, 1};
}

struct FwdArgs {
  Geometry g;
  const void *q, *k, *v;
  void* o;
  float* lse;
  fa_strides qs, ks, vs, os;
  const int64_t* q_start;  // [B + 1]: first task of each sequence (H / heads x its query blocks, FwdPack)
  // Key splits (fwd_splits): with splits > 1 work item w is split w % splits of task w / splits over
  // its share of the task's keys, and leaves its unnormalised O rows and their m, l in `part`
  // ([task][split], part_stride floats each: bm rows of Dp, then bm m's, then bm l's); the combine
  // pass (fwd_combine_task) then finishes each task's rows.
  int splits = 1;
  float* part = nullptr;
  int64_t part_stride = 0;
};

// Key splits of the forward: a call with fewer than kSplitTasks tasks (a decode step of one or a few
// sequences) splits each task's keys into up to kSplitTasks / tasks pieces (and no more than the
// longest sequence's keys times the kv heads per task (g.kvh) / kSplitMinKeys), so that more
// cores share it; the pieces' partial results are combined by their running max and sum. The count depends on the
// shape only (task count, longest sequence), never on the thread count, so results stay
// bit-identical for any number of threads.
constexpr int64_t kSplitTasks = 32;
constexpr int64_t kSplitMinKeys = 1024;
constexpr int64_t kSplitBudget = int64_t(16) << 20;  // floats of partial results (64 MiB)
// A caller's split count (num_splits > 0, pagedAttention's numSplits) is taken as given, up to one
// split per key tile and as far as the partial results fit kSplitBudget (a large prefill given a
// split count keeps fewer splits). part_stride: floats of one split's partial result.
inline int fwd_splits(const Geometry& g, int64_t tasks, int requested, int64_t part_stride) {
  int64_t n = 1;
  if (requested > 0) n = std::min<int64_t>(requested, g.nkb);
  else if (tasks > 0 && tasks < kSplitTasks)
    n = std::min<int64_t>((kSplitTasks + tasks - 1) / tasks, (int64_t)g.Nk * g.kvh / kSplitMinKeys);
  if (tasks > 0) n = std::min<int64_t>(n, kSplitBudget / (tasks * part_stride));
  return (int)std::max<int64_t>(1, n);
}

// A forward task's rows (FwdPack): tile row r is query row i0 + r / pk.heads of head
// h0 + r % pk.heads of sequence s.
struct FwdTile {
  Seq s;
  FwdPack pk;
  int64_t i0, h0;
  int qn, rows;  // query rows, tile rows (qn x heads)
};
inline FwdTile fwd_tile(const FwdArgs& a, int64_t task) {
  const Geometry& g = a.g;
  FwdTile tl;
  const int64_t b = task_seq(a.q_start, g.B, task);
  tl.s = seq_of(g, b);
  tl.pk = fwd_pack(g, tl.s.nq);
  const int64_t nqb = (tl.s.nq + tl.pk.qrows - 1) / tl.pk.qrows;
  const int64_t t = task - a.q_start[b];
  tl.h0 = t / nqb * tl.pk.heads;
  tl.i0 = (nqb - 1 - t % nqb) * tl.pk.qrows;  // heavy (causal) blocks first
  tl.qn = (int)std::min<int64_t>(tl.pk.qrows, tl.s.nq - tl.i0);
  tl.rows = tl.qn * tl.pk.heads;
  return tl;
}
// Element offset of tile row r in a [.., rows, heads, D] tensor (q, o) with strides st.
inline int64_t fwd_row_at(const fa_strides& st, const FwdTile& tl, int r) {
  return q_rows(st, tl.s, tl.h0 + r % tl.pk.heads).at(tl.i0 + r / tl.pk.heads);
}

struct BwdArgs {
  Geometry g;
  const void *dout, *q, *k, *v, *o;
  const float* lse;
  void *dq, *dk, *dv;
  fa_strides dos, qs, ks, vs, os, dqs, dks, dvs;
  float* dvec;  // workspace laid out as lse: rowsum(dO * O)
  int64_t dot_B, dot_N;     // pass 0 sees the rows as [dot_B, dot_N] (packed: [1, total_q])
  const int64_t* q_start;   // two-pass dQ tasks: [B + 1], H x query blocks per sequence
  const int64_t* kv_start;  // two-pass dK / dV tasks: [B + 1], Hkv x key blocks per sequence
  // fused scheme only: dQ partial sums, [slab unit][key group][group head][Nq][Dp]
  float* dq_part;
  int n_groups;       // key groups per (batch, kv head)
  int group_blocks;   // key blocks per key group
  int64_t slab_u0;    // first (batch, kv head) unit of the current slab
  int slab_n;         // units in the current slab
};

// Per-thread scratch layout (in floats; every buffer starts on a 64-byte boundary). One layout
// serves the forward and both backward passes; each kernel uses its own subset.
struct Scratch {
  int64_t qr, dor, kr, vr, acc, dk, dv;  // row-major float tiles, [rows][Dp]
  int64_t qt, dot, kt, vt;               // transposed tiles, [D][bmp] (q, dO) or [D][bnp] (k, v)
  int64_t s, dp;                         // score tiles, [bm][bnp] or [bn][bmp]
  int64_t dt;                            // softcap only: 1 - tanh^2 of the scores, [bm][bnp]
  int64_t m, l, alpha, lse2, dvec;       // per query row, bmp entries
  int64_t vlo, vhi;                      // per query row (int32): visible columns [vlo, vhi) of a tile
  int64_t tmp;                           // 8 converted rows for transposing loads, [8][Dp]
  int64_t kp, vp;                        // forward, narrow tasks: a tile's K / V row addresses, [bn]
  int64_t kp2, vp2;                      // ... and the next tile's (asked for while this one is computed)
  int64_t total;
  explicit Scratch(const Geometry& g) {
    int64_t at = 0;
    auto take = [&at](int64_t n) { const int64_t here = at; at += (n + 15) / 16 * 16; return here; };
    const int64_t rows_m = (int64_t)g.bm * g.Dp, rows_n = (int64_t)g.bn * g.Dp;
    qr = take(rows_m);
    dor = take(rows_m);
    acc = take(rows_m);
    kr = take(rows_n);
    vr = take(rows_n);
    dk = take(rows_n);
    dv = take(rows_n);
    qt = take((int64_t)g.D * g.bmp);
    dot = take((int64_t)g.D * g.bmp);
    kt = take((int64_t)g.D * g.bnp);
    vt = take((int64_t)g.D * g.bnp);
    const int64_t tile = std::max((int64_t)g.bm * g.bnp, (int64_t)g.bn * g.bmp);
    s = take(tile);
    dp = take(tile);
    dt = g.softcap ? take((int64_t)g.bm * g.bnp) : 0;
    m = take(g.bmp);
    l = take(g.bmp);
    alpha = take(g.bmp);
    lse2 = take(g.bmp);
    dvec = take(g.bmp);
    vlo = take(g.bmp);
    vhi = take(g.bmp);
    tmp = take(8 * (int64_t)g.Dp);
    kp = take((int64_t)g.bn * (int64_t)(sizeof(const char*) / sizeof(float)));
    vp = take((int64_t)g.bn * (int64_t)(sizeof(const char*) / sizeof(float)));
    kp2 = take((int64_t)g.bn * (int64_t)(sizeof(const char*) / sizeof(float)));
    vp2 = take((int64_t)g.bn * (int64_t)(sizeof(const char*) / sizeof(float)));
    total = at;
  }
};

constexpr int kDotRowsPerTask = 256;  // backward pass 0 granularity


}  // namespace cpu
}  // namespace fa

// ---- kernel instantiations -------------------------------------------------------------------
#define FA_CPU_KERNEL_PASS 1

#define FA_KNS k_generic
#define FA_KVL 4
#define FA_KAVX2 0
#include "flash_cpu.cpp"  // this file again (found next to itself)
#undef FA_KNS
#undef FA_KVL
#undef FA_KAVX2

#if FA_CPU_X86_DISPATCH
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
#define FA_KNS k_avx2
#define FA_KVL 8
#define FA_KAVX2 1
#include "flash_cpu.cpp"  // this file again (found next to itself)
#undef FA_KNS
#undef FA_KVL
#undef FA_KAVX2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c")
#endif
#define FA_KNS k_avx512
#define FA_KVL 8
#define FA_KAVX2 1
#define FA_KAVX512 1
#ifndef FA_KMRW
#define FA_KMRW 8
#endif
#include "flash_cpu.cpp"  // this file again (found next to itself)
#undef FA_KNS
#undef FA_KVL
#undef FA_KAVX2
#undef FA_KAVX512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

#undef FA_CPU_KERNEL_PASS

// ---- dispatch, validation, entry points ------------------------------------------------------
namespace fa {
namespace cpu {
namespace {

struct KernelSet {
  const char* name;
  void (*fwd)(const FwdArgs&, int64_t, float*);
  void (*combine)(const FwdArgs&, int64_t);
  void (*dot)(const BwdArgs&, int64_t);
  void (*kv)(const BwdArgs&, int64_t, float*);
  void (*q)(const BwdArgs&, int64_t, float*);
  void (*fused)(const BwdArgs&, int64_t, float*);
  void (*reduce)(const BwdArgs&, int64_t);
};

const KernelSet kGeneric = {"generic",
                            k_generic::fwd_task,
                            k_generic::fwd_combine_task,
                            k_generic::bwd_dot_task,
                            k_generic::bwd_kv_task,
                            k_generic::bwd_q_task,
                            k_generic::bwd_fused_task,
                            k_generic::bwd_reduce_task};
#if FA_CPU_X86_DISPATCH
const KernelSet kAvx2 = {"avx2",
                         k_avx2::fwd_task,
                         k_avx2::fwd_combine_task,
                         k_avx2::bwd_dot_task,
                         k_avx2::bwd_kv_task,
                         k_avx2::bwd_q_task,
                         k_avx2::bwd_fused_task,
                         k_avx2::bwd_reduce_task};
const KernelSet kAvx512 = {"avx512",
                           k_avx512::fwd_task,
                           k_avx512::fwd_combine_task,
                           k_avx512::bwd_dot_task,
                           k_avx512::bwd_kv_task,
                           k_avx512::bwd_q_task,
                           k_avx512::bwd_fused_task,
                           k_avx512::bwd_reduce_task};
bool cpu_has_avx2() {
  static const bool ok = [] {
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;  // F16C: CPUID.1:ECX bit 29
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __get_cpuid(1, &a, &b, &c, &d) &&
           ((c >> 29) & 1u);
  }();
  return ok;
}

// The AVX2 set's requirements and AVX-512 F / VL / BW / DQ with the zmm state enabled by the OS
// (libgcc's and compiler-rt's __builtin_cpu_supports check XCR0 for the AVX-512 features).
bool cpu_has_avx512() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  }();
  return ok;
}
#endif

// FA_CPU_ISA=generic / avx2 / avx512 asks for a set (honoured when the CPU has it); otherwise the
// widest the CPU has.
const KernelSet& kernels() {
  const char* env = getenv("FA_CPU_ISA");
  if (env != nullptr && strcmp(env, "generic") == 0) return kGeneric;
#if FA_CPU_X86_DISPATCH
  const bool want2 = env != nullptr && strcmp(env, "avx2") == 0;
  if (!want2 && cpu_has_avx512()) return kAvx512;
  if (cpu_has_avx2()) return kAvx2;
#endif
  return kGeneric;
}

// Default tiles, from measurements on an AVX2 Zen 3 core (fp32 and fp16, head dims 32..256):
// 64 x 64 was at or within noise of the best everywhere; 32-row tiles lose ~10% to per-tile
// overhead, 128-wide tiles fall out of L1/L2. Larger user values are clamped to kMaxBlock.
constexpr int kDefaultBlockM = 64;
constexpr int kDefaultBlockN = 64;
constexpr int kMaxBlock = 1024;

// The dtype field as an integer: a caller (e.g. the JS binding) may store any value there, and
// loading an out-of-range value through the enum type would be undefined behaviour in C++.
int raw_dtype(const fa_dtype* field) {
  int v = -1;
  if (sizeof(fa_dtype) == sizeof(int)) memcpy(&v, field, sizeof v);
  return v;
}

// Sets the tile sizes for sequences of at most Nq queries and Nk keys.
void size_tiles(Geometry* g, int Nq, int Nk, int bm, int bn) {
  g->Nq = Nq;
  g->Nk = Nk;
  g->bm = std::max(1, std::min({bm > 0 ? bm : kDefaultBlockM, std::max(Nq, 1), kMaxBlock}));
  g->kvh = 1;
  g->bn = std::max(1, std::min({bn > 0 ? bn : kDefaultBlockN, std::max(Nk, 1), kMaxBlock}));
  g->bmp = round_up(g->bm, 8);
  g->bnp = round_up(g->bn, 8);
  g->nqb = (Nq + g->bm - 1) / g->bm;
  g->nkb = (Nk + g->bn - 1) / g->bn;
}

// Validates the shape fields shared by forward and backward; fills `g` on success (dense
// sequences, no mask, no score modifier: see set_scores and the *_sequences functions).
fa_status make_geometry(const char* fn, int B, int Nq, int Nk, int H, int Hkv, int D, float scale,
                        int dtype_raw, int bm, int bn, int num_threads, Geometry* g) {
  const std::string pre = std::string(fn) + ": ";
  if (B < 0 || Nq < 0 || Nk < 0)
    return fail(FA_ERR_INVALID, pre + "batch and sequence lengths must be >= 0 (got batch=" +
                                    std::to_string(B) + ", seqlen_q=" + std::to_string(Nq) +
                                    ", seqlen_k=" + std::to_string(Nk) + ")");
  if (H <= 0 || Hkv <= 0)
    return fail(FA_ERR_INVALID, pre + "heads and heads_k must be > 0 (got heads=" + std::to_string(H) +
                                    ", heads_k=" + std::to_string(Hkv) + ")");
  if (H % Hkv != 0)
    return fail(FA_ERR_INVALID, pre + "heads (" + std::to_string(H) + ") must be a multiple of heads_k (" +
                                    std::to_string(Hkv) + ")");
  if (D < 1 || D > 256)
    return fail(FA_ERR_INVALID, pre + "head_dim must be in 1..256 (got " + std::to_string(D) + ")");
  if (dtype_raw != FA_FLOAT32 && dtype_raw != FA_FLOAT16 && dtype_raw != FA_BFLOAT16)
    return fail(FA_ERR_INVALID, pre + "unknown dtype " + std::to_string(dtype_raw));
  const fa_dtype dtype = static_cast<fa_dtype>(dtype_raw);
  if (bm < 0 || bn < 0)
    return fail(FA_ERR_INVALID, pre + "block_m and block_n must be >= 0 (0 = default; got " +
                                    std::to_string(bm) + ", " + std::to_string(bn) + ")");
  if (num_threads < 0)
    return fail(FA_ERR_INVALID, pre + "num_threads must be >= 0 (0 = all cores; got " +
                                    std::to_string(num_threads) + ")");
  g->B = B;
  g->H = H;
  g->Hkv = Hkv;
  g->D = D;
  g->group = H / Hkv;
  g->left = g->right = kUnbounded;
  g->softcap = false;
  g->cap_in = g->cap_out = 0.f;
  size_tiles(g, Nq, Nk, bm, bn);
  g->Dp = round_up(D, 8);
  g->direct = dtype == FA_FLOAT32 && D % 8 == 0;
  g->page_cap = false;
  g->scale = scale;
  g->scale_log2 = scale * kLog2e;
  g->dtype = dtype;
  g->cu_q = g->cu_k = g->seqlens_k = g->page_table = nullptr;
  g->page_size = 1;
  g->max_pages = 0;
  g->lse_hs = Nq;
  return FA_OK;
}

// Causal, sliding window and softcap (fa_core.h): fills g->left, g->right, g->softcap.
fa_status set_scores(const char* fn, int causal, int has_window, int window_left, int window_right,
                     float softcap, Geometry* g) {
  const std::string pre = std::string(fn) + ": ";
  if (has_window) {
    if (window_left < -1 || window_right < -1)
      return fail(FA_ERR_INVALID, pre + "window_left and window_right must be >= -1 (-1 = unbounded; got " +
                                      std::to_string(window_left) + ", " + std::to_string(window_right) + ")");
    if (window_left >= 0) g->left = window_left;
    if (window_right >= 0) g->right = window_right;
  }
  if (causal) g->right = 0;  // window_right >= 0 is never looser
  if (!(softcap >= 0.f) || softcap == INFINITY)
    return fail(FA_ERR_INVALID, pre + "softcap must be finite and >= 0 (0 = off; got " + std::to_string(softcap) + ")");
  if (softcap > 0.f) {
    g->softcap = true;
    g->cap_in = g->scale / softcap;
    g->cap_out = softcap * kLog2e;
  }
  return FA_OK;
}

// Checks a host prefix-sum array cu[0..B] (cu[0] = 0, non-decreasing, cu[B] = total unless total
// is < 0) and returns the largest difference in *max_len.
fa_status check_cu(const char* fn, const char* name, const int32_t* cu, int B, int64_t total,
                   const char* total_name, int* max_len) {
  const std::string pre = std::string(fn) + ": " + name;
  if (cu[0] != 0) return fail(FA_ERR_INVALID, pre + "[0] must be 0 (got " + std::to_string(cu[0]) + ")");
  int longest = 0;
  for (int b = 0; b < B; ++b) {
    if (cu[b + 1] < cu[b])
      return fail(FA_ERR_INVALID, pre + " must be non-decreasing (" + name + "[" + std::to_string(b) + "] = " +
                                      std::to_string(cu[b]) + " > " + name + "[" + std::to_string(b + 1) +
                                      "] = " + std::to_string(cu[b + 1]) + ")");
    longest = std::max(longest, cu[b + 1] - cu[b]);
  }
  if (total >= 0 && cu[B] != total)
    return fail(FA_ERR_INVALID, pre + "[batch] = " + std::to_string(cu[B]) + " must equal " + total_name + " = " +
                                    std::to_string(total));
  *max_len = longest;
  return FA_OK;
}

// Forward: packed / paged sequences (fa_core.h). Validates every host index array, including the
// page of every token the call reads; sizes the tiles for the longest sequences. After set_scores.
fa_status fwd_sequences(const char* fn, const fa_fwd_params* p, Geometry* g) {
  const std::string pre = std::string(fn) + ": ";
  if (p->cu_seqlens_q == nullptr) {
    if (p->cu_seqlens_k != nullptr || p->page_table != nullptr || p->seqlens_k != nullptr)
      return fail(FA_ERR_INVALID, pre + "cu_seqlens_k, page_table and seqlens_k need cu_seqlens_q (packed queries)");
    return FA_OK;
  }
  if (p->total_q < 0) return fail(FA_ERR_INVALID, pre + "total_q must be >= 0 (got " + std::to_string(p->total_q) + ")");
  fa_status st;
  int max_q = 0, max_k = 0;
  if ((st = check_cu(fn, "cu_seqlens_q", p->cu_seqlens_q, g->B, p->total_q, "total_q", &max_q)) != FA_OK) return st;
  if (p->page_table != nullptr) {
    if (p->cu_seqlens_k != nullptr)
      return fail(FA_ERR_INVALID, pre + "give either cu_seqlens_k (packed K/V) or page_table (paged K/V), not both");
    if (p->seqlens_k == nullptr) return fail(FA_ERR_INVALID, pre + "seqlens_k must not be null with page_table");
    if (p->page_size < 1 || p->max_pages_per_seq < 0 || p->num_pages < 0)
      return fail(FA_ERR_INVALID, pre + "page_size must be >= 1, max_pages_per_seq and num_pages >= 0 (got " +
                                      std::to_string(p->page_size) + ", " + std::to_string(p->max_pages_per_seq) +
                                      ", " + std::to_string(p->num_pages) + ")");
    const int64_t cap = (int64_t)p->max_pages_per_seq * p->page_size;
    for (int b = 0; b < g->B; ++b) {
      const int32_t n = p->seqlens_k[b];
      if (n < 0 || n > cap)
        return fail(FA_ERR_INVALID, pre + "seqlens_k[" + std::to_string(b) + "] = " + std::to_string(n) +
                                        " must be in 0..max_pages_per_seq * page_size = " + std::to_string(cap));
      max_k = std::max(max_k, (int)n);
    }
    g->seqlens_k = p->seqlens_k;
    g->page_table = p->page_table;
    g->page_size = p->page_size;
    g->max_pages = p->max_pages_per_seq;
  } else {
    if (p->cu_seqlens_k == nullptr)
      return fail(FA_ERR_INVALID, pre + "cu_seqlens_q needs cu_seqlens_k (packed K/V) or page_table (paged K/V)");
    // cu_seqlens_k[batch] = total_k: k / v hold total_k rows, and no sequence reads past them
    if (p->total_k < 0) return fail(FA_ERR_INVALID, pre + "total_k must be >= 0 (got " + std::to_string(p->total_k) + ")");
    if ((st = check_cu(fn, "cu_seqlens_k", p->cu_seqlens_k, g->B, p->total_k, "total_k", &max_k)) != FA_OK) return st;
    g->cu_k = p->cu_seqlens_k;
  }
  g->cu_q = p->cu_seqlens_q;
  g->lse_hs = p->total_q;
  size_tiles(g, max_q, max_k, p->block_m, p->block_n);
  g->page_cap = g->page_table != nullptr && g->direct && g->page_size >= g->bn;
  if (g->page_table != nullptr) {
    // Every page holding a token that some query of the sequence sees (and nothing else is read).
    for (int b = 0; b < g->B; ++b) {
      const Seq s = seq_of(*g, b);
      const Range keys = block_keys(*g, s, 0, s.nq);
      if (keys.lo >= keys.hi) continue;
      for (int64_t j = keys.lo / g->page_size; j <= (keys.hi - 1) / g->page_size; ++j) {
        const int32_t page = s.pages[j];
        if (page < 0 || page >= p->num_pages)
          return fail(FA_ERR_INVALID, pre + "page_table[" + std::to_string(b) + "][" + std::to_string(j) + "] = " +
                                          std::to_string(page) + " is outside [0, num_pages = " +
                                          std::to_string(p->num_pages) + ") (sequence " + std::to_string(b) +
                                          " reads tokens " + std::to_string(keys.lo) + ".." +
                                          std::to_string(keys.hi - 1) + ")");
      }
    }
  }
  return FA_OK;
}

// Backward: packed sequences (both cu_seqlens or neither).
fa_status bwd_sequences(const char* fn, const fa_bwd_params* p, Geometry* g) {
  const std::string pre = std::string(fn) + ": ";
  if (p->cu_seqlens_q == nullptr && p->cu_seqlens_k == nullptr) return FA_OK;
  if (p->cu_seqlens_q == nullptr || p->cu_seqlens_k == nullptr)
    return fail(FA_ERR_INVALID, pre + "cu_seqlens_q and cu_seqlens_k must be given together");
  if (p->total_q < 0 || p->total_k < 0)
    return fail(FA_ERR_INVALID, pre + "total_q and total_k must be >= 0 (got " + std::to_string(p->total_q) + ", " +
                                    std::to_string(p->total_k) + ")");
  fa_status st;
  int max_q = 0, max_k = 0;
  if ((st = check_cu(fn, "cu_seqlens_q", p->cu_seqlens_q, g->B, p->total_q, "total_q", &max_q)) != FA_OK ||
      (st = check_cu(fn, "cu_seqlens_k", p->cu_seqlens_k, g->B, p->total_k, "total_k", &max_k)) != FA_OK)
    return st;
  g->cu_q = p->cu_seqlens_q;
  g->cu_k = p->cu_seqlens_k;
  g->lse_hs = p->total_q;
  size_tiles(g, max_q, max_k, p->block_m, p->block_n);
  return FA_OK;
}

// Work list of a pass: start[b] = first task of sequence b, which owns `per` x (its query rows,
// or keys, in blocks of `blk`) tasks.
std::vector<int64_t> task_starts(const Geometry& g, bool keys, int per, int blk) {
  std::vector<int64_t> start((size_t)g.B + 1, 0);
  for (int b = 0; b < g.B; ++b) {
    const Seq s = seq_of(g, b);
    const int64_t n = keys ? s.nk : s.nq;
    start[b + 1] = start[b] + per * ((n + blk - 1) / blk);
  }
  return start;
}

// The forward's tile rows: the user's block_m (default 64), but for short sequences room for the
// query rows of a whole GQA group (FwdPack) rather than the query rows alone. A call whose
// sequences have one query each (decode steps) whose groups the narrow kernels take (D % 8 == 0,
// group <= kNarrowRows) packs the groups of several kv heads into a task, as many as divide Hkv
// and fit block_m rows (g->kvh): a task then reads each token's K / V rows of all its kv heads,
// which sit next to each other (paged and [B, N, Hkv, D] layouts), instead of one head's slice
// every Hkv * D elements. After size_tiles.
void size_fwd_rows(Geometry* g, int bm) {
  const int cap = std::min(bm > 0 ? bm : kDefaultBlockM, kMaxBlock);
  g->kvh = 1;
  if (g->Nq == 1 && g->D % 8 == 0 && g->group <= kNarrowRows)
    for (int d = g->Hkv; d > 1; --d)
      if (g->Hkv % d == 0 && d * g->group <= cap) {
        g->kvh = d;
        break;
      }
  const int64_t want = std::max<int64_t>(1, (int64_t)g->Nq * g->group * g->kvh);
  g->bm = (int)std::max<int64_t>(1, std::min<int64_t>({bm > 0 ? bm : kDefaultBlockM, want, kMaxBlock}));
  g->bmp = round_up(g->bm, 8);
}

// The forward's work list: sequence b owns H / heads x (its query rows in blocks of qrows) tasks.
std::vector<int64_t> fwd_task_starts(const Geometry& g) {
  std::vector<int64_t> start((size_t)g.B + 1, 0);
  for (int b = 0; b < g.B; ++b) {
    const Seq s = seq_of(g, b);
    const FwdPack pk = fwd_pack(g, s.nq);
    start[b + 1] = start[b] + (int64_t)(g.H / pk.heads) * ((s.nq + pk.qrows - 1) / pk.qrows);
  }
  return start;
}

fa_status need(const char* fn, const void* ptr, const char* name) {
  if (ptr != nullptr) return FA_OK;
  return fail(FA_ERR_INVALID, std::string(fn) + ": " + name + " must not be null");
}

// Workspace memory. Buffers of 64 KiB to 64 MiB come from a small process-wide cache of freed ones
// (sizes rounded up to a power of two, at most kCacheBytes kept in all), so that back-to-back
// calls reuse pages that are already mapped: a fresh large allocation is mapped anew by malloc,
// and its first touch costs a page fault per 4 KiB, which on a virtual machine can take longer
// than the arithmetic (a 32 MiB backward workspace: about half the call). Calls on several threads
// at once each take their own buffers; the cache only holds those not in use. Larger buffers are
// allocated and freed as they are.
class BufferCache {
 public:
  static constexpr size_t kMinBytes = size_t(64) << 10;
  static constexpr size_t kCacheBytes = size_t(96) << 20;

  static size_t size_class(size_t bytes) {
    size_t c = kMinBytes;
    while (c < bytes) c <<= 1;
    return c;
  }
  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].bytes == bytes) {
          void* p = free_[i].ptr;
          cached_ -= bytes;
          free_[i] = free_.back();
          free_.pop_back();
          return p;
        }
    }
    return ::operator new(bytes, std::align_val_t(64), std::nothrow);
  }
  void give(void* p, size_t bytes) {
    if (bytes <= kCacheBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      // Make room by dropping the smallest cached buffers first.
      while (cached_ + bytes > kCacheBytes && !free_.empty()) {
        size_t j = 0;
        for (size_t i = 1; i < free_.size(); ++i)
          if (free_[i].bytes < free_[j].bytes) j = i;
        ::operator delete(free_[j].ptr, std::align_val_t(64));
        cached_ -= free_[j].bytes;
        free_[j] = free_.back();
        free_.pop_back();
      }
      if (cached_ + bytes <= kCacheBytes) {
        free_.push_back({p, bytes});
        cached_ += bytes;
        return;
      }
    }
    ::operator delete(p, std::align_val_t(64));
  }

 private:
  struct Block {
    void* ptr;
    size_t bytes;
  };
  std::mutex mu_;
  std::vector<Block> free_;
  size_t cached_ = 0;
};

BufferCache& buffer_cache() {
  static BufferCache* c = new BufferCache();  // never destroyed: safe in threads still running at exit
  return *c;
}

// 64-byte aligned float buffer (n floats, at least 16); ptr is null on allocation failure.
struct FloatBuffer {
  float* ptr = nullptr;
  size_t bytes = 0;
  bool cached = false;
  explicit FloatBuffer(int64_t n) {
    if (n <= 0) n = 16;
    if ((uint64_t)n > (uint64_t)(SIZE_MAX / 2) / sizeof(float)) return;
    bytes = static_cast<size_t>(n) * sizeof(float);
    if (bytes >= BufferCache::kMinBytes && BufferCache::size_class(bytes) <= BufferCache::kCacheBytes) {
      bytes = BufferCache::size_class(bytes);  // a size the cache can keep (at most 64 MiB)
      cached = true;
      ptr = static_cast<float*>(buffer_cache().take(bytes));
    } else {
      ptr = static_cast<float*>(::operator new(bytes, std::align_val_t(64), std::nothrow));
    }
  }
  ~FloatBuffer() {
    if (ptr == nullptr) return;
    if (cached) buffer_cache().give(ptr, bytes);
    else ::operator delete(ptr, std::align_val_t(64));
  }
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
};

void zero_rows(void* base, const RowLoc& loc, fa_dtype dt, int64_t n0, int64_t n1, int D) {
  const size_t es = dt == FA_FLOAT32 ? 4 : 2;
  for (int64_t n = n0; n < n1; ++n) memset(static_cast<char*>(base) + loc.at(n) * (int64_t)es, 0, (size_t)D * es);
}

// Zeroes rows 0..n-1 of every head of every batch entry (packed: n = total rows, batch 1).
void zero_all(void* base, const fa_strides& s, fa_dtype dt, int64_t batches, int heads, int64_t n, int D) {
  for (int64_t b = 0; b < batches; ++b)
    for (int h = 0; h < heads; ++h) zero_rows(base, {elem_offset(s, b, 0, h), s.row, nullptr, 0, 1}, dt, 0, n, D);
}

// Backward scheme choice. It depends on the shape only (never on the thread count), so results
// stay bit-identical for any number of threads.
//   fused:    B*Hkv*n_groups tasks, each doing 5 tile GEMMs per (query block, key block) pair;
//             needs n_groups fp32 copies of dQ per unit of a slab (bounded by kFusedBudget).
//   two-pass: 7 tile GEMMs per pair, no large workspace, B*Hkv*nkb + B*H*nqb tasks.
// Fused is used when its workspace fits and it still yields kFusedMinTasks tasks per slab.
// Packed batches always take the two-pass scheme (its tasks follow each sequence's own length).
// FA_CPU_BWD=fused / twopass forces a scheme (fused only where its workspace fits and the batch
// is dense); FA_CPU_FUSED_SLAB=n caps the units per slab (both are testing aids).
constexpr int64_t kFusedBudget = int64_t(8) << 20;  // floats (32 MiB)
constexpr int64_t kFusedTargetTasks = 32;
constexpr int64_t kFusedMinTasks = 8;

struct FusedPlan {
  bool use = false;
  int n_groups = 0, group_blocks = 0;
  int64_t slab = 0;         // units per slab
  int64_t unit_floats = 0;  // floats of one (unit, key group) partial: group * Nq * Dp
};

FusedPlan plan_fused(const Geometry& g) {
  FusedPlan plan;
  const char* env = getenv("FA_CPU_BWD");
  const bool force_two = env != nullptr && strcmp(env, "twopass") == 0;
  const bool force_fused = env != nullptr && strcmp(env, "fused") == 0;
  if (force_two || g.cu_q != nullptr) return plan;
  const int64_t units = (int64_t)g.B * g.Hkv;
  plan.unit_floats = (int64_t)g.group * g.Nq * g.Dp;
  if (plan.unit_floats > kFusedBudget) return plan;
  int64_t n = std::min<int64_t>(g.nkb, (kFusedTargetTasks + units - 1) / units);
  n = std::max<int64_t>(1, std::min<int64_t>(n, kFusedBudget / plan.unit_floats));
  plan.group_blocks = (int)((g.nkb + n - 1) / n);
  plan.n_groups = (g.nkb + plan.group_blocks - 1) / plan.group_blocks;
  plan.slab = std::max<int64_t>(1, std::min<int64_t>(units, kFusedBudget / (plan.n_groups * plan.unit_floats)));
  if (const char* cap = getenv("FA_CPU_FUSED_SLAB"))  // testing aid: smaller slabs
    plan.slab = std::max<int64_t>(1, std::min<int64_t>(plan.slab, atoi(cap)));
  plan.use = force_fused || plan.slab * plan.n_groups >= kFusedMinTasks;
  return plan;
}

fa_status fwd_impl(const fa_fwd_params* p) {
  static const char* fn = "fa_fwd_cpu";
  if (p == nullptr) return fail(FA_ERR_INVALID, "fa_fwd_cpu: params must not be null");
  Geometry g;
  fa_status st = make_geometry(fn, p->batch, p->seqlen_q, p->seqlen_k, p->heads, p->heads_k, p->head_dim,
                               p->scale, raw_dtype(&p->dtype), p->block_m, p->block_n, p->num_threads, &g);
  if (st != FA_OK) return st;
  if ((st = set_scores(fn, p->causal, p->has_window, p->window_left, p->window_right, p->softcap, &g)) != FA_OK)
    return st;
  const bool packed = p->cu_seqlens_q != nullptr;
  if (g.B == 0 && !packed) return FA_OK;
  if ((st = fwd_sequences(fn, p, &g)) != FA_OK) return st;
  const int64_t q_batches = packed ? 1 : g.B, q_rows = packed ? p->total_q : g.Nq;
  if (q_batches * q_rows == 0) return FA_OK;
  if ((st = need(fn, p->q, "q")) != FA_OK || (st = need(fn, p->o, "o")) != FA_OK ||
      (st = need(fn, p->lse, "lse")) != FA_OK)
    return st;
  if (g.Nk > 0 && ((st = need(fn, p->k, "k")) != FA_OK || (st = need(fn, p->v, "v")) != FA_OK)) return st;

  FwdArgs a;
  a.g = g;
  a.q = p->q;
  a.k = p->k;
  a.v = p->v;
  a.o = p->o;
  a.lse = p->lse;
  a.qs = p->q_str;
  a.ks = p->k_str;
  a.vs = p->v_str;
  a.os = p->o_str;

  if (g.Nk == 0) {  // nothing to attend to: o = 0, lse = +inf
    zero_all(a.o, a.os, g.dtype, q_batches, g.H, q_rows, g.D);
    const int64_t n = q_batches * g.H * q_rows;
    for (int64_t i = 0; i < n; ++i) a.lse[i] = INFINITY;
    return FA_OK;
  }

  const KernelSet& ks = kernels();
  size_fwd_rows(&a.g, p->block_m);
  const std::vector<int64_t> q_start = fwd_task_starts(a.g);
  a.q_start = q_start.data();
  const int64_t n_tasks = q_start.back();
  a.part_stride = (int64_t)a.g.bm * (a.g.Dp + 2);
  a.splits = fwd_splits(a.g, n_tasks, p->num_splits, a.part_stride);
  const int64_t n_items = n_tasks * a.splits;
  FloatBuffer part(a.splits > 1 ? n_items * a.part_stride : 0);
  if (a.splits > 1 && part.ptr == nullptr) return fail(FA_ERR_NO_MEMORY, "fa_fwd_cpu: cannot allocate key-split partials");
  a.part = part.ptr;
  const int threads = planned_threads(p->num_threads, n_items);
  const Scratch layout(a.g);
  FloatBuffer scratch(layout.total * threads);
  if (scratch.ptr == nullptr) return fail(FA_ERR_NO_MEMORY, "fa_fwd_cpu: cannot allocate scratch");
  float* ws = scratch.ptr;
  const int64_t per = layout.total;
  auto body = [&](int64_t t, int slot) { ks.fwd(a, t, ws + per * slot); };
  auto combine = [&](int64_t t, int) { ks.combine(a, t); };
  if (!parallel_for(n_items, p->num_threads, body) ||
      (a.splits > 1 && !parallel_for(n_tasks, p->num_threads, combine)))
    return fail(FA_ERR_INVALID, "fa_fwd_cpu: internal error in a worker task");
  return FA_OK;
}

fa_status bwd_impl(const fa_bwd_params* p) {
  static const char* fn = "fa_bwd_cpu";
  if (p == nullptr) return fail(FA_ERR_INVALID, "fa_bwd_cpu: params must not be null");
  Geometry g;
  fa_status st = make_geometry(fn, p->batch, p->seqlen_q, p->seqlen_k, p->heads, p->heads_k, p->head_dim,
                               p->scale, raw_dtype(&p->dtype), p->block_m, p->block_n, p->num_threads, &g);
  if (st != FA_OK) return st;
  if ((st = set_scores(fn, p->causal, p->has_window, p->window_left, p->window_right, p->softcap, &g)) != FA_OK)
    return st;
  const bool packed = p->cu_seqlens_q != nullptr || p->cu_seqlens_k != nullptr;
  if (g.B == 0 && !packed) return FA_OK;
  if ((st = bwd_sequences(fn, p, &g)) != FA_OK) return st;
  // Rows as [batches, rows] per head: dense [B, Nq] / [B, Nk], packed [1, total_q] / [1, total_k].
  const int64_t batches = packed ? 1 : g.B;
  const int64_t q_rows = packed ? p->total_q : g.Nq, k_rows_n = packed ? p->total_k : g.Nk;
  if (batches == 0 || (q_rows == 0 && k_rows_n == 0)) return FA_OK;
  if (q_rows > 0) {
    if ((st = need(fn, p->dq, "dq")) != FA_OK) return st;
  }
  if (k_rows_n > 0) {
    if ((st = need(fn, p->dk, "dk")) != FA_OK || (st = need(fn, p->dv, "dv")) != FA_OK) return st;
  }

  BwdArgs a;
  a.g = g;
  a.dout = p->dout;
  a.q = p->q;
  a.k = p->k;
  a.v = p->v;
  a.o = p->o;
  a.lse = p->lse;
  a.dq = p->dq;
  a.dk = p->dk;
  a.dv = p->dv;
  a.dos = p->do_str;
  a.qs = p->q_str;
  a.ks = p->k_str;
  a.vs = p->v_str;
  a.os = p->o_str;
  a.dqs = p->dq_str;
  a.dks = p->dk_str;
  a.dvs = p->dv_str;
  a.dvec = nullptr;
  a.dot_B = batches;
  a.dot_N = q_rows;
  a.q_start = a.kv_start = nullptr;
  a.dq_part = nullptr;
  a.n_groups = 0;
  a.group_blocks = 0;
  a.slab_u0 = 0;
  a.slab_n = 0;

  const KernelSet& ks = kernels();
  const int64_t chunks = (q_rows + kDotRowsPerTask - 1) / kDotRowsPerTask;
  auto dot_body = [&](int64_t t, int) { ks.dot(a, t); };
  if (g.Nq == 0 || g.Nk == 0) {  // no attention at all: every gradient is zero
    zero_all(a.dq, a.dqs, g.dtype, batches, g.H, q_rows, g.D);
    zero_all(a.dk, a.dks, g.dtype, batches, g.Hkv, k_rows_n, g.D);
    zero_all(a.dv, a.dvs, g.dtype, batches, g.Hkv, k_rows_n, g.D);
    if (p->softmax_d != nullptr && q_rows > 0) {  // still D = rowsum(dO * O), as asked
      if ((st = need(fn, p->dout, "dout")) != FA_OK || (st = need(fn, p->o, "o")) != FA_OK) return st;
      a.dvec = p->softmax_d;
      if (!parallel_for(batches * g.H * chunks, p->num_threads, dot_body))
        return fail(FA_ERR_INVALID, "fa_bwd_cpu: internal error in a worker task");
    }
    return FA_OK;
  }
  if ((st = need(fn, p->dout, "dout")) != FA_OK || (st = need(fn, p->q, "q")) != FA_OK ||
      (st = need(fn, p->k, "k")) != FA_OK || (st = need(fn, p->v, "v")) != FA_OK ||
      (st = need(fn, p->o, "o")) != FA_OK || (st = need(fn, p->lse, "lse")) != FA_OK)
    return st;

  FloatBuffer dvec(batches * g.H * q_rows);
  if (dvec.ptr == nullptr) return fail(FA_ERR_NO_MEMORY, "fa_bwd_cpu: cannot allocate workspace");
  a.dvec = dvec.ptr;

  // pass 0: Dvec = rowsum(dO * O)
  if (!parallel_for(batches * g.H * chunks, p->num_threads, dot_body))
    return fail(FA_ERR_INVALID, "fa_bwd_cpu: internal error in a worker task");
  if (p->softmax_d != nullptr)  // the caller asked for D itself: same layout as lse and dvec
    std::memcpy(p->softmax_d, dvec.ptr, sizeof(float) * (size_t)(batches * g.H * q_rows));

  const Scratch layout(g);
  const int64_t per = layout.total;
  const FusedPlan plan = plan_fused(g);
  if (plan.use) {
    // Fused scheme: one task per (unit, key group) computes dK, dV of its key blocks and dQ
    // partial sums; a second pass adds the partials in key-group order and stores dQ. If its
    // workspace cannot be allocated we fall through to the two-pass scheme, which needs none.
    a.n_groups = plan.n_groups;
    a.group_blocks = plan.group_blocks;
    const int64_t units = (int64_t)g.B * g.Hkv;
    const int64_t slab_max = std::min<int64_t>(units, plan.slab);
    const int threads = planned_threads(p->num_threads, slab_max * plan.n_groups);
    FloatBuffer part(slab_max * plan.n_groups * plan.unit_floats);
    FloatBuffer scratch(per * threads);
    if (part.ptr != nullptr && scratch.ptr != nullptr) {
      a.dq_part = part.ptr;
      float* ws = scratch.ptr;
      auto fused_body = [&](int64_t t, int slot) { ks.fused(a, t, ws + per * slot); };
      auto reduce_body = [&](int64_t t, int) { ks.reduce(a, t); };
      for (int64_t u0 = 0; u0 < units; u0 += slab_max) {
        a.slab_u0 = u0;
        a.slab_n = (int)std::min<int64_t>(slab_max, units - u0);
        if (!parallel_for((int64_t)a.slab_n * plan.n_groups, p->num_threads, fused_body) ||
            !parallel_for((int64_t)a.slab_n * g.group * g.nqb, p->num_threads, reduce_body))
          return fail(FA_ERR_INVALID, "fa_bwd_cpu: internal error in a worker task");
      }
      return FA_OK;
    }
  }

  // Two-pass scheme: pass 1 (dK, dV per key block) then pass 2 (dQ per query block, recomputing
  // P and dS); they share one pool of scratch.
  const std::vector<int64_t> kv_start = task_starts(g, true, g.Hkv, g.bn);
  const std::vector<int64_t> q_start = task_starts(g, false, g.H, g.bm);
  a.kv_start = kv_start.data();
  a.q_start = q_start.data();
  const int64_t kv_tasks = kv_start.back();
  const int64_t q_tasks = q_start.back();
  const int threads = std::max(planned_threads(p->num_threads, kv_tasks), planned_threads(p->num_threads, q_tasks));
  FloatBuffer scratch(per * threads);
  if (scratch.ptr == nullptr) return fail(FA_ERR_NO_MEMORY, "fa_bwd_cpu: cannot allocate scratch");
  float* ws = scratch.ptr;
  auto kv_body = [&](int64_t t, int slot) { ks.kv(a, t, ws + per * slot); };
  auto q_body = [&](int64_t t, int slot) { ks.q(a, t, ws + per * slot); };
  if (!parallel_for(kv_tasks, p->num_threads, kv_body) || !parallel_for(q_tasks, p->num_threads, q_body))
    return fail(FA_ERR_INVALID, "fa_bwd_cpu: internal error in a worker task");
  return FA_OK;
}

}  // namespace
}  // namespace cpu
}  // namespace fa

extern "C" fa_status fa_fwd_cpu(const fa_fwd_params* p) {
  try {
    return fa::cpu::fwd_impl(p);
  } catch (const std::bad_alloc&) {
    return fa::fail(FA_ERR_NO_MEMORY, "fa_fwd_cpu: out of memory");
  } catch (...) {
    return fa::fail(FA_ERR_INVALID, "fa_fwd_cpu: internal error");
  }
}

extern "C" fa_status fa_bwd_cpu(const fa_bwd_params* p) {
  try {
    return fa::cpu::bwd_impl(p);
  } catch (const std::bad_alloc&) {
    return fa::fail(FA_ERR_NO_MEMORY, "fa_bwd_cpu: out of memory");
  } catch (...) {
    return fa::fail(FA_ERR_INVALID, "fa_bwd_cpu: internal error");
  }
}

// Internal (not in fa_core.h): which kernel set fa_fwd_cpu / fa_bwd_cpu would use now.
extern "C" const char* fa_internal_cpu_isa(void) { return fa::cpu::kernels().name; }

#else  // FA_CPU_KERNEL_PASS
// =============================================================================================
// Part 2: the tile kernels, compiled once per instruction set (namespace FA_KNS, FA_KVL floats
// per vector register).
// =============================================================================================
namespace fa {
namespace cpu {
namespace FA_KNS {

constexpr int VL = FA_KVL;
typedef float vf __attribute__((vector_size(VL * 4)));
typedef int32_t vi __attribute__((vector_size(VL * 4)));

static inline __attribute__((always_inline)) vf vload(const float* p) {
  vf v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline __attribute__((always_inline)) void vstore(float* p, vf v) { memcpy(p, &v, sizeof v); }
static inline __attribute__((always_inline)) vf vsplat(float x) { return vf{} + x; }
// m: lanes all ones (true) or all zeros (false).
static inline __attribute__((always_inline)) vf vselect(vi m, vf a, vf b) {
  return (vf)((m & (vi)a) | (~m & (vi)b));
}
static inline vi lane_index() {
  vi r;
  for (int i = 0; i < VL; ++i) r[i] = i;
  return r;
}
static inline float hsum(vf v) {
  float s = 0.f;
  for (int i = 0; i < VL; ++i) s += v[i];
  return s;
}
static inline float hmax(vf v) {
  float m = v[0];
  for (int i = 1; i < VL; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// Width-generic forms of the above, for code templated on the vector type V (VL floats, or 16 in
// the AVX-512 set): VI is the matching lane mask / int32 vector (the type of a comparison).
template <class V>
using mask_of = decltype(V{} < V{});
template <class V>
static inline __attribute__((always_inline)) V vld(const float* p) {
  V v;
  memcpy(&v, p, sizeof v);
  return v;
}
template <class VI>
static inline __attribute__((always_inline)) VI vldi(const int32_t* p) {
  VI v;
  memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
static inline __attribute__((always_inline)) void vst(float* p, V v) {
  memcpy(p, &v, sizeof v);
}
template <class V>
static inline __attribute__((always_inline)) V vsel(mask_of<V> m, V a, V b) {
  return (V)((m & (mask_of<V>)a) | (~m & (mask_of<V>)b));
}

#if FA_KAVX512
typedef float vw __attribute__((vector_size(64)));  // 16 floats: one zmm register
typedef int32_t viw __attribute__((vector_size(64)));
typedef uint32_t vuw __attribute__((vector_size(64)));
#endif

// 2^f (|f| <= 1/2, the polynomial) times 2^n (added to the exponent field), for V = vf or vw with
// VU its unsigned lanes.
template <class V, class VU, class VI>
static inline __attribute__((always_inline)) V exp2_parts(V f, VI n) {
  V p = V{} + 1.5376931696664542e-4f;
  p = p * f + 1.3397817965596914e-3f;
  p = p * f + 9.618355892598629e-3f;
  p = p * f + 5.550333857536316e-2f;
  p = p * f + 2.4022647738456726e-1f;
  p = p * f + 6.931471824645996e-1f;
  p = p * f + 1.0f;
  return (V)((VU)p + ((VU)n << 23));
}

// 2^x, vectorised. Exact 0 for -inf (and anything below -127), NaN in gives NaN out, inputs
// above 127 are clamped to 127; relative error ~1e-7 elsewhere, except that results below 2^-126
// are not accurate (they are tiny non-negative values; they never matter next to a row sum >= 1).
// x = n + f with n = round(x), |f| <= 1/2; a degree-6 polynomial gives 2^f and adding n to the
// exponent field gives 2^n. For x = -127, f = 0 and 2^f = 1.0f exactly, so the sum of the bit
// patterns is 0x3f800000 - (127 << 23) = 0: an exact zero.
typedef uint32_t vu __attribute__((vector_size(VL * 4)));
static inline __attribute__((always_inline)) vf vexp2(vf x) {
#if FA_KAVX2
  // max/min return their second operand when either is NaN, so NaN passes through.
  x = _mm256_min_ps(_mm256_set1_ps(127.f), _mm256_max_ps(_mm256_set1_ps(-127.f), x));
  const vf r = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const vi n = (vi)_mm256_cvtps_epi32(r);  // NaN -> 0x80000000, whose shifted value is 0
#else
  x = vselect(x < vsplat(-127.f), vsplat(-127.f), x);  // comparisons are false for NaN
  x = vselect(x > vsplat(127.f), vsplat(127.f), x);
  const vf t = x + 0.5f;
  vi n = __builtin_convertvector(t, vi);          // truncates toward zero
  n += (vi)(__builtin_convertvector(n, vf) > t);  // -1 where truncation went up: n = floor(t)
  const vf r = __builtin_convertvector(n, vf);
#endif
  return exp2_parts<vf, vu>(x - r, n);
}

#if FA_KAVX512
// The same for 16 lanes (identical results lane by lane).
static inline __attribute__((always_inline)) vw vexp2(vw x) {
  x = _mm512_min_ps(_mm512_set1_ps(127.f), _mm512_max_ps(_mm512_set1_ps(-127.f), x));
  const vw r = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const viw n = (viw)_mm512_cvtps_epi32(r);
  return exp2_parts<vw, vuw>(x - r, n);
}
#endif

// ---- GEMM micro-kernel -----------------------------------------------------------------------
// C[MR x NV*W] (+)= A(MR x K) * B(K x NV*W) for vectors V of W floats; A(i, k) = A[i*ars + k*acs]
// (any strides, read as broadcast scalars), B row-major with leading dimension ldb, C row-major
// with ldc.
template <class V, int MR, int NV, bool ACC>
static inline __attribute__((always_inline)) void micro(float* __restrict C, int64_t ldc,
                                                        const float* __restrict A, int64_t ars, int64_t acs,
                                                        const float* __restrict B, int64_t ldb, int K) {
  constexpr int W = (int)(sizeof(V) / sizeof(float));
  V c[MR][NV];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      if (ACC) memcpy(&c[i][j], C + i * ldc + j * W, sizeof(V));
      else c[i][j] = V{};
    }
  for (int k = 0; k < K; ++k) {
    V b[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) memcpy(&b[j], B + k * ldb + j * W, sizeof(V));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V a = V{} + A[i * ars + k * acs];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) c[i][j] += a * b[j];
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) memcpy(C + i * ldc + j * W, &c[i][j], sizeof(V));
}

// The last M < MR rows of a panel (one micro-kernel of exactly M rows).
template <class V, int MR, int NV, bool ACC>
static inline void micro_tail(int M, float* C, int64_t ldc, const float* A, int64_t ars, int64_t acs,
                              const float* B, int64_t ldb, int K) {
  if constexpr (MR > 0) {
    if (M == MR) micro<V, MR, NV, ACC>(C, ldc, A, ars, acs, B, ldb, K);
    else micro_tail<V, MR - 1, NV, ACC>(M, C, ldc, A, ars, acs, B, ldb, K);
  }
}

// A panel of NV vectors of columns, MR rows at a time.
template <class V, int MR, int NV, bool ACC>
static void gemm_panel(float* C, int64_t ldc, const float* A, int64_t ars, int64_t acs, const float* B,
                       int64_t ldb, int M, int K) {
  int m = 0;
  for (; m + MR <= M; m += MR) micro<V, MR, NV, ACC>(C + m * ldc, ldc, A + m * ars, ars, acs, B, ldb, K);
  if (m < M) micro_tail<V, MR - 1, NV, ACC>(M - m, C + m * ldc, ldc, A + m * ars, ars, acs, B, ldb, K);
}

#if FA_KAVX512
// The AVX-512 set's GEMMs take columns 16 at a time in zmm registers (32 of them: FA_KMRW rows x
// 2 vectors of accumulators), and a last 8 with the VL-wide kernels.
constexpr int kMrW = FA_KMRW;
#endif

// C[M x N] (+)= A(M x K) * B(K x N), N a multiple of VL. Each C element is one chain of fused
// multiply-adds over k in increasing order, whatever the blocking.
template <bool ACC>
static void gemm(float* C, int64_t ldc, const float* A, int64_t ars, int64_t acs, const float* B, int64_t ldb,
                 int M, int N, int K) {
  int n = 0;
#if FA_KAVX512
  for (; n + 32 <= N; n += 32) gemm_panel<vw, kMrW, 2, ACC>(C + n, ldc, A, ars, acs, B + n, ldb, M, K);
  for (; n + 16 <= N; n += 16) gemm_panel<vw, kMrW, 1, ACC>(C + n, ldc, A, ars, acs, B + n, ldb, M, K);
#endif
  for (; n + 2 * VL <= N; n += 2 * VL) gemm_panel<vf, 6, 2, ACC>(C + n, ldc, A, ars, acs, B + n, ldb, M, K);
  for (; n < N; n += VL) gemm_panel<vf, 6, 1, ACC>(C + n, ldc, A, ars, acs, B + n, ldb, M, K);
}


// tanh(x) and 1 - tanh(x)^2, vectorised; relative error ~2e-7 for both (Cephes tanhf). |x| < 0.625:
// an odd polynomial; else tanh = sign(x) (1 - u) with u = 2 / (e^{2|x|} + 1), and 1 - tanh^2 =
// u (2 - u), which stays accurate where tanh rounds to +-1. NaN gives NaN; +-inf gives +-1, 0.
static inline __attribute__((always_inline)) void vtanh(vf x, vf& t, vf& d) {
  const vu sign = (vu)x & 0x80000000u;
  const vf ax = (vf)((vu)x & 0x7fffffffu);
  const vf z = x * x;
  vf p = vsplat(-5.70498872745e-3f);
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const vf t_small = x + x * z * p;
  const vf u = 2.f / (vexp2(ax * (2.f * kLog2e)) + 1.f);
  const vf t_large = (vf)((vu)(1.f - u) | sign);
  const vi small = (vi)(ax < 0.625f);
  t = vselect(small, t_small, t_large);
  d = vselect(small, 1.f - t_small * t_small, u * (2.f - u));
}

// Softcap on the first rp entries (a multiple of 8) of the nc columns of a transposed score tile
// with leading dimension ld, in place: s -> softcap * log2(e) * tanh(scale * s / softcap), the
// score in the log2 domain.
static void softcap_tile_cols(float* __restrict s, int nc, int ld, int rp, float cap_in, float cap_out) {
  for (int c = 0; c < nc; ++c)
    for (int r = 0; r < rp; r += VL) {
      float* x = s + (int64_t)c * ld + r;
      vf t, d;
      vtanh(vload(x) * cap_in, t, d);
      vstore(x, t * cap_out);
    }
}

// ---- tile loads / stores -----------------------------------------------------------------------
// Converts one row of D elements (at element offset `off` of `base`) to float.
static inline void load_row(const void* base, int64_t off, fa_dtype dt, int D, float* __restrict dst) {
  if (dt == FA_FLOAT32) {
    memcpy(dst, static_cast<const float*>(base) + off, (size_t)D * sizeof(float));
  } else if (dt == FA_FLOAT16) {
    const uint16_t* src = static_cast<const uint16_t*>(base) + off;
    int d = 0;
#if FA_KAVX512
    for (; d + 16 <= D; d += 16)
      _mm512_storeu_ps(dst + d, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + d))));
#endif
#if FA_KAVX2
    for (; d + 8 <= D; d += 8)
      _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d))));
#endif
    for (; d < D; ++d) dst[d] = f16_bits_to_f32(src[d]);
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(base) + off;
    int d = 0;
#if FA_KAVX512
    for (; d + 16 <= D; d += 16)
      _mm512_storeu_si512(dst + d, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                                         reinterpret_cast<const __m256i*>(src + d))),
                                                     16));
#endif
#if FA_KAVX2
    for (; d + 8 <= D; d += 8)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + d),
                          _mm256_slli_epi32(
                              _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d))), 16));
#endif
    for (; d < D; ++d) dst[d] = bf16_bits_to_f32(src[d]);
  }
}

// Rounds one row of D floats into the output tensor.
static inline void store_row(const float* __restrict src, int D, fa_dtype dt, void* base, int64_t off) {
  if (dt == FA_FLOAT32) {
    memcpy(static_cast<float*>(base) + off, src, (size_t)D * sizeof(float));
  } else if (dt == FA_FLOAT16) {
    uint16_t* dst = static_cast<uint16_t*>(base) + off;
    int d = 0;
#if FA_KAVX2
    for (; d + 8 <= D; d += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + d),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + d), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    for (; d < D; ++d) dst[d] = f32_to_f16_bits(src[d]);
  } else {
    uint16_t* dst = static_cast<uint16_t*>(base) + off;
    for (int d = 0; d < D; ++d) dst[d] = f32_to_bf16_bits(src[d]);
  }
}

// Loads rows [n0, n0+rows) of `loc` into a row-major [rows][Dp] float tile; the columns D..Dp-1
// are zeroed.
static void load_tile(const void* base, const RowLoc& loc, fa_dtype dt, int64_t n0, int rows, int D, int Dp,
                      float* __restrict dst) {
  for (int r = 0; r < rows; ++r) {
    float* row = dst + (int64_t)r * Dp;
    load_row(base, loc.at(n0 + r), dt, D, row);
    for (int d = D; d < Dp; ++d) row[d] = 0.f;
  }
}

// A block of rows as float: either the tensor itself (fp32 with D % 8 == 0 and evenly strided
// rows, so a row of Dp = D floats is exactly the row) or a converted copy in `buf`.
struct RowsView {
  const float* p;
  int64_t ld;
};

static inline RowsView rows_view(const void* base, const RowLoc& loc, const Geometry& g, int64_t n0, int rows,
                                 float* buf) {
  if (g.direct && loc.even(n0, rows)) return {static_cast<const float*>(base) + loc.at(n0), loc.row};
  load_tile(base, loc, g.dtype, n0, rows, g.D, g.Dp, buf);
  return {buf, g.Dp};
}

// Transposed load: dst[d][r] = X[row r][d] for r < rows, d < D, where row r starts at element
// offset off(r) of base; columns rows..cols_pad-1 are zeroed. tmp holds 8 converted rows.
template <class Off>
static void load_tile_t_at(const void* base, Off off_of, const Geometry& g, int rows, float* __restrict dst,
                           int ldd, int cols_pad, float* __restrict tmp) {
  const int D = g.D;
  for (int r0 = 0; r0 < rows; r0 += 8) {
    const int nr = std::min(8, rows - r0);
    const float* src[8];
    for (int j = 0; j < nr; ++j) {
      const int64_t off = off_of(r0 + j);
      if (g.dtype == FA_FLOAT32) {
        src[j] = static_cast<const float*>(base) + off;
      } else {
        load_row(base, off, g.dtype, D, tmp + (int64_t)j * g.Dp);
        src[j] = tmp + (int64_t)j * g.Dp;
      }
    }
    for (int d = 0; d < D; ++d) {
      float* out = dst + (int64_t)d * ldd + r0;
      for (int j = 0; j < nr; ++j) out[j] = src[j][d];
    }
  }
  if (cols_pad > rows)
    for (int d = 0; d < D; ++d) memset(dst + (int64_t)d * ldd + rows, 0, sizeof(float) * (cols_pad - rows));
}

// The same for rows n0 .. n0 + rows - 1 of `loc`.
static void load_tile_t(const void* base, const RowLoc& loc, const Geometry& g, int64_t n0, int rows,
                        float* __restrict dst, int ldd, int cols_pad, float* __restrict tmp) {
  load_tile_t_at(base, [&](int r) { return loc.at(n0 + r); }, g, rows, dst, ldd, cols_pad, tmp);
}

// Visible columns [lo, hi) of the tile of nc keys starting at key k0 for query row i.
static inline void visible_cols(const Geometry& g, const Seq& s, int64_t i, int64_t k0, int nc, int* lo, int* hi) {
  *lo = (int)std::max<int64_t>(0, std::min<int64_t>(nc, row_lo(g, s, i) - k0));
  *hi = (int)std::max<int64_t>(0, std::min<int64_t>(nc, row_hi(g, s, i) - k0));
}

// vlo[r], vhi[r] = visible columns of the tile for tile row r, which holds query row
// i0 + r / heads (FwdPack; heads = 1 outside the forward), for r < rows; [0, 0) for the padding
// rows up to padded.
static inline void fill_visible(const Geometry& g, const Seq& s, int64_t i0, int rows, int padded, int heads,
                                int64_t k0, int nc, int32_t* vlo, int32_t* vhi) {
  for (int r = 0; r < padded; ++r) {
    int lo = 0, hi = 0;
    if (r < rows) visible_cols(g, s, i0 + r / heads, k0, nc, &lo, &hi);
    vlo[r] = lo;
    vhi[r] = hi;
  }
}

static inline vi viload(const int32_t* p) {
  vi v;
  memcpy(&v, p, sizeof v);
  return v;
}

// Lanes with lo <= c < hi.
static inline __attribute__((always_inline)) vi in_range(vi c, vi lo, vi hi) { return (c >= lo) & (c < hi); }

// ---- narrow forward tasks (at most 8 tile rows) ---------------------------------------------------
// A task of at most 8 rows (a decode step: the query heads of one kv group, FwdPack) would fill one
// vector of lanes in the S^T GEMM with mostly padding, and would convert each K / V row to a float
// copy before using it once. These kernels read the K / V rows where they are instead (fp16 and
// bf16 widened in registers as they are loaded): S by dot products along the head dim, every lane
// useful; O += P V with the head dim in the lanes. Each S entry is the sum of 8 or 16 lane sums;
// each O element stays one chain of multiply-adds over the keys in order. Head dims that are a
// multiple of 8 only (the others take the GEMM path).

// The narrow kernels read each key's K / V rows where they lie: a head's slice of a token row, a
// few cache lines at a stride of the whole token row (all kv heads), from pages in any order, which
// the hardware prefetchers do not follow far enough to keep the loads from waiting on memory. So
// they ask for the rows kNarrowAhead keys ahead of the one they use (8: 4 and 16 measured slower;
// fp16 decode GQA 32/8, B 16 x 4k, 2 cores: 23 -> 15 ms per call).
constexpr int kNarrowAhead = 8;
static inline int narrow_row_bytes(int dt, int D) { return D * (dt == FA_FLOAT32 ? 4 : 2); }
static inline __attribute__((always_inline)) void prefetch_row(const char* p, int bytes) {
  for (int b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, 3);
}
// The next tile's rows of the head a pass works on (row c at byte p[c] + off, n rows), asked for one
// per key of the pass, so that the requests spread over the tile's arithmetic: asked for all at
// once at the tile's start (1736b83), they filled the core's miss queue and stalled it there (perf:
// ~35% of a decode step's samples on those prefetches, fp16 GQA 32/8, B 16 x 4k).
struct NextRows {
  const char* const* p = nullptr;
  int64_t off = 0;
  int n = 0;
  inline __attribute__((always_inline)) void at(int c, int bytes) const {
    if (c < n) prefetch_row(p[c] + off, bytes);
  }
  // the rows past the pass's last key (a next tile longer than this one)
  inline void rest(int from, int bytes) const {
    for (int c = from; c < n; ++c) prefetch_row(p[c] + off, bytes);
  }
};

// Byte addresses of rows n0 .. n0 + n - 1 of loc (elements of es bytes), walking the pages
// incrementally instead of dividing per row.
static inline void row_ptrs(const void* base, const RowLoc& loc, int64_t es, int64_t n0, int n,
                            const char** out) {
  const char* b = static_cast<const char*>(base);
  if (loc.pages == nullptr) {
    for (int r = 0; r < n; ++r) out[r] = b + loc.at(n0 + r) * es;
    return;
  }
  int64_t j = n0 / loc.page_size;
  int off = (int)(n0 % loc.page_size);
  for (int r = 0; r < n; ++r) {
    out[r] = b + loc.in_page(j, off) * es;
    if (++off == loc.page_size) {
      off = 0;
      ++j;
    }
  }
}

// VL elements of a row at element d, as floats (DT: the fa_dtype value).
template <int DT>
static inline __attribute__((always_inline)) vf load_elems(const char* row, int d) {
  if (DT == FA_FLOAT32) return vload(reinterpret_cast<const float*>(row) + d);
  const uint16_t* src = reinterpret_cast<const uint16_t*>(row) + d;
#if FA_KAVX2
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  if (DT == FA_FLOAT16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
#else
  vf v;
  for (int i = 0; i < VL; ++i) v[i] = DT == FA_FLOAT16 ? f16_bits_to_f32(src[i]) : bf16_bits_to_f32(src[i]);
  return v;
#endif
}

// The same for a vector type V: vf, or (AVX-512 set) vw, 16 elements.
template <class V, int DT>
static inline __attribute__((always_inline)) V load_vec(const char* row, int d) {
#if FA_KAVX512
  if constexpr (sizeof(V) == 64) {
    if (DT == FA_FLOAT32) return vld<vw>(reinterpret_cast<const float*>(row) + d);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + d));
    if (DT == FA_FLOAT16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else
#endif
  {
    return load_elems<DT>(row, d);
  }
}

// out[i] = the sum of the lanes of a[i] for i < N (N <= 8). With AVX2 the eight sums come out of
// one tree of horizontal adds (a 16-lane vector is first folded to 8 lanes), instead of a chain of
// lane extractions per vector.
template <int N, class V>
static inline __attribute__((always_inline)) void hsums(const V* a, float* out) {
#if FA_KAVX2
  __m256 h[8];
  for (int i = 0; i < 8; ++i) {
    if (i >= N) {
      h[i] = _mm256_setzero_ps();
      continue;
    }
#if FA_KAVX512
    if constexpr (sizeof(V) == 64) {
      const __m512 z = (__m512)a[i];
      h[i] = _mm256_add_ps(_mm512_castps512_ps256(z), _mm512_extractf32x8_ps(z, 1));
    } else
#endif
    {
      h[i] = (__m256)a[i];
    }
  }
  const __m256 s0123 = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
  const __m256 s4567 = _mm256_hadd_ps(_mm256_hadd_ps(h[4], h[5]), _mm256_hadd_ps(h[6], h[7]));
  const __m256 r =
      _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
  if (N == 8) {
    _mm256_storeu_ps(out, r);
  } else {
    alignas(32) float t[8];
    _mm256_store_ps(t, r);
    for (int i = 0; i < N; ++i) out[i] = t[i];
  }
#else
  for (int i = 0; i < N; ++i) out[i] = hsum(a[i]);  // V is vf in the sets without AVX2
#endif
}

// st[c * ld + r0 + j] = K_c . Q_{r0 + j} for the nc keys of the tile (K_c at byte kp[c] + off)
// and R (<= 4) rows of Q (row-major floats, leading dimension ldq); 8 / R keys at a time, so that
// each Q load serves them all and their dot products are reduced together (hsums). A last partial
// group repeats its last key (the repeats are computed and dropped).
template <class V, int DT, int R>
static void narrow_s(const char* const* kp, int64_t off, int nc, const float* __restrict q, int64_t ldq, int r0,
                     int D, float* __restrict st, int ld, NextRows next) {
  constexpr int W = (int)(sizeof(V) / sizeof(float));
  constexpr int KC = 8 / R;
  const float* qr = q + (int64_t)r0 * ldq;
  const int row_bytes = narrow_row_bytes(DT, D);
  for (int c = 0; c < nc; c += KC) {
    const int kc = std::min(KC, nc - c);
    for (int i = c + kNarrowAhead; i < std::min(c + kNarrowAhead + KC, nc); ++i) prefetch_row(kp[i] + off, row_bytes);
    for (int i = c; i < c + KC; ++i) next.at(i, row_bytes);
    const char* kr[KC];
    for (int i = 0; i < KC; ++i) kr[i] = kp[c + std::min(i, kc - 1)] + off;
    V a[KC * R];
    for (int i = 0; i < KC * R; ++i) a[i] = V{};
    for (int d = 0; d < D; d += W) {
      V k[KC];
      for (int i = 0; i < KC; ++i) k[i] = load_vec<V, DT>(kr[i], d);
      for (int j = 0; j < R; ++j) {
        const V x = vld<V>(qr + j * ldq + d);
        for (int i = 0; i < KC; ++i) a[i * R + j] += k[i] * x;
      }
    }
    float sums[KC * R];
    hsums<KC * R>(a, sums);
    for (int i = 0; i < kc; ++i)
      for (int j = 0; j < R; ++j) st[(int64_t)(c + i) * ld + r0 + j] = sums[i * R + j];
  }
  next.rest((nc + KC - 1) / KC * KC, row_bytes);
}

// acc[r0 + j][:] += sum_c P[r0 + j][c] V_c (at byte vp[c] + off) for R rows, P transposed in st
// (leading dimension ld), two vectors of the head dim at a time (one for a last odd vector).
template <class V, int DT, int R>
static void narrow_pv(const char* const* vp, int64_t off, int nc, const float* __restrict st, int ld, int r0, int D,
                      float* __restrict acc, int64_t ldo, NextRows next) {
  constexpr int W = (int)(sizeof(V) / sizeof(float));
  float* o = acc + (int64_t)r0 * ldo;
  const int row_bytes = narrow_row_bytes(DT, D);
  int d = 0;
  for (; d + 2 * W <= D; d += 2 * W) {
    V o0[R], o1[R];
    for (int j = 0; j < R; ++j) {
      o0[j] = vld<V>(o + j * ldo + d);
      o1[j] = vld<V>(o + j * ldo + d + W);
    }
    for (int c = 0; c < nc; ++c) {
      // the first pass over the keys asks for whole rows ahead; the later ones find them cached
      if (d == 0) {
        if (c + kNarrowAhead < nc) prefetch_row(vp[c + kNarrowAhead] + off, row_bytes);
        next.at(c, row_bytes);
      }
      const V v0 = load_vec<V, DT>(vp[c] + off, d), v1 = load_vec<V, DT>(vp[c] + off, d + W);
      const float* p = st + (int64_t)c * ld + r0;
      for (int j = 0; j < R; ++j) {
        const V pj = V{} + p[j];
        o0[j] += pj * v0;
        o1[j] += pj * v1;
      }
    }
    for (int j = 0; j < R; ++j) {
      vst(o + j * ldo + d, o0[j]);
      vst(o + j * ldo + d + W, o1[j]);
    }
    if (d == 0) next.rest(nc, row_bytes);
  }
  if (D < 2 * W) next.rest(0, row_bytes);  // (no pass above)
  for (; d < D; d += W) {
    V o0[R];
    for (int j = 0; j < R; ++j) o0[j] = vld<V>(o + j * ldo + d);
    for (int c = 0; c < nc; ++c) {
      const V v0 = load_vec<V, DT>(vp[c] + off, d);
      const float* p = st + (int64_t)c * ld + r0;
      for (int j = 0; j < R; ++j) o0[j] += (V{} + p[j]) * v0;
    }
    for (int j = 0; j < R; ++j) vst(o + j * ldo + d, o0[j]);
  }
}

// Both kernels over `rows` (<= 8) rows in groups of up to 4, with vectors V (the head dim a
// multiple of V's width). PV = false: S into st; PV = true: O += P V.
template <class V, int DT, bool PV>
static void narrow_groups(const char* const* p, int64_t off, int nc, const float* q, int64_t ldq, int rows, int D,
                          float* st, int ld, float* acc, int64_t ldo, NextRows next) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int n = std::min(4, rows - r0);
    if (r0 > 0) next.n = 0;  // (asked for by the first group's pass)
#define FA_NARROW_CASE(R)                                        \
  case R:                                                       \
    if (PV) narrow_pv<V, DT, R>(p, off, nc, st, ld, r0, D, acc, ldo, next); \
    else narrow_s<V, DT, R>(p, off, nc, q, ldq, r0, D, st, ld, next);       \
    break;
    switch (n) {
      FA_NARROW_CASE(1)
      FA_NARROW_CASE(2)
      FA_NARROW_CASE(3)
      FA_NARROW_CASE(4)
      default: break;
    }
#undef FA_NARROW_CASE
  }
}

// One kv head's rows (at most 8) of a narrow task; K / V rows at byte p[c] + off. The AVX-512 set
// takes the head dim 16 lanes at a time when it is a multiple of 16.
template <int DT, bool PV>
static void narrow_rows(const char* const* p, int64_t off, int nc, const float* q, int64_t ldq, int rows, int D,
                        float* st, int ld, float* acc, int64_t ldo, NextRows next) {
#if FA_KAVX512
  if (D % 16 == 0) narrow_groups<vw, DT, PV>(p, off, nc, q, ldq, rows, D, st, ld, acc, ldo, next);
  else
#endif
    narrow_groups<vf, DT, PV>(p, off, nc, q, ldq, rows, D, st, ld, acc, ldo, next);
}

// A narrow task's tile: `segs` kv heads of seg rows each (tile rows j * seg .. (j + 1) * seg - 1 for
// the j-th, whose K / V rows lie j * head bytes after the first's). PV = false: S^T into st, and 0 in
// the padding rows up to rp (whose softmax results are never used, but stay finite); PV = true:
// O += P V.
// `np_` (np rows): the next tile's rows, each head's asked for during that head's pass (NextRows).
template <bool PV>
static void narrow_tile(fa_dtype dt, const char* const* p, int64_t head, int segs, int seg, int rp, int nc,
                        const float* q, int64_t ldq, int D, float* st, int ld, float* acc, int64_t ldo,
                        const char* const* np_, int np) {
  const int row_bytes = narrow_row_bytes(dt, D);
  for (int j = 0; j < segs; ++j) {
    const int64_t off = j * head;
    const int64_t r0 = (int64_t)j * seg;
    // the next kv head's first rows, which its pass asks for before it can prefetch them itself
    if (j + 1 < segs)
      for (int c = 0; c < std::min(kNarrowAhead, nc); ++c) prefetch_row(p[c] + off + head, row_bytes);
    const float* qj = PV ? nullptr : q + r0 * ldq;
    float* aj = PV ? acc + r0 * ldo : nullptr;
    const NextRows next{np_, off, np};
    if (dt == FA_FLOAT16) narrow_rows<FA_FLOAT16, PV>(p, off, nc, qj, ldq, seg, D, st + r0, ld, aj, ldo, next);
    else if (dt == FA_BFLOAT16) narrow_rows<FA_BFLOAT16, PV>(p, off, nc, qj, ldq, seg, D, st + r0, ld, aj, ldo, next);
    else narrow_rows<FA_FLOAT32, PV>(p, off, nc, qj, ldq, seg, D, st + r0, ld, aj, ldo, next);
  }
  if (!PV)
    for (int c = 0; c < nc; ++c)
      for (int r = segs * seg; r < rp; ++r) st[(int64_t)c * ld + r] = 0.f;
}

// ---- forward -----------------------------------------------------------------------------------
// Online softmax on a transposed score tile st[c][r] (nc keys x bmp query rows), vectorised over
// the query rows, R vectors of rows at a time starting at row r. On return st holds
// P = exp2(scale_log2 * s - m_new), 0 where masked; m, l are the running max (log2 domain) and
// sum per row, alpha the factor to rescale the row's O by. MASK: apply the per-row column limits
// [vlo, vhi) (only tiles that some row does not see completely need it).
template <class V, bool MASK, int R>
static inline __attribute__((always_inline)) void softmax_rows(float* __restrict st, int nc, int bmp, int r,
                                                               const int32_t* __restrict vlo,
                                                               const int32_t* __restrict vhi, float scale_log2,
                                                               float* __restrict m, float* __restrict l,
                                                               float* __restrict alpha) {
  using VI = mask_of<V>;
  constexpr int W = (int)(sizeof(V) / sizeof(float));
  const V neg_inf = V{} - INFINITY;
  const V scl = V{} + scale_log2;
  V mx[R];
  if (MASK) {
    VI lo[R], hi[R];
    for (int j = 0; j < R; ++j) {
      lo[j] = vldi<VI>(vlo + r + j * W);
      hi[j] = vldi<VI>(vhi + r + j * W);
      mx[j] = neg_inf;
    }
    for (int c = 0; c < nc; ++c) {
      float* p = st + (int64_t)c * bmp + r;
      const VI cc = VI{} + c;
      for (int j = 0; j < R; ++j) {
        const V x = vsel<V>((cc >= lo[j]) & (cc < hi[j]), vld<V>(p + j * W) * scl, neg_inf);
        vst(p + j * W, x);
        mx[j] = vsel<V>(x > mx[j], x, mx[j]);
      }
    }
  } else if (scale_log2 >= 0.f) {  // rounding is monotonic: max(s * scl) = max(s) * scl
    for (int j = 0; j < R; ++j) mx[j] = neg_inf;
    for (int c = 0; c < nc; ++c) {
      const float* p = st + (int64_t)c * bmp + r;
      for (int j = 0; j < R; ++j) {
        const V x = vld<V>(p + j * W);
        mx[j] = vsel<V>(x > mx[j], x, mx[j]);
      }
    }
    for (int j = 0; j < R; ++j) mx[j] = mx[j] * scl;
  } else {  // negative (or NaN) scale: the smallest raw score gives the largest scaled one
    for (int j = 0; j < R; ++j) mx[j] = V{} + INFINITY;
    for (int c = 0; c < nc; ++c) {
      const float* p = st + (int64_t)c * bmp + r;
      for (int j = 0; j < R; ++j) {
        const V x = vld<V>(p + j * W);
        mx[j] = vsel<V>(x < mx[j], x, mx[j]);
      }
    }
    for (int j = 0; j < R; ++j) mx[j] = mx[j] * scl;
  }
  V m_use[R], sum[R];
  for (int j = 0; j < R; ++j) {
    const V m_old = vld<V>(m + r + j * W);
    const V m_new = vsel<V>(mx[j] > m_old, mx[j], m_old);
    m_use[j] = vsel<V>(m_new == neg_inf, V{}, m_new);  // rows that saw nothing yet: 0
    vst(alpha + r + j * W, vexp2(m_old - m_use[j]));  // 0 while m_old is -inf
    vst(m + r + j * W, m_new);
    sum[j] = V{};
  }
  for (int c = 0; c < nc; ++c) {
    float* p = st + (int64_t)c * bmp + r;
    for (int j = 0; j < R; ++j) {
      const V e = MASK ? vexp2(vld<V>(p + j * W) - m_use[j]) : vexp2(vld<V>(p + j * W) * scl - m_use[j]);
      vst(p + j * W, e);
      sum[j] += e;
    }
  }
  for (int j = 0; j < R; ++j)
    vst(l + r + j * W, vld<V>(l + r + j * W) * vld<V>(alpha + r + j * W) + sum[j]);
}

// The first rp rows (a multiple of 8) of a score tile with leading dimension bmp.
template <bool MASK>
static void softmax_cols(float* __restrict st, int nc, int bmp, int rp, const int32_t* __restrict vlo,
                         const int32_t* __restrict vhi, float scale_log2, float* __restrict m, float* __restrict l,
                         float* __restrict alpha) {
  int r = 0;
#if FA_KAVX512
  for (; r + 32 <= rp; r += 32) softmax_rows<vw, MASK, 2>(st, nc, bmp, r, vlo, vhi, scale_log2, m, l, alpha);
  for (; r + 16 <= rp; r += 16) softmax_rows<vw, MASK, 1>(st, nc, bmp, r, vlo, vhi, scale_log2, m, l, alpha);
#endif
  for (; r + 2 * VL <= rp; r += 2 * VL) softmax_rows<vf, MASK, 2>(st, nc, bmp, r, vlo, vhi, scale_log2, m, l, alpha);
  for (; r < rp; r += VL) softmax_rows<vf, MASK, 1>(st, nc, bmp, r, vlo, vhi, scale_log2, m, l, alpha);
}

// Normalises a task's O rows (acc, [rows][Dp], unnormalised) by their sums l and stores them, with
// their lse from the running max m (log2 domain); rows that see no key get O = 0, lse = +inf.
static void fwd_store_rows(const FwdArgs& a, const FwdTile& tl, float* acc, const float* mrow, const float* lrow) {
  const Geometry& g = a.g;
  const int Dp = g.Dp;
  for (int r = 0; r < tl.rows; ++r) {
    float* o = acc + (int64_t)r * Dp;
    const int64_t i = tl.i0 + r / tl.pk.heads, h = tl.h0 + r % tl.pk.heads;
    float* lse = a.lse + tl.s.lse0 + h * g.lse_hs + i;
    if (row_lo(g, tl.s, i) >= row_hi(g, tl.s, i)) {  // the row sees no key
      memset(o, 0, sizeof(float) * Dp);
      *lse = INFINITY;
    } else {
      const vf inv = vsplat(1.f / lrow[r]);
      for (int d = 0; d < Dp; d += VL) vstore(o + d, vload(o + d) * inv);
      *lse = mrow[r] * kLn2 + logf(lrow[r]);
    }
    store_row(o, g.D, g.dtype, a.o, fwd_row_at(a.os, tl, r));
  }
}

// Forward work item: one block of query rows of `heads` query heads of one kv group of one
// sequence (FwdTile), over all of its keys or, with key splits, over split w % splits of them.
// Scores are computed transposed, S^T = K Q^T, so that Q is transposed once per item and K / V
// tiles are used as loaded. The GEMMs and the softmax cover the task's rows rounded up to 8 (rp),
// not the tile's capacity, so short sequences in a packed batch pay for their own rows only.
void fwd_task(const FwdArgs& a, int64_t item, float* ws) {
  const Geometry& g = a.g;
  const Scratch sc(g);
  float* __restrict qt = ws + sc.qt;
  float* __restrict acc = ws + sc.acc;
  float* __restrict st = ws + sc.s;
  float* __restrict mrow = ws + sc.m;
  float* __restrict lrow = ws + sc.l;
  float* __restrict alpha = ws + sc.alpha;
  int32_t* vlo = reinterpret_cast<int32_t*>(ws + sc.vlo);
  int32_t* vhi = reinterpret_cast<int32_t*>(ws + sc.vhi);

  const int64_t task = item / a.splits, split = item % a.splits;
  const FwdTile tl = fwd_tile(a, task);
  const Seq& s = tl.s;
  const int64_t i0 = tl.i0, hk = tl.h0 / g.group;
  const int qn = tl.qn, rows = tl.rows, rp = round_up(rows, 8);
  const int Dp = g.Dp, D = g.D, bmp = g.bmp;
  const float scl = g.softcap ? 1.f : g.scale_log2;  // softcap tiles already hold log2-domain scores

  for (int r = 0; r < rp; ++r) {
    mrow[r] = -INFINITY;
    lrow[r] = 0.f;
  }
  memset(acc, 0, sizeof(float) * (size_t)rows * Dp);
  Range keys = block_keys(g, s, i0, qn);  // every other key is masked for every row
  if (a.splits > 1 && keys.lo < keys.hi) {  // this split's share: whole tiles, the last ones may be empty
    const int64_t per = (keys.hi - keys.lo + a.splits - 1) / a.splits;
    const int64_t chunk = (per + g.bn - 1) / g.bn * g.bn;
    keys.lo += split * chunk;
    keys.hi = std::min(keys.hi, keys.lo + chunk);
  }
  // Narrow tasks (decode) read K / V in place (see narrow_tile); the others through GEMMs. A task
  // with several kv heads (pk.kvh > 1, always narrow) holds one group of rows per kv head.
  const int segs = tl.pk.kvh, seg = rows / segs;
  const bool narrow = seg <= kNarrowRows && D % 8 == 0;
  if (keys.lo < keys.hi) {
    const RowLoc kl = k_rows(g, a.ks, s, hk), vl = k_rows(g, a.vs, s, hk);
    const int64_t es = g.dtype == FA_FLOAT32 ? 4 : 2;
    const char** kp = reinterpret_cast<const char**>(ws + sc.kp);
    const char** vp = reinterpret_cast<const char**>(ws + sc.vp);
    const char** kp2 = reinterpret_cast<const char**>(ws + sc.kp2);  // the next tile's
    const char** vp2 = reinterpret_cast<const char**>(ws + sc.vp2);
    float* __restrict qr = ws + sc.qr;
    if (narrow)
      for (int r = 0; r < rows; ++r) load_row(a.q, fwd_row_at(a.qs, tl, r), g.dtype, D, qr + (int64_t)r * Dp);
    else
      load_tile_t_at(a.q, [&](int r) { return fwd_row_at(a.qs, tl, r); }, g, rows, qt, bmp, rp, ws + sc.tmp);
    // the keys of the tile at k0 (within one page when pages cap the tiles)
    const auto tile_keys = [&](int64_t k0) {
      const int nc = (int)std::min<int64_t>(g.bn, keys.hi - k0);
      return g.page_cap ? (int)std::min<int64_t>(nc, g.page_size - k0 % g.page_size) : nc;
    };
    for (int64_t k0 = keys.lo; k0 < keys.hi;) {
      const int nc = tile_keys(k0);
      RowsView V{nullptr, 0};
      int np = 0;  // narrow: the next tile's keys
      if (narrow) {
        if (k0 == keys.lo) {  // (later tiles': the tile before's kp2 / vp2, swapped in below)
          row_ptrs(a.k, kl, es, k0, nc, kp);
          row_ptrs(a.v, vl, es, k0, nc, vp);
        }
        // The next tile's K / V rows of this task's kv heads (in a paged cache another page,
        // anywhere), asked for while this tile is computed, each head's during that head's pass,
        // one row per key (NextRows): each head's row on its own (next to each other in a token
        // row, but N rows apart in a [B, H, N, D] cache).
        if (k0 + nc < keys.hi) {
          np = tile_keys(k0 + nc);
          row_ptrs(a.k, kl, es, k0 + nc, np, kp2);
          row_ptrs(a.v, vl, es, k0 + nc, np, vp2);
        }
        narrow_tile<false>(g.dtype, kp, a.ks.head * es, segs, seg, rp, nc, qr, Dp, D, st, bmp, nullptr, 0, kp2, np);  // S^T
      } else {
        const RowsView K = rows_view(a.k, kl, g, k0, nc, ws + sc.kr);
        V = rows_view(a.v, vl, g, k0, nc, ws + sc.vr);
        gemm<false>(st, bmp, K.p, K.ld, 1, qt, bmp, nc, rp, D);  // S^T = K Q^T
      }
      if (g.softcap) softcap_tile_cols(st, nc, bmp, rp, g.cap_in, g.cap_out);
      if (!tile_full(g, s, i0, qn, k0, nc)) {  // some row does not see the whole tile
        fill_visible(g, s, i0, rows, rp, tl.pk.heads, k0, nc, vlo, vhi);
        softmax_cols<true>(st, nc, bmp, rp, vlo, vhi, scl, mrow, lrow, alpha);
      } else {
        softmax_cols<false>(st, nc, bmp, rp, vlo, vhi, scl, mrow, lrow, alpha);
      }
      for (int r = 0; r < rows; ++r) {
        if (alpha[r] == 1.f) continue;
        float* o = acc + (int64_t)r * Dp;
        const vf va = vsplat(alpha[r]);
        for (int d = 0; d < Dp; d += VL) vstore(o + d, vload(o + d) * va);
      }
      if (narrow)  // O += P V
        narrow_tile<true>(g.dtype, vp, a.vs.head * es, segs, seg, rp, nc, nullptr, 0, D, st, bmp, acc, Dp, vp2, np);
      else
        gemm<true>(acc, Dp, st, 1, bmp, V.p, V.ld, rows, Dp, nc);
      if (np > 0) {  // the next tile's rows are the ones just asked for
        std::swap(kp, kp2);
        std::swap(vp, vp2);
      }
      k0 += nc;
    }
  }
  if (a.splits == 1) {
    fwd_store_rows(a, tl, acc, mrow, lrow);
    return;
  }
  float* part = a.part + item * a.part_stride;  // the partial result, for fwd_combine_task
  memcpy(part, acc, sizeof(float) * (size_t)rows * Dp);
  memcpy(part + (int64_t)g.bm * Dp, mrow, sizeof(float) * (size_t)rows);
  memcpy(part + (int64_t)g.bm * (Dp + 1), lrow, sizeof(float) * (size_t)rows);
}

// Key splits: one task's partial results (split order fixed) merged into split 0's buffer by their
// running max (O and l rescaled to the largest), then stored as an unsplit task's are.
void fwd_combine_task(const FwdArgs& a, int64_t task) {
  const Geometry& g = a.g;
  const FwdTile tl = fwd_tile(a, task);
  const int Dp = g.Dp;
  const int64_t m_at = (int64_t)g.bm * Dp, l_at = (int64_t)g.bm * (Dp + 1);
  float* p0 = a.part + task * a.splits * a.part_stride;
  for (int r = 0; r < tl.rows; ++r) {
    float mm = -INFINITY;
    for (int j = 0; j < a.splits; ++j) {
      const float m = p0[j * a.part_stride + m_at + r];
      mm = m > mm ? m : mm;
    }
    const float mu = mm == -INFINITY ? 0.f : mm;  // as in the softmax: rows that saw nothing yet
    // A weight below float's range (a piece whose largest score lies more than 149 log2 units under
    // the row's) is applied in double, and a piece whose weight is 0 even there adds nothing: an
    // infinite value in V times a weight rounded to 0 would give NaN where the unsplit walk, which
    // rescales in smaller steps, keeps the infinity.
    float* o = p0 + (int64_t)r * Dp;
    float l = 0.f;
    for (int j = 0; j < a.splits; ++j) {
      const float* pj = p0 + j * a.part_stride;
      const float* oj = pj + (int64_t)r * Dp;
      const double wd = exp2((double)pj[m_at + r] - (double)mu);
      const float w = (float)wd;
      l += pj[l_at + r] * w;
      if (w > 0.f) {
        const vf vw = vsplat(w);
        if (j == 0)
          for (int d = 0; d < Dp; d += VL) vstore(o + d, vload(o + d) * vw);
        else
          for (int d = 0; d < Dp; d += VL) vstore(o + d, vload(o + d) + vload(oj + d) * vw);
      } else if (wd > 0.0) {
        for (int d = 0; d < Dp; ++d) o[d] = (float)((j == 0 ? 0.0 : (double)o[d]) + (double)oj[d] * wd);
      } else if (j == 0) {
        memset(o, 0, sizeof(float) * Dp);
      }
    }
    p0[m_at + r] = mm;
    p0[l_at + r] = l;
  }
  fwd_store_rows(a, tl, p0, p0 + m_at, p0 + l_at);
}

// ---- backward ----------------------------------------------------------------------------------
// Pass 0: dvec[b, h, i] = sum_d dO[i, d] * O[i, d] for a chunk of rows (packed: b = 0 and i runs
// over all total_q rows, so dvec is [H, total_q] like lse).
void bwd_dot_task(const BwdArgs& a, int64_t task) {
  const Geometry& g = a.g;
  const int64_t chunks = (a.dot_N + kDotRowsPerTask - 1) / kDotRowsPerTask;
  const int64_t bh = task / chunks;
  const int64_t b = bh / g.H, h = bh % g.H;
  const int64_t r0 = (task % chunks) * kDotRowsPerTask;
  const int64_t r1 = std::min<int64_t>(a.dot_N, r0 + kDotRowsPerTask);
  alignas(64) float x[256], y[256];
  const int Dp = g.Dp;
  for (int64_t r = r0; r < r1; ++r) {
    load_row(a.dout, elem_offset(a.dos, b, r, h), g.dtype, g.D, x);
    load_row(a.o, elem_offset(a.os, b, r, h), g.dtype, g.D, y);
    for (int d = g.D; d < Dp; ++d) x[d] = y[d] = 0.f;
    vf s = vf{};
    for (int d = 0; d < Dp; d += VL) s += vload(x + d) * vload(y + d);
    a.dvec[bh * a.dot_N + r] = hsum(s);
  }
}

// Per-row values of a query block: lse * log2(e) (+inf for padding rows, so their P is 0) and
// dvec (0 for padding rows).
static inline void load_row_stats(const BwdArgs& a, const Seq& s, int64_t h, int64_t i0, int rows, int padded,
                                  float* lse2, float* dvec) {
  const Geometry& g = a.g;
  const float* l = a.lse + s.lse0 + h * g.lse_hs + i0;
  const float* dv = a.dvec + s.lse0 + h * g.lse_hs + i0;
  for (int r = 0; r < rows; ++r) {
    lse2[r] = l[r] == INFINITY ? INFINITY : l[r] * kLog2e;
    dvec[r] = dv[r];
  }
  for (int r = rows; r < padded; ++r) {
    lse2[r] = INFINITY;
    dvec[r] = 0.f;
  }
}

// Pass 1 helpers, score tile in row form s[r][c]: P = exp2(score_log2 - lse2), 0 outside the
// visible columns [lo, hi) or for a row without keys (lse2 = +inf gives exp2(-inf) = 0).
// score_log2 = scale_log2 * s, or with SOFTCAP cap_out * tanh(cap_in * s), and then dt[c] gets
// 1 - tanh^2. When the whole row is visible (lo == 0, hi == nc) the padding columns nc..np-1 get
// arbitrary finite values, which is fine: only the first nc columns of P and dS are ever used.
template <bool SOFTCAP>
static inline void p_row(float* __restrict s, float* __restrict dt, int np, int nc, int lo, int hi,
                         const Geometry& g, float lse2) {
  const vf neg_inf = vsplat(-INFINITY);
  const vf ml = vsplat(lse2);
  auto score = [&](int c) {
    const vf x = vload(s + c);
    if (!SOFTCAP) return x * g.scale_log2 - ml;
    vf t, d;
    vtanh(x * g.cap_in, t, d);
    vstore(dt + c, d);
    return t * g.cap_out - ml;
  };
  if (lo <= 0 && hi >= nc) {
    int c = 0;
#if FA_KAVX512
    if (!SOFTCAP) {
      const vw sw = vw{} + g.scale_log2, mw = vw{} + lse2;
      for (; c + 16 <= np; c += 16) vst(s + c, vexp2(vld<vw>(s + c) * sw - mw));
    }
#endif
    for (; c < np; c += VL) vstore(s + c, vexp2(score(c)));
    return;
  }
  const vi lanes = lane_index();
  const vi vl = vi{} + lo, vh = vi{} + hi;
  for (int c = 0; c < np; c += VL) vstore(s + c, vexp2(vselect(in_range(lanes + c, vl, vh), score(c), neg_inf)));
}

// dS = P * (dP - dvec) (times 1 - tanh^2 with SOFTCAP) for one row, in place in dp.
template <bool SOFTCAP>
static inline void ds_row(const float* __restrict p, float* __restrict dp, const float* __restrict dt, int np,
                          float dvec) {
  const vf dv = vsplat(dvec);
  int c = 0;
#if FA_KAVX512
  if (!SOFTCAP) {
    const vw dw = vw{} + dvec;
    for (; c + 16 <= np; c += 16) vst(dp + c, vld<vw>(p + c) * (vld<vw>(dp + c) - dw));
  }
#endif
  for (; c < np; c += VL) {
    const vf ds = vload(p + c) * (vload(dp + c) - dv);
    vstore(dp + c, SOFTCAP ? ds * vload(dt + c) : ds);
  }
}

// dK, dV for one key block of one kv head of one sequence (all query heads of its group, the query
// blocks of block_queries, in a fixed order). K and V are transposed once; S = Q K^T in row form.
// With dq_part (fused scheme, dense batches) it also adds dS K into dq_part[group head][query
// row][Dp].
static void kv_block(const BwdArgs& a, const Seq& s, int64_t hk, int64_t k0, float* ws, float* dq_part) {
  const Geometry& g = a.g;
  const Scratch sc(g);
  float* __restrict kt = ws + sc.kt;
  float* __restrict vt = ws + sc.vt;
  float* __restrict dk = ws + sc.dk;
  float* __restrict dv = ws + sc.dv;
  float* __restrict st = ws + sc.s;
  float* __restrict dp = ws + sc.dp;
  float* __restrict dt = ws + sc.dt;  // softcap only
  float* __restrict lse2 = ws + sc.lse2;
  float* __restrict dvec = ws + sc.dvec;

  const int nc = (int)std::min<int64_t>(g.bn, s.nk - k0);
  const int np = round_up(nc, 8);
  const int D = g.D, Dp = g.Dp, bnp = g.bnp;
  const RowLoc kl = k_rows(g, a.ks, s, hk);

  memset(dk, 0, sizeof(float) * (size_t)nc * Dp);
  memset(dv, 0, sizeof(float) * (size_t)nc * Dp);
  const Range qr = block_queries(g, s, k0, nc);  // the query rows that see some key of the block
  if (qr.lo < qr.hi) {
    load_tile_t(a.k, kl, g, k0, nc, kt, bnp, np, ws + sc.tmp);
    load_tile_t(a.v, k_rows(g, a.vs, s, hk), g, k0, nc, vt, bnp, np, ws + sc.tmp);
    RowsView K = {nullptr, 0};
    if (dq_part) K = rows_view(a.k, kl, g, k0, nc, ws + sc.kr);
    for (int64_t h = hk * g.group; h < (hk + 1) * g.group; ++h) {
      const RowLoc ql = q_rows(a.qs, s, h), dol = q_rows(a.dos, s, h);
      for (int64_t i0 = qr.lo / g.bm * g.bm; i0 < qr.hi; i0 += g.bm) {
        const int rows = (int)std::min<int64_t>(g.bm, s.nq - i0);
        const RowsView Q = rows_view(a.q, ql, g, i0, rows, ws + sc.qr);
        const RowsView dO = rows_view(a.dout, dol, g, i0, rows, ws + sc.dor);
        load_row_stats(a, s, h, i0, rows, rows, lse2, dvec);
        gemm<false>(st, bnp, Q.p, Q.ld, 1, kt, bnp, rows, np, D);  // S = Q K^T
        for (int r = 0; r < rows; ++r) {
          int lo, hi;
          visible_cols(g, s, i0 + r, k0, nc, &lo, &hi);
          const int64_t at = (int64_t)r * bnp;
          if (g.softcap) p_row<true>(st + at, dt + at, np, nc, lo, hi, g, lse2[r]);
          else p_row<false>(st + at, dt + at, np, nc, lo, hi, g, lse2[r]);
        }
        gemm<true>(dv, Dp, st, 1, bnp, dO.p, dO.ld, nc, Dp, rows);   // dV += P^T dO
        gemm<false>(dp, bnp, dO.p, dO.ld, 1, vt, bnp, rows, np, D);  // dP = dO V^T
        for (int r = 0; r < rows; ++r) {
          const int64_t at = (int64_t)r * bnp;
          if (g.softcap) ds_row<true>(st + at, dp + at, dt + at, np, dvec[r]);
          else ds_row<false>(st + at, dp + at, dt + at, np, dvec[r]);
        }
        gemm<true>(dk, Dp, dp, 1, bnp, Q.p, Q.ld, nc, Dp, rows);  // dK += dS^T Q
        if (dq_part) {
          float* dq = dq_part + ((h - hk * g.group) * g.Nq + i0) * Dp;
          gemm<true>(dq, Dp, dp, bnp, 1, K.p, K.ld, rows, Dp, nc);  // dQ += dS K
        }
      }
    }
  }
  const vf scl = vsplat(g.scale);
  const RowLoc dkl = k_rows(g, a.dks, s, hk), dvl = k_rows(g, a.dvs, s, hk);
  for (int c = 0; c < nc; ++c) {
    float* row = dk + (int64_t)c * Dp;
    for (int d = 0; d < Dp; d += VL) vstore(row + d, vload(row + d) * scl);
    store_row(row, D, g.dtype, a.dk, dkl.at(k0 + c));
    store_row(dv + (int64_t)c * Dp, D, g.dtype, a.dv, dvl.at(k0 + c));
  }
}

// Two-pass scheme, pass 1: one key block of one kv head of one sequence.
void bwd_kv_task(const BwdArgs& a, int64_t task, float* ws) {
  const Geometry& g = a.g;
  const int64_t b = task_seq(a.kv_start, g.B, task);
  const Seq s = seq_of(g, b);
  const int64_t nkb = (s.nk + g.bn - 1) / g.bn;
  const int64_t t = task - a.kv_start[b];
  kv_block(a, s, t / nkb, (t % nkb) * (int64_t)g.bn, ws, nullptr);
}

// Fused scheme: the key blocks of one key group of one (batch, kv head) unit of the slab, with
// the dQ partial sums of that key group.
void bwd_fused_task(const BwdArgs& a, int64_t task, float* ws) {
  const Geometry& g = a.g;
  const int64_t kgroup = task / a.slab_n;  // key groups outermost: heavy (causal) groups first
  const int64_t s = task % a.slab_n;
  const int64_t u = a.slab_u0 + s;
  const int64_t b = u / g.Hkv, hk = u % g.Hkv;
  const int64_t unit_floats = (int64_t)g.group * g.Nq * g.Dp;
  float* part = a.dq_part + (s * a.n_groups + kgroup) * unit_floats;
  memset(part, 0, sizeof(float) * (size_t)unit_floats);
  const Seq seq = seq_of(g, b);
  const int64_t kb1 = std::min<int64_t>(g.nkb, (kgroup + 1) * a.group_blocks);
  for (int64_t kb = kgroup * a.group_blocks; kb < kb1; ++kb) kv_block(a, seq, hk, kb * g.bn, ws, part);
}

// Fused scheme: dQ = scale * (sum of the key groups' partials, in key-group order) for one query
// block of one query head.
void bwd_reduce_task(const BwdArgs& a, int64_t task) {
  const Geometry& g = a.g;
  const int64_t per_s = (int64_t)g.group * g.nqb;
  const int64_t s = task / per_s;
  const int64_t hh = (task % per_s) / g.nqb;
  const int64_t i0 = (task % g.nqb) * (int64_t)g.bm;
  const int rows = (int)std::min<int64_t>(g.bm, g.Nq - i0);
  const int64_t u = a.slab_u0 + s;
  const int64_t b = u / g.Hkv, h = (u % g.Hkv) * g.group + hh;
  const int Dp = g.Dp;
  const int64_t unit_floats = (int64_t)g.group * g.Nq * Dp;
  float* base = a.dq_part + s * a.n_groups * unit_floats + (hh * g.Nq + i0) * Dp;
  const int64_t n = (int64_t)rows * Dp;
  for (int G = 1; G < a.n_groups; ++G) {
    const float* add = base + G * unit_floats;
    for (int64_t i = 0; i < n; i += VL) vstore(base + i, vload(base + i) + vload(add + i));
  }
  const vf scl = vsplat(g.scale);
  const RowLoc dql = q_rows(a.dqs, seq_of(g, b), h);
  for (int r = 0; r < rows; ++r) {
    float* row = base + (int64_t)r * Dp;
    for (int d = 0; d < Dp; d += VL) vstore(row + d, vload(row + d) * scl);
    store_row(row, g.D, g.dtype, a.dq, dql.at(i0 + r));
  }
}

// Pass 2 helper on transposed tiles st[c][r], dpt[c][r]: P = exp2(score_log2 - lse2) (0 where
// masked), then dS = P * (dP - dvec) (times 1 - tanh^2 with SOFTCAP) into dpt. Vectorised over
// query rows. MASK: apply the column limits [vlo, vhi) (padding rows need no mask: their lse2 is
// +inf).
template <bool MASK, bool SOFTCAP>
static inline void ds_cols(const float* __restrict st, float* __restrict dpt, int nc, int bmp,
                           const int32_t* __restrict vlo, const int32_t* __restrict vhi, const Geometry& g,
                           const float* __restrict lse2, const float* __restrict dvec) {
  const vf neg_inf = vsplat(-INFINITY);
  const vf scl = vsplat(g.scale_log2);
  for (int r = 0; r < bmp; r += VL) {
    const vi lo = MASK ? viload(vlo + r) : vi{};
    const vi hi = MASK ? viload(vhi + r) : vi{};
    const vf ml = vload(lse2 + r);
    const vf dv = vload(dvec + r);
    for (int c = 0; c < nc; ++c) {
      const int64_t at = (int64_t)c * bmp + r;
      vf x, d;
      if (SOFTCAP) {
        vf t;
        vtanh(vload(st + at) * g.cap_in, t, d);
        x = t * g.cap_out - ml;
      } else {
        x = vload(st + at) * scl - ml;
      }
      if (MASK) x = vselect(in_range(vi{} + c, lo, hi), x, neg_inf);
      const vf ds = vexp2(x) * (vload(dpt + at) - dv);
      vstore(dpt + at, SOFTCAP ? ds * d : ds);
    }
  }
}

// Pass 2: dQ for one query block of one head of one sequence, on transposed tiles (S^T = K Q^T,
// dP^T = V dO^T) so that Q and dO are transposed once per task and K / V are used as loaded.
void bwd_q_task(const BwdArgs& a, int64_t task, float* ws) {
  const Geometry& g = a.g;
  const Scratch sc(g);
  float* __restrict qt = ws + sc.qt;
  float* __restrict dot = ws + sc.dot;
  float* __restrict acc = ws + sc.acc;
  float* __restrict st = ws + sc.s;
  float* __restrict dp = ws + sc.dp;
  float* __restrict lse2 = ws + sc.lse2;
  float* __restrict dvec = ws + sc.dvec;
  int32_t* vlo = reinterpret_cast<int32_t*>(ws + sc.vlo);
  int32_t* vhi = reinterpret_cast<int32_t*>(ws + sc.vhi);

  const int64_t b = task_seq(a.q_start, g.B, task);
  const Seq s = seq_of(g, b);
  const int64_t nqb = (s.nq + g.bm - 1) / g.bm;
  const int64_t t = task - a.q_start[b];
  const int64_t h = t / nqb;
  const int64_t i0 = (nqb - 1 - t % nqb) * g.bm;
  const int rows = (int)std::min<int64_t>(g.bm, s.nq - i0);
  const int64_t hk = h / g.group;
  const int D = g.D, Dp = g.Dp, bmp = g.bmp;

  memset(acc, 0, sizeof(float) * (size_t)rows * Dp);
  const Range keys = block_keys(g, s, i0, rows);
  if (keys.lo < keys.hi) {
    const RowLoc kl = k_rows(g, a.ks, s, hk), vl = k_rows(g, a.vs, s, hk);
    load_tile_t(a.q, q_rows(a.qs, s, h), g, i0, rows, qt, bmp, bmp, ws + sc.tmp);
    load_tile_t(a.dout, q_rows(a.dos, s, h), g, i0, rows, dot, bmp, bmp, ws + sc.tmp);
    load_row_stats(a, s, h, i0, rows, bmp, lse2, dvec);
    for (int64_t k0 = keys.lo; k0 < keys.hi; k0 += g.bn) {
      const int nc = (int)std::min<int64_t>(g.bn, keys.hi - k0);
      const RowsView K = rows_view(a.k, kl, g, k0, nc, ws + sc.kr);
      const RowsView V = rows_view(a.v, vl, g, k0, nc, ws + sc.vr);
      gemm<false>(st, bmp, K.p, K.ld, 1, qt, bmp, nc, bmp, D);   // S^T = K Q^T
      gemm<false>(dp, bmp, V.p, V.ld, 1, dot, bmp, nc, bmp, D);  // dP^T = V dO^T
      if (!tile_full(g, s, i0, rows, k0, nc)) {
        fill_visible(g, s, i0, rows, bmp, 1, k0, nc, vlo, vhi);
        if (g.softcap) ds_cols<true, true>(st, dp, nc, bmp, vlo, vhi, g, lse2, dvec);
        else ds_cols<true, false>(st, dp, nc, bmp, vlo, vhi, g, lse2, dvec);
      } else {
        if (g.softcap) ds_cols<false, true>(st, dp, nc, bmp, vlo, vhi, g, lse2, dvec);
        else ds_cols<false, false>(st, dp, nc, bmp, vlo, vhi, g, lse2, dvec);
      }
      gemm<true>(acc, Dp, dp, 1, bmp, K.p, K.ld, rows, Dp, nc);  // dQ += dS K
    }
  }
  const vf scl = vsplat(g.scale);
  const RowLoc dql = q_rows(a.dqs, s, h);
  for (int r = 0; r < rows; ++r) {
    float* row = acc + (int64_t)r * Dp;
    for (int d = 0; d < Dp; d += VL) vstore(row + d, vload(row + d) * scl);
    store_row(row, D, g.dtype, a.dq, dql.at(i0 + r));
  }
}

}  // namespace FA_KNS
}  // namespace cpu
}  // namespace fa
#endif  // FA_CPU_KERNEL_PASS
