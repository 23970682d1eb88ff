// Paged decode kernel (fp16 / bf16, mma.sync m16n8k16): attention of a few queries per sequence
// against its paged K/V cache, built for memory bandwidth.
//
// One thread block per (kv head, split, sequence). GQA packing: the queries of the kv head's group
// (group query heads x nq tokens, at most kRows = 16 rows: row r is token r / group of query head
// hk * group + r % group) share one pass over the kv head's keys, so K/V are read once per group
// instead of once per query head. Split-KV: the sequence's visible keys are cut into num_splits
// ranges (whole 64-key chunks) so that a small batch still fills the GPU; each split writes its
// normalised partial O and lse, and the last split of a (sequence, kv head) to finish merges them
// by their lse (split_combine below).
//
// Inside a block the warps (4; 8 with the tensor-map loader at W 128 where the groups alone fill
// the SMs, fwd_api.cu) take turns over 16-key tiles (warp w of n: tiles w, w + n, ...) with no
// block barrier in the loop: each warp streams its own tiles through a ring in its own shared
// memory (K and V rows of a tile fetched through the page table by one of three loaders), computes
// S = Q K^T for its 16 rows x 16 keys, the online softmax, and O += P V in registers, with Q's A
// fragments held in registers throughout. At the end the warps' (max, sum, O) are merged through
// shared memory.
//
// Sequences with nq * group > kRows are left to the row-block kernels (fwd_kernel*.cuh with
// paged K/V), which skip the sequences this kernel takes (FwdArgs::decode_rows).
#pragma once
#include "cuda/attn_pieces.cuh"
#include "cuda/fwd_args.cuh"
#include "cuda/fwd_common.cuh"

namespace fa {
namespace cuda {

// FA_WS_TRACE builds (FA_TRACE=1 npm run build:native; development only): thread 0 of every block
// records the global timer at its entry, after the PDL wait, when warp 0's first tile has landed,
// at the end of warp 0's loop, when every warp is done, before the split combine and at the exit,
// with its SM and tile count, into one of two buffers (launches alternate), so that a launch's
// timeline (ramp, first bytes, the spread of block ends, the combine, the gap to the previous
// launch) can be read (fwd_launch.cuh, decode_trace_report).
#ifdef FA_WS_TRACE
constexpr int kDecTraceBlocks = 8192, kDecTraceFields = 8;
static __device__ unsigned long long g_dec_trace[2][kDecTraceBlocks][kDecTraceFields];  // one per translation unit
#define FA_DEC_MARK(field, value)                                                                      \
  do {                                                                                                 \
    const unsigned fa_blk = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);            \
    if (threadIdx.x == 0 && fa_blk < kDecTraceBlocks) g_dec_trace[d.trace_slot & 1][fa_blk][(field)] = (value); \
  } while (0)
#else
#define FA_DEC_MARK(field, value) \
  do {                            \
  } while (0)
#endif

// kWarps_: 4, or 8 for the tensor-map loader at W 128 (DecodeArgs::warps; run_fwd_decode).
template <typename T_, int kHeadDim_, int kWarps_ = 4>
struct DecodeTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTileKeys = 16;
  // Per-warp ring depth: 3 at W 128 keeps two blocks per SM (2 x 104 KiB); more gained nothing
  // in this kernel's role (bytes in flight per SM are ample either way).
  static constexpr int kStages = kHeadDim_ <= 64 ? 4 : kHeadDim_ <= 128 ? 3 : 2;
  static constexpr int kPitch = kHeadDim + 8;              // elements: odd 16-byte pitch, no conflicts
  static constexpr int kTileBytes = kTileKeys * kPitch * 2;  // one K or V tile
  static constexpr int kWarpBytes = kStages * 2 * kTileBytes;
  // The warps' merge (end of fwd_decode_kernel): per warp 16 rows of O at a pitch of W + 8 floats
  // (a lane's float2 stores of rows g = 0..7 then fall in distinct banks; at a pitch of W they all
  // hit the same two, four-way conflicts in each half-warp), then 16 row maxima and 16 row sums.
  static constexpr int kCoPitch = kHeadDim + 8;
  static constexpr int kCombineBytes = kWarps * (kDecodeRows * kCoPitch + 2 * kDecodeRows) * 4;
  static constexpr int kSmemBytes = kWarps * kWarpBytes > kCombineBytes ? kWarps * kWarpBytes : kCombineBytes;
  // The sm_90 loaders' rings hold `ns` stages per warp (chosen per launch), their mbarriers (one
  // per warp stage) after both the rings and the merge area. The tensor-map loader's tiles are
  // unpadded (16 rows of W elements, 128-byte swizzled) and its rings start at a 1024-byte boundary
  // (the swizzle's period; `kTmaSlack` bytes of the allocation cover the alignment).
  static constexpr int kStageBytes = 2 * kTileBytes;  // K and V of one tile
  static constexpr int kTmaTileBytes = kTileKeys * kHeadDim * 2;
  static constexpr int kTmaSlack = 1024;
  __host__ __device__ static constexpr int stage_bytes(bool tma) { return tma ? 2 * kTmaTileBytes : kStageBytes; }
  __host__ __device__ static constexpr int bulk_bar_offset(int ns, bool tma) {
    return ((kWarps * ns * stage_bytes(tma) + (tma ? kTmaSlack : 0) > kCombineBytes
                 ? kWarps * ns * stage_bytes(tma) + (tma ? kTmaSlack : 0)
                 : kCombineBytes) + 7) / 8 * 8;
  }
  __host__ __device__ static constexpr int bulk_smem(int ns, bool tma) { return bulk_bar_offset(ns, tma) + kWarps * ns * 8; }
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static_assert(kHeadDim % 32 == 0 && kHeadDim <= 256, "tile widths");
  static_assert(32 % kChunksPerRow == 0 || kChunksPerRow % 32 == 0, "loader layout");
};

