// cpu_check: standalone correctness check (and timing) for the CPU backend.
//
//   cpu_check                 all checks (conversions, attention fwd/bwd vs a float64 reference,
//                             thread-count determinism, concurrency, edge cases, validation);
//                             exits 1 when any fails
//   cpu_check --bench [B H N D [causal]]
//                             times fa_fwd_cpu / fa_bwd_cpu (fp32, fp16, bf16); default 1 8 2048 64,
//                             best of FA_BENCH_REPS (5) runs; FA_BENCH_BM / _BN / _THREADS set the
//                             tile sizes and thread count, FA_BENCH_FWD_ONLY=1 skips the backward.
//                             GFLOP/s use fwd = 4*B*H*N*N*D (halved when causal), bwd = 2.5x that.
//
// Every attention case runs with both kernel sets (the AVX2 one where the CPU has it, and the
// portable one via FA_CPU_ISA=generic) and both backward schemes (FA_CPU_BWD=fused / twopass,
// plus fused with one (batch, kv head) unit per slab). Tensors are stored with the requested
// layout inside buffers whose unused gaps hold NaN (inputs) or a sentinel (outputs), so reading
// or writing outside the described elements shows up as a failure.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/half.h"
#include "fa_core.h"

extern "C" const char* fa_internal_cpu_isa(void);
extern "C" void fa_internal_convert_portable(const void* src, void* dst, size_t n, fa_dtype dtype, int to_f32);

namespace {

int g_failures = 0;

void report(bool ok, const std::string& what) {
  if (!ok) ++g_failures;
  printf("  [%s] %s\n", ok ? " ok " : "FAIL", what.c_str());
}

const char* dtype_name(fa_dtype d) {
  return d == FA_FLOAT32 ? "fp32" : d == FA_FLOAT16 ? "fp16" : "bf16";
}
size_t dtype_size(fa_dtype d) { return d == FA_FLOAT32 ? 4 : 2; }

// ---------------------------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------------------------
// Reference fp32 -> fp16 / bf16 using double arithmetic and nearbyint (ties to even).
uint16_t ref_to_f16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint16_t sign = (u >> 16) & 0x8000;
  if (isnan(x)) return sign | 0x7e00 | ((u >> 13) & 0x3ff);
  const double a = fabs((double)x);
  if (a >= 65520.0) return sign | 0x7c00;
  if (a < ldexp(1.0, -14)) return sign | (uint16_t)nearbyint(a * ldexp(1.0, 24));
  int e;
  const double m = frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  double q = nearbyint((m * 2.0 - 1.0) * 1024.0);
  int exp = e - 1;
  if (q == 1024.0) {
    q = 0;
    ++exp;
  }
  if (exp > 15) return sign | 0x7c00;
  return sign | (uint16_t)((exp + 15) << 10) | (uint16_t)q;
}

uint16_t ref_to_bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  const uint16_t sign = (u >> 16) & 0x8000;
  if (isnan(x)) return (uint16_t)((u >> 16) | 0x40);
  const double a = fabs((double)x);
  if (a == 0 || isinf(x)) return (uint16_t)(u >> 16);
  // bf16 has 8 significant bits (7 stored); subnormals share fp32's exponent range.
  int e;
  frexp(a, &e);
  const int q_exp = std::max(e - 8, -133);  // quantum 2^(e-8), fp32 subnormal quantum 2^-149 * 2^16
  const double q = nearbyint(a / ldexp(1.0, q_exp)) * ldexp(1.0, q_exp);
  if (q >= ldexp(1.0, 128)) return sign | 0x7f80;
  const float qf = (float)q;
  uint32_t qu;
  memcpy(&qu, &qf, 4);
  return sign | (uint16_t)(qu >> 16);
}

double ref_from_f16(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0) return s * ldexp((double)m, -24);
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * ldexp(1024.0 + m, e - 25);
}

bool same_f32(float a, float b) {
  if (isnan(a) || isnan(b)) {
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    return isnan(a) && isnan(b) && (ua & 0x00400000) && (ub & 0x00400000) && ((ua ^ ub) & 0x80000000) == 0;
  }
  return memcmp(&a, &b, 4) == 0;
}

