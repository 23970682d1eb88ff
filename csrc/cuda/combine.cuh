// Combine of attention partials over disjoint key sets by their lse (one small kernel): the
// kernel of mergeAttention (the decode kernel merges its split-KV partials itself: split_combine).
//   lse = log(sum_i exp(lse_i)),  out = sum_i exp(lse_i - lse) * out_i
// A partial whose lse is +inf or -inf saw no key and contributes nothing; a row no partial saw gets
// out = 0 and lse = +inf (the library's convention for "no key"); a NaN lse makes its row NaN (out and
// lse), as on the CPU backend.
// One warp per (row, head); lane p reduces partial p's lse, then lanes take 4 columns at a time.
// Up to kMaxCombine partials per launch (fa_merge_cuda chains launches for more, through an fp32
// partial).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "cuda/ptx.cuh"

namespace fa {
namespace cuda {

constexpr int kMaxCombine = 32;
static_assert(kMaxCombine <= 32, "combine_kernel: one lane per partial");

struct CombineArgs {
  // Partial i: out at o[i], lse at lse[i]. Bit i of f32_mask: partial i is float32 (else the
  // kernel's TI).
  const void* o[kMaxCombine];
  const float* lse[kMaxCombine];
  uint32_t f32_mask;
  int num;
  // Rows: [batch, seqlen, heads]; out_i row (b, i, h) at ((b * seqlen + i) * heads + h) * in_head,
  // lse_i at (b * heads + h) * seqlen + i. The output the same with out_head.
  int batch, seqlen, heads, head_dim, in_head, out_head;
  void* out;
  float* lse_out;
};

template <typename TO>
__device__ __forceinline__ void store4(TO* p, float4 v);
template <>
__device__ __forceinline__ void store4<float>(float* p, float4 v) {
  *reinterpret_cast<float4*>(p) = v;
}
template <>
__device__ __forceinline__ void store4<__half>(__half* p, float4 v) {
  __half2 a = __floats2half2_rn(v.x, v.y), b = __floats2half2_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<uint32_t*>(&a);
  u.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = u;
}
template <>
__device__ __forceinline__ void store4<__nv_bfloat16>(__nv_bfloat16* p, float4 v) {
  __nv_bfloat162 a = __floats2bfloat162_rn(v.x, v.y), b = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<uint32_t*>(&a);
  u.y = *reinterpret_cast<uint32_t*>(&b);
  *reinterpret_cast<uint2*>(p) = u;
}

template <typename TI>
__device__ __forceinline__ float4 load4(const void* p, bool f32) {
  if (f32 || sizeof(TI) == 4) return *reinterpret_cast<const float4*>(p);
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  if constexpr (std::is_same<TI, __half>::value) {
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
  } else {
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
  }
}

// TO: the output element type; partials are TI or float32 (f32_mask).
template <typename TI, typename TO>
__global__ void __launch_bounds__(256) combine_kernel(const CombineArgs c) {
  pdl_wait();  // launched with launch_pdl: the kernels that wrote the partials first
  pdl_launch_dependents();
  const int lane = threadIdx.x & 31;
  const int64_t rows = static_cast<int64_t>(c.batch) * c.seqlen * c.heads;
  const int64_t warp0 = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t row = warp0; row < rows; row += nwarps) {
    const int h = static_cast<int>(row % c.heads);
    const int64_t bi = row / c.heads;  // b * seqlen + i
    const int i = static_cast<int>(bi % c.seqlen);
    const int b = static_cast<int>(bi / c.seqlen);
    const int64_t lse_off = (static_cast<int64_t>(b) * c.heads + h) * c.seqlen + i;
    // Lane p holds partial p's lse and weight (c.num <= 32): the max and the sum are warp
    // reductions, not loops of dependent loads (a loop over 14 partials cost ~15 us at B 1 on the
    // H200, more than the decode kernel's reads).
    float l = -INFINITY;
    if (lane < c.num) {
      l = c.lse[lane][lse_off];
      if (l == INFINITY) l = -INFINITY;  // +inf: no keys (the library's convention)
    }
    float m = l;
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, x));
    // fmaxf skips a NaN: a NaN lse sets m to NaN, so that every weight, out and lse below are NaN
    if (__any_sync(0xffffffffu, isnan(l))) m = __int_as_float(0x7fffffff);
    float* const lse_dst = c.lse_out + lse_off;
    char* const o_dst = static_cast<char*>(c.out) + (bi * c.heads + h) * c.out_head * sizeof(TO);
    if (m == -INFINITY) {  // no partial saw a key
      for (int col = lane * 4; col < c.head_dim; col += 128)
        store4<TO>(reinterpret_cast<TO*>(o_dst) + col, make_float4(0.f, 0.f, 0.f, 0.f));
      if (lane == 0) *lse_dst = INFINITY;
      continue;
    }
    const float e = l > -INFINITY ? expf(l - m) : 0.f;
    float sum = e;
#pragma unroll
    for (int x = 16; x > 0; x >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, x);
    const float w_mine = e / sum;
    // Column groups of 128: every lane takes part in every step (the shuffles need the whole warp),
    // lanes past the head dim only load nothing and store nothing.
    for (int col0 = 0; col0 < c.head_dim; col0 += 128) {
      const int col = col0 + lane * 4;
      const bool on = col < c.head_dim;
      float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
      // Weights broadcast from their lanes; a partial of weight 0 is read but not added (its
      // output may be anything), so the loads of several partials are in flight together.
#pragma unroll 4
      for (int p = 0; p < c.num; ++p) {
        const float w = __shfl_sync(0xffffffffu, w_mine, p);
        const bool f32 = (c.f32_mask >> p) & 1u;
        const size_t es = f32 ? 4 : sizeof(TI);
        const char* base = static_cast<const char*>(c.o[p]);
        const float4 x = on ? load4<TI>(base + ((bi * c.heads + h) * c.in_head + col) * es, f32) : make_float4(0.f, 0.f, 0.f, 0.f);
        if (w != 0.f)
          acc.x = fmaf(w, x.x, acc.x), acc.y = fmaf(w, x.y, acc.y), acc.z = fmaf(w, x.z, acc.z), acc.w = fmaf(w, x.w, acc.w);
      }
      if (on) store4<TO>(reinterpret_cast<TO*>(o_dst) + col, acc);
    }
    __syncwarp();  // every lane is done reading the lse values (the output may be partial 0's)
    if (lane == 0) *lse_dst = m + logf(sum);
  }
}

}  // namespace cuda
}  // namespace fa
