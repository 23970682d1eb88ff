// The named fields of a binding call, defined once.
//
// Every entry point of the binding takes (op, params, slots): `params` is a Float64Array whose
// element FA_F_<name> holds the field <name>, `slots` a JS array whose element FA_S_<name> holds the
// tensor (device handle or host typed array) of that name, or null/undefined. The names are
// exported to JavaScript (native.layout()), and lib/native.ts builds its index maps from them at
// load time and refuses to start when a name it uses is missing: adding or reordering a field here
// can never silently shift another. Unused fields are 0, unused slots null.
#pragma once

// Scalar fields (numbers; booleans as 0/1).
#define FA_FIELDS(X)                                                                                  \
  X(device)             /* CUDA device index (-1: CPU) */                                            \
  X(batch)              /* B: batch size, or number of sequences (varlen / paged / appendKV) */     \
  X(seqlen_q)           /* Nq, or the largest sequence's query count */                             \
  X(seqlen_k)           /* Nk, or the largest sequence's key count */                               \
  X(min_seqlen_q)       /* paged: the fewest queries of a non-empty sequence (0: unknown) */         \
  X(heads)              /* H */                                                                      \
  X(heads_k)            /* Hkv */                                                                    \
  X(head_dim)           /* D */                                                                      \
  X(dtype)              /* fa_dtype */                                                               \
  X(causal)                                                                                          \
  X(bhsd)               /* layout: 0 bshd, 1 bhsd (dense calls) */                                   \
  X(scale)                                                                                           \
  X(softcap)            /* 0: off */                                                                 \
  X(has_window)                                                                                      \
  X(window_left)                                                                                     \
  X(window_right)                                                                                    \
  X(block_m)            /* CPU tiles (0: default) */                                                 \
  X(block_n)                                                                                         \
  X(threads)            /* CPU worker threads (0: all cores) */                                      \
  X(deterministic)                                                                                   \
  X(total_q)            /* rows of packed q */                                                       \
  X(total_k)            /* rows of packed k / new rows of appendKV */                                \
  X(page_size)                                                                                       \
  X(max_pages)          /* page-table columns */                                                     \
  X(num_pages)          /* pages in the cache */                                                     \
  X(num_splits)         /* split-KV factor (0: automatic) */                                         \
  X(rotary_dim)         /* 0: no rotary */                                                           \
  X(rotary_interleaved)                                                                              \
  X(rotary_max_position)                                                                             \
  X(merge_count)        /* mergeAttention: number of partial results */                            \
  X(slot_count)         /* slots the call reads: [0, slot_count) */

// Tensor slots, most used first (a call reads only the first slot_count).
#define FA_SLOTS(X)                                                                                  \
  X(q) X(k) X(v) X(out) X(lse) X(dout) X(dq) X(dk) X(dv) X(softmax_d) X(cu_seqlens_q)              \
  X(cu_seqlens_k) X(page_table) X(seqlens_k) X(rotary_cos) X(rotary_sin) X(k_cache) X(v_cache)    \
  X(cu_seqlens_new) X(seqlens_before)

// Operations of native.call(op, params, slots). (mergeAttention, whose input count varies, has its
// own entry point native.merge(params, outs, lses, out, lse).)
#define FA_OPS(X)                                                                                    \
  X(forward)            /* flashAttention / flashAttentionVarlen (cu_seqlens_q set) */              \
  X(backward)           /* flashAttentionBackward / flashAttentionVarlenBackward */                 \
  X(paged)              /* pagedAttention */                                                         \
  X(append_kv)          /* appendKV */

namespace fab {
enum Field {
#define FA_X(name) FA_F_##name,
  FA_FIELDS(FA_X)
#undef FA_X
  FA_NUM_FIELDS
};
enum Slot {
#define FA_X(name) FA_S_##name,
  FA_SLOTS(FA_X)
#undef FA_X
  FA_NUM_SLOTS
};
enum Op {
#define FA_X(name) FA_OP_##name,
  FA_OPS(FA_X)
#undef FA_X
  FA_NUM_OPS
};
}  // namespace fab
