// FlashAttention-2 forward for fp16 / bf16 on sm_80+ (mma.sync m16n8k16, fp32 accumulation).
//
// One thread block per (row block of kBlockM queries, head, batch). Warp w owns rows
// [w * kRowsPerWarp, (w + 1) * kRowsPerWarp) of the block outright: its S tile, row max, row sum and
// O accumulator live in its registers, so the softmax needs only quad shuffles, never shared memory.
//
// Pipeline per key block n (descending, so the masked diagonal / ragged blocks come first),
// kStages = 1 (one K and one V buffer, as FlashAttention-2 does):
//   wait K(n); barrier; start V(n) -> smem       (V(n) loads while S = Q K(n)^T runs)
//   S = Q K^T; mask (only on blocks that need it)
//   wait V(n); barrier; start K(n-1) -> smem     (K(n-1) loads during the softmax and P V)
// kStages = 2 (K and V double-buffered): wait K(n), V(n); barrier; start K(n-1), V(n-1) into the
//   other stage; then S, mask, softmax, P V all on stage n: one barrier per key block.
// Then, either way:
//   online softmax in exp2 form: m = max(m, rowmax S); p = 2^(S*scale*log2e - m*scale*log2e)
//   O = O * 2^(m_old - m_new) + P V, with P converted to fp16/bf16 in registers: the C fragments of
//   two adjacent n8 tiles of S are exactly the A fragment of one k16 slice of P.
// O is normalised once at the end, staged through this warp's rows of the Q region of shared memory
// and written with 16-byte stores; lse = m * scale + ln(l).
#pragma once
#include "cuda/fwd_common.cuh"
#include "cuda/fwd_traits.cuh"

namespace fa {
namespace cuda {

template <class Tr, bool kPaged>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocks) fwd_kernel(const FwdArgs a) {
  using T = typename Tr::T;
  constexpr int W = Tr::kHeadDim;
  constexpr int BM = Tr::kBlockM;
  constexpr int BN = Tr::kBlockN;
  constexpr int kMT = Tr::kMTiles;
  constexpr int kPB = Tr::kPitch * 2;  // smem row pitch, bytes
  constexpr int kThreads = Tr::kThreads;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sQ = smem_u32(smem);
  const uint32_t sK = sQ + Tr::kSmemQ;                   // kStages K buffers
  const uint32_t sV = sK + Tr::kStages * Tr::kSmemK;     // kStages V buffers

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const BlockCoord bc = block_coord(a);
  const SeqInfo seq = fwd_seq(a, bc.b);
  const int row0 = bc.m_block * BM;
  if (fwd_block_idle(a, seq, row0)) return;
  const int Nq = seq.nq, Nk = seq.nk;
  const int q_rows = min(BM, Nq - row0);
  const int valid_chunks = a.head_dim / 8;

  const FwdBlockPtrs gp = block_ptrs<2>(a, bc, seq, row0);
  const char* const gq = gp.q;
  const char* const gk = gp.k;
  const char* const gv = gp.v;
  char* const go = gp.o;
  float* const glse = gp.lse;

  const KeyWindow win(seq, a.window_left, a.window_right);
  int n_min, n_max;
  key_block_range<BM, BN>(win, row0, &n_min, &n_max);
  if (n_max <= n_min) {
    write_empty_rows<BM, kThreads>(a, go, glse, q_rows, 2, tid);
    return;
  }

  // Prologue: Q tile and the last K tile in flight together.
  const TileLoader<BM, Tr::kChunksPerRow, kPB, kThreads> q_loader(tid);
  const TileLoader<BN, Tr::kChunksPerRow, kPB, kThreads> kv_loader(tid);
  PagedRows pk{}, pv{};
  PageRing<BN, kThreads> ring{};
  if constexpr (kPaged) {
    pk = paged_rows<2>(a, bc, a.k, a.k_head, a.k_row);
    pv = paged_rows<2>(a, bc, a.v, a.v_head, a.v_row);
    // After the tiles (the launcher adds its bytes).
    ring.rows = reinterpret_cast<int*>(smem + (sV + Tr::kStages * Tr::kSmemK - sQ));
    // Cache rows of the first two key blocks; the loop commits block n - 2 and prefetches n - 3.
    ring.fill_now(pk, n_max - 1, Nk, tid);
    if (n_max - 2 >= n_min) ring.fill_now(pk, n_max - 2, Nk, tid);
    if (n_max - 3 >= n_min) ring.prefetch(pk, n_max - 3, Nk, tid);
    __syncthreads();
  }
  // K / V tile of key block nb into the buffer at s_tile.
  auto load_k = [&](int nb, uint32_t s_tile) {
    if constexpr (kPaged) kv_loader.load(s_tile, pk, ring, nb, valid_chunks);
    else kv_loader.load(s_tile, gk + nb * BN * a.k_row * 2, a.k_row * 2, Nk - nb * BN, valid_chunks);
  };
  auto load_v = [&](int nb, uint32_t s_tile) {
    if constexpr (kPaged) kv_loader.load(s_tile, pv, ring, nb, valid_chunks);
    else kv_loader.load(s_tile, gv + nb * BN * a.v_row * 2, a.v_row * 2, Nk - nb * BN, valid_chunks);
  };
  // Paged, at key block n (nb = n - 2): the cache rows of block n - 2 into the ring (visible after
  // the next barrier), the page indices of n - 3 into a register.
  auto fill_pages = [&](int nb) {
    if constexpr (kPaged) {
      if (nb >= n_min) ring.commit(pk, nb, Nk, tid);
      if (nb - 1 >= n_min) ring.prefetch(pk, nb - 1, Nk, tid);
    }
  };
  q_loader.load(sQ, gq, a.q_row * 2, q_rows, valid_chunks);
  cp_async_commit();
  int n = n_max - 1;
  load_k(n, sK);
  if constexpr (Tr::kStages == 2) load_v(n, sV);
  cp_async_commit();

  // Per-lane ldmatrix row addresses. Pattern A (Q as the A operand, V via .trans): matrices
  // (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15).
  // Pattern B (K as the B operand of two n8 tiles): (keys 0-7, d 0-7), (keys 0-7, d 8-15),
  // (keys 8-15, d 0-7), (keys 8-15, d 8-15).
  const int wrow0 = warp * Tr::kRowsPerWarp;
  const uint32_t offA = ((lane & 7) + ((lane >> 3) & 1) * 8) * kPB + (lane >> 4) * 16;
  const uint32_t offB = ((lane & 7) + (lane >> 4) * 8) * kPB + ((lane >> 3) & 1) * 16;
  const uint32_t sQw = sQ + wrow0 * kPB + offA;
  const uint32_t sKl = sK + offB;
  const uint32_t sVl = sV + offA;
  const int g = lane >> 2, t = lane & 3;
  const float sl2 = a.scale_log2;

  uint32_t qf[Tr::kQInRegs ? kMT : 1][Tr::kQInRegs ? W / 16 : 1][4];
  if constexpr (Tr::kQInRegs) {
    cp_async_wait<0>();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int ks = 0; ks < W / 16; ++ks) ldmatrix_x4(qf[mt][ks], sQw + mt * 16 * kPB + ks * 32);
  }

