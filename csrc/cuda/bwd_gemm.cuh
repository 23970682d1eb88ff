// Warp-level products on shared-memory tiles for the backward kernels, and the extra PTX wrappers
// they need (vector float reductions to global memory).
//
//   warp_gemm<Tr, MT, NT, KDIM, kATrans, kBTrans>(acc, A, a_pitch, B, b_pitch)
//     acc[MT][NT] (m16 x n8 C fragments) += A[16 MT x KDIM] * B[KDIM x 8 NT]
//   A is stored [m][k] (row-major, kATrans = false) or [k][m] (kATrans = true); B is stored [n][k]
//   (kBTrans = false: each n's k values contiguous, like K in S = Q K^T) or [k][n] (kBTrans = true,
//   like V in O = P V). A and B point at the warp tile's origin; pitches are in bytes.
//
// fp16/bf16: ldmatrix.x4 (plain for [m][k] / [n][k], .trans for the transposed layouts) and
// mma.sync m16n8k16. The lane -> row address map of an x4 load is one of two patterns
// (PTX ISA, ldmatrix: lanes 8i..8i+7 address the rows of matrix i, register i receives it):
//   pattern A: row = (lane & 7) + ((lane >> 3) & 1) * 8, column = (lane >> 4) * 8
//   pattern B: row = (lane & 7) + (lane >> 4) * 8,       column = ((lane >> 3) & 1) * 8
// A [m][k] plain and B [k][n] .trans use pattern A; A [k][m] .trans and B [n][k] plain pattern B.
// With them the four registers are exactly a0..a3 of one m16 x k16 A fragment, or b0, b1 of two
// adjacent n8 tiles of B (see ptx.cuh for the fragment layouts).
//
// fp32: 3xTF32 on mma.sync m16n8k8 (x = hi + lo, a*b ~ a_lo*b_hi + a_hi*b_lo + a_hi*b_hi) from
// scalar shared-memory reads. The tensor cores truncate their fp32 accumulator, so every k-step goes
// to a fresh accumulator that is folded in with a round-to-nearest FADD (see warp_gemm_32).
#pragma once
#include "cuda/ptx.cuh"

namespace fa {
namespace cuda {

// Two / four consecutive floats added to global memory (sm_90: one vector reduction; older
// architectures: scalar reductions). `p` must be 8- / 16-byte aligned.
__device__ __forceinline__ void red_add_f32x2(float* p, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(x), "f"(y) : "memory");
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
#endif
}
__device__ __forceinline__ void red_add_f32x4(float* p, float x, float y, float z, float w) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "f"(x), "f"(y), "f"(z), "f"(w)
               : "memory");
#else
  atomicAdd(p, x);
  atomicAdd(p + 1, y);
  atomicAdd(p + 2, z);
  atomicAdd(p + 3, w);
#endif
}

template <int kPitchBytes, bool kPatternB>
__device__ __forceinline__ uint32_t ldsm_lane_offset(int lane) {
  return kPatternB ? ((lane & 7) + (lane >> 4) * 8) * kPitchBytes + ((lane >> 3) & 1) * 16
                   : ((lane & 7) + ((lane >> 3) & 1) * 8) * kPitchBytes + (lane >> 4) * 16;
}

// ---- fp16 / bf16 ---------------------------------------------------------------------------------
template <typename T, int MT, int NT, int KDIM, bool kATrans, bool kBTrans, int kAPitch, int kBPitch>
__device__ __forceinline__ void warp_gemm_16(float (&acc)[MT][NT][4], const unsigned char* A,
                                             const unsigned char* B, int lane) {
  static_assert(NT % 2 == 0 && KDIM % 16 == 0, "pairs of n8 tiles, k16 steps");
  const uint32_t a0 = smem_u32(A) + ldsm_lane_offset<kAPitch, kATrans>(lane);
  const uint32_t b0 = smem_u32(B) + ldsm_lane_offset<kBPitch, !kBTrans>(lane);
#pragma unroll
  for (int ks = 0; ks < KDIM / 16; ++ks) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      if constexpr (kATrans)
        ldmatrix_x4_trans(af[mt], a0 + ks * 16 * kAPitch + mt * 32);
      else
        ldmatrix_x4(af[mt], a0 + mt * 16 * kAPitch + ks * 32);
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      if constexpr (kBTrans)
        ldmatrix_x4_trans(bf, b0 + ks * 16 * kBPitch + np * 32);
      else
        ldmatrix_x4(bf, b0 + np * 16 * kBPitch + ks * 32);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816<T>(acc[mt][2 * np], af[mt], bf[0], bf[1]);
        mma_16816<T>(acc[mt][2 * np + 1], af[mt], bf[2], bf[3]);
      }
    }
  }
}

