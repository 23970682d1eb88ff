// bwd_check: correctness and speed of fa_bwd_cuda on one GPU, without Node.js.
//
//   bwd_check                 random-shape correctness (>= 200 cases), error paths, training-step
//                             sanity check, then timing
//   bwd_check --small         a few small shapes only (for compute-sanitizer memcheck / racecheck)
//   bwd_check --check-only | --bench-only | --cases N | --seed S | --reps N | --width W
//   bwd_check --prof D N causal   four fp16 calls of one grid shape (profile the last with ncu)
//   (built with -DFA_TUNE: also times the tile variants listed in tune_variants())
//
// Each case: random normal q, k, v, dO (fresh per case, fixed seeds), the CUDA forward gives o and
// lse, then fa_bwd_cuda with dq / dk / dv / softmax_d poisoned (0xFF bytes = NaN) beforehand.
// Reference: float64 gradients of naive attention on the same (rounded) inputs, computed on the CPU:
//   S = scale Q K^T (masked), P = softmax(S), dV = P^T dO, dP = dO V^T, D = rowsum(P * dP),
//   dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q (dK, dV summed over each GQA group).
// fp16/bf16 pass when, for each of dq, dk, dv, max|ours - ref| <= 2 * max|naive - ref| + atol (the
// flash-attn rule), where `naive` is a low-precision naive backward that rounds to the dtype wherever
// PyTorch's naive fp16 attention would: S = round(scale * fp32(q.k)), P = round(softmax_fp32(S)),
// dP = round(fp32(dO.v)), dS = round(P * (dP - sum_fp32(P * dP))), dS' = round(scale * dS),
// dQ = round(fp32 sum dS' k), dK = round(fp32 sum dS' q), dV = round(fp32 sum P dO); atol =
// 1e-5 * max(1, largest |ref| over dq, dk, dv) absorbs fp32-level noise where the naive error is 0
// (e.g. one key: dS is exactly 0 in the naive version). fp32 passes when ||ours - ref|| / ||ref|| <=
// 1e-5 for each gradient (with two floors, see compare()). Deterministic cases run three times and must match bit for bit; softmax_d
// is checked against the float64 rowsum(dO * o) of the GPU's o; gaps in strided outputs must stay
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
#include "cuda/bwd_launch.cuh"
#endif

