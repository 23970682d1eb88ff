// The attention entry points of the binding: native.call(op, params, slots) and native.merge(...).
//
// One params filler per operation turns the named fields (fields.h) and the tensor slots into the
// core API's plain structs (fa_core.h). TypeScript has already validated every argument; this layer
// re-checks what could make the core read or write out of bounds (each slot's byte size against the
// size the fields imply) and turns a mismatch into an internal TypeError rather than trusting it.
//
// CPU: the work runs in a Napi::AsyncWorker (no N-API calls off the JS thread), or on the calling
// thread when it is small (CpuWorker::Start); every output is a host typed array the caller
// allocated; the Promise settles when the work is done.
// CUDA: the outputs (slots that were null) are allocated here and returned as handles at once; the
// core call is submitted to the device's launch queue (context.h: the launcher thread issues it in
// call order, or this thread when the GPU is idle); a failed allocation throws with the CUDA error
// name, a failed launch surfaces at the next wait (at once with FA_LAUNCH_THREAD=0). Host Int32Array
// index arrays of a CUDA call are staged into one device buffer with one copy, issued with the launch.
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "binding/context.h"
#include "binding/fields.h"
#include "binding/ops.h"
#include "fa_core.h"

#ifdef FA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fab {

namespace {

// FA_PROFILE_HOST=1 (development): the host's time per forward / paged CUDA call in the binding,
// split into the part before the core call, the core call (launches included) and the result
// handles; printed at exit.
struct HostProfile {
  bool on = [] {
    const char* e = getenv("FA_PROFILE_HOST");
    return e != nullptr && e[0] == '1';
  }();
  double fill = 0, core = 0, result = 0;
  double ctx = 0, params = 0, upload = 0;  // parts of fill: the context, FillForward, the index upload
  long calls = 0;
  ~HostProfile() {
    if (!on || calls == 0) return;
    fprintf(stderr, "flash-attention-node host profile: %ld forward / paged CUDA calls, per call: %.2f us before the core call, %.2f us in it, %.2f us after\n",
            calls, fill / calls, core / calls, result / calls);
    fprintf(stderr, "flash-attention-node host profile: of the part before: %.2f us the context, %.2f us the params and slots, %.2f us the index upload\n",
            ctx / calls, params / calls, upload / calls);
#ifdef FA_WITH_CUDA
    double launch_us = 0;
    long launches = 0;
    fa_profile_launches(&launch_us, &launches);
    if (launches > 0)
      fprintf(stderr, "flash-attention-node host profile: %ld Hopper kernel launches, %.2f us each inside cudaLaunchKernelEx\n",
              launches, launch_us / launches);
#endif
  }
};
HostProfile g_prof;

size_t ElemSize(int dtype) { return dtype == FA_FLOAT32 ? 4 : 2; }

Napi::TypeError Internal(Napi::Env env, const std::string& msg) {
  return Napi::TypeError::New(env, "internal: " + msg);
}

const char* kSlotNames[] = {
#define FA_X(name) #name,
    FA_SLOTS(FA_X)
#undef FA_X
};

// The fields and slots of one call.
// A params field as an int. A value outside int's range (or NaN) reads as INT_MIN, which the core's
// checks of sizes, counts and indices refuse (a cast would be undefined behaviour; the TypeScript
// checks keep such values from coming here, this keeps the binding safe on its own).
int FieldInt(const double* f, int i) {
  const double v = f[i];
  return v >= double(INT_MIN) && v <= double(INT_MAX) ? static_cast<int>(v) : INT_MIN;
}

struct Call {
  Napi::Env env;
  const double* f;
  uint32_t nslots = 0;
  // The slot values, each read from JavaScript once (MakeCall): Node-API's element reads cost
  // 60-90 ns each, and a call's checks look at a slot several times. Whether a slot holds a value
  // is asked of Node-API (napi_typeof, ~12 ns) once, when first wanted: a paged call passes 18 slots
  // and looks at 9.
  napi_value vals[FA_NUM_SLOTS] = {};
  mutable uint32_t known = 0, present = 0;  // bit s: slot s's type was read / it holds neither undefined nor null

