// FlashAttention-2 forward for fp16 / bf16 on Hopper (sm_90a): the same algorithm as fwd_kernel.cuh
// with the two matrix products on wgmma (warpgroup MMA, operands read by the tensor cores straight
// from shared memory) instead of ldmatrix + mma.sync.
//
// One thread block (2 warpgroups, 256 threads, one block per SM) per 128-row Q block of one head;
// warpgroup w owns rows [64w, 64w + 64): S (64 x kBlockN keys) and O (64 x D) are its wgmma
// accumulators (D 128: 64 + 64 fp32 registers per thread), laid out as mma.sync C fragments, so the
// online softmax and masking code is the one the mma.sync kernel uses (fwd_common.cuh).
// Head dims 64, 128, 192, 256; kBlockN 128, 64 at D 192 / 256 (O takes 96 / 128 registers).
//
// Tiles (Q, two K stages, two V stages, 32 KB each at D 128) sit in shared memory in the 128-byte
// swizzled layout wgmma reads (wgmma.cuh); cp.async fills them (zero-fill for ragged rows and
// head-dim pad columns), a proxy fence and a barrier hand them to the tensor cores.
//
// Key blocks run high to low (masked blocks first), loads one block ahead, and within a warpgroup
// the P V product of block i-1 overlaps the softmax of block i:
//   top of step i: wait for K(i) and V(i-1); barrier; start K(i+1) and V(i) into the free stages
//   issue S = Q K(i)^T                 (async)
//   issue O += P(i-1) V(i-1)           (async; P(i-1) in registers)
//   wait for S; mask; online softmax of block i (tensor cores busy with P V meanwhile)
//   wait for P V; O *= alpha(i); P(i) = pack(S)
// and after the loop one last O += P V. The epilogue is the mma.sync kernel's: O normalised, staged
// through this warp's rows of the Q tile, 16-byte stores; lse = m * scale + ln(l).
#pragma once
#include "cuda/fwd_common.cuh"
#include "cuda/wgmma.cuh"

