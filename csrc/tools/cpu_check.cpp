// cpu_check: standalone correctness check (and timing) for the CPU backend.
//
//   cpu_check [-v]            all checks (conversions, attention fwd/bwd vs a float64 reference,
//                             thread-count determinism, concurrency, edge cases, validation;
//                             sliding window, softcap, packed and paged sequences; appendKV,
//                             rotary, merge); exits 1 when any fails. -v prints every variant's
//                             errors for the mask / packed / paged cases. FA_CHECK_RANDOM=n sets
//                             how many random cases of those run (default 90), FA_CHECK_SEED=s
//                             draws other ones.
//   cpu_check --bench [B H N D [causal]]
//                             times fa_fwd_cpu / fa_bwd_cpu (fp32, fp16, bf16); default 1 8 2048 64,
//                             best of FA_BENCH_REPS (5) runs; FA_BENCH_BM / _BN / _THREADS set the
//                             tile sizes and thread count, FA_BENCH_FWD_ONLY=1 skips the backward,
//                             FA_BENCH_WINDOW=left,right and FA_BENCH_SOFTCAP=c add a sliding
//                             window / softcap (GFLOP/s then still count the unmasked work).
//                             GFLOP/s use fwd = 4*B*H*N*N*D (halved when causal), bwd = 2.5x that.
//
// Every attention case runs with every kernel set the CPU has (the widest by default, AVX2 via
// FA_CPU_ISA=avx2 where the default is AVX-512, the portable one via FA_CPU_ISA=generic) and both
// backward schemes (FA_CPU_BWD=fused / twopass,
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

  // variants: kernel set (default; avx2 too when the default is avx512; generic when the default is
  // not) x backward scheme
  unsetenv("FA_CPU_ISA");
  struct Variant {
    const char* isa;
    const char* bwd;
    const char* slab;  // FA_CPU_FUSED_SLAB
  };
  std::vector<Variant> variants = {{nullptr, "fused", nullptr}, {nullptr, "twopass", nullptr}};
  if (strcmp(fa_internal_cpu_isa(), "avx512") == 0) {
    variants.push_back({"avx2", "fused", nullptr});
    variants.push_back({"avx2", "twopass", nullptr});
  }
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
// Masks, softcap, packed and paged sequences
// ---------------------------------------------------------------------------------------------
// The reference works per (sequence, head) on float64 copies of the stored inputs, with the mask
// written from its definition in fa_core.h (key j is visible to query i, at position
// p = i + Nk_b - Nq_b, when p - left <= j <= p + right; causal: j <= p), not from the library's
// range arithmetic. The softcapped score is c * tanh(s / c), s = scale * q.k; its exact gradient
// is dS_raw = P (dP - D) (1 - tanh^2) scale. Tolerances: fp32 relative L2 error <= 1e-5 per
// tensor (dQ, dK: relative to at least 0.1x the norm of their terms, see XRef::dq_terms);
// fp16 / bf16 max error <= 2x that of a naive implementation at the same precision (the same
// reference, rounding S, P, O, dP, dS and the gradients to the dtype as a framework would), plus
// one rounding of the largest reference value (dQ, dK: plus the effect of the stored O's
// rounding on D, see judge). lse: relative error <= 2e-5 everywhere. Exact zeros
// (and lse = +inf) are required for rows that see no key, exact zero dK / dV for keys no query sees.
// Paged caches hold NaN in every slot that the call must not read: unused pages, the tail of each
// sequence's last page, and the tokens that no query of the sequence sees (sliding window); page
// table entries past a sequence's pages hold out-of-range indices, and with a window, pages
// holding no visible token may be marked -1.

enum Mode { DENSE, PACKED, PAGED };
const char* mode_name(Mode m) { return m == DENSE ? "dense" : m == PACKED ? "packed" : "paged"; }

struct XCase {
  std::string name;
  Mode mode = DENSE;
  std::vector<int> nq, nk;  // per sequence (dense: all equal)
  int H = 1, Hkv = 1, D = 16;
  bool causal = false, window = false;
  int left = -1, right = -1;
  float softcap = 0.f;
  Layout layout = BSHD;
  fa_dtype dt = FA_FLOAT32;
  int bm = 0, bn = 0;
  float scale = 0.f;  // 0: 1/sqrt(D)
  float sd = 1.f;     // q and k ~ N(0, sd^2)
  int page_size = 16;
  int B() const { return (int)nq.size(); }
  float eff_scale() const { return scale != 0.f ? scale : 1.0f / sqrtf((float)D); }
};

std::string lengths(const std::vector<int>& n) {
  std::string s;
  for (size_t i = 0; i < n.size() && i < 8; ++i) s += (i ? "," : "") + std::to_string(n[i]);
  if (n.size() > 8) s += ",..(" + std::to_string(n.size()) + ")";
  return s;
}

std::string describe(const XCase& c) {
  char buf[512];
  std::string mask = c.causal ? "causal" : "";
  if (c.window) mask += (mask.empty() ? "" : "+") + std::string("win(") + std::to_string(c.left) + "," +
                        std::to_string(c.right) + ")";
  if (mask.empty()) mask = "full";
  snprintf(buf, sizeof buf, "%s: %s B=%d nq=[%s] nk=[%s] H=%d Hkv=%d D=%d %s%s %s %s bm=%d bn=%d%s", c.name.c_str(),
           mode_name(c.mode), c.B(), lengths(c.nq).c_str(), lengths(c.nk).c_str(), c.H, c.Hkv, c.D, mask.c_str(),
           c.softcap > 0 ? (" softcap " + std::to_string((int)c.softcap) + " scale " + std::to_string(c.eff_scale()).substr(0, 5)).c_str() : "",
           layout_name(c.layout), dtype_name(c.dt), c.bm, c.bn,
           c.mode == PAGED ? (" page " + std::to_string(c.page_size)).c_str() : "");
  return buf;
}

bool ref_visible(const XCase& c, int nq, int nk, int i, int j) {
  const int64_t p = (int64_t)i + nk - nq;
  if (j < 0 || j >= nk) return false;
  if (c.causal && j > p) return false;
  if (c.window && c.left >= 0 && j < p - c.left) return false;
  if (c.window && c.right >= 0 && j > p + c.right) return false;
  return true;
}

double round_to(fa_dtype dt, double x) {
  const float f = (float)x;
  if (dt == FA_FLOAT32) return f;
  if (dt == FA_FLOAT16) return fa::f16_bits_to_f32(fa::f32_to_f16_bits(f));
  return fa::bf16_bits_to_f32(fa::f32_to_bf16_bits(f));
}

struct XData {
  XCase c;
  std::vector<int64_t> qoff, koff;  // canonical row offsets of the sequences, [B + 1]
  Tensor q, k, v, dout;             // dense [B, N, H, D]; packed [1, total, H, D]; paged k, v: caches
  std::vector<int32_t> cu_q, cu_k, seqlens_k, page_table;
  int mpps = 0, num_pages = 0;
  int64_t total_q() const { return qoff.back(); }
  int64_t total_k() const { return koff.back(); }
  int max_q() const { return *std::max_element(c.nq.begin(), c.nq.end()); }
  int max_k() const { return *std::max_element(c.nk.begin(), c.nk.end()); }
  // Where row i of sequence b lives in q-shaped tensors (q, o, dout, dq): (batch, row).
  int qb(int b) const { return c.mode == DENSE ? b : 0; }
  int qn(int b, int i) const { return c.mode == DENSE ? i : (int)(qoff[b] + i); }
  // ... and token j in k-shaped tensors (k, v, dk, dv; paged: the caches).
  int kb(int b) const { return c.mode == DENSE ? b : 0; }
  int kn(int b, int j) const {
    if (c.mode == DENSE) return j;
    if (c.mode == PACKED) return (int)(koff[b] + j);
    return page_table[(size_t)b * mpps + j / c.page_size] * c.page_size + j % c.page_size;
  }
  int64_t lse_index(int b, int h, int i) const {
    if (c.mode == DENSE) return ((int64_t)b * c.H + h) * c.nq[0] + i;
    return h * total_q() + qoff[b] + i;
  }
};

// Is token j of sequence b seen by some query of it?
bool token_used(const XCase& c, int b, int j) {
  for (int i = 0; i < c.nq[b]; ++i)
    if (ref_visible(c, c.nq[b], c.nk[b], i, j)) return true;
  return false;
}

XData make_xdata(const XCase& c, std::mt19937& rng) {
  XData x;
  x.c = c;
  const int B = c.B();
  x.qoff.assign(B + 1, 0);
  x.koff.assign(B + 1, 0);
  for (int b = 0; b < B; ++b) {
    x.qoff[b + 1] = x.qoff[b] + c.nq[b];
    x.koff[b + 1] = x.koff[b] + c.nk[b];
  }
  std::normal_distribution<float> nd(0.f, c.sd);
  if (c.mode == DENSE) {
    x.q = random_tensor(B, c.nq[0], c.H, c.D, c.dt, c.layout, rng, c.sd);
    x.k = random_tensor(B, c.nk[0], c.Hkv, c.D, c.dt, c.layout, rng, c.sd);
    x.v = random_tensor(B, c.nk[0], c.Hkv, c.D, c.dt, c.layout, rng, 1.f);
    x.dout = random_tensor(B, c.nq[0], c.H, c.D, c.dt, c.layout, rng, 1.f);
    return x;
  }
  x.cu_q.assign(x.qoff.begin(), x.qoff.end());
  x.q = random_tensor(1, (int)x.total_q(), c.H, c.D, c.dt, c.layout, rng, c.sd);
  x.dout = random_tensor(1, (int)x.total_q(), c.H, c.D, c.dt, c.layout, rng, 1.f);
  if (c.mode == PACKED) {
    x.cu_k.assign(x.koff.begin(), x.koff.end());
    x.k = random_tensor(1, (int)x.total_k(), c.Hkv, c.D, c.dt, c.layout, rng, c.sd);
    x.v = random_tensor(1, (int)x.total_k(), c.Hkv, c.D, c.dt, c.layout, rng, 1.f);
    return x;
  }
  // paged: pages of all sequences in shuffled order, two spare pages, one spare table column
  const int ps = c.page_size;
  std::vector<int> np(B);
  int used = 0;
  for (int b = 0; b < B; ++b) {
    np[b] = (c.nk[b] + ps - 1) / ps;
    used += np[b];
    x.mpps = std::max(x.mpps, np[b]);
  }
  x.mpps += 1;
  x.num_pages = used + 2;
  std::vector<int32_t> perm(x.num_pages);
  for (int i = 0; i < x.num_pages; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  x.page_table.assign((size_t)B * x.mpps, 0);
  for (size_t i = 0; i < x.page_table.size(); ++i) x.page_table[i] = i % 2 ? -3 : x.num_pages + 5;  // never read
  int at = 0;
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < np[b]; ++j) x.page_table[(size_t)b * x.mpps + j] = perm[at++];
  x.seqlens_k.assign(c.nk.begin(), c.nk.end());
  x.k = Tensor(1, x.num_pages * ps, c.Hkv, c.D, c.dt, c.layout);
  x.v = Tensor(1, x.num_pages * ps, c.Hkv, c.D, c.dt, c.layout);
  for (size_t i = 0; i < x.k.buf.size() / dtype_size(c.dt); ++i) {
    x.k.set_raw((int64_t)i, NAN);
    x.v.set_raw((int64_t)i, NAN);
  }
  std::normal_distribution<float> n1(0.f, 1.f);
  for (int b = 0; b < B; ++b)
    for (int j = 0; j < c.nk[b]; ++j) {
      const bool use = token_used(c, b, j);
      for (int h = 0; h < c.Hkv; ++h)
        for (int d = 0; d < c.D; ++d) {
          const float kv = nd(rng), vv = n1(rng);
          x.k.set(0, x.kn(b, j), h, d, use ? kv : NAN);
          x.v.set(0, x.kn(b, j), h, d, use ? vv : NAN);
        }
    }
  if (c.window) {  // pages without a visible token are never read: some get an invalid index
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < np[b]; ++j) {
        bool any = false;
        for (int t = j * ps; t < std::min(c.nk[b], (j + 1) * ps); ++t) any |= token_used(c, b, t);
        if (!any && rng() % 2) x.page_table[(size_t)b * x.mpps + j] = -1;
      }
  }
  return x;
}

