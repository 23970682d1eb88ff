// The backward kernels' argument block (built by bwd_api.cu from fa_bwd_params) and the entry points
// that each generated instantiation file defines.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "fa_core.h"

#ifndef FA_WS_LPT
#define FA_WS_LPT 0  // FA_WS_LPT=1 (CMake option, development): BwdArgs::lpt_groups
#endif

namespace fa {
namespace cuda {

// Rows of the per-row workspace arrays (lse2, dsum) are padded per (batch, head) to a multiple of
// this, so that every row block of every configuration (kBlockM divides it) reads whole 16-byte
// chunks without predication; the pad rows hold lse2 = +inf (P = 0) and dsum = 0.
constexpr int kBwdRowPad = 128;

// Placement of the fp32 dQ accumulator (atomic mode). Each (batch, head) owns nq_pad x width floats
// (width = the kernel's head-dim tile width). perm = 0: row-major, element (i, c) at i * width + c.
// perm = 1: the main kernel's fragment order, so that one warp's reduction instruction covers 256
// contiguous bytes (two cache lines) instead of eight 32-byte pieces of eight rows: per row block
// of bm rows (bm * width floats), per warp of the dQ warp grid (tile_m x tile_d floats; warps
// ordered (row, column) as in the kernel), per C-fragment register pair j = (mt * 2 + hr) *
// (tile_d / 8) + nt, per lane (g * 4 + t): two floats. Eight consecutive columns of one row (c a
// multiple of 8) stay contiguous, so the convert kernel reads 32-byte pieces.
// vec = 4: register pairs j and j + 1 (adjacent n8 tiles) of a lane are stored together as four
// floats (one 16-byte reduction per lane, 512 contiguous bytes per warp instruction).
struct DqLayout {
  int perm, bm, tile_m, tile_d, width, vec;
};
__host__ __device__ __forceinline__ int64_t dq_acc_offset(const DqLayout& L, int i, int c) {
  if (!L.perm) return static_cast<int64_t>(i) * L.width + c;
  const int mb = i / L.bm, ri = i - mb * L.bm;
  const int wm = ri / L.tile_m, r = ri - wm * L.tile_m;
  const int wd = c / L.tile_d, cc = c - wd * L.tile_d;
  const int j = ((r >> 4) * 2 + ((r >> 3) & 1)) * (L.tile_d / 8) + (cc >> 3);
  const int lane = (r & 7) * 4 + ((cc >> 1) & 3);
  const int per = L.vec / 2;  // register pairs per stored vector
  return static_cast<int64_t>(mb) * L.bm * L.width + static_cast<int64_t>(wm * (L.width / L.tile_d) + wd) * L.tile_m * L.tile_d +
         ((j / per) * 32 + lane) * L.vec + (j % per) * 2 + (cc & 1);
}

struct BwdArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* o;
  const void* dout;
  void* dq;
  void* dk;
  void* dv;
  const float* lse;   // caller's [B, H, Nq], natural log, +inf for rows that see no key
  float* lse2;        // workspace [B, H, nq_pad]: lse * log2(e) (fp32: lse); pad rows +inf
  float* dsum;        // workspace [B, H, nq_pad]: D = rowsum(dO * O); pad rows 0
  float* dq_acc;      // workspace fp32, [B, H] x nq_pad x dql.width placed by dql (atomic dQ, else null)
  // Deterministic backward on the Hopper kernel: one counter per 64-row block of workspace rows
  // (index: the block's first workspace row / 64), zeroed by the preprocess kernel. A key block
  // adds its dQ share into a row block's dq_acc when the counter equals its rank among the key
  // blocks that reach those rows, then counts itself in: the sums run in key-block order. Null:
  // plain float atomics.
  int* dq_sem;
  DqLayout dql;
  float* softmax_d;   // optional copy of D, [B, H, Nq]
  // Element strides.
  int64_t q_batch, q_row, q_head;
  int64_t k_batch, k_row, k_head;
  int64_t v_batch, v_row, v_head;
  int64_t o_batch, o_row, o_head;
  int64_t do_batch, do_row, do_head;
  int64_t dq_batch, dq_row, dq_head;
  int64_t dk_batch, dk_row, dk_head;
  int64_t dv_batch, dv_row, dv_head;
  int batch, heads, heads_k, seqlen_q, seqlen_k;
  int head_dim;      // the real head dim (<= the kernel's tile width); a multiple of 8
  int group;         // heads / heads_k
  int nq_pad;        // seqlen_q rounded up to kBwdRowPad
  int num_m_blocks;  // filled in by the launcher for the kernel's kBlockM
  int num_n_blocks;  // filled in by the launcher for the kernel's kBlockN
#if FA_WS_LPT
  int lpt_groups;    // FA_WS_LPT builds, Hopper kernels: causal key-block tiles in sections of this many
                     // (batch, kv head) pairs, key block by key block across the section (0: bwd_block_of's order)
#endif
  int causal;        // the mask is bounded on the right (causal or a window)
  float scale;       // signed softmax scale: dQ and dK are multiplied by it at the end
  float scale_log2;  // scale * log2(e), signed