namespace fa {
namespace cuda {

template <typename T_, int kHeadDim_>
struct Sm90FwdTraits {
  using T = T_;
  static constexpr bool kIsFp32 = false;
  static constexpr bool kSm90 = true;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = 128;   // 2 warpgroups x 64 rows
  // Keys per K/V tile (the n of the S wgmma): 64 at D 192 / 256, whose O takes 96 / 128 registers
  // and whose 128-key stages would not fit the shared memory.
  static constexpr int kBlockN = kHeadDim_ >= 192 ? 64 : 128;
  static constexpr int kThreads = 256;
  static constexpr int kMinBlocks = 1;
  static constexpr int kColBlocks = kHeadDim / 64;       // 64-column swizzle blocks per row
  static constexpr int kTileQ = kBlockM * kHeadDim * 2;  // bytes
  static constexpr int kTileKV = kBlockN * kHeadDim * 2;
  // Q, K stages 0/1, V stages 0/1, plus slack to align the base to the 1024-byte swizzle atom.
  static constexpr int kSmemBytes = kTileQ + 4 * kTileKV + 1024;
  static_assert(sizeof(T) == 2, "fp16 / bf16 only");
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                "wgmma n = head dim: 64, 128, 192 or 256");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the sm_90 limit");
};

// Epilogue of one warp of a wgmma forward kernel: its 16 rows of O (accumulator fragments, rows
// wrow0 + g and wrow0 + g + 8) normalised by the row sums, lse = m * scale + ln(l), O staged through
// the warp's own rows of a swizzled buffer of kPass columns (BM rows per 64-column block: Q's tile,
// or a buffer of its own) and written with 16-byte stores, kPass columns at a time (kPass = D: one
// pass). The caller makes sure that no wgmma still reads those rows of the buffer.
template <typename T, int D, int BM, int kPass = D>
__device__ __forceinline__ void sm90_store_rows(const float (&o)[1][D / 8][4], const float (&row_max)[1][2],
                                                const float (&row_sum)[1][2], float sl2, unsigned char* smem,
                                                const FwdBlockPtrs& gp, const FwdArgs& a, int row0, int wrow0,
                                                int Nq, int lane) {
  static_assert(kPass % 64 == 0 && D % kPass == 0, "whole 64-column blocks per pass");
  const int g = lane >> 2, t = lane & 3;
  const int valid_chunks = a.head_dim / 8;
  constexpr int kChunks = kPass / 8;  // 16-byte chunks of a row per pass
  float inv[2];
#pragma unroll
  for (int pass = 0; pass < D / kPass; ++pass) {
    if (pass > 0) __syncwarp();  // the previous pass's reads of the buffer are done
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = wrow0 + g + 8 * hr;  // r % 8 == g
      if (pass == 0) {
        float l = row_sum[0][hr];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        // l = 0: the row saw no key (out 0, lse +inf). l NaN (a NaN score) counts as seen, so that out and
        // lse are NaN, as on the CPU backend: with lse +inf, a merge by lse (mergeAttention, the split-KV
        // decode's combine) took such a row for one that saw no key and dropped the NaN. (The test is
        // l != 0 rather than a third case, so that the epilogue's instructions stay as they were: one
        // more select made ptxas serialize the W 64 kernel's wgmmas, C7511.)
        const bool seen = l != 0.f;
        inv[hr] = seen ? 1.f / l : 0.f;
        if (gp.lse != nullptr && t == 0 && row0 + r < Nq)
          gp.lse[r] = seen ? (__fmul_rn(row_max[0][hr], sl2) + fast_log2(l)) * kLn2 : INFINITY;
      }
#pragma unroll
      for (int d = 0; d < kPass / 8; ++d) {
        const int dt = pass * (kPass / 8) + d;
        const uint32_t packed = pack2<T>(o[0][dt][2 * hr] * inv[hr], o[0][dt][2 * hr + 1] * inv[hr]);
        const int off = (d / 8) * BM * 128 + r * 128 + (((d % 8) ^ g) * 16) + t * 4;
        *reinterpret_cast<uint32_t*>(smem + off) = packed;
      }
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 16 * kChunks / 32; ++i) {
      const int idx = lane + 32 * i;
      const int r = wrow0 + idx / kChunks;
      const int c = idx % kChunks;
      const int cg = pass * kChunks + c;  // the chunk's column in O
      if (row0 + r < Nq && cg < valid_chunks) {
        const int off = (c / 8) * BM * 128 + r * 128 + (((c % 8) ^ (r & 7)) * 16);
        *reinterpret_cast<uint4*>(gp.o + r * a.o_row * 2 + cg * 16) = *reinterpret_cast<const uint4*>(smem + off);
      }
    }
  }
}