struct XRef {
  std::vector<double> o, lse, dq, dk, dv;  // o, dq [total_q][H][D]; lse [H][total_q]; dk, dv [total_k][Hkv][D]
  // [H][total_q]: the largest scale * sum_d |q_d k_d| over the keys a row sees. A score computed in
  // float32 carries an error of about sqrt(D) * 2^-24 times this (the dot product's rounding), and
  // lse, a smooth maximum of the scores, up to the largest score error.
  std::vector<double> smag;
  // L2 norms of dq and dk computed from the magnitudes of the terms of dS = P (dP - D): the scale
  // below which their float rounding cannot go (e.g. a row that sees one key has dS = 0 exactly).
  double dq_terms = 0, dk_terms = 0;
  // Largest element of dq, dk computed with |dS| replaced by P * sum_d |dO * O|: the bound of the
  // error that the rounding of the stored O (which D = rowsum(dO * O) uses) causes, per unit of
  // relative rounding error.
  double dq_dbound = 0, dk_dbound = 0;
  std::vector<char> q_empty;               // [total_q]: the row sees no key
  std::vector<char> k_unseen;              // [total_k]: no query sees the key
};

// lowp: round intermediates to the dtype like a naive same-precision implementation.
XRef x_reference(const XData& x, bool lowp) {
  const XCase& c = x.c;
  const int H = c.H, Hkv = c.Hkv, D = c.D, group = H / Hkv;
  const double scale = c.eff_scale(), cap = c.softcap;
  auto R = [&](double v) { return lowp ? round_to(c.dt, v) : v; };
  const int64_t TQ = x.total_q(), TK = x.total_k();
  XRef r;
  r.o.assign((size_t)TQ * H * D, 0.0);
  r.dq.assign((size_t)TQ * H * D, 0.0);
  r.lse.assign((size_t)H * TQ, INFINITY);
  r.smag.assign((size_t)H * TQ, 0.0);
  r.dk.assign((size_t)TK * Hkv * D, 0.0);
  r.dv.assign((size_t)TK * Hkv * D, 0.0);
  r.q_empty.assign((size_t)TQ, 1);
  r.k_unseen.assign((size_t)TK, 1);
  std::vector<double> qi(D), doi(D), oi(D), K, V, sc, P, dtv, dka((size_t)TK * Hkv * D, 0.0),
      dkb((size_t)TK * Hkv * D, 0.0);
  std::vector<int> js;
  for (int b = 0; b < c.B(); ++b) {
    const int nq = c.nq[b], nk = c.nk[b];
    K.assign((size_t)nk * D, 0.0);
    V.assign((size_t)nk * D, 0.0);
    for (int hk = 0; hk < Hkv; ++hk) {
      for (int j = 0; j < nk; ++j)
        for (int d = 0; d < D; ++d) {
          if (c.mode == PAGED && x.page_table[(size_t)b * x.mpps + j / c.page_size] < 0) continue;  // never seen
          K[(size_t)j * D + d] = x.k.get(x.kb(b), x.kn(b, j), hk, d);
          V[(size_t)j * D + d] = x.v.get(x.kb(b), x.kn(b, j), hk, d);
        }
      for (int h = hk * group; h < (hk + 1) * group; ++h)
        for (int i = 0; i < nq; ++i) {
          js.clear();
          for (int j = 0; j < nk; ++j)
            if (ref_visible(c, nq, nk, i, j)) js.push_back(j);
          if (js.empty()) continue;
          const int64_t row = x.qoff[b] + i;
          r.q_empty[row] = 0;
          for (int d = 0; d < D; ++d) {
            qi[d] = x.q.get(x.qb(b), x.qn(b, i), h, d);
            doi[d] = x.dout.get(x.qb(b), x.qn(b, i), h, d);
          }
          const size_t n = js.size();
          sc.assign(n, 0.0);
          P.assign(n, 0.0);
          dtv.assign(n, 1.0);
          double m = -INFINITY;
          double smag = 0;
          for (size_t t = 0; t < n; ++t) {
            double acc = 0, mag = 0;
            for (int d = 0; d < D; ++d) {
              acc += qi[d] * K[(size_t)js[t] * D + d];
              mag += fabs(qi[d] * K[(size_t)js[t] * D + d]);
            }
            smag = std::max(smag, fabs(scale) * mag);
            double s = R(scale * acc);
            if (cap > 0) {
              const double th = tanh(s / cap);
              s = R(cap * th);
              dtv[t] = 1 - th * th;
            }
            sc[t] = s;
            m = std::max(m, s);
          }
          double l = 0;
          for (size_t t = 0; t < n; ++t) l += exp(sc[t] - m);
          for (size_t t = 0; t < n; ++t) P[t] = R(exp(sc[t] - m) / l);
          r.lse[(size_t)h * TQ + row] = m + log(l);
          r.smag[(size_t)h * TQ + row] = smag;
          double Di = 0, Di_abs = 0;
          for (int d = 0; d < D; ++d) {
            double acc = 0;
            for (size_t t = 0; t < n; ++t) acc += P[t] * V[(size_t)js[t] * D + d];
            oi[d] = R(acc);
            r.o[((size_t)row * H + h) * D + d] = oi[d];
            Di += doi[d] * oi[d];
            Di_abs += fabs(doi[d] * oi[d]);
          }
          std::vector<double> dqi(D, 0.0), dqa(D, 0.0), dqb(D, 0.0);
          for (size_t t = 0; t < n; ++t) {
            const int j = js[t];
            double dp = 0;
            for (int d = 0; d < D; ++d) dp += doi[d] * V[(size_t)j * D + d];
            dp = R(dp);
            const double ds = R(P[t] * (dp - Di) * dtv[t]);
            const double ds_terms = P[t] * (fabs(dp) + fabs(Di)) * dtv[t];
            const int64_t krow = x.koff[b] + j;
            r.k_unseen[krow] = 0;
            double* dk = &r.dk[((size_t)krow * Hkv + hk) * D];
            double* dv = &r.dv[((size_t)krow * Hkv + hk) * D];
            double* dk_a = &dka[((size_t)krow * Hkv + hk) * D];
            double* dk_b = &dkb[((size_t)krow * Hkv + hk) * D];
            for (int d = 0; d < D; ++d) {
              dqi[d] += ds * K[(size_t)j * D + d];
              dqa[d] += ds_terms * fabs(K[(size_t)j * D + d]);
              dqb[d] += P[t] * Di_abs * dtv[t] * fabs(K[(size_t)j * D + d]);
              dk[d] += scale * ds * qi[d];
              dk_a[d] += fabs(scale) * ds_terms * fabs(qi[d]);
              dk_b[d] += fabs(scale) * P[t] * Di_abs * dtv[t] * fabs(qi[d]);
              dv[d] += P[t] * doi[d];
            }
          }
          for (int d = 0; d < D; ++d) {
            r.dq[((size_t)row * H + h) * D + d] = R(scale * dqi[d]);
            r.dq_terms += scale * scale * dqa[d] * dqa[d];
            r.dq_dbound = std::max(r.dq_dbound, fabs(scale) * dqb[d]);
          }
        }
    }
  }
  for (double& v : r.dk) v = R(v);
  for (double& v : r.dv) v = R(v);
  for (double v : dka) r.dk_terms += v * v;
  for (double v : dkb) r.dk_dbound = std::max(r.dk_dbound, v);
  r.dq_terms = sqrt(r.dq_terms);
  r.dk_terms = sqrt(r.dk_terms);
  return r;
}

struct XOut {
  Tensor o, dq, dk, dv;
  std::vector<float> lse, softmax_d;  // each followed by kSlack sentinels
  fa_status fs = FA_OK, bs = FA_OK;
};
constexpr int kSlack = 16;
constexpr float kSentinel = -12345.f;

