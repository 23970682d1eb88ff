// N-API layer: thin. TypeScript (lib/) validates every argument and computes sizes; this file turns
// the flat argument lists into fa_core parameter structs and runs them off the JS thread:
// CPU work in an AsyncWorker, CUDA work through the device's submission queue.
#include <napi.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "binding/device_buffer.h"
#include "binding/device_queue.h"
#include "fa_core.h"

#ifdef FA_WITH_CUDA
#include <cuda_runtime.h>
#endif

#ifndef FA_VERSION
#define FA_VERSION "0.0.0"
#endif
#ifndef FA_CUDA_ARCHS_STR
#define FA_CUDA_ARCHS_STR ""
#endif

namespace fab {
namespace {

// ---- argument helpers ---------------------------------------------------------------------------

struct Dims {
  int B, Nq, Nk, H, Hkv, D;
  fa_dtype dtype;
  bool causal, bhsd;
  int block_m, block_n, threads;
  bool deterministic;
  float scale;
};

// dims = [B, Nq, Nk, H, Hkv, D, dtype, causal, layout(0 bshd, 1 bhsd), blockM, blockN, threads,
//         deterministic], then scale as its own argument.
Dims ParseDims(const Napi::Value& v, const Napi::Value& scale) {
  Napi::Env env = v.Env();
  if (!v.IsArray()) throw Napi::TypeError::New(env, "internal: dims must be an array");
  Napi::Array a = v.As<Napi::Array>();
  if (a.Length() != 13) throw Napi::TypeError::New(env, "internal: dims must have 13 entries");
  int x[13];
  for (uint32_t i = 0; i < 13; i++) {
    Napi::Value e = a.Get(i);
    if (!e.IsNumber()) throw Napi::TypeError::New(env, "internal: dims entries must be numbers");
    x[i] = e.As<Napi::Number>().Int32Value();
  }
  if (!scale.IsNumber()) throw Napi::TypeError::New(env, "internal: scale must be a number");
  Dims d{x[0], x[1], x[2], x[3], x[4], x[5], static_cast<fa_dtype>(x[6]), x[7] != 0, x[8] != 0,
         x[9], x[10], x[11], x[12] != 0, scale.As<Napi::Number>().FloatValue()};
  if (d.B < 0 || d.Nq < 0 || d.Nk < 0 || d.H <= 0 || d.Hkv <= 0 || d.D <= 0 || d.H % d.Hkv != 0 ||
      x[6] < 0 || x[6] > 2)
    throw Napi::RangeError::New(env, "internal: inconsistent attention dims");
  return d;
}

fa_strides QStrides(const Dims& d) { return d.bhsd ? fa_strides_bhsd(d.Nq, d.H, d.D) : fa_strides_bshd(d.Nq, d.H, d.D); }
fa_strides KStrides(const Dims& d) { return d.bhsd ? fa_strides_bhsd(d.Nk, d.Hkv, d.D) : fa_strides_bshd(d.Nk, d.Hkv, d.D); }

size_t ElemSize(fa_dtype t) { return t == FA_FLOAT32 ? 4 : 2; }

// Host data pointer of a typed array argument, checking its byte length.
void* HostPtr(const Napi::Value& v, size_t bytes, const char* what) {
  Napi::Env env = v.Env();
  if (!v.IsTypedArray()) throw Napi::TypeError::New(env, std::string("internal: ") + what + " must be a typed array");
  Napi::TypedArray t = v.As<Napi::TypedArray>();
  if (t.ByteLength() != bytes)
    throw Napi::RangeError::New(env, std::string("internal: ") + what + " has " + std::to_string(t.ByteLength()) +
                                         " bytes, expected " + std::to_string(bytes));
  return static_cast<uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset();
}

std::string StatusMessage(const char* fn, fa_status s) {
  std::string msg = fa_last_error();
  if (msg.empty()) msg = fa_status_name(s);
  return std::string(fn) + ": " + msg;
}

// ---- CPU: AsyncWorker ---------------------------------------------------------------------------

class CpuWorker : public Napi::AsyncWorker {
 public:
  CpuWorker(Napi::Env env, const char* fn)
      : Napi::AsyncWorker(env, fn), fn_(fn), deferred_(Napi::Promise::Deferred::New(env)) {}
  // Keeps a JS value (an input or output array) alive while the worker runs.
  void Keep(const Napi::Value& v) { refs_.push_back(Napi::Persistent(v.As<Napi::Object>())); }
  Napi::Promise Promise() { return deferred_.Promise(); }
  fa_fwd_params fwd{};
  fa_bwd_params bwd{};
  bool backward = false;

