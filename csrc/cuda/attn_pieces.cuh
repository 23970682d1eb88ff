// Pieces every attention kernel is built from (STYLE.md, "Pieces of a kernel"), one place each:
//   SeqInfo       where a sequence's rows live: dense [B, N, H, D], packed by cu_seqlens (varlen),
//                 or a paged K/V cache; kernels ask it for lengths and row offsets
//   KeyWindow     which keys a row sees (sequence end, causal, sliding window: one rule, bottom-right
//                 aligned), the key range of a block of rows, and whether a tile needs the mask
//   PagedRows     the address of key t of a sequence in a paged cache
//   softcap       the score modifier s -> softcap * tanh(s * scale / softcap) and its derivative
// The forward and backward kernels (mma.sync, fp32, wgmma) and the decode kernel all use these.
#pragma once
#include <math.h>
#include <stdint.h>

#include "cuda/ptx.cuh"

namespace fa {
namespace cuda {

// "Unbounded" for a window side: large enough that p - kUnbounded < 0 and p + kUnbounded >= any
// key count, small enough that neither overflows an int (sequence lengths stay below 2^28).
constexpr int kUnbounded = 1 << 30;

// One sequence of a call: its query and key counts and the packed row of its first query / key
// (0 for dense tensors, whose batch stride does the work).
struct SeqInfo {
  int nq, nk;
  int64_t q_row0, k_row0;
};

// Index arrays come from the caller (possibly device tensors nobody checked): every value is
// clamped so that a bad one can give wrong numbers but never an out-of-bounds access.
__device__ __forceinline__ SeqInfo seq_info(int b, int seqlen_q, int seqlen_k, const int32_t* cu_q,
                                            const int32_t* cu_k, const int32_t* seqlens_k, int total_q,
                                            int total_k, int max_keys) {
  SeqInfo s;
  if (cu_q == nullptr) {
    s.nq = seqlen_q;
    s.nk = seqlen_k;
    s.q_row0 = s.k_row0 = 0;
    return s;
  }
  const int q0 = min(max(__ldg(cu_q + b), 0), total_q);
  const int q1 = min(max(__ldg(cu_q + b + 1), q0), total_q);
  s.q_row0 = q0;
  s.nq = min(q1 - q0, seqlen_q);
  if (seqlens_k != nullptr) {  // paged: keys are addressed through the page table
    s.nk = min(max(__ldg(seqlens_k + b), 0), min(max_keys, seqlen_k));
    s.k_row0 = 0;
  } else {
    const int k0 = min(max(__ldg(cu_k + b), 0), total_k);
    const int k1 = min(max(__ldg(cu_k + b + 1), k0), total_k);
    s.k_row0 = k0;
    s.nk = min(k1 - k0, seqlen_k);
  }
  return s;
}

// Which keys query row i (0-based within its sequence) sees: with p = i + nk - nq (bottom-right
// alignment), keys j with p - left <= j <= p + right and 0 <= j < nk. left / right are kUnbounded
// for an open side; causal is right = 0.
struct KeyWindow {
  int nk, shift, left, right;