fa_fwd_params x_fwd_params(const XData& x, XOut& out, int threads) {
  const XCase& c = x.c;
  fa_fwd_params f;
  memset(&f, 0, sizeof f);
  f.q = x.q.data();
  f.k = x.k.data();
  f.v = x.v.data();
  f.o = out.o.data();
  f.lse = out.lse.data();
  f.q_str = x.q.st;
  f.k_str = x.k.st;
  f.v_str = x.v.st;
  f.o_str = out.o.st;
  f.batch = c.B();
  f.seqlen_q = x.max_q();
  f.seqlen_k = x.max_k();
  f.heads = c.H;
  f.heads_k = c.Hkv;
  f.head_dim = c.D;
  f.scale = c.eff_scale();
  f.causal = c.causal;
  f.has_window = c.window;
  f.window_left = c.left;
  f.window_right = c.right;
  f.softcap = c.softcap;
  f.dtype = c.dt;
  f.block_m = c.bm;
  f.block_n = c.bn;
  f.num_threads = threads;
  if (c.mode != DENSE) {
    f.cu_seqlens_q = x.cu_q.data();
    f.total_q = (int)x.total_q();
  }
  if (c.mode == PACKED) {
    f.cu_seqlens_k = x.cu_k.data();
    f.total_k = (int)x.total_k();
  }
  if (c.mode == PAGED) {
    f.page_table = x.page_table.data();
    f.seqlens_k = x.seqlens_k.data();
    f.page_size = c.page_size;
    f.max_pages_per_seq = x.mpps;
    f.num_pages = x.num_pages;
    f.num_splits = c.page_size % 2 ? 3 : 0;  // key splits as given (odd page sizes), or the shape's own rule
  }
  return f;
}

XOut run_x(const XData& x, int threads) {
  const XCase& c = x.c;
  XOut out;
  const bool dense = c.mode == DENSE;
  const int B = dense ? c.B() : 1, NQ = dense ? c.nq[0] : (int)x.total_q(), NK = dense ? c.nk[0] : (int)x.total_k();
  const size_t n_lse = (size_t)c.B() * c.H * (dense ? c.nq[0] : 0) + (dense ? 0 : (size_t)c.H * x.total_q());
  out.o = Tensor(B, NQ, c.H, c.D, c.dt, c.layout);
  out.o.fill_all_sentinel();
  out.lse.assign(n_lse + kSlack, kSentinel);
  fa_fwd_params f = x_fwd_params(x, out, threads);
  out.fs = fa_fwd_cpu(&f);
  if (out.fs != FA_OK) {
    printf("    fa_fwd_cpu: %s: %s\n", fa_status_name(out.fs), fa_last_error());
    return out;
  }
  if (c.mode == PAGED) return out;
  out.dq = Tensor(B, NQ, c.H, c.D, c.dt, c.layout);
  out.dk = Tensor(B, NK, c.Hkv, c.D, c.dt, c.layout);
  out.dv = Tensor(B, NK, c.Hkv, c.D, c.dt, c.layout);
  out.dq.fill_all_sentinel();
  out.dk.fill_all_sentinel();
  out.dv.fill_all_sentinel();
  out.softmax_d.assign(n_lse + kSlack, kSentinel);
  fa_bwd_params bp;
  memset(&bp, 0, sizeof bp);
  bp.dout = x.dout.data();
  bp.q = x.q.data();
  bp.k = x.k.data();
  bp.v = x.v.data();
  bp.o = out.o.data();
  bp.lse = out.lse.data();
  bp.dq = out.dq.data();
  bp.dk = out.dk.data();
  bp.dv = out.dv.data();
  bp.do_str = x.dout.st;
  bp.q_str = x.q.st;
  bp.k_str = x.k.st;
  bp.v_str = x.v.st;
  bp.o_str = out.o.st;
  bp.dq_str = out.dq.st;
  bp.dk_str = out.dk.st;
  bp.dv_str = out.dv.st;
  bp.batch = c.B();
  bp.seqlen_q = f.seqlen_q;
  bp.seqlen_k = f.seqlen_k;
  bp.heads = c.H;
  bp.heads_k = c.Hkv;
  bp.head_dim = c.D;
  bp.scale = f.scale;
  bp.causal = c.causal;
  bp.has_window = c.window;
  bp.window_left = c.left;
  bp.window_right = c.right;
  bp.softcap = c.softcap;
  bp.dtype = c.dt;
  bp.block_m = c.bm;
  bp.block_n = c.bn;
  bp.num_threads = threads;
  bp.softmax_d = out.softmax_d.data();
  if (c.mode == PACKED) {
    bp.cu_seqlens_q = x.cu_q.data();
    bp.cu_seqlens_k = x.cu_k.data();
    bp.total_q = (int)x.total_q();
    bp.total_k = (int)x.total_k();
  }
  out.bs = fa_bwd_cpu(&bp);
  if (out.bs != FA_OK) printf("    fa_bwd_cpu: %s: %s\n", fa_status_name(out.bs), fa_last_error());
  return out;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same_bits_x(const XOut& a, const XOut& b) {
  return a.o.buf == b.o.buf && a.dq.buf == b.dq.buf && a.dk.buf == b.dk.buf && a.dv.buf == b.dv.buf &&
         same_floats(a.lse, b.lse) && same_floats(a.softmax_d, b.softmax_d);
}

struct XErr {
  double e2 = 0, r2 = 0, emax = 0, rmax = 0;
  bool nonfinite = false;
  void add(double got, double ref) {
    if (!std::isfinite(got)) nonfinite = true;
    const double e = fabs(got - ref);
    e2 += e * e;
    r2 += ref * ref;
    emax = std::max(emax, e);
    rmax = std::max(rmax, fabs(ref));
  }
  // floor: a norm below which the reference is not a meaningful scale (see XRef::dq_terms)
  double rel_l2(double floor = 0) const { return sqrt(e2) / std::max({sqrt(r2), floor, 1e-300}); }
};

// Errors of a q-shaped (o, dq) or k-shaped (dk, dv) output against a canonical reference; `get`
// reads the output. Also checks exact zeros where `zero` marks a row.
template <class Get>
XErr x_compare(const XData& x, bool kshape, const std::vector<double>& ref, const std::vector<char>& zero, Get get,
               bool* zeros_ok) {
  const XCase& c = x.c;
  const int heads = kshape ? c.Hkv : c.H;
  XErr e;
  for (int b = 0; b < c.B(); ++b) {
    const int n = kshape ? c.nk[b] : c.nq[b];
    const int64_t off = kshape ? x.koff[b] : x.qoff[b];
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < heads; ++h)
        for (int d = 0; d < c.D; ++d) {
          const double g = get(b, i, h, d);
          e.add(g, ref[((size_t)(off + i) * heads + h) * c.D + d]);
          if (zero[off + i] && g != 0.0) *zeros_ok = false;
        }
  }
  return e;
}

struct XVerdict {
  bool ok = true;
  std::string msg;
};

// One run against the reference (and, for fp16 / bf16, the naive same-precision errors).
XVerdict x_evaluate(const XData& x, const XOut& out, const XRef& ref, const XRef* naive) {
  const XCase& c = x.c;
  const bool fp32 = c.dt == FA_FLOAT32;
  XVerdict v;
  bool zeros_ok = true, naive_zeros = true;
  auto q_get = [&](const Tensor& t) {
    return [&x, &t](int b, int i, int h, int d) { return t.get(x.qb(b), x.qn(b, i), h, d); };
  };
  auto k_get = [&](const Tensor& t) {
    return [&x, &t](int b, int j, int h, int d) {
      return t.get(x.c.mode == DENSE ? b : 0, x.c.mode == DENSE ? j : (int)(x.koff[b] + j), h, d);
    };
  };
  // naive errors: the naive result compared with the exact one, through the same function
  auto naive_err = [&](bool kshape, const std::vector<double>& exact, const std::vector<double>& nv) {
    const XCase& cc = x.c;
    const int heads = kshape ? cc.Hkv : cc.H;
    return x_compare(x, kshape, exact, kshape ? ref.k_unseen : ref.q_empty,
                     [&](int b, int i, int h, int d) {
                       const int64_t off = kshape ? x.koff[b] : x.qoff[b];
                       return nv[((size_t)(off + i) * heads + h) * cc.D + d];
                     },
                     &naive_zeros);
  };
  char buf[768];
  std::string line;
  // floor: fp32, the norm of the terms (rel L2 denominator). dbound (fp16 / bf16): D = rowsum(dO *
  // O) uses the stored, rounded O in any implementation and dS = P (dP - D) cancels, so one
  // rounding times XRef::dq_dbound is added to the allowed error (with small head dims the naive
  // error is a poor sample of it).
  auto judge = [&](const char* name, const XErr& e, const XErr* ne, double floor = 0, double dbound = 0) {
    bool ok = !e.nonfinite;
    double shown;
    if (fp32) {
      shown = e.rel_l2(floor);
      ok &= shown <= 1e-5;
    } else {
      shown = e.emax / std::max(e.rmax, 1e-30);
      ok &= e.emax <= 2 * ne->emax + ldexp(e.rmax + dbound, c.dt == FA_FLOAT16 ? -11 : -8);
    }
    if (fp32) snprintf(buf, sizeof buf, " %s %.1e", name, shown);
    else snprintf(buf, sizeof buf, " %s %.1e (naive %.1e)", name, shown, ne->emax / std::max(ne->rmax, 1e-30));
    line += buf;
    if (!ok) line += "!";
    v.ok &= ok;
  };
  const XErr eo = x_compare(x, false, ref.o, ref.q_empty, q_get(out.o), &zeros_ok);
  XErr no;
  if (!fp32) no = naive_err(false, ref.o, naive->o);
  judge("o", eo, &no);
  // lse: +inf exactly for empty rows, else relative error; sentinels after the end untouched
  double lse_err = 0;
  bool lse_inf_ok = true;
  for (int b = 0; b < c.B(); ++b)
    for (int h = 0; h < c.H; ++h)
      for (int i = 0; i < c.nq[b]; ++i) {
        const double r = ref.lse[(size_t)h * x.total_q() + x.qoff[b] + i];
        const float g = out.lse[(size_t)x.lse_index(b, h, i)];
        if (std::isinf(r)) {
          lse_inf_ok &= std::isinf(g) && g > 0;
          continue;
        }
        // relative to max(1, |lse|), less what float32 scores alone may cost (XRef::smag)
        const double score_err = 2.0 * sqrt((double)c.D) * 0x1p-24 * ref.smag[(size_t)h * x.total_q() + x.qoff[b] + i];
        if (!std::isfinite(g)) lse_err = INFINITY;
        else lse_err = std::max(lse_err, std::max(0.0, fabs(g - r) - score_err) / std::max(1.0, fabs(r)));
      }
  bool slack_ok = true;
  for (size_t i = out.lse.size() - kSlack; i < out.lse.size(); ++i) slack_ok &= out.lse[i] == kSentinel;
  snprintf(buf, sizeof buf, " lse %.1e", lse_err);
  line += buf;
  v.ok &= lse_err <= 2e-5 && lse_inf_ok;
  bool gaps = out.o.gaps_untouched();
  if (c.mode != PAGED) {
    const XErr eq = x_compare(x, false, ref.dq, ref.q_empty, q_get(out.dq), &zeros_ok);
    const XErr ek = x_compare(x, true, ref.dk, ref.k_unseen, k_get(out.dk), &zeros_ok);
    const XErr ev = x_compare(x, true, ref.dv, ref.k_unseen, k_get(out.dv), &zeros_ok);
    XErr nq, nk, nv;
    if (!fp32) {
      nq = naive_err(false, ref.dq, naive->dq);
      nk = naive_err(true, ref.dk, naive->dk);
      nv = naive_err(true, ref.dv, naive->dv);
    }
    judge("dq", eq, &nq, 0.1 * ref.dq_terms, ref.dq_dbound);
    judge("dk", ek, &nk, 0.1 * ref.dk_terms, ref.dk_dbound);
    judge("dv", ev, &nv);
    gaps &= out.dq.gaps_untouched() && out.dk.gaps_untouched() && out.dv.gaps_untouched();
    // softmax_d: laid out as lse, = rowsum(dO * O) of the stored O
    double d_err = 0, d_max = 0;
    for (int b = 0; b < c.B(); ++b)
      for (int h = 0; h < c.H; ++h)
        for (int i = 0; i < c.nq[b]; ++i) {
          double acc = 0;
          for (int d = 0; d < c.D; ++d)
            acc += x.dout.get(x.qb(b), x.qn(b, i), h, d) * out.o.get(x.qb(b), x.qn(b, i), h, d);
          d_err = std::max(d_err, fabs(out.softmax_d[(size_t)x.lse_index(b, h, i)] - acc));
          d_max = std::max(d_max, fabs(acc));
        }
    for (size_t i = out.softmax_d.size() - kSlack; i < out.softmax_d.size(); ++i)
      slack_ok &= out.softmax_d[i] == kSentinel;
    if (!(d_err <= 1e-5 * std::max(d_max, 1.0))) {
      line += " SOFTMAX_D MISMATCH";
      v.ok = false;
    }
  }
  if (!(lse_inf_ok && zeros_ok)) line += "  EMPTY-ROW/KEY MISMATCH";
  if (!gaps || !slack_ok) line += "  WROTE OUTSIDE TENSOR";
  v.ok &= zeros_ok && gaps && slack_ok;
  v.msg = line;
  return v;
}

