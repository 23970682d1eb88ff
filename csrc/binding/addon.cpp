// N-API layer: thin. TypeScript (lib/) validates every argument; the binding turns named fields
// (fields.h) into fa_core parameter structs. CPU work runs in an AsyncWorker; CUDA work is queued
// on the device's stream from the JS thread (context.h). This file: module init, conversions,
// devices(), buildInfo(). Attention calls: ops.cpp; tensor storage and device calls: tensors.cpp.
#include <napi.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "binding/context.h"
#include "binding/ops.h"
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

// The CPU backend's kernel set now ("avx512", "avx2" or "generic"; FA_CPU_ISA picks a narrower one).
extern "C" const char* fa_internal_cpu_isa(void);

namespace fab {
namespace {

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
  o.Set("cpuKernels", fa_internal_cpu_isa());
  return o;
}

Napi::Value SupportsCuda(const Napi::CallbackInfo& info) {
  int dtype = info[0].As<Napi::Number>().Int32Value();
  int d = info[1].As<Napi::Number>().Int32Value();
  return Napi::Boolean::New(info.Env(), fa_cuda_supports(static_cast<fa_dtype>(dtype), d) != 0);
}

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("layout", Napi::Function::New(env, Layout));
  exports.Set("call", Napi::Function::New(env, Call_));
  exports.Set("merge", Napi::Function::New(env, Merge));
  exports.Set("bench", Napi::Function::New(env, Bench));
  exports.Set("alloc", Napi::Function::New(env, Alloc));
  exports.Set("free", Napi::Function::New(env, Free));
  exports.Set("upload", Napi::Function::New(env, Upload));
  exports.Set("download", Napi::Function::New(env, Download));
  exports.Set("copyDevice", Napi::Function::New(env, CopyDevice));
  exports.Set("synchronize", Napi::Function::New(env, Synchronize));
  exports.Set("memoryStats", Napi::Function::New(env, MemoryStats));
  exports.Set("emptyCache", Napi::Function::New(env, EmptyCache));
  exports.Set("resetPeakMemoryStats", Napi::Function::New(env, ResetPeak));
  exports.Set("debugFault", Napi::Function::New(env, DebugFault));
  exports.Set("fillRandom", Napi::Function::New(env, FillRandom));
  exports.Set("convertFromF32", Napi::Function::New(env, ConvertFromF32));
  exports.Set("convertToF32", Napi::Function::New(env, ConvertToF32));
  exports.Set("devices", Napi::Function::New(env, Devices));
  exports.Set("buildInfo", Napi::Function::New(env, BuildInfo));
  exports.Set("cudaSupports", Napi::Function::New(env, SupportsCuda));
  return exports;
}

}  // namespace fab

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return fab::Init(env, exports); }
NODE_API_MODULE(flash_attention_node, InitAddon)