void check_conversions() {
  printf("conversions\n");
  // fp16 -> fp32: all 65536 values, public path (F16C where available) and portable path.
  {
    std::vector<uint16_t> h(65536);
    for (int i = 0; i < 65536; ++i) h[i] = (uint16_t)i;
    std::vector<float> a(65536), b(65536);
    fa_convert_to_f32(h.data(), a.data(), h.size(), FA_FLOAT16);
    fa_internal_convert_portable(h.data(), b.data(), h.size(), FA_FLOAT16, 1);
    int bad = 0;
    for (int i = 0; i < 65536; ++i) {
      const double r = ref_from_f16((uint16_t)i);
      const float rf = (float)r;
      const bool ok_a = isnan(r) ? (isnan(a[i]) && same_f32(a[i], b[i])) : same_f32(a[i], rf);
      const bool ok_b = isnan(r) ? isnan(b[i]) : same_f32(b[i], rf);
      if (!ok_a || !ok_b || !same_f32(fa::f16_bits_to_f32((uint16_t)i), b[i])) ++bad;
    }
    report(bad == 0, "fp16 -> fp32, all 65536 values (" + std::to_string(bad) + " wrong)");
  }
  // fp32 -> fp16 / bf16: a sweep of bit patterns plus edge cases.
  {
    std::vector<float> x;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 251) {
      uint32_t v = (uint32_t)u;
      float f;
      memcpy(&f, &v, 4);
      x.push_back(f);
    }
    const float edges[] = {0.f, -0.f, 65504.f, 65505.f, 65519.99f, 65520.f, -65520.f, 65536.f, 1e30f,
                           INFINITY, -INFINITY, NAN, -NAN, 5.9604645e-8f, 2.9802322e-8f, 2.9802326e-8f,
                           8.940697e-8f, 6.1035156e-5f, 6.1035152e-5f, 6.097555e-5f, 1.0f + 1.0f / 2048,
                           1.0f + 3.0f / 2048, 3.3895314e38f, 3.39e38f, 1e-40f, -1e-45f, 1.17549435e-38f};
    for (float e : edges) x.push_back(e);
    for (uint32_t v : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fbfffffu, 0x7f7fffffu, 0x00000001u,
                       0x807fffffu, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x33000000u, 0x33000001u,
                       0x387fc000u, 0x387fe000u, 0x387fffffu, 0x3f808000u, 0x3f818000u}) {
      float f;
      memcpy(&f, &v, 4);
      x.push_back(f);
    }
    std::vector<uint16_t> a(x.size()), b(x.size()), c(x.size()), d(x.size());
    fa_convert_from_f32(x.data(), a.data(), x.size(), FA_FLOAT16);
    fa_internal_convert_portable(x.data(), b.data(), x.size(), FA_FLOAT16, 0);
    fa_convert_from_f32(x.data(), c.data(), x.size(), FA_BFLOAT16);
    fa_internal_convert_portable(x.data(), d.data(), x.size(), FA_BFLOAT16, 0);
    size_t bad16 = 0, badbf = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t r = ref_to_f16(x[i]);
      if (a[i] != r || b[i] != r) {
        if (bad16 < 5) printf("    fp16 mismatch x=%a (bits %08x): public %04x portable %04x ref %04x\n", x[i],
                              fa::f32_as_bits(x[i]), a[i], b[i], r);
        ++bad16;
      }
      const uint16_t rb = ref_to_bf16(x[i]);
      if (c[i] != rb || d[i] != rb) {
        if (badbf < 5) printf("    bf16 mismatch x=%a: public %04x portable %04x ref %04x\n", x[i], c[i], d[i], rb);
        ++badbf;
      }
    }
    report(bad16 == 0, "fp32 -> fp16, " + std::to_string(x.size()) + " values (" + std::to_string(bad16) + " wrong)");
    report(badbf == 0, "fp32 -> bf16, " + std::to_string(x.size()) + " values (" + std::to_string(badbf) + " wrong)");
  }
  // bf16 -> fp32 exhaustive.
  {
    int bad = 0;
    std::vector<uint16_t> h(65536);
    for (int i = 0; i < 65536; ++i) h[i] = (uint16_t)i;
    std::vector<float> a(65536);
    fa_convert_to_f32(h.data(), a.data(), h.size(), FA_BFLOAT16);
    for (int i = 0; i < 65536; ++i) {
      const uint32_t u = (uint32_t)i << 16;
      float r;
      memcpy(&r, &u, 4);
      if (isnan(r) ? !(isnan(a[i]) && (fa::f32_as_bits(a[i]) & 0x00400000)) : !same_f32(a[i], r)) ++bad;
    }
    report(bad == 0, "bf16 -> fp32, all 65536 values (" + std::to_string(bad) + " wrong)");
  }
}

// ---------------------------------------------------------------------------------------------
// Strided test tensors
// ---------------------------------------------------------------------------------------------
enum Layout { BSHD, BHSD, PADDED };
const char* layout_name(Layout l) { return l == BSHD ? "bshd" : l == BHSD ? "bhsd" : "padded"; }

struct Tensor {
  int B = 0, N = 0, H = 0, D = 0;
  fa_dtype dt = FA_FLOAT32;
  fa_strides st{0, 0, 0};
  int64_t origin = 0;             // element offset of (0,0,0,0) inside buf
  std::vector<unsigned char> buf;

