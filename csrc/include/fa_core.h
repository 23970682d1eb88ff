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
} fa_bwd_params;

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

// Element-wise conversion (round to nearest even, NaN kept quiet, overflow to inf).
void fa_convert_from_f32(const float* src, void* dst, size_t n, fa_dtype dst_dtype);
void fa_convert_to_f32(const void* src, float* dst, size_t n, fa_dtype src_dtype);

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