 protected:
  void Execute() override {
    fa_status s = backward ? fa_bwd_cpu(&bwd) : fa_fwd_cpu(&fwd);
    if (s != FA_OK) SetError(StatusMessage(fn_, s));
  }
  void OnOK() override { deferred_.Resolve(Env().Undefined()); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  const char* fn_;
  Napi::Promise::Deferred deferred_;
  std::vector<Napi::ObjectReference> refs_;
};

// cpuForward(q, k, v, out, lse, dims, scale): Promise<void>; all host typed arrays.
Napi::Value CpuForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Dims d = ParseDims(info[5], info[6]);
  size_t es = ElemSize(d.dtype);
  size_t qn = size_t(d.B) * d.Nq * d.H * d.D, kn = size_t(d.B) * d.Nk * d.Hkv * d.D;
  auto* w = new CpuWorker(env, "flashAttention");
  fa_fwd_params& p = w->fwd;
  try {
    p.q = HostPtr(info[0], qn * es, "q");
    p.k = HostPtr(info[1], kn * es, "k");
    p.v = HostPtr(info[2], kn * es, "v");
    p.o = HostPtr(info[3], qn * es, "out");
    p.lse = static_cast<float*>(HostPtr(info[4], size_t(d.B) * d.H * d.Nq * 4, "lse"));
  } catch (...) {
    delete w;
    throw;
  }
  for (int i = 0; i < 5; i++) w->Keep(info[i]);
  p.q_str = p.o_str = QStrides(d);
  p.k_str = p.v_str = KStrides(d);
  p.batch = d.B; p.seqlen_q = d.Nq; p.seqlen_k = d.Nk; p.heads = d.H; p.heads_k = d.Hkv; p.head_dim = d.D;
  p.scale = d.scale; p.causal = d.causal; p.dtype = d.dtype;
  p.block_m = d.block_m; p.block_n = d.block_n; p.num_threads = d.threads;
  Napi::Promise promise = w->Promise();
  w->Queue();
  return promise;
}

// cpuBackward(dout, q, k, v, out, lse, dq, dk, dv, softmaxD|null, dims, scale): Promise<void>
Napi::Value CpuBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Dims d = ParseDims(info[10], info[11]);
  size_t es = ElemSize(d.dtype);
  size_t qn = size_t(d.B) * d.Nq * d.H * d.D, kn = size_t(d.B) * d.Nk * d.Hkv * d.D;
  size_t ln = size_t(d.B) * d.H * d.Nq * 4;
  auto* w = new CpuWorker(env, "flashAttentionBackward");
  w->backward = true;
  fa_bwd_params& p = w->bwd;
  try {
    p.dout = HostPtr(info[0], qn * es, "dout");
    p.q = HostPtr(info[1], qn * es, "q");
    p.k = HostPtr(info[2], kn * es, "k");
    p.v = HostPtr(info[3], kn * es, "v");
    p.o = HostPtr(info[4], qn * es, "out");
    p.lse = static_cast<const float*>(HostPtr(info[5], ln, "lse"));
    p.dq = HostPtr(info[6], qn * es, "dq");
    p.dk = HostPtr(info[7], kn * es, "dk");
    p.dv = HostPtr(info[8], kn * es, "dv");
    if (!info[9].IsNull() && !info[9].IsUndefined())
      p.softmax_d = static_cast<float*>(HostPtr(info[9], ln, "softmaxD"));
  } catch (...) {
    delete w;
    throw;
  }
  for (int i = 0; i < 10; i++)
    if (info[i].IsObject()) w->Keep(info[i]);
  p.do_str = p.q_str = p.o_str = p.dq_str = QStrides(d);
  p.k_str = p.v_str = p.dk_str = p.dv_str = KStrides(d);
  p.batch = d.B; p.seqlen_q = d.Nq; p.seqlen_k = d.Nk; p.heads = d.H; p.heads_k = d.Hkv; p.head_dim = d.D;
  p.scale = d.scale; p.causal = d.causal; p.dtype = d.dtype; p.deterministic = d.deterministic;
  p.block_m = d.block_m; p.block_n = d.block_n; p.num_threads = d.threads;
  Napi::Promise promise = w->Promise();
  w->Queue();
  return promise;
}

// ---- conversions (synchronous; memory-bound) ------------------------------------------------------

Napi::Value ConvertFromF32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array ||
      !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint16_array)
    throw Napi::TypeError::New(env, "internal: convertFromF32(Float32Array, Uint16Array, dtype)");
  auto src = info[0].As<Napi::Float32Array>();
  auto dst = info[1].As<Napi::Uint16Array>();
  if (src.ElementLength() != dst.ElementLength()) throw Napi::RangeError::New(env, "internal: length mismatch");
  int dt = info[2].As<Napi::Number>().Int32Value();
  if (dt != FA_FLOAT16 && dt != FA_BFLOAT16) throw Napi::RangeError::New(env, "internal: bad dtype");
  fa_convert_from_f32(src.Data(), dst.Data(), src.ElementLength(), static_cast<fa_dtype>(dt));
  return env.Undefined();
}