  int I(Field i) const { return FieldInt(f, i); }
  double D(Field i) const { return f[i]; }
  Napi::Value S(Slot s) const {
    if (static_cast<uint32_t>(s) >= nslots) return env.Undefined();
    return Napi::Value(env, vals[s]);
  }
  bool Has(Slot s) const {
    if (static_cast<uint32_t>(s) >= nslots) return false;
    const uint32_t bit = 1u << s;
    if ((known & bit) == 0) {
      napi_valuetype t = napi_undefined;
      if (napi_typeof(env, vals[s], &t) != napi_ok) throw Internal(env, "slot type");
      known |= bit;
      if (t != napi_undefined && t != napi_null) present |= bit;
    }
    return (present & bit) != 0;
  }
};
static_assert(FA_NUM_SLOTS <= 32, "Call::known / present hold a bit per slot");

// Reads the params record at info[first] and the slots: positional arguments info[first + 1 + s]
// (call: one Node-API call fetched them all with the others), or, with `array`, the elements of the
// array at info[first + 1] (bench). The form is the caller's, never guessed from the values: an
// array in slot 0 is a bad slot value, not a slot list.
Call MakeCall(const Napi::CallbackInfo& info, int first, bool array) {
  Napi::Env env = info.Env();
  if (!info[first].IsTypedArray() || info[first].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    throw Internal(env, "params must be a Float64Array");
  Napi::Float64Array p = info[first].As<Napi::Float64Array>();
  if (p.ElementLength() < FA_NUM_FIELDS) throw Internal(env, "params has too few fields");
  Call c{env, p.Data()};
  const int n = c.I(FA_F_slot_count);
  c.nslots = static_cast<uint32_t>(n < 0 ? 0 : n > FA_NUM_SLOTS ? FA_NUM_SLOTS : n);
  if (array && !info[first + 1].IsArray()) throw Internal(env, "slots must be an array");
  Napi::Array arr = array ? info[first + 1].As<Napi::Array>() : Napi::Array();
  for (uint32_t i = 0; i < c.nslots; ++i)
    c.vals[i] = array ? static_cast<napi_value>(arr.Get(i)) : static_cast<napi_value>(info[first + 1 + i]);
  return c;
}

// Byte sizes implied by the fields.
struct Sizes {
  size_t q = 0, kv = 0, lse = 0, cu = 0, seq = 0, table = 0, cache = 0, rot = 0;
};
// Packed (varlen) and paged calls hold q / k as [total, heads, D]; dense ones as [B, N, heads, D].
// appendKV's new keys are packed too ([total_new, Hkv, D], total_new in the total_k field).
bool PackedRows(const Call& c, int op) { return c.Has(FA_S_cu_seqlens_q) || op == FA_OP_paged || op == FA_OP_append_kv; }
// Query rows (per head) of a call.
size_t QueryRows(const Call& c, int op) {
  return PackedRows(c, op) ? size_t(c.I(FA_F_total_q)) : size_t(c.I(FA_F_batch)) * c.I(FA_F_seqlen_q);
}

// A product of fields, saturating: a negative factor or a product past size_t's range gives SIZE_MAX,
// which no array's byte length reaches (the slot checks then refuse the call instead of a wrapped,
// too small size letting it read or write past an array).
size_t SatMul(std::initializer_list<long long> factors) {
  size_t r = 1;
  for (long long x : factors) {
    if (x < 0 || __builtin_mul_overflow(r, static_cast<size_t>(x), &r)) return SIZE_MAX;
  }
  return r;
}

Sizes SizesOf(const Call& c, int op) {
  Sizes s;
  const long long es = static_cast<long long>(ElemSize(c.I(FA_F_dtype)));
  const long long B = c.I(FA_F_batch), H = c.I(FA_F_heads), Hkv = c.I(FA_F_heads_k), D = c.I(FA_F_head_dim);
  // rows per head: packed / paged calls give totals, dense ones batch x length
  const bool packed = PackedRows(c, op);
  const long long tq = c.I(FA_F_total_q), tk = c.I(FA_F_total_k), nq = c.I(FA_F_seqlen_q), nk = c.I(FA_F_seqlen_k);
  s.q = packed ? SatMul({tq, H, D, es}) : SatMul({B, nq, H, D, es});
  s.kv = packed ? SatMul({tk, Hkv, D, es}) : SatMul({B, nk, Hkv, D, es});
  s.lse = packed ? SatMul({H, tq, 4}) : SatMul({H, B, nq, 4});
  s.cu = B < 0 ? SIZE_MAX : SatMul({B + 1, 4});
  s.seq = SatMul({B, 4});
  s.table = SatMul({B, c.I(FA_F_max_pages), 4});
  s.cache = SatMul({c.I(FA_F_num_pages), c.I(FA_F_page_size), Hkv, D, es});
  s.rot = SatMul({c.I(FA_F_rotary_max_position), c.I(FA_F_rotary_dim) / 2, 4});
  return s;
}

// ---- CPU --------------------------------------------------------------------------------------------

void* HostPtr(const Call& c, Slot s, size_t bytes, bool required) {
  if (!c.Has(s)) {
    if (required) throw Internal(c.env, std::string(kSlotNames[s]) + " is missing");
    return nullptr;
  }
  Napi::Value v = c.S(s);
  if (!v.IsTypedArray()) throw Internal(c.env, std::string(kSlotNames[s]) + " must be a host typed array");
  Napi::TypedArray t = v.As<Napi::TypedArray>();
  if (t.ByteLength() < bytes)
    throw Internal(c.env, std::string(kSlotNames[s]) + " has " + std::to_string(t.ByteLength()) + " bytes, needs " +
                              std::to_string(bytes));
  return TypedArrayData(t);
}

// Calls whose work is at most this many multiply-adds (or elements moved) run on the calling (JS)
// thread: handing a call to a libuv worker and its completion back to the JS thread costs about
// 30 us, more than such a call's arithmetic (a decode step of one sequence over a short cache:
// 50 -> 20 us). The longest call run inline takes tens of microseconds, which is what the event
// loop waits for. FA_CPU_INLINE=0 sends every call to a worker (comparisons).
constexpr double kInlineWork = double(1 << 20);
bool InlineAllowed() {
  const char* e = std::getenv("FA_CPU_INLINE");  // read per call (tests compare both paths)
  return e == nullptr || std::strcmp(e, "0") != 0;
}

// A CPU call as CpuCall builds it, before it runs: here on the calling thread when its work is
// small (`on_thread`: nothing is kept, the index arrays are read where they are, no AsyncWorker is
// made), else handed to a CpuWorker (CpuWorker::Take), which keeps the call's arguments and its own
// copies of the index arrays. (An AsyncWorker, its Promise and the slots' references cost a small
// call a few microseconds of allocations.)
struct CpuJob {
  bool on_thread = false;
  std::function<fa_status()> run;
  std::vector<Napi::ObjectReference> refs;
  std::vector<std::unique_ptr<int32_t[]>> owned;
  void Keep(const Napi::Value& v) {
    if (!on_thread && v.IsObject()) refs.push_back(Napi::Persistent(v.As<Napi::Object>()));
  }
  // A host index array (cuSeqlens, seqlens, a page table) as the core reads it: in place when the
  // call runs before this returns, else a copy taken now. The values were checked when the call was
  // made, and the caller may reuse its Int32Array as soon as the call returns, while a worker reads
  // them later: indices changed in between would steer the kernel's addresses. At least one element
  // either way, so that an empty array is not taken for an absent one (null).
  const int32_t* OwnIndex(const void* src, size_t bytes) {
    if (on_thread && src != nullptr && bytes > 0) return static_cast<const int32_t*>(src);
    owned.push_back(std::make_unique<int32_t[]>(std::max<size_t>((bytes + 3) / 4, 1)));
    if (src != nullptr && bytes > 0) std::memcpy(owned.back().get(), src, bytes);
    return owned.back().get();
  }
};

class CpuWorker : public Napi::AsyncWorker {
 public:
  CpuWorker(Napi::Env env, const char* name)
      : Napi::AsyncWorker(env, name), deferred_(Napi::Promise::Deferred::New(env)) {}
  void Keep(const Napi::Value& v) {
    if (v.IsObject()) refs_.push_back(Napi::Persistent(v.As<Napi::Object>()));
  }
  Napi::Promise Promise() { return deferred_.Promise(); }
  std::function<fa_status()> run;
  // Takes a job that is not to run on the calling thread: its work, references and index copies.
  void Take(CpuJob&& j) {
    run = std::move(j.run);
    for (auto& r : j.refs) refs_.push_back(std::move(r));
    for (auto& o : j.owned) owned_.push_back(std::move(o));
  }

  // Runs the call; "" on success, else the core's message (or the status name).
  std::string RunCore() { return RunCoreOf(run); }
  static std::string RunCoreOf(const std::function<fa_status()>& run) {
    try {
      const fa_status s = run();
      if (s == FA_OK) return std::string();
      const std::string msg = fa_last_error();
      return msg.empty() ? fa_status_name(s) : msg;
    } catch (const std::bad_alloc&) {  // (a binding-side buffer, e.g. the rotated q of a paged call)
      return "out of host memory (std::bad_alloc)";
    } catch (const std::exception& e) {
      return std::string("internal error: ") + e.what();
    } catch (...) {
      return "internal error";
    }
  }

  // Runs the call here when `work` is small and returns undefined once it is done (throws its error),
  // so that the caller knows nothing is left pending (lib/attention.ts runSlots: no place in the CPU
  // calls' order to keep); `w` is deleted. Else queues it on a libuv worker (which deletes it when
  // done) and returns the Promise that settles then.
  static Napi::Value Start(CpuWorker* w, double work) {
    if (work <= kInlineWork && InlineAllowed()) {
      const Napi::Env env = w->Env();
      const std::string err = w->RunCore();
      delete w;
      if (!err.empty()) throw Napi::Error::New(env, err);
      return env.Undefined();
    }
    Napi::Promise promise = w->Promise();
    w->Queue();
    return promise;
  }

 protected:
  void Execute() override { err_ = RunCore(); }
  // Settles the Promise on the JS thread. When that thread is going away (its worker_thread was
  // terminated or exited, or the process is exiting) with the call still running, N-API can no
  // longer create the result or settle the Promise, and node-addon-api reports that by throwing:
  // out of a libuv callback that would abort the whole process. Nobody can observe the Promise
  // then, so the failure is dropped (NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS, set in CMakeLists.txt,
  // covers the error objects node-addon-api makes on the way).
  void OnWorkComplete(Napi::Env env, napi_status status) override {
    if (status != napi_cancelled) {
      try {
        Napi::HandleScope scope(env);
        if (err_.empty()) deferred_.Resolve(env.Undefined());
        else deferred_.Reject(Napi::Error::New(env, err_).Value());
      } catch (...) {
      }
    }
    Destroy();
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::string err_;
  std::vector<Napi::ObjectReference> refs_;
  std::vector<std::unique_ptr<int32_t[]>> owned_;
};

fa_strides QStr(const Call& c) {
  const int N = c.I(FA_F_seqlen_q), H = c.I(FA_F_heads), D = c.I(FA_F_head_dim);
  return c.I(FA_F_bhsd) ? fa_strides_bhsd(N, H, D) : fa_strides_bshd(N, H, D);
}
fa_strides KStr(const Call& c) {
  const int N = c.I(FA_F_seqlen_k), H = c.I(FA_F_heads_k), D = c.I(FA_F_head_dim);
  return c.I(FA_F_bhsd) ? fa_strides_bhsd(N, H, D) : fa_strides_bshd(N, H, D);
}
// Packed rows [total, H, D]: row stride H*D, head stride D (batch stride unused).
fa_strides PackedStr(int H, int D) {
  fa_strides s;
  s.batch = 0;
  s.row = int64_t(H) * D;
  s.head = D;
  return s;
}

// The fields every attention params struct shares.
template <class P>
void FillCommon(P& p, const Call& c) {
  p.batch = c.I(FA_F_batch);
  p.seqlen_q = c.I(FA_F_seqlen_q);
  p.seqlen_k = c.I(FA_F_seqlen_k);
  p.heads = c.I(FA_F_heads);
  p.heads_k = c.I(FA_F_heads_k);
  p.head_dim = c.I(FA_F_head_dim);
  p.scale = static_cast<float>(c.D(FA_F_scale));
  p.causal = c.I(FA_F_causal);
  p.dtype = static_cast<fa_dtype>(c.I(FA_F_dtype));
  p.block_m = c.I(FA_F_block_m);
  p.block_n = c.I(FA_F_block_n);
  p.num_threads = c.I(FA_F_threads);
  p.has_window = c.I(FA_F_has_window);
  p.window_left = c.I(FA_F_window_left);
  p.window_right = c.I(FA_F_window_right);
  p.softcap = static_cast<float>(c.D(FA_F_softcap));
  p.total_q = c.I(FA_F_total_q);
  p.total_k = c.I(FA_F_total_k);
}

// The scalars of an appendKV call (both backends).
void FillAppendKv(fa_append_kv_params& p, const Call& c) {
  p.batch = c.I(FA_F_batch);
  p.total_new = c.I(FA_F_total_k);
  p.heads_k = c.I(FA_F_heads_k);
  p.head_dim = c.I(FA_F_head_dim);
  p.page_size = c.I(FA_F_page_size);
  p.max_pages_per_seq = c.I(FA_F_max_pages);
  p.num_pages = c.I(FA_F_num_pages);
  p.dtype = static_cast<fa_dtype>(c.I(FA_F_dtype));
}

fa_rotary RotaryOf(const Call& c, const float* cos, const float* sin) {
  fa_rotary r{};
  if (cos == nullptr) return r;
  r.cos = cos;
  r.sin = sin;
  r.rotary_dim = c.I(FA_F_rotary_dim);
  r.max_position = c.I(FA_F_rotary_max_position);
  r.interleaved = c.I(FA_F_rotary_interleaved);
  return r;
}

Napi::Value CpuCall(const Napi::CallbackInfo& info, int op, const Call& c) {
  Napi::Env env = info.Env();
  const Sizes z = SizesOf(c, op);
  // Work estimate: multiply-adds of S and P V over every (query row, key) pair the shape allows
  // (2.5x that for the backward), or the elements appendKV writes.
  const double H = c.I(FA_F_heads), D = c.I(FA_F_head_dim);
  const double rows = double(QueryRows(c, op));
  double work = 2.0 * rows * c.I(FA_F_seqlen_k) * H * D;
  if (op == FA_OP_backward) work *= 2.5;
  if (op == FA_OP_append_kv) work = double(c.I(FA_F_total_k)) * c.I(FA_F_heads_k) * D;
  CpuJob job;
  job.on_thread = work <= kInlineWork && InlineAllowed();
  CpuJob* const w = &job;
  // Index arrays: in place, or the worker's own copies (CpuJob::OwnIndex).
  auto index = [&](Slot s, size_t bytes) { return w->OwnIndex(HostPtr(c, s, bytes, true), bytes); };
  {
    for (uint32_t i = 0; i < c.nslots; ++i) w->Keep(c.S(static_cast<Slot>(i)));
    const bool packed = c.Has(FA_S_cu_seqlens_q);
    if (op == FA_OP_forward || op == FA_OP_paged) {
      fa_fwd_params p{};
      FillCommon(p, c);
      const bool paged = op == FA_OP_paged;
      p.q = HostPtr(c, FA_S_q, z.q, true);
      p.o = HostPtr(c, FA_S_out, z.q, true);
      p.lse = static_cast<float*>(HostPtr(c, FA_S_lse, z.lse, true));
      if (paged) {
        p.k = HostPtr(c, FA_S_k_cache, z.cache, true);
        p.v = HostPtr(c, FA_S_v_cache, z.cache, true);
        p.cu_seqlens_q = index(FA_S_cu_seqlens_q, z.cu);
        p.page_table = index(FA_S_page_table, z.table);
        p.seqlens_k = index(FA_S_seqlens_k, z.seq);
        p.page_size = c.I(FA_F_page_size);
        p.max_pages_per_seq = c.I(FA_F_max_pages);
        p.num_pages = c.I(FA_F_num_pages);
        p.num_splits = c.I(FA_F_num_splits);
        p.q_str = p.o_str = PackedStr(p.heads, p.head_dim);
        p.k_str = p.v_str = PackedStr(p.heads_k, p.head_dim);
      } else {
        p.k = HostPtr(c, FA_S_k, z.kv, true);
        p.v = HostPtr(c, FA_S_v, z.kv, true);
        if (packed) {
          p.cu_seqlens_q = index(FA_S_cu_seqlens_q, z.cu);
          p.cu_seqlens_k = index(FA_S_cu_seqlens_k, z.cu);
          p.q_str = p.o_str = PackedStr(p.heads, p.head_dim);
          p.k_str = p.v_str = PackedStr(p.heads_k, p.head_dim);
        } else {
          p.q_str = p.o_str = QStr(c);
          p.k_str = p.v_str = KStr(c);
        }
      }
      const float* cos = static_cast<const float*>(HostPtr(c, FA_S_rotary_cos, z.rot, false));
      const float* sin = static_cast<const float*>(HostPtr(c, FA_S_rotary_sin, z.rot, cos != nullptr));
      if (paged && cos != nullptr) {
        fa_rotary_params r{};
        r.x = p.q;
        r.cu_seqlens = p.cu_seqlens_q;
        r.pos_end = p.seqlens_k;
        r.batch = p.batch;
        r.total = p.total_q;
        r.heads = p.heads;
        r.head_dim = p.head_dim;
        r.dtype = p.dtype;
        r.rotary = RotaryOf(c, cos, sin);
        r.num_threads = p.num_threads;
        const size_t qbytes = z.q;
        w->run = [p, r, qbytes]() mutable {
          std::vector<uint8_t> rotated(qbytes ? qbytes : 1);
          r.out = rotated.data();
          fa_status s = fa_rotary_cpu(&r);
          if (s != FA_OK) return s;
          p.q = rotated.data();
          return fa_fwd_cpu(&p);
        };
      } else {
        w->run = [p]() { return fa_fwd_cpu(&p); };
      }
    } else if (op == FA_OP_backward) {
      fa_bwd_params p{};
      FillCommon(p, c);
      p.deterministic = c.I(FA_F_deterministic);
      p.dout = HostPtr(c, FA_S_dout, z.q, true);
      p.q = HostPtr(c, FA_S_q, z.q, true);
      p.k = HostPtr(c, FA_S_k, z.kv, true);
      p.v = HostPtr(c, FA_S_v, z.kv, true);
      p.o = HostPtr(c, FA_S_out, z.q, true);
      p.lse = static_cast<const float*>(HostPtr(c, FA_S_lse, z.lse, true));
      p.dq = HostPtr(c, FA_S_dq, z.q, true);
      p.dk = HostPtr(c, FA_S_dk, z.kv, true);
      p.dv = HostPtr(c, FA_S_dv, z.kv, true);
      p.softmax_d = static_cast<float*>(HostPtr(c, FA_S_softmax_d, z.lse, false));
      if (packed) {
        p.cu_seqlens_q = index(FA_S_cu_seqlens_q, z.cu);
        p.cu_seqlens_k = index(FA_S_cu_seqlens_k, z.cu);
        p.total_k = c.I(FA_F_total_k);
        p.do_str = p.q_str = p.o_str = p.dq_str = PackedStr(p.heads, p.head_dim);
        p.k_str = p.v_str = p.dk_str = p.dv_str = PackedStr(p.heads_k, p.head_dim);
      } else {
        p.do_str = p.q_str = p.o_str = p.dq_str = QStr(c);
        p.k_str = p.v_str = p.dk_str = p.dv_str = KStr(c);
      }
      w->run = [p]() { return fa_bwd_cpu(&p); };
    } else if (op == FA_OP_append_kv) {
      fa_append_kv_params p{};
      FillAppendKv(p, c);
      p.num_threads = c.I(FA_F_threads);
      p.k_cache = HostPtr(c, FA_S_k_cache, z.cache, true);
      p.v_cache = HostPtr(c, FA_S_v_cache, z.cache, true);
      p.k = HostPtr(c, FA_S_k, z.kv, true);
      p.v = HostPtr(c, FA_S_v, z.kv, true);
      p.page_table = index(FA_S_page_table, z.table);
      p.cu_seqlens_new = index(FA_S_cu_seqlens_new, z.cu);
      p.seqlens_before = index(FA_S_seqlens_before, z.seq);
      const float* cos = static_cast<const float*>(HostPtr(c, FA_S_rotary_cos, z.rot, false));
      const float* sin = static_cast<const float*>(HostPtr(c, FA_S_rotary_sin, z.rot, cos != nullptr));
      p.rotary = RotaryOf(c, cos, sin);
      w->run = [p]() { return fa_append_kv_cpu(&p); };
    } else {
      throw Internal(env, "unknown op " + std::to_string(op));
    }
  }
  if (job.on_thread) {  // done before this returns (undefined), or its error thrown: see CpuWorker::Start
    const std::string err = CpuWorker::RunCoreOf(job.run);
    if (!err.empty()) throw Napi::Error::New(env, err);
    return env.Undefined();
  }
  auto* worker = new CpuWorker(env, "flash-attention-node:cpu");
  worker->Take(std::move(job));
  Napi::Promise promise = worker->Promise();
  worker->Queue();
  return promise;
}

#ifdef FA_WITH_CUDA
// ---- CUDA ------------------------------------------------------------------------------------------

// Device memory of one call: its inputs, the outputs it allocates, and temporaries freed (in stream
// order) when the call is done.
struct CudaCall {
  DeviceContext* ctx;
  const Call& c;
  std::vector<void*> temps;      // freed after the launch, in stream order
  // Outputs allocated here, returned as handles: a spare handle's (see Out) or a new one's.
  struct Fresh {
    void* ptr;
    size_t bytes;
    DevAlloc* spare;
    napi_value handle;  // the spare's value
  };
  std::vector<Fresh> fresh;

  ~CudaCall() {
    for (void* t : temps) ctx->FreeAsync(t);
    // Outputs not handed out (an exception between their allocation and Result): Result and Fail
    // leave nothing here.
    for (auto& f : fresh) ctx->FreeAsync(f.ptr);
  }
  void Fail(const std::string& msg) {
    for (auto& f : fresh) ctx->FreeAsync(f.ptr);
    fresh.clear();
    throw Napi::Error::New(c.env, msg);
  }
  void* Alloc(size_t bytes, const char* what) {
    void* p = nullptr;
    std::string e = ctx->Alloc(bytes, &p);
    if (!e.empty()) Fail(e);
    (void)what;
    return p;
  }
  // A device input: the handle's pointer (checking device and size).
  void* In(Slot s, size_t bytes, bool required = true) {
    if (!c.Has(s)) {
      if (required) throw Internal(c.env, std::string(kSlotNames[s]) + " is missing");
      return nullptr;
    }
    DevAlloc* a = DeviceContext::Unwrap(c.env, c.S(s));
    if (a == nullptr) throw Napi::TypeError::New(c.env, std::string(kSlotNames[s]) + " is disposed or not a device tensor");
    if (a->ctx != ctx) throw Internal(c.env, std::string(kSlotNames[s]) + " is on another device");
    if (a->bytes < bytes)
      throw Internal(c.env, std::string(kSlotNames[s]) + " has " + std::to_string(a->bytes) + " bytes, needs " +
                                std::to_string(bytes));
    return a->ptr;
  }
  // An output: the caller's tensor, or a new allocation returned as a handle. The slot may hold a
  // spare (a handle of a disposed tensor, which the JS side keeps for reuse): the new allocation
  // is then returned in that handle instead of a new one.
  void* Out(Slot s, size_t bytes) {
    if (!c.Has(s)) return New(bytes);
    Napi::Value v = c.S(s);
    if (DevAlloc* spare = DeviceContext::UnwrapSpare(c.env, v)) return New(bytes, spare, v);
    return In(s, bytes);
  }
  // A new output, returned as a handle (`spare`'s when given).
  void* New(size_t bytes, DevAlloc* spare = nullptr, napi_value handle = nullptr) {
    void* p = Alloc(bytes, "output");
    fresh.push_back({p, bytes, spare, handle});
    return p;
  }
  Napi::Value Result() {
    Napi::Array arr = Napi::Array::New(c.env, fresh.size());
    for (size_t i = 0; i < fresh.size(); ++i) {
      const Fresh& f = fresh[i];
      if (f.spare != nullptr) {
        ctx->Refill(c.env, f.spare, f.ptr, f.bytes);
        arr.Set(uint32_t(i), Napi::Value(c.env, f.handle));
      } else {
        arr.Set(uint32_t(i), ctx->Wrap(c.env, f.ptr, f.bytes));
      }
    }
    fresh.clear();
    return arr;
  }
};

// A host-to-device copy out of a page-locked staging buffer, issued by whichever thread issues the
// launch that follows it (its closure calls Issue first), so that host index arrays do not make the
// JS thread flush the launch queue.
struct HostCopy {
  void* dst = nullptr;
  Pinned* pin = nullptr;
  size_t bytes = 0;
  IndexSlot* slot = nullptr;  // FA_INDEX_STREAM=1: dst is this slot's buffer, copied on `istream`
  void* istream = nullptr;
  // The copy and the staging buffer's event (the buffer is reused once it completes). Returns the
  // error message ("" on success) and, in *code, the CUDA error. With a slot: on the index stream,
  // after the kernels of the slot's last call, and the call's stream waits for the copy.
  std::string Issue(cudaStream_t s, int* code) const {
    if (pin == nullptr) return "";
    cudaError_t e = cudaSuccess;
    if (slot != nullptr) {
      cudaStream_t is = static_cast<cudaStream_t>(istream);
      e = cudaStreamWaitEvent(is, static_cast<cudaEvent_t>(slot->done), 0);
      if (e == cudaSuccess) e = cudaMemcpyAsync(dst, pin->ptr, bytes, cudaMemcpyHostToDevice, is);
      if (e == cudaSuccess) e = cudaEventRecord(static_cast<cudaEvent_t>(pin->event), is);
      if (e == cudaSuccess) e = cudaEventRecord(static_cast<cudaEvent_t>(slot->copied), is);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(s, static_cast<cudaEvent_t>(slot->copied), 0);
    } else {
      e = cudaMemcpyAsync(dst, pin->ptr, bytes, cudaMemcpyHostToDevice, s);
      if (e == cudaSuccess) e = cudaEventRecord(static_cast<cudaEvent_t>(pin->event), s);
    }
    pin->recorded.store(true, std::memory_order_release);
    if (e == cudaSuccess) return "";
    cudaGetLastError();
    *code = static_cast<int>(e);
    return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " (copying index arrays)";
  }
  // After the call's kernels are queued: the slot is free for reuse once they are done.
  void Done(cudaStream_t s) const {
    if (slot != nullptr && cudaEventRecord(static_cast<cudaEvent_t>(slot->done), s) != cudaSuccess) cudaGetLastError();
  }
};

// Index arrays of a CUDA call: device handles are used as they are; host Int32Arrays are copied,
// all of them in one staging buffer and one host-to-device copy, issued with the call's launch.
struct IndexStaging {
  HostCopy copy;         // the staged copy, issued first by the call's launch closure (Submit)
  bool taken = false;    // set once the context accepted that closure (it then issues the copy)
  ~IndexStaging() {
    // A call that failed before its launch was queued: nothing will issue the copy.
    if (copy.pin != nullptr && !taken) copy.pin->recorded.store(true, std::memory_order_release);
  }
  // Submits the call's core launch `f` (int* code -> error message) with the staged copy issued
  // right before it, on the same thread.
  template <class F>
  std::string Submit(DeviceContext* ctx, cudaStream_t stream, F f) {
    std::string err = ctx->Submit([hc = copy, stream, f](int* code) -> std::string {
      std::string e = hc.Issue(stream, code);
      if (!e.empty()) return e;
      // The slot's `done` is recorded after whatever f queued, also when f throws after queuing
      // kernels (the slot must not be rewritten while they may still read it).
      struct DoneAtExit {
        const HostCopy& hc;
        cudaStream_t s;
        ~DoneAtExit() { hc.Done(s); }
      } done{hc, stream};
      return f(code);
    });
    taken = true;
    return err;
  }
  struct Entry {
    Slot slot;
    const void* host;
    size_t bytes;
    const int32_t** dst;
  };
  std::vector<Entry> host;
  void Add(CudaCall& cc, Slot s, size_t bytes, const int32_t** dst, bool required = true) {
    if (!cc.c.Has(s)) {
      if (required) throw Internal(cc.c.env, std::string(kSlotNames[s]) + " is missing");
      *dst = nullptr;
      return;
    }
    Napi::Value v = cc.c.S(s);
    if (v.IsTypedArray()) {
      Napi::TypedArray t = v.As<Napi::TypedArray>();
      if (t.ByteLength() < bytes) throw Internal(cc.c.env, std::string(kSlotNames[s]) + " is too short");
      host.push_back({s, TypedArrayData(t), bytes, dst});
      return;
    }
    *dst = static_cast<const int32_t*>(cc.In(s, bytes));
  }
  void Upload(CudaCall& cc) {
    if (host.empty()) return;
    size_t total = 0;
    for (auto& e : host) total += (e.bytes + 15) / 16 * 16;
    // (FA_INDEX_STREAM=1: a slot of the index ring instead of a pool block, where the staged copy is
    // possible and the arrays fit in a slot)
    IndexSlot* slot = cc.ctx->TakeIndexSlot(total);
    char* dev = slot != nullptr ? static_cast<char*>(slot->dev) : static_cast<char*>(cc.Alloc(total, "index arrays"));
    if (slot == nullptr) cc.temps.push_back(dev);
    Pinned* pin = cc.ctx->TakePinned(total);
    if (pin == nullptr && slot != nullptr) {  // no staging buffer: a pool block and the plain copies
      slot = nullptr;
      dev = static_cast<char*>(cc.Alloc(total, "index arrays"));
      cc.temps.push_back(dev);
    }
    size_t off = 0;
    if (pin != nullptr) {
      for (auto& e : host) {
        std::memcpy(static_cast<char*>(pin->ptr) + off, e.host, e.bytes);
        *e.dst = reinterpret_cast<const int32_t*>(dev + off);
        off += (e.bytes + 15) / 16 * 16;
      }
      copy = HostCopy{dev, pin, total, slot, cc.ctx->index_stream()};
      cc.ctx->RetirePinnedQueued(pin);
      cc.ctx->CountIndexUpload(slot != nullptr);
    } else {  // over the staging limit: one synchronous copy each (rare: megabytes of indices)
      cc.ctx->CountIndexUpload(false);
      cudaStream_t s = static_cast<cudaStream_t>(cc.ctx->stream());
      for (auto& e : host) {
        *e.dst = reinterpret_cast<const int32_t*>(dev + off);
        cudaError_t err = cudaMemcpyAsync(dev + off, e.host, e.bytes, cudaMemcpyHostToDevice, s);
        if (err != cudaSuccess) cc.Fail(cc.ctx->Error(err, "copying index arrays"));
        off += (e.bytes + 15) / 16 * 16;
      }
    }
  }
};

// Runs `launch` once; when the core reports an out-of-memory error (its own workspace), drains the
// stream, trims the pool and runs it once more.
template <class F>
fa_status WithRetry(DeviceContext* ctx, F&& launch) {
  fa_status st = launch();
  if (st == FA_ERR_CUDA && std::strstr(fa_last_error(), "cudaErrorMemoryAllocation") != nullptr) {
    cudaGetLastError();
    cudaStreamSynchronize(static_cast<cudaStream_t>(ctx->raw_stream()));
    ctx->Trim();
    st = launch();
  }
  return st;
}

// The message of a failed core call ("" when it succeeded) and, in *cuda_code, the CUDA error behind
// it (the calling thread's last error, cleared here), for DeviceContext::Submit.
std::string LaunchError(fa_status st, int* cuda_code) {
  *cuda_code = 0;
  if (st == FA_OK) return "";
  std::string msg = fa_last_error();
  if (msg.empty()) msg = fa_status_name(st);
  // The core names CUDA errors "cudaErrorXxx: ..."; sticky ones make the context unusable.
  if (st == FA_ERR_CUDA && msg.find("cudaError") != std::string::npos) *cuda_code = static_cast<int>(cudaGetLastError());
  return msg;
}

// Fills an fa_fwd_params for forward / paged calls (pointers included). Index arrays go through
// `idx` (uploaded before the launch).
// Whether a paged call may let its decode kernel read the caches before the kernel before it on the
// stream has finished (fa_fwd_params::decode_early_kv): only when the last thing queued on the
// stream was a forward / paged call (its kernels write its out and lse, and the library's own
// workspace) and neither cache overlaps that out or lse. Anything else queued in between (an
// appendKV, a copy, a fill, a merge, a backward) counts through DeviceContext::stream() and turns
// it off; so does every first call.
bool EarlyKvSafe(DeviceContext* ctx, uint64_t queued_before, const void* k, const void* v, size_t bytes) {
  const DeviceContext::LastWrites& w = ctx->last_attention;
  if (w.after != queued_before) return false;
  for (const void* c : {k, v}) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(c), hi = lo + bytes;
    for (int i = 0; i < 2; ++i)
      if (lo < w.hi[i] && w.lo[i] < hi) return false;
  }
  return true;
}

void FillForward(CudaCall& cc, IndexStaging& idx, int op, fa_fwd_params& p) {
  const Call& c = cc.c;
  const Sizes z = SizesOf(c, op);
  FillCommon(p, c);
  p.q = cc.In(FA_S_q, z.q);
  if (op == FA_OP_paged) {
    p.k = cc.In(FA_S_k_cache, z.cache);
    p.v = cc.In(FA_S_v_cache, z.cache);
    idx.Add(cc, FA_S_cu_seqlens_q, z.cu, &p.cu_seqlens_q);
    idx.Add(cc, FA_S_page_table, z.table, &p.page_table);
    idx.Add(cc, FA_S_seqlens_k, z.seq, &p.seqlens_k);
    p.page_size = c.I(FA_F_page_size);
    p.max_pages_per_seq = c.I(FA_F_max_pages);
    p.num_pages = c.I(FA_F_num_pages);
    p.num_splits = c.I(FA_F_num_splits);
    p.min_seqlen_q = c.I(FA_F_min_seqlen_q);
    p.q_str = p.o_str = PackedStr(p.heads, p.head_dim);
    p.k_str = p.v_str = PackedStr(p.heads_k, p.head_dim);
  } else {
    p.k = cc.In(FA_S_k, z.kv);
    p.v = cc.In(FA_S_v, z.kv);
    if (c.Has(FA_S_cu_seqlens_q)) {
      idx.Add(cc, FA_S_cu_seqlens_q, z.cu, &p.cu_seqlens_q);
      idx.Add(cc, FA_S_cu_seqlens_k, z.cu, &p.cu_seqlens_k);
      p.q_str = p.o_str = PackedStr(p.heads, p.head_dim);
      p.k_str = p.v_str = PackedStr(p.heads_k, p.head_dim);
    } else {
      p.q_str = p.o_str = QStr(c);
      p.k_str = p.v_str = KStr(c);
    }
  }
  p.o = cc.Out(FA_S_out, z.q);
  p.lse = static_cast<float*>(cc.Out(FA_S_lse, z.lse));
}

Napi::Value CudaCallOp(const Napi::CallbackInfo& info, int op, const Call& c) {
  Napi::Env env = info.Env();
  double t0 = g_prof.on ? NowUs() : 0;
  const int device = c.I(FA_F_device);
  DeviceContext* ctx = DeviceContext::Get(env, device);
  const std::string bad = ctx->Unusable();
  if (!bad.empty()) throw Napi::Error::New(env, bad);
  ctx->MakeCurrent();
  const uint64_t queued_before = ctx->enqueues();  // (before this call's own uses of the stream)
  // The core call runs where Submit puts it (the launcher thread, in call order): it captures the
  // params by value, device pointers only.
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx->raw_stream());
  const Sizes z = SizesOf(c, op);
  CudaCall cc{ctx, c, {}, {}};
  IndexStaging idx;
  std::string err;
  if (op == FA_OP_forward || op == FA_OP_paged) {
    const double ta = g_prof.on ? NowUs() : 0;
    fa_fwd_params p{};
    FillForward(cc, idx, op, p);
    const double tb = g_prof.on ? NowUs() : 0;
    const float* cos = nullptr;
    const float* sin = nullptr;
    fa_rotary_params r{};
    if (op == FA_OP_paged && c.Has(FA_S_rotary_cos)) {
      cos = static_cast<const float*>(cc.In(FA_S_rotary_cos, z.rot));
      sin = static_cast<const float*>(cc.In(FA_S_rotary_sin, z.rot));
    }
    idx.Upload(cc);
    if (g_prof.on) g_prof.ctx += ta - t0, g_prof.params += tb - ta, g_prof.upload += NowUs() - tb;
    if (cos != nullptr) {
      // q rotated at positions seqlens_k[b] - n_b + i into a temporary, then attention on it.
      r.x = p.q;
      r.out = cc.Alloc(z.q ? z.q : 1, "rotated q");
      cc.temps.push_back(r.out);
      r.cu_seqlens = p.cu_seqlens_q;
      r.pos_end = p.seqlens_k;
      r.batch = p.batch;
      r.total = p.total_q;
      r.heads = p.heads;
      r.head_dim = p.head_dim;
      r.dtype = p.dtype;
      r.rotary = RotaryOf(c, cos, sin);
      p.q = r.out;
    }
    if (op == FA_OP_paged) p.decode_early_kv = EarlyKvSafe(ctx, queued_before, p.k, p.v, z.cache) ? 1 : 0;
    const double t1 = g_prof.on ? NowUs() : 0;
    const bool rotate = cos != nullptr;
    err = idx.Submit(ctx, stream, [ctx, p, r, rotate, stream](int* code) {
      fa_status st = rotate ? fa_rotary_cuda(&r, stream) : FA_OK;
      if (st == FA_OK) st = WithRetry(ctx, [&] { return fa_fwd_cuda(&p, stream); });
      return LaunchError(st, code);
    });
    if (err.empty()) {  // what this call's kernels write, for the next paged call's EarlyKvSafe
      DeviceContext::LastWrites& w = ctx->last_attention;
      w.lo[0] = reinterpret_cast<uintptr_t>(p.o), w.hi[0] = w.lo[0] + z.q;
      w.lo[1] = reinterpret_cast<uintptr_t>(p.lse), w.hi[1] = w.lo[1] + z.lse;
      w.after = ctx->enqueues();
    }
    if (g_prof.on) {
      const double t2 = NowUs();
      g_prof.fill += t1 - t0, g_prof.core += t2 - t1;
      t0 = t2;
    }
  } else if (op == FA_OP_backward) {
    fa_bwd_params p{};
    FillCommon(p, c);
    p.deterministic = c.I(FA_F_deterministic);
    p.dout = cc.In(FA_S_dout, z.q);
    p.q = cc.In(FA_S_q, z.q);
    p.k = cc.In(FA_S_k, z.kv);
    p.v = cc.In(FA_S_v, z.kv);
    p.o = cc.In(FA_S_out, z.q);
    p.lse = static_cast<const float*>(cc.In(FA_S_lse, z.lse));
    if (c.Has(FA_S_cu_seqlens_q)) {
      idx.Add(cc, FA_S_cu_seqlens_q, z.cu, &p.cu_seqlens_q);
      idx.Add(cc, FA_S_cu_seqlens_k, z.cu, &p.cu_seqlens_k);
      p.total_k = c.I(FA_F_total_k);
      p.do_str = p.q_str = p.o_str = p.dq_str = PackedStr(p.heads, p.head_dim);
      p.k_str = p.v_str = p.dk_str = p.dv_str = PackedStr(p.heads_k, p.head_dim);
    } else {
      p.do_str = p.q_str = p.o_str = p.dq_str = QStr(c);
      p.k_str = p.v_str = p.dk_str = p.dv_str = KStr(c);
    }
    p.dq = cc.Out(FA_S_dq, z.q);
    p.dk = cc.Out(FA_S_dk, z.kv);
    p.dv = cc.Out(FA_S_dv, z.kv);
    // softmax_d: a caller's tensor, or a new one when the slot holds `true` (asked for, not given).
    Napi::Value sd = c.S(FA_S_softmax_d);
    if (sd.IsBoolean()) {
      if (sd.As<Napi::Boolean>().Value()) p.softmax_d = static_cast<float*>(cc.New(z.lse));
    } else if (!sd.IsUndefined() && !sd.IsNull()) {
      p.softmax_d = static_cast<float*>(cc.In(FA_S_softmax_d, z.lse));
    }
    idx.Upload(cc);
    // The workspace comes from the same pool, freed in stream order after the kernels.
    const size_t ws = fa_bwd_workspace_size(&p);
    if (ws > 0) {
      p.workspace = cc.Alloc(ws, "backward workspace");
      cc.temps.push_back(p.workspace);
    }
    err = idx.Submit(ctx, stream, [p, stream](int* code) { return LaunchError(fa_bwd_cuda(&p, stream), code); });
  } else if (op == FA_OP_append_kv) {
    fa_append_kv_params p{};
    FillAppendKv(p, c);
    p.k_cache = cc.In(FA_S_k_cache, z.cache);
    p.v_cache = cc.In(FA_S_v_cache, z.cache);
    p.k = cc.In(FA_S_k, z.kv);
    p.v = cc.In(FA_S_v, z.kv);
    idx.Add(cc, FA_S_page_table, z.table, &p.page_table);
    idx.Add(cc, FA_S_cu_seqlens_new, z.cu, &p.cu_seqlens_new);
    idx.Add(cc, FA_S_seqlens_before, z.seq, &p.seqlens_before);
    if (c.Has(FA_S_rotary_cos)) {
      p.rotary = RotaryOf(c, static_cast<const float*>(cc.In(FA_S_rotary_cos, z.rot)),
                          static_cast<const float*>(cc.In(FA_S_rotary_sin, z.rot)));
    }
    idx.Upload(cc);
    err = idx.Submit(ctx, stream, [p, stream](int* code) { return LaunchError(fa_append_kv_cuda(&p, stream), code); });
  } else {
    throw Internal(env, "unknown op " + std::to_string(op));
  }
  if (!err.empty()) cc.Fail(err);
  Napi::Value result = cc.Result();
  if (g_prof.on && (op == FA_OP_forward || op == FA_OP_paged)) g_prof.result += NowUs() - t0, ++g_prof.calls;
  return result;
}
#endif  // FA_WITH_CUDA

}  // namespace

