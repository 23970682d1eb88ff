// Unit check of the Hopper building blocks of the sm_90 forward kernel (csrc/cuda/wgmma.cuh and the
// swizzled tile loader in fwd_kernel_sm90.cuh), one warpgroup, against a host fp64 product:
//   1. C = A B^T with A (64 x 128) and B (128 x 128) both K-major in swizzled shared memory (S = Q K^T)
//   2. C = A V with A (64 x 128) in registers (mma.sync A-fragment layout) and V (128 keys x 128)
//      read MN-major through the transpose bit (O = P V); also with the descriptor's two byte
//      offsets swapped, to show which reading of the layout the hardware follows.
//   3. C = A B with both read MN-major (the backward's dQ = dS K with dS stored transposed): A^T and
//      B are the two 64-column blocks of the 128 x 128 tile.
// Exit status 0 when the layouts the kernel uses are right. Needs an sm_90 GPU and an sm_90a build.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <vector>

#include "cuda/fwd_kernel_sm90.cuh"

using namespace fa::cuda;

namespace {

constexpr int M = 64, N = 128, K = 128;

// mode 0: SS product; mode 1: RS with LBO = MN-block stride, SBO = 8-row stride (the kernel's);
// mode 2: RS with the two swapped; mode 3: SS, both operands MN-major (64 x 64 result).
__global__ void __launch_bounds__(128) probe(const __half* a, const __half* b, float* c, int mode) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t sA = base, sB = base + M * K * 2;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
  const SwizzledTileLoader<M, 2, 128> la(tid);
  const SwizzledTileLoader<N, 2, 128> lb(tid);
  la.load(sA, reinterpret_cast<const char*>(a), K * 2, M, 16);
  lb.load(sB, reinterpret_cast<const char*>(b), K * 2, N, 16);
  cp_async_commit();
  cp_async_wait<0>();
  sm90::fence_proxy_async_smem();
  __syncthreads();
  float d[64];
  for (int i = 0; i < 64; ++i) d[i] = 0.f;
  sm90::wgmma_fence();
  if (mode == 0) {
    for (int ks = 0; ks < K / 16; ++ks) {
      const uint32_t off = (ks / 4) * M * 128 + (ks % 4) * 32, offb = (ks / 4) * N * 128 + (ks % 4) * 32;
      sm90::Wgmma<__half, 128>::ss(d, sm90::smem_desc(sA + off, 16, 1024), sm90::smem_desc(sB + offb, 16, 1024),
                                        1);
    }
  } else if (mode == 3) {
    for (int kk = 0; kk < K / 16; ++kk)
      sm90::Wgmma<__half, 64>::ss<1, 1>(d, sm90::smem_desc(sB + kk * 2048, N * 128, 1024),
                                        sm90::smem_desc(sB + N * 128 + kk * 2048, N * 128, 1024), 1);
  } else {
    // A fragments straight from global memory (row-major 64 x 128): warp rows 16w + g (+8).
    const uint16_t* a16 = reinterpret_cast<const uint16_t*>(a);
    for (int kk = 0; kk < K / 16; ++kk) {
      uint32_t fr[4];
      const int r = warp * 16 + g, col = kk * 16 + 2 * t;
      auto pair = [&](int rr, int cc) { return a16[rr * K + cc] | (static_cast<uint32_t>(a16[rr * K + cc + 1]) << 16); };
      fr[0] = pair(r, col);
      fr[1] = pair(r + 8, col);
      fr[2] = pair(r, col + 8);
      fr[3] = pair(r + 8, col + 8);
      const uint32_t lbo = mode == 1 ? N * 128 : 1024, sbo = mode == 1 ? 1024 : N * 128;
      sm90::Wgmma<__half, 128>::rs(d, fr, sm90::smem_desc(sB + kk * 2048, lbo, sbo), 1);
    }
  }
  sm90::wgmma_commit();
  sm90::wgmma_wait<0>();
  sm90::reg_fence<64>(d);
  for (int j = 0; j < (mode == 3 ? 8 : 16); ++j)
    for (int e = 0; e < 4; ++e) {
      const int r = warp * 16 + g + 8 * (e >> 1), col = 8 * j + 2 * t + (e & 1);
      c[r * N + col] = d[4 * j + e];
    }
#else
  (void)a, (void)b, (void)c, (void)mode;
  __trap();
#endif
}

}  // namespace

int main() {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      major != 9) {
    printf("sm90_check: SKIPPED (needs a compute capability 9.0 GPU)\n");
    return 0;
  }
  std::vector<__half> ha(M * K), hb(N * K);
  std::vector<double> fa(M * K), fb(N * K);
  srand(1);
  for (int i = 0; i < M * K; ++i) ha[i] = __float2half((rand() % 17 - 8) / 8.f), fa[i] = __half2float(ha[i]);
  for (int i = 0; i < N * K; ++i) hb[i] = __float2half((rand() % 17 - 8) / 8.f), fb[i] = __half2float(hb[i]);
  __half *da, *db;
  float* dc;
  cudaMalloc(&da, M * K * 2);
  cudaMalloc(&db, N * K * 2);
  cudaMalloc(&dc, M * N * 4);
  cudaMemcpy(da, ha.data(), M * K * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, hb.data(), N * K * 2, cudaMemcpyHostToDevice);
  const int smem = (M + N) * K * 2 + 1024;
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  const char* names[4] = {"SS  A B^T (K-major both)", "RS  A V (V MN-major, LBO = 64-col block stride)",
                          "RS  A V (offsets swapped)", "SS  A B (both MN-major, 64 x 64)"};
  bool ok = true;
  for (int mode = 0; mode < 4; ++mode) {
    cudaMemset(dc, 0, M * N * 4);
    probe<<<1, 128, smem>>>(da, db, dc, mode);
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      printf("%s: CUDA error %s\n", names[mode], cudaGetErrorName(err));
      return 2;
    }
    std::vector<float> hc(M * N);
    cudaMemcpy(hc.data(), dc, M * N * 4, cudaMemcpyDeviceToHost);
    double worst = 0;
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double ref = 0;
        if (mode == 3 && j >= 64) continue;
        for (int k = 0; k < K; ++k)
          ref += mode == 0   ? fa[i * K + k] * fb[j * K + k]
                 : mode == 3 ? fb[k * N + i] * fb[k * N + 64 + j]
                             : fa[i * K + k] * fb[k * N + j];
        worst = fmax(worst, fabs(ref - hc[i * N + j]));
      }
    const bool pass = worst < 1e-3;
    printf("%-52s max |err| %.3g  %s\n", names[mode], worst, pass ? "ok" : "WRONG");
    if (mode != 2) ok = ok && pass;
  }
  printf(ok ? "sm90_check: ALL PASSED\n" : "sm90_check: FAILED\n");
  return ok ? 0 : 1;
}
