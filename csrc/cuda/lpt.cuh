// Longest-first tile order in L2-sized sections (FA_WS_LPT development builds; NOTES-fwd.md,
// ninth session): the (batch, head) pairs of a causal call in sections whose streamed bytes fit
// in FA_WS_LPT_MB MiB, and inside a section the tiles rank by rank across all its pairs (every
// pair's longest tile, then every pair's second, ...), so the grid ends on short tiles of every
// pair while the blocks running at one time share a section's data in L2. One place for the
// forward's ws_coord and the backward's bwd_block_of.
#pragma once
#include <stdint.h>

#include <algorithm>

#include "cuda/api_checks.h"

namespace fa {
namespace cuda {

// Host: pairs per section for `pairs` pairs of `pair_bytes` each (0: FA_WS_LPT_MB=0, the default
// order), sections of equal size (a small remainder last would start its longest tiles with too
// little work left beside them), in whole multiples of `grp` (GQA: adjacent pairs sharing K / V).
inline int lpt_section_pairs(int64_t pairs, int64_t pair_bytes, int64_t grp) {
  static const int lpt_mb = env_int("FA_WS_LPT_MB", 24);  // about half the H100 / H200 L2
  if (lpt_mb <= 0 || pairs <= 0) return 0;
  grp = std::max<int64_t>(grp, 1);
  const int64_t fit = std::max<int64_t>(1, std::min<int64_t>((int64_t(lpt_mb) << 20) / std::max<int64_t>(pair_bytes, 1), pairs));
  const int64_t sections = (pairs + fit - 1) / fit;
  const int64_t size = (pairs + sections - 1) / sections;
  return int(std::min<int64_t>(pairs, (size + grp - 1) / grp * grp));
}

// Device: tile idx of a grid of pairs x per_pair tiles in sections of g pairs -> its pair and its
// rank in the pair's own order (0 runs first). A bijection; a pair's ranks come in index order.
__device__ __forceinline__ void lpt_tile(int idx, int g, int per_pair, int pairs, int* rank, int* pair) {
  const int p0 = idx / (g * per_pair) * g;
  const int n = min(g, pairs - p0);  // pairs in this section (the last may hold fewer)
  const int r = idx - p0 * per_pair;
  *rank = r / n;
  *pair = p0 + r % n;
}

}  // namespace cuda
}  // namespace fa