// call(op, params, slot 0, slot 1, ...): the slots as arguments (MakeCall)
Napi::Value Call_(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber()) throw Internal(env, "op must be a number");
  const int op = info[0].As<Napi::Number>().Int32Value();
  if (op < 0 || op >= FA_NUM_OPS) throw Internal(env, "unknown op");
  Call c = MakeCall(info, 1, /*array=*/false);
  if (c.I(FA_F_device) < 0) return CpuCall(info, op, c);
#ifdef FA_WITH_CUDA
  return CudaCallOp(info, op, c);
#else
  throw Napi::Error::New(env, "flash-attention-node was built without CUDA");
#endif
}

// merge(params, outs[], lses[], out|null, lse|null): CPU -> Promise<void> (out, lse given);
// CUDA -> array of the new output handles.
Napi::Value Merge(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray()) throw Internal(env, "params must be a Float64Array");
  Napi::Float64Array pa = info[0].As<Napi::Float64Array>();
  if (pa.ElementLength() < FA_NUM_FIELDS) throw Internal(env, "params has too few fields");
  const double* f = pa.Data();
  if (!info[1].IsArray() || !info[2].IsArray()) throw Internal(env, "outs and lses must be arrays");
  Napi::Array outs = info[1].As<Napi::Array>(), lses = info[2].As<Napi::Array>();
  const auto fi = [f](int i) { return FieldInt(f, i); };
  const int n = fi(FA_F_merge_count);
  if (n < 1 || outs.Length() != uint32_t(n) || lses.Length() != uint32_t(n)) throw Internal(env, "merge count");
  fa_merge_params p{};
  p.num = n;
  p.batch = fi(FA_F_batch);
  p.seqlen = fi(FA_F_seqlen_q);
  p.heads = fi(FA_F_heads);
  p.head_dim = fi(FA_F_head_dim);
  p.dtype = static_cast<fa_dtype>(fi(FA_F_dtype));
  p.num_threads = fi(FA_F_threads);
  const size_t obytes = SatMul({p.batch, p.seqlen, p.heads, p.head_dim, static_cast<long long>(ElemSize(p.dtype))});
  const size_t lbytes = SatMul({p.batch, p.seqlen, p.heads, 4});
  const int device = fi(FA_F_device);
  if (device < 0) {
    auto* w = new CpuWorker(env, "flash-attention-node:cpu");
    auto ptrs = std::make_shared<std::vector<const void*>>(2 * n);
    try {
      auto host = [&](Napi::Value v, size_t bytes, const char* what) -> void* {
        if (!v.IsTypedArray()) throw Internal(env, std::string(what) + " must be a host typed array");
        Napi::TypedArray t = v.As<Napi::TypedArray>();
        if (t.ByteLength() < bytes) throw Internal(env, std::string(what) + " is too short");
        w->Keep(t);
        return TypedArrayData(t);
      };
      for (int i = 0; i < n; ++i) {
        (*ptrs)[i] = host(outs.Get(uint32_t(i)), obytes, "outs[i]");
        (*ptrs)[n + i] = host(lses.Get(uint32_t(i)), lbytes, "lses[i]");
      }
      p.out = host(info[3], obytes, "out");
      p.lse = static_cast<float*>(host(info[4], lbytes, "lse"));
    } catch (...) {
      delete w;
      throw;
    }
    w->run = [p, ptrs, n]() mutable {
      p.outs = ptrs->data();
      p.lses = reinterpret_cast<const float* const*>(ptrs->data() + n);
      return fa_merge_cpu(&p);
    };
    return CpuWorker::Start(w, double(n) * double(p.batch) * p.seqlen * p.heads * p.head_dim);
  }