struct Variant {
  const char* isa;
  const char* bwd;
  const char* slab;  // FA_CPU_FUSED_SLAB
};

// Kernel set (default; avx2 too when the default is avx512; generic when the default is not) x
// backward scheme, as check_case.
std::vector<Variant> all_variants() {
  unsetenv("FA_CPU_ISA");
  std::vector<Variant> v = {{nullptr, "fused", nullptr}, {nullptr, "twopass", nullptr}};
  if (strcmp(fa_internal_cpu_isa(), "avx512") == 0) {
    v.push_back({"avx2", "fused", nullptr});
    v.push_back({"avx2", "twopass", nullptr});
  }
  if (strcmp(fa_internal_cpu_isa(), "generic") != 0) {
    v.push_back({"generic", "fused", nullptr});
    v.push_back({"generic", "twopass", nullptr});
  }
  v.push_back({nullptr, "fused", "1"});
  return v;
}

void set_variant(const Variant& v) {
  if (v.isa) setenv("FA_CPU_ISA", v.isa, 1);
  else unsetenv("FA_CPU_ISA");
  setenv("FA_CPU_BWD", v.bwd, 1);
  if (v.slab) setenv("FA_CPU_FUSED_SLAB", v.slab, 1);
  else unsetenv("FA_CPU_FUSED_SLAB");
}

void clear_variant() {
  unsetenv("FA_CPU_ISA");
  unsetenv("FA_CPU_BWD");
  unsetenv("FA_CPU_FUSED_SLAB");
}

int g_xcases = 0;

void check_xcase(const XCase& c, uint32_t seed, bool verbose) {
  std::mt19937 rng(seed);
  const XData x = make_xdata(c, rng);
  const XRef ref = x_reference(x, false);
  XRef naive;
  if (c.dt != FA_FLOAT32) naive = x_reference(x, true);
  ++g_xcases;
  const std::vector<Variant> variants = all_variants();
  std::vector<std::string> lines;
  bool all_ok = true;
  for (size_t pass = 0; pass < variants.size(); ++pass) {
    // paged calls have no backward: one pass per kernel set is enough
    if (c.mode == PAGED && strcmp(variants[pass].bwd, "fused") != 0) continue;
    if (c.mode == PAGED && variants[pass].slab) continue;
    set_variant(variants[pass]);
    const std::string isa = fa_internal_cpu_isa();
    char label[128];
    snprintf(label, sizeof label, "    %-7s bwd %-7s%s", isa.c_str(), variants[pass].bwd,
             variants[pass].slab ? " slab 1" : "       ");
    const XOut out = run_x(x, 0);
    if (out.fs != FA_OK || out.bs != FA_OK) {
      lines.push_back(std::string(label) + ": call failed");
      all_ok = false;
      continue;
    }
    const XVerdict v = x_evaluate(x, out, ref, c.dt == FA_FLOAT32 ? nullptr : &naive);
    lines.push_back(std::string(v.ok ? "" : "FAIL ") + label + v.msg);
    all_ok &= v.ok;
    if (pass < 2) {  // determinism across thread counts: 1, 3, 0 (all) agree bit for bit
      const XOut one = run_x(x, 1), three = run_x(x, 3);
      const bool same = same_bits_x(out, one) && same_bits_x(out, three);
      if (!same) lines.push_back(std::string("FAIL ") + label + " differs with 1 / 3 / all threads");
      all_ok &= same;
    }
  }
  clear_variant();
  report(all_ok, describe(c));
  if (verbose || !all_ok)
    for (const std::string& l : lines) printf("  %s\n", l.c_str());
}

XCase mk(const char* name, Mode m, std::vector<int> nq, std::vector<int> nk, int H, int Hkv, int D) {
  XCase c;
  c.name = name;
  c.mode = m;
  c.nq = std::move(nq);
  c.nk = std::move(nk);
  c.H = H;
  c.Hkv = Hkv;
  c.D = D;
  return c;
}
XCase win(XCase c, int left, int right) {
  c.window = true;
  c.left = left;
  c.right = right;
  return c;
}
XCase with(XCase c, fa_dtype dt, Layout lay = BSHD, int bm = 0, int bn = 0) {
  c.dt = dt;
  c.layout = lay;
  c.bm = bm;
  c.bn = bn;
  return c;
}
XCase causal(XCase c) {
  c.causal = true;
  return c;
}
XCase cap(XCase c, float softcap, bool large_scores) {
  c.softcap = softcap;
  if (large_scores) {  // scale 1 and sd 2: |q.k| up to ~100 at D 64
    c.scale = 1.f;
    c.sd = 2.f;
  }
  return c;
}
XCase page(XCase c, int ps) {
  c.page_size = ps;
  return c;
}

std::vector<XCase> fixed_xcases() {
  const std::vector<int> n37(2, 37);
  std::vector<XCase> v = {
      with(win(mk("diagonal only", DENSE, n37, n37, 2, 1, 16), 0, 0), FA_FLOAT32, BSHD, 8, 8),
      with(win(mk("window 1,1 Nq<Nk", DENSE, {20}, {45}, 4, 2, 32), 1, 1), FA_FLOAT32, BHSD),
      with(win(mk("window 0,-1 Nq>Nk", DENSE, {50, 50}, {30, 30}, 2, 2, 24), 0, -1), FA_FLOAT32, PADDED, 16, 8),
      with(causal(win(mk("causal + window 5,3", DENSE, {40}, {40}, 2, 1, 16), 5, 3)), FA_FLOAT16, PADDED, 8, 16),
      with(win(mk("window 1000,1000 (full)", DENSE, {33}, {70}, 2, 1, 40), 1000, 1000), FA_FLOAT32),
      with(win(mk("window -1,-1 (full)", DENSE, {33}, {70}, 2, 1, 40), -1, -1), FA_BFLOAT16),
      with(win(mk("window 17,0 multi-block", DENSE, {300}, {300}, 2, 2, 64), 17, 0), FA_FLOAT32),
      with(win(mk("window 2,0 Nq>Nk empty rows", DENSE, {60}, {20}, 2, 1, 8), 2, 0), FA_FLOAT32, BSHD, 7, 5),
      with(win(mk("window 0,3 Nq<Nk", DENSE, {9}, {64}, 3, 3, 13), 0, 3), FA_FLOAT16, BHSD, 2, 3),
      with(cap(mk("softcap 30 large scores", DENSE, {70}, {90}, 4, 2, 64), 30.f, true), FA_FLOAT32),
      with(causal(cap(mk("softcap 50 large scores", DENSE, {66}, {66}, 2, 2, 64), 50.f, true)), FA_FLOAT32, BSHD, 16, 16),
      with(cap(mk("softcap 30 large fp16", DENSE, {50}, {50}, 2, 1, 64), 30.f, true), FA_FLOAT16),
      with(causal(cap(mk("softcap 50 large bf16", DENSE, {40}, {57}, 2, 1, 64), 50.f, true)), FA_BFLOAT16, PADDED),
      with(cap(win(mk("softcap 5 + window gqa 8", DENSE, {45}, {45}, 8, 1, 32), 7, 2), 5.f, false), FA_FLOAT32, BSHD, 8, 16),
      with(causal(win(mk("gqa 8 window", DENSE, {64}, {100}, 16, 2, 16), 20, -1)), FA_FLOAT32),
      with(causal(mk("packed empty sequences", PACKED, {5, 0, 7, 3, 0}, {6, 4, 0, 3, 0}, 4, 2, 16)), FA_FLOAT32),
      with(mk("packed all empty keys", PACKED, {4, 3}, {0, 0}, 2, 1, 8), FA_FLOAT32),
      with(mk("packed no queries", PACKED, {0, 0}, {5, 3}, 2, 1, 8), FA_FLOAT32),
      with(causal(mk("packed long + short", PACKED, {130, 1, 70}, {90, 200, 70}, 2, 2, 64)), FA_FLOAT16),
      with(cap(mk("packed softcap", PACKED, {40, 33}, {41, 80}, 4, 1, 64), 50.f, true), FA_BFLOAT16, PADDED),
      with(cap(causal(win(mk("packed window softcap", PACKED, {17, 40, 2}, {30, 40, 9}, 6, 2, 32), 4, 0)), 30.f, false),
           FA_FLOAT32, BHSD, 5, 6),
      with(causal(page(mk("paged decode page 1", PAGED, {1, 1, 1, 1}, {37, 1, 0, 100}, 8, 2, 64), 1)), FA_FLOAT32),
      with(causal(page(mk("paged prefill page 3", PAGED, {20, 7}, {50, 7}, 4, 2, 32), 3)), FA_FLOAT16),
      with(causal(win(page(mk("paged window page 16", PAGED, {30, 5, 1}, {120, 60, 33}, 2, 1, 32), 16), 20, 0)), FA_FLOAT32),
      with(page(mk("paged page 64 in place", PAGED, {64, 3}, {200, 130}, 2, 2, 64), 64), FA_FLOAT32),
      with(causal(win(page(mk("paged page 64 unaligned window", PAGED, {10, 1}, {300, 250}, 2, 1, 32), 64), 70, 0)),
           FA_FLOAT32, BSHD, 0, 48),
      with(cap(page(mk("paged padded softcap", PAGED, {12, 1}, {40, 77}, 4, 4, 16), 16), 30.f, true), FA_BFLOAT16, PADDED),
      with(causal(page(mk("paged small tiles", PAGED, {9, 4}, {25, 4}, 2, 1, 7), 3)), FA_FLOAT32, BHSD, 5, 4),
  };
  // many short sequences
  XCase m = mk("packed 24 short sequences", PACKED, {}, {}, 2, 1, 8);
  std::mt19937 rng(99);
  for (int b = 0; b < 24; ++b) {
    m.nq.push_back(1 + (int)(rng() % 6));
    m.nk.push_back((int)(rng() % 7));
  }
  v.push_back(win(m, 2, 0));
  return v;
}

