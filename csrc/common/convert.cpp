// fa_convert_from_f32 / fa_convert_to_f32: bulk element conversion.
//
// The portable loops call the scalar helpers of half.h (written as selects, so they vectorise).
// On x86-64 with GCC or Clang, fp16 additionally has an F16C path chosen at run time; F16C
// rounds to nearest even, keeps NaN quiet and handles subnormals exactly like half.h (the
// cpu_check tool compares both bit for bit over every fp16 value).
#include <string.h>

#include "common/half.h"
#include "fa_core.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define FA_CONVERT_F16C 1
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace {

void f32_to_f16_portable(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fa::f32_to_f16_bits(src[i]);
}
void f16_to_f32_portable(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fa::f16_bits_to_f32(src[i]);
}
void f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fa::f32_to_bf16_bits(src[i]);
}
void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = fa::bf16_bits_to_f32(src[i]);
}

#if FA_CONVERT_F16C
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = fa::f32_to_f16_bits(src[i]);
}
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = fa::f16_bits_to_f32(src[i]);
}
bool have_f16c() {
  static const bool ok = [] {
    __builtin_cpu_init();
    unsigned a = 0, b = 0, c = 0, d = 0;
    // "avx" also checks that the OS saves YMM state; F16C is CPUID.1:ECX bit 29.
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1u);
  }();
  return ok;
}
#endif

}  // namespace

extern "C" void fa_convert_from_f32(const float* src, void* dst, size_t n, fa_dtype dst_dtype) {
  if (n == 0 || src == nullptr || dst == nullptr) return;
  switch (dst_dtype) {
    case FA_FLOAT32:
      if (static_cast<const void*>(src) != dst) memmove(dst, src, n * sizeof(float));
      return;
    case FA_FLOAT16:
#if FA_CONVERT_F16C
      if (have_f16c()) return f32_to_f16_f16c(src, static_cast<uint16_t*>(dst), n);
#endif
      return f32_to_f16_portable(src, static_cast<uint16_t*>(dst), n);
    case FA_BFLOAT16:
      return f32_to_bf16(src, static_cast<uint16_t*>(dst), n);
  }
}

extern "C" void fa_convert_to_f32(const void* src, float* dst, size_t n, fa_dtype src_dtype) {
  if (n == 0 || src == nullptr || dst == nullptr) return;
  switch (src_dtype) {
    case FA_FLOAT32:
      if (src != static_cast<const void*>(dst)) memmove(dst, src, n * sizeof(float));
      return;
    case FA_FLOAT16:
#if FA_CONVERT_F16C
      if (have_f16c()) return f16_to_f32_f16c(static_cast<const uint16_t*>(src), dst, n);
#endif
      return f16_to_f32_portable(static_cast<const uint16_t*>(src), dst, n);
    case FA_BFLOAT16:
      return bf16_to_f32(static_cast<const uint16_t*>(src), dst, n);
  }
}

// Internal (not in fa_core.h): the portable loops, so that cpu_check can compare them against the
// F16C path bit for bit.
extern "C" void fa_internal_convert_portable(const void* src, void* dst, size_t n, fa_dtype dtype,
                                             int to_f32) {
  if (dtype == FA_FLOAT16) {
    if (to_f32) f16_to_f32_portable(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
    else f32_to_f16_portable(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (dtype == FA_BFLOAT16) {
    if (to_f32) bf16_to_f32(static_cast<const uint16_t*>(src), static_cast<float*>(dst), n);
    else f32_to_bf16(static_cast<const float*>(src), static_cast<uint16_t*>(dst), n);
  } else if (n) {
    memmove(dst, src, n * sizeof(float));
  }
}