#ifdef FA_WITH_CUDA
  DeviceContext* ctx = DeviceContext::Get(env, device);
  const std::string bad = ctx->Unusable();
  if (!bad.empty()) throw Napi::Error::New(env, bad);
  ctx->MakeCurrent();
  Call c{env, f};
  CudaCall cc{ctx, c, {}, {}};
  std::vector<const void*> optr(n);
  std::vector<const float*> lptr(n);
  auto dev = [&](Napi::Value v, size_t bytes, const char* what) -> void* {
    DevAlloc* a = DeviceContext::Unwrap(env, v);
    if (a == nullptr) throw Napi::TypeError::New(env, std::string(what) + " is disposed or not a device tensor");
    if (a->ctx != ctx || a->bytes < bytes) throw Internal(env, std::string(what) + " device or size");
    return a->ptr;
  };
  for (int i = 0; i < n; ++i) {
    optr[i] = dev(outs.Get(uint32_t(i)), obytes, "outs[i]");
    lptr[i] = static_cast<const float*>(dev(lses.Get(uint32_t(i)), lbytes, "lses[i]"));
  }
  auto out_or_new = [&](Napi::Value v, size_t bytes, const char* what) -> void* {
    if (v.IsUndefined() || v.IsNull()) return cc.New(bytes);
    if (DevAlloc* spare = DeviceContext::UnwrapSpare(env, v)) return cc.New(bytes, spare, v);
    return dev(v, bytes, what);
  };
  p.out = out_or_new(info[3], obytes, "out");
  p.lse = static_cast<float*>(out_or_new(info[4], lbytes, "lse"));
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx->raw_stream());
  const std::string err = ctx->Submit([p, optr, lptr, stream](int* code) mutable {
    p.outs = optr.data();
    p.lses = lptr.data();
    return LaunchError(fa_merge_cuda(&p, stream), code);
  });
  if (!err.empty()) cc.Fail(err);
  return cc.Result();
