// The forward kernels' argument block (built by fwd_api.cu from fa_fwd_params) and the entry point
// that each generated instantiation file defines.
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/attn_pieces.cuh"
#include "fa_core.h"

#ifndef FA_WS_LPT
#define FA_WS_LPT 0  // FA_WS_LPT=1 (CMake option, development): FwdTmaArgs::lpt_groups
#endif

namespace fa {
namespace cuda {

struct FwdArgs {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;  // [B, H, Nq] contiguous
  // Element strides.
  int64_t q_batch, q_row, q_head;
  int64_t k_batch, k_row, k_head;
  int64_t v_batch, v_row, v_head;
  int64_t o_batch, o_row, o_head;
  int batch, heads, heads_k, seqlen_q, seqlen_k;
  int head_dim;        // the real head dim (<= the kernel's tile width); a multiple of 8
  int group;           // heads / heads_k: query head h reads kv head h / group
  int num_m_blocks;    // ceil(seqlen_q / kBlockM), filled in by the launcher
  int causal;          // the mask is bounded on the right (causal or a window): long row blocks first
  int negate_s;        // scale < 0: the kernel negates S and uses |scale| (never with softcap)
  float scale_log2;    // |scale| * log2(e) (a tiny positive number when scale == 0); log2(e) with softcap

  // Sliding window (-1: unbounded side; causal is window_right = 0), see KeyWindow.
  int window_left, window_right;
  // softcap > 0: S -> softcap * tanh(S * softcap_scale) (softcap_scale = scale / softcap) before the
  // softmax, whose own factor is then log2(e).
  float softcap, softcap_scale;