// Split-KV combine, run by the last block of a (sequence, kv head) to finish: each block counts
// itself in once its partial rows are written; the block that counts num_splits resets the counter
// (zero for the next call on the stream) and merges the splits by their lse (out = sum_i
// exp(lse_i - lse) * out_i, lse = log(sum_i exp(lse_i)); a split that saw no key has lse +inf and
// weight 0). No second kernel: its launch, the wait for the whole grid and the cold start of its
// reads are gone (a B 1 call spent ~1/4 of its GPU time there, run 12).
// H200 (NOTES-inference.md, fourteenth session; back to back, two rounds in turns): this form
// against one sequentially consistent fence per thread around the count and one thread looping
// over the splits for the weights: B 1 x 16k 24.4 -> 22.9 us (2.74 -> 2.93 TB/s), B 1 x 64k 73.5
// -> 71.8, B 16 x 4k 70.7 -> 70.1, page 1 B 1 x 16k 27.4 -> 26.2. (Twelfth session: staging the
// partials in shared memory with cp.async measured no faster.)
// `staged` (the tensor-map loader, where every split's partial rows fit in the ring's shared memory past
// the merge area: `staged` in fwd_decode_kernel): each block also keeps its own merged rows there, and the last
// block stages the other splits' rows with one bulk copy per (split, token), all in flight at once,
// instead of each thread reading its item's splits in groups of eight (B 1 x 16k at 32 splits: four
// dependent L2 round trips after the count-in, twelfth and twenty-fifth sessions' traces); the
// weights are worked out while the copies land.
// The staged rows start past the merge area as the call uses it (the warps' maxima and sums, then
// `rows` O rows per warp: fwd_decode_kernel's merge), and past the flag and mbarrier at 4096.
template <class Tr>
__device__ __forceinline__ int decode_stage_off(int rows) {
  const int used = (Tr::kWarps * 2 * kDecodeRows + Tr::kWarps * rows * Tr::kCoPitch) * 4;
  return max((used + 127) / 128 * 128, 4096 + 128);
}
template <class Tr, int kPre, bool kStaged>
__device__ __forceinline__ void split_combine(const DecodeArgs& d, const SeqInfo& seq, int hk, int b, int rows, int tid,
                                              unsigned char* smem, bool staged, int split) {
  using T = typename Tr::T;
  constexpr int W = Tr::kHeadDim;
  const FwdArgs& a = d.f;
  // The "last block" flag lives past the weights (at most 16 x 32 floats) in the merge area, which
  // the block has finished reading (a static __shared__ variable would push the sm_90 loaders'
  // launches past the per-block limit that their dynamic allocation already takes).
  static_assert(Tr::kCombineBytes >= 4096 + 4 && kDecodeRows * 32 * 4 <= 4096, "flag past the weights, in the merge area");
  int& s_last = *reinterpret_cast<int*>(smem + 4096);
  int* const ctr = d.counters + static_cast<int64_t>(b) * a.heads_k + hk;
  // Count in: the barrier orders every thread's partial rows before thread 0's count (CTA scope);
  // its release at GPU scope carries them to the block that counts last (release is cumulative),
  // and that block's acquire, then its barrier, orders the other splits' rows before its reads.
  __syncthreads();
  if (tid == 0) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\n" : "=r"(old) : "l"(ctr) : "memory");
    const bool last = old == d.num_splits - 1;
    if (last) atomicExch(ctr, 0);
    s_last = last;
  }
  __syncthreads();
  if (!s_last) return;
  const int ns = d.num_splits;
  const int group = a.group;
  const int64_t P = static_cast<int64_t>(a.batch) * d.rows_per_seq;
  float* const wt = reinterpret_cast<float*>(smem);  // [rows][ns] weights (the merge area is done)
  // The weights of row r come from warp r % kWarps, lane sp holding split sp's lse (ns <=
  // kDecodeMaxSplits <= 32): max and sum by shuffles. Each thread's first item requests its first
  // kPre partial rows before that, so their round trip overlaps the lse loads' (the weights are
  // only needed to add them up); the rest follow in groups of eight.
  // kPre (H200 A/B, eighteenth session, B 1 x 16k at 32 splits, us per call back to back): the
  // bulk-row loader (pages not a multiple of 16) 26.0 -> 24.3 with all 32 (16 at W 64, which keeps
  // that kernel within the 168 registers of three blocks per SM); the tensor-map loader 22.8 either
  // way and B 16 x 4k 69.8 -> 70.5 with 32 (162 -> 168 registers): it keeps 8.
  static_assert(kDecodeRows % Tr::kWarps == 0, "rows spread evenly over the warps");
  static_assert(kDecodeMaxSplits <= 32, "one lane per split");
  static_assert(kPre >= 1 && kPre <= kDecodeMaxSplits, "prefetched partials");
  constexpr int kGroups = W / 4, kRowsPerWarp = kDecodeRows / Tr::kWarps;
  const int warp = tid >> 5, lane = tid & 31;
  const int64_t split_stride = P * a.heads * W;
  auto item_ptr = [&](int idx, int* r_out, int* c_out) -> const float* {
    const int r = idx / kGroups, c = (idx % kGroups) * 4;
    *r_out = r, *c_out = c;
    const int64_t prow = static_cast<int64_t>(b) * d.rows_per_seq + r / group;
    return d.partial_o + (prow * a.heads + hk * group + r % group) * W + c;
  };
  // Staged: split sp's rows at decode_stage_off(rows) + (sp * rows + r) * W floats (this block's own
  // written there by its merge), their mbarrier next to the flag. The partial rows of one token are
  // the group's heads side by side (group * W floats), so a (split, token) is one copy. The other
  // splits' rows were released by their count-in and acquired by ours (then the barrier): the
  // copying lanes order that view before their async-proxy reads with a proxy fence.
  const int st_off = decode_stage_off<Tr>(rows);
  const uint32_t st_base = smem_u32(smem) + st_off;
  const uint32_t st_bar = smem_u32(smem) + 4096 + 8;
  if (kStaged && staged) {
    const int nq = rows / group;
    const uint32_t seg = static_cast<uint32_t>(group * W * 4);
    if (tid == 0) {
      mbar_init(st_bar, 1);
      mbar_fence_init();
      mbar_arrive_expect_tx(st_bar, static_cast<uint32_t>((ns - 1) * nq) * seg);
    }
    __syncthreads();  // the barrier initialised and its bytes expected before any copy completes
    if (warp == 0) {
      fence_proxy_async_global();
      for (int k = lane; k < (ns - 1) * nq; k += 32) {
        const int sp = k / nq + (k / nq >= split), i = k % nq;  // every split but this block's own
        const int64_t prow = static_cast<int64_t>(b) * d.rows_per_seq + i;
        bulk_g2s(st_base + static_cast<uint32_t>((sp * rows + i * group) * W * 4),
                 d.partial_o + ((sp * P + prow) * a.heads + hk * group) * W, seg, st_bar);
      }
    }
  }
  int r0 = 0, c0 = 0;
  const bool has0 = !(kStaged && staged) && tid < rows * kGroups;
  const float* po0 = has0 ? item_ptr(tid, &r0, &c0) : nullptr;
  float4 pre[kPre];