XCase random_xcase(std::mt19937& rng, int idx) {
  auto pick = [&](std::initializer_list<int> l) { return *(l.begin() + rng() % l.size()); };
  XCase c;
  c.name = "random " + std::to_string(idx);
  c.mode = (Mode)(idx % 3);
  c.dt = (fa_dtype)(rng() % 3);
  c.D = pick({1, 7, 8, 16, 32, 40, 64, 100, 128});
  const int group = pick({1, 2, 3, 4, 8});
  c.Hkv = 1 + (int)(rng() % 2);
  c.H = group * c.Hkv;
  c.layout = (Layout)(rng() % 3);
  if (c.mode == DENSE) {
    const int B = 1 + (int)(rng() % 3);
    const int nq = rng() % 20 == 0 ? 0 : 1 + (int)(rng() % 90), nk = rng() % 20 == 0 ? 0 : 1 + (int)(rng() % 90);
    c.nq.assign(B, nq);
    c.nk.assign(B, nk);
  } else {
    const int B = 1 + (int)(rng() % 5);
    const bool decode = c.mode == PAGED && rng() % 3 == 0;
    for (int b = 0; b < B; ++b) {
      c.nq.push_back(decode ? 1 : rng() % 6 == 0 ? 0 : 1 + (int)(rng() % 40));
      c.nk.push_back(rng() % 6 == 0 ? 0 : 1 + (int)(rng() % 120));
    }
  }
  c.causal = rng() % 5 < 2;
  if (rng() % 2) {
    c.window = true;
    c.left = pick({-1, 0, 1, 2, 5, 17, 1000});
    c.right = pick({-1, 0, 1, 2, 5, 17, 1000});
  }
  if (rng() % 10 < 3) {
    c.softcap = (float)pick({5, 30, 50});
    if (c.D >= 32 && rng() % 2) {
      c.scale = 1.f;
      c.sd = 2.f;
    }
  }
  if (rng() % 2) {
    c.bm = 1 + (int)(rng() % 40);
    c.bn = 1 + (int)(rng() % 40);
  }
  c.page_size = pick({1, 3, 16, 64});
  return c;
}

void check_xcases(bool verbose) {
  printf("masks, softcap, packed and paged sequences vs float64 reference\n");
  uint32_t seed = 777;
  for (const XCase& c : fixed_xcases()) check_xcase(c, seed++, verbose);
  std::mt19937 rng(getenv("FA_CHECK_SEED") ? (uint32_t)atoi(getenv("FA_CHECK_SEED")) : 2024u);
  const int n_random = getenv("FA_CHECK_RANDOM") ? atoi(getenv("FA_CHECK_RANDOM")) : 90;
  for (int i = 0; i < n_random; ++i) check_xcase(random_xcase(rng, i), seed++, verbose);
}

// causal == window (-1, 0); a packed batch of equal lengths == the dense batch (two-pass scheme).
void check_equivalences() {
  printf("equivalences\n");
  for (fa_dtype dt : {FA_FLOAT32, FA_BFLOAT16}) {
    std::mt19937 rng(5);
    const XCase a = with(causal(mk("c", DENSE, {3, 3}, {50, 50}, 4, 2, 32)), dt, BSHD, 0, 0);
    XCase b = with(win(mk("w", DENSE, {3, 3}, {50, 50}, 4, 2, 32), -1, 0), dt, BSHD, 0, 0);
    const XData xa = make_xdata(a, rng);
    XData xb = xa;
    xb.c = b;
    const XOut oa = run_x(xa, 0), ob = run_x(xb, 0);
    report(oa.fs == FA_OK && same_bits_x(oa, ob),
           std::string("causal and window (-1, 0) give the same bits (") + dtype_name(dt) + ")");
  }
  {
    setenv("FA_CPU_BWD", "twopass", 1);
    std::mt19937 rng(6);
    const XCase d = with(causal(mk("d", DENSE, {45, 45, 45}, {61, 61, 61}, 4, 2, 40)), FA_FLOAT16, BSHD, 0, 0);
    const XData xd = make_xdata(d, rng);
    XData xp = xd;
    xp.c.mode = PACKED;
    xp.cu_q.assign(xd.qoff.begin(), xd.qoff.end());
    xp.cu_k.assign(xd.koff.begin(), xd.koff.end());
    // the same values, packed: [B, N, H, D] bshd is [B * N, H, D]
    xp.q.B = xp.k.B = xp.v.B = xp.dout.B = 1;
    xp.q.N = xp.dout.N = 135;
    xp.k.N = xp.v.N = 183;
    const XOut od = run_x(xd, 0), op = run_x(xp, 0);
    bool same = od.fs == FA_OK && od.bs == FA_OK && op.fs == FA_OK && op.bs == FA_OK && od.o.buf == op.o.buf &&
                od.dq.buf == op.dq.buf && od.dk.buf == op.dk.buf && od.dv.buf == op.dv.buf;
    // lse: dense [B, H, N] vs packed [H, B * N]
    for (int b = 0; b < 3 && same; ++b)
      for (int h = 0; h < 4; ++h)
        for (int i = 0; i < 45; ++i) same &= od.lse[((size_t)b * 4 + h) * 45 + i] == op.lse[(size_t)h * 135 + b * 45 + i];
    report(same, "packed batch of equal lengths gives the dense batch's bits (two-pass backward)");
    unsetenv("FA_CPU_BWD");
  }
}

// ---- invalid index arrays and parameters -------------------------------------------------------
struct XValid {
  std::vector<float> q, k, v, o, lse, dq, dk, dv, dout;
  std::vector<int32_t> cu_q{0, 3, 5}, cu_k{0, 4, 8}, seqlens{4, 4}, pages{1, 0, 2, 3};
  fa_fwd_params f;
  fa_bwd_params b;
  XValid() {
    const int H = 2, D = 8;
    q.assign(5 * H * D, 0.5f);
    dout = dq = o = q;
    k.assign(8 * H * D, 0.25f);
    v = dk = dv = k;
    lse.assign(H * 5, 0.f);
    memset(&f, 0, sizeof f);
    f.q = q.data();
    f.k = k.data();
    f.v = v.data();
    f.o = o.data();
    f.lse = lse.data();
    f.q_str = f.o_str = f.k_str = f.v_str = fa_strides_bshd(1, H, D);
    f.batch = 2;
    f.seqlen_q = 3;
    f.seqlen_k = 4;
    f.heads = f.heads_k = H;
    f.head_dim = D;
    f.scale = 0.3f;
    f.dtype = FA_FLOAT32;
    f.cu_seqlens_q = cu_q.data();
    f.cu_seqlens_k = cu_k.data();
    f.total_q = 5;
    f.total_k = 8;
    memset(&b, 0, sizeof b);
    b.dout = dout.data();
    b.q = q.data();
    b.k = k.data();
    b.v = v.data();
    b.o = o.data();
    b.lse = lse.data();
    b.dq = dq.data();
    b.dk = dk.data();
    b.dv = dv.data();
    b.do_str = b.q_str = b.k_str = b.v_str = b.o_str = b.dq_str = b.dk_str = b.dv_str = f.q_str;
    b.batch = 2;
    b.seqlen_q = 3;
    b.seqlen_k = 4;
    b.heads = b.heads_k = H;
    b.head_dim = D;
    b.scale = 0.3f;
    b.dtype = FA_FLOAT32;
    b.cu_seqlens_q = cu_q.data();
    b.cu_seqlens_k = cu_k.data();
    b.total_q = 5;
    b.total_k = 8;
  }
  void paged(int page_size) {  // 4 pages of 2 tokens (page_size 2), 2 pages per sequence
    f.cu_seqlens_k = nullptr;
    f.page_table = pages.data();
    f.seqlens_k = seqlens.data();
    f.page_size = page_size;
    f.max_pages_per_seq = 2;
    f.num_pages = 4;
  }
};

void expect_status(fa_status got, fa_status want, const std::string& what) {
  report(got == want && (want == FA_OK || fa_last_error()[0] != 0),
         what + " -> " + fa_status_name(got) + (got == FA_OK ? "" : std::string(": ") + fa_last_error()));
}

