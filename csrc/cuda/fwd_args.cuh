// The forward kernels' argument block (built by fwd_api.cu from fa_fwd_params) and the entry point
// that each generated instantiation file defines.
#pragma once
#include <cuda_runtime.h>
#include <stdint.h>

#include "fa_core.h"

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
  int causal;
  int negate_s;        // scale < 0: the kernel negates S and uses |scale|
  float scale_log2;    // |scale| * log2(e) (a tiny positive number when scale == 0)
};

// Defined once per (element type, tile width) in csrc/generated/fwd_<dtype>_hdim<W>.cu.
template <typename T, int kHeadDim>
fa_status run_fwd(FwdArgs args, cudaStream_t stream);
// Defined in csrc/generated/fwd_sm90_<dtype>_hdim<W>.cu (fp16 / bf16, W = 128).
template <typename T, int kHeadDim>
fa_status run_fwd_sm90(FwdArgs args, cudaStream_t stream);

}  // namespace cuda
}  // namespace fa