#pragma unroll
  for (int sp = 0; sp < kPre; ++sp)
    pre[sp] = has0 && sp < ns && c0 < a.head_dim ? __ldcg(reinterpret_cast<const float4*>(po0 + sp * split_stride))
                                               : make_float4(0.f, 0.f, 0.f, 0.f);
  float lv[kRowsPerWarp];
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp + k * Tr::kWarps;
    lv[k] = -INFINITY;
    if (r < rows && lane < ns) {
      const int64_t prow = static_cast<int64_t>(b) * d.rows_per_seq + r / group;
      const float l = __ldcg(d.partial_lse + (lane * a.heads + hk * group + r % group) * P + prow);
      lv[k] = l == INFINITY ? -INFINITY : l;  // +inf: saw no key (NaN stays: a NaN score)
    }
  }
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp + k * Tr::kWarps;
    if (r >= rows) break;  // warp-uniform
    float m = lv[k];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    // A split whose lse is NaN makes the row NaN (out and lse), as one split does (fmaxf passed it over).
    if (__any_sync(0xffffffffu, isnan(lv[k]))) m = __int_as_float(0x7fffffff);
    const float e = m == -INFINITY || lv[k] == -INFINITY ? 0.f : expf(lv[k] - m);
    float sum = e;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane < ns) wt[r * ns + lane] = sum != 0.f ? e / sum : 0.f;
    if (lane == 0) {
      a.lse[(hk * group + r % group) * a.lse_head + seq.q_row0 + r / group] = sum != 0.f ? m + logf(sum) : INFINITY;
    }
  }
  __syncthreads();
  // acc += f * x, and the merged item (row r, columns c..c+3) stored to the output.
  auto axpy = [](float4& acc, float f, const float4& x) {
    acc.x = fmaf(f, x.x, acc.x), acc.y = fmaf(f, x.y, acc.y), acc.z = fmaf(f, x.z, acc.z), acc.w = fmaf(f, x.w, acc.w);
  };
  auto store_item = [&](int r, int c, const float4& acc) {
    const int i = r / group, h = hk * group + r % group;
    char* dst = static_cast<char*>(a.o) + 2 * ((seq.q_row0 + i) * a.o_row + h * a.o_head + c);
    uint2 v;
    v.x = pack2<T>(acc.x, acc.y);
    v.y = pack2<T>(acc.z, acc.w);
    *reinterpret_cast<uint2*>(dst) = v;
  };
  if (kStaged && staged) {
    mbar_wait(st_bar, 0);
    for (int idx = tid; idx < rows * kGroups; idx += Tr::kThreads) {
      const int r = idx / kGroups, c = (idx % kGroups) * 4;
      if (c >= a.head_dim) continue;
      const float* w = wt + r * ns;
      const float* x0 = reinterpret_cast<const float*>(smem + st_off) + r * W + c;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int sp = 0; sp < ns; ++sp) {
        const float4 x = *reinterpret_cast<const float4*>(x0 + sp * rows * W);
        axpy(acc, w[sp], x);
      }
      store_item(r, c, acc);
    }
    return;
  }
  for (int idx = tid; idx < rows * kGroups; idx += Tr::kThreads) {
    int r = 0, c = 0;
    const float* po = item_ptr(idx, &r, &c);
    if (c >= a.head_dim) continue;
    const float* w = wt + r * ns;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    int sp = 0;
    if (idx == tid) {  // the first item: its first kPre splits are in pre[]
#pragma unroll
      for (int k = 0; k < kPre; ++k) {
        if (k < ns) axpy(acc, w[k], pre[k]);
      }
      sp = kPre;
    }
#pragma unroll 8
    for (; sp < ns; ++sp) {
      const float4 x = __ldcg(reinterpret_cast<const float4*>(po + sp * split_stride));
      axpy(acc, w[sp], x);
    }
    store_item(r, c, acc);
  }
}

