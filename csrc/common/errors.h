// Thread-local error message behind fa_last_error(), and a helper to set it.
#pragma once
#include <string>
#include "fa_core.h"

namespace fa {
// Records `msg` as this thread's last error and returns `s`.
fa_status fail(fa_status s, const std::string& msg);
void clear_error();
}  // namespace fa