// ---- fp32 (3xTF32) -------------------------------------------------------------------------------
// Every k8 step of every (mt, nt) tile goes to a fresh 4-register accumulator (its three mma adds
// are the only truncating ones) folded into acc with a round-to-nearest FADD: the truncation bias
// stays at the size of one k8 partial sum instead of growing with the reduction length (32-column
// chunks gave relative L2 errors of 1.4e-5 on P at D 256 with scale 2/sqrt(D)).
template <int MT, int NT, int KDIM, bool kATrans, bool kBTrans, int kAPitch, int kBPitch>
__device__ __forceinline__ void warp_gemm_32(float (&acc)[MT][NT][4], const unsigned char* A,
                                             const unsigned char* B, int lane) {
  static_assert(KDIM % 8 == 0, "k8 steps");
  constexpr int AP = kAPitch / 4, BP = kBPitch / 4;  // pitches in floats
  const int g = lane >> 2, t = lane & 3;
  const float* a = reinterpret_cast<const float*>(A);
  const float* b = reinterpret_cast<const float*>(B);
  // This lane's first element of each fragment register.
  const float* al = kATrans ? a + t * AP + g : a + g * AP + t;
  const float* bl = kBTrans ? b + t * BP + g : b + g * BP + t;
  // Partly unrolled: fully unrolled, ptxas hoists the scalar loads of many k-steps and spills.
#pragma unroll 2
  for (int ks = 0; ks < KDIM / 8; ++ks) {
    uint32_t ah[MT][4], alo[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float x0, x1, x2, x3;  // (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)
      if constexpr (kATrans) {
        const float* p = al + ks * 8 * AP + mt * 16;
        x0 = p[0], x1 = p[8], x2 = p[4 * AP], x3 = p[4 * AP + 8];
      } else {
        const float* p = al + mt * 16 * AP + ks * 8;
        x0 = p[0], x1 = p[8 * AP], x2 = p[4], x3 = p[8 * AP + 4];
      }
      split_tf32(x0, ah[mt][0], alo[mt][0]);
      split_tf32(x1, ah[mt][1], alo[mt][1]);
      split_tf32(x2, ah[mt][2], alo[mt][2]);
      split_tf32(x3, ah[mt][3], alo[mt][3]);
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float y0, y1;  // (k t, n g), (k t + 4, n g)
      if constexpr (kBTrans) {
        const float* p = bl + ks * 8 * BP + nt * 8;
        y0 = p[0], y1 = p[4 * BP];
      } else {
        const float* p = bl + nt * 8 * BP + ks * 8;
        y0 = p[0], y1 = p[4];
      }
      uint32_t bh0, bl0, bh1, bl1;
      split_tf32(y0, bh0, bl0);
      split_tf32(y1, bh1, bl1);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        float tmp[4] = {0.f, 0.f, 0.f, 0.f};
        mma_1688_tf32(tmp, alo[mt], bh0, bh1);
        mma_1688_tf32(tmp, ah[mt], bl0, bl1);
        mma_1688_tf32(tmp, ah[mt], bh0, bh1);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = __fadd_rn(acc[mt][nt][e], tmp[e]);
      }
    }
  }
}

