// fwd_check: correctness and speed of fa_fwd_cuda on one GPU, without Node.js.
//
//   fwd_check                 random-shape correctness (>= 300 cases), error paths, then timing
//   fwd_check --small         a few small shapes only (for compute-sanitizer memcheck / racecheck)
//   fwd_check --check-only | --bench-only | --cases N | --seed S | --reps N | --width W
//   (built with -DFA_TUNE: also times the tile variants listed in tune_variants())
//
// Correctness: inputs are random normal (fresh per case, fixed seeds), outputs poisoned with NaN
// first. The reference is a naive float64 CPU attention on the same (rounded) inputs. fp16/bf16
// pass when max|ours - ref| <= 2 * max|naive_lowp - ref| + 1e-5, where naive_lowp rounds S to the
// dtype, does the softmax in fp32, rounds P to the dtype, accumulates P V in fp32 and rounds the
// output (the flash-attn rule); fp32 passes when ||ours - ref|| / ||ref|| <= 1e-5. lse is checked
// against the float64 log-sum-exp (+inf for rows that see no key); gaps in strided outputs must stay
// poisoned.
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
#include <string>
#include <thread>
#include <vector>

#include "fa_core.h"
#include "tools/check_common.cuh"

#ifdef FA_TUNE
#include "cuda/fwd_launch.cuh"
#endif