  __device__ __forceinline__ KeyWindow(const SeqInfo& s, int window_left, int window_right) {
    nk = s.nk;
    shift = s.nk - s.nq;
    left = window_left < 0 ? kUnbounded : window_left;
    right = window_right < 0 ? kUnbounded : window_right;
  }
  // First visible key of row i (may be <= 0) and one past the last (may be <= lo: none).
  __device__ __forceinline__ int lo(int i) const { return i + shift - left; }
  __device__ __forceinline__ int hi(int i) const { return min(nk, i + shift + right + 1); }
  // Keys any of the rows [r0, r1] sees: [*kmin, *kmax) (empty when kmax <= kmin).
  __device__ __forceinline__ void keys_of_rows(int r0, int r1, int* kmin, int* kmax) const {
    *kmin = max(0, lo(r0));
    *kmax = hi(r1);
  }
  // Rows that see any of the keys [k0, k1]: [*rmin, *rmax) (not clamped to the sequence).
  __device__ __forceinline__ void rows_of_keys(int k0, int k1, int* rmin, int* rmax) const {
    *rmin = k0 - shift - right;            // row i sees k0 only if k0 <= i + shift + right
    *rmax = k1 - shift + left + 1;         // and k1 only if k1 >= i + shift - left
    if (right >= kUnbounded / 2) *rmin = -kUnbounded;
    if (left >= kUnbounded / 2) *rmax = kUnbounded;
  }
  // True when some (row, key) of rows [r0, r1] x keys [k0, k0 + n) is masked.
  __device__ __forceinline__ bool needs_mask(int k0, int n, int r0, int r1) const {
    return k0 + n > nk || k0 + n - 1 > r0 + shift + right || k0 < r1 + shift - left;
  }
  // The key blocks of bn keys (block b: keys [b bn, b bn + bn)) in which no (row, key) of rows [r0, r1]
  // is masked: *first <= b <= *last (none when *last < *first), i.e. needs_mask(b * bn, bn, r0, r1) is
  // false exactly there. Once per tile, so that a key loop tests its block with two compares.
  __device__ __forceinline__ void unmasked_blocks(int bn, int r0, int r1, int* first, int* last) const {
    // b bn + bn <= min(nk, r0 + shift + right + 1) and b bn >= r1 + shift - left (64-bit: an
    // unbounded side is 2^30)
    const long long top = min(static_cast<long long>(nk), static_cast<long long>(r0) + shift + right + 1) - bn;
    const long long bottom = static_cast<long long>(r1) + shift - left;
    auto floor_div = [](long long x, long long d) { return x >= 0 ? x / d : -((-x + d - 1) / d); };
    const long long f = -floor_div(-bottom, bn), l = floor_div(top, bn);  // ceil, floor
    *first = static_cast<int>(max(f, -1ll));
    *last = static_cast<int>(min(l, static_cast<long long>(kUnbounded)));
  }
};

// Division by a run-time constant without a divide instruction (Granlund-Montgomery, as CUTLASS's
// FastDivmod): for 0 <= n < 2^31, n / d = umulhi(n, mul) >> shift (d = 1: n itself). The host
// fills it once per call (FastDiv::make).
struct FastDiv {
  int d;
  uint32_t mul;
  int shift;
  static inline FastDiv make(int divisor) {
    FastDiv f;
    f.d = divisor < 1 ? 1 : divisor;
    int l = 0;
    while ((1u << l) < static_cast<uint32_t>(f.d)) ++l;  // ceil(log2 d)
    const int p = 31 + l;
    f.mul = f.d == 1 ? 0u : static_cast<uint32_t>(((1ull << p) + static_cast<uint64_t>(f.d) - 1) / f.d);
    f.shift = p - 32;
    return f;
  }
  __device__ __forceinline__ int div(int n) const {
    return d == 1 ? n : static_cast<int>(__umulhi(static_cast<uint32_t>(n), mul) >> shift);
  }
};

// Key t of one sequence's kv head in a paged cache: page table[t / page_size], row t % page_size.
// A page index outside [0, num_pages) reads as nothing (zero-filled by the loaders).
struct PagedRows {
  const char* base;       // cache + kv head offset (bytes)
  const int32_t* table;   // this sequence's page-table row
  FastDiv page;           // division by page_size
  int num_pages;
  int64_t row_bytes;      // between consecutive tokens of a page
  // The cache row (page * page_size + slot) of key t, or -1 when its page index is out of range.
  __device__ __forceinline__ int row_index(int t, int pg) const {
    const int q = page.div(t);
    return static_cast<unsigned>(pg) < static_cast<unsigned>(num_pages) ? pg * page.d + (t - q * page.d) : -1;
  }
  // Byte offset of cache row ri >= 0 from base (one 32 x 32 -> 64-bit multiply: the host checks
  // that a cache row is under 2^31 bytes).
  __device__ __forceinline__ uint64_t offset(int ri) const {
    return static_cast<uint64_t>(static_cast<uint32_t>(ri)) * static_cast<uint32_t>(row_bytes);
  }
  __device__ __forceinline__ int page_of(int t) const { return __ldg(table + page.div(t)); }
  __device__ __forceinline__ const char* row(int t, bool* ok) const {
    const int ri = row_index(t, page_of(t));
    *ok = ri >= 0;
    return base + static_cast<int64_t>(ri < 0 ? 0 : ri) * row_bytes;
  }
};

// tanh for the score modifier: 1 - 2 / (2^(2x log2 e) + 1) on the SFU: absolute error ~1e-7 (what
// the scores need; the softmax sees softcap * tanh), +-1 in the limits. The fp32 kernels use
// tanh_precise.
__device__ __forceinline__ float tanh_fast(float x) {
  const float e = fast_exp2(x * 2.8853900817779268f);  // 2 log2(e)
  return 1.f - __fdividef(2.f, e + 1.f);
}
// tanh at fp32 accuracy (2 ulp) whatever the build's math flags. The CUDA sources build with
// --use_fast_math, under which a call to tanhf compiles to tanh.approx.f32 (the SFU's tanh, relative
// error up to ~2^-11): the fp32 kernels' softcap then carried that error, times the softcap, into
// every score (a black-box fuzz of fp32 calls with a softcap against float64 found out's relative
// L2 error at 1e-5 to 4e-5 where a naive fp32 implementation has 1e-6). libdevice's tanhf (a
// polynomial below |x| 0.6, 1 - 2 / (e^2|x| + 1) above) is called by its own name, which the
// fast-math mapping does not touch.
extern "C" __device__ float __nv_tanhf(float);
__device__ __forceinline__ float tanh_precise(float x) { return __nv_tanhf(x); }
// tanh below kTanhPolyMax at fp32 accuracy (relative error ~2e-7): x + x^3 p(x^2), the odd polynomial of
// Cephes' tanhf (the CPU backend's vtanh has the same): 7 FMA-pipe instructions where tanh_precise takes ~17
// with two SFU ones. The fp32 forward takes it for a whole tile when every score of the warp's tile is in
// range (one warp vote), the common case under a softcap that caps anything.
constexpr float kTanhPolyMax = 0.625f;
__device__ __forceinline__ float tanh_poly(float x) {
  const float z = x * x;
  float p = fmaf(-5.70498872745e-3f, z, 2.06390887954e-2f);
  p = fmaf(p, z, -5.37397155531e-2f);
  p = fmaf(p, z, 1.33314422036e-1f);
  p = fmaf(p, z, -3.33332819422e-1f);
  return fmaf(x * z, p, x);
}
template <bool kPrecise>
__device__ __forceinline__ float softcap_tanh(float x) {
  if constexpr (kPrecise) return tanh_precise(x);
  else return tanh_fast(x);
}
// The softcap over a thread's kN scores of one tile, s -> cap * tanh(s * sc), in every forward kernel. One warp vote:
// where every raw score of the warp's tile is below kTanhPolyMax / |sc|, the polynomial for all of them (fp32-accurate,
// on the FMA pipe, no MUFU beside the softmax's exponentials); else softcap_tanh per score. sc = scale / softcap
// carries the scale's sign: |sc| (a negative scale once took the polynomial everywhere, fifty-sixth session); NaN
// scores do not move the vote and stay NaN. tanh_fast alone was not enough for the fp16 / bf16 kernels: 1 - 2 / (e^2x
// + 1) cancels for small |x| to an absolute error of ~1e-7, which the softcap multiplies (softcap 5000: lse off by up
// to 9e-4, 100x a naive fp32 softmax; a GPU fuzz with softcaps up to 1e4, fifty-seventh session).
// lower_only: the vote reads s[0, kN / 2) alone: the fragment's lower half of keys where it is one m-tile (wgmma's
// accumulator, 4 floats per 8 keys: s[4j + e] is key 8j + 2t + (e & 1)). Used for the Hopper forward's first key
// block where its S was trimmed to the lower 64 keys: the upper half's registers are unset, and the mask removes those
// keys whatever they hold.
// What the vote leaves: it is per warp, and it reads every other score of the tile, the ones the mask removes
// afterwards included. A large score anywhere in the warp's tile (another row's, a key past a sequence's end in a
// page, which holds whatever the page holds) sends every row to softcap_tanh, and rows whose own scores are small keep
// tanh_fast's error (main's behaviour before the vote, everywhere). Tried and dropped in the fifty-eighth session,
// each for making ptxas serialize the Hopper forward's wgmmas (C7511, every call paying): both forms per score where
// the vote fails; one choice per row; the rows' key bounds live across the modifier (to leave masked keys out of the
// vote); zeroing the masked keys before the vote (the paged D 128 kernel); setting the trimmed half to 0 (the grouped
// paged D 128 kernels).
template <bool kPrecise, int kN>
__device__ __forceinline__ void softcap_scores(float* s, float cap, float sc, bool lower_only = false) {
  float amax = 0.f, amax_hi = 0.f;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) amax = fmaxf(amax, fabsf(s[i]));
#pragma unroll
  for (int i = kN / 2; i < kN; ++i) amax_hi = fmaxf(amax_hi, fabsf(s[i]));
  if (!lower_only) amax = fmaxf(amax, amax_hi);
  if (__all_sync(0xffffffffu, amax * fabsf(sc) < kTanhPolyMax)) {
#pragma unroll
    for (int i = 0; i < kN; ++i) s[i] = cap * tanh_poly(s[i] * sc);
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) s[i] = cap * softcap_tanh<kPrecise>(s[i] * sc);
  }
}

}  // namespace cuda
}  // namespace fa
