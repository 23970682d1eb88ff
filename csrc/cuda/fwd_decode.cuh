// Paged decode kernel (fp16 / bf16, mma.sync m16n8k16): attention of a few queries per sequence
// against its paged K/V cache, built for memory bandwidth.
//
// One thread block per (kv head, split, sequence). GQA packing: the queries of the kv head's group
// (group query heads x nq tokens, at most kRows = 16 rows: row r is token r / group of query head
// hk * group + r % group) share one pass over the kv head's keys, so K/V are read once per group
// instead of once per query head. Split-KV: the sequence's visible keys are cut into num_splits
// ranges (whole 64-key chunks) so that a small batch still fills the GPU; each split writes its
// normalised partial O and lse, and the combine kernel (combine.cuh) merges them by their lse.
//
// Inside a block the 4 warps take turns over 16-key tiles (warp w: tiles w, w + 4, ...) with no
// block barrier in the loop: each warp streams its own tiles through a kStages-deep cp.async ring
// in its own shared memory (K and V rows of a tile fetched through the page table), computes
// S = Q K^T for its 16 rows x 16 keys, the online softmax, and O += P V in registers, with Q's A
// fragments held in registers throughout. At the end the four warps' (max, sum, O) are merged
// through shared memory.
//
// Sequences with nq * group > kRows are left to the row-block kernels (fwd_kernel*.cuh with
// paged K/V), which skip the sequences this kernel takes (FwdArgs::decode_rows).
#pragma once
#include "cuda/attn_pieces.cuh"
#include "cuda/fwd_args.cuh"
#include "cuda/fwd_common.cuh"

namespace fa {
namespace cuda {

template <typename T_, int kHeadDim_>
struct DecodeTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTileKeys = 16;
  // Per-warp ring depth: 3 at W 128 keeps two blocks per SM (2 x 104 KiB); more gained nothing
  // in this kernel's role (bytes in flight per SM are ample either way).
  static constexpr int kStages = kHeadDim_ <= 64 ? 4 : kHeadDim_ <= 128 ? 3 : 2;
  static constexpr int kPitch = kHeadDim + 8;              // elements: odd 16-byte pitch, no conflicts
  static constexpr int kTileBytes = kTileKeys * kPitch * 2;  // one K or V tile
  static constexpr int kWarpBytes = kStages * 2 * kTileBytes;
  static constexpr int kCombineBytes = kWarps * (kDecodeRows * kHeadDim + 2 * kDecodeRows) * 4;
  static constexpr int kSmemBytes = kWarps * kWarpBytes > kCombineBytes ? kWarps * kWarpBytes : kCombineBytes;
  // The sm_90 bulk loader's rings hold `ns` stages per warp (chosen per launch), its mbarriers
  // (one per warp stage) after both the rings and the merge area.
  static constexpr int kStageBytes = 2 * kTileBytes;  // K and V of one tile
  __host__ __device__ static constexpr int bulk_bar_offset(int ns) {
    return ((kWarps * ns * kStageBytes > kCombineBytes ? kWarps * ns * kStageBytes : kCombineBytes) + 7) / 8 * 8;
  }
  __host__ __device__ static constexpr int bulk_smem(int ns) { return bulk_bar_offset(ns) + kWarps * ns * 8; }
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "tile widths");
  static_assert(32 % kChunksPerRow == 0 || kChunksPerRow % 32 == 0, "loader layout");
};

