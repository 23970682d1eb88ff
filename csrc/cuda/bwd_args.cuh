// The backward kernels' argument block (built by bwd_api.cu from fa_bwd_params) and the entry points
// that each generated instantiation file defines.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "fa_core.h"

namespace fa {
namespace cuda {

// Rows of the per-row workspace arrays (lse2, dsum) are padded per (batch, head) to a multiple of
// this, so that every row block of every configuration (kBlockM divides it) reads whole 16-byte
// chunks without predication; the pad rows hold lse2 = +inf (P = 0) and dsum = 0.
constexpr int kBwdRowPad = 128;

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
  float* dq_acc;      // workspace [B, H, Nq, head_dim] fp32 (atomic mode only, else null)
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
  int causal;
  float scale;       // signed softmax scale
  float scale_log2;  // scale * log2(e), signed
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

}  // namespace cuda
}  // namespace fa
