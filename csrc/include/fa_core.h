// flash-attention-node core API: plain C structs, no Node.js, no templates.
//
// The N-API binding, the C++ test binaries and the benchmark all call these entry points. Every
// pointer is raw (host memory for the CPU backend, device memory for CUDA); every stride is in
// elements, not bytes. Shapes follow flash-attn: q is [B, Nq, H, D], k/v are [B, Nk, Hkv, D] in
// the bshd layout; bhsd is the same data described by other strides.
#ifndef FA_CORE_H
#define FA_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum fa_dtype { FA_FLOAT32 = 0, FA_FLOAT16 = 1, FA_BFLOAT16 = 2 } fa_dtype;

typedef enum fa_status {
  FA_OK = 0,
  FA_ERR_INVALID = 1,       // a parameter the caller should have validated (message in fa_last_error)
  FA_ERR_UNSUPPORTED = 2,   // valid, but this backend has no kernel for it (e.g. head dim not compiled)
  FA_ERR_NO_MEMORY = 3,     // host allocation failed
  FA_ERR_CUDA = 4,          // a CUDA call failed; fa_last_error() carries the CUDA error name
  FA_ERR_NO_CUDA = 5,       // built without CUDA, or no device
} fa_status;

// Strides (elements) of one 4-D attention tensor: batch, sequence position, head. The head-dim
// stride is always 1.
typedef struct fa_strides {
  int64_t batch;
  int64_t row;
  int64_t head;
} fa_strides;

typedef struct fa_fwd_params {
  const void* q;          // [B, Nq, H, D] via q_str
  const void* k;          // [B, Nk, Hkv, D] via k_str
  const void* v;          // [B, Nk, Hkv, D] via v_str
  void* o;                // [B, Nq, H, D] via o_str, same dtype as q
  float* lse;             // [B, H, Nq] contiguous float32, natural log; +inf for a row that sees no key
  fa_strides q_str, k_str, v_str, o_str;
  int batch, seqlen_q, seqlen_k, heads, heads_k, head_dim;
  float scale;            // multiplies QK^T before the softmax
  int causal;             // bottom-right aligned: row i sees keys j <= i + Nk - Nq
  fa_dtype dtype;
  // CPU backend only: tile sizes (0 = default) and worker threads (0 = all cores).
  int block_m, block_n, num_threads;

  // ---- Everything below is optional: a zero-initialised field keeps the behaviour above. ----

  // Sliding window (when has_window != 0). Query row i of a sequence with Nq_b queries and Nk_b keys
  // sits at key position p = i + Nk_b - Nq_b (bottom-right alignment) and sees keys j with
  // p - window_left <= j <= p + window_right; -1 means unbounded on that side. causal = 1 is the
  // same as window_right = 0 (both may be set: the tighter bound wins).
  int has_window;
  int window_left, window_right;
  // Score modifier: > 0 turns each score s = scale * q.k into softcap * tanh(s / softcap) before the
  // softmax (then `scale` is applied inside the tanh only). 0 = off.
  float softcap;

  // Variable-length (packed) batches: when cu_seqlens_q != NULL, `batch` sequences are packed along
  // the row axis. q and o are [total_q, H, D] (q_str.row / q_str.head; batch strides unused); sequence
  // b owns rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1; lse is [H, total_q]. K and V are either
  // packed the same way by cu_seqlens_k ([total_k, Hkv, D]) or paged (below). seqlen_q / seqlen_k
  // then hold upper bounds of the per-sequence lengths (they size the CUDA grids; a larger sequence
  // is an error the CUDA kernels do not detect: the caller checks). Index arrays are host memory
  // for the CPU backend and device memory for CUDA.
  const int32_t* cu_seqlens_q;   // [batch + 1], non-decreasing, cu_seqlens_q[0] = 0
  const int32_t* cu_seqlens_k;   // [batch + 1] (packed K/V) or NULL (paged K/V)
  int total_q;                   // rows of q (= cu_seqlens_q[batch])
  int total_k;                   // rows of packed k / v (= cu_seqlens_k[batch]; unused when paged)
  // Paged K/V (page_table != NULL, requires cu_seqlens_q): k and v are caches [num_pages, page_size,
  // Hkv, D]; token t of sequence b lives in page page_table[b * max_pages_per_seq + t / page_size],
  // row t % page_size. k_str.row / v_str.row: elements between consecutive tokens of a page,
  // k_str.head: between heads (a page is page_size * row elements). seqlens_k[b]: tokens of sequence
  // b in the cache; its queries are aligned with its last seqlens_k[b] - Nq_b .. seqlens_k[b] - 1
  // positions (bottom-right, as above).
  const int32_t* page_table;     // [batch, max_pages_per_seq]
  const int32_t* seqlens_k;      // [batch]
  int page_size, max_pages_per_seq, num_pages;
  int num_splits;                // split-KV factor (0 = chosen automatically; the CPU: its key splits)
  // CUDA paged decode: 1 when the caller knows that the work queued right before this call on the
  // stream writes no byte of k / v (the binding: the previous operation was an attention call whose
  // outputs do not overlap the caches). The decode kernel then requests its first K / V tiles while
  // the kernel before it finishes (programmatic dependent launch) instead of after. 0 = always safe.
  int decode_early_kv;
  // Paged calls: the fewest queries of any non-empty sequence when the caller knows it (host index
  // arrays), 0 when not (device index arrays). Where every sequence has more query rows than the
  // CUDA decode kernel packs, that kernel is not launched (a prefill call then costs one launch).
  int min_seqlen_q;
} fa_fwd_params;