  Tensor() = default;
  Tensor(int b, int n, int h, int d, fa_dtype t, Layout lay) : B(b), N(n), H(h), D(d), dt(t) {
    if (lay == BSHD) {
      st = fa_strides_bshd(n, h, d);
    } else if (lay == BHSD) {
      st = fa_strides_bhsd(n, h, d);
    } else {  // gaps everywhere: head stride d+3, row stride h*(d+3)+5, batch stride +11
      st.head = d + 3;
      st.row = (int64_t)h * (d + 3) + 5;
      st.batch = (int64_t)n * st.row + 11;
    }
    origin = lay == PADDED ? 7 : 0;
    const int64_t elems = origin + (int64_t)std::max(b, 1) * std::max<int64_t>(st.batch, 1) + 16;
    buf.assign((size_t)elems * dtype_size(t), 0);
  }
  int64_t index(int b, int n, int h, int d) const { return origin + b * st.batch + n * st.row + h * st.head + d; }
  void* data() { return buf.data() + origin * dtype_size(dt); }
  const void* data() const { return buf.data() + origin * dtype_size(dt); }
  void set_raw(int64_t i, float x) {
    if (dt == FA_FLOAT32) memcpy(&buf[i * 4], &x, 4);
    else {
      const uint16_t h = dt == FA_FLOAT16 ? fa::f32_to_f16_bits(x) : fa::f32_to_bf16_bits(x);
      memcpy(&buf[i * 2], &h, 2);
    }
  }
  float get_raw(int64_t i) const {
    if (dt == FA_FLOAT32) {
      float x;
      memcpy(&x, &buf[i * 4], 4);
      return x;
    }
    uint16_t h;
    memcpy(&h, &buf[i * 2], 2);
    return dt == FA_FLOAT16 ? fa::f16_bits_to_f32(h) : fa::bf16_bits_to_f32(h);
  }
  void set(int b, int n, int h, int d, float x) { set_raw(index(b, n, h, d), x); }
  double get(int b, int n, int h, int d) const { return get_raw(index(b, n, h, d)); }
  // Marks the described elements; returns a mask over the buffer's elements.
  std::vector<char> mask() const {
    std::vector<char> m(buf.size() / dtype_size(dt), 0);
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < N; ++n)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) m[(size_t)index(b, n, h, d)] = 1;
    return m;
  }
  void fill_gaps_nan() {
    const std::vector<char> m = mask();
    for (size_t i = 0; i < m.size(); ++i)
      if (!m[i]) set_raw((int64_t)i, NAN);
  }
  void fill_all_sentinel() { memset(buf.data(), 0x7b, buf.size()); }
  bool gaps_untouched() const {
    const std::vector<char> m = mask();
    const size_t es = dtype_size(dt);
    for (size_t i = 0; i < m.size(); ++i)
      if (!m[i])
        for (size_t k = 0; k < es; ++k)
          if (buf[i * es + k] != 0x7b) return false;
    return true;
  }
};

Tensor random_tensor(int B, int N, int H, int D, fa_dtype dt, Layout lay, std::mt19937& rng, float sd) {
  Tensor t(B, N, H, D, dt, lay);
  t.fill_gaps_nan();
  std::normal_distribution<float> nd(0.f, sd);
  for (int b = 0; b < B; ++b)
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) t.set(b, n, h, d, nd(rng));
  return t;
}

// ---------------------------------------------------------------------------------------------
// float64 reference
// ---------------------------------------------------------------------------------------------
struct Ref {
  std::vector<double> o, lse, dq, dk, dv;  // canonical [B][N][H][D] / lse [B][H][Nq]
};

Ref reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, double scale, bool causal) {
  const int B = q.B, Nq = q.N, Nk = k.N, H = q.H, Hkv = k.H, D = q.D, group = H / Hkv;
  Ref r;
  r.o.assign((size_t)B * Nq * H * D, 0.0);
  r.lse.assign((size_t)B * H * Nq, INFINITY);
  r.dq.assign((size_t)B * Nq * H * D, 0.0);
  r.dk.assign((size_t)B * Nk * Hkv * D, 0.0);
  r.dv.assign((size_t)B * Nk * Hkv * D, 0.0);
  std::vector<double> s(Nk), p(Nk), dp(Nk), qi(D), doi(D);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int hk = h / group;
      for (int i = 0; i < Nq; ++i) {
        const int64_t lim = causal ? std::min<int64_t>(Nk, (int64_t)i + Nk - Nq + 1) : Nk;
        if (lim <= 0) continue;
        for (int d = 0; d < D; ++d) {
          qi[d] = q.get(b, i, h, d);
          doi[d] = dout.get(b, i, h, d);
        }
        double m = -INFINITY;
        for (int j = 0; j < lim; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d) acc += qi[d] * k.get(b, j, hk, d);
          s[j] = acc * scale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int j = 0; j < lim; ++j) l += (p[j] = exp(s[j] - m));
        double* o = &r.o[(((size_t)b * Nq + i) * H + h) * D];
        for (int j = 0; j < lim; ++j) {
          p[j] /= l;
          for (int d = 0; d < D; ++d) o[d] += p[j] * v.get(b, j, hk, d);
        }
        r.lse[((size_t)b * H + h) * Nq + i] = m + log(l);
        double Di = 0;
        for (int j = 0; j < lim; ++j) {
          double acc = 0;
          for (int d = 0; d < D; ++d) acc += doi[d] * v.get(b, j, hk, d);
          dp[j] = acc;
          Di += p[j] * acc;
        }
        double* dq = &r.dq[(((size_t)b * Nq + i) * H + h) * D];
        for (int j = 0; j < lim; ++j) {
          const double ds = p[j] * (dp[j] - Di) * scale;
          double* dk = &r.dk[(((size_t)b * Nk + j) * Hkv + hk) * D];
          double* dv = &r.dv[(((size_t)b * Nk + j) * Hkv + hk) * D];
          for (int d = 0; d < D; ++d) {
            dq[d] += ds * k.get(b, j, hk, d);
            dk[d] += ds * qi[d];
            dv[d] += p[j] * doi[d];
          }
        }
      }
    }
  return r;
}