namespace {

using Rng = RngT<0x7654321ull>;

// ---- one test case ----------------------------------------------------------------------------------

struct Case {
  fa_dtype dtype;
  int B, H, Hkv, Nq, Nk, D;
  int causal;
  int layout;
  float scale;
  int det;      // deterministic mode
  int user_ws;  // caller-provided workspace
};

struct RefGrads {
  std::vector<double> dq, dk, dv;     // dense [B, N, H(kv), D]
  std::vector<double> aq, ak, av;     // the same sums over |terms| (magnitude of what cancels)
  std::vector<double> lse;            // [B, H, Nq] natural log-sum-exp (+inf: no key)
  std::vector<float> nq, nk, nv;      // naive low-precision versions (fp16/bf16 only)
};

// float64 gradients (and the naive low-precision ones). Parallel over (batch, kv head): each task
// owns its dK / dV rows and loops over the group's query heads.
void reference(const Case& c, const HostTensor& q, const HostTensor& k, const HostTensor& v, const HostTensor& dout,
               RefGrads& r, bool serial) {
  const int B = c.B, H = c.H, Hkv = c.Hkv, Nq = c.Nq, Nk = c.Nk, D = c.D, grp = c.H / c.Hkv;
  const bool lowp = c.dtype != FA_FLOAT32;
  const double scale = c.scale;
  const float scale_f = c.scale;
  r.dq.assign(static_cast<size_t>(B) * Nq * H * D, 0.0);
  r.dk.assign(static_cast<size_t>(B) * Nk * Hkv * D, 0.0);
  r.dv.assign(r.dk.size(), 0.0);
  r.aq.assign(r.dq.size(), 0.0);
  r.lse.assign(static_cast<size_t>(B) * H * Nq, INFINITY);
  r.ak.assign(r.dk.size(), 0.0);
  r.av.assign(r.dk.size(), 0.0);
  if (lowp) {
    r.nq.assign(r.dq.size(), 0.f);
    r.nk.assign(r.dk.size(), 0.f);
    r.nv.assign(r.dk.size(), 0.f);
  }
  auto body = [&](int task) {
    const int b = task / Hkv, hk = task % Hkv;
    std::vector<double> p(Nk), dp(Nk);
    std::vector<float> p32(Nk), s32(Nk), dp32(Nk), ds32(Nk);
    std::vector<float> acc_k(static_cast<size_t>(Nk) * D, 0.f), acc_v(static_cast<size_t>(Nk) * D, 0.f);
    std::vector<float> accq(D);
    for (int h = hk * grp; h < (hk + 1) * grp; ++h) {
      for (int i = 0; i < Nq; ++i) {
        int lim = Nk;
        if (c.causal) lim = std::min(Nk, std::max(0, i + Nk - Nq + 1));
        if (lim == 0) continue;  // no key: zero gradient
        const float* qi = &q.val[q.dense(b, i, h)];
        const float* doi = &dout.val[dout.dense(b, i, h)];
        double m = -INFINITY;
        for (int j = 0; j < lim; ++j) {
          const float* kj = &k.val[k.dense(b, j, hk)];
          double acc = 0;
          float acc32 = 0;
          for (int d = 0; d < D; ++d) {
            acc += static_cast<double>(qi[d]) * kj[d];
            acc32 += qi[d] * kj[d];
          }
          p[j] = acc * scale;
          m = std::max(m, p[j]);
          if (lowp) s32[j] = round_to(c.dtype, acc32 * scale_f);
        }
        double l = 0;
        for (int j = 0; j < lim; ++j) l += (p[j] = std::exp(p[j] - m));
        r.lse[(static_cast<size_t>(b) * H + h) * Nq + i] = m + std::log(l);
        double Di = 0;
        for (int j = 0; j < lim; ++j) {
          p[j] /= l;
          const float* vj = &v.val[v.dense(b, j, hk)];
          double acc = 0;
          for (int d = 0; d < D; ++d) acc += static_cast<double>(doi[d]) * vj[d];
          dp[j] = acc;
          Di += p[j] * acc;
        }
        double* dqi = &r.dq[q.dense(b, i, h)];
        double* aqi = &r.aq[q.dense(b, i, h)];
        for (int j = 0; j < lim; ++j) {
          const double ds = p[j] * (dp[j] - Di) * scale;
          const double dsa = p[j] * (std::fabs(dp[j]) + std::fabs(Di)) * std::fabs(scale);
          const float* kj = &k.val[k.dense(b, j, hk)];
          const size_t kd = k.dense(b, j, hk);
          double* dkj = &r.dk[kd];
          double* dvj = &r.dv[kd];
          double* akj = &r.ak[kd];
          double* avj = &r.av[kd];
          for (int d = 0; d < D; ++d) {
            dqi[d] += ds * kj[d];
            dkj[d] += ds * qi[d];
            dvj[d] += p[j] * doi[d];
            aqi[d] += dsa * std::fabs(kj[d]);
            akj[d] += dsa * std::fabs(qi[d]);
            avj[d] += p[j] * std::fabs(doi[d]);
          }
        }
        if (lowp) {
          float m32 = -INFINITY;
          for (int j = 0; j < lim; ++j) m32 = std::max(m32, s32[j]);
          float l32 = 0;
          for (int j = 0; j < lim; ++j) l32 += (p32[j] = std::exp(s32[j] - m32));
          float dn = 0;
          for (int j = 0; j < lim; ++j) {
            p32[j] = round_to(c.dtype, p32[j] / l32);
            const float* vj = &v.val[v.dense(b, j, hk)];
            float acc = 0;
            for (int d = 0; d < D; ++d) acc += doi[d] * vj[d];
            dp32[j] = round_to(c.dtype, acc);
            dn += p32[j] * dp32[j];
          }
          std::fill(accq.begin(), accq.end(), 0.f);
          for (int j = 0; j < lim; ++j) {
            ds32[j] = round_to(c.dtype, round_to(c.dtype, p32[j] * (dp32[j] - dn)) * scale_f);
            const float* kj = &k.val[k.dense(b, j, hk)];
            float* ak = &acc_k[static_cast<size_t>(j) * D];
            float* av = &acc_v[static_cast<size_t>(j) * D];
            for (int d = 0; d < D; ++d) {
              accq[d] += ds32[j] * kj[d];
              ak[d] += ds32[j] * qi[d];
              av[d] += p32[j] * doi[d];
            }
          }
          float* nq = &r.nq[q.dense(b, i, h)];
          for (int d = 0; d < D; ++d) nq[d] = round_to(c.dtype, accq[d]);
        }
      }
    }
    if (lowp)
      for (int j = 0; j < Nk; ++j)
        for (int d = 0; d < D; ++d) {
          r.nk[k.dense(b, j, hk) + d] = round_to(c.dtype, acc_k[static_cast<size_t>(j) * D + d]);
          r.nv[k.dense(b, j, hk) + d] = round_to(c.dtype, acc_v[static_cast<size_t>(j) * D + d]);
        }
  };
  if (serial) {
    for (int task = 0; task < B * Hkv; ++task) body(task);
  } else {
    parallel_for(B * Hkv, body);
  }
}

fa_bwd_params make_bwd_params(const Case& c) {
  fa_bwd_params p;
  memset(&p, 0, sizeof(p));
  p.q_str = make_strides(c.layout, c.Nq, c.H, c.D);
  p.k_str = make_strides(c.layout, c.Nk, c.Hkv, c.D);
  p.v_str = p.k_str, p.dk_str = p.k_str, p.dv_str = p.k_str;
  p.o_str = p.q_str, p.do_str = p.q_str, p.dq_str = p.q_str;
  p.batch = c.B, p.seqlen_q = c.Nq, p.seqlen_k = c.Nk, p.heads = c.H, p.heads_k = c.Hkv, p.head_dim = c.D;
  p.scale = c.scale;
  p.causal = c.causal;
  p.deterministic = c.det;
  p.dtype = c.dtype;
  return p;
}

using BwdFn = std::function<fa_status(const fa_bwd_params*, cudaStream_t)>;
BwdFn api_bwd() {
  return [](const fa_bwd_params* p, cudaStream_t s) { return fa_bwd_cuda(p, s); };
}

struct GradCheck {
  double err = 0, tol = 0;
  double rel = 0;        // fp32: plain relative L2 error
  bool cancels = false;  // fp32: gradient cancels (see compare)
  bool subnormal = false;  // fp32: the whole reference lies in float's subnormal range
  bool nan = false;
  size_t stray = 0;
};

struct CaseResult {
  bool ok = false;
  double ratio = 0;  // worst err / tol over dq, dk, dv
  double d_err = 0;  // worst softmax_d error / tolerance
  double rel = 0;    // fp32: worst plain relative L2 error over the gradients that do not cancel
  double lse_err = 0;  // max |forward lse - float64 lse|
  std::string why;
};

// Compares one gradient tensor (raw device bytes in `t`'s layout) with the reference.
// fp32: ||ours - ref|| <= 1e-5 ||ref|| (+ 1e-37 sqrt(n): results in float's subnormal range are
// flushed to zero). Where the gradient cancels to under 1e-3 of the magnitude of its terms
// (||ref|| < 1e-3 ||ref_abs||, e.g. dq and dk are exactly 0 with a single key), the relative error is
// meaningless and the bound is 1e-5 ||ref_abs|| instead; err / tol is reported either way.
GradCheck compare(const Case& c, const HostTensor& t, const std::vector<unsigned char>& raw,
                  const std::vector<double>& ref, const std::vector<double>& ref_abs, const std::vector<float>& naive,
                  double atol) {
  GradCheck g;
  const size_t elems = raw.size() / elem_size(c.dtype);
  std::vector<char> covered(elems, 0);
  double max_err = 0, naive_err = 0, num = 0, den = 0, aden = 0;
  for (int b = 0; b < t.B; ++b)
    for (int n = 0; n < t.N; ++n)
      for (int h = 0; h < t.H; ++h) {
        const size_t go = t.off(b, n, h), dn = t.dense(b, n, h);
        for (int d = 0; d < t.D; ++d) {
          covered[go + d] = 1;
          const double x = load_elem(c.dtype, raw.data(), go + d);
          const double r = ref[dn + d];
          if (!std::isfinite(x)) g.nan = true;
          const double e = std::fabs(x - r);
          max_err = std::max(max_err, e);
          num += e * e;
          den += r * r;
          aden += ref_abs[dn + d] * ref_abs[dn + d];
          if (!naive.empty()) naive_err = std::max(naive_err, std::fabs(naive[dn + d] - r));
        }
      }
  for (size_t i = 0; i < elems; ++i)
    if (!covered[i] && !is_poison(c.dtype, raw.data(), i)) ++g.stray;
  if (c.dtype == FA_FLOAT32) {
    const double n_ref = std::sqrt(den), n_abs = std::sqrt(aden);
    g.err = std::sqrt(num);
    g.tol = 1e-5 * (n_ref >= 1e-3 * n_abs ? n_ref : n_abs) + 1e-37 * std::sqrt(static_cast<double>(ref.size()));
    g.rel = n_ref > 0 ? g.err / n_ref : 0;
    g.cancels = n_ref < 1e-3 * n_abs;
    g.subnormal = n_ref < 1e-37 * std::sqrt(static_cast<double>(ref.size()));
  } else {
    g.err = max_err;
    g.tol = 2 * naive_err + atol;
  }
  return g;
}

struct Tensors {
  DevBuf q, k, v, o, dout, lse, dq, dk, dv, sd;
};

std::vector<unsigned char> download(const DevBuf& b) {
  std::vector<unsigned char> h(b.n);
  CK(cudaMemcpy(h.data(), b.p, b.n, cudaMemcpyDeviceToHost));
  return h;
}

// Everything one case keeps between its GPU part and its CPU check.
struct CaseData {
  Case c;
  HostTensor q, k, v, dout, o;
  std::vector<unsigned char> first[3], sd_raw, lse_raw;
  CaseResult res;
  bool gpu_ok = false;
};

// GPU part: inputs, forward, backward (three times when deterministic), downloads.
void run_gpu(CaseData& cd, uint64_t seed, cudaStream_t stream, const BwdFn& bwd) {
  const Case& c = cd.c;
  CaseResult& res = cd.res;
  HostTensor &q = cd.q, &k = cd.k, &v = cd.v, &dout = cd.dout, &o = cd.o;
  std::vector<unsigned char>* first = cd.first;
  Rng rng(seed);
  q.init(c.dtype, c.layout, c.B, c.Nq, c.H, c.D);
  k.init(c.dtype, c.layout, c.B, c.Nk, c.Hkv, c.D);
  v.init(c.dtype, c.layout, c.B, c.Nk, c.Hkv, c.D);
  dout.init(c.dtype, c.layout, c.B, c.Nq, c.H, c.D);
  o.init(c.dtype, c.layout, c.B, c.Nq, c.H, c.D);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  dout.fill_random(rng);
  const size_t lse_elems = static_cast<size_t>(c.B) * c.H * c.Nq;

  Tensors d;
  d.q.alloc(q.data.size());
  d.k.alloc(k.data.size());
  d.v.alloc(v.data.size());
  d.dout.alloc(dout.data.size());
  d.o.alloc(q.data.size());
  d.lse.alloc(lse_elems * 4);
  d.dq.alloc(q.data.size());
  d.dk.alloc(k.data.size());
  d.dv.alloc(k.data.size());
  d.sd.alloc(lse_elems * 4);
  CK(cudaMemcpy(d.q.p, q.data.data(), q.data.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.k.p, k.data.data(), k.data.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.v.p, v.data.data(), v.data.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.dout.p, dout.data.data(), dout.data.size(), cudaMemcpyHostToDevice));
  CK(cudaMemsetAsync(d.o.p, 0xFF, d.o.n, stream));
  CK(cudaMemsetAsync(d.lse.p, 0xFF, d.lse.n, stream));

  fa_fwd_params fp = make_fwd_params(c);
  fp.q = d.q.p, fp.k = d.k.p, fp.v = d.v.p, fp.o = d.o.p, fp.lse = static_cast<float*>(d.lse.p);
  fa_status st = fa_fwd_cuda(&fp, stream);
  if (st != FA_OK) {
    res.why = std::string("forward status ") + fa_status_name(st) + ": " + fa_last_error();
    return;
  }

  fa_bwd_params bp = make_bwd_params(c);
  bp.dout = d.dout.p, bp.q = d.q.p, bp.k = d.k.p, bp.v = d.v.p, bp.o = d.o.p;
  bp.lse = static_cast<const float*>(d.lse.p);
  bp.dq = d.dq.p, bp.dk = d.dk.p, bp.dv = d.dv.p;
  bp.softmax_d = static_cast<float*>(d.sd.p);
  DevBuf ws;
  if (c.user_ws) {
    const size_t n = fa_bwd_workspace_size(&bp);
    ws.alloc(n);
    CK(cudaMemsetAsync(ws.p, 0xFF, ws.n, stream));  // stale garbage must not matter
    bp.workspace = ws.p;
  }
  const int runs = c.det ? 3 : 1;
  for (int run = 0; run < runs; ++run) {
    CK(cudaMemsetAsync(d.dq.p, 0xFF, d.dq.n, stream));
    CK(cudaMemsetAsync(d.dk.p, 0xFF, d.dk.n, stream));
    CK(cudaMemsetAsync(d.dv.p, 0xFF, d.dv.n, stream));
    CK(cudaMemsetAsync(d.sd.p, 0xFF, d.sd.n, stream));
    st = bwd(&bp, stream);
    if (st != FA_OK) {
      res.why = std::string("backward status ") + fa_status_name(st) + ": " + fa_last_error();
      return;
    }
    CK(cudaStreamSynchronize(stream));
    CK(cudaGetLastError());
    if (run == 0) {
      first[0] = download(d.dq);
      first[1] = download(d.dk);
      first[2] = download(d.dv);
    } else {
      if (download(d.dq) != first[0] || download(d.dk) != first[1] || download(d.dv) != first[2])
        res.why += "deterministic run " + std::to_string(run) + " differs; ";
    }
  }
  o.read_values(download(d.o));
  cd.sd_raw = download(d.sd);
  cd.lse_raw = download(d.lse);
  cd.gpu_ok = true;
}

// CPU part: float64 reference and comparisons.
void check_case(CaseData& cd, bool serial) {
  const Case& c = cd.c;
  CaseResult& res = cd.res;
  const HostTensor &q = cd.q, &k = cd.k, &v = cd.v, &dout = cd.dout, &o = cd.o;
  const std::vector<unsigned char>* first = cd.first;
  const std::vector<unsigned char>& sd_raw = cd.sd_raw;
  RefGrads ref;
  reference(c, q, k, v, dout, ref, serial);
  double big = 1.0;
  for (double x : ref.dq) big = std::max(big, std::fabs(x));
  for (double x : ref.dk) big = std::max(big, std::fabs(x));
  for (double x : ref.dv) big = std::max(big, std::fabs(x));
  const double atol = 1e-5 * big;
  const GradCheck gq = compare(c, q, first[0], ref.dq, ref.aq, ref.nq, atol);
  const GradCheck gk = compare(c, k, first[1], ref.dk, ref.ak, ref.nk, atol);
  const GradCheck gv = compare(c, v, first[2], ref.dv, ref.av, ref.nv, atol);

  // softmax_d vs float64 rowsum(dO * o) of the GPU's o.
  size_t d_bad = 0;
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.H; ++h)
      for (int i = 0; i < c.Nq; ++i) {
        const float* oi = &o.val[o.dense(b, i, h)];
        const float* di = &dout.val[dout.dense(b, i, h)];
        double s = 0, sa = 0;
        for (int x = 0; x < c.D; ++x) {
          s += static_cast<double>(oi[x]) * di[x];
          sa += std::fabs(static_cast<double>(oi[x]) * di[x]);
        }
        float got;
        memcpy(&got, &sd_raw[4 * ((static_cast<size_t>(b) * c.H + h) * c.Nq + i)], 4);
        const double tol = 1e-5 * sa + 1e-30;
        const double e = std::fabs(got - s);
        if (!(e <= tol)) ++d_bad;
        res.d_err = std::max(res.d_err, std::isfinite(e) ? e / tol : INFINITY);
      }