void check_x_validation() {
  printf("validation of masks, packed and paged index arrays\n");
  {
    XValid t;
    expect_status(fa_fwd_cpu(&t.f), FA_OK, "packed forward works");
    expect_status(fa_bwd_cpu(&t.b), FA_OK, "packed backward works");
  }
  auto fwd = [](const char* what, void (*mutate)(XValid&)) {
    XValid t;
    mutate(t);
    expect_status(fa_fwd_cpu(&t.f), FA_ERR_INVALID, std::string("forward rejects ") + what);
  };
  auto bwd = [](const char* what, void (*mutate)(XValid&)) {
    XValid t;
    mutate(t);
    expect_status(fa_bwd_cpu(&t.b), FA_ERR_INVALID, std::string("backward rejects ") + what);
  };
  fwd("cu_seqlens_q[0] != 0", [](XValid& t) { t.cu_q[0] = 1; });
  fwd("decreasing cu_seqlens_q", [](XValid& t) { t.cu_q[1] = 6; });
  fwd("cu_seqlens_q[batch] != total_q", [](XValid& t) { t.f.total_q = 4; });
  fwd("negative total_q", [](XValid& t) { t.f.total_q = -1; });
  fwd("decreasing cu_seqlens_k", [](XValid& t) { t.cu_k[1] = 9; });
  fwd("cu_seqlens_k[0] != 0", [](XValid& t) { t.cu_k[0] = -1; });
  fwd("cu_seqlens_k[batch] != total_k", [](XValid& t) { t.f.total_k = 7; });
  fwd("negative total_k", [](XValid& t) { t.f.total_k = -8; });
  fwd("cu_seqlens_k without cu_seqlens_q", [](XValid& t) { t.f.cu_seqlens_q = nullptr; });
  fwd("cu_seqlens_q without cu_seqlens_k or page_table", [](XValid& t) { t.f.cu_seqlens_k = nullptr; });
  fwd("page_table and cu_seqlens_k together", [](XValid& t) {
    t.paged(2);
    t.f.cu_seqlens_k = t.cu_k.data();
  });
  fwd("page_table without cu_seqlens_q", [](XValid& t) {
    t.paged(2);
    t.f.cu_seqlens_q = nullptr;
  });
  fwd("page_table without seqlens_k", [](XValid& t) {
    t.paged(2);
    t.f.seqlens_k = nullptr;
  });
  fwd("page_size 0", [](XValid& t) { t.paged(0); });
  fwd("seqlens_k beyond max_pages_per_seq * page_size", [](XValid& t) {
    t.paged(2);
    t.seqlens[1] = 5;
  });
  fwd("negative seqlens_k", [](XValid& t) {
    t.paged(2);
    t.seqlens[0] = -1;
  });
  fwd("page index -1 for a token that is read", [](XValid& t) {
    t.paged(2);
    t.pages[1] = -1;
  });
  fwd("page index == num_pages", [](XValid& t) {
    t.paged(2);
    t.pages[2] = 4;
  });
  fwd("page index 2^30", [](XValid& t) {
    t.paged(2);
    t.pages[3] = 1 << 30;
  });
  fwd("window_left -2", [](XValid& t) {
    t.f.has_window = 1;
    t.f.window_left = -2;
  });
  fwd("window_right -5", [](XValid& t) {
    t.f.has_window = 1;
    t.f.window_right = -5;
  });
  fwd("softcap -1", [](XValid& t) { t.f.softcap = -1.f; });
  fwd("softcap NaN", [](XValid& t) { t.f.softcap = NAN; });
  fwd("softcap inf", [](XValid& t) { t.f.softcap = INFINITY; });
  {
    // A window that reads only the last page of each sequence: the other pages may be invalid.
    XValid t;
    t.paged(2);
    t.f.has_window = 1;
    t.f.window_left = 1;
    t.f.window_right = 0;
    t.cu_q = {0, 1, 2};
    t.f.total_q = 2;
    t.pages[0] = -1;
    t.pages[2] = 1 << 30;
    expect_status(fa_fwd_cpu(&t.f), FA_OK, "paged forward accepts invalid pages no query sees (window)");
    t.f.window_left = 2;
    expect_status(fa_fwd_cpu(&t.f), FA_ERR_INVALID, "... and rejects them once the window reaches them");
  }
  {
    XValid t;
    t.paged(2);
    t.seqlens = {0, 3};
    t.pages = {-1, 9, 2, 3};  // sequence 0 reads nothing
    expect_status(fa_fwd_cpu(&t.f), FA_OK, "paged forward ignores the pages of a sequence without tokens");
  }
  bwd("cu_seqlens_q without cu_seqlens_k", [](XValid& t) { t.b.cu_seqlens_k = nullptr; });
  bwd("cu_seqlens_k without cu_seqlens_q", [](XValid& t) { t.b.cu_seqlens_q = nullptr; });
  bwd("cu_seqlens_q[batch] != total_q", [](XValid& t) { t.b.total_q = 6; });
  bwd("cu_seqlens_k[batch] != total_k", [](XValid& t) { t.b.total_k = 7; });
  bwd("decreasing cu_seqlens_k", [](XValid& t) { t.cu_k[1] = 9; });
  bwd("cu_seqlens_q[0] != 0", [](XValid& t) { t.cu_q[0] = 2; });
  bwd("negative total_k", [](XValid& t) { t.b.total_k = -8; });
  bwd("window_left -3", [](XValid& t) {
    t.b.has_window = 1;
    t.b.window_left = -3;
  });
  bwd("negative softcap", [](XValid& t) { t.b.softcap = -0.5f; });
}

// ---- appendKV, rotary, merge -------------------------------------------------------------------
// Rotary tables as RoPE builds them (float32): angle = p * base^(-2i / rotary_dim).
struct RopeTable {
  std::vector<float> cos, sin;
  RopeTable(int max_pos, int rd) {
    for (int p = 0; p < max_pos; ++p)
      for (int i = 0; i < rd / 2; ++i) {
        const double a = p * pow(10000.0, -2.0 * i / rd);
        cos.push_back((float)::cos(a));
        sin.push_back((float)::sin(a));
      }
  }
};

// x (D values) rotated at `pos` in float64; NaN in the rotated features for a position outside
// [0, max_pos).
std::vector<double> ref_rope(std::vector<double> x, const fa_rotary& r, int64_t pos) {
  const int half = r.rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const int a = r.interleaved ? 2 * i : i, b = r.interleaved ? 2 * i + 1 : i + half;
    if (pos < 0 || pos >= r.max_position) {
      x[a] = x[b] = NAN;
      continue;
    }
    const double c = r.cos[pos * half + i], s = r.sin[pos * half + i], xa = x[a], xb = x[b];
    x[a] = xa * c - xb * s;
    x[b] = xa * s + xb * c;
  }
  return x;
}

// A stored value against its float64 expectation: within one unit in the last place of the dtype
// (NaN expected: NaN).
bool close_ulp(double got, double want, fa_dtype dt) {
  if (std::isnan(want)) return std::isnan(got);
  const int bits = dt == FA_FLOAT32 ? 24 : dt == FA_FLOAT16 ? 11 : 8;
  return fabs(got - want) <= fabs(want) * ldexp(1.0, 1 - bits) + 1e-7;
}

// Flat contiguous tensor of n elements of dtype dt.
struct Flat {
  fa_dtype dt;
  std::vector<unsigned char> buf;
  Flat(size_t n, fa_dtype t) : dt(t), buf(n * dtype_size(t)) {}
  void* data() { return buf.data(); }
  void set(size_t i, float x) {
    if (dt == FA_FLOAT32) memcpy(&buf[i * 4], &x, 4);
    else {
      const uint16_t h = dt == FA_FLOAT16 ? fa::f32_to_f16_bits(x) : fa::f32_to_bf16_bits(x);
      memcpy(&buf[i * 2], &h, 2);
    }
  }
  double get(size_t i) const {
    if (dt == FA_FLOAT32) {
      float x;
      memcpy(&x, &buf[i * 4], 4);
      return x;
    }
    uint16_t h;
    memcpy(&h, &buf[i * 2], 2);
    return dt == FA_FLOAT16 ? fa::f16_bits_to_f32(h) : fa::bf16_bits_to_f32(h);
  }
  bool same(size_t i, const Flat& o, size_t j) const {
    const size_t es = dtype_size(dt);
    return memcmp(&buf[i * es], &o.buf[j * es], es) == 0;
  }
};

