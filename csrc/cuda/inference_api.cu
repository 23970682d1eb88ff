// CUDA entry points of the inference pieces: fa_merge_cuda (mergeAttention; the same combine kernel
// serves split-KV decode, see fa_fwd_cuda), fa_rotary_cuda (RoPE on packed rows) and
// fa_append_kv_cuda (writes new keys / values into a paged cache, rotating keys on the way).
// Memory-bound element-wise kernels: one warp per (row, head), lanes over the head dimension.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include <string>
#include <type_traits>

#include "common/errors.h"
#include "cuda/api_checks.h"
#include "cuda/combine.cuh"
#include "cuda/inference_api.cuh"
#include "fa_core.h"

namespace fa {
namespace cuda {
namespace {

fa_status cuda_err(cudaError_t e, const char* what) {
  return fa::fail(FA_ERR_CUDA, std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " (" + what + ")");
}

unsigned blocks_for(int64_t warps) {
  int64_t b = (warps * 32 + 255) / 256;
  if (b > 65535) b = 65535;  // grid-stride loops cover the rest
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

template <typename T>
__device__ __forceinline__ float to_f(T x) {
  if constexpr (std::is_same<T, float>::value) return x;
  else if constexpr (std::is_same<T, __half>::value) return __half2float(x);
  else return __bfloat162float(x);
}
template <typename T>
__device__ __forceinline__ T from_f(float x) {
  if constexpr (std::is_same<T, float>::value) return x;
  else if constexpr (std::is_same<T, __half>::value) return __float2half_rn(x);
  else return __float2bfloat16_rn(x);
}

// The sequence of packed row r: s with cu[s] <= r < cu[s + 1] (cu non-decreasing, cu[0] = 0).
__device__ __forceinline__ int find_seq(const int32_t* cu, int n, int r) {
  int lo = 0, hi = n;
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (__ldg(cu + mid) <= r) lo = mid;
    else hi = mid;
  }
  return lo;
}

// One head-row of D elements from src to dst, the first rd rotated at position pos (NaN when pos is
// outside the table). In place is fine: each lane reads both elements of its pairs before writing.
template <typename T>
__device__ __forceinline__ void rotate_row(const T* src, T* dst, int D, int pos, const fa_rotary& ro, int lane) {
  const int rd = ro.cos != nullptr ? ro.rotary_dim : 0;
  const int half = rd / 2;
  const bool ok = pos >= 0 && pos < ro.max_position;
  for (int j = lane; j < half; j += 32) {
    const int i0 = ro.interleaved ? 2 * j : j;
    const int i1 = ro.interleaved ? 2 * j + 1 : j + half;
    const float c = ok ? __ldg(ro.cos + static_cast<int64_t>(pos) * half + j) : NAN;
    const float s = ok ? __ldg(ro.sin + static_cast<int64_t>(pos) * half + j) : NAN;
    const float a = to_f(src[i0]), b = to_f(src[i1]);
    dst[i0] = from_f<T>(a * c - b * s);
    dst[i1] = from_f<T>(a * s + b * c);
  }
  for (int j = rd + lane; j < D; j += 32) dst[j] = src[j];
}

template <typename T>
__global__ void __launch_bounds__(256) rotary_kernel(const fa_rotary_params p) {
  const int lane = threadIdx.x & 31;
  const int64_t items = static_cast<int64_t>(p.total) * p.heads;
  const int64_t w0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nw = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t it = w0; it < items; it += nw) {
    const int r = static_cast<int>(it / p.heads), h = static_cast<int>(it % p.heads);
    const int s = find_seq(p.cu_seqlens, p.batch, r);
    const int start = __ldg(p.cu_seqlens + s), n = __ldg(p.cu_seqlens + s + 1) - start;
    const int pos = p.pos_start ? __ldg(p.pos_start + s) + (r - start) : __ldg(p.pos_end + s) - n + (r - start);
    const int64_t off = (static_cast<int64_t>(r) * p.heads + h) * p.head_dim;
    rotate_row<T>(static_cast<const T*>(p.x) + off, static_cast<T*>(p.out) + off, p.head_dim, pos, p.rotary, lane);
  }
}

template <typename T>
__global__ void __launch_bounds__(256) append_kv_kernel(const fa_append_kv_params p) {
  const int lane = threadIdx.x & 31;
  const int64_t items = static_cast<int64_t>(p.total_new) * p.heads_k;
  const int64_t w0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nw = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t it = w0; it < items; it += nw) {
    const int r = static_cast<int>(it / p.heads_k), h = static_cast<int>(it % p.heads_k);
    const int s = find_seq(p.cu_seqlens_new, p.batch, r);
    const int pos = __ldg(p.seqlens_before + s) + (r - __ldg(p.cu_seqlens_new + s));
    if (pos < 0 || pos / p.page_size >= p.max_pages_per_seq) continue;
    const int page = __ldg(p.page_table + static_cast<int64_t>(s) * p.max_pages_per_seq + pos / p.page_size);
    if (page < 0 || page >= p.num_pages) continue;  // never written outside the cache
    const int64_t dst = ((static_cast<int64_t>(page) * p.page_size + pos % p.page_size) * p.heads_k + h) * p.head_dim;
    const int64_t src = (static_cast<int64_t>(r) * p.heads_k + h) * p.head_dim;
    rotate_row<T>(static_cast<const T*>(p.k) + src, static_cast<T*>(p.k_cache) + dst, p.head_dim, pos, p.rotary, lane);
    const T* vs = static_cast<const T*>(p.v) + src;
    T* vd = static_cast<T*>(p.v_cache) + dst;
    for (int j = lane; j < p.head_dim; j += 32) vd[j] = vs[j];
  }
}

}  // namespace

