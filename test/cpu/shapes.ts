// Size lists shared by the CPU suites (kept small: the float64 reference runs in JS on 2 cores).
export const CPU_NS = [1, 2, 3, 5, 7, 8, 13, 16, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129];
export const CPU_BIG_NS = [127, 129, 200, 255, 257, 300, 383, 513];
export const CPU_DS = [1, 2, 3, 4, 7, 8, 15, 16, 17, 24, 31, 32, 40, 48, 63, 64, 65, 80, 96, 100, 127, 128, 129, 160, 192, 200, 255, 256];