  const GradCheck* gs[3] = {&gq, &gk, &gv};
  const char* names[3] = {"dq", "dk", "dv"};
  bool ok = res.why.empty() && d_bad == 0;
  for (int i = 0; i < 3; ++i) {
    const GradCheck& g = *gs[i];
    res.ratio = std::max(res.ratio, g.tol > 0 ? g.err / g.tol : (g.err > 0 ? INFINITY : 0));
    if (!g.cancels && !g.subnormal) res.rel = std::max(res.rel, g.rel);
    if (g.nan) res.why += std::string(names[i]) + " non-finite; ";
    if (!(g.err <= g.tol)) {
      char buf[128];
      snprintf(buf, sizeof buf, "%s err %.3g > tol %.3g; ", names[i], g.err, g.tol);
      res.why += buf;
    }
    if (g.stray) res.why += std::string(names[i]) + " " + std::to_string(g.stray) + " writes outside; ";
    ok = ok && !g.nan && g.err <= g.tol && g.stray == 0;
  }
  if (d_bad) res.why += std::to_string(d_bad) + " bad softmax_d; ";
  res.ok = ok;
  // The forward's lse error (our input) for the record: P = exp(S - lse) inherits it directly.
  for (size_t i = 0; i < ref.lse.size(); ++i) {
    float got;
    memcpy(&got, &cd.lse_raw[4 * i], 4);
    if (std::isfinite(ref.lse[i])) res.lse_err = std::max(res.lse_err, std::fabs(got - ref.lse[i]));
  }
  if (!ok) {
    char buf[64];
    snprintf(buf, sizeof buf, "(forward lse err %.3g)", res.lse_err);
    res.why += buf;
  }
}

