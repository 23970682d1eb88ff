// What one kernel launch costs the host thread that issues it, by kernel-parameter size, with and
// without programmatic dependent launch, for empty kernels of the decode / forward launch shapes
// (NOTES-inference.md, fifty-second session). Development probe, not part of the build:
//   nvcc -O2 -std=c++17 -arch=sm_90a -cudart static scripts/launch-cost.cu -o /tmp/launch-cost
// then run the binary on the GPU host. Each figure: host microseconds per cudaLaunchKernelEx over
// rounds of 64 launches into one stream (the GPU keeps up, so the queue never fills), median of 50.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <algorithm>
template <int N> struct P { int v[N / 4]; };
template <int N> __global__ void k(const __grid_constant__ P<N> p) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#endif
  if (p.v[0] == 12345 && threadIdx.x == 999) printf("x");
}
template <int N> double run(cudaStream_t s, bool pdl, int smem, int blocks, int threads) {
  P<N> p{}; p.v[0] = 1;
  cudaFuncSetAttribute(k<N>, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
  cudaLaunchConfig_t cfg{}; cfg.gridDim = dim3(blocks); cfg.blockDim = dim3(threads); cfg.dynamicSmemBytes = smem; cfg.stream = s;
  cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at; cfg.numAttrs = pdl ? 1 : 0;
  std::vector<double> per;
  for (int r = 0; r < 60; ++r) {
    cudaStreamSynchronize(s);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 64; ++i) cudaLaunchKernelEx(&cfg, k<N>, p);
    auto t1 = std::chrono::steady_clock::now();
    per.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / 64);
  }
  cudaStreamSynchronize(s);
  std::sort(per.begin() + 10, per.end());
  return per[10 + 25];
}
int main() {
  cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaFree(0);
  for (int pass = 0; pass < 2; ++pass)
  for (int pdl = 0; pdl < 2; ++pdl)
    for (int cfgi = 0; cfgi < 3; ++cfgi) {
      int smem = cfgi == 0 ? 0 : 100 * 1024, blocks = cfgi == 2 ? 264 : 132, threads = cfgi == 2 ? 256 : 384;
      printf("pass %d pdl %d smem %6d grid %d x %d: 16B %.2f  256B %.2f  640B %.2f  1024B %.2f  4096B %.2f us/launch\n", pass, pdl, smem, blocks, threads,
        run<16>(s, pdl, smem, blocks, threads), run<256>(s, pdl, smem, blocks, threads), run<640>(s, pdl, smem, blocks, threads), run<1024>(s, pdl, smem, blocks, threads), run<4096>(s, pdl, smem, blocks, threads));
    }
  // plain <<<>>> for reference
  {
    P<640> p{};
    std::vector<double> per;
    for (int r = 0; r < 60; ++r) { cudaStreamSynchronize(s); auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 64; ++i) k<640><<<132, 384, 0, s>>>(p);
      per.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 64); }
    cudaStreamSynchronize(s); std::sort(per.begin()+10, per.end()); printf("<<<>>> 640B %.2f us/launch\n", per[35]);
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
