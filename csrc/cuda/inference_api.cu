// CUDA entry points of the inference pieces: appendKV, rotary, merge. (Placeholders; implemented
// in a following change.)
#include "common/errors.h"
#include "fa_core.h"

extern "C" fa_status fa_append_kv_cuda(const fa_append_kv_params*, void*) {
  return fa::fail(FA_ERR_UNSUPPORTED, "fa_append_kv_cuda: not implemented yet");
}
extern "C" fa_status fa_rotary_cuda(const fa_rotary_params*, void*) {
  return fa::fail(FA_ERR_UNSUPPORTED, "fa_rotary_cuda: not implemented yet");
}
extern "C" fa_status fa_merge_cuda(const fa_merge_params*, void*) {
  return fa::fail(FA_ERR_UNSUPPORTED, "fa_merge_cuda: not implemented yet");
}