// max |got - ref| / max(max |ref|, floor); exact zeros / inf required where the reference has a
// row that sees no key (signalled by `empty_rows`).
struct Cmp {
  double max_err = 0, max_ref = 0;
  bool nonfinite = false;
  double rel(double floor = 1e-3) const { return max_err / std::max(max_ref, floor); }
};

Cmp compare(const Tensor& t, const std::vector<double>& ref) {
  Cmp c;
  for (int b = 0; b < t.B; ++b)
    for (int n = 0; n < t.N; ++n)
      for (int h = 0; h < t.H; ++h)
        for (int d = 0; d < t.D; ++d) {
          const double r = ref[(((size_t)b * t.N + n) * t.H + h) * t.D + d];
          const double g = t.get(b, n, h, d);
          if (!std::isfinite(g)) c.nonfinite = true;
          c.max_err = std::max(c.max_err, fabs(g - r));
          c.max_ref = std::max(c.max_ref, fabs(r));
        }
  return c;
}

struct Case {
  const char* name;
  int B, Nq, Nk, H, Hkv, D;
  bool causal;
  Layout layout;
  fa_dtype dt;
  int bm, bn;
  float scale;  // 0: 1/sqrt(D)
};

struct Outputs {
  Tensor o, dq, dk, dv;
  std::vector<float> lse;
  fa_status fs = FA_OK, bs = FA_OK;
};

struct Inputs {
  Tensor q, k, v, dout;
};

Outputs run_case(const Case& c, const Inputs& in, int threads) {
  Outputs out;
  out.o = Tensor(c.B, c.Nq, c.H, c.D, c.dt, c.layout);
  out.o.fill_all_sentinel();
  out.lse.assign((size_t)c.B * c.H * c.Nq, -12345.f);
  fa_fwd_params f;
  memset(&f, 0, sizeof f);
  f.q = in.q.data();
  f.k = in.k.data();
  f.v = in.v.data();
  f.o = out.o.data();
  f.lse = out.lse.data();
  f.q_str = in.q.st;
  f.k_str = in.k.st;
  f.v_str = in.v.st;
  f.o_str = out.o.st;
  f.batch = c.B;
  f.seqlen_q = c.Nq;
  f.seqlen_k = c.Nk;
  f.heads = c.H;
  f.heads_k = c.Hkv;
  f.head_dim = c.D;
  f.scale = c.scale != 0 ? c.scale : 1.0f / sqrtf((float)c.D);
  f.causal = c.causal;
  f.dtype = c.dt;
  f.block_m = c.bm;
  f.block_n = c.bn;
  f.num_threads = threads;
  out.fs = fa_fwd_cpu(&f);
  if (out.fs != FA_OK) {
    printf("    fa_fwd_cpu: %s: %s\n", fa_status_name(out.fs), fa_last_error());
    return out;
  }
  out.dq = Tensor(c.B, c.Nq, c.H, c.D, c.dt, c.layout);
  out.dk = Tensor(c.B, c.Nk, c.Hkv, c.D, c.dt, c.layout);
  out.dv = Tensor(c.B, c.Nk, c.Hkv, c.D, c.dt, c.layout);
  out.dq.fill_all_sentinel();
  out.dk.fill_all_sentinel();
  out.dv.fill_all_sentinel();
  fa_bwd_params bp;
  memset(&bp, 0, sizeof bp);
  bp.dout = in.dout.data();
  bp.q = in.q.data();
  bp.k = in.k.data();
  bp.v = in.v.data();
  bp.o = out.o.data();
  bp.lse = out.lse.data();
  bp.dq = out.dq.data();
  bp.dk = out.dk.data();
  bp.dv = out.dv.data();
  bp.do_str = in.dout.st;
  bp.q_str = in.q.st;
  bp.k_str = in.k.st;
  bp.v_str = in.v.st;
  bp.o_str = out.o.st;
  bp.dq_str = out.dq.st;
  bp.dk_str = out.dk.st;
  bp.dv_str = out.dv.st;
  bp.batch = c.B;
  bp.seqlen_q = c.Nq;
  bp.seqlen_k = c.Nk;
  bp.heads = c.H;
  bp.heads_k = c.Hkv;
  bp.head_dim = c.D;
  bp.scale = f.scale;
  bp.causal = c.causal;
  bp.dtype = c.dt;
  bp.block_m = c.bm;
  bp.block_n = c.bn;
  bp.num_threads = threads;
  out.bs = fa_bwd_cpu(&bp);
  if (out.bs != FA_OK) printf("    fa_bwd_cpu: %s: %s\n", fa_status_name(out.bs), fa_last_error());
  return out;
}

bool same_bits(const Outputs& a, const Outputs& b) {
  return a.o.buf == b.o.buf && a.dq.buf == b.dq.buf && a.dk.buf == b.dk.buf && a.dv.buf == b.dv.buf &&
         memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0;
}