  // Packed sequences (cu_seqlens_q != null; q, o [total_q, H, D], batch strides 0) with K/V packed by
  // cu_seqlens_k or paged (page_table != null, seqlens_k). seqlen_q / seqlen_k: upper bounds.
  const int32_t* cu_seqlens_q;
  const int32_t* cu_seqlens_k;
  const int32_t* seqlens_k;
  const int32_t* page_table;
  int total_q, total_k;
  int page_size, max_pages, num_pages;
  FastDiv page_div;    // division by page_size
  // lse of row i of head h of sequence b: lse + b * lse_batch + h * lse_head + q_row0 + i.
  int64_t lse_batch, lse_head;
  // Paged calls: sequences with nq * group <= decode_rows belong to the decode kernel and are
  // skipped by the row-block kernels (0: none).
  int decode_rows;
};

// The warp-specialised Hopper forward (fwd_kernel_sm90_ws.cuh; fp16 / bf16 calls): Q, K and V as
// rank-4 tensor maps {head dim, rows, heads, batch} with boxes {64, tile rows, 1, 1} and the 128-byte
// swizzle (fwd_api.cu, encode_dense_maps); paged K and V over cache rows in boxes of box_rows
// (encode_paged_maps).
struct FwdTmaArgs {
  CUtensorMap tq, tk, tv;
  FwdArgs f;
  int pingpong;        // the consumer warpgroups take turns issuing their products (fwd_kernel_sm90_ws.cuh)
  int rescale_always;  // rescale O at every key block (comparisons; default: when a row max moved)
  int ring_across;     // the ping-pong ring runs on across tiles (FA_WS_RING_ACROSS=0: it restarts per tile)
  int trim_s;          // bit 0: the first block's S trimmed where a warpgroup's rows see less of it; bit 1: its P V too
  int pdl;             // launched with programmatic dependent launch (FA_FWD_PDL=1): wait, then trigger
  int ctas;            // persistent grid: blocks launched (0: one per tile)
  int* tile_counter;   // persistent grid: {next tile - ctas, blocks done}, zero between launches
  int box_rows;        // paged K/V: rows of a K / V box (divides the page size and the key block)
  int kv_rows;         // paged: K's and V's stage layout, [key block / kv_rows][column block][kv_rows][64]:
                       // kv_rows = the key block (the dense layout; a box per page and column block) or
                       // 8 (every column block of 8 rows after another, a box per page holding all of
                       // them: tk and tv are then rank 5 {64, 8, column blocks, rows / 8, kv heads})
  int deal;            // packed / paged: the sequences dealt the most keys first (ws_deal_order; the host sets it
                       // on large calls, run_fwd_sm90_ws)
#if FA_WS_LPT
  int lpt_groups;      // FA_WS_LPT builds: causal dense tiles in sections of this many (batch, head)
                       // pairs, the longest row blocks of the whole section first (0: block_coord_of's order)
#endif
};
// Defined once per (element type, tile width, K/V addressing) in csrc/generated/fwd_<dtype>_hdim<W>.cu
// (dense or packed K/V) and fwd_paged_<dtype>_hdim<W>.cu (paged K/V).
template <typename T, int kHeadDim, bool kPaged>
fa_status run_fwd(FwdArgs args, cudaStream_t stream);
// Defined in csrc/generated/fwd_sm90[_paged]_<dtype>_hdim<W>.cu (fp16 / bf16, W = 64, 128, 256).
template <typename T, int kHeadDim, bool kPaged>
fa_status run_fwd_sm90(FwdArgs args, cudaStream_t stream);
// Keys per K / V tile of the warp-specialised kernel (the box rows of its K and V maps).
constexpr int sm90_ws_block_n(int width) { return width >= 192 ? 64 : 128; }
// Consumer warpgroups (64 query rows each) of the warp-specialised kernel: 2, or 3 at W 64 (where
// the softmax costs as much as both products and a third warpgroup keeps the tensor cores fed;
// fwd_api.cu chooses per call).
// Defined in csrc/generated/fwd_sm90ws_<dtype>_hdim<W>.cu (W = 64, 128, 192, 256) and, for paged
// K/V, fwd_sm90ws_paged_<dtype>_hdim<W>.cu (W = 64, 128, 256).
// kBlockN: keys per K / V tile, sm90_ws_block_n(kHeadDim) or, dense or packed, 176 (W 128) / 80 (W 256).
// kGrouped: paged W 128 / 256 with K and V in the grouped stage layout (FwdTmaArgs::kv_rows = 8).
// kWalk: W 64 with two consumers, packed or paged calls: the kernel with the idle warpgroup's walk
// (kSkipIdle in fwd_kernel_sm90_ws.cuh; the dense calls keep the kernel without it).
template <typename T, int kHeadDim, int kConsumers, bool kPaged, int kBlockN, bool kGrouped = false, bool kWalk = false>
fa_status run_fwd_sm90_ws(FwdTmaArgs args, cudaStream_t stream);
// Decode kernel geometry: packed (token, query head) rows per kv head, and keys per split granule.
constexpr int kDecodeRows = 16;
constexpr int kDecodeChunk = 64;
// The most splits of a (sequence, kv head) whose partials the decode kernel's in-kernel merge
// (fwd_decode.cuh, split_combine) takes: fwd_api.cu caps its split count here, run_fwd_decode
// refuses more.
constexpr int kDecodeMaxSplits = 32;

// The paged decode kernel (GQA rows of a kv head packed, split-KV), csrc/generated/fwd_decode_*.cu:
// fp16 / bf16, W = 64, 128, 256. partial_o / partial_lse: split-KV workspace (num_splits > 1).
constexpr int kDecodeCpAsync = 0, kDecodeBulkRows = 1, kDecodeTmaTiles = 2;
struct DecodeArgs {
  // kDecodeTmaTiles: the K and V caches as rank-4 tensor maps {64 elements, cache rows, W / 64
  // column blocks, kv heads}, boxes {64, 16, W / 64, 1}, 128-byte swizzle (fwd_api.cu encodes them).
  CUtensorMap tmap_k, tmap_v;
  FwdArgs f;
  int num_splits;
  // Split-KV partials of the decode sequences only: sequence b's query i (i < rows_per_seq) is
  // partial row b * rows_per_seq + i of P = batch * rows_per_seq (a prefill chunk in the same call
  // costs no workspace).
  int rows_per_seq;
  float* partial_o;    // [num_splits, P, H, W] fp32 (normalised per split)
  float* partial_lse;  // [num_splits, H, P]
  // One counter per (sequence, kv head), zero between calls (the last block of a group of splits
  // resets it): the last block to finish combines the splits (fwd_decode.cuh, split_combine).
  int* counters;
  int loader;          // kDecodeCpAsync, kDecodeBulkRows or kDecodeTmaTiles (fwd_decode.cuh)
  int stages;          // the sm_90 loaders' ring depth per warp (run_fwd_decode chooses; 0: automatic)
  int blocks_per_sm;   // what the caller's split count assumed (run_fwd_decode sizes the rings to it)
  int rescale_always;  // FA_DECODE_RESCALE=always: rescale O every tile (comparisons; default: when a max moved)
  // 1: the K / V tiles of the first ring stages are requested before the PDL wait (the kernel before
  // this one on the stream is known not to write the caches: the caller's check, fa_fwd_params).
  int early_kv;
  int trace_slot;      // FA_TRACE builds: which of the two trace buffers this launch writes (fwd_decode.cuh)
  // (last, so that the other fields keep their parameter offsets: the loaders that do not read these
  // compile as before)
  int stage_combine;   // tensor-map loader: the split combine stages the partials by bulk copies (FA_DECODE_STAGED=0: off)
  int pt_prefetch;     // tensor-map loader: page-table rows read 32 tiles ahead into registers (FA_DECODE_PT_PREFETCH=0: off)
  int warps;           // warps per block: 4, or 8 (the tensor-map loader at W 128; host side only)
};
template <typename T, int kHeadDim>
fa_status run_fwd_decode(DecodeArgs args, cudaStream_t stream);

}  // namespace cuda
}  // namespace fa