namespace {

using Rng = RngT<0x1234567ull>;

// ---- one test case ----------------------------------------------------------------------------------

struct Case {
  fa_dtype dtype;
  int B, H, Hkv, Nq, Nk, D;
  int causal;
  int layout;
  float scale;
};

struct RefOut {
  std::vector<double> o;    // [B, Nq, H, D]
  std::vector<double> lse;  // [B, H, Nq]
  std::vector<float> naive; // fp16/bf16 naive low-precision output
};

void reference(const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor& v, RefOut& r) {
  const int B = c.B, H = c.H, Nq = c.Nq, Nk = c.Nk, D = c.D, grp = c.H / c.Hkv;
  const bool lowp = c.dtype != FA_FLOAT32;
  r.o.assign(static_cast<size_t>(B) * Nq * H * D, 0.0);
  r.lse.assign(static_cast<size_t>(B) * H * Nq, 0.0);
  if (lowp) r.naive.assign(r.o.size(), 0.f);
  parallel_for(B * H, [&](int bh) {
    const int b = bh / H, h = bh % H, hk = h / grp;
    std::vector<double> s(Nk);
    std::vector<float> s32(Nk), p32(Nk);
    for (int i = 0; i < Nq; ++i) {
      const float* qi = &q.val[q.dense(b, i, h)];
      int lim = Nk;
      if (c.causal) lim = std::min(Nk, std::max(0, i + Nk - Nq + 1));
      double* out = &r.o[q.dense(b, i, h)];
      double& lse = r.lse[(static_cast<size_t>(b) * H + h) * Nq + i];
      if (lim == 0) {
        lse = INFINITY;
        continue;  // o stays 0, naive stays 0
      }
      double m = -INFINITY;
      for (int j = 0; j < lim; ++j) {
        const float* kj = &k.val[k.dense(b, j, hk)];
        double acc = 0;
        float acc32 = 0;
        for (int d = 0; d < D; ++d) {
          acc += static_cast<double>(qi[d]) * kj[d];
          acc32 += qi[d] * kj[d];
        }
        s[j] = acc * c.scale;
        m = std::max(m, s[j]);
        if (lowp) s32[j] = round_to(c.dtype, acc32 * c.scale);
      }
      double l = 0;
      for (int j = 0; j < lim; ++j) l += std::exp(s[j] - m);
      lse = m + std::log(l);
      for (int j = 0; j < lim; ++j) {
        const double p = std::exp(s[j] - m) / l;
        const float* vj = &v.val[v.dense(b, j, hk)];
        for (int d = 0; d < D; ++d) out[d] += p * vj[d];
      }
      if (lowp) {
        float m32 = -INFINITY;
        for (int j = 0; j < lim; ++j) m32 = std::max(m32, s32[j]);
        float l32 = 0;
        for (int j = 0; j < lim; ++j) l32 += (p32[j] = std::exp(s32[j] - m32));
        std::vector<float> acc(D, 0.f);
        for (int j = 0; j < lim; ++j) {
          const float p = round_to(c.dtype, p32[j] / l32);
          const float* vj = &v.val[v.dense(b, j, hk)];
          for (int d = 0; d < D; ++d) acc[d] += p * vj[d];
        }
        float* nv = &r.naive[q.dense(b, i, h)];
        for (int d = 0; d < D; ++d) nv[d] = round_to(c.dtype, acc[d]);
      }
    }
  });
}

using FwdFn = std::function<fa_status(const fa_fwd_params*, cudaStream_t)>;

struct CaseResult {
  bool ok;
  double err, tol, lse_err;
  std::string why;
};

CaseResult run_case(const Case& c, uint64_t seed, cudaStream_t stream, const FwdFn& fwd) {
  Rng rng(seed);
  HostTensor q, k, v;
  q.init(c.dtype, c.layout, c.B, c.Nq, c.H, c.D);
  k.init(c.dtype, c.layout, c.B, c.Nk, c.Hkv, c.D);
  v.init(c.dtype, c.layout, c.B, c.Nk, c.Hkv, c.D);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  const size_t o_elems = span(q.str, c.B, c.Nq, c.H, c.D);
  const size_t lse_elems = static_cast<size_t>(c.B) * c.H * c.Nq;

  DevBuf dq, dk, dv, dout, dlse;
  dq.alloc(q.data.size());
  dk.alloc(k.data.size());
  dv.alloc(v.data.size());
  dout.alloc(o_elems * elem_size(c.dtype));
  dlse.alloc(lse_elems * 4);
  CK(cudaMemcpy(dq.p, q.data.data(), q.data.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dk.p, k.data.data(), k.data.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv.p, v.data.data(), v.data.size(), cudaMemcpyHostToDevice));
  // Poison on the launch stream itself (a legacy-stream memset would not be ordered before it).
  CK(cudaMemsetAsync(dout.p, 0xFF, dout.n, stream));
  CK(cudaMemsetAsync(dlse.p, 0xFF, dlse.n, stream));

  fa_fwd_params p = make_fwd_params(c);
  p.q = dq.p, p.k = dk.p, p.v = dv.p, p.o = dout.p, p.lse = static_cast<float*>(dlse.p);
  const fa_status st = fwd(&p, stream);
  CaseResult res{false, 0, 0, 0, ""};
  if (st != FA_OK) {
    res.why = std::string("status ") + fa_status_name(st) + ": " + fa_last_error();
    return res;
  }
  CK(cudaStreamSynchronize(stream));
  CK(cudaGetLastError());
  std::vector<unsigned char> o_host(dout.n);
  std::vector<float> lse_host(lse_elems);
  CK(cudaMemcpy(o_host.data(), dout.p, dout.n, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(lse_host.data(), dlse.p, dlse.n, cudaMemcpyDeviceToHost));

  RefOut ref;
  reference(c, q, k, v, ref);

  // Output values, and gaps untouched.
  double max_err = 0, naive_err = 0, num = 0, den = 0;
  bool nan_seen = false;
  std::vector<char> covered(o_elems, 0);
  for (int b = 0; b < c.B; ++b)
    for (int i = 0; i < c.Nq; ++i)
      for (int h = 0; h < c.H; ++h) {
        const size_t go = q.off(b, i, h), dn = q.dense(b, i, h);
        for (int d = 0; d < c.D; ++d) {
          covered[go + d] = 1;
          const double x = load_elem(c.dtype, o_host.data(), go + d);
          const double r = ref.o[dn + d];
          if (!std::isfinite(x)) nan_seen = true;
          const double e = std::fabs(x - r);
          max_err = std::max(max_err, e);
          num += e * e;
          den += r * r;
          if (!ref.naive.empty()) naive_err = std::max(naive_err, std::fabs(ref.naive[dn + d] - r));
        }
      }
  size_t stray = 0;
  for (size_t i = 0; i < o_elems; ++i)
    if (!covered[i] && !is_poison(c.dtype, o_host.data(), i)) ++stray;
  double lse_err = 0;
  size_t lse_bad = 0;
  for (size_t i = 0; i < lse_elems; ++i) {
    const double r = ref.lse[i], x = lse_host[i];
    if (std::isinf(r)) {
      if (!(std::isinf(x) && x > 0)) ++lse_bad;
      continue;
    }
    const double e = std::fabs(x - r);
    if (!(e <= 1e-4 * std::max(1.0, std::fabs(r)))) ++lse_bad;
    if (!(e <= lse_err)) lse_err = std::isnan(e) ? INFINITY : std::max(lse_err, e);
  }
  res.lse_err = lse_err;
  if (c.dtype == FA_FLOAT32) {
    res.err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    res.tol = 1e-5;
  } else {
    res.err = max_err;
    res.tol = 2 * naive_err + 1e-5;
  }
  res.ok = !nan_seen && res.err <= res.tol && stray == 0 && lse_bad == 0;
  if (nan_seen) res.why += "non-finite output; ";
  if (!(res.err <= res.tol)) res.why += "error over tolerance; ";
  if (stray) res.why += std::to_string(stray) + " writes outside the output; ";
  if (lse_bad) res.why += std::to_string(lse_bad) + " bad lse; ";
  return res;
}

std::string describe(const Case& c) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s B%d H%d/%d Nq%d Nk%d D%d %s %s scale%.4g", dname(c.dtype), c.B, c.H, c.Hkv, c.Nq,
           c.Nk, c.D, c.causal ? "causal" : "full", lname(c.layout), c.scale);
  return buf;
}

