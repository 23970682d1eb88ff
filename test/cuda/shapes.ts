// Size lists shared by the CUDA suites.
export const GPU_NS = [1, 2, 7, 8, 16, 31, 63, 64, 65, 127, 128, 129, 200, 255, 256, 257, 500, 1000];
export const GPU_BIG_NS = [500, 777, 1000, 1024, 1500];
/** Every head dim the CUDA kernels must take: multiples of 8 up to 256 (40, 80, 160 occur in real models). */
export const GPU_DS = [8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 96, 104, 112, 120, 128, 136, 160, 192, 200, 224, 248, 256];