void check_append_kv() {
  printf("appendKV (paged cache writes, rotary)\n");
  const int B = 4, Hkv = 2, D = 16;
  const std::vector<int> before = {5, 0, 20, 2}, n_new = {3, 4, 4, 2};
  int combos = 0, failed = 0;
  for (int ps : {1, 3, 16, 64})
    for (fa_dtype dt : {FA_FLOAT32, FA_FLOAT16, FA_BFLOAT16})
      for (int rot = 0; rot < 3; ++rot) {  // none, non-interleaved, interleaved
        const int rd = rot == 0 ? 0 : (ps % 2 ? 8 : 16);  // partial and full rotary dims
        std::mt19937 rng(1000 + ps * 7 + dt * 3 + rot);
        std::normal_distribution<float> nd(0.f, 1.f);
        std::vector<int32_t> cu(B + 1, 0), sb(before.begin(), before.end());
        for (int b = 0; b < B; ++b) cu[b + 1] = cu[b] + n_new[b];
        const int total = cu[B];
        int mpps = 0, used = 0;
        std::vector<int> np(B);
        for (int b = 0; b < B; ++b) {
          np[b] = (before[b] + n_new[b] + ps - 1) / ps;
          mpps = std::max(mpps, np[b]);
          used += np[b];
        }
        mpps += 1;
        const int num_pages = used + 2;
        std::vector<int32_t> perm(num_pages), table((size_t)B * mpps, -1);
        for (int i = 0; i < num_pages; ++i) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), rng);
        int at = 0;
        for (int b = 0; b < B; ++b)
          for (int j = 0; j < np[b]; ++j) table[(size_t)b * mpps + j] = perm[at++];
        table[(size_t)3 * mpps + 2 / ps] = -1;  // sequence 3's token 2 goes to a skipped page
        const size_t row = (size_t)Hkv * D, cache_n = (size_t)num_pages * ps * row;
        Flat kc(cache_n, dt), vc(cache_n, dt), k((size_t)total * row, dt), v((size_t)total * row, dt);
        for (size_t i = 0; i < cache_n; ++i) {
          kc.set(i, nd(rng));
          vc.set(i, nd(rng));
        }
        for (size_t i = 0; i < (size_t)total * row; ++i) {
          k.set(i, nd(rng));
          v.set(i, nd(rng));
        }
        const Flat kc0 = kc, vc0 = vc;
        const RopeTable tab(22, std::max(rd, 2));  // positions >= 22 get NaN
        fa_append_kv_params p;
        memset(&p, 0, sizeof p);
        p.k_cache = kc.data();
        p.v_cache = vc.data();
        p.k = k.data();
        p.v = v.data();
        p.page_table = table.data();
        p.cu_seqlens_new = cu.data();
        p.seqlens_before = sb.data();
        p.batch = B;
        p.total_new = total;
        p.heads_k = Hkv;
        p.head_dim = D;
        p.page_size = ps;
        p.max_pages_per_seq = mpps;
        p.num_pages = num_pages;
        p.dtype = dt;
        if (rot) {
          p.rotary.cos = tab.cos.data();
          p.rotary.sin = tab.sin.data();
          p.rotary.rotary_dim = rd;
          p.rotary.max_position = 22;
          p.rotary.interleaved = rot == 2;
        }
        p.num_threads = combos % 2 ? 1 : 0;
        const fa_status s = fa_append_kv_cpu(&p);
        // expected: every written slot, then everything else unchanged
        std::vector<char> written(cache_n / row, 0);
        bool ok = s == FA_OK;
        for (int b = 0; b < B && ok; ++b)
          for (int i = 0; i < n_new[b]; ++i) {
            const int t = before[b] + i;
            const int page = table[(size_t)b * mpps + t / ps];
            if (page < 0) continue;
            const size_t slot = (size_t)page * ps + t % ps, src = (size_t)(cu[b] + i);
            written[slot] = 1;
            for (int h = 0; h < Hkv; ++h) {
              std::vector<double> x(D);
              for (int d = 0; d < D; ++d) x[d] = k.get(src * row + h * D + d);
              const std::vector<double> want = rot ? ref_rope(x, p.rotary, t) : x;
              for (int d = 0; d < D; ++d) {
                const size_t ci = slot * row + h * D + d, ki = src * row + h * D + d;
                ok &= d < rd ? close_ulp(kc.get(ci), want[d], dt) : kc.same(ci, k, ki);
                ok &= vc.same(ci, v, ki);
              }
            }
          }
        for (size_t slot = 0; slot < written.size(); ++slot)
          if (!written[slot])
            for (size_t e = slot * row; e < (slot + 1) * row; ++e) ok &= kc.same(e, kc0, e) && vc.same(e, vc0, e);
        ++combos;
        if (!ok) {
          ++failed;
          printf("    FAIL page %d %s rotary %s: %s\n", ps, dtype_name(dt), rot == 0 ? "none" : rot == 1 ? "neox" : "gptj",
                 s == FA_OK ? "wrong values" : fa_last_error());
        }
      }
  report(failed == 0, std::to_string(combos) + " combinations of page size 1/3/16/64 x dtype x rotary none / "
                      "non-interleaved / interleaved (partial dims, NaN past max_position, a skipped page)");
  // validation
  {
    std::vector<float> kc(64 * 8), vc(64 * 8), k(6 * 8), v(6 * 8);
    std::vector<int32_t> table = {0, 1, 2, 3}, cu = {0, 2, 6}, sb = {3, 2};
    std::vector<float> cs(8 * 2, 1.f), sn(8 * 2, 0.f);
    auto base = [&]() {
      fa_append_kv_params p;
      memset(&p, 0, sizeof p);
      p.k_cache = kc.data();
      p.v_cache = vc.data();
      p.k = k.data();
      p.v = v.data();
      p.page_table = table.data();
      p.cu_seqlens_new = cu.data();
      p.seqlens_before = sb.data();
      p.batch = 2;
      p.total_new = 6;
      p.heads_k = 1;
      p.head_dim = 8;
      p.page_size = 4;
      p.max_pages_per_seq = 2;
      p.num_pages = 4;
      p.dtype = FA_FLOAT32;
      return p;
    };
    fa_append_kv_params p = base();
    expect_status(fa_append_kv_cpu(&p), FA_OK, "appendKV valid call");
    p = base();
    sb[1] = 5;  // 5 + 4 > 2 pages * 4
    expect_status(fa_append_kv_cpu(&p), FA_ERR_INVALID, "appendKV rejects seqlens_before + new past the page table");
    sb[1] = -1;
    expect_status(fa_append_kv_cpu(&p), FA_ERR_INVALID, "appendKV rejects negative seqlens_before");
    sb[1] = 2;
    p.total_new = 5;
    expect_status(fa_append_kv_cpu(&p), FA_ERR_INVALID, "appendKV rejects cu_seqlens_new[batch] != total_new");
    p = base();
    cu[1] = 7;
    expect_status(fa_append_kv_cpu(&p), FA_ERR_INVALID, "appendKV rejects decreasing cu_seqlens_new");
    cu[1] = 2;
    for (int rd : {0, 3, 10}) {
      p = base();
      p.rotary.cos = cs.data();
      p.rotary.sin = sn.data();
      p.rotary.rotary_dim = rd;
      p.rotary.max_position = 8;
      expect_status(fa_append_kv_cpu(&p), FA_ERR_INVALID, "appendKV rejects rotary_dim " + std::to_string(rd));
    }
    p = base();
    p.rotary.cos = cs.data();  // sin missing
    p.rotary.rotary_dim = 4;
    expect_status(fa_append_kv_cpu(&p), FA_ERR_INVALID, "appendKV rejects rotary cos without sin");
    p = base();
    p.page_size = 0;
    expect_status(fa_append_kv_cpu(&p), FA_ERR_INVALID, "appendKV rejects page_size 0");
  }
}

void check_rotary() {
  printf("rotary on packed rows\n");
  const int B = 3, H = 2, D = 12;
  const std::vector<int> n = {4, 0, 5};
  const std::vector<int32_t> cu = {0, 4, 4, 9}, pos_start = {0, 3, 7}, pos_end = {4, 10, 3};
  const int total = 9, max_pos = 9;
  int combos = 0, failed = 0;
  for (fa_dtype dt : {FA_FLOAT32, FA_FLOAT16, FA_BFLOAT16})
    for (int inter = 0; inter < 2; ++inter)
      for (int rd : {12, 6})
        for (int inplace = 0; inplace < 2; ++inplace)
          for (int by_end = 0; by_end < 2; ++by_end) {
            std::mt19937 rng(300 + combos);
            std::normal_distribution<float> nd(0.f, 1.f);
            const size_t N = (size_t)total * H * D;
            Flat x(N, dt), out(N, dt);
            for (size_t i = 0; i < N; ++i) {
              x.set(i, nd(rng));
              out.set(i, -777.f);
            }
            const Flat x0 = x;
            const RopeTable tab(max_pos, rd);
            fa_rotary_params p;
            memset(&p, 0, sizeof p);
            p.x = x.data();
            p.out = inplace ? x.data() : out.data();
            p.cu_seqlens = cu.data();
            p.pos_start = by_end ? nullptr : pos_start.data();
            p.pos_end = pos_end.data();
            p.batch = B;
            p.total = total;
            p.heads = H;
            p.head_dim = D;
            p.dtype = dt;
            p.rotary.cos = tab.cos.data();
            p.rotary.sin = tab.sin.data();
            p.rotary.rotary_dim = rd;
            p.rotary.max_position = max_pos;
            p.rotary.interleaved = inter;
            p.num_threads = combos % 2 ? 1 : 0;
            const fa_status s = fa_rotary_cpu(&p);
            const Flat& got = inplace ? x : out;
            bool ok = s == FA_OK;
            for (int b = 0; b < B && ok; ++b)
              for (int i = 0; i < n[b]; ++i) {
                const int64_t pos = by_end ? pos_end[b] - n[b] + i : pos_start[b] + i;
                for (int h = 0; h < H; ++h) {
                  const size_t r0 = ((size_t)(cu[b] + i) * H + h) * D;
                  std::vector<double> v(D);
                  for (int d = 0; d < D; ++d) v[d] = x0.get(r0 + d);
                  const std::vector<double> want = ref_rope(v, p.rotary, pos);
                  for (int d = 0; d < D; ++d)
                    ok &= d < rd ? close_ulp(got.get(r0 + d), want[d], dt) : got.same(r0 + d, x0, r0 + d);
                }
              }
            ++combos;
            if (!ok) {
              ++failed;
              printf("    FAIL %s %s rd %d %s %s: %s\n", dtype_name(dt), inter ? "interleaved" : "neox", rd,
                     inplace ? "in place" : "out of place", by_end ? "pos_end" : "pos_start",
                     s == FA_OK ? "wrong values" : fa_last_error());
            }
          }
  report(failed == 0, std::to_string(combos) + " combinations of dtype x layout x rotary dim x in place x "
                      "pos_start / pos_end (empty sequence, NaN outside [0, max_position))");
  {
    std::vector<float> x(9 * 2 * 12), cs(9 * 6, 1.f), sn(9 * 6, 0.f);
    std::vector<int32_t> c2 = {0, 4, 9};
    auto base = [&]() {
      fa_rotary_params p;
      memset(&p, 0, sizeof p);
      p.x = p.out = x.data();
      p.cu_seqlens = c2.data();
      p.pos_start = pos_start.data();
      p.batch = 2;
      p.total = 9;
      p.heads = 2;
      p.head_dim = 12;
      p.dtype = FA_FLOAT32;
      p.rotary.cos = cs.data();
      p.rotary.sin = sn.data();
      p.rotary.rotary_dim = 12;
      p.rotary.max_position = 9;
      return p;
    };
    fa_rotary_params p = base();
    expect_status(fa_rotary_cpu(&p), FA_OK, "rotary valid call");
    p.rotary.rotary_dim = 7;
    expect_status(fa_rotary_cpu(&p), FA_ERR_INVALID, "rotary rejects odd rotary_dim");
    p = base();
    p.rotary.rotary_dim = 14;
    expect_status(fa_rotary_cpu(&p), FA_ERR_INVALID, "rotary rejects rotary_dim > head_dim");
    p = base();
    p.rotary.cos = nullptr;
    expect_status(fa_rotary_cpu(&p), FA_ERR_INVALID, "rotary rejects null cos");
    p = base();
    p.pos_start = nullptr;
    expect_status(fa_rotary_cpu(&p), FA_ERR_INVALID, "rotary rejects missing pos_start and pos_end");
    p = base();
    p.total = 8;
    expect_status(fa_rotary_cpu(&p), FA_ERR_INVALID, "rotary rejects cu_seqlens[batch] != total");
    p = base();
    c2[1] = 10;
    expect_status(fa_rotary_cpu(&p), FA_ERR_INVALID, "rotary rejects decreasing cu_seqlens");
    c2[1] = 4;
  }
}