void check_case(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.q = random_tensor(c.B, c.Nq, c.H, c.D, c.dt, c.layout, rng, 1.0f);
  in.k = random_tensor(c.B, c.Nk, c.Hkv, c.D, c.dt, c.layout, rng, 1.0f);
  in.v = random_tensor(c.B, c.Nk, c.Hkv, c.D, c.dt, c.layout, rng, 1.0f);
  in.dout = random_tensor(c.B, c.Nq, c.H, c.D, c.dt, c.layout, rng, 1.0f);
  const double scale = c.scale != 0 ? c.scale : 1.0 / sqrt((double)c.D);
  const Ref ref = reference(in.q, in.k, in.v, in.dout, (double)(float)scale, c.causal);

  // tolerances relative to the largest reference magnitude of each tensor
  const double tol_o = c.dt == FA_FLOAT32 ? 2e-5 : c.dt == FA_FLOAT16 ? 2e-3 : 1.6e-2;
  const double tol_g = c.dt == FA_FLOAT32 ? 5e-5 : c.dt == FA_FLOAT16 ? 5e-3 : 4e-2;
  const double tol_lse = c.dt == FA_FLOAT32 ? 2e-5 : 2e-5;

  // variants: kernel set (default, and generic when the default is not) x backward scheme
  unsetenv("FA_CPU_ISA");
  struct Variant {
    const char* isa;
    const char* bwd;
    const char* slab;  // FA_CPU_FUSED_SLAB
  };
  std::vector<Variant> variants = {{nullptr, "fused", nullptr}, {nullptr, "twopass", nullptr}};
  if (strcmp(fa_internal_cpu_isa(), "generic") != 0) {
    variants.push_back({"generic", "fused", nullptr});
    variants.push_back({"generic", "twopass", nullptr});
  }
  variants.push_back({nullptr, "fused", "1"});
  printf("  %s: B=%d Nq=%d Nk=%d H=%d Hkv=%d D=%d %s %s %s bm=%d bn=%d\n", c.name, c.B, c.Nq, c.Nk, c.H, c.Hkv,
         c.D, c.causal ? "causal" : "full", layout_name(c.layout), dtype_name(c.dt), c.bm, c.bn);
  for (size_t pass = 0; pass < variants.size(); ++pass) {
    if (variants[pass].isa) setenv("FA_CPU_ISA", variants[pass].isa, 1);
    else unsetenv("FA_CPU_ISA");
    setenv("FA_CPU_BWD", variants[pass].bwd, 1);
    if (variants[pass].slab) setenv("FA_CPU_FUSED_SLAB", variants[pass].slab, 1);
    else unsetenv("FA_CPU_FUSED_SLAB");
    const std::string isa = fa_internal_cpu_isa();
    Outputs out = run_case(c, in, 0);
    char label[256];
    snprintf(label, sizeof label, "  %-7s bwd %-7s%s", isa.c_str(), variants[pass].bwd,
             variants[pass].slab ? " slab 1" : "       ");
    if (out.fs != FA_OK || out.bs != FA_OK) {
      report(false, std::string(label) + ": call failed");
      continue;
    }
    const Cmp co = compare(out.o, ref.o), cq = compare(out.dq, ref.dq), ck = compare(out.dk, ref.dk),
              cv = compare(out.dv, ref.dv);
    // lse: exact +inf where expected, else relative error
    double lse_err = 0;
    bool lse_inf_ok = true;
    for (size_t i = 0; i < ref.lse.size(); ++i) {
      if (std::isinf(ref.lse[i])) {
        lse_inf_ok &= std::isinf(out.lse[i]) && out.lse[i] > 0;
      } else {
        lse_err = std::max(lse_err, fabs(out.lse[i] - ref.lse[i]) / std::max(1.0, fabs(ref.lse[i])));
      }
    }
    // rows without keys: o and dq exactly zero
    bool empty_rows_ok = true;
    for (int b = 0; b < c.B; ++b)
      for (int h = 0; h < c.H; ++h)
        for (int i = 0; i < c.Nq; ++i)
          if (std::isinf(ref.lse[((size_t)b * c.H + h) * c.Nq + i]))
            for (int d = 0; d < c.D; ++d)
              empty_rows_ok &= out.o.get(b, i, h, d) == 0.0 && out.dq.get(b, i, h, d) == 0.0;
    const bool gaps = out.o.gaps_untouched() && out.dq.gaps_untouched() && out.dk.gaps_untouched() &&
                      out.dv.gaps_untouched();
    const bool finite = !co.nonfinite && !cq.nonfinite && !ck.nonfinite && !cv.nonfinite;
    const bool ok = co.rel() <= tol_o && cq.rel() <= tol_g && ck.rel() <= tol_g && cv.rel() <= tol_g &&
                    lse_err <= tol_lse && lse_inf_ok && empty_rows_ok && gaps && finite;
    char msg[512];
    snprintf(msg, sizeof msg, "%s rel err o %.2e lse %.2e dq %.2e dk %.2e dv %.2e%s%s%s%s", label, co.rel(),
             lse_err, cq.rel(), ck.rel(), cv.rel(), lse_inf_ok && empty_rows_ok ? "" : "  EMPTY-ROW MISMATCH",
             gaps ? "" : "  WROTE OUTSIDE TENSOR", finite ? "" : "  NON-FINITE", "");
    report(ok, msg);

    // determinism across thread counts: 1, 3, 0 (all) must agree bit for bit
    if (pass < 2) {
      Outputs one = run_case(c, in, 1), three = run_case(c, in, 3);
      report(same_bits(out, one) && same_bits(out, three), std::string(label) + " bitwise equal with 1 / 3 / all threads");
    }
  }
  unsetenv("FA_CPU_ISA");
  unsetenv("FA_CPU_BWD");
  unsetenv("FA_CPU_FUSED_SLAB");
}