// kBulk (sm_90): each lane of a warp fetches one cache row of a tile (lanes 0-15 the K rows, 16-31
// the V rows) with one cp.async.bulk completing on the stage's mbarrier, instead of 16-byte cp.async.
// A row's page lookup is one lane's work, so page size 1 costs the same lookups as page size 16,
// done in parallel: the loader for page sizes that are not multiples of 16 (fwd_api.cu measured
// the choice; NOTES-inference.md runs 6-8).
template <class Tr, bool kBulk>
__global__ void __launch_bounds__(Tr::kThreads) fwd_decode_kernel(const DecodeArgs d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kUseBulk = kBulk;
#else
  constexpr bool kUseBulk = false;
  if constexpr (kBulk) {  // never launched there: d.bulk asks for the sm_90a kernels
    __trap();
  } else
#endif
  {
  using T = typename Tr::T;
  constexpr int W = Tr::kHeadDim;
  constexpr int kPB = Tr::kPitch * 2;
  constexpr int kS = Tr::kStages;
  constexpr int kCh = Tr::kChunksPerRow;
  const FwdArgs& a = d.f;
  pdl_wait();  // launched with launch_pdl: the previous kernel's writes first
  pdl_launch_dependents();

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Grid (kv heads, splits, sequences): the blocks that run side by side are the kv heads of one
  // split of one sequence, so a page (all kv heads of page_size tokens, contiguous) is read by
  // neighbouring blocks at about the same time instead of once per head at different times.
  const int hk = blockIdx.x, split = blockIdx.y, b = blockIdx.z;

  const SeqInfo seq = fwd_seq(a, b);
  const int group = a.group;
  if (seq.nq <= 0 || seq.nq * group > a.decode_rows) return;
  // More queries than the caller's maxSeqlenQ: no partial rows for them (never write past them).
  if (d.num_splits > 1 && seq.nq > d.rows_per_seq) return;
  const int rows = seq.nq * group;  // packed rows in use
  const KeyWindow win(seq, a.window_left, a.window_right);
  int kmin, kmax;
  win.keys_of_rows(0, seq.nq - 1, &kmin, &kmax);
  // This split's 16-key tiles [t_begin, t_end), in whole 64-key chunks.
  const int c_begin = kmin / kDecodeChunk;
  const int n_chunks = kmax > kmin ? (kmax + kDecodeChunk - 1) / kDecodeChunk - c_begin : 0;
  const int per = (n_chunks + d.num_splits - 1) / d.num_splits;
  const int t_begin = (c_begin + split * per) * (kDecodeChunk / 16);
  const int t_end = min(c_begin + min((split + 1) * per, n_chunks), c_begin + n_chunks) * (kDecodeChunk / 16);

  // Q fragments of this warp's 16 packed rows (all warps hold the same rows): rows g and g + 8.
  const int r_lo = g, r_hi = g + 8;
  const int i_lo = r_lo / group, i_hi = r_hi / group;  // tokens
  const bool v_lo = r_lo < rows, v_hi = r_hi < rows;
  const int h_lo = hk * group + r_lo % group, h_hi = hk * group + r_hi % group;
  const char* q_lo = static_cast<const char*>(a.q) + 2 * ((seq.q_row0 + i_lo) * a.q_row + h_lo * a.q_head);
  const char* q_hi = static_cast<const char*>(a.q) + 2 * ((seq.q_row0 + i_hi) * a.q_row + h_hi * a.q_head);
  uint32_t qf[W / 16][4];
#pragma unroll
  for (int ks = 0; ks < W / 16; ++ks) {
    const int c0 = ks * 16 + 2 * t, c1 = c0 + 8;
    qf[ks][0] = v_lo && c0 < a.head_dim ? *reinterpret_cast<const uint32_t*>(q_lo + 2 * c0) : 0u;
    qf[ks][1] = v_hi && c0 < a.head_dim ? *reinterpret_cast<const uint32_t*>(q_hi + 2 * c0) : 0u;
    qf[ks][2] = v_lo && c1 < a.head_dim ? *reinterpret_cast<const uint32_t*>(q_lo + 2 * c1) : 0u;
    qf[ks][3] = v_hi && c1 < a.head_dim ? *reinterpret_cast<const uint32_t*>(q_hi + 2 * c1) : 0u;
  }

  PagedRows pk, pv;
  pk.base = static_cast<const char*>(a.k) + 2 * (hk * a.k_head);
  pv.base = static_cast<const char*>(a.v) + 2 * (hk * a.v_head);
  pk.table = pv.table = a.page_table + static_cast<int64_t>(b) * a.max_pages;
  pk.page = pv.page = a.page_div;
  pk.num_pages = pv.num_pages = a.num_pages;
  pk.row_bytes = 2 * a.k_row;
  pv.row_bytes = 2 * a.v_row;
  // Page sizes that are multiples of 16: a 16-key tile (16-aligned) lies in one page, one lookup.
  const bool one_page = a.page_size % 16 == 0;

  // This warp's ring of ns stages: stage s holds K at wbase + s * 2 * tile, V right after. The
  // cp.async loader's depth is kStages; the bulk loader's is the launch's (d.stages,
  // DecodeTraits::bulk_smem): deeper where one block per SM must keep enough bytes in flight alone.
  const int ns = kUseBulk ? d.stages : kS;
  const uint32_t wbase = smem_u32(smem) + warp * ns * Tr::kStageBytes;
  const int valid_chunks = a.head_dim / 8;
  // Loader layout: lane -> (row, chunk): kCh chunks per row, 32 / kCh rows per pass (kCh <= 32).
  constexpr int kRowsPerPass = kCh >= 32 ? 1 : 32 / kCh;
  constexpr int kChunkPasses = kCh >= 32 ? kCh / 32 : 1;
  constexpr int kRowIters = 16 / kRowsPerPass;  // rows of a tile per lane
  const int lr = kCh >= 32 ? 0 : lane / kCh;
  const int lc = kCh >= 32 ? lane : lane % kCh;
  // Cache rows (page * page_size + slot; -1: nothing to read) of this lane's rows of a tile. Worked
  // out one iteration before the tile's loads are issued, so the page-table reads are never waited on.
  struct TileRows {
    int ri[kRowIters];
  };
  auto rows_of = [&](int tile, TileRows& R) {
    const int key0 = tile * 16;
    if (one_page) {
      const int base = key0 < seq.nk ? pk.row_index(key0, pk.page_of(key0)) : -1;
#pragma unroll
      for (int i = 0; i < kRowIters; ++i) {
        const int r = lr + i * kRowsPerPass;
        R.ri[i] = base >= 0 && key0 + r < seq.nk ? base + r : -1;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kRowIters; ++i) {
        const int t = key0 + lr + i * kRowsPerPass;
        R.ri[i] = t < seq.nk ? pk.row_index(t, pk.page_of(t)) : -1;
      }
    }
  };
  auto load_tile = [&](const TileRows& R, int stage) {
    const uint32_t sk = wbase + stage * 2 * Tr::kTileBytes, sv = sk + Tr::kTileBytes;
#pragma unroll
    for (int i = 0; i < kRowIters; ++i) {
      const int r = lr + i * kRowsPerPass;
      const int ri = R.ri[i];
      const char* kr = pk.base + static_cast<int64_t>(ri < 0 ? 0 : ri) * pk.row_bytes;
      const char* vr = pv.base + static_cast<int64_t>(ri < 0 ? 0 : ri) * pv.row_bytes;
#pragma unroll
      for (int cp = 0; cp < kChunkPasses; ++cp) {
        const int c = lc + cp * 32;
        const bool pred = ri >= 0 && c < valid_chunks;
        cp_async_16(sk + r * kPB + c * 16, pred ? kr + c * 16 : pk.base, pred);
        cp_async_16(sv + r * kPB + c * 16, pred ? vr + c * 16 : pv.base, pred);
      }
    }
  };

  const uint32_t offA = ((lane & 7) + ((lane >> 3) & 1) * 8) * kPB + (lane >> 4) * 16;
  const uint32_t offB = ((lane & 7) + (lane >> 4) * 8) * kPB + ((lane >> 3) & 1) * 16;
  const float sl2 = a.scale_log2;

  float o[W / 8][4];
#pragma unroll
  for (int dt = 0; dt < W / 8; ++dt)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};

  // Row limits of this lane's two rows (tokens i_lo, i_hi): visible keys [lo, hi).
  const int lo0 = win.lo(i_lo), hi0 = win.hi(i_lo), lo1 = win.lo(i_hi), hi1 = win.hi(i_hi);

  const int my_first = t_begin + warp;
  const int my_count = my_first < t_end ? (t_end - my_first + 3) / 4 : 0;

  // Bulk loader: stage s completes on bars + 8 s; its k-th fill is phase k (parity k & 1).
  const uint32_t bars = smem_u32(smem) + Tr::bulk_bar_offset(ns) + warp * ns * 8;
  const uint32_t row_copy = static_cast<uint32_t>(a.head_dim) * 2;  // bytes of one K or V row
  const char* const my_base = lane < 16 ? pk.base : pv.base;
  const uint32_t my_row_bytes = static_cast<uint32_t>(lane < 16 ? pk.row_bytes : pv.row_bytes);
  // This lane's cache row of a tile: key min(key0 + lane % 16, nk - 1) (rows past the sequence
  // repeat its last key, finite data that the mask gives weight 0; a bulk copy cannot zero-fill).
  auto bulk_row = [&](int tile) {
    const int t = min(tile * 16 + (lane & 15), seq.nk - 1);
    return pk.row_index(t, pk.page_of(t));
  };
  auto bulk_tile = [&](int ri, int stage) {
    const uint32_t bar = bars + stage * 8;
    if (lane == 0) mbar_arrive_expect_tx(bar, 32 * row_copy);
    const uint32_t dst = wbase + stage * 2 * Tr::kTileBytes + (lane >> 4) * Tr::kTileBytes + (lane & 15) * kPB;
    bulk_g2s(dst, my_base + static_cast<uint64_t>(static_cast<uint32_t>(ri < 0 ? 0 : ri)) * my_row_bytes, row_copy, bar);
  };
  if constexpr (kUseBulk) {
    if (lane == 0)
      for (int st = 0; st < ns; ++st) mbar_init(bars + st * 8, 1);
    mbar_fence_init();
    // Columns past the head dim are never copied: zeros there, once (K's meet Q's zero columns).
    if (a.head_dim < W) {
      const int pad = (W - a.head_dim) / 8;  // 16-byte chunks per row
      for (int idx = lane; idx < ns * 2 * 16 * pad; idx += 32) {
        const int row = idx / pad, c = valid_chunks + idx % pad;  // row: stage, K/V, key
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(wbase + row * kPB + c * 16), "r"(0u) : "memory");
      }
    }
    __syncwarp();
  }
  TileRows next;
  int ri_next = 0;
  if constexpr (kUseBulk) {
    for (int j = 0; j < ns - 1 && j < my_count; ++j) bulk_tile(bulk_row(my_first + 4 * j), j);
    if (ns - 1 < my_count) ri_next = bulk_row(my_first + 4 * (ns - 1));
  } else {
#pragma unroll
    for (int j = 0; j < kS - 1; ++j) {
      if (j < my_count) {
        rows_of(my_first + 4 * j, next);
        load_tile(next, j);
      }
      cp_async_commit();
    }
    if (kS - 1 < my_count) rows_of(my_first + 4 * (kS - 1), next);
  }
  for (int j = 0; j < my_count; ++j) {
    if constexpr (kUseBulk) mbar_wait(bars + (j % ns) * 8, (j / ns) & 1);
    else cp_async_wait<kS - 2>();
    __syncwarp();
    {
      if constexpr (kUseBulk) {
        const int jn = j + ns - 1;
        if (jn < my_count) bulk_tile(ri_next, jn % ns);
        if (jn + 1 < my_count) ri_next = bulk_row(my_first + 4 * (jn + 1));  // used next iteration
      } else {
        const int jn = j + kS - 1;
        if (jn < my_count) load_tile(next, jn % kS);
        cp_async_commit();
        if (jn + 1 < my_count) rows_of(my_first + 4 * (jn + 1), next);  // used next iteration
      }
    }
    const int tile = my_first + 4 * j;
    const uint32_t sk = wbase + (j % ns) * Tr::kStageBytes, sv = sk + Tr::kTileBytes;

    float s[1][2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < W / 16; ++ks) {
      uint32_t kb[4];
      ldmatrix_x4(kb, sk + offB + ks * 32);
      mma_16816<T>(s[0][0], qf[ks], kb[0], kb[1]);
      mma_16816<T>(s[0][1], qf[ks], kb[2], kb[3]);
    }
    // Score modifier, then the mask (keys past the sequence, causal / window per token).
    if (a.softcap > 0.f) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[0][nt][e] = a.softcap * tanh_fast(s[0][nt][e] * a.softcap_scale);
    } else if (a.negate_s) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[0][nt][e] = -s[0][nt][e];
    }
    const int key0 = tile * 16;
    if (win.needs_mask(key0, 16, 0, seq.nq - 1)) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + nt * 8 + 2 * t + e;
          if (key < lo0 || key >= hi0) s[0][nt][e] = -INFINITY;
          if (key < lo1 || key >= hi1) s[0][nt][2 + e] = -INFINITY;
        }
    }
    float alpha[1][2];
    online_softmax_step(s, row_max, row_sum, alpha, sl2);
