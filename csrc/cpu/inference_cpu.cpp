// CPU backend: appendKV (paged cache writes with rotary), rotary on packed rows, and the merge of
// partial attention results. (Placeholder entry points; implemented in a following change.)
#include "common/errors.h"
#include "fa_core.h"

extern "C" fa_status fa_append_kv_cpu(const fa_append_kv_params*) {
  return fa::fail(FA_ERR_UNSUPPORTED, "fa_append_kv_cpu: not implemented yet");
}
extern "C" fa_status fa_rotary_cpu(const fa_rotary_params*) {
  return fa::fail(FA_ERR_UNSUPPORTED, "fa_rotary_cpu: not implemented yet");
}
extern "C" fa_status fa_merge_cpu(const fa_merge_params*) {
  return fa::fail(FA_ERR_UNSUPPORTED, "fa_merge_cpu: not implemented yet");
}
