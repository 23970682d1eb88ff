// Host and device helpers shared by the CUDA check harnesses (fwd_check.cu, bwd_check.cu): error
// macro, seeded RNG, element conversions, strided host tensors with poisoned gaps, device buffers,
// a GPU random fill for timing inputs. Header-only, one translation unit per tool.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "fa_core.h"

#define CK(x)                                                                                               \
  do {                                                                                                      \
    cudaError_t e_ = (x);                                                                                   \
    if (e_ != cudaSuccess) {                                                                                \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
      exit(2);                                                                                              \
    }                                                                                                       \
  } while (0)

namespace {

// splitmix64; kSalt keeps the two harnesses' streams apart.
template <uint64_t kSalt>
struct RngT {
  uint64_t s;
  explicit RngT(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + kSalt) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double normal() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  int pick(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
};

int elem_size(fa_dtype t) { return t == FA_FLOAT32 ? 4 : 2; }
const char* dname(fa_dtype t) { return t == FA_FLOAT32 ? "fp32" : t == FA_FLOAT16 ? "fp16" : "bf16"; }

float round_to(fa_dtype t, float x) {
  if (t == FA_FLOAT16) return __half2float(__float2half_rn(x));
  if (t == FA_BFLOAT16) return __bfloat162float(__float2bfloat16_rn(x));
  return x;
}
void store_elem(fa_dtype t, void* base, size_t i, float x) {
  if (t == FA_FLOAT32) {
    static_cast<float*>(base)[i] = x;
  } else if (t == FA_FLOAT16) {
    __half h = __float2half_rn(x);
    memcpy(static_cast<char*>(base) + 2 * i, &h, 2);
  } else {
    __nv_bfloat16 h = __float2bfloat16_rn(x);
    memcpy(static_cast<char*>(base) + 2 * i, &h, 2);
  }
}
float load_elem(fa_dtype t, const void* base, size_t i) {
  if (t == FA_FLOAT32) return static_cast<const float*>(base)[i];
  uint16_t bits;
  memcpy(&bits, static_cast<const char*>(base) + 2 * i, 2);
  if (t == FA_FLOAT16) {
    __half h;
    memcpy(&h, &bits, 2);
    return __half2float(h);
  }
  __nv_bfloat16 h;
  memcpy(&h, &bits, 2);
  return __bfloat162float(h);
}
bool is_poison(fa_dtype t, const void* base, size_t i) {
  const unsigned char* p = static_cast<const unsigned char*>(base) + elem_size(t) * i;
  for (int k = 0; k < elem_size(t); ++k)
    if (p[k] != 0xFF) return false;
  return true;
}

void parallel_for(int n, const std::function<void(int)>& f) {
  const int nt = std::max(1, std::min<int>(n, static_cast<int>(std::thread::hardware_concurrency())));
  std::atomic<int> next{0};
  std::vector<std::thread> th;
  for (int t = 0; t < nt; ++t)
    th.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) f(i);
    });
  for (auto& x : th) x.join();
}

enum Layout { BSHD = 0, BHSD = 1, GAPPED = 2 };
const char* lname(int l) { return l == BSHD ? "bshd" : l == BHSD ? "bhsd" : "gapped"; }

// Strides of a [B, N, H, D] tensor in the given layout; GAPPED pads each head to D + 8 and each
// batch by 8 more elements so that the gaps can be checked for stray writes.
fa_strides make_strides(int layout, int N, int H, int D) {
  if (layout == BSHD) return fa_strides_bshd(N, H, D);
  if (layout == BHSD) return fa_strides_bhsd(N, H, D);
  fa_strides s;
  s.head = D + 8;
  s.row = static_cast<int64_t>(H) * (D + 8);
  s.batch = s.row * N + 8;
  return s;
}
size_t span(const fa_strides& s, int B, int N, int H, int D) {
  if (B == 0 || N == 0 || H == 0) return 8;
  return (B - 1) * s.batch + (N - 1) * s.row + (H - 1) * s.head + D + 8;
}

// A [B, N, H, D] tensor in one layout: raw bytes (gaps 0xFF) and the dense values the GPU sees.
struct HostTensor {
  fa_dtype dtype;
  fa_strides str;
  int B, N, H, D;
  std::vector<unsigned char> data;
  std::vector<float> val;  // dense [B, N, H, D] values as the GPU sees them (rounded)
  void init(fa_dtype t, int layout, int b, int n, int h, int d) {
    dtype = t, B = b, N = n, H = h, D = d;
    str = make_strides(layout, n, h, d);
    data.assign(span(str, b, n, h, d) * elem_size(t), 0xFF);
    val.assign(static_cast<size_t>(b) * n * h * d, 0.f);
  }
  size_t off(int b, int n, int h) const { return b * str.batch + n * str.row + h * str.head; }
  size_t dense(int b, int n, int h) const { return ((static_cast<size_t>(b) * N + n) * H + h) * D; }
  template <class R>
  void fill_random(R& rng) {
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < N; ++n)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            const float x = round_to(dtype, static_cast<float>(rng.normal()));
            store_elem(dtype, data.data(), off(b, n, h) + d, x);
            val[dense(b, n, h) + d] = x;
          }
  }
  // Values from a device copy of `data` (same layout).
  void read_values(const std::vector<unsigned char>& raw) {
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < N; ++n)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) val[dense(b, n, h) + d] = load_elem(dtype, raw.data(), off(b, n, h) + d);
  }
};

