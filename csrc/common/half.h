// Scalar fp32 <-> fp16 / bf16 conversion, bit exact and branch-light (the bodies are written as
// selects so that g++ -O3 can vectorise loops that call them).
//
//   fp32 -> fp16 / bf16: round to nearest, ties to even; overflow goes to +-inf; NaN stays NaN and
//                        comes out quiet (payload truncated, sign kept); fp16 subnormals exact.
//   fp16 / bf16 -> fp32: exact (every fp16 / bf16 value is a float); NaN comes out quiet.
//
// Usable from C++ and from CUDA host or device code (functions are __host__ __device__ under
// nvcc). Everything uses integer arithmetic plus one exact float operation per path, so the
// results do not depend on -ffast-math style reassociation flags.
#ifndef FA_COMMON_HALF_H
#define FA_COMMON_HALF_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define FA_HALF_FN __host__ __device__ inline
#else
#define FA_HALF_FN inline
#endif

namespace fa {

FA_HALF_FN uint32_t f32_as_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

FA_HALF_FN float bits_as_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

// fp32 -> IEEE binary16 bits.
FA_HALF_FN uint16_t f32_to_f16_bits(float x) {
  const uint32_t u = f32_as_bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;  // |x|
  // NaN: keep the top payload bits, force the quiet bit.
  const uint32_t nan_h = 0x7e00u | ((a >> 13) & 0x3ffu);
  // Normal range [2^-14, 65536): rebias the exponent (127 -> 15) and round the 13 dropped bits
  // to nearest even. A carry out of the mantissa bumps the exponent, which also turns
  // [65520, 65536) into inf as it should.
  const uint32_t norm_h = (a - 0x38000000u + 0x0fffu + ((a >> 13) & 1u)) >> 13;
  // Below 2^-14 (fp16 subnormals and zero): adding 0.5f puts the value's bits at the fp16
  // subnormal quantum (2^-24 = ulp(0.5f)) and the float adder rounds to nearest even for us.
  // The result lies in [0.5, 0.5 + 2^-14]; its low bits are the fp16 bits (0x400 = 2^-14).
  const uint32_t sub_h = f32_as_bits(bits_as_f32(a) + 0.5f) - 0x3f000000u;
  uint32_t h = a < 0x38800000u ? sub_h : norm_h;
  h = a >= 0x47800000u ? 0x7c00u : h;  // |x| >= 65536 (or inf): inf
  h = a > 0x7f800000u ? nan_h : h;
  return (uint16_t)(h | sign);
}

// IEEE binary16 bits -> fp32.
FA_HALF_FN float f16_bits_to_f32(uint16_t hbits) {
  const uint32_t h = hbits;
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t norm = (em << 13) + 0x38000000u;  // exponent 15 -> 127
  // inf / NaN: exponent all ones; a NaN gets the quiet bit.
  const uint32_t special = (em << 13) | 0x7f800000u | (em > 0x7c00u ? 0x00400000u : 0u);
  // subnormal (and zero): em * 2^-24 exactly.
  const uint32_t sub = f32_as_bits((float)(int32_t)em * 5.9604644775390625e-8f);
  uint32_t r = em < 0x0400u ? sub : norm;
  r = em >= 0x7c00u ? special : r;
  return bits_as_f32(r | sign);
}

// fp32 -> bfloat16 bits.
FA_HALF_FN uint16_t f32_to_bf16_bits(float x) {
  const uint32_t u = f32_as_bits(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // overflow rounds to inf
  const uint32_t nan_b = (u >> 16) | 0x0040u;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan_b : rounded);
}

// bfloat16 bits -> fp32.
FA_HALF_FN float bf16_bits_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  return bits_as_f32((u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) : u);
}

}  // namespace fa

#endif  // FA_COMMON_HALF_H