// Two independent products of the same shape and layouts (S and dP; dV and dK) in one k loop, so
// that the two mma streams interleave (fp16/bf16; fp32 runs them one after the other).
template <typename T, int MT, int NT, int KDIM, bool kATrans, bool kBTrans, int kAPitch, int kBPitch>
__device__ __forceinline__ void warp_gemm_pair_16(float (&acc1)[MT][NT][4], const unsigned char* A1,
                                                  const unsigned char* B1, float (&acc2)[MT][NT][4],
                                                  const unsigned char* A2, const unsigned char* B2, int lane) {
  static_assert(NT % 2 == 0 && KDIM % 16 == 0, "pairs of n8 tiles, k16 steps");
  const uint32_t la = ldsm_lane_offset<kAPitch, kATrans>(lane);
  const uint32_t lb = ldsm_lane_offset<kBPitch, !kBTrans>(lane);
  const uint32_t a1 = smem_u32(A1) + la, a2 = smem_u32(A2) + la;
  const uint32_t b1 = smem_u32(B1) + lb, b2 = smem_u32(B2) + lb;
#pragma unroll
  for (int ks = 0; ks < KDIM / 16; ++ks) {
    uint32_t af1[MT][4], af2[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      const uint32_t off = kATrans ? ks * 16 * kAPitch + mt * 32 : mt * 16 * kAPitch + ks * 32;
      if constexpr (kATrans) {
        ldmatrix_x4_trans(af1[mt], a1 + off);
        ldmatrix_x4_trans(af2[mt], a2 + off);
      } else {
        ldmatrix_x4(af1[mt], a1 + off);
        ldmatrix_x4(af2[mt], a2 + off);
      }
    }
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      const uint32_t off = kBTrans ? ks * 16 * kBPitch + np * 32 : np * 16 * kBPitch + ks * 32;
      uint32_t bf1[4], bf2[4];
      if constexpr (kBTrans) {
        ldmatrix_x4_trans(bf1, b1 + off);
        ldmatrix_x4_trans(bf2, b2 + off);
      } else {
        ldmatrix_x4(bf1, b1 + off);
        ldmatrix_x4(bf2, b2 + off);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_16816<T>(acc1[mt][2 * np], af1[mt], bf1[0], bf1[1]);
        mma_16816<T>(acc2[mt][2 * np], af2[mt], bf2[0], bf2[1]);
        mma_16816<T>(acc1[mt][2 * np + 1], af1[mt], bf1[2], bf1[3]);
        mma_16816<T>(acc2[mt][2 * np + 1], af2[mt], bf2[2], bf2[3]);
      }
    }
  }
}

template <class Tr, int MT, int NT, int KDIM, bool kATrans, bool kBTrans, int kAPitch, int kBPitch>
__device__ __forceinline__ void warp_gemm(float (&acc)[MT][NT][4], const unsigned char* A, const unsigned char* B,
                                          int lane) {
  if constexpr (Tr::kIsFp32)
    warp_gemm_32<MT, NT, KDIM, kATrans, kBTrans, kAPitch, kBPitch>(acc, A, B, lane);
  else
    warp_gemm_16<typename Tr::T, MT, NT, KDIM, kATrans, kBTrans, kAPitch, kBPitch>(acc, A, B, lane);
}

// acc1 += A1 B1 and acc2 += A2 B2; interleaved when Tr::kFuse (fp16/bf16).
template <class Tr, int MT, int NT, int KDIM, bool kATrans, bool kBTrans, int kAPitch, int kBPitch>
__device__ __forceinline__ void warp_gemm2(float (&acc1)[MT][NT][4], const unsigned char* A1, const unsigned char* B1,
                                          float (&acc2)[MT][NT][4], const unsigned char* A2, const unsigned char* B2,
                                          int lane) {
  if constexpr (!Tr::kIsFp32 && Tr::kFuse) {
    warp_gemm_pair_16<typename Tr::T, MT, NT, KDIM, kATrans, kBTrans, kAPitch, kBPitch>(acc1, A1, B1, acc2, A2, B2,
                                                                                        lane);
  } else {
    warp_gemm<Tr, MT, NT, KDIM, kATrans, kBTrans, kAPitch, kBPitch>(acc1, A1, B1, lane);
    warp_gemm<Tr, MT, NT, KDIM, kATrans, kBTrans, kAPitch, kBPitch>(acc2, A2, B2, lane);
  }
}

template <int MT, int NT>
__device__ __forceinline__ void zero_acc(float (&acc)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.f;
}

// Stores the pair (x, y) of a C fragment (two adjacent columns) to shared memory as T.
template <typename T>
__device__ __forceinline__ void store_pair(unsigned char* p, float x, float y) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float2*>(p) = make_float2(x, y);
  } else {
    *reinterpret_cast<uint32_t*>(p) = pack2<T>(x, y);
  }
}

}  // namespace cuda
}  // namespace fa