#pragma unroll
    for (int dt = 0; dt < W / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[dt][e] *= alpha[0][e >> 1];
    uint32_t pa[4];
    pa[0] = pack2<T>(s[0][0][0], s[0][0][1]);
    pa[1] = pack2<T>(s[0][0][2], s[0][0][3]);
    pa[2] = pack2<T>(s[0][1][0], s[0][1][1]);
    pa[3] = pack2<T>(s[0][1][2], s[0][1][3]);
#pragma unroll
    for (int dp = 0; dp < W / 16; ++dp) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, sv + offA + dp * 32);
      mma_16816<T>(o[2 * dp], pa, vb[0], vb[1]);
      mma_16816<T>(o[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }
  if constexpr (!kUseBulk) cp_async_wait<0>();  // (bulk: every filled stage was waited on)
  __syncthreads();  // every warp is done with its ring: the shared memory now holds the merge

  // Merge the four warps: warp w stores its raw row max, row sum and unnormalised O.
  float* const cm = reinterpret_cast<float*>(smem);           // [warps][16] max
  float* const cl = cm + Tr::kWarps * kDecodeRows;            // [warps][16] sum
  float* const co = cl + Tr::kWarps * kDecodeRows;            // [warps][16][W] O
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float l = row_sum[0][hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = g + 8 * hr;
    if (t == 0) {
      cm[warp * kDecodeRows + r] = row_max[0][hr];
      cl[warp * kDecodeRows + r] = l;
    }
#pragma unroll
    for (int dt = 0; dt < W / 8; ++dt)
      *reinterpret_cast<float2*>(co + (warp * kDecodeRows + r) * W + dt * 8 + 2 * t) =
          make_float2(o[dt][2 * hr], o[dt][2 * hr + 1]);
  }
  __syncthreads();

  // Thread -> (row, 4 columns): W / 4 column groups per row, rows strided over the block.
  constexpr int kGroups = W / 4;
  for (int idx = tid; idx < kDecodeRows * kGroups; idx += Tr::kThreads) {
    const int r = idx / kGroups, c = (idx % kGroups) * 4;
    if (r >= rows) continue;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < Tr::kWarps; ++w) M = fmaxf(M, cm[w * kDecodeRows + r]);
    const float m_sc = M == -INFINITY ? 0.f : __fmul_rn(M, sl2);
    float L = 0.f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int w = 0; w < Tr::kWarps; ++w) {
      const float mw = cm[w * kDecodeRows + r];
      const float f = mw == -INFINITY ? 0.f : fast_exp2(__fmul_rn(mw, sl2) - m_sc);
      L = fmaf(cl[w * kDecodeRows + r], f, L);
      const float4 x = *reinterpret_cast<const float4*>(co + (w * kDecodeRows + r) * W + c);
      acc.x = fmaf(x.x, f, acc.x), acc.y = fmaf(x.y, f, acc.y), acc.z = fmaf(x.z, f, acc.z), acc.w = fmaf(x.w, f, acc.w);
    }
    const bool seen = L > 0.f;
    const float inv = seen ? 1.f / L : 0.f;
    acc.x *= inv, acc.y *= inv, acc.z *= inv, acc.w *= inv;
    const float lse = seen ? (m_sc + fast_log2(L)) * kLn2 : INFINITY;
    const int i = r / group, h = hk * group + r % group;
    const int64_t row = seq.q_row0 + i;
    if (d.num_splits == 1) {
      if (c < a.head_dim) {
        char* dst = static_cast<char*>(a.o) + 2 * (row * a.o_row + h * a.o_head + c);
        uint2 v;
        v.x = pack2<T>(acc.x, acc.y);
        v.y = pack2<T>(acc.z, acc.w);
        *reinterpret_cast<uint2*>(dst) = v;
      }
      if (c == 0) a.lse[h * a.lse_head + row] = lse;
    } else {
      const int64_t P = static_cast<int64_t>(a.batch) * d.rows_per_seq;
      const int64_t prow = static_cast<int64_t>(b) * d.rows_per_seq + i;
      float* po = d.partial_o + ((split * P + prow) * a.heads + h) * W + c;
      *reinterpret_cast<float4*>(po) = acc;
      if (c == 0) d.partial_lse[(split * a.heads + h) * P + prow] = lse;
    }
  }
  }
}

}  // namespace cuda
}  // namespace fa