struct DevBuf {
  void* p = nullptr;
  size_t n = 0;
  void alloc(size_t bytes) {
    n = bytes;
    CK(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  }
  DevBuf() = default;
  DevBuf(const DevBuf&) = delete;
  ~DevBuf() {
    if (p) cudaFree(p);
  }
};

// Error-path checks: prints one line per expected status and counts the mismatches.
struct StatusExpect {
  int bad = 0;
  void operator()(const char* what, fa_status got, fa_status want) {
    const bool ok = got == want;
    printf("  %-58s %s (%s%s%s)\n", what, ok ? "ok" : "FAIL", fa_status_name(got), got ? ": " : "",
           got ? fa_last_error() : "");
    if (!ok) ++bad;
  }
  void check(const char* what, bool ok) {
    printf("  %-58s %s\n", what, ok ? "ok" : "FAIL");
    if (!ok) ++bad;
  }
};

// The forward params of a test case (q/o strides from Nq, k/v from Nk; C has dtype, B, H, Hkv, Nq,
// Nk, D, causal, layout, scale).
template <class C>
fa_fwd_params make_fwd_params(const C& c) {
  fa_fwd_params p;
  memset(&p, 0, sizeof(p));
  p.q_str = make_strides(c.layout, c.Nq, c.H, c.D);
  p.k_str = make_strides(c.layout, c.Nk, c.Hkv, c.D);
  p.v_str = p.k_str;
  p.o_str = p.q_str;
  p.batch = c.B, p.seqlen_q = c.Nq, p.seqlen_k = c.Nk, p.heads = c.H, p.heads_k = c.Hkv, p.head_dim = c.D;
  p.scale = c.scale;
  p.causal = c.causal;
  p.dtype = c.dtype;
  return p;
}

// Random normal fill on the GPU (hash + Box-Muller) for the large timing inputs.
__global__ void fill_normal_kernel(void* dst, size_t n, int dtype, uint64_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint64_t z = (seed << 40) + i + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u1 = ((z >> 40) + 0.5f) * (1.f / 16777216.f);
    const float u2 = ((z & 0xFFFFFF) + 0.5f) * (1.f / 16777216.f);
    const float x = sqrtf(-2.f * logf(u1)) * cospif(2.f * u2);
    if (dtype == FA_FLOAT32) static_cast<float*>(dst)[i] = x;
    else if (dtype == FA_FLOAT16) static_cast<__half*>(dst)[i] = __float2half_rn(x);
    else static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(x);
  }
}

// The random part of a check case: head dim 8 * (1 + (i / 3) % 32), lengths from `lens` (Nk = Nq one
// time in four), causal or not, any layout, B 1-3, H from {1, 2, 3, 4, 6, 8} with MHA / MQA / GQA,
// scale 1/sqrt(D) (or -0.5/sqrt(D), 2/sqrt(D) one time in twenty each).
template <class C, class R>
void random_shape(C& c, R& rng, int i, const int* lens, int n_lens) {
  c.D = 8 * (1 + (i / 3) % 32);
  c.Nq = lens[rng.pick(n_lens)];
  c.Nk = rng.pick(4) == 0 ? c.Nq : lens[rng.pick(n_lens)];
  c.causal = rng.pick(2);
  c.layout = rng.pick(3);
  c.B = 1 + rng.pick(3);
  const int hs[] = {1, 2, 3, 4, 6, 8};
  c.H = hs[rng.pick(6)];
  const int kind = rng.pick(3);
  if (kind == 0) {
    c.Hkv = c.H;
  } else if (kind == 1) {
    c.Hkv = 1;
  } else {
    std::vector<int> divs;
    for (int d = 1; d <= c.H; ++d)
      if (c.H % d == 0) divs.push_back(d);
    c.Hkv = divs[rng.pick(static_cast<int>(divs.size()))];
  }
  const int sc = rng.pick(20);
  c.scale = (sc == 0 ? -0.5f : sc == 1 ? 2.f : 1.f) / std::sqrt(static_cast<float>(c.D));
}

// Shrinks a case (batch, then heads keeping a valid GQA ratio, then the longer sequence) until
// B * H * Nq * Nk * D <= limit, so that the float64 CPU reference stays cheap.
template <class C>
void shrink_case(C& c, double limit) {
  while (static_cast<double>(c.B) * c.H * c.Nq * std::max(c.Nk, 1) * c.D > limit) {
    if (c.B > 1) {
      --c.B;
    } else if (c.H > 1) {
      c.H = c.H / 2 > 0 ? c.H / 2 : 1;
      c.Hkv = std::max(1, std::min(c.Hkv, c.H));
      while (c.H % c.Hkv) --c.Hkv;
    } else if (c.Nq > c.Nk) {
      c.Nq = (c.Nq + 1) / 2;
    } else {
      c.Nk = (c.Nk + 1) / 2;
    }
  }
}

}  // namespace