void check_merge() {
  printf("merge of partial attention results\n");
  // End to end: attention over keys [0, 20), [] and [20, 50) separately, merged, against float64
  // attention over all 50 keys; also merged in place into the first partial.
  const int B = 2, Nq = 13, Nk = 50, H = 4, Hkv = 2, D = 32;
  const int cuts[] = {0, 20, 20, 50};
  for (fa_dtype dt : {FA_FLOAT32, FA_FLOAT16, FA_BFLOAT16})
    for (int inplace = 0; inplace < 2; ++inplace) {
      std::mt19937 rng(50 + dt);
      const Tensor q = random_tensor(B, Nq, H, D, dt, BSHD, rng, 1.f);
      const Tensor k = random_tensor(B, Nk, Hkv, D, dt, BSHD, rng, 1.f);
      const Tensor v = random_tensor(B, Nk, Hkv, D, dt, BSHD, rng, 1.f);
      std::vector<Tensor> outs(3);
      std::vector<std::vector<float>> lses(3);
      bool ok = true;
      for (int i = 0; i < 3; ++i) {
        outs[i] = Tensor(B, Nq, H, D, dt, BSHD);
        lses[i].assign((size_t)B * H * Nq, 0.f);
        fa_fwd_params f;
        memset(&f, 0, sizeof f);
        f.q = q.data();
        f.k = static_cast<const char*>(k.data()) + (size_t)cuts[i] * k.st.row * dtype_size(dt);
        f.v = static_cast<const char*>(v.data()) + (size_t)cuts[i] * v.st.row * dtype_size(dt);
        f.o = outs[i].data();
        f.lse = lses[i].data();
        f.q_str = f.o_str = q.st;
        f.k_str = f.v_str = k.st;
        f.batch = B;
        f.seqlen_q = Nq;
        f.seqlen_k = cuts[i + 1] - cuts[i];
        f.heads = H;
        f.heads_k = Hkv;
        f.head_dim = D;
        f.scale = 1.f / sqrtf((float)D);
        f.dtype = dt;
        ok &= fa_fwd_cpu(&f) == FA_OK;
      }
      Tensor merged(B, Nq, H, D, dt, BSHD);
      std::vector<float> lse((size_t)B * H * Nq);
      const void* po[3] = {outs[0].data(), outs[1].data(), outs[2].data()};
      const float* pl[3] = {lses[0].data(), lses[1].data(), lses[2].data()};
      fa_merge_params m;
      memset(&m, 0, sizeof m);
      m.num = 3;
      m.outs = po;
      m.lses = pl;
      m.out = inplace ? outs[0].data() : merged.data();
      m.lse = inplace ? lses[0].data() : lse.data();
      m.batch = B;
      m.seqlen = Nq;
      m.heads = H;
      m.head_dim = D;
      m.dtype = dt;
      ok &= fa_merge_cpu(&m) == FA_OK;
      const Tensor& got = inplace ? outs[0] : merged;
      const std::vector<float>& got_lse = inplace ? lses[0] : lse;
      XErr e;
      double lse_err = 0;
      const double sc = (double)(1.f / sqrtf((float)D));
      for (int b = 0; b < B; ++b)
        for (int h = 0; h < H; ++h)
          for (int i = 0; i < Nq; ++i) {
            std::vector<double> s(Nk);
            double mx = -INFINITY;
            for (int j = 0; j < Nk; ++j) {
              double acc = 0;
              for (int d = 0; d < D; ++d) acc += q.get(b, i, h, d) * k.get(b, j, h / (H / Hkv), d);
              s[j] = acc * sc;
              mx = std::max(mx, s[j]);
            }
            double l = 0;
            for (int j = 0; j < Nk; ++j) l += exp(s[j] - mx);
            for (int d = 0; d < D; ++d) {
              double acc = 0;
              for (int j = 0; j < Nk; ++j) acc += exp(s[j] - mx) / l * v.get(b, j, h / (H / Hkv), d);
              e.add(got.get(b, i, h, d), acc);
            }
            const double want = mx + log(l);
            lse_err = std::max(lse_err, fabs(got_lse[((size_t)b * H + h) * Nq + i] - want) / std::max(1.0, fabs(want)));
          }
      const double tol = dt == FA_FLOAT32 ? 1e-5 : dt == FA_FLOAT16 ? 2e-3 : 1.6e-2;
      const double err = dt == FA_FLOAT32 ? e.rel_l2() : e.emax / e.rmax;
      ok &= err <= tol && lse_err <= 2e-5 && !e.nonfinite;
      char msg[256];
      snprintf(msg, sizeof msg, "%s%s: attention over 3 key chunks (one empty) merged vs all keys: %s %.1e, lse %.1e",
               dtype_name(dt), inplace ? " in place" : "", dt == FA_FLOAT32 ? "rel L2" : "max rel", err, lse_err);
      report(ok, msg);
    }
  // Synthetic partials: +-inf lse (with NaN outputs that must be ignored), rows no partial saw.
  {
    const int num = 3, b2 = 2, n2 = 5, h2 = 3, d2 = 12;
    std::mt19937 rng(77);
    std::normal_distribution<float> nd(0.f, 3.f);
    const size_t rows = (size_t)b2 * n2 * h2;
    std::vector<std::vector<float>> o(num, std::vector<float>(rows * d2)), l(num, std::vector<float>(rows));
    for (int i = 0; i < num; ++i)
      for (size_t r = 0; r < rows; ++r) {  // r = (b * n2 + s) * h2 + h: the out row
        const size_t h = r % h2, s = r / h2 % n2, b = r / h2 / n2, li = (b * h2 + h) * n2 + s;
        const int kind = (int)(rng() % 6);
        l[i][li] = kind == 0 ? INFINITY : kind == 1 ? -INFINITY : nd(rng);
        if ((r % 7) == 3) l[i][li] = i % 2 ? INFINITY : -INFINITY;  // rows that no partial saw
        for (int d = 0; d < d2; ++d) o[i][r * d2 + d] = std::isinf(l[i][li]) ? NAN : nd(rng);
      }
    std::vector<float> out(rows * d2, 5.f), lse(rows, 5.f);
    const void* po[num] = {o[0].data(), o[1].data(), o[2].data()};
    const float* pl[num] = {l[0].data(), l[1].data(), l[2].data()};
    fa_merge_params m;
    memset(&m, 0, sizeof m);
    m.num = num;
    m.outs = po;
    m.lses = pl;
    m.out = out.data();
    m.lse = lse.data();
    m.batch = b2;
    m.seqlen = n2;
    m.heads = h2;
    m.head_dim = d2;
    m.dtype = FA_FLOAT32;
    bool ok = fa_merge_cpu(&m) == FA_OK;
    int empty = 0;
    for (int b = 0; b < b2; ++b)
      for (int s = 0; s < n2; ++s)
        for (int h = 0; h < h2; ++h) {
          const size_t orow = ((size_t)b * n2 + s) * h2 + h, li = ((size_t)b * h2 + h) * n2 + s;
          double mx = -INFINITY;
          for (int i = 0; i < num; ++i)
            if (!std::isinf(l[i][li])) mx = std::max(mx, (double)l[i][li]);
          if (mx == -INFINITY) {
            ++empty;
            ok &= std::isinf(lse[li]) && lse[li] > 0;
            for (int d = 0; d < d2; ++d) ok &= out[orow * d2 + d] == 0.f;
            continue;
          }
          double sum = 0;
          for (int i = 0; i < num; ++i)
            if (!std::isinf(l[i][li])) sum += exp(l[i][li] - mx);
          ok &= fabs(lse[li] - (mx + log(sum))) <= 1e-6 * std::max(1.0, fabs(mx));
          for (int d = 0; d < d2; ++d) {
            double want = 0;
            for (int i = 0; i < num; ++i)
              if (!std::isinf(l[i][li])) want += exp(l[i][li] - mx) / sum * o[i][orow * d2 + d];
            ok &= fabs(out[orow * d2 + d] - want) <= 1e-6 * std::max(1.0, fabs(want));
          }
        }
    report(ok && empty > 0, "synthetic partials with +-inf lse and NaN outputs ignored, " + std::to_string(empty) +
                                " rows without keys -> 0 / +inf");
    m.num = 0;
    expect_status(fa_merge_cpu(&m), FA_ERR_INVALID, "merge rejects num 0");
    m.num = num;
    po[1] = nullptr;
    expect_status(fa_merge_cpu(&m), FA_ERR_INVALID, "merge rejects a null partial");
  }
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
  if (getenv("FA_BENCH_WINDOW") || getenv("FA_BENCH_SOFTCAP"))
    printf("  window %s, softcap %s\n", getenv("FA_BENCH_WINDOW") ? getenv("FA_BENCH_WINDOW") : "none",
           getenv("FA_BENCH_SOFTCAP") ? getenv("FA_BENCH_SOFTCAP") : "0");
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
    if (const char* s = getenv("FA_BENCH_WINDOW")) {
      f.has_window = 1;
      if (sscanf(s, "%d,%d", &f.window_left, &f.window_right) != 2) printf("FA_BENCH_WINDOW: expected left,right\n");
    }
    if (const char* s = getenv("FA_BENCH_SOFTCAP")) f.softcap = (float)atof(s);
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
    b.has_window = f.has_window;
    b.window_left = f.window_left;
    b.window_right = f.window_right;
    b.softcap = f.softcap;
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
  const bool verbose = argc >= 2 && strcmp(argv[1], "-v") == 0;
  printf("cpu_check: kernels %s (FA_CPU_ISA=avx2 / generic also tested), %u hardware threads\n", fa_internal_cpu_isa(),
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
  check_xcases(verbose);
  check_equivalences();
  check_x_validation();
  check_append_kv();
  check_rotary();
  check_merge();
  if (g_failures) {
    printf("cpu_check: %d check(s) FAILED\n", g_failures);
    return 1;
  }
  printf("cpu_check: all checks passed\n");
  return 0;
}