std::vector<Case> make_cases(int n_random, uint64_t seed, bool small) {
  std::vector<Case> cs;
  auto add = [&](fa_dtype t, int B, int H, int Hkv, int Nq, int Nk, int D, int causal, int layout, float scale = 0) {
    cs.push_back({t, B, H, Hkv, Nq, Nk, D, causal, layout, scale != 0 ? scale : 1.f / std::sqrt((float)D)});
  };
  const fa_dtype types[3] = {FA_FLOAT16, FA_BFLOAT16, FA_FLOAT32};
  if (small) {
    add(FA_FLOAT16, 1, 2, 1, 129, 200, 64, 1, BSHD);
    add(FA_BFLOAT16, 1, 2, 2, 77, 65, 128, 0, GAPPED);
    add(FA_FLOAT16, 1, 1, 1, 130, 7, 40, 1, BHSD);
    add(FA_FLOAT16, 1, 2, 1, 64, 128, 256, 1, BSHD);
    add(FA_FLOAT32, 1, 2, 1, 100, 90, 72, 1, GAPPED);
    add(FA_FLOAT32, 1, 1, 1, 33, 70, 256, 0, BSHD);
    add(FA_BFLOAT16, 1, 2, 1, 70, 150, 96, 1, BSHD);   // every tile width once
    add(FA_FLOAT16, 1, 2, 2, 65, 64, 160, 0, BHSD);
    add(FA_BFLOAT16, 1, 2, 1, 100, 33, 192, 1, GAPPED);
    add(FA_FLOAT16, 1, 2, 1, 129, 129, 24, 1, BSHD);
    add(FA_FLOAT32, 1, 2, 1, 140, 77, 32, 1, BSHD);
    add(FA_FLOAT32, 1, 2, 2, 60, 200, 64, 0, BHSD);
    return cs;
  }
  // Fixed edge cases, each dtype.
  for (fa_dtype t : types) {
    add(t, 1, 4, 1, 1, 1000, 128, 0, BSHD);      // decode-like, MQA
    add(t, 2, 4, 2, 1, 1000, 64, 1, BHSD);       // decode, causal: sees every key
    add(t, 1, 2, 2, 129, 7, 64, 1, BSHD);        // causal Nq > Nk: rows with no key
    add(t, 1, 2, 1, 300, 1000, 256, 1, GAPPED);  // causal Nq < Nk
    add(t, 2, 3, 3, 1000, 1000, 128, 1, BSHD);
    add(t, 1, 2, 2, 5, 0, 32, 0, BSHD);          // no keys at all
    add(t, 1, 2, 1, 127, 129, 80, 0, BSHD, -0.3f);  // negative scale
    add(t, 1, 2, 1, 65, 63, 48, 1, BHSD, 1e-38f);   // ~zero scale: uniform attention
    add(t, 1, 1, 1, 1, 1, 8, 1, BSHD);
  }
  // fp32 regressions: the tensor cores' round-toward-zero accumulation (fixed by chunked sums) shows
  // with long dot products, many keys and a large scale (failed at rel. L2 1.14e-5 before the fix).
  add(FA_FLOAT32, 2, 4, 4, 7, 1000, 248, 1, GAPPED, 2.f / std::sqrt(248.f));
  add(FA_FLOAT32, 1, 2, 1, 64, 4096, 256, 0, BSHD, 2.f / std::sqrt(256.f));
  add(FA_FLOAT32, 1, 2, 2, 33, 4000, 128, 1, BHSD, 2.f / std::sqrt(128.f));
  add(FA_FLOAT32, 1, 1, 1, 16, 8192, 64, 0, BSHD, 2.f / std::sqrt(64.f));
  const int lens[] = {1, 7, 16, 33, 64, 127, 128, 129, 200, 255, 256, 257, 384, 1000};
  const int n_lens = sizeof(lens) / sizeof(lens[0]);
  Rng rng(seed);
  for (int i = 0; i < n_random; ++i) {
    Case c;
    c.dtype = types[i % 3];
    random_shape(c, rng, i, lens, n_lens);
    // Keep the CPU reference cheap.
    shrink_case(c, 4e7);
    cs.push_back(c);
  }
  return cs;
}