typedef struct fa_bwd_params {
  const void* dout;       // [B, Nq, H, D] via do_str
  const void* q;
  const void* k;
  const void* v;
  const void* o;          // the forward's output
  const float* lse;       // [B, H, Nq] from the forward
  void* dq;               // [B, Nq, H, D] via dq_str, dtype of q
  void* dk;               // [B, Nk, Hkv, D] via dk_str, summed over each GQA group
  void* dv;               // [B, Nk, Hkv, D] via dv_str
  fa_strides do_str, q_str, k_str, v_str, o_str, dq_str, dk_str, dv_str;
  int batch, seqlen_q, seqlen_k, heads, heads_k, head_dim;
  float scale;
  int causal;
  int deterministic;      // CUDA: no float atomics, bit-identical results (the CPU backend always is)
  fa_dtype dtype;
  int block_m, block_n, num_threads;  // CPU backend only, as in fa_fwd_params
  float* softmax_d;       // optional [B, H, Nq] float32: when non-null, D = rowsum(dO * O) is also
                          // written here (for tests and diagnostics)
  void* workspace;        // CUDA: optional caller-provided scratch of fa_bwd_workspace_size() bytes;
                          // when null the backend takes it from the stream-ordered allocator

  // ---- Optional, as in fa_fwd_params (zero = off) ----
  int has_window;
  int window_left, window_right;
  float softcap;
  // Packed sequences: q, o, dout, dq [total_q, H, D]; k, v, dk, dv [total_k, Hkv, D]; lse and
  // softmax_d [H, total_q]. seqlen_q / seqlen_k hold upper bounds of the per-sequence lengths.
  const int32_t* cu_seqlens_q;   // [batch + 1]
  const int32_t* cu_seqlens_k;   // [batch + 1]
  int total_q, total_k;
} fa_bwd_params;

// Rotary position embedding (RoPE) on the first rotary_dim features of each head: the pair (a, b) at
// position p becomes (a cos - b sin, a sin + b cos), cos = cos[p * rotary_dim / 2 + i], likewise sin.
// Non-interleaved (GPT-NeoX / Llama): pair i is (x[i], x[i + rotary_dim / 2]); interleaved (GPT-J):
// (x[2i], x[2i + 1]). A position outside [0, max_position) gives NaN in the rotated features.
typedef struct fa_rotary {
  const float* cos;       // [max_position, rotary_dim / 2] float32 (NULL: no rotary)
  const float* sin;
  int rotary_dim;         // even, 2 <= rotary_dim <= head_dim
  int max_position;
  int interleaved;
} fa_rotary;

// Writes new keys / values of each sequence into a paged cache after the tokens it already has:
// row i of sequence b (packed by cu_seqlens_new) goes to token t = seqlens_before[b] + i, i.e. page
// page_table[b * max_pages_per_seq + t / page_size], row t % page_size. With rotary, k is rotated at
// position t before it is stored. Caches [num_pages, page_size, Hkv, D] and k, v [total_new, Hkv, D]
// are contiguous. A page index outside [0, num_pages) (device index arrays) is skipped, never written.
typedef struct fa_append_kv_params {
  void* k_cache;
  void* v_cache;
  const void* k;
  const void* v;
  const int32_t* page_table;      // [batch, max_pages_per_seq]
  const int32_t* cu_seqlens_new;  // [batch + 1]
  const int32_t* seqlens_before;  // [batch]
  int batch, total_new, heads_k, head_dim, page_size, max_pages_per_seq, num_pages;
  fa_dtype dtype;
  fa_rotary rotary;
  int num_threads;                // CPU backend: worker threads (0 = all cores)
} fa_append_kv_params;

