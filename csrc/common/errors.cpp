#include "common/errors.h"

namespace {
thread_local std::string g_last_error;
}

namespace fa {
fa_status fail(fa_status s, const std::string& msg) {
  g_last_error = msg;
  return s;
}
void clear_error() { g_last_error.clear(); }
}  // namespace fa

extern "C" const char* fa_last_error(void) { return g_last_error.c_str(); }

extern "C" const char* fa_status_name(fa_status s) {
  switch (s) {
    case FA_OK: return "FA_OK";
    case FA_ERR_INVALID: return "FA_ERR_INVALID";
    case FA_ERR_UNSUPPORTED: return "FA_ERR_UNSUPPORTED";
    case FA_ERR_NO_MEMORY: return "FA_ERR_NO_MEMORY";
    case FA_ERR_CUDA: return "FA_ERR_CUDA";
    case FA_ERR_NO_CUDA: return "FA_ERR_NO_CUDA";
  }
  return "FA_ERR_UNKNOWN";
}