int check_error_paths() {
  StatusExpect expect;
  DevBuf buf;
  buf.alloc(1 << 20);
  Case c{FA_FLOAT16, 1, 2, 1, 64, 64, 64, 0, BSHD, 0.125f};
  fa_fwd_params p = make_fwd_params(c);
  p.q = p.k = p.v = p.o = buf.p;
  p.lse = static_cast<float*>(buf.p);
  fa_fwd_params x = p;
  x.head_dim = 12;
  expect("head_dim 12 -> UNSUPPORTED", fa_fwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  x = p;
  x.head_dim = 264;
  expect("head_dim 264 -> UNSUPPORTED", fa_fwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  x = p;
  x.heads = 3;
  x.heads_k = 2;
  expect("heads 3 / heads_k 2 -> INVALID", fa_fwd_cuda(&x, nullptr), FA_ERR_INVALID);
  x = p;
  x.q_str.row = 68;  // not a multiple of 8 fp16 elements
  expect("row stride 68 (fp16) -> UNSUPPORTED", fa_fwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  x = p;
  x.k = static_cast<char*>(buf.p) + 2;
  expect("k misaligned -> UNSUPPORTED", fa_fwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  x = p;
  x.dtype = static_cast<fa_dtype>(7);
  expect("dtype 7 -> INVALID", fa_fwd_cuda(&x, nullptr), FA_ERR_INVALID);
  expect("NULL params -> INVALID", fa_fwd_cuda(nullptr, nullptr), FA_ERR_INVALID);
  x = p;
  x.seqlen_q = 0;
  expect("seqlen_q 0 -> OK (nothing to do)", fa_fwd_cuda(&x, nullptr), FA_OK);
  const bool sup = fa_cuda_supports(FA_FLOAT16, 40) && fa_cuda_supports(FA_BFLOAT16, 256) &&
                   fa_cuda_supports(FA_FLOAT32, 8) && !fa_cuda_supports(FA_FLOAT16, 12) &&
                   !fa_cuda_supports(FA_FLOAT32, 264);
  expect.check("fa_cuda_supports (40, 256, 8 yes; 12, 264 no)", sup);
  const fa_status bs = fa_bwd_cuda(nullptr, nullptr);
  expect("fa_bwd_cuda(NULL) -> INVALID", bs, FA_ERR_INVALID);
  CK(cudaDeviceSynchronize());
  return expect.bad;
}

// ---- timing ---------------------------------------------------------------------------------------
struct BenchShape {
  fa_dtype dtype;
  int D, N, causal;
  int layout;  // BSHD or BHSD (torch SDPA's contiguous [B, H, N, D])
};

double flops(const fa_fwd_params& p) {
  double f = 4.0 * p.batch * p.heads * static_cast<double>(p.seqlen_q) * p.seqlen_k * p.head_dim;
  return p.causal ? f / 2 : f;
}

// Median ms of `reps` launches, rotating through 3 input sets (more than L2 together).
double time_fwd(const BenchShape& s, int reps, cudaStream_t stream, const FwdFn& fwd, fa_fwd_params* out_p,
                int B_override = 0, int H_override = 0) {
  const int B = B_override ? B_override : 16384 / s.N;
  const int H = H_override ? H_override : (s.D == 256 ? 16 : 2048 / s.D);
  Case c{s.dtype, B, H, H, s.N, s.N, s.D, s.causal, s.layout, 1.f / std::sqrt((float)s.D)};
  fa_fwd_params p = make_fwd_params(c);
  const size_t n = static_cast<size_t>(B) * s.N * H * s.D;
  const size_t bytes = n * elem_size(s.dtype);
  constexpr int kSets = 3;
  std::vector<DevBuf> bufs(kSets * 3);
  for (size_t i = 0; i < bufs.size(); ++i) {
    bufs[i].alloc(bytes);
    fill_normal_kernel<<<1024, 256, 0, stream>>>(bufs[i].p, n, static_cast<int>(s.dtype), 1000 + i);
    CK(cudaGetLastError());
  }
  DevBuf o, lse;
  o.alloc(bytes);
  lse.alloc(static_cast<size_t>(B) * H * s.N * 4);
  p.o = o.p;
  p.lse = static_cast<float*>(lse.p);
  auto launch = [&](int i) {
    const int set = i % kSets;
    p.q = bufs[3 * set].p, p.k = bufs[3 * set + 1].p, p.v = bufs[3 * set + 2].p;
    const fa_status st = fwd(&p, stream);
    if (st != FA_OK) {
      fprintf(stderr, "bench launch failed: %s %s\n", fa_status_name(st), fa_last_error());
      exit(3);
    }
  };
  for (int i = 0; i < 8; ++i) launch(i);  // warm-up (clocks, L2, smem carve-out)
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(ev[2 * i], stream));
    launch(i);
    CK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CK(cudaStreamSynchronize(stream));
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) CK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  *out_p = p;
  return ms[reps / 2];
}

FwdFn api_fwd() {
  return [](const fa_fwd_params* p, cudaStream_t s) { return fa_fwd_cuda(p, s); };
}

#ifdef FA_TUNE
// Builds FwdArgs like fa_fwd_cuda does (contiguous inputs, positive scale) and calls one variant.
template <class Tr>
FwdFn variant_fwd() {
  return [](const fa_fwd_params* p, cudaStream_t s) {
    if (p->head_dim > Tr::kHeadDim || p->dtype != (std::is_same<typename Tr::T, __half>::value ? FA_FLOAT16
                                                   : std::is_same<typename Tr::T, float>::value ? FA_FLOAT32
                                                                                                : FA_BFLOAT16))
      return FA_ERR_UNSUPPORTED;
    fa::cuda::FwdArgs a{};
    a.q = p->q, a.k = p->k, a.v = p->v, a.o = p->o, a.lse = p->lse;
    a.q_batch = p->q_str.batch, a.q_row = p->q_str.row, a.q_head = p->q_str.head;
    a.k_batch = p->k_str.batch, a.k_row = p->k_str.row, a.k_head = p->k_str.head;
    a.v_batch = p->v_str.batch, a.v_row = p->v_str.row, a.v_head = p->v_str.head;
    a.o_batch = p->o_str.batch, a.o_row = p->o_str.row, a.o_head = p->o_str.head;
    a.batch = p->batch, a.heads = p->heads, a.heads_k = p->heads_k;
    a.seqlen_q = p->seqlen_q, a.seqlen_k = p->seqlen_k, a.head_dim = p->head_dim;
    a.group = p->heads / p->heads_k;
    a.causal = p->causal;
    a.negate_s = p->scale < 0;
    a.scale_log2 = std::max(std::fabs(p->scale) * 1.4426950408889634f, 1e-30f);
    a.window_left = -1;
    a.window_right = p->causal ? 0 : -1;
    a.lse_batch = int64_t(p->heads) * p->seqlen_q;
    a.lse_head = p->seqlen_q;
    return fa::cuda::launch_fwd<Tr, false>(a, s);
  };
}
struct Variant {
  const char* name;
  fa_dtype dtype;
  int width;
  FwdFn fn;
};
std::vector<Variant> tune_variants() {
  using namespace fa::cuda;
  using H = __half;
  std::vector<Variant> v;
#define FA_V(W, ...) v.push_back({#__VA_ARGS__, FA_FLOAT16, W, variant_fwd<__VA_ARGS__>()})
#define FA_V32(W, ...) v.push_back({#__VA_ARGS__, FA_FLOAT32, W, variant_fwd<__VA_ARGS__>()})
  // Candidates kept for the next tuning round (the chosen ones are in fwd_traits.cuh).
  FA_V(128, FwdTraits<H, 128, 128, 64, 4, false, 1, 1>);
  FA_V(128, FwdTraits<H, 128, 128, 32, 4, false, 1, 2>);
  FA_V(128, FwdTraits<H, 128, 128, 64, 4, false, 2, 1>);
  FA_V(128, FwdTraits<H, 128, 128, 32, 4, false, 2, 2>);
  FA_V(64, FwdTraits<H, 64, 128, 64, 4, true, 1, 2>);
  FA_V(64, FwdTraits<H, 64, 128, 128, 4, true, 1, 1>);
  FA_V(256, FwdTraits<H, 256, 64, 64, 4, false, 1, 2>);
  FA_V(256, FwdTraits<H, 256, 128, 64, 8, false, 1, 1>);
  FA_V32(64, Fp32FwdTraits<64, 128, 32, 4, 1>);
  FA_V32(128, Fp32FwdTraits<128, 128, 16, 4, 1>);
#undef FA_V
#undef FA_V32
  return v;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  bool small = false, check = true, bench = true;
  int only_width = 0;  // --width W: time that head dim only (fp16/bf16 grid; no fp32)
  int n_random = 330, reps = 40;
  uint64_t seed = 20240611;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") small = true, bench = false;
    else if (a == "--check-only") bench = false;
    else if (a == "--bench-only") check = false;
    else if (a == "--cases" && i + 1 < argc) n_random = atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && i + 1 < argc) reps = atoi(argv[++i]);
    else if (a == "--width" && i + 1 < argc) only_width = atoi(argv[++i]);
    else {
      printf("usage: fwd_check [--small] [--check-only] [--bench-only] [--cases N] [--seed S] [--reps N] [--width W]\n");
      return a == "--help" ? 0 : 1;
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int failures = 0;

  if (check) {
    printf("error paths:\n");
    failures += check_error_paths();
    const std::vector<Case> cases = make_cases(n_random, seed, small);
    int passed = 0;
    int per_type_pass[3] = {0, 0, 0}, per_type_total[3] = {0, 0, 0};
    double worst_ratio[3] = {0, 0, 0}, worst_lse = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const CaseResult r = run_case(c, seed * 1000003ull + i, stream, api_fwd());
      const int ti = c.dtype == FA_FLOAT16 ? 0 : c.dtype == FA_BFLOAT16 ? 1 : 2;
      ++per_type_total[ti];
      if (r.ok) {
        ++passed;
        ++per_type_pass[ti];
      } else {
        ++failures;
      }
      if (r.tol > 0) worst_ratio[ti] = std::max(worst_ratio[ti], r.err / r.tol);
      worst_lse = std::max(worst_lse, r.lse_err);
      if (!r.ok || small)
        printf("  %s case %zu: %s  err %.3g tol %.3g lse_err %.3g %s\n", r.ok ? "ok  " : "FAIL", i,
               describe(c).c_str(), r.err, r.tol, r.lse_err, r.why.c_str());
    }
    printf("correctness: %d / %zu passed (fp16 %d/%d, bf16 %d/%d, fp32 %d/%d); worst err/tol fp16 %.3f bf16 %.3f "
           "fp32 %.3f; worst lse err %.3g\n",
           passed, cases.size(), per_type_pass[0], per_type_total[0], per_type_pass[1], per_type_total[1],
           per_type_pass[2], per_type_total[2], worst_ratio[0], worst_ratio[1], worst_ratio[2], worst_lse);
  }

  if (bench) {
    printf("timing (median of %d, 3 input sets rotated; B = 16384/N, H = 2048/D or 16 for D 256):\n", reps);
    printf("  %-5s %4s %6s %-6s %9s %8s %9s %8s\n", "dtype", "D", "N", "mask", "bshd ms", "TFLOP/s", "bhsd ms",
           "TFLOP/s");
    const fa_dtype lowp[2] = {FA_FLOAT16, FA_BFLOAT16};
    for (fa_dtype t : lowp)
      for (int D : {64, 128, 256})
        for (int N : {1024, 4096, 8192, 16384})
          for (int causal : {0, 1}) {
            if ((only_width && D != only_width) || (!only_width && N == 8192)) continue;
            fa_fwd_params p;
            const double ms = time_fwd({t, D, N, causal, BSHD}, reps, stream, api_fwd(), &p);
            const double ms2 = time_fwd({t, D, N, causal, BHSD}, reps, stream, api_fwd(), &p);
            printf("  %-5s %4d %6d %-6s %9.3f %8.1f %9.3f %8.1f\n", dname(t), D, N, causal ? "causal" : "full", ms,
                   flops(p) / ms * 1e-9, ms2, flops(p) / ms2 * 1e-9);
          }
    for (int D : {32, 64, 128, 256})
      for (int N : {1024, 4096})
        for (int causal : {0, 1}) {
          if (only_width) break;
          if (N == 4096 && (D == 32 || D == 256)) continue;
          fa_fwd_params p;
          const double ms = time_fwd({FA_FLOAT32, D, N, causal, BHSD}, std::max(5, reps / 3), stream, api_fwd(), &p);
          printf("  %-5s %4d %6d %-6s %9s %8s %9.3f %8.1f\n", "fp32", D, N, causal ? "causal" : "full", "-", "-", ms,
                 flops(p) / ms * 1e-9);
        }
  }

#ifdef FA_TUNE
  if (bench) {
    printf("tile variants (fp16 unless noted, bhsd; each first checked on 2 shapes):\n");
    for (const Variant& v : tune_variants()) {
      if (only_width && v.width != only_width) continue;
      bool ok = true;
      for (int causal : {0, 1}) {
        Case c{v.dtype, 1, 2, 1, 300, 333, v.width, causal, BSHD, 1.f / std::sqrt((float)v.width)};
        const CaseResult r = run_case(c, 99 + causal, stream, v.fn);
        ok = ok && r.ok;
      }
      if (!ok) {
        printf("  %-58s FAILED CHECK\n", v.name);
        ++failures;
        continue;
      }
      const int Ns[3] = {1024, 4096, 16384};
      for (int N : Ns)
        for (int causal : {0, 1}) {
          if (v.dtype == FA_FLOAT32 && N != 1024) continue;
          fa_fwd_params p;
          const double ms =
              time_fwd({v.dtype, v.width, N, causal, BHSD}, v.dtype == FA_FLOAT32 ? 7 : 15, stream, v.fn, &p);
          printf("  %-58s N%-5d %-6s %8.3f ms %7.1f TFLOP/s\n", v.name, N, causal ? "causal" : "full", ms,
                 flops(p) / ms * 1e-9);
        }
    }
  }
#endif
  CK(cudaStreamDestroy(stream));
  printf("%s\n", failures == 0 ? "ALL PASSED" : "FAILURES");
  return failures == 0 ? 0 : 1;
}