Napi::Value ConvertToF32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint16_array ||
      !info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    throw Napi::TypeError::New(env, "internal: convertToF32(Uint16Array, Float32Array, dtype)");
  auto src = info[0].As<Napi::Uint16Array>();
  auto dst = info[1].As<Napi::Float32Array>();
  if (src.ElementLength() != dst.ElementLength()) throw Napi::RangeError::New(env, "internal: length mismatch");
  int dt = info[2].As<Napi::Number>().Int32Value();
  if (dt != FA_FLOAT16 && dt != FA_BFLOAT16) throw Napi::RangeError::New(env, "internal: bad dtype");
  fa_convert_to_f32(src.Data(), dst.Data(), src.ElementLength(), static_cast<fa_dtype>(dt));
  return env.Undefined();
}

// ---- CUDA -------------------------------------------------------------------------------------------

int DeviceCount() {
#ifdef FA_WITH_CUDA
  static int count = -1;
  if (count < 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    count = n;
  }
  return count;
#else
  return 0;
#endif
}

Napi::Value Devices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Array out = Napi::Array::New(env);
#ifdef FA_WITH_CUDA
  for (int i = 0; i < DeviceCount(); i++) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("index", i);
    o.Set("name", std::string(prop.name));
    o.Set("computeCapability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
    o.Set("totalMemory", static_cast<double>(prop.totalGlobalMem));
    o.Set("multiProcessorCount", prop.multiProcessorCount);
    out.Set(out.Length(), o);
  }
#endif
  return out;
}

Napi::Value BuildInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
#ifdef FA_WITH_CUDA
  o.Set("cuda", true);
  Napi::Array archs = Napi::Array::New(env);
  std::string s = FA_CUDA_ARCHS_STR;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) archs.Set(archs.Length(), s.substr(start, end - start));
    start = end + 1;
  }
  o.Set("cudaArchs", archs);
  o.Set("cudaRuntimeVersion", CUDART_VERSION);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) { cudaGetLastError(); driver = 0; }
  o.Set("cudaDriverVersion", driver);
  o.Set("cudaBackward", fa_cuda_backward_available() != 0);
  Napi::Array dims = Napi::Array::New(env);
  for (int d = 8; d <= 256; d += 8)
    if (fa_cuda_supports(FA_FLOAT16, d)) dims.Set(dims.Length(), d);
  o.Set("cudaHeadDims", dims);
#else
  o.Set("cuda", false);
  o.Set("cudaArchs", Napi::Array::New(env));
  o.Set("cudaBackward", false);
  o.Set("cudaHeadDims", Napi::Array::New(env));
#endif
  o.Set("version", FA_VERSION);
  o.Set("napiVersion", NAPI_VERSION);
  o.Set("cpu", true);
  return o;
}

