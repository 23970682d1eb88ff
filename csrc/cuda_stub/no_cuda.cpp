// Built instead of csrc/cuda when nvcc is absent: the CUDA entry points report FA_ERR_NO_CUDA.
#include "fa_core.h"
#include "common/errors.h"

extern "C" fa_status fa_fwd_cuda(const fa_fwd_params*, void*) {
  return fa::fail(FA_ERR_NO_CUDA, "flash-attention-node was built without CUDA");
}
extern "C" fa_status fa_bwd_cuda(const fa_bwd_params*, void*) {
  return fa::fail(FA_ERR_NO_CUDA, "flash-attention-node was built without CUDA");
}
extern "C" int fa_cuda_supports(fa_dtype, int) { return 0; }
extern "C" size_t fa_bwd_workspace_size(const fa_bwd_params*) { return 0; }
extern "C" int fa_cuda_backward_available(void) { return 0; }
extern "C" fa_status fa_append_kv_cuda(const fa_append_kv_params*, void*) {
  return fa::fail(FA_ERR_NO_CUDA, "flash-attention-node was built without CUDA");
}
extern "C" fa_status fa_rotary_cuda(const fa_rotary_params*, void*) {
  return fa::fail(FA_ERR_NO_CUDA, "flash-attention-node was built without CUDA");
}
extern "C" fa_status fa_merge_cuda(const fa_merge_params*, void*) {
  return fa::fail(FA_ERR_NO_CUDA, "flash-attention-node was built without CUDA");
}
extern "C" fa_status fa_internal_debug_fault(void*) {
  return fa::fail(FA_ERR_NO_CUDA, "flash-attention-node was built without CUDA");
}
extern "C" fa_status fa_internal_fill_random(void*, size_t, int, unsigned, void*) {
  return fa::fail(FA_ERR_NO_CUDA, "flash-attention-node was built without CUDA");
}