// Loaders (kLoader):
// - kDecodeCpAsync: 16-byte cp.async by every lane (any GPU, any page size).
// - kDecodeBulkRows (sm_90): each lane of a warp fetches one cache row of a tile (lanes 0-15 the K
//   rows, 16-31 the V rows) with one cp.async.bulk completing on the stage's mbarrier. A row's page
//   lookup is one lane's work, so page size 1 costs the same lookups as page size 16, done in
//   parallel: the loader for page sizes that are not multiples of 16 (NOTES-inference.md runs 6-8).
// - kDecodeTmaTiles (sm_90, page size a multiple of 16, head dim = W): one lane issues two tensor-map
//   copies per tile (K and V: 16 rows x W, into 128-byte swizzled shared memory); the warp's loads
//   then cost two instructions per tile instead of 16 cp.async and their address arithmetic per lane
//   (run 12: the kernel issued ~600 instructions per tile and warp, the loader the largest part).
template <class Tr, int kLoader>
__global__ void __launch_bounds__(Tr::kThreads) fwd_decode_kernel(const __grid_constant__ DecodeArgs d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kUseBulk = kLoader != kDecodeCpAsync;
  constexpr bool kTma = kLoader == kDecodeTmaTiles;
#else
  constexpr bool kUseBulk = false;
  constexpr bool kTma = false;
  if constexpr (kLoader != kDecodeCpAsync) {  // never launched there: the sm_90 loaders need sm_90a kernels
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

  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Grid (kv heads, splits, sequences): the blocks that run side by side are the kv heads of one
  // split of one sequence, so a page (all kv heads of page_size tokens, contiguous) is read by
  // neighbouring blocks at about the same time instead of once per head at different times.
  const int hk = blockIdx.x, split = blockIdx.y, b = blockIdx.z;
#ifdef FA_WS_TRACE
  FA_DEC_MARK(0, trace_now_ns());
  for (int f = 1; f < kDecTraceFields; ++f) FA_DEC_MARK(f, 0ull);
#endif

  // Launched with launch_pdl, the block may start while the kernel before it on the stream still
  // runs. Until pdl_wait() it reads only the sequence lengths and the page table: int32 arrays
  // that no PDL-launched kernel of this library writes (the decode kernel, the combine and the
  // warp-specialised forward under FA_FWD_PDL write attention outputs and their own counters), and a kernel
  // that is not PDL-launched has finished before this one starts. With d.early_kv the first K / V
  // tiles are requested before the wait too (the caller has checked that the kernel before writes
  // no cache byte).
  // Every block passes pdl_wait() before the next kernel may start (pdl_launch_dependents after it,
  // the early exits wait too), so the kernel before the previous one has always finished. The
  // queries and the cache (written by appendKV or the caller's kernels) are read after the wait.
  const SeqInfo seq = fwd_seq(a, b);
  const int group = a.group;
  // More queries than the caller's maxSeqlenQ: no partial rows for them (never write past them).
  if (seq.nq <= 0 || seq.nq * group > a.decode_rows || (d.num_splits > 1 && seq.nq > d.rows_per_seq)) {
    pdl_wait();
    FA_DEC_MARK(6, trace_now_ns());
    return;
  }
  const int rows = seq.nq * group;  // packed rows in use
  const KeyWindow win(seq, a.window_left, a.window_right);
  int kmin, kmax;
  win.keys_of_rows(0, seq.nq - 1, &kmin, &kmax);
  // This split's 16-key tiles [t_begin, t_end), in whole 64-key chunks.
  const int c_begin = kmin / kDecodeChunk;
  const int n_chunks = kmax > kmin ? (kmax + kDecodeChunk - 1) / kDecodeChunk - c_begin : 0;
  const int per = (n_chunks + d.num_splits - 1) / d.num_splits;
  const int t_begin = (c_begin + split * per) * (kDecodeChunk / 16);
  // Tiles past the last visible key hold nothing to read (their page-table entries may not exist).
  const int t_end = min(min(c_begin + min((split + 1) * per, n_chunks), c_begin + n_chunks) * (kDecodeChunk / 16),
                        (kmax + 15) / 16);

  // Q fragments of this warp's 16 packed rows (all warps hold the same rows): rows g and g + 8.
  const int r_lo = g, r_hi = g + 8;
  const int i_lo = r_lo / group, i_hi = r_hi / group;  // tokens
  const bool v_lo = r_lo < rows, v_hi = r_hi < rows;
  const int h_lo = hk * group + r_lo % group, h_hi = hk * group + r_hi % group;
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
  constexpr int kSB = Tr::stage_bytes(kTma);  // K then V of one tile
  const uint32_t ring0 = kTma ? (smem_u32(smem) + Tr::kTmaSlack - 1) & ~uint32_t(Tr::kTmaSlack - 1) : smem_u32(smem);
  const uint32_t wbase = ring0 + warp * ns * kSB;
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
  // Tensor-map tiles: [W / 64 column blocks][16 keys][128 bytes], 16-byte chunk c of key n's line
  // stored at chunk c ^ (n & 7). A lane's ldmatrix row address for 16-byte column chunk c16:
  // block c16 / 8, line n, chunk (c16 % 8) ^ (n % 8): the lane constants below, then one XOR with
  // the step's compile-time chunk (c16 = 2 * step + this lane's half).
  const uint32_t tnA = ((lane & 7) + ((lane >> 3) & 1) * 8) * 128, tyA = (((lane >> 4) ^ lane) & 7) << 4;
  const uint32_t tnB = ((lane & 7) + (lane >> 4) * 8) * 128, tyB = ((((lane >> 3) & 1) ^ lane) & 7) << 4;
  auto tma_addr = [](uint32_t tile, uint32_t tn, uint32_t ty, int step) {
    return tile + (step >> 2) * (16 * 128) + tn + (((step * 32) & 112) ^ ty);
  };
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
  constexpr int kNW = Tr::kWarps;
  const int my_count = my_first < t_end ? (t_end - my_first + kNW - 1) / kNW : 0;

  // Bulk loader: stage s completes on bars + 8 s; its k-th fill is phase k (parity k & 1).
  const uint32_t bars = smem_u32(smem) + Tr::bulk_bar_offset(ns, kTma) + warp * ns * 8;
  const uint32_t row_copy = static_cast<uint32_t>(a.head_dim) * 2;  // bytes of one K or V row
  const char* const my_base = lane < 16 ? pk.base : pv.base;
  const uint32_t my_row_bytes = static_cast<uint32_t>(lane < 16 ? pk.row_bytes : pv.row_bytes);
  // This lane's cache row of a tile: key min(key0 + lane % 16, nk - 1) (rows past the sequence
  // repeat its last key, finite data that the mask gives weight 0; a bulk copy cannot zero-fill).
  auto bulk_row = [&](int tile) {
    const int t = min(tile * 16 + (lane & 15), seq.nk - 1);
    return pk.row_index(t, pk.page_of(t));
  };
  // Tensor-map loader: tile -> its first cache row (the page lookup; the tile lies in one page).
  auto tma_row = [&](int tile) {
    const int key0 = tile * 16;
    return pk.row_index(key0, pk.page_of(key0));
  };
  auto tma_tile = [&](int ri, int stage) {
    if (lane == 0) {
      const uint32_t bar = bars + stage * 8;
      const uint32_t dst = wbase + stage * kSB;
      mbar_arrive_expect_tx(bar, 2 * Tr::kTmaTileBytes);
      // A row index of -1 (page out of range) is outside the map: the copy fills zeros.
      tma_load_4d(dst, &d.tmap_k, 0, ri, 0, hk, bar);
      tma_load_4d(dst + Tr::kTmaTileBytes, &d.tmap_v, 0, ri, 0, hk, bar);
    }
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
    // (The tensor-map loader runs only where head_dim == W.)
    if (!kTma && a.head_dim < W) {
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
  // Tensor-map loader with d.pt_prefetch: the first cache rows of this warp's tiles pt_base .. pt_base + 63,
  // one per lane (pt_cur: tiles pt_base + lane, pt_nxt: pt_base + 32 + lane), read 32 tiles before their use;
  // a tile's row is then a shuffle instead of a page-table load one iteration ahead (an L1 miss
  // every eight tiles, on the warp's chain to its next copy while the memory system is saturated).
  int pt_cur = 0, pt_nxt = 0, pt_base = 0;
  auto pt_row = [&](int j) {
    if (j - pt_base >= 32) {
      pt_base += 32;
      pt_cur = pt_nxt;
      pt_nxt = pt_base + 32 + lane < my_count ? tma_row(my_first + kNW * (pt_base + 32 + lane)) : 0;
    }
    return __shfl_sync(0xffffffffu, pt_cur, j - pt_base);
  };
  if constexpr (kUseBulk) {
    // The page lookups of the first ns tiles happen before the wait (registers: ns <= 8), the
    // copies after it: the chain lengths -> page table -> first tiles no longer starts only when
    // the kernel before has finished.
    int ri0[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      ri0[j] = j < ns && j < my_count ? (kTma ? tma_row(my_first + kNW * j) : bulk_row(my_first + kNW * j)) : 0;
    if constexpr (kTma) {
      if (d.pt_prefetch) {
        pt_cur = lane < my_count ? tma_row(my_first + kNW * lane) : 0;
        pt_nxt = 32 + lane < my_count ? tma_row(my_first + kNW * (32 + lane)) : 0;
      }
    }
    if constexpr (kTma) {
      if (lane == 0) {
        prefetch_tensormap(&d.tmap_k);
        prefetch_tensormap(&d.tmap_v);
      }
    }
    // The first tiles' copies: after the wait, or before it where the caller knows that the kernel
    // before this one writes no cache byte (d.early_kv; what kernels before that one wrote is
    // complete once this kernel has started: see above), so that they land while that kernel ends.
    auto first_tiles = [&]() {
#pragma unroll
      for (int j = 0; j < 7; ++j)
        if (j < ns - 1 && j < my_count) {
          if constexpr (kTma) tma_tile(ri0[j], j);
          else bulk_tile(ri0[j], j);
        }
    };
    if (d.early_kv) first_tiles();
    pdl_wait();
    pdl_launch_dependents();
    FA_DEC_MARK(1, trace_now_ns());
    if (!d.early_kv) first_tiles();
#pragma unroll
    for (int j = 1; j < 8; ++j)
      if (j == ns - 1) ri_next = ri0[j];
  } else {
    pdl_wait();
    pdl_launch_dependents();
    FA_DEC_MARK(1, trace_now_ns());
#pragma unroll
    for (int j = 0; j < kS - 1; ++j) {
      if (j < my_count) {
        rows_of(my_first + kNW * j, next);
        load_tile(next, j);
      }
      cp_async_commit();
    }
    if (kS - 1 < my_count) rows_of(my_first + kNW * (kS - 1), next);
  }
  // Q fragments, read after the wait (the previous kernel may have written them) while the first
  // tiles load.
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

  // Ring position of tile j: stage sc = j % ns, fill parity ph = (j / ns) & 1, and the stage the
  // next load goes to, sf = (j + ns - 1) % ns, kept as counters (ns is a launch value on sm_90).
  int sc = 0, sf = ns - 1;
  uint32_t ph = 0;
  for (int j = 0; j < my_count; ++j) {
    if constexpr (kUseBulk) mbar_wait(bars + sc * 8, ph);
    else cp_async_wait<kS - 2>();
    __syncwarp();
#ifdef FA_WS_TRACE
    if (j == 0) FA_DEC_MARK(2, trace_now_ns());
#endif
    {
      if constexpr (kTma) {
        const int jn = j + ns - 1;
        if (jn < my_count) tma_tile(ri_next, sf);
        if (jn + 1 < my_count) ri_next = d.pt_prefetch ? pt_row(jn + 1) : tma_row(my_first + kNW * (jn + 1));  // used next iteration
      } else if constexpr (kUseBulk) {
        const int jn = j + ns - 1;
        if (jn < my_count) bulk_tile(ri_next, sf);
        if (jn + 1 < my_count) ri_next = bulk_row(my_first + kNW * (jn + 1));  // used next iteration
      } else {
        const int jn = j + kS - 1;
        if (jn < my_count) load_tile(next, sf);
        cp_async_commit();
        if (jn + 1 < my_count) rows_of(my_first + kNW * (jn + 1), next);  // used next iteration
      }
    }
    const int tile = my_first + kNW * j;
    const uint32_t sk = wbase + sc * kSB, sv = sk + (kTma ? Tr::kTmaTileBytes : Tr::kTileBytes);
    const int key0 = tile * 16;
    if constexpr (kTma) {
      // The sequence's last tile: cache rows past its end are whatever the pages hold (possibly
      // NaN); their scores are masked, their V rows must be zero (0 * NaN is NaN), and their K rows
      // too: softcap_scores' warp vote reads every score of the tile, and a page's large garbage
      // sent it to tanh_fast, whose absolute error the softcap multiplies (fuzz seed 57002 case
      // 3808: lse 4.3x the rule at softcap 775; sixty-first session).
      if (key0 + 16 > seq.nk) {
        const int valid = seq.nk - key0;
        for (int idx = lane; idx < (W / 64) * 16 * 8; idx += 32) {
          const int line = idx >> 3;  // block * 16 + key
          if ((line & 15) >= valid) {
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sv + idx * 16), "r"(0u) : "memory");
            asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sk + idx * 16), "r"(0u) : "memory");
          }
        }
        __syncwarp();
      }
    }

    float s[1][2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[0][nt][e] = 0.f;
#pragma unroll
    for (int ks = 0; ks < W / 16; ++ks) {
      uint32_t kb[4];
      ldmatrix_x4(kb, kTma ? tma_addr(sk, tnB, tyB, ks) : sk + offB + ks * 32);
      mma_16816<T>(s[0][0], qf[ks], kb[0], kb[1]);
      mma_16816<T>(s[0][1], qf[ks], kb[2], kb[3]);
    }
    // Score modifier, then the mask (keys past the sequence, causal / window per token).
    if (a.softcap > 0.f) {
      softcap_scores<false, 8>(&s[0][0][0], a.softcap, a.softcap_scale);
    } else if (a.negate_s) {
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[0][nt][e] = -s[0][nt][e];
    }
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
    // Rescale O only when some row's max moved (alpha is exactly 1 otherwise): after the first
    // tiles it rarely does, and the rescale is W / 2 multiplies per lane and tile.
    if (d.rescale_always || __any_sync(0xffffffffu, alpha[0][0] != 1.f || alpha[0][1] != 1.f)) {
#pragma unroll
      for (int dt = 0; dt < W / 8; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dt][e] *= alpha[0][e >> 1];
    }
    uint32_t pa[4];
    pa[0] = pack2<T>(s[0][0][0], s[0][0][1]);
    pa[1] = pack2<T>(s[0][0][2], s[0][0][3]);
    pa[2] = pack2<T>(s[0][1][0], s[0][1][1]);
    pa[3] = pack2<T>(s[0][1][2], s[0][1][3]);
#pragma unroll
    for (int dp = 0; dp < W / 16; ++dp) {
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, kTma ? tma_addr(sv, tnA, tyA, dp) : sv + offA + dp * 32);
      mma_16816<T>(o[2 * dp], pa, vb[0], vb[1]);
      mma_16816<T>(o[2 * dp + 1], pa, vb[2], vb[3]);
    }
    sf = sc;
    if (++sc == ns) sc = 0, ph ^= 1u;
  }
  if constexpr (!kUseBulk) cp_async_wait<0>();  // (bulk: every filled stage was waited on)
  FA_DEC_MARK(3, trace_now_ns());
  __syncthreads();  // every warp is done with its ring: the shared memory now holds the merge
  FA_DEC_MARK(4, trace_now_ns());

  // The staged split combine (split_combine): the ring's bytes past the merge area, free now.
  const int stage_off = decode_stage_off<Tr>(rows);
  const bool staged = kTma && d.stage_combine && d.num_splits > 1 &&
                      d.num_splits * rows * W * 4 <= Tr::bulk_bar_offset(ns, kTma) - stage_off;
  // Merge the warps: warp w stores its raw row max, row sum and unnormalised O (its rows in use,
  // `rows` per warp at a pitch of kCoPitch floats).
  float* const cm = reinterpret_cast<float*>(smem);           // [warps][16] max
  float* const cl = cm + Tr::kWarps * kDecodeRows;            // [warps][16] sum
  float* const co = cl + Tr::kWarps * kDecodeRows;            // [warps][rows][kCoPitch] O
  // Only the packed rows in use are stored (a GQA group of 4 with one query: 4 of the 16), and
  // only those are read below.
  constexpr int kCP = Tr::kCoPitch;
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float l = row_sum[0][hr];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = g + 8 * hr;
    if (r < rows) {
      if (t == 0) {
        cm[warp * kDecodeRows + r] = row_max[0][hr];
        cl[warp * kDecodeRows + r] = l;
      }
#pragma unroll
      for (int dt = 0; dt < W / 8; ++dt)
        *reinterpret_cast<float2*>(co + (warp * rows + r) * kCP + dt * 8 + 2 * t) =
            make_float2(o[dt][2 * hr], o[dt][2 * hr + 1]);
    }
  }
  __syncthreads();

  // Thread -> (row, 4 columns): W / 4 column groups per row, rows strided over the block.
  constexpr int kGroups = W / 4;
  for (int idx = tid; idx < rows * kGroups; idx += Tr::kThreads) {
    const int r = idx / kGroups, c = (idx % kGroups) * 4;
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
      const float4 x = *reinterpret_cast<const float4*>(co + (w * rows + r) * kCP + c);
      acc.x = fmaf(x.x, f, acc.x), acc.y = fmaf(x.y, f, acc.y), acc.z = fmaf(x.z, f, acc.z), acc.w = fmaf(x.w, f, acc.w);
    }
    const bool seen = L != 0.f;  // (NaN too: see sm90_store_rows)
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
      if (staged) *reinterpret_cast<float4*>(smem + stage_off + ((split * rows + r) * W + c) * 4) = acc;
      if (c == 0) d.partial_lse[(split * a.heads + h) * P + prow] = lse;
    }
  }
#ifdef FA_WS_TRACE
  {
    FA_DEC_MARK(5, trace_now_ns());
    FA_DEC_MARK(7, (static_cast<unsigned long long>(max(t_end - t_begin, 0)) << 32) | trace_smid());
  }
#endif
  if (d.num_splits > 1)
    split_combine<Tr, kLoader == kDecodeTmaTiles ? 8 : Tr::kHeadDim <= 64 ? 16 : kDecodeMaxSplits, kTma>(d, seq, hk, b, rows, tid, smem,
                                                                                                           staged, split);
  FA_DEC_MARK(6, trace_now_ns());
  }
}

}  // namespace cuda
}  // namespace fa