Napi::Value SupportsCuda(const Napi::CallbackInfo& info) {
  int dtype = info[0].As<Napi::Number>().Int32Value();
  int d = info[1].As<Napi::Number>().Int32Value();
  return Napi::Boolean::New(info.Env(), fa_cuda_supports(static_cast<fa_dtype>(dtype), d) != 0);
}

int DeviceArg(const Napi::Value& v) {
  Napi::Env env = v.Env();
  if (!v.IsNumber()) throw Napi::TypeError::New(env, "internal: device must be a number");
  int dev = v.As<Napi::Number>().Int32Value();
  if (dev < 0 || dev >= DeviceCount())
    throw Napi::RangeError::New(env, "device cuda:" + std::to_string(dev) + " does not exist (" +
                                         std::to_string(DeviceCount()) + " CUDA devices)");
  return dev;
}

size_t BytesArg(const Napi::Value& v) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), "internal: byte count must be a number");
  double b = v.As<Napi::Number>().DoubleValue();
  if (!(b >= 0) || b > 9.0e15) throw Napi::RangeError::New(v.Env(), "internal: bad byte count");
  return static_cast<size_t>(b);
}

// A GPU job whose Promise resolves with `result` (a value or an array of new device buffers).
class GpuJob : public Job {
 public:
  GpuJob(Napi::Env env, const char* fn) : fn_(fn), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Keep(const Napi::Value& v) { refs_.push_back(Napi::Persistent(v.As<Napi::Object>())); }
  // New output buffer, allocated by the queue before Submit.
  Napi::Object Output(Napi::Env env, DeviceQueue* q, size_t bytes) {
    auto a = std::make_shared<Allocation>();
    a->device = q->device();
    a->bytes = bytes;
    allocate.push_back(a);
    Napi::Object obj = DeviceBuffer::Create(env, q, a);
    outputs_.push_back(Napi::Persistent(obj));
    return obj;
  }
  void Complete(Napi::Env env, const std::string& error) override {
    if (!error.empty()) {
      // Outputs never reach the caller: free them now rather than at garbage collection.
      ReleaseOutputs(env);
      deferred_.Reject(Napi::Error::New(env, std::string(fn_) + ": " + error).Value());
      return;
    }
    if (outputs_.empty()) {
      deferred_.Resolve(env.Undefined());
    } else if (outputs_.size() == 1 && single_) {
      deferred_.Resolve(outputs_[0].Value());
    } else {
      Napi::Array arr = Napi::Array::New(env, outputs_.size());
      for (size_t i = 0; i < outputs_.size(); i++) arr.Set(i, outputs_[i].Value());
      deferred_.Resolve(arr);
    }
  }
  bool single_ = false;

 protected:
  // Frees the new output buffers now (they never reach the caller) rather than at collection.
  void ReleaseOutputs(Napi::Env env) {
    for (auto& o : outputs_) Napi::ObjectWrap<DeviceBuffer>::Unwrap(o.Value())->Release(env);
  }
  const char* fn_;
  Napi::Promise::Deferred deferred_;
  std::vector<Napi::ObjectReference> refs_;
  std::vector<Napi::ObjectReference> outputs_;
};

#ifdef FA_WITH_CUDA
std::string CudaErr(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return "";
  cudaGetLastError();
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " (" + what + ")";
}
#endif

// cudaUpload(device, typedArray): Promise<DeviceBuffer>
class UploadJob : public GpuJob {
 public:
  using GpuJob::GpuJob;
  const void* src = nullptr;
  size_t bytes = 0;
  std::string Submit(void* stream) override {
#ifdef FA_WITH_CUDA
    return CudaErr(cudaMemcpyAsync(allocate[0]->ptr, src, bytes, cudaMemcpyHostToDevice,
                                   static_cast<cudaStream_t>(stream)), "upload");
#else
    (void)stream; return "no CUDA";
#endif
  }
};

Napi::Value CudaUpload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int dev = DeviceArg(info[0]);
  if (!info[1].IsTypedArray()) throw Napi::TypeError::New(env, "internal: upload source must be a typed array");
  Napi::TypedArray t = info[1].As<Napi::TypedArray>();
  DeviceQueue* q = DeviceQueue::Get(env, dev);
  auto job = std::make_unique<UploadJob>(env, "Tensor.to");
  job->src = static_cast<uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset();
  job->bytes = t.ByteLength();
  job->Keep(t);
  job->single_ = true;
  job->Output(env, q, t.ByteLength());
  Napi::Promise p = job->Promise();
  q->Post(env, std::move(job));
  return p;
}

