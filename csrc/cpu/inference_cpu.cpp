// CPU backend: appendKV (paged cache writes, optionally rotating the keys), rotary on packed rows,
// and the merge of partial attention results. fa_core.h states the exact semantics.
//
// All three are memory-bound loops over rows ([tokens, heads, head_dim], contiguous). A task takes
// kRowsPerTask consecutive rows on the shared thread pool; every output element is written by
// exactly one task with a fixed order of arithmetic, so results do not depend on the thread
// count. fp16 / bf16 rows are converted to float, processed, and rounded once when stored; the
// rotation and the merge weights use double arithmetic (the cost is irrelevant next to the memory
// traffic, and fp32 inputs keep fp32 accuracy). Features a call does not change are copied as
// bytes. Host index arrays are validated before anything is written (FA_ERR_INVALID, message in
// fa_last_error); the one exception, as documented for the device backends too, is appendKV's
// page indices: a page outside [0, num_pages) is skipped, never written.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <new>
#include <string>
#include <vector>

#include "common/errors.h"
#include "cpu/thread_pool.h"
#include "fa_core.h"

namespace fa {
namespace cpu {
namespace {

constexpr int64_t kRowsPerTask = 64;

// The dtype field as an integer (an out-of-range value loaded through the enum would be UB).
int raw_dtype(const fa_dtype* field) {
  int v = -1;
  if (sizeof(fa_dtype) == sizeof(int)) memcpy(&v, field, sizeof v);
  return v;
}

fa_status check_dtype(const char* fn, const fa_dtype* field) {
  const int d = raw_dtype(field);
  if (d == FA_FLOAT32 || d == FA_FLOAT16 || d == FA_BFLOAT16) return FA_OK;
  return fail(FA_ERR_INVALID, std::string(fn) + ": unknown dtype " + std::to_string(d));
}

size_t elem_size(fa_dtype dt) { return dt == FA_FLOAT32 ? 4 : 2; }

fa_status need(const char* fn, const void* ptr, const char* name) {
  if (ptr != nullptr) return FA_OK;
  return fail(FA_ERR_INVALID, std::string(fn) + ": " + name + " must not be null");
}

// cu[0] = 0, non-decreasing, cu[B] = total.
fa_status check_cu(const char* fn, const char* name, const int32_t* cu, int B, int64_t total,
                   const char* total_name) {
  const std::string pre = std::string(fn) + ": " + name;
  if (cu == nullptr) return fail(FA_ERR_INVALID, pre + " must not be null");
  if (cu[0] != 0) return fail(FA_ERR_INVALID, pre + "[0] must be 0 (got " + std::to_string(cu[0]) + ")");
  for (int b = 0; b < B; ++b)
    if (cu[b + 1] < cu[b])
      return fail(FA_ERR_INVALID, pre + " must be non-decreasing (" + name + "[" + std::to_string(b) + "] = " +
                                      std::to_string(cu[b]) + " > " + name + "[" + std::to_string(b + 1) +
                                      "] = " + std::to_string(cu[b + 1]) + ")");
  if (cu[B] != total)
    return fail(FA_ERR_INVALID, pre + "[batch] = " + std::to_string(cu[B]) + " must equal " + total_name + " = " +
                                    std::to_string(total));
  return FA_OK;
}

// A rotary description is usable: cos / sin given, rotary_dim even in 2..head_dim,
// max_position >= 0.
fa_status check_rotary(const char* fn, const fa_rotary& r, int head_dim) {
  const std::string pre = std::string(fn) + ": rotary";
  if (r.cos == nullptr || r.sin == nullptr) return fail(FA_ERR_INVALID, pre + ".cos and .sin must not be null");
  if (r.rotary_dim < 2 || r.rotary_dim % 2 != 0 || r.rotary_dim > head_dim)
    return fail(FA_ERR_INVALID, pre + ".rotary_dim must be even and in 2..head_dim = " + std::to_string(head_dim) +
                                    " (got " + std::to_string(r.rotary_dim) + ")");
  if (r.max_position < 0)
    return fail(FA_ERR_INVALID, pre + ".max_position must be >= 0 (got " + std::to_string(r.max_position) + ")");
  return FA_OK;
}

void to_float(const void* src, float* dst, size_t n, fa_dtype dt) {
  if (dt == FA_FLOAT32) memcpy(dst, src, n * sizeof(float));
  else fa_convert_to_f32(src, dst, n, dt);
}
void from_float(const float* src, void* dst, size_t n, fa_dtype dt) {
  if (dt == FA_FLOAT32) memcpy(dst, src, n * sizeof(float));
  else fa_convert_from_f32(src, dst, n, dt);
}

// RoPE on x[0 .. rotary_dim) at position pos (NaN there when pos is outside [0, max_position)).
void rotate(float* x, const fa_rotary& r, int64_t pos) {
  const int half = r.rotary_dim / 2;
  if (pos < 0 || pos >= r.max_position) {
    for (int i = 0; i < r.rotary_dim; ++i) x[i] = NAN;
    return;
  }
  const float* c = r.cos + pos * half;
  const float* s = r.sin + pos * half;
  const int stride = r.interleaved ? 1 : half;  // pair i is (x[a], x[a + stride])
  for (int i = 0; i < half; ++i) {
    const int a = r.interleaved ? 2 * i : i;
    const double xa = x[a], xb = x[a + stride];
    x[a] = (float)(xa * c[i] - xb * s[i]);
    x[a + stride] = (float)(xa * s[i] + xb * c[i]);
  }
}

// Copies one head row of D elements, rotating its first rotary_dim features at `pos` when `rot`
// is given (buf: rotary_dim floats). dst may equal src.
void copy_head(const char* src, char* dst, int D, fa_dtype dt, const fa_rotary* rot, int64_t pos, float* buf) {
  const size_t es = elem_size(dt);
  int done = 0;
  if (rot != nullptr) {
    to_float(src, buf, (size_t)rot->rotary_dim, dt);
    rotate(buf, *rot, pos);
    from_float(buf, dst, (size_t)rot->rotary_dim, dt);
    done = rot->rotary_dim;
  }
  if (dst != src && done < D) memmove(dst + done * es, src + done * es, (size_t)(D - done) * es);
}

// Sequence that owns packed row r (cu non-decreasing; empty sequences own no row).
int64_t seq_of_row(const int32_t* cu, int B, int64_t r) { return std::upper_bound(cu, cu + B + 1, r) - cu - 1; }

template <class F>
fa_status run_rows(const char* fn, int64_t rows, int threads, F& body) {
  const int64_t tasks = (rows + kRowsPerTask - 1) / kRowsPerTask;
  if (!parallel_for(tasks, threads, body))
    return fail(FA_ERR_NO_MEMORY, std::string(fn) + ": a worker task failed (out of memory)");
  return FA_OK;
}

fa_status append_kv_impl(const fa_append_kv_params* p) {
  static const char* fn = "fa_append_kv_cpu";
  if (p == nullptr) return fail(FA_ERR_INVALID, "fa_append_kv_cpu: params must not be null");
  const std::string pre = std::string(fn) + ": ";
  fa_status st;
  if ((st = check_dtype(fn, &p->dtype)) != FA_OK) return st;
  if (p->batch < 0 || p->total_new < 0 || p->heads_k < 1 || p->head_dim < 1)
    return fail(FA_ERR_INVALID, pre + "batch and total_new must be >= 0, heads_k and head_dim >= 1 (got " +
                                    std::to_string(p->batch) + ", " + std::to_string(p->total_new) + ", " +
                                    std::to_string(p->heads_k) + ", " + std::to_string(p->head_dim) + ")");
  if (p->page_size < 1 || p->max_pages_per_seq < 0 || p->num_pages < 0)
    return fail(FA_ERR_INVALID, pre + "page_size must be >= 1, max_pages_per_seq and num_pages >= 0 (got " +
                                    std::to_string(p->page_size) + ", " + std::to_string(p->max_pages_per_seq) + ", " +
                                    std::to_string(p->num_pages) + ")");
  if ((st = check_cu(fn, "cu_seqlens_new", p->cu_seqlens_new, p->batch, p->total_new, "total_new")) != FA_OK)
    return st;
  const bool rotary = p->rotary.cos != nullptr || p->rotary.sin != nullptr;
  if (rotary && (st = check_rotary(fn, p->rotary, p->head_dim)) != FA_OK) return st;
  if (p->total_new == 0) return FA_OK;
  if ((st = need(fn, p->seqlens_before, "seqlens_before")) != FA_OK ||
      (st = need(fn, p->page_table, "page_table")) != FA_OK || (st = need(fn, p->k_cache, "k_cache")) != FA_OK ||
      (st = need(fn, p->v_cache, "v_cache")) != FA_OK || (st = need(fn, p->k, "k")) != FA_OK ||
      (st = need(fn, p->v, "v")) != FA_OK)
    return st;
  const int64_t cap = (int64_t)p->max_pages_per_seq * p->page_size;
  for (int b = 0; b < p->batch; ++b) {
    const int64_t before = p->seqlens_before[b], n = (int64_t)p->cu_seqlens_new[b + 1] - p->cu_seqlens_new[b];
    if (before < 0 || before + n > cap)
      return fail(FA_ERR_INVALID, pre + "sequence " + std::to_string(b) + ": seqlens_before = " +
                                      std::to_string(before) + " plus " + std::to_string(n) +
                                      " new tokens must fit in max_pages_per_seq * page_size = " + std::to_string(cap));
  }

  const fa_dtype dt = static_cast<fa_dtype>(raw_dtype(&p->dtype));
  const size_t es = elem_size(dt);
  const int64_t row = (int64_t)p->heads_k * p->head_dim;  // elements per token
  const char* k = static_cast<const char*>(p->k);
  const char* v = static_cast<const char*>(p->v);
  char* kc = static_cast<char*>(p->k_cache);
  char* vc = static_cast<char*>(p->v_cache);
  auto body = [&](int64_t task, int) {
    std::vector<float> buf(rotary ? (size_t)p->rotary.rotary_dim : 1);
    const int64_t r0 = task * kRowsPerTask, r1 = std::min<int64_t>(p->total_new, r0 + kRowsPerTask);
    int64_t b = seq_of_row(p->cu_seqlens_new, p->batch, r0);
    for (int64_t r = r0; r < r1; ++r) {
      while (r >= p->cu_seqlens_new[b + 1]) ++b;
      const int64_t t = p->seqlens_before[b] + (r - p->cu_seqlens_new[b]);
      const int32_t page = p->page_table[b * p->max_pages_per_seq + t / p->page_size];
      if (page < 0 || page >= p->num_pages) continue;  // documented: skipped, never written
      const int64_t dst = ((int64_t)page * p->page_size + t % p->page_size) * row;
      for (int h = 0; h < p->heads_k; ++h) {
        const int64_t src_off = (r * row + (int64_t)h * p->head_dim) * (int64_t)es;
        const int64_t dst_off = (dst + (int64_t)h * p->head_dim) * (int64_t)es;
        copy_head(k + src_off, kc + dst_off, p->head_dim, dt, rotary ? &p->rotary : nullptr, t, buf.data());
      }
      memcpy(vc + dst * (int64_t)es, v + r * row * (int64_t)es, (size_t)row * es);
    }
  };
  return run_rows(fn, p->total_new, p->num_threads, body);
}

fa_status rotary_impl(const fa_rotary_params* p) {
  static const char* fn = "fa_rotary_cpu";
  if (p == nullptr) return fail(FA_ERR_INVALID, "fa_rotary_cpu: params must not be null");
  const std::string pre = std::string(fn) + ": ";
  fa_status st;
  if ((st = check_dtype(fn, &p->dtype)) != FA_OK) return st;
  if (p->batch < 0 || p->total < 0 || p->heads < 1 || p->head_dim < 1)
    return fail(FA_ERR_INVALID, pre + "batch and total must be >= 0, heads and head_dim >= 1 (got " +
                                    std::to_string(p->batch) + ", " + std::to_string(p->total) + ", " +
                                    std::to_string(p->heads) + ", " + std::to_string(p->head_dim) + ")");
  if ((st = check_rotary(fn, p->rotary, p->head_dim)) != FA_OK) return st;
  if ((st = check_cu(fn, "cu_seqlens", p->cu_seqlens, p->batch, p->total, "total")) != FA_OK) return st;
  if (p->pos_start == nullptr && p->pos_end == nullptr && p->batch > 0)
    return fail(FA_ERR_INVALID, pre + "pos_start or pos_end must be given");
  if (p->total == 0) return FA_OK;
  if ((st = need(fn, p->x, "x")) != FA_OK || (st = need(fn, p->out, "out")) != FA_OK) return st;

  const fa_dtype dt = static_cast<fa_dtype>(raw_dtype(&p->dtype));
  const size_t es = elem_size(dt);
  const int64_t row = (int64_t)p->heads * p->head_dim;
  const char* x = static_cast<const char*>(p->x);
  char* out = static_cast<char*>(p->out);
  auto body = [&](int64_t task, int) {
    std::vector<float> buf((size_t)p->rotary.rotary_dim);
    const int64_t r0 = task * kRowsPerTask, r1 = std::min<int64_t>(p->total, r0 + kRowsPerTask);
    int64_t b = seq_of_row(p->cu_seqlens, p->batch, r0);
    for (int64_t r = r0; r < r1; ++r) {
      while (r >= p->cu_seqlens[b + 1]) ++b;
      const int64_t i = r - p->cu_seqlens[b];
      const int64_t n = (int64_t)p->cu_seqlens[b + 1] - p->cu_seqlens[b];
      const int64_t pos = p->pos_start != nullptr ? p->pos_start[b] + i : p->pos_end[b] - n + i;
      for (int h = 0; h < p->heads; ++h) {
        const int64_t off = (r * row + (int64_t)h * p->head_dim) * (int64_t)es;
        copy_head(x + off, out + off, p->head_dim, dt, &p->rotary, pos, buf.data());
      }
    }
  };
  return run_rows(fn, p->total, p->num_threads, body);
}

fa_status merge_impl(const fa_merge_params* p) {
  static const char* fn = "fa_merge_cpu";
  if (p == nullptr) return fail(FA_ERR_INVALID, "fa_merge_cpu: params must not be null");
  const std::string pre = std::string(fn) + ": ";
  fa_status st;
  if ((st = check_dtype(fn, &p->dtype)) != FA_OK) return st;
  if (p->num < 1) return fail(FA_ERR_INVALID, pre + "num must be >= 1 (got " + std::to_string(p->num) + ")");
  if (p->batch < 0 || p->seqlen < 0 || p->heads < 1 || p->head_dim < 1)
    return fail(FA_ERR_INVALID, pre + "batch and seqlen must be >= 0, heads and head_dim >= 1 (got " +
                                    std::to_string(p->batch) + ", " + std::to_string(p->seqlen) + ", " +
                                    std::to_string(p->heads) + ", " + std::to_string(p->head_dim) + ")");
  const int64_t rows = (int64_t)p->batch * p->seqlen * p->heads;  // one (b, s, h) head row each
  if (rows == 0) return FA_OK;
  if ((st = need(fn, p->outs, "outs")) != FA_OK || (st = need(fn, p->lses, "lses")) != FA_OK ||
      (st = need(fn, p->out, "out")) != FA_OK || (st = need(fn, p->lse, "lse")) != FA_OK)
    return st;
  for (int i = 0; i < p->num; ++i)
    if (p->outs[i] == nullptr || p->lses[i] == nullptr)
      return fail(FA_ERR_INVALID, pre + "outs[" + std::to_string(i) + "] and lses[" + std::to_string(i) +
                                      "] must not be null");

  const fa_dtype dt = static_cast<fa_dtype>(raw_dtype(&p->dtype));
  const size_t es = elem_size(dt);
  const int D = p->head_dim, H = p->heads, N = p->seqlen;
  auto body = [&](int64_t task, int) {
    std::vector<double> w((size_t)p->num), acc((size_t)D);
    std::vector<float> x((size_t)D);
    const int64_t r0 = task * kRowsPerTask, r1 = std::min<int64_t>(rows, r0 + kRowsPerTask);
    for (int64_t r = r0; r < r1; ++r) {  // r = (b * N + s) * H + h, the out row
      const int64_t h = r % H, bs = r / H, b = bs / N, s = bs % N;
      const int64_t li = (b * H + h) * N + s;
      // Partials whose lse is +-inf saw no key. A NaN lse counts (and makes the row NaN).
      double m = -INFINITY;
      int seen = 0;
      for (int i = 0; i < p->num; ++i) {
        const double l = p->lses[i][li];
        w[i] = l;
        if (l == INFINITY || l == -INFINITY) continue;
        ++seen;
        if (l > m) m = l;
      }
      char* dst = static_cast<char*>(p->out) + r * D * (int64_t)es;
      if (seen == 0) {
        memset(dst, 0, (size_t)D * es);
        p->lse[li] = INFINITY;
        continue;
      }
      double sum = 0;
      for (int i = 0; i < p->num; ++i) {
        if (w[i] == INFINITY || w[i] == -INFINITY) {
          w[i] = 0;
          continue;
        }
        w[i] = exp(w[i] - m);
        sum += w[i];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int i = 0; i < p->num; ++i) {
        if (w[i] == 0) continue;  // no keys, or a weight below double's range
        to_float(static_cast<const char*>(p->outs[i]) + r * D * (int64_t)es, x.data(), (size_t)D, dt);
        const double f = w[i] / sum;
        for (int d = 0; d < D; ++d) acc[d] += f * x[d];
      }
      for (int d = 0; d < D; ++d) x[d] = (float)acc[d];
      from_float(x.data(), dst, (size_t)D, dt);  // after every read: out may be one of the outs
      p->lse[li] = (float)(m + log(sum));
    }
  };
  return run_rows(fn, rows, p->num_threads, body);
}

template <class F, class P>
fa_status guarded(const char* fn, F impl, const P* p) {
  try {
    return impl(p);
  } catch (const std::bad_alloc&) {
    return fail(FA_ERR_NO_MEMORY, std::string(fn) + ": out of memory");
  } catch (...) {
    return fail(FA_ERR_INVALID, std::string(fn) + ": internal error");
  }
}

}  // namespace
}  // namespace cpu
}  // namespace fa

extern "C" fa_status fa_append_kv_cpu(const fa_append_kv_params* p) {
  return fa::cpu::guarded("fa_append_kv_cpu", fa::cpu::append_kv_impl, p);
}
extern "C" fa_status fa_rotary_cpu(const fa_rotary_params* p) {
  return fa::cpu::guarded("fa_rotary_cpu", fa::cpu::rotary_impl, p);
}
extern "C" fa_status fa_merge_cpu(const fa_merge_params* p) {
  return fa::cpu::guarded("fa_merge_cpu", fa::cpu::merge_impl, p);
}