template <class Tr, bool kPaged>
__global__ void __launch_bounds__(Tr::kThreads, 1) fwd_kernel_sm90(const FwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using T = typename Tr::T;
  constexpr int D = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int kCB = Tr::kColBlocks;
  constexpr int kTileKV = Tr::kTileKV;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t sQ = (raw + 1023u) & ~1023u;
  unsigned char* const smem = smem_raw + (sQ - raw);
  const uint32_t sK = sQ + Tr::kTileQ;  // stages 0, 1
  const uint32_t sV = sK + 2 * kTileKV;  // stages 0, 1

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = sm90::warp_uniform(warp >> 2);
  const int g = lane >> 2, t = lane & 3;
  const int wrow0 = wg * 64 + (warp & 3) * 16;  // this warp's first row in the block
  const BlockCoord bc = block_coord(a);
  const SeqInfo seq = fwd_seq(a, bc.b);
  const int row0 = bc.m_block * BM;
  if (fwd_block_idle(a, seq, row0)) return;
  const int Nq = seq.nq, Nk = seq.nk;
  const int q_rows = min(BM, Nq - row0);
  const int valid_chunks = a.head_dim / 8;

  const FwdBlockPtrs gp = block_ptrs<2>(a, bc, seq, row0);
  const KeyWindow win(seq, a.window_left, a.window_right);
  int n_min, n_max;
  key_block_range<BM, BN>(win, row0, &n_min, &n_max);
  const int n_blocks = n_max - n_min;
  if (n_blocks <= 0) {
    write_empty_rows<BM, Tr::kThreads>(a, gp.o, gp.lse, q_rows, 2, tid);
    return;
  }
  const SwizzledTileLoader<BM, kCB, Tr::kThreads> q_loader(tid);
  const SwizzledTileLoader<BN, kCB, Tr::kThreads> kv_loader(tid);
  const int64_t k_rb = a.k_row * 2, v_rb = a.v_row * 2;
  PagedRows pk{}, pv{};
  PageRing<BN, Tr::kThreads> ring{};
  if constexpr (kPaged) {
    pk = paged_rows<2>(a, bc, a.k, a.k_head, a.k_row);
    pv = paged_rows<2>(a, bc, a.v, a.v_head, a.v_row);
    ring.rows = reinterpret_cast<int*>(smem + (sV + 2 * kTileKV - sQ));  // after the tiles
    // Cache rows of the first three key blocks (the loop's first step loads K of the third); the
    // loop commits block n - 2 and prefetches n - 3.
    ring.fill_now(pk, n_max - 1, Nk, tid);
    if (n_max - 2 >= n_min) ring.fill_now(pk, n_max - 2, Nk, tid);
    if (n_max - 3 >= n_min) ring.fill_now(pk, n_max - 3, Nk, tid);
    if (n_max - 4 >= n_min) ring.prefetch(pk, n_max - 4, Nk, tid);
    __syncthreads();
  }
  auto load_k = [&](int n, int stage) {
    if constexpr (kPaged) kv_loader.load(sK + stage * kTileKV, pk, ring, n, valid_chunks);
    else kv_loader.load(sK + stage * kTileKV, gp.k + n * BN * k_rb, k_rb, Nk - n * BN, valid_chunks);
  };
  auto load_v = [&](int n, int stage) {
    if constexpr (kPaged) kv_loader.load(sV + stage * kTileKV, pv, ring, n, valid_chunks);
    else kv_loader.load(sV + stage * kTileKV, gp.v + n * BN * v_rb, v_rb, Nk - n * BN, valid_chunks);
  };

  // Descriptors (the 14-bit address field is the only one that changes between k-steps and stages).
  // Q: this warpgroup's 64 rows; k-step ks = 16 columns at column block ks / 4, byte 32 * (ks % 4).
  const sm90::SmemDesc dQ = sm90::smem_desc_w(sQ + wg * 64 * 128, 16, 1024);
  const sm90::SmemDesc dK = sm90::smem_desc_w(sK, 16, 1024);
  const sm90::SmemDesc dV = sm90::smem_desc_w(sV, BN * 128, 1024);
  constexpr uint32_t kStageDesc = kTileKV >> 4;

  // Prologue: Q and K of the first block; then the second block's K and the first block's V.
  int n = n_max - 1;
  q_loader.load(sQ, gp.q, a.q_row * 2, q_rows, valid_chunks);
  load_k(n, 0);
  cp_async_commit();
  cp_async_wait<0>();
  sm90::fence_proxy_async_smem();
  __syncthreads();
  if (n > n_min) load_k(n - 1, 1);
  load_v(n, 0);
  cp_async_commit();

  float s[1][BN / 8][4];
  float o[1][D / 8][4];
  uint32_t p[BN / 16][4];
  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.f, 0.f}};
  float alpha[1][2];
  const float sl2 = a.scale_log2;
  float* const sf = &s[0][0][0];
  float* const of = &o[0][0][0];

  auto issue_s = [&](int stage) {
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks)
      sm90::Wgmma<T, BN>::ss(sf, dQ + sm90::kstep(ks, BM), dK + stage * kStageDesc + sm90::kstep(ks, BN), ks > 0);
    sm90::wgmma_commit();
  };
  auto issue_pv = [&](int stage, int accumulate) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      sm90::Wgmma<T, D>::rs(of, p[kk], dV + stage * kStageDesc + ((kk * 2048) >> 4), accumulate | (kk > 0));
    sm90::wgmma_commit();
  };
  auto softmax_and_pack = [&](int nb, bool rescale) {
    score_mod_and_mask<BN, false>(s, a, win, nb, row0 + wrow0, row0 + wrow0 + 15, row0 + wrow0 + g, t);
    online_softmax_step(s, row_max, row_sum, alpha, sl2);
    if (rescale) {
      sm90::wgmma_wait<0>();
      sm90::reg_fence<D / 2>(of);
      sm90::reg_fence_u32<BN / 4>(&p[0][0]);  // P(i-1) stays in its registers until its wgmma is done
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[0][dt][e] *= alpha[0][e >> 1];
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      p[kk][0] = pack2<T>(s[0][2 * kk][0], s[0][2 * kk][1]);
      p[kk][1] = pack2<T>(s[0][2 * kk][2], s[0][2 * kk][3]);
      p[kk][2] = pack2<T>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
      p[kk][3] = pack2<T>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
    }
  };

  // Block 0 of the loop order (key block n_blocks - 1): S, softmax, P. O starts at zero: the first
  // P V overwrites it (scale-d 0), so O needs no initialisation and no rescale here.
  sm90::wgmma_fence();
  issue_s(0);
  sm90::wgmma_wait<0>();
  sm90::reg_fence<BN / 2>(sf);
  softmax_and_pack(n, false);
  bool o_started = false;

  for (int it = 1; it < n_blocks; ++it) {
    n = n_max - 1 - it;
    const int st = it & 1;
    cp_async_wait<0>();
    sm90::fence_proxy_async_smem();
    __syncthreads();  // K(it), V(it-1) visible; every warp is done with K(it-1), V(it-2)
    // The next loads go to the stages no wgmma of this step reads (K st ^ 1, V st). Dense: issued
    // first (a few instructions each). Paged: issued after this step's wgmmas, so that the row
    // arithmetic of 16 rows per thread overlaps the tensor cores instead of delaying QK^T (run 3:
    // paged prefill 0.67x dense with the loads first).
    if constexpr (!kPaged) {
      if (n > n_min) load_k(n - 1, st ^ 1);
      load_v(n, st);
      cp_async_commit();
    }

    sm90::wgmma_fence();
    issue_s(st);
    issue_pv(st ^ 1, o_started ? 1 : 0);
    o_started = true;
    if constexpr (kPaged) {
      if (n > n_min) load_k(n - 1, st ^ 1);
      load_v(n, st);
      cp_async_commit();
      if (n - 2 >= n_min) ring.commit(pk, n - 2, Nk, tid);
      if (n - 3 >= n_min) ring.prefetch(pk, n - 3, Nk, tid);
    }
    sm90::wgmma_wait<1>();
    sm90::reg_fence<BN / 2>(sf);
    softmax_and_pack(n, true);
  }
  cp_async_wait<0>();
  sm90::fence_proxy_async_smem();
  __syncthreads();
  sm90::wgmma_fence();
  issue_pv((n_blocks - 1) & 1, o_started ? 1 : 0);
  sm90::wgmma_wait<0>();
  sm90::reg_fence<D / 2>(of);

  // Epilogue. Every warpgroup is past its last read of Q once all threads arrive here.
  __syncthreads();
  sm90_store_rows<T, D, BM>(o, row_max, row_sum, sl2, smem, gp, a, row0, wrow0, Nq, lane);
#else
  __trap();  // only the sm_90a build has this kernel; the dispatcher never launches it elsewhere
#endif
}

}  // namespace cuda
}  // namespace fa