// cudaZeros(device, bytes): Promise<DeviceBuffer>
class ZerosJob : public GpuJob {
 public:
  using GpuJob::GpuJob;
  std::string Submit(void* stream) override {
#ifdef FA_WITH_CUDA
    return CudaErr(cudaMemsetAsync(allocate[0]->ptr, 0, allocate[0]->bytes, static_cast<cudaStream_t>(stream)), "zeros");
#else
    (void)stream; return "no CUDA";
#endif
  }
};

Napi::Value CudaZeros(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int dev = DeviceArg(info[0]);
  size_t bytes = BytesArg(info[1]);
  DeviceQueue* q = DeviceQueue::Get(env, dev);
  auto job = std::make_unique<ZerosJob>(env, "Tensor.zeros");
  job->single_ = true;
  job->Output(env, q, bytes);
  Napi::Promise p = job->Promise();
  q->Post(env, std::move(job));
  return p;
}

// cudaDownload(buffer, typedArray): Promise<void>, copies the buffer's bytes into the array.
class DownloadJob : public GpuJob {
 public:
  using GpuJob::GpuJob;
  AllocationPtr src;
  void* dst = nullptr;
  size_t bytes = 0;
  std::string Submit(void* stream) override {
#ifdef FA_WITH_CUDA
    return CudaErr(cudaMemcpyAsync(dst, src->ptr, bytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(stream)), "download");
#else
    (void)stream; return "no CUDA";
#endif
  }
};

Napi::Value CudaDownload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DeviceBuffer* b = DeviceBuffer::FromValue(info[0], "tensor");
  if (!b) return env.Undefined();
  if (!info[1].IsTypedArray()) throw Napi::TypeError::New(env, "internal: download target must be a typed array");
  Napi::TypedArray t = info[1].As<Napi::TypedArray>();
  if (t.ByteLength() != b->allocation()->bytes) throw Napi::RangeError::New(env, "internal: download size mismatch");
  auto job = std::make_unique<DownloadJob>(env, "Tensor.toTypedArray");
  job->src = b->allocation();
  job->dst = static_cast<uint8_t*>(t.ArrayBuffer().Data()) + t.ByteOffset();
  job->bytes = t.ByteLength();
  job->Keep(info[0]);
  job->Keep(t);
  Napi::Promise p = job->Promise();
  b->queue()->Post(env, std::move(job));
  return p;
}

// cudaForward(q, k, v, dims, scale): Promise<[out, lse]>
class ForwardJob : public GpuJob {
 public:
  using GpuJob::GpuJob;
  fa_fwd_params p{};
  AllocationPtr q, k, v;
  std::string Submit(void* stream) override {
    p.q = q->ptr; p.k = k->ptr; p.v = v->ptr;
    p.o = allocate[0]->ptr;
    p.lse = static_cast<float*>(allocate[1]->ptr);
    fa_status s = fa_fwd_cuda(&p, stream);
    return s == FA_OK ? "" : StatusMessage("", s).substr(2);
  }
};

void FillCommon(fa_fwd_params& p, const Dims& d) {
  p.q_str = p.o_str = QStrides(d);
  p.k_str = p.v_str = KStrides(d);
  p.batch = d.B; p.seqlen_q = d.Nq; p.seqlen_k = d.Nk; p.heads = d.H; p.heads_k = d.Hkv; p.head_dim = d.D;
  p.scale = d.scale; p.causal = d.causal; p.dtype = d.dtype;
}

Napi::Value CudaForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Dims d = ParseDims(info[3], info[4]);
  DeviceBuffer* bq = DeviceBuffer::FromValue(info[0], "q");
  if (!bq) return env.Undefined();
  DeviceBuffer* bk = DeviceBuffer::FromValue(info[1], "k");
  if (!bk) return env.Undefined();
  DeviceBuffer* bv = DeviceBuffer::FromValue(info[2], "v");
  if (!bv) return env.Undefined();
  size_t es = ElemSize(d.dtype);
  auto job = std::make_unique<ForwardJob>(env, "flashAttention");
  job->q = bq->allocation(); job->k = bk->allocation(); job->v = bv->allocation();
  for (int i = 0; i < 3; i++) job->Keep(info[i]);
  FillCommon(job->p, d);
  DeviceQueue* q = bq->queue();
  job->Output(env, q, size_t(d.B) * d.Nq * d.H * d.D * es);
  job->Output(env, q, size_t(d.B) * d.H * d.Nq * 4);
  Napi::Promise p = job->Promise();
  q->Post(env, std::move(job));
  return p;
}