  float o[kMT][W / 8][4];
  float row_max[kMT][2], row_sum[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < W / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }

  for (int it = 0; n >= n_min; --n, ++it) {
    float s[kMT][BN / 8][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;

    // Byte offset of the stage holding block n (always 0 when single-buffered).
    const uint32_t stage = Tr::kStages == 2 ? (it & 1) * Tr::kSmemK : 0;
    cp_async_wait<0>();
    __syncthreads();  // block n's tiles visible to all; every warp is done with block n+1's buffers
    if constexpr (Tr::kStages == 2) {
      if (n > n_min) {
        const uint32_t next = stage ^ Tr::kSmemK;
        load_k(n - 1, sK + next);
        load_v(n - 1, sV + next);
        fill_pages(n - 2);
        cp_async_commit();
      }
    } else {
      load_v(n, sV);
      fill_pages(n - 2);
      cp_async_commit();
    }

    // S = Q K^T
#pragma unroll
    for (int ks = 0; ks < W / 16; ++ks) {
      uint32_t qa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        if constexpr (Tr::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[mt][e] = qf[mt][ks][e];
        } else {
          ldmatrix_x4(qa[mt], sQw + mt * 16 * kPB + ks * 32);
        }
      }
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, sKl + stage + np * 16 * kPB + ks * 32);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16816<T>(s[mt][2 * np], qa[mt], kb[0], kb[1]);
          mma_16816<T>(s[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
        }
      }
    }

    score_mod_and_mask<BN, false>(s, a, win, n, row0 + wrow0, row0 + wrow0 + Tr::kRowsPerWarp - 1,
                                  row0 + wrow0 + g, t);

    if constexpr (Tr::kStages == 1) {
      cp_async_wait<0>();
      __syncthreads();  // V(n) visible to all; every warp is done reading K(n)
      if (n > n_min) {
        load_k(n - 1, sK);
        cp_async_commit();
      }
    }

    // Online softmax, then O *= alpha (the P V of this block is added below).
    float alpha[kMT][2];
    online_softmax_step(s, row_max, row_sum, alpha, sl2);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int dt = 0; dt < W / 8; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][dt][e] *= alpha[mt][e >> 1];

    // O += P V
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pa[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < W / 16; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, sVl + stage + kk * 16 * kPB + dp * 32);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16816<T>(o[mt][2 * dp], pa[mt], vb[0], vb[1]);
          mma_16816<T>(o[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
        }
      }
    }
  }

  // Epilogue. Rows that saw no key (l == 0) get O = 0 and lse = +inf. Each warp stages only its own
  // rows of the Q region, so a warp-level barrier suffices (Q reads by this warp are complete: their
  // results fed the last mma).
  __syncwarp();
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float l = row_sum[mt][hr];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const bool seen = l != 0.f;  // (NaN too: see sm90_store_rows)
      const float inv = seen ? 1.f / l : 0.f;
      const int r = wrow0 + mt * 16 + g + 8 * hr;
      if (glse != nullptr && t == 0 && row0 + r < Nq)
        glse[r] = seen ? (__fmul_rn(row_max[mt][hr], sl2) + fast_log2(l)) * kLn2 : INFINITY;
#pragma unroll
      for (int dt = 0; dt < W / 8; ++dt) {
        const uint32_t packed = pack2<T>(o[mt][dt][2 * hr] * inv, o[mt][dt][2 * hr + 1] * inv);
        *reinterpret_cast<uint32_t*>(smem + r * kPB + dt * 16 + t * 4) = packed;
      }
    }
  __syncwarp();
  constexpr int kWarpChunks = Tr::kRowsPerWarp * Tr::kChunksPerRow;
  static_assert(kWarpChunks % 32 == 0, "whole chunks per lane");
#pragma unroll
  for (int i = 0; i < kWarpChunks / 32; ++i) {
    const int idx = lane + 32 * i;
    const int r = wrow0 + idx / Tr::kChunksPerRow;
    const int c = idx % Tr::kChunksPerRow;
    if (row0 + r < Nq && c < valid_chunks) {
      const uint4 val = *reinterpret_cast<const uint4*>(smem + r * kPB + c * 16);
      *reinterpret_cast<uint4*>(go + r * a.o_row * 2 + c * 16) = val;
    }
  }
}

}  // namespace cuda
}  // namespace fa