#else
  throw Napi::Error::New(env, "flash-attention-node was built without CUDA");
#endif
}

// bench(op, params, slots[], warmup, reps) -> Promise<Float64Array>: the CUDA call run `warmup` times,
// then `reps` times with CUDA events around each (all of its kernels), outputs freed after each
// run; resolves with the per-run milliseconds. Kernel time, for the benchmark's comparison with the
// public-API time of the same calls.
Napi::Value Bench(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
#ifdef FA_WITH_CUDA
  const int op = info[0].As<Napi::Number>().Int32Value();
  Call c = MakeCall(info, 1, /*array=*/true);
  const int warmup = info[3].As<Napi::Number>().Int32Value();
  const int reps = std::max(1, info[4].As<Napi::Number>().Int32Value());
  DeviceContext* ctx = DeviceContext::Get(env, c.I(FA_F_device));
  auto run_once = [&]() {
    Napi::Array outs = CudaCallOp(info, op, c).As<Napi::Array>();
    for (uint32_t i = 0; i < outs.Length(); ++i) DeviceContext::Release(env, DeviceContext::Unwrap(env, outs.Get(i)));
  };
  ctx->MakeCurrent();
  for (int i = 0; i < warmup; ++i) run_once();
  auto events = std::make_shared<std::vector<cudaEvent_t>>(2 * reps, nullptr);
  for (auto& e : *events) {
    if (cudaEventCreate(&e) != cudaSuccess) throw Napi::Error::New(env, ctx->Error(cudaGetLastError(), "bench events"));
  }
  for (int i = 0; i < reps; ++i) {
    // The events are recorded where the launches are issued (in order with them, on the launcher
    // thread when it is on): recording them from here would flush the queue at every run and time
    // the hand-off too.
    cudaEvent_t e0 = (*events)[2 * i], e1 = (*events)[2 * i + 1];
    cudaStream_t s = static_cast<cudaStream_t>(ctx->raw_stream());
    ctx->Submit([e0, s](int*) { cudaEventRecord(e0, s); return std::string(); });
    run_once();
    ctx->Submit([e1, s](int*) { cudaEventRecord(e1, s); return std::string(); });
  }
  auto deferred = std::make_shared<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(env));
  ctx->WhenReached("benchmark", [events, deferred, reps](Napi::Env e2, const std::string& err) {
    std::vector<double> ms(reps);
    for (int i = 0; i < reps; ++i) {
      float t = 0;
      cudaEventElapsedTime(&t, (*events)[2 * i], (*events)[2 * i + 1]);
      ms[i] = t;
    }
    for (auto ev : *events) cudaEventDestroy(ev);
    if (!err.empty()) return deferred->Reject(Napi::Error::New(e2, err).Value());
    Napi::Float64Array arr = Napi::Float64Array::New(e2, reps);
    for (int i = 0; i < reps; ++i) arr[i] = ms[i];
    deferred->Resolve(arr);
  }, env);
  return deferred->Promise();
#else
  throw Napi::Error::New(env, "flash-attention-node was built without CUDA");
#endif
}

Napi::Value Layout(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  Napi::Array fields = Napi::Array::New(env), slots = Napi::Array::New(env), ops = Napi::Array::New(env);
  uint32_t i = 0;
#define FA_X(name) fields.Set(i++, #name);
  FA_FIELDS(FA_X)
#undef FA_X
  i = 0;
#define FA_X(name) slots.Set(i++, #name);
  FA_SLOTS(FA_X)
#undef FA_X
  i = 0;
#define FA_X(name) ops.Set(i++, #name);
  FA_OPS(FA_X)
#undef FA_X
  o.Set("fields", fields);
  o.Set("slots", slots);
  o.Set("ops", ops);
  // Conventions of the calls that the names above do not show (lib/native.ts requires each one):
  // spare_outputs: an output slot may hold a freed handle of ours, which the call fills (CudaCall::Out).
  Napi::Array features = Napi::Array::New(env);
  features.Set(uint32_t(0), "spare_outputs");
  // slot_args: call(op, params, slot 0, slot 1, ...) takes the slots as arguments (bench: an array).
  features.Set(uint32_t(1), "slot_args");
  o.Set("features", features);
  return o;
}

}  // namespace fab