// One case end to end (GPU run, reference, comparison); used by the tuning build's variant checks.
[[maybe_unused]] CaseResult run_case(const Case& c, uint64_t seed, cudaStream_t stream, const BwdFn& bwd) {
  CaseData cd;
  cd.c = c;
  run_gpu(cd, seed, stream, bwd);
  if (cd.gpu_ok) check_case(cd, false);
  return cd.res;
}

std::string describe(const Case& c) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s B%d H%d/%d Nq%d Nk%d D%d %s %s scale%.4g%s%s", dname(c.dtype), c.B, c.H, c.Hkv, c.Nq,
           c.Nk, c.D, c.causal ? "causal" : "full", lname(c.layout), c.scale, c.det ? " det" : "",
           c.user_ws ? " ws" : "");
  return buf;
}

std::vector<Case> make_cases(int n_random, uint64_t seed, bool small) {
  std::vector<Case> cs;
  auto add = [&](fa_dtype t, int B, int H, int Hkv, int Nq, int Nk, int D, int causal, int layout, int det = 0,
                 float scale = 0, int ws = 0) {
    cs.push_back({t, B, H, Hkv, Nq, Nk, D, causal, layout, scale != 0 ? scale : 1.f / std::sqrt((float)D), det, ws});
  };
  const fa_dtype types[3] = {FA_FLOAT16, FA_BFLOAT16, FA_FLOAT32};
  if (small) {
    add(FA_FLOAT16, 1, 2, 1, 129, 200, 64, 1, BSHD);
    add(FA_BFLOAT16, 1, 2, 2, 77, 65, 128, 0, GAPPED);
    add(FA_FLOAT16, 1, 2, 1, 70, 33, 256, 1, BHSD);
    add(FA_FLOAT16, 1, 2, 1, 100, 140, 128, 1, BSHD, 1);
    add(FA_BFLOAT16, 1, 1, 1, 65, 64, 40, 0, BHSD, 1, 0, 1);
    add(FA_FLOAT16, 1, 2, 2, 33, 100, 200, 0, GAPPED, 1);
    add(FA_FLOAT32, 1, 2, 1, 100, 90, 72, 1, GAPPED);
    add(FA_FLOAT32, 1, 1, 1, 33, 70, 256, 0, BSHD, 1);
    add(FA_FLOAT32, 1, 2, 2, 40, 50, 128, 1, BHSD, 1);
    add(FA_FLOAT32, 1, 2, 1, 64, 64, 128, 0, BSHD);
    return cs;
  }
  for (fa_dtype t : types) {
    add(t, 1, 4, 1, 1, 1000, 128, 0, BSHD);            // decode-like, MQA
    add(t, 2, 4, 2, 1, 500, 64, 1, BHSD, 1);           // decode, causal, deterministic
    add(t, 1, 2, 2, 129, 7, 64, 1, BSHD);              // causal Nq > Nk: rows with no key
    add(t, 1, 2, 2, 129, 7, 64, 1, BSHD, 1);           // same, deterministic
    add(t, 1, 2, 1, 300, 700, 256, 1, GAPPED);         // causal Nq < Nk
    add(t, 2, 3, 3, 500, 500, 128, 1, BSHD, 0, 0, 1);  // caller workspace
    add(t, 1, 2, 2, 5, 0, 32, 0, BSHD);                // no keys at all: dq = 0
    add(t, 1, 2, 2, 5, 0, 32, 0, BSHD, 1);             // same, deterministic
    add(t, 1, 2, 1, 0, 77, 64, 0, BHSD);               // no queries: dk = dv = 0
    add(t, 1, 2, 1, 127, 129, 80, 0, BSHD, 0, -0.3f);  // negative scale
    add(t, 1, 2, 1, 65, 63, 48, 1, BHSD, 0, 1e-38f);   // ~zero scale: uniform attention
    add(t, 1, 1, 1, 1, 1, 8, 1, BSHD);
    add(t, 1, 8, 1, 300, 300, 160, 1, BSHD, 1);        // MQA, deterministic
  }
  add(FA_FLOAT32, 1, 2, 1, 64, 2048, 256, 0, BSHD, 0, 2.f / 16.f);  // long sums, large scale
  add(FA_FLOAT32, 1, 1, 1, 2048, 64, 128, 0, BHSD, 0, 2.f / std::sqrt(128.f));
  add(FA_FLOAT32, 2, 4, 4, 7, 1000, 248, 1, GAPPED, 1, 2.f / std::sqrt(248.f));
  add(FA_FLOAT32, 1, 2, 1, 300, 300, 256, 1, BSHD, 1, 2.f / 16.f);
  const int lens[] = {1, 7, 16, 33, 64, 127, 128, 129, 200, 255, 256, 257, 300, 384, 1000};
  const int n_lens = sizeof(lens) / sizeof(lens[0]);
  Rng rng(seed);
  for (int i = 0; i < n_random; ++i) {
    Case c;
    c.dtype = types[i % 3];
    random_shape(c, rng, i, lens, n_lens);
    c.det = rng.pick(4) == 0;
    c.user_ws = rng.pick(5) == 0;
    shrink_case(c, 2e7);
    cs.push_back(c);
  }
  return cs;
}

