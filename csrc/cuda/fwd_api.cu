// fa_fwd_cuda / fa_cuda_supports: argument checks, then dispatch to the instantiation whose head-dim
// tile width is the smallest compiled one >= head_dim (the pad columns are zero-filled on load and
// never written).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <string>
#include <type_traits>

#include "common/errors.h"
#include "cuda/api_checks.h"
#include "cuda/fwd_args.cuh"
#include "fa_core.h"
#include "cuda/widths.cuh"

namespace fa {
namespace cuda {
namespace {

// Tile widths that scripts/generate_kernels.py writes a file for (keep the two lists in step; a
// width listed here without its file is a link error, not a silent miss).
constexpr int kWidths16[] = {32, 64, 96, 128, 160, 192, 256};  // fp16 and bf16
constexpr int kWidths32[] = {32, 64, 128, 256};                 // fp32

// Smallest compiled width >= d for this dtype, or 0.
int pick_compiled_width(fa_dtype dtype, int d) {
  return fa::cuda::pick_width(kWidths16, kWidths32, dtype, d);
}

template <typename T, int W>
bool try_run(int width, const FwdArgs& a, cudaStream_t s, fa_status* st) {
  constexpr bool kCompiled = width_built(W) && (std::is_same<T, float>::value ? listed(kWidths32, W)
                                                                                : listed(kWidths16, W));
  if constexpr (kCompiled) {
    if (width == W) {
      *st = run_fwd<T, W>(a, s);
      return true;
    }
  }
  return false;
}

// The Hopper (wgmma) forward kernels (sm90_kernels_usable in api_checks.h says where they run).
constexpr int kWidthsSm90[] = {64, 128, 256};  // fp16 and bf16; keep equal to WIDTHS_SM90 in generate_kernels.py

template <typename T, int W>
bool try_run_sm90(int width, const FwdArgs& a, cudaStream_t s, fa_status* st) {
  constexpr bool kCompiled = width_built(W) && listed(kWidthsSm90, W) && !std::is_same<T, float>::value;
#if defined(FA_HAVE_SM90A)
  if constexpr (kCompiled) {
    if (width == W && sm90_kernels_usable()) {
      *st = run_fwd_sm90<T, W>(a, s);
      return true;
    }
  }
#else
  (void)width, (void)a, (void)s, (void)st, (void)kCompiled;
#endif
  return false;
}

template <typename T>
fa_status dispatch(int width, const FwdArgs& a, cudaStream_t s) {
  fa_status st = FA_ERR_UNSUPPORTED;
  if (try_run_sm90<T, 64>(width, a, s, &st) || try_run_sm90<T, 128>(width, a, s, &st) ||
      try_run_sm90<T, 256>(width, a, s, &st))
    return st;
  const bool ran = try_run<T, 32>(width, a, s, &st) || try_run<T, 64>(width, a, s, &st) ||
                   try_run<T, 96>(width, a, s, &st) || try_run<T, 128>(width, a, s, &st) ||
                   try_run<T, 160>(width, a, s, &st) || try_run<T, 192>(width, a, s, &st) ||
                   try_run<T, 256>(width, a, s, &st);
  if (!ran) return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward: no kernel for tile width " + std::to_string(width));
  return st;
}

}  // namespace
}  // namespace cuda
}  // namespace fa

extern "C" int fa_cuda_supports(fa_dtype dtype, int head_dim) {
  if (dtype != FA_FLOAT32 && dtype != FA_FLOAT16 && dtype != FA_BFLOAT16) return 0;
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0) return 0;
  return fa::cuda::pick_compiled_width(dtype, head_dim) != 0 ? 1 : 0;
}

extern "C" fa_status fa_fwd_cuda(const fa_fwd_params* p, void* stream) {
  using namespace fa::cuda;
  if (p == nullptr) return fa::fail(FA_ERR_INVALID, "fa_fwd_cuda: params is NULL");
  const int d = p->head_dim;
  const int width = pick_compiled_width(p->dtype, d);
  const fa_status bad = check_common_args("fa_fwd_cuda", "CUDA forward", p->dtype, p->batch, p->seqlen_q, p->seqlen_k,
                                          p->heads, p->heads_k, d, p->scale, width);
  if (bad != FA_OK) return bad;
  if (p->batch == 0 || p->seqlen_q == 0 || p->heads == 0) return FA_OK;  // nothing to compute
  if (p->q == nullptr || p->o == nullptr || p->lse == nullptr || (p->seqlen_k > 0 && (p->k == nullptr || p->v == nullptr)))
    return fa::fail(FA_ERR_INVALID, "fa_fwd_cuda: q, k, v, o and lse must be device pointers, got NULL");

  // 16-byte vector loads and stores: pointers 16-byte aligned, strides whole 16-byte chunks.
  const int elem = p->dtype == FA_FLOAT32 ? 4 : 2;
  const int vec = 16 / elem;
  if (!aligned16(p->q) || !aligned16(p->k) || !aligned16(p->v) || !aligned16(p->o))
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward needs q, k, v and o 16-byte aligned");
  if (!strides_ok(p->q_str, vec) || !strides_ok(p->k_str, vec) || !strides_ok(p->v_str, vec) ||
      !strides_ok(p->o_str, vec))
    return fa::fail(FA_ERR_UNSUPPORTED, "CUDA forward needs batch/row/head strides that are multiples of " +
                                            std::to_string(vec) + " elements (16 bytes); contiguous tensors are");

  FwdArgs a{};
  a.q = p->q;
  a.k = p->k;
  a.v = p->v;
  a.o = p->o;
  a.lse = p->lse;
  a.q_batch = p->q_str.batch, a.q_row = p->q_str.row, a.q_head = p->q_str.head;
  a.k_batch = p->k_str.batch, a.k_row = p->k_str.row, a.k_head = p->k_str.head;
  a.v_batch = p->v_str.batch, a.v_row = p->v_str.row, a.v_head = p->v_str.head;
  a.o_batch = p->o_str.batch, a.o_row = p->o_str.row, a.o_head = p->o_str.head;
  a.batch = p->batch;
  a.heads = p->heads;
  a.heads_k = p->heads_k;
  a.seqlen_q = p->seqlen_q;
  a.seqlen_k = p->seqlen_k;
  a.head_dim = d;
  a.group = p->heads / p->heads_k;
  a.causal = p->causal ? 1 : 0;
  a.negate_s = p->scale < 0.f ? 1 : 0;
  // scale == 0 (uniform attention) still needs masked -inf entries to give 0, not NaN: a tiny
  // positive factor keeps every unmasked exponent at 0 and -inf at -inf.
  const float s2 = fabsf(p->scale) * 1.4426950408889634f;
  a.scale_log2 = s2 > 1e-30f ? s2 : 1e-30f;

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p->dtype) {
    case FA_FLOAT16: return dispatch<__half>(width, a, s);
    case FA_BFLOAT16: return dispatch<__nv_bfloat16>(width, a, s);
    default: return dispatch<float>(width, a, s);
  }
}
