// Pieces shared by the backward kernels (mma.sync main and dQ kernels, the wgmma main kernel, and
// the preprocess / convert kernels of bwd_api.cu): the block's sequence, its workspace rows, and
// the probability / score-gradient of one score (softcap included).
#pragma once
#include "cuda/attn_pieces.cuh"
#include "cuda/bwd_args.cuh"

namespace fa {
namespace cuda {

__device__ __forceinline__ SeqInfo bwd_seq(const BwdArgs& a, int b) {
  return seq_info(b, a.seqlen_q, a.seqlen_k, a.cu_seqlens_q, a.cu_seqlens_k, nullptr, a.total_q, a.total_k, 0);
}

// Workspace row of row 0 of head h of sequence b (lse2 / dsum index; dq_acc in units of width).
__device__ __forceinline__ int64_t bwd_ws_base(const BwdArgs& a, int b, int h, const SeqInfo& seq) {
  return static_cast<int64_t>(b) * a.ws_batch + static_cast<int64_t>(h) * a.ws_head + bwd_ws_row0(a, b, seq.q_row0);
}

// P and the factor dS / (P (dP - D)) of one raw score s (fp16/bf16 kernels; lse2 = lse * log2 e):
// without softcap P = 2^(s * p_scale_log2 - lse2), factor 1; with softcap t = tanh(s * softcap_scale),
// P = 2^(softcap * t * log2 e - lse2), factor 1 - t^2.
template <bool kPrecise>
__device__ __forceinline__ float bwd_prob(const BwdArgs& a, float s, float lse2, float* dmod) {
  if (a.softcap > 0.f) {
    const float t = softcap_tanh<kPrecise>(s * a.softcap_scale);
    *dmod = 1.f - t * t;
    return fast_exp2(fmaf(a.softcap * t, 1.4426950408889634f, -lse2));
  }
  *dmod = 1.f;
  return fast_exp2(fmaf(s, a.p_scale_log2, -lse2));
}
// The fp32 kernels' form (lse itself, one rounding of the small difference).
__device__ __forceinline__ float bwd_prob_f32(const BwdArgs& a, float s, float lse, float* dmod) {
  if (a.softcap > 0.f) {
    const float t = tanh_precise(s * a.softcap_scale);
    *dmod = 1.f - t * t;
    return fast_exp2((a.softcap * t - lse) * 1.4426950408889634f);
  }
  *dmod = 1.f;
  return fast_exp2(fmaf(s, a.p_scale, -lse) * 1.4426950408889634f);
}

}  // namespace cuda
}  // namespace fa