int check_error_paths() {
  StatusExpect expect;
  DevBuf buf;
  buf.alloc(1 << 20);
  Case c{FA_FLOAT16, 1, 2, 1, 64, 64, 64, 0, BSHD, 0.125f, 0, 0};
  fa_bwd_params p = make_bwd_params(c);
  p.dout = p.q = p.k = p.v = p.o = buf.p;
  p.dq = p.dk = p.dv = buf.p;
  p.lse = static_cast<float*>(buf.p);
  fa_bwd_params x = p;
  x.head_dim = 12;
  expect("head_dim 12 -> UNSUPPORTED", fa_bwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  x = p;
  x.head_dim = 264;
  expect("head_dim 264 -> UNSUPPORTED", fa_bwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  x = p;
  x.heads = 3;
  x.heads_k = 2;
  expect("heads 3 / heads_k 2 -> INVALID", fa_bwd_cuda(&x, nullptr), FA_ERR_INVALID);
  x = p;
  x.dq_str.row = 68;
  expect("dq row stride 68 (fp16) -> UNSUPPORTED", fa_bwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  x = p;
  x.dk = static_cast<char*>(buf.p) + 2;
  expect("dk misaligned -> UNSUPPORTED", fa_bwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  x = p;
  x.dtype = static_cast<fa_dtype>(7);
  expect("dtype 7 -> INVALID", fa_bwd_cuda(&x, nullptr), FA_ERR_INVALID);
  expect("NULL params -> INVALID", fa_bwd_cuda(nullptr, nullptr), FA_ERR_INVALID);
  x = p;
  x.lse = nullptr;
  expect("lse NULL -> INVALID", fa_bwd_cuda(&x, nullptr), FA_ERR_INVALID);
  x = p;
  x.seqlen_q = 0;
  x.seqlen_k = 0;
  expect("seqlen_q = seqlen_k = 0 -> OK (nothing to do)", fa_bwd_cuda(&x, nullptr), FA_OK);
  x = p;
  x.workspace = static_cast<char*>(buf.p) + 16;
  expect("workspace not 256-byte aligned -> UNSUPPORTED", fa_bwd_cuda(&x, nullptr), FA_ERR_UNSUPPORTED);
  const bool avail = fa_cuda_backward_available() == 1;
  expect.check("fa_cuda_backward_available() == 1", avail);
  fa_bwd_params w = p;
  w.deterministic = 0;
  const size_t ws_a = fa_bwd_workspace_size(&w);
  w.deterministic = 1;
  const size_t ws_d = fa_bwd_workspace_size(&w);
  // B1 H2 Nq64 D64: lse2 + dsum = 2 * round256(2 * 128 * 4) = 2048; dq_acc = 2 * 128 * 64 * 4 = 65536
  // (rows padded to 128, columns to the tile width 64).
  const bool sizes = ws_a == 2048 + 65536 && ws_d == 2048;
  printf("  %-58s %s (%zu, %zu)\n", "fa_bwd_workspace_size (atomic 67584, deterministic 2048)", sizes ? "ok" : "FAIL",
         ws_a, ws_d);
  if (!sizes) ++expect.bad;
  CK(cudaDeviceSynchronize());
  return expect.bad;
}

// ---- training-step sanity check -----------------------------------------------------------------------
// Toy objective: L = 0.5 * ||attn(Q, K, V) - target||^2 with dO = O - target; five SGD steps on Q, K, V
// (host side) must each lower L.
int training_check(fa_dtype dt, cudaStream_t stream) {
  const int B = 1, H = 2, Hkv = 1, N = 96, D = 64;
  Case c{dt, B, H, Hkv, N, N, D, 1, BSHD, 1.f / 8.f, 0, 0};
  Rng rng(777);
  HostTensor q, k, v, tgt;
  q.init(dt, BSHD, B, N, H, D);
  k.init(dt, BSHD, B, N, Hkv, D);
  v.init(dt, BSHD, B, N, Hkv, D);
  tgt.init(dt, BSHD, B, N, H, D);
  q.fill_random(rng), k.fill_random(rng), v.fill_random(rng), tgt.fill_random(rng);
  DevBuf dq_, dk_, dv_, o_, lse_, do_, gq, gk, gv;
  dq_.alloc(q.data.size()), dk_.alloc(k.data.size()), dv_.alloc(v.data.size());
  o_.alloc(q.data.size()), do_.alloc(q.data.size()), lse_.alloc(B * H * N * 4);
  gq.alloc(q.data.size()), gk.alloc(k.data.size()), gv.alloc(v.data.size());
  const float lr = 0.05f;
  double prev = INFINITY;
  int bad = 0;
  printf("  %s loss:", dname(dt));
  for (int step = 0; step <= 5; ++step) {
    CK(cudaMemcpy(dq_.p, q.data.data(), q.data.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dk_.p, k.data.data(), k.data.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dv_.p, v.data.data(), v.data.size(), cudaMemcpyHostToDevice));
    fa_fwd_params fp = make_fwd_params(c);
    fp.q = dq_.p, fp.k = dk_.p, fp.v = dv_.p, fp.o = o_.p, fp.lse = static_cast<float*>(lse_.p);
    if (fa_fwd_cuda(&fp, stream) != FA_OK) return 1;
    CK(cudaStreamSynchronize(stream));
    std::vector<unsigned char> oraw = download(o_);
    HostTensor o, g;
    o.init(dt, BSHD, B, N, H, D);
    g.init(dt, BSHD, B, N, H, D);
    o.read_values(oraw);
    double loss = 0;
    for (size_t i = 0; i < o.val.size(); ++i) {
      const double e = static_cast<double>(o.val[i]) - tgt.val[i];
      loss += 0.5 * e * e;
      store_elem(dt, g.data.data(), i, static_cast<float>(e));  // bshd dense: offsets match
    }
    printf(" %.2f", loss);
    if (!(loss < prev)) ++bad;
    prev = loss;
    if (step == 5) break;
    CK(cudaMemcpy(do_.p, g.data.data(), g.data.size(), cudaMemcpyHostToDevice));
    fa_bwd_params bp = make_bwd_params(c);
    bp.dout = do_.p, bp.q = dq_.p, bp.k = dk_.p, bp.v = dv_.p, bp.o = o_.p, bp.lse = static_cast<float*>(lse_.p);
    bp.dq = gq.p, bp.dk = gk.p, bp.dv = gv.p;
    if (fa_bwd_cuda(&bp, stream) != FA_OK) return 1;
    CK(cudaStreamSynchronize(stream));
    HostTensor* ts[3] = {&q, &k, &v};
    const DevBuf* gs[3] = {&gq, &gk, &gv};
    for (int i = 0; i < 3; ++i) {
      HostTensor gt;
      gt.init(dt, BSHD, ts[i]->B, ts[i]->N, ts[i]->H, ts[i]->D);
      gt.read_values(download(*gs[i]));
      for (size_t j = 0; j < gt.val.size(); ++j) {
        const float x = round_to(dt, ts[i]->val[j] - lr * gt.val[j]);
        ts[i]->val[j] = x;
        store_elem(dt, ts[i]->data.data(), j, x);
      }
    }
  }
  printf("  %s\n", bad ? "FAIL (loss did not decrease)" : "ok");
  return bad;
}

// ---- timing ---------------------------------------------------------------------------------------
struct BenchShape {
  fa_dtype dtype;
  int D, N, causal;
  int layout;
  int det;
};

double bwd_flops(int B, int H, int N, int D, int causal) {
  double f = 2.5 * 4.0 * B * H * static_cast<double>(N) * N * D;
  return causal ? f / 2 : f;
}

// Median ms of `reps` backward calls on one input set (the backward's working set is far above L2).
double time_bwd(const BenchShape& s, int reps, cudaStream_t stream, const BwdFn& bwd, int B_override = 0,
                int H_override = 0, double* flops_out = nullptr) {
  const int B = B_override ? B_override : 16384 / s.N;
  const int H = H_override ? H_override : (s.D == 256 ? 16 : 2048 / s.D);
  Case c{s.dtype, B, H, H, s.N, s.N, s.D, s.causal, s.layout, 1.f / std::sqrt((float)s.D), s.det, 0};
  const size_t n = static_cast<size_t>(B) * s.N * H * s.D;
  const size_t bytes = n * elem_size(s.dtype);
  DevBuf q, k, v, o, dout, lse, dq, dk, dv;
  DevBuf* ins[4] = {&q, &k, &v, &dout};
  for (int i = 0; i < 4; ++i) {
    ins[i]->alloc(bytes);
    fill_normal_kernel<<<1024, 256, 0, stream>>>(ins[i]->p, n, static_cast<int>(s.dtype), 1000 + i);
    CK(cudaGetLastError());
  }
  o.alloc(bytes), dq.alloc(bytes), dk.alloc(bytes), dv.alloc(bytes);
  lse.alloc(static_cast<size_t>(B) * H * s.N * 4);
  fa_fwd_params fp = make_fwd_params(c);
  fp.q = q.p, fp.k = k.p, fp.v = v.p, fp.o = o.p, fp.lse = static_cast<float*>(lse.p);
  if (fa_fwd_cuda(&fp, stream) != FA_OK) {
    fprintf(stderr, "bench forward failed: %s\n", fa_last_error());
    exit(3);
  }
  fa_bwd_params bp = make_bwd_params(c);
  bp.dout = dout.p, bp.q = q.p, bp.k = k.p, bp.v = v.p, bp.o = o.p, bp.lse = static_cast<float*>(lse.p);
  bp.dq = dq.p, bp.dk = dk.p, bp.dv = dv.p;
  auto launch = [&] {
    const fa_status st = bwd(&bp, stream);
    if (st != FA_OK) {
      fprintf(stderr, "bench launch failed: %s %s\n", fa_status_name(st), fa_last_error());
      exit(3);
    }
  };
  for (int i = 0; i < 3; ++i) launch();
  std::vector<cudaEvent_t> ev(2 * reps);
  for (auto& e : ev) CK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(ev[2 * i], stream));
    launch();
    CK(cudaEventRecord(ev[2 * i + 1], stream));
  }
  CK(cudaStreamSynchronize(stream));
  CK(cudaGetLastError());
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) CK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  std::sort(ms.begin(), ms.end());
  if (flops_out) *flops_out = bwd_flops(B, H, s.N, s.D, s.causal);
  return ms[reps / 2];
}

#ifdef FA_TUNE
// Builds BwdArgs like fa_bwd_cuda does for one variant's main kernel and times it alone (the caller
// ran fa_bwd_cuda once with a workspace, so lse2 / dsum are valid). Only the main kernel.
template <class Tr>
BwdFn variant_main() {
  return [](const fa_bwd_params* p, cudaStream_t s) {
    using T = typename Tr::T;
    const fa_dtype want = std::is_same<T, __half>::value ? FA_FLOAT16 : std::is_same<T, float>::value ? FA_FLOAT32
                                                                                                      : FA_BFLOAT16;
    if (p->head_dim > Tr::kHeadDim || p->dtype != want || p->workspace == nullptr) return FA_ERR_UNSUPPORTED;
    fa::cuda::BwdArgs a{};
    a.q = p->q, a.k = p->k, a.v = p->v, a.o = p->o, a.dout = p->dout, a.dq = p->dq, a.dk = p->dk, a.dv = p->dv;
    a.lse = p->lse;
    a.q_batch = p->q_str.batch, a.q_row = p->q_str.row, a.q_head = p->q_str.head;
    a.k_batch = p->k_str.batch, a.k_row = p->k_str.row, a.k_head = p->k_str.head;
    a.v_batch = p->v_str.batch, a.v_row = p->v_str.row, a.v_head = p->v_str.head;
    a.o_batch = p->o_str.batch, a.o_row = p->o_str.row, a.o_head = p->o_str.head;
    a.do_batch = p->do_str.batch, a.do_row = p->do_str.row, a.do_head = p->do_str.head;
    a.dq_batch = p->dq_str.batch, a.dq_row = p->dq_str.row, a.dq_head = p->dq_str.head;
    a.dk_batch = p->dk_str.batch, a.dk_row = p->dk_str.row, a.dk_head = p->dk_str.head;
    a.dv_batch = p->dv_str.batch, a.dv_row = p->dv_str.row, a.dv_head = p->dv_str.head;
    a.batch = p->batch, a.heads = p->heads, a.heads_k = p->heads_k;
    a.seqlen_q = p->seqlen_q, a.seqlen_k = p->seqlen_k, a.head_dim = p->head_dim;
    a.group = p->heads / p->heads_k;
    a.nq_pad = (p->seqlen_q + 127) / 128 * 128;
    a.causal = p->causal;
    a.scale = p->scale;
    a.scale_log2 = p->scale * 1.4426950408889634f;
    a.p_scale = a.scale;
    a.p_scale_log2 = a.scale_log2;
    a.window_left = -1;
    a.window_right = p->causal ? 0 : -1;
    a.lse_batch = int64_t(p->heads) * p->seqlen_q;
    a.lse_head = p->seqlen_q;
    a.ws_batch = int64_t(p->heads) * a.nq_pad;
    a.ws_head = a.nq_pad;
    const size_t rows = static_cast<size_t>(p->batch) * p->heads * a.nq_pad * 4;
    const size_t rb = (rows + 255) & ~static_cast<size_t>(255);
    char* w = static_cast<char*>(p->workspace);
    a.lse2 = reinterpret_cast<float*>(w);
    a.dsum = reinterpret_cast<float*>(w + rb);
    a.dq_acc = reinterpret_cast<float*>(w + 2 * rb);
    a.dql = fa::cuda::dq_layout_of<Tr>();
    return p->deterministic ? fa::cuda::launch_bwd_det<Tr>(a, s) : fa::cuda::launch_bwd_atomic<Tr>(a, s);
  };
}
struct Variant {
  const char* name;
  fa_dtype dtype;
  int width;
  BwdFn fn;
  bool timing_only;  // leave-one-out variants (wrong dQ): not checked
  fa::cuda::DqLayout layout;  // where the variant's main kernel puts dQ
};
// The accumulator placement the API's default kernel uses for (dtype, width W).
template <typename T>
fa::cuda::DqLayout api_layout_t(int W) {
  using namespace fa::cuda;
  if (W == 64) return dq_layout_of<typename BwdConfig<T, 64>::Traits>();
  if (W == 128) return dq_layout_of<typename BwdConfig<T, 128>::Traits>();
  return dq_layout_of<typename BwdConfig<T, 256>::Traits>();
}
fa::cuda::DqLayout api_layout(fa_dtype dt, int W) {
  return dt == FA_FLOAT32 ? api_layout_t<float>(W) : api_layout_t<__half>(W);
}
std::vector<Variant> tune_variants() {
  using namespace fa::cuda;
  using H = __half;
  std::vector<Variant> v;
#define FA_V(W, ...) \
  v.push_back({#__VA_ARGS__, FA_FLOAT16, W, variant_main<__VA_ARGS__>(), false, dq_layout_of<__VA_ARGS__>()})
#define FA_VT(W, ...) \
  v.push_back({#__VA_ARGS__, FA_FLOAT16, W, variant_main<__VA_ARGS__>(), true, dq_layout_of<__VA_ARGS__>()})
#define FA_V32(W, ...) \
  v.push_back({#__VA_ARGS__, FA_FLOAT32, W, variant_main<__VA_ARGS__>(), false, dq_layout_of<__VA_ARGS__>()})
  // Options (bwd_traits.cuh): 1 stagger, 2 no reductions (timing; the dQ product is then dead code),
  // 4 no dQ (timing), 8 dQ between dV and dK, 16 dQ in two column passes, 32 scalar reductions,
  // 128 bulk reductions from a shared-memory staging tile (sm_90), 256 dQ product kept but no
  // reductions (timing).
  // Run 7 (fragment-order dQ adopted): the defaults, the run-4 defaults (row-major dQ), the
  // leave-one-out reference and the single-buffered fallbacks (sm_80), forced here so that they are
  // checked on this GPU too.
  FA_V(128, BwdTraits<H, 128, 64, 128, 8, 2, 4, 2, false, 2, 512>);  // the default
  FA_V(128, BwdTraits<H, 128, 64, 128, 8, 2, 4, 2>);
  FA_VT(128, BwdTraits<H, 128, 64, 128, 8, 2, 4, 2, false, 2, 256>);
  FA_V(128, BwdTraits<H, 128, 64, 128, 8, 2, 4, 2, false, 1, 512>);
  FA_V(64, BwdTraits<H, 64, 128, 128, 8, 4, 4, 4, false, 2, 512>);  // the default
  FA_V(64, BwdTraits<H, 64, 128, 128, 8, 2, 4, 4>);
  FA_V(64, BwdTraits<H, 64, 128, 128, 8, 4, 4, 4, false, 1, 512>);
  FA_V(256, BwdTraits<H, 256, 64, 64, 8, 4, 2, 2, false, 2, 1536>);  // the default
  FA_V(256, BwdTraits<H, 256, 64, 64, 8, 4, 2, 2>);
  FA_VT(256, BwdTraits<H, 256, 64, 64, 8, 4, 2, 2, false, 2, 256>);
  FA_V(256, BwdTraits<H, 256, 64, 64, 8, 4, 2, 2, false, 1, 1536>);
  FA_V32(128, BwdTraits<float, 128, 32, 64, 8, 2, 4, 2>);  // the default
#undef FA_V
#undef FA_VT
#undef FA_V32
  return v;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  bool small = false, check = true, bench = true;
  int n_random = 240, reps = 20;
  int only_width = 0;                // --width W: variants of one width only
  int prof_d = 0, prof_n = 0, prof_c = 0;  // --prof D N causal: two API calls (for ncu), nothing else
  uint64_t seed = 20240612;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--small") small = true, bench = false;
    else if (a == "--check-only") bench = false;
    else if (a == "--bench-only") check = false;
    else if (a == "--cases" && i + 1 < argc) n_random = atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = strtoull(argv[++i], nullptr, 10);
    else if (a == "--reps" && i + 1 < argc) reps = atoi(argv[++i]);
    else if (a == "--width" && i + 1 < argc) only_width = atoi(argv[++i]);
    else if (a == "--prof" && i + 3 < argc) {
      prof_d = atoi(argv[++i]), prof_n = atoi(argv[++i]), prof_c = atoi(argv[++i]);
      check = bench = false;
    }
    else {
      printf("usage: bwd_check [--small] [--check-only] [--bench-only] [--cases N] [--seed S] [--reps N]\n"
             "                 [--width W (tuning build: variants of one width)] [--prof D N causal]\n");
      return a == "--help" ? 0 : 1;
    }
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int failures = 0;
  (void)only_width;
  if (prof_d) {
    double f = 0;
    const double ms = time_bwd({FA_FLOAT16, prof_d, prof_n, prof_c, BHSD, 0}, 1, stream, api_bwd(), 0, 0, &f);
    printf("prof fp16 D%d N%d %s: %.3f ms %.1f TFLOP/s\n", prof_d, prof_n, prof_c ? "causal" : "full", ms, f / ms * 1e-9);
  }

  if (check) {
    printf("error paths:\n");
    failures += check_error_paths();
    const std::vector<Case> cases = make_cases(n_random, seed, small);
    int passed = 0, det_cases = 0;
    int per_type_pass[3] = {0, 0, 0}, per_type_total[3] = {0, 0, 0};
    double worst_ratio[3] = {0, 0, 0}, worst_d = 0, worst_rel32 = 0;
    // GPU parts in order, in batches; the CPU references of a batch run in parallel, one case per thread.
    std::vector<CaseResult> results(cases.size());
    constexpr size_t kBatch = 48;
    for (size_t b0 = 0; b0 < cases.size(); b0 += kBatch) {
      const size_t nb = std::min(kBatch, cases.size() - b0);
      std::vector<CaseData> batch(nb);
      for (size_t j = 0; j < nb; ++j) {
        batch[j].c = cases[b0 + j];
        run_gpu(batch[j], seed * 1000003ull + b0 + j, stream, api_bwd());
      }
      parallel_for(static_cast<int>(nb), [&](int j) {
        if (batch[j].gpu_ok) check_case(batch[j], true);
      });
      for (size_t j = 0; j < nb; ++j) results[b0 + j] = batch[j].res;
    }
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      const CaseResult& r = results[i];
      const int ti = c.dtype == FA_FLOAT16 ? 0 : c.dtype == FA_BFLOAT16 ? 1 : 2;
      ++per_type_total[ti];
      det_cases += c.det;
      if (r.ok) {
        ++passed;
        ++per_type_pass[ti];
      } else {
        ++failures;
      }
      worst_ratio[ti] = std::max(worst_ratio[ti], r.ratio);
      worst_d = std::max(worst_d, r.d_err);
      if (c.dtype == FA_FLOAT32) worst_rel32 = std::max(worst_rel32, r.rel);
      if (!r.ok || small)
        printf("  %s case %zu: %s  err/tol %.3f %s\n", r.ok ? "ok  " : "FAIL", i, describe(c).c_str(), r.ratio,
               r.why.c_str());
    }
    printf("correctness: %d / %zu passed (fp16 %d/%d, bf16 %d/%d, fp32 %d/%d; %d deterministic x3 bit-identical); "
           "worst err/tol fp16 %.3f bf16 %.3f fp32 %.3f (fp32 worst relative L2 %.3g); worst softmax_d err/tol %.3g\n",
           passed, cases.size(), per_type_pass[0], per_type_total[0], per_type_pass[1], per_type_total[1],
           per_type_pass[2], per_type_total[2], det_cases, worst_ratio[0], worst_ratio[1], worst_ratio[2], worst_rel32,
           worst_d);
    if (!small) {
      printf("training-step sanity check (5 SGD steps, causal GQA, loss must fall each step):\n");
      failures += training_check(FA_FLOAT16, stream);
      failures += training_check(FA_FLOAT32, stream);
    }
  }

  if (bench && !only_width) {
    printf("timing (median of %d; B = 16384/N, H = 2048/D or 16 for D 256; TFLOP/s = 2.5 x fwd FLOPs):\n", reps);
    printf("  %-5s %4s %6s %-6s %9s %8s %9s %8s\n", "dtype", "D", "N", "mask", "bhsd ms", "TFLOP/s", "bshd ms",
           "TFLOP/s");
    const fa_dtype lowp[2] = {FA_FLOAT16, FA_BFLOAT16};
    for (fa_dtype t : lowp)
      for (int D : {64, 128, 256})
        for (int N : {1024, 4096, 16384})
          for (int causal : {0, 1}) {
            double f = 0;
            const int r = N == 16384 ? std::max(5, reps / 3) : reps;
            const double ms = time_bwd({t, D, N, causal, BHSD, 0}, r, stream, api_bwd(), 0, 0, &f);
            if (D == 128) {  // layout makes little difference: bshd for one width only
              const double ms2 = time_bwd({t, D, N, causal, BSHD, 0}, r, stream, api_bwd(), 0, 0, &f);
              printf("  %-5s %4d %6d %-6s %9.3f %8.1f %9.3f %8.1f\n", dname(t), D, N, causal ? "causal" : "full", ms,
                     f / ms * 1e-9, ms2, f / ms2 * 1e-9);
            } else {
              printf("  %-5s %4d %6d %-6s %9.3f %8.1f\n", dname(t), D, N, causal ? "causal" : "full", ms, f / ms * 1e-9);
            }
          }
    printf("deterministic mode (fp16, bhsd):\n");
    for (int D : {64, 128, 256})
      for (int causal : {0, 1}) {
        double f = 0;
        const double ms = time_bwd({FA_FLOAT16, D, 4096, causal, BHSD, 0}, reps, stream, api_bwd(), 0, 0, &f);
        const double md = time_bwd({FA_FLOAT16, D, 4096, causal, BHSD, 1}, reps, stream, api_bwd(), 0, 0, &f);
        printf("  fp16 D%-4d N4096 %-6s atomic %7.3f ms (%5.1f TFLOP/s)  deterministic %7.3f ms (%5.1f)  x%.2f\n", D,
               causal ? "causal" : "full", ms, f / ms * 1e-9, md, f / md * 1e-9, md / ms);
      }
    printf("fp32 (3xTF32), bhsd:\n");
    for (int D : {64, 128, 256})
      for (int causal : {0, 1}) {
        double f = 0;
        const double ms = time_bwd({FA_FLOAT32, D, 1024, causal, BHSD, 0}, std::max(5, reps / 2), stream, api_bwd(),
                                   0, 0, &f);
        printf("  fp32 D%-4d N1024 %-6s %8.3f ms %6.1f TFLOP/s\n", D, causal ? "causal" : "full", ms, f / ms * 1e-9);
      }
  }

#ifdef FA_TUNE
  if (bench) {
    printf("main-kernel variants (fp16 bhsd, main kernel alone; each first checked on 2 shapes):\n");
    for (const Variant& v : tune_variants()) {
      // Correctness through the variant: run the API once (workspace: lse2, dsum, zeroed dq_acc),
      // then the variant's main kernel must reproduce dk / dv (dq is not converted here).
      if (only_width && v.width != only_width) continue;
      bool ok = true;
      for (int causal : {0, 1}) {
        if (v.timing_only) break;
        Case c{v.dtype, 1, 2, 1, 300, 333, v.width, causal, BSHD, 1.f / std::sqrt((float)v.width), 0, 1};
        const BwdFn fn = v.fn;
        double dq_err = 0;
        const CaseResult r = run_case(c, 99 + causal, stream, [&](const fa_bwd_params* p, cudaStream_t s) {
          fa_status st = fa_bwd_cuda(p, s);  // fills workspace, writes dq/dk/dv
          if (st != FA_OK) return st;
          // The default kernel's fp32 dQ accumulator (left in the workspace) against the variant's,
          // recomputed from zero: the variant's dQ reductions are checked here, its dk/dv by run_case.
          const int nq_pad = (p->seqlen_q + 127) / 128 * 128;
          const size_t rows = static_cast<size_t>(p->batch) * p->heads * nq_pad * 4;
          const size_t rb = (rows + 255) & ~static_cast<size_t>(255);
          const size_t nacc = static_cast<size_t>(p->batch) * p->heads * nq_pad * v.width;
          float* acc = reinterpret_cast<float*>(static_cast<char*>(p->workspace) + 2 * rb);
          std::vector<float> ref(nacc), got(nacc);
          CK(cudaMemcpyAsync(ref.data(), acc, nacc * 4, cudaMemcpyDeviceToHost, s));
          CK(cudaMemsetAsync(acc, 0, nacc * 4, s));
          st = fn(p, s);  // rewrites dk/dv and the accumulator
          if (st != FA_OK) return st;
          CK(cudaMemcpyAsync(got.data(), acc, nacc * 4, cudaMemcpyDeviceToHost, s));
          CK(cudaStreamSynchronize(s));
          double mx = 0, err = 0;
          const fa::cuda::DqLayout la = api_layout(v.dtype, v.width), lb = v.layout;
          for (int bh = 0; bh < p->batch * p->heads; ++bh)
            for (int i = 0; i < p->seqlen_q; ++i)
              for (int c = 0; c < p->head_dim; ++c) {
                const size_t head = static_cast<size_t>(bh) * nq_pad * v.width;
                const float x = ref[head + fa::cuda::dq_acc_offset(la, i, c)];
                const float y = got[head + fa::cuda::dq_acc_offset(lb, i, c)];
                mx = std::max(mx, static_cast<double>(std::fabs(x)));
                err = std::max(err, static_cast<double>(std::fabs(x - y)));
              }
          dq_err = mx > 0 ? err / mx : err;
          return FA_OK;
        });
        const bool dq_ok = dq_err <= 1e-5;
        if (!dq_ok) printf("  %s: dQ accumulator differs from the default kernel's by %.3g (relative max)\n", v.name, dq_err);
        ok = ok && r.ok && dq_ok;
      }
      if (!ok) {
        printf("  %-52s FAILED CHECK\n", v.name);
        ++failures;
        continue;
      }
      for (int N : {1024, 4096, 16384})
        for (int causal : {0, 1}) {
          if (v.dtype == FA_FLOAT32 ? N != 1024 : (N == 1024 || (causal && N == 4096))) continue;
          const int B = 16384 / N, H = v.width == 256 ? 16 : 2048 / v.width;
          Case c{v.dtype, B, H, H, N, N, v.width, causal, BHSD, 1.f / std::sqrt((float)v.width), 0, 0};
          fa_bwd_params tmp = make_bwd_params(c);
          DevBuf ws;
          ws.alloc(fa_bwd_workspace_size(&tmp));
          const BwdFn fn = v.fn;
          void* wsp = ws.p;
          double f = 0;
          bool filled = false;
          // The first call of the timing loop goes through the API and fills the workspace (lse2,
          // dsum); the variant's main kernel reuses it.
          const double ms = time_bwd({v.dtype, v.width, N, causal, BHSD, 0}, N == 16384 ? 7 : 15, stream,
                                     [&](const fa_bwd_params* p, cudaStream_t s) {
                                       fa_bwd_params q = *p;
                                       q.workspace = wsp;
                                       if (!filled) {
                                         filled = true;
                                         const fa_status st = fa_bwd_cuda(&q, s);
                                         if (st != FA_OK) return st;
                                       }
                                       return fn(&q, s);
                                     },
                                     0, 0, &f);
          printf("  %-52s N%-5d %-6s %8.3f ms %7.1f TFLOP/s\n", v.name, N, causal ? "causal" : "full", ms,
                 f / ms * 1e-9);
        }
    }
    // Whole backward vs main kernel alone for the issue-4 cell.
    {
      double f = 0;
      const double all = time_bwd({FA_FLOAT16, 128, 4096, 0, BSHD, 0}, 30, stream, api_bwd(), 4, 16, &f);
      printf("issue-4 cell fp16 D128 N4096 B4 H16 bshd: whole backward %.3f ms (%.1f TFLOP/s)\n", all, f / all * 1e-9);
    }
  }
#endif
  CK(cudaStreamDestroy(stream));
  printf("%s\n", failures == 0 ? "ALL PASSED" : "FAILURES");
  return failures == 0 ? 0 : 1;
}