// Rotary on packed rows [total, heads, head_dim] (contiguous; out may equal x). Row i of sequence b
// (packed by cu_seqlens) is at position pos_start[b] + i when pos_start != NULL, else at
// pos_end[b] - n_b + i (n_b its row count: the rows end at position pos_end[b] - 1).
typedef struct fa_rotary_params {
  const void* x;
  void* out;
  const int32_t* cu_seqlens;      // [batch + 1]
  const int32_t* pos_start;       // [batch] or NULL
  const int32_t* pos_end;         // [batch] (used when pos_start is NULL)
  int batch, total, heads, head_dim;
  fa_dtype dtype;
  fa_rotary rotary;
  int num_threads;
} fa_rotary_params;

// Combines attention over disjoint key sets: out = sum_i exp(lse_i - lse) * out_i,
// lse = log(sum_i exp(lse_i)). out_i [batch, seqlen, heads, head_dim] (contiguous, dtype), lse_i
// [batch, heads, seqlen] float32 (a packed [total, H, D] / [H, total] pair is batch 1, seqlen
// total). A partial whose lse is +inf or -inf saw no key and contributes nothing; a row that no
// partial saw gets out = 0 and lse = +inf (the library's convention). For CUDA `outs` / `lses` are
// host arrays of device pointers.
typedef struct fa_merge_params {
  int num;
  const void* const* outs;
  const float* const* lses;
  void* out;
  float* lse;
  int batch, seqlen, heads, head_dim;
  fa_dtype dtype;
  int num_threads;
} fa_merge_params;

// CPU backend. Blocking; call from a worker thread. Uses its own thread pool.
fa_status fa_fwd_cpu(const fa_fwd_params* p);
fa_status fa_bwd_cpu(const fa_bwd_params* p);

// CUDA backend. Enqueues on `stream` (a cudaStream_t) on the current device and returns without
// waiting. Workspace, if any, comes from the stream-ordered allocator on the same stream.
fa_status fa_fwd_cuda(const fa_fwd_params* p, void* stream);
fa_status fa_bwd_cuda(const fa_bwd_params* p, void* stream);
// Bytes of scratch the CUDA backward needs for these params (0 when none).
size_t fa_bwd_workspace_size(const fa_bwd_params* p);
// 1 when this build has a CUDA backward kernel.
int fa_cuda_backward_available(void);
// 1 when a head dim / dtype combination has a CUDA kernel.
int fa_cuda_supports(fa_dtype dtype, int head_dim);

fa_status fa_append_kv_cpu(const fa_append_kv_params* p);
fa_status fa_append_kv_cuda(const fa_append_kv_params* p, void* stream);
fa_status fa_rotary_cpu(const fa_rotary_params* p);
fa_status fa_rotary_cuda(const fa_rotary_params* p, void* stream);
fa_status fa_merge_cpu(const fa_merge_params* p);
fa_status fa_merge_cuda(const fa_merge_params* p, void* stream);

// Element-wise conversion (round to nearest even, NaN kept quiet, overflow to inf).
void fa_convert_from_f32(const float* src, void* dst, size_t n, fa_dtype dst_dtype);
void fa_convert_to_f32(const void* src, float* dst, size_t n, fa_dtype src_dtype);

// FA_PROFILE_HOST=1 (development): the host time spent inside cudaLaunchKernelEx by the CUDA
// backend's launches of the Hopper kernels (warp-specialised forward, decode) so far, and their
// count; zeros when the switch is off. Defined in CUDA builds only.
void fa_profile_launches(double* total_us, long* count);

// Message for the last failure on this thread (thread-local; empty when none).
const char* fa_last_error(void);
const char* fa_status_name(fa_status s);

// Strides for a contiguous tensor stored as bshd ([B, N, H, D]) or bhsd ([B, H, N, D]).
static inline fa_strides fa_strides_bshd(int n, int h, int d) {
  fa_strides s; s.batch = (int64_t)n * h * d; s.row = (int64_t)h * d; s.head = d; return s;
}
static inline fa_strides fa_strides_bhsd(int n, int h, int d) {
  fa_strides s; s.batch = (int64_t)n * h * d; s.row = d; s.head = (int64_t)n * d; return s;
}

#ifdef __cplusplus
}
#endif
#endif  // FA_CORE_H