// ---------------------------------------------------------------------------------------------
// Edge cases and validation
// ---------------------------------------------------------------------------------------------
fa_fwd_params small_fwd(std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                        std::vector<float>& o, std::vector<float>& lse) {
  const int B = 1, N = 4, H = 2, D = 8;
  q.assign(B * N * H * D, 0.5f);
  k.assign(B * N * H * D, 0.25f);
  v.assign(B * N * H * D, 1.0f);
  o.assign(B * N * H * D, 7.f);
  lse.assign(B * H * N, 7.f);
  fa_fwd_params p;
  memset(&p, 0, sizeof p);
  p.q = q.data();
  p.k = k.data();
  p.v = v.data();
  p.o = o.data();
  p.lse = lse.data();
  p.q_str = p.k_str = p.v_str = p.o_str = fa_strides_bshd(N, H, D);
  p.batch = B;
  p.seqlen_q = p.seqlen_k = N;
  p.heads = p.heads_k = H;
  p.head_dim = D;
  p.scale = 0.35f;
  p.dtype = FA_FLOAT32;
  return p;
}

void expect_invalid(fa_fwd_params p, const char* what) {
  const fa_status s = fa_fwd_cpu(&p);
  report(s == FA_ERR_INVALID && fa_last_error()[0] != 0,
         std::string("rejects ") + what + " -> " + fa_status_name(s) + ": " + fa_last_error());
}

void check_edges() {
  printf("edge cases and validation\n");
  std::vector<float> q, k, v, o, lse;
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    report(fa_fwd_cpu(&p) == FA_OK && fabs(o[0] - 1.0f) < 1e-6f, "small forward works");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.q = nullptr;
    expect_invalid(p, "null q");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.lse = nullptr;
    expect_invalid(p, "null lse");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.heads_k = 3;
    expect_invalid(p, "heads % heads_k != 0");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.head_dim = 0;
    expect_invalid(p, "head_dim 0");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.head_dim = 257;
    expect_invalid(p, "head_dim 257");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.seqlen_q = -1;
    expect_invalid(p, "negative seqlen");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    const int bad = 7;  // stored as raw bits, as a C caller could
    memcpy(&p.dtype, &bad, sizeof bad);
    expect_invalid(p, "bad dtype");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.block_m = -2;
    expect_invalid(p, "negative block_m");
  }
  report(fa_fwd_cpu(nullptr) == FA_ERR_INVALID && fa_bwd_cpu(nullptr) == FA_ERR_INVALID, "rejects null params");
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.batch = 0;
    p.q = p.k = p.v = nullptr;
    p.o = nullptr;
    p.lse = nullptr;
    report(fa_fwd_cpu(&p) == FA_OK, "batch 0 is a no-op (null pointers allowed)");
  }
  {
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    p.seqlen_k = 0;
    p.k = p.v = nullptr;
    const fa_status s = fa_fwd_cpu(&p);
    bool ok = s == FA_OK;
    for (float x : o) ok &= x == 0.f;
    for (float x : lse) ok &= std::isinf(x) && x > 0;
    report(ok, "seqlen_k 0: o = 0, lse = +inf");
  }
  {
    // backward with seqlen_q = 0: dk, dv must be zeroed
    std::vector<float> kk(4 * 2 * 8, 1.f), dk(4 * 2 * 8, 5.f), dv(4 * 2 * 8, 5.f);
    fa_bwd_params b;
    memset(&b, 0, sizeof b);
    b.k = kk.data();
    b.v = kk.data();
    b.dk = dk.data();
    b.dv = dv.data();
    b.k_str = b.v_str = b.dk_str = b.dv_str = fa_strides_bshd(4, 2, 8);
    b.batch = 1;
    b.seqlen_q = 0;
    b.seqlen_k = 4;
    b.heads = b.heads_k = 2;
    b.head_dim = 8;
    b.scale = 1.f;
    b.dtype = FA_FLOAT32;
    bool ok = fa_bwd_cpu(&b) == FA_OK;
    for (float x : dk) ok &= x == 0.f;
    for (float x : dv) ok &= x == 0.f;
    report(ok, "backward seqlen_q 0: dk = dv = 0");
  }
  {
    // NaN in q propagates to that row's output instead of being hidden
    fa_fwd_params p = small_fwd(q, k, v, o, lse);
    q[0] = NAN;
    bool ok = fa_fwd_cpu(&p) == FA_OK && std::isnan(o[0]) && !std::isnan(o[8]);
    report(ok, "NaN in q row 0 head 0 gives NaN in that row only");
  }
  {
    // huge scores: no overflow (online softmax), softmax picks the max key
    std::vector<float> q1(1 * 3 * 1 * 4, 0.f), k1(3 * 4, 0.f), v1(3 * 4, 0.f), o1(3 * 4), l1(3);
    for (int j = 0; j < 3; ++j) {
      k1[j * 4] = (float)j;
      v1[j * 4 + 1] = (float)(j + 1);
    }
    for (int i = 0; i < 3; ++i) q1[i * 4] = 1e4f;
    fa_fwd_params p;
    memset(&p, 0, sizeof p);
    p.q = q1.data();
    p.k = k1.data();
    p.v = v1.data();
    p.o = o1.data();
    p.lse = l1.data();
    p.q_str = p.k_str = p.v_str = p.o_str = fa_strides_bshd(3, 1, 4);
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = 3;
    p.heads = p.heads_k = 1;
    p.head_dim = 4;
    p.scale = 1.f;
    p.block_n = 1;
    p.dtype = FA_FLOAT32;
    bool ok = fa_fwd_cpu(&p) == FA_OK && o1[1] == 3.f && fabs(l1[0] - 2e4f) <= 2e4f * 1e-6f;
    report(ok, "scores of 1e4: exact argmax, finite lse");
  }
}

