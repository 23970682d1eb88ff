#include "binding/device_buffer.h"

#include <algorithm>
#include <map>

namespace fab {

namespace {
// Constructor reference per environment (instance data would collide with other addons' use).
thread_local std::map<napi_env, Napi::FunctionReference*> g_ctor;
// Set while Create() runs so that `new DeviceBuffer()` from JS is refused.
thread_local bool g_creating = false;
thread_local DeviceQueue* g_pending_queue = nullptr;
thread_local AllocationPtr* g_pending_alloc = nullptr;

// Device memory reported to V8 as external memory, so that the garbage collector runs when
// undisposed device tensors pile up. V8 answers each increase above 64 MiB since its last full
// collection with GC work, which made a plain report of every output (64 MiB for one B4 H16 N4096
// D128 fp16 call) cost about a millisecond per call even when the caller disposes promptly. So the
// first kUnreportedBytes of live device memory per JS thread are not reported; everything above is.
constexpr int64_t kUnreportedBytes = int64_t(1) << 30;
thread_local int64_t g_live_bytes = 0;

void TrackDeviceBytes(Napi::Env env, int64_t delta) {
  const int64_t before = std::max<int64_t>(0, g_live_bytes - kUnreportedBytes);
  g_live_bytes += delta;
  const int64_t after = std::max<int64_t>(0, g_live_bytes - kUnreportedBytes);
  if (after != before) Napi::MemoryManagement::AdjustExternalMemory(env, after - before);
}
}  // namespace

void DeviceBuffer::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function cls = DefineClass(env, "DeviceBuffer", {
      InstanceMethod<&DeviceBuffer::Dispose>("dispose"),
      InstanceAccessor<&DeviceBuffer::GetBytes>("bytes"),
      InstanceAccessor<&DeviceBuffer::GetDevice>("device"),
  });
  auto* ref = new Napi::FunctionReference(Napi::Persistent(cls));
  napi_env raw = env;
  g_ctor[raw] = ref;
  env.AddCleanupHook([raw, ref]() { g_ctor.erase(raw); delete ref; });
  exports.Set("DeviceBuffer", cls);
}

Napi::Object DeviceBuffer::Create(Napi::Env env, DeviceQueue* queue, AllocationPtr alloc) {
  g_creating = true;
  g_pending_queue = queue;
  g_pending_alloc = &alloc;
  Napi::Object obj = g_ctor[env]->New({});
  g_creating = false;
  g_pending_queue = nullptr;
  g_pending_alloc = nullptr;
  return obj;
}

DeviceBuffer::DeviceBuffer(const Napi::CallbackInfo& info) : Napi::ObjectWrap<DeviceBuffer>(info) {
  if (!g_creating) {
    Napi::TypeError::New(info.Env(), "DeviceBuffer cannot be constructed from JavaScript")
        .ThrowAsJavaScriptException();
    return;
  }
  queue_ = g_pending_queue;
  alloc_ = *g_pending_alloc;
  TrackDeviceBytes(info.Env(), static_cast<int64_t>(alloc_->bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (!disposed_ && alloc_) {
    disposed_ = true;
    queue_->Free(alloc_);
    TrackDeviceBytes(Env(), -static_cast<int64_t>(alloc_->bytes));
  }
}

void DeviceBuffer::Release(Napi::Env env) {
  if (disposed_ || !alloc_) return;
  disposed_ = true;
  queue_->Free(alloc_);
  TrackDeviceBytes(env, -static_cast<int64_t>(alloc_->bytes));
}

Napi::Value DeviceBuffer::Dispose(const Napi::CallbackInfo& info) {
  Release(info.Env());
  return info.Env().Undefined();
}

Napi::Value DeviceBuffer::GetBytes(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), alloc_ ? static_cast<double>(alloc_->bytes) : 0);
}

Napi::Value DeviceBuffer::GetDevice(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), alloc_ ? alloc_->device : -1);
}

DeviceBuffer* DeviceBuffer::FromValue(Napi::Value v, const char* what) {
  Napi::Env env = v.Env();
  auto it = g_ctor.find(env);
  if (!v.IsObject() || it == g_ctor.end() || !v.As<Napi::Object>().InstanceOf(it->second->Value())) {
    Napi::TypeError::New(env, std::string(what) + " is not a device buffer").ThrowAsJavaScriptException();
    return nullptr;
  }
  DeviceBuffer* b = ObjectWrap<DeviceBuffer>::Unwrap(v.As<Napi::Object>());
  if (b->disposed_) {
    Napi::TypeError::New(env, std::string(what) + " is disposed").ThrowAsJavaScriptException();
    return nullptr;
  }
  return b;
}

}  // namespace fab