// cudaBackward(dout, q, k, v, out, lse, dims, scale, wantD): Promise<[dq, dk, dv, D?]>
class BackwardJob : public GpuJob {
 public:
  using GpuJob::GpuJob;
  fa_bwd_params p{};
  AllocationPtr in[6];
  bool want_d = false;
  std::string Submit(void* stream) override {
    p.dout = in[0]->ptr; p.q = in[1]->ptr; p.k = in[2]->ptr; p.v = in[3]->ptr; p.o = in[4]->ptr;
    p.lse = static_cast<const float*>(in[5]->ptr);
    p.dq = allocate[0]->ptr; p.dk = allocate[1]->ptr; p.dv = allocate[2]->ptr;
    p.softmax_d = want_d ? static_cast<float*>(allocate[3]->ptr) : nullptr;
    fa_status s = fa_bwd_cuda(&p, stream);
    return s == FA_OK ? "" : StatusMessage("", s).substr(2);
  }
};

template <class JobT>
Napi::Value PostBackward(const Napi::CallbackInfo& info, const char* fn, bool bench) {
  Napi::Env env = info.Env();
  Dims d = ParseDims(info[6], info[7]);
  static const char* names[6] = {"dout", "q", "k", "v", "out", "lse"};
  DeviceBuffer* b[6];
  for (int i = 0; i < 6; i++) {
    b[i] = DeviceBuffer::FromValue(info[i], names[i]);
    if (!b[i]) return env.Undefined();
  }
  size_t es = ElemSize(d.dtype);
  auto job = std::make_unique<JobT>(env, fn);
  for (int i = 0; i < 6; i++) { job->in[i] = b[i]->allocation(); job->Keep(info[i]); }
  fa_bwd_params& p = job->p;
  p.do_str = p.q_str = p.o_str = p.dq_str = QStrides(d);
  p.k_str = p.v_str = p.dk_str = p.dv_str = KStrides(d);
  p.batch = d.B; p.seqlen_q = d.Nq; p.seqlen_k = d.Nk; p.heads = d.H; p.heads_k = d.Hkv; p.head_dim = d.D;
  p.scale = d.scale; p.causal = d.causal; p.dtype = d.dtype; p.deterministic = d.deterministic;
  job->want_d = !bench && info[8].ToBoolean().Value();
  DeviceQueue* q = b[1]->queue();
  job->Output(env, q, size_t(d.B) * d.Nq * d.H * d.D * es);
  job->Output(env, q, size_t(d.B) * d.Nk * d.Hkv * d.D * es);
  job->Output(env, q, size_t(d.B) * d.Nk * d.Hkv * d.D * es);
  if (job->want_d) job->Output(env, q, size_t(d.B) * d.H * d.Nq * 4);
  if constexpr (!std::is_same_v<JobT, BackwardJob>) {
    job->warmup = info[8].As<Napi::Number>().Int32Value();
    job->reps = std::max(1, info[9].As<Napi::Number>().Int32Value());
  }
  Napi::Promise p2 = job->Promise();
  q->Post(env, std::move(job));
  return p2;
}

}  // namespace