// Combines up to kMaxCombine partials (TI or fp32) per launch into an output of type TO.
template <typename TI, typename TO>
fa_status launch_combine(const CombineArgs& c, cudaStream_t s) {
  const int64_t rows = static_cast<int64_t>(c.batch) * c.seqlen * c.heads;
  if (rows == 0) return FA_OK;
  (void)cudaGetLastError();
  const cudaError_t e = launch_pdl(&combine_kernel<TI, TO>, dim3(blocks_for(rows)), dim3(256), 0, s, c);
  return e == cudaSuccess ? FA_OK : cuda_err(e, "combine launch");
}
template fa_status launch_combine<float, float>(const CombineArgs&, cudaStream_t);
template fa_status launch_combine<__half, float>(const CombineArgs&, cudaStream_t);
template fa_status launch_combine<__nv_bfloat16, float>(const CombineArgs&, cudaStream_t);
template fa_status launch_combine<__half, __half>(const CombineArgs&, cudaStream_t);
template fa_status launch_combine<__nv_bfloat16, __nv_bfloat16>(const CombineArgs&, cudaStream_t);

}  // namespace cuda
}  // namespace fa

using namespace fa::cuda;

extern "C" fa_status fa_rotary_cuda(const fa_rotary_params* p, void* stream) {
  if (p == nullptr || p->x == nullptr || p->out == nullptr || p->cu_seqlens == nullptr ||
      (p->pos_start == nullptr && p->pos_end == nullptr))
    return fa::fail(FA_ERR_INVALID, "fa_rotary_cuda: x, out, cu_seqlens and pos_start or pos_end are required");
  if (p->rotary.cos == nullptr || p->rotary.sin == nullptr || p->rotary.rotary_dim < 2 || p->rotary.rotary_dim % 2 ||
      p->rotary.rotary_dim > p->head_dim)
    return fa::fail(FA_ERR_INVALID, "fa_rotary_cuda: rotary_dim must be even, 2..head_dim, with cos and sin tables");
  if (p->total <= 0 || p->heads <= 0) return FA_OK;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned grid = blocks_for(static_cast<int64_t>(p->total) * p->heads);
  (void)cudaGetLastError();
  switch (p->dtype) {
    case FA_FLOAT16: rotary_kernel<__half><<<grid, 256, 0, s>>>(*p); break;
    case FA_BFLOAT16: rotary_kernel<__nv_bfloat16><<<grid, 256, 0, s>>>(*p); break;
    default: rotary_kernel<float><<<grid, 256, 0, s>>>(*p); break;
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? FA_OK : cuda_err(e, "rotary launch");
}

extern "C" fa_status fa_append_kv_cuda(const fa_append_kv_params* p, void* stream) {
  if (p == nullptr || p->k_cache == nullptr || p->v_cache == nullptr || p->page_table == nullptr ||
      p->cu_seqlens_new == nullptr || p->seqlens_before == nullptr)
    return fa::fail(FA_ERR_INVALID, "fa_append_kv_cuda: caches and index arrays are required");
  if (p->page_size < 1 || p->heads_k < 1 || p->head_dim < 1)
    return fa::fail(FA_ERR_INVALID, "fa_append_kv_cuda: page_size, heads_k and head_dim must be >= 1");
  if (p->rotary.cos != nullptr &&
      (p->rotary.rotary_dim < 2 || p->rotary.rotary_dim % 2 || p->rotary.rotary_dim > p->head_dim))
    return fa::fail(FA_ERR_INVALID, "fa_append_kv_cuda: rotary_dim must be even and 2..head_dim");
  if (p->total_new <= 0 || p->batch <= 0) return FA_OK;
  if (p->k == nullptr || p->v == nullptr) return fa::fail(FA_ERR_INVALID, "fa_append_kv_cuda: k and v are required");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const unsigned grid = blocks_for(static_cast<int64_t>(p->total_new) * p->heads_k);
  (void)cudaGetLastError();
  switch (p->dtype) {
    case FA_FLOAT16: append_kv_kernel<__half><<<grid, 256, 0, s>>>(*p); break;
    case FA_BFLOAT16: append_kv_kernel<__nv_bfloat16><<<grid, 256, 0, s>>>(*p); break;
    default: append_kv_kernel<float><<<grid, 256, 0, s>>>(*p); break;
  }
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? FA_OK : cuda_err(e, "appendKV launch");
}

namespace {
template <typename T>
fa_status merge_typed(const fa_merge_params* p, cudaStream_t s) {
  CombineArgs c{};
  c.batch = p->batch;
  c.seqlen = p->seqlen;
  c.heads = p->heads;
  c.head_dim = p->head_dim;
  c.in_head = c.out_head = p->head_dim;
  c.lse_out = p->lse;
  const int64_t rows = static_cast<int64_t>(p->batch) * p->seqlen * p->heads;
  if (p->num <= kMaxCombine) {
    c.num = p->num;
    for (int i = 0; i < p->num; ++i) c.o[i] = p->outs[i], c.lse[i] = p->lses[i];
    c.out = p->out;
    return launch_combine<T, T>(c, s);
  }
  // More partials than one launch takes: fold them into an fp32 running partial, kMaxCombine - 1
  // at a time, then a last launch into the output.
  float* acc = nullptr;
  cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&acc), (rows * p->head_dim + rows) * 4, s);
  if (e != cudaSuccess) return cuda_err(e, "cudaMallocAsync of the merge workspace");
  float* acc_lse = acc + rows * p->head_dim;
  fa_status st = FA_OK;
  int done = 0;
  bool have_acc = false;
  while (st == FA_OK && done < p->num) {
    CombineArgs k = c;
    int n = 0;
    k.f32_mask = 0;
    if (have_acc) {
      k.o[n] = acc, k.lse[n] = acc_lse, k.f32_mask |= 1u;
      ++n;
    }
    while (n < kMaxCombine && done < p->num) {
      k.o[n] = p->outs[done], k.lse[n] = p->lses[done];
      ++n, ++done;
    }
    k.num = n;
    if (done == p->num) {
      k.out = p->out;
      k.lse_out = p->lse;
      st = launch_combine<T, T>(k, s);
    } else {
      // Into the fp32 running partial. It is also an input of this launch: each (row, head) is read
      // and written by the same warp, the reads (all partials of a column group) before the write.
      k.out = acc;
      k.lse_out = acc_lse;
      st = launch_combine<T, float>(k, s);
      have_acc = true;
    }
  }
  cudaFreeAsync(acc, s);
  return st;
}
}  // namespace

extern "C" fa_status fa_merge_cuda(const fa_merge_params* p, void* stream) {
  if (p == nullptr || p->outs == nullptr || p->lses == nullptr || p->out == nullptr || p->lse == nullptr)
    return fa::fail(FA_ERR_INVALID, "fa_merge_cuda: outs, lses, out and lse are required");
  if (p->num < 1) return fa::fail(FA_ERR_INVALID, "fa_merge_cuda: num must be >= 1");
  if (p->head_dim % 4 != 0) return fa::fail(FA_ERR_UNSUPPORTED, "fa_merge_cuda: head_dim must be a multiple of 4");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p->dtype) {
    case FA_FLOAT16: return merge_typed<__half>(p, s);
    case FA_BFLOAT16: return merge_typed<__nv_bfloat16>(p, s);
    default: return merge_typed<float>(p, s);
  }
}
