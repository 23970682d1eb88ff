// Head-dim tile widths: which generated instantiations exist in this build, and the smallest one
// that fits a head dim. Shared by the forward and backward dispatchers.
#pragma once
#include <stddef.h>

#include "fa_core.h"

namespace fa {
namespace cuda {

// FA_HEAD_DIMS="64;128" builds only the generated files of those widths and defines
// FA_HEAD_DIM_LIST=64,128 for the dispatchers, so only those instantiations are referenced.
constexpr bool width_built(int w) {
#ifdef FA_HEAD_DIM_LIST
  constexpr int kBuilt[] = {FA_HEAD_DIM_LIST};
  for (int b : kBuilt)
    if (b == w) return true;
  return false;
#else
  (void)w;
  return true;
#endif
}

template <size_t N>
constexpr bool listed(const int (&list)[N], int w) {
  for (size_t i = 0; i < N; ++i)
    if (list[i] == w) return true;
  return false;
}

// Smallest width >= d that is both in the dtype's list and built, or 0.
template <size_t N16, size_t N32>
int pick_width(const int (&widths16)[N16], const int (&widths32)[N32], fa_dtype dtype, int d) {
  int best = 0;
  auto consider = [&](int w) {
    if (w >= d && width_built(w) && (best == 0 || w < best)) best = w;
  };
  if (dtype == FA_FLOAT32) {
    for (int w : widths32) consider(w);
  } else {
    for (int w : widths16) consider(w);
  }
  return best;
}

}  // namespace cuda
}  // namespace fa