// Benchmark hooks: cudaBenchForward(q, k, v, dims, scale, warmup, reps) and
// cudaBenchBackward(dout, q, k, v, out, lse, dims, scale, warmup, reps) resolve with a Float64Array
// of per-launch milliseconds, each measured with CUDA events around one call of the core entry point
// (all its kernels) on the device's stream. The outputs are discarded.
template <class Base>
class BenchJob : public Base {
 public:
  using Base::Base;
  int warmup = 0, reps = 0;
  std::vector<double> ms;
#ifdef FA_WITH_CUDA
  std::vector<cudaEvent_t> events;
  std::string Submit(void* stream) override {
    for (int i = 0; i < warmup; i++) {
      std::string e = Base::Submit(stream);
      if (!e.empty()) return e;
    }
    events.resize(2 * reps);
    for (auto& ev : events) {
      std::string e = CudaErr(cudaEventCreate(&ev), "bench event");
      if (!e.empty()) return e;
    }
    auto s = static_cast<cudaStream_t>(stream);
    for (int i = 0; i < reps; i++) {
      cudaEventRecord(events[2 * i], s);
      std::string e = Base::Submit(stream);
      if (!e.empty()) return e;
      cudaEventRecord(events[2 * i + 1], s);
    }
    return "";
  }
  void Finished() override {
    for (int i = 0; i < reps; i++) {
      float t = 0;
      cudaEventElapsedTime(&t, events[2 * i], events[2 * i + 1]);
      ms.push_back(t);
    }
  }
  ~BenchJob() override {
    for (auto ev : events) if (ev) cudaEventDestroy(ev);
  }
#endif
  void Complete(Napi::Env env, const std::string& error) override {
    if (!error.empty()) return Base::Complete(env, error);
    Napi::Float64Array arr = Napi::Float64Array::New(env, ms.size());
    for (size_t i = 0; i < ms.size(); i++) arr[i] = ms[i];
    this->ReleaseOutputs(env);
    this->deferred_.Resolve(arr);
  }
};

Napi::Value CudaBenchForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Dims d = ParseDims(info[3], info[4]);
  DeviceBuffer* b[3];
  static const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; i++) {
    b[i] = DeviceBuffer::FromValue(info[i], names[i]);
    if (!b[i]) return env.Undefined();
  }
  auto job = std::make_unique<BenchJob<ForwardJob>>(env, "benchForward");
  job->q = b[0]->allocation(); job->k = b[1]->allocation(); job->v = b[2]->allocation();
  for (int i = 0; i < 3; i++) job->Keep(info[i]);
  FillCommon(job->p, d);
  job->warmup = info[5].As<Napi::Number>().Int32Value();
  job->reps = std::max(1, info[6].As<Napi::Number>().Int32Value());
  DeviceQueue* q = b[0]->queue();
  job->Output(env, q, size_t(d.B) * d.Nq * d.H * d.D * ElemSize(d.dtype));
  job->Output(env, q, size_t(d.B) * d.H * d.Nq * 4);
  Napi::Promise p = job->Promise();
  q->Post(env, std::move(job));
  return p;
}

Napi::Value CudaBackward(const Napi::CallbackInfo& info) {
  return PostBackward<BackwardJob>(info, "flashAttentionBackward", false);
}
Napi::Value CudaBenchBackward(const Napi::CallbackInfo& info) {
  return PostBackward<BenchJob<BackwardJob>>(info, "benchBackward", true);
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("cudaBenchBackward", Napi::Function::New(env, CudaBenchBackward));
  exports.Set("cudaBenchForward", Napi::Function::New(env, CudaBenchForward));
  DeviceBuffer::Init(env, exports);
  exports.Set("cpuForward", Napi::Function::New(env, CpuForward));
  exports.Set("cpuBackward", Napi::Function::New(env, CpuBackward));
  exports.Set("convertFromF32", Napi::Function::New(env, ConvertFromF32));
  exports.Set("convertToF32", Napi::Function::New(env, ConvertToF32));
  exports.Set("devices", Napi::Function::New(env, Devices));
  exports.Set("buildInfo", Napi::Function::New(env, BuildInfo));
  exports.Set("cudaSupports", Napi::Function::New(env, SupportsCuda));
  exports.Set("cudaUpload", Napi::Function::New(env, CudaUpload));
  exports.Set("cudaZeros", Napi::Function::New(env, CudaZeros));
  exports.Set("cudaDownload", Napi::Function::New(env, CudaDownload));
  exports.Set("cudaForward", Napi::Function::New(env, CudaForward));
  exports.Set("cudaBackward", Napi::Function::New(env, CudaBackward));
  return exports;
}

}  // namespace fab

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return fab::Init(env, exports); }
NODE_API_MODULE(flash_attention_node, InitAddon)