  // Scores -> P: P = 2^(S * p_scale_log2 - lse * log2e) (fp32 kernels: 2^((S * p_scale - lse) * log2e)).
  // Without softcap p_scale = scale; with softcap S is first replaced by softcap * tanh(S *
  // softcap_scale) and p_scale = 1, and dS gets the factor 1 - tanh^2 (the rest, scale, is the
  // final multiply of dQ / dK).
  float p_scale, p_scale_log2;
  float softcap, softcap_scale;
  int window_left, window_right;  // -1: unbounded side (causal is window_right = 0)

  // Packed sequences (cu_seqlens_q != null): q, o, dout, dq [total_q, H, D], k, v, dk, dv
  // [total_k, Hkv, D] (batch strides 0); seqlen_q / seqlen_k are upper bounds.
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  int total_q, total_k;
  // The caller's lse / softmax_d entry of row i of head h of sequence b:
  // b * lse_batch + h * lse_head + q_row0 + i.
  int64_t lse_batch, lse_head;
  // The workspace row (lse2, dsum; dq_acc times dql.width) of row i of head h of sequence b:
  // b * ws_batch + h * ws_head + ws_row0(b) + i (ws_row0: bwd_ws_row0).
  int64_t ws_batch, ws_head;
};

// Packed sequences keep their own padded stretch of workspace rows: sequence b starts at row
// (cu_seqlens_q[b] rounded down to 4) + 132 b, so a stretch of nq_b rounded up to kBwdRowPad rows
// never reaches the next sequence's, and every row block starts 16-byte aligned. Dense: 0.
__host__ __device__ __forceinline__ int64_t bwd_ws_row0(const BwdArgs& a, int b, int64_t q_row0) {
  return a.cu_seqlens_q == nullptr ? 0 : (q_row0 & ~int64_t(3)) + int64_t(kBwdRowPad + 4) * b;
}
// Workspace rows per head in packed mode (the last sequence's stretch included).
inline int64_t bwd_ws_rows_packed(int total_q, int batch) {
  return (static_cast<int64_t>(total_q) + int64_t(kBwdRowPad + 4) * (batch + 1) + 3) & ~int64_t(3);
}

// The warp-specialised Hopper kernel's arguments (bwd_kernel_sm90_ws.cuh): Q, dO (boxes of 64 rows)
// and K, V (boxes of a key block: 128 keys, 64 at W 256) as tensor maps (tma_maps.h), then the
// common block.
struct BwdTmaArgs {
  CUtensorMap tq, tdo, tk, tv;
#if FA_BWD_WS_TMA_DKDV
  CUtensorMap tdk, tdv;  // dK / dV in K's boxes (the tensor-map epilogue, development builds)
#endif
  BwdArgs a;
  int overlap;  // the walk where there is no score modifier: -1 by tile width, 0 plain, 1 overlapped (FA_BWD_WS_OVERLAP)
  int det_rot;  // deterministic calls without a mask: each key block's walk starts at its own row block (bwd_det_rank_rot)
};

// Defined once per (element type, tile width) in csrc/generated/: run_bwd_atomic in
// bwd_<dtype>_hdim<W>.cu enqueues the main kernel that also adds dQ into dq_acc with float atomics;
// run_bwd_det in bwd_det_<dtype>_hdim<W>.cu enqueues the main kernel without dQ and then the
// separate dQ kernel (no atomics: bit-identical results). The preprocess and convert kernels live
// in bwd_api.cu.
template <typename T, int kHeadDim>
fa_status run_bwd_atomic(BwdArgs args, cudaStream_t stream);
template <typename T, int kHeadDim>
fa_status run_bwd_det(BwdArgs args, cudaStream_t stream);
// bwd_sm90_<dtype>_hdim<W>.cu: the Hopper (wgmma) main kernel, atomic dQ in sm90_dq_layout
// (bwd_traits.cuh); fp16 / bf16, W = 64, 128 and 256.
template <typename T, int kHeadDim>
fa_status run_bwd_sm90(BwdArgs args, cudaStream_t stream);

// bwd_sm90ws_<dtype>_hdim<W>.cu: the warp-specialised Hopper main kernel (TMA loads, dQ through
// shared memory and bulk reduce-adds, same dQ placement as run_bwd_sm90); dense fp16 / bf16 calls
// in both modes, W = 64, 128 and 256.
template <typename T, int kHeadDim>
fa_status run_bwd_sm90_ws(BwdTmaArgs args, cudaStream_t stream);

}  // namespace cuda
}  // namespace fa