// Two threads calling fa_fwd_cpu / fa_bwd_cpu at the same time get the serial results.
void check_concurrency() {
  printf("concurrency\n");
  Case c{"concurrent", 2, 130, 150, 4, 2, 64, true, BSHD, FA_FLOAT32, 0, 0, 0};
  std::mt19937 rng(7);
  Inputs in;
  in.q = random_tensor(c.B, c.Nq, c.H, c.D, c.dt, c.layout, rng, 1.f);
  in.k = random_tensor(c.B, c.Nk, c.Hkv, c.D, c.dt, c.layout, rng, 1.f);
  in.v = random_tensor(c.B, c.Nk, c.Hkv, c.D, c.dt, c.layout, rng, 1.f);
  in.dout = random_tensor(c.B, c.Nq, c.H, c.D, c.dt, c.layout, rng, 1.f);
  const Outputs serial = run_case(c, in, 0);
  bool ok = true;
  for (int round = 0; round < 5; ++round) {
    std::vector<Outputs> outs(4);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) ts.emplace_back([&, t] { outs[t] = run_case(c, in, t % 2 ? 0 : 2); });
    for (auto& t : ts) t.join();
    for (auto& o : outs) ok &= o.fs == FA_OK && o.bs == FA_OK && same_bits(o, serial);
  }
  report(ok, "4 threads x 5 rounds of concurrent fwd+bwd match the serial result bit for bit");
}

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------
double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void bench(int B, int H, int N, int D, bool causal) {
  printf("timing: B=%d H=%d N=%d D=%d %s, kernels %s, %u hardware threads\n", B, H, N, D,
         causal ? "causal" : "non-causal", fa_internal_cpu_isa(), std::thread::hardware_concurrency());
  for (fa_dtype dt : {FA_FLOAT32, FA_FLOAT16, FA_BFLOAT16}) {
    std::mt19937 rng(1);
    Inputs in;
    in.q = random_tensor(B, N, H, D, dt, BSHD, rng, 1.f);
    in.k = random_tensor(B, N, H, D, dt, BSHD, rng, 1.f);
    in.v = random_tensor(B, N, H, D, dt, BSHD, rng, 1.f);
    in.dout = random_tensor(B, N, H, D, dt, BSHD, rng, 1.f);
    Tensor o(B, N, H, D, dt, BSHD), dq(B, N, H, D, dt, BSHD), dk(B, N, H, D, dt, BSHD), dv(B, N, H, D, dt, BSHD);
    std::vector<float> lse((size_t)B * H * N);
    fa_fwd_params f;
    memset(&f, 0, sizeof f);
    f.q = in.q.data();
    f.k = in.k.data();
    f.v = in.v.data();
    f.o = o.data();
    f.lse = lse.data();
    f.q_str = f.k_str = f.v_str = f.o_str = in.q.st;
    f.batch = B;
    f.seqlen_q = f.seqlen_k = N;
    f.heads = f.heads_k = H;
    f.head_dim = D;
    f.scale = 1.f / sqrtf((float)D);
    f.causal = causal;
    f.dtype = dt;
    if (const char* s = getenv("FA_BENCH_BM")) f.block_m = atoi(s);
    if (const char* s = getenv("FA_BENCH_BN")) f.block_n = atoi(s);
    if (const char* s = getenv("FA_BENCH_THREADS")) f.num_threads = atoi(s);
    fa_bwd_params b;
    memset(&b, 0, sizeof b);
    b.dout = in.dout.data();
    b.q = f.q;
    b.k = f.k;
    b.v = f.v;
    b.o = f.o;
    b.lse = lse.data();
    b.dq = dq.data();
    b.dk = dk.data();
    b.dv = dv.data();
    b.do_str = b.q_str = b.k_str = b.v_str = b.o_str = b.dq_str = b.dk_str = b.dv_str = in.q.st;
    b.batch = B;
    b.seqlen_q = b.seqlen_k = N;
    b.heads = b.heads_k = H;
    b.head_dim = D;
    b.scale = f.scale;
    b.causal = causal;
    b.dtype = dt;
    b.block_m = f.block_m;
    b.block_n = f.block_n;
    b.num_threads = f.num_threads;
    double best_f = 1e30, best_b = 1e30, cpu_f = 1e30, cpu_b = 1e30;
    const int reps = getenv("FA_BENCH_REPS") ? atoi(getenv("FA_BENCH_REPS")) : 5;
    for (int r = 0; r < reps; ++r) {
      const double c0 = process_cpu_seconds();
      auto t0 = std::chrono::steady_clock::now();
      if (fa_fwd_cpu(&f) != FA_OK) printf("fwd failed: %s\n", fa_last_error());
      auto t1 = std::chrono::steady_clock::now();
      const double c1 = process_cpu_seconds();
      if (!getenv("FA_BENCH_FWD_ONLY") && fa_bwd_cpu(&b) != FA_OK) printf("bwd failed: %s\n", fa_last_error());
      auto t2 = std::chrono::steady_clock::now();
      const double c2 = process_cpu_seconds();
      cpu_f = std::min(cpu_f, c1 - c0);
      cpu_b = std::min(cpu_b, c2 - c1);
      best_f = std::min(best_f, std::chrono::duration<double>(t1 - t0).count());
      best_b = std::min(best_b, std::chrono::duration<double>(t2 - t1).count());
    }
    double flops = 4.0 * B * H * (double)N * N * D;
    if (causal) flops *= 0.5;
    printf("  %s  fwd %8.2f ms %7.2f GFLOP/s   bwd %8.2f ms %7.2f GFLOP/s   (per CPU-second: fwd %6.2f, bwd %6.2f)\n",
           dtype_name(dt), best_f * 1e3, flops / best_f * 1e-9, best_b * 1e3, 2.5 * flops / best_b * 1e-9,
           flops / cpu_f * 1e-9, 2.5 * flops / cpu_b * 1e-9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "--bench") == 0) {
    int B = 1, H = 8, N = 2048, D = 64, causal = 0;
    if (argc >= 6) {
      B = atoi(argv[2]);
      H = atoi(argv[3]);
      N = atoi(argv[4]);
      D = atoi(argv[5]);
    }
    if (argc >= 7) causal = atoi(argv[6]);
    bench(B, H, N, D, causal != 0);
    return 0;
  }
  printf("cpu_check: kernels %s (FA_CPU_ISA=generic also tested), %u hardware threads\n", fa_internal_cpu_isa(),
         std::thread::hardware_concurrency());
  check_conversions();
  printf("attention vs float64 reference\n");
  const Case cases[] = {
      // name                 B  Nq   Nk   H Hkv  D  causal layout  dtype        bm  bn scale
      {"worked example", 1, 8, 8, 1, 1, 128, false, BSHD, FA_FLOAT32, 2, 2, 0},
      {"worked example causal", 1, 8, 8, 1, 1, 128, true, BSHD, FA_FLOAT32, 2, 2, 0},
      {"gqa causal", 2, 37, 53, 8, 2, 64, true, BSHD, FA_FLOAT32, 0, 0, 0},
      {"causal Nq>Nk", 1, 70, 33, 4, 4, 7, true, BHSD, FA_FLOAT32, 16, 8, 0},
      {"causal Nq>Nk odd blk", 2, 45, 20, 2, 1, 16, true, PADDED, FA_FLOAT32, 3, 5, 0},
      {"causal Nq<Nk mqa", 2, 33, 70, 4, 1, 100, true, BHSD, FA_FLOAT16, 0, 0, 0},
      {"head dim 1", 1, 20, 20, 2, 2, 1, true, BSHD, FA_FLOAT32, 3, 5, 0},
      {"head dim 7 fp16", 2, 19, 41, 3, 3, 7, false, PADDED, FA_FLOAT16, 0, 0, 0},
      {"head dim 256 bf16", 1, 40, 65, 2, 1, 256, false, BSHD, FA_BFLOAT16, 0, 0, 0},
      {"head dim 64 bf16", 2, 50, 50, 4, 2, 64, true, BHSD, FA_BFLOAT16, 0, 0, 0},
      {"head dim 256 causal", 1, 70, 70, 2, 2, 256, true, PADDED, FA_FLOAT32, 0, 0, 0},
      {"multi-block", 1, 300, 300, 2, 2, 64, true, BSHD, FA_FLOAT32, 0, 0, 0},
      {"multi-block fp16", 1, 200, 130, 2, 1, 96, false, BSHD, FA_FLOAT16, 0, 0, 0},
      {"decode Nq=1", 1, 1, 100, 4, 2, 64, true, BSHD, FA_FLOAT32, 0, 0, 0},
      {"blocks of 1", 1, 9, 11, 2, 1, 5, true, PADDED, FA_FLOAT32, 1, 1, 0},
      {"large scale", 1, 40, 40, 2, 2, 32, false, BSHD, FA_FLOAT32, 8, 8, 3.0f},
      {"big blocks", 1, 100, 90, 1, 1, 33, true, BHSD, FA_FLOAT32, 2000, 70, 0},
      {"negative scale", 2, 30, 45, 4, 2, 24, true, BSHD, FA_FLOAT32, 8, 16, -0.4f},
      {"many kv blocks", 2, 64, 200, 4, 2, 32, false, BSHD, FA_FLOAT16, 16, 8, 0},
  };
  uint32_t seed = 1234;
  for (const Case& c : cases) check_case(c, seed++);
  check_concurrency();
  check_edges();
  if (g_failures) {
    printf("cpu_check: %d check(s) FAILED\n", g_failures);
    return 1;
  }
  printf("cpu_check: all checks passed\n");
  return 0;
}
