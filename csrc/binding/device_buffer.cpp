#include "binding/device_buffer.h"

#include <map>

namespace fab {

namespace {
// Constructor reference per environment (instance data would collide with other addons' use).
thread_local std::map<napi_env, Napi::FunctionReference*> g_ctor;
// Set while Create() runs so that `new DeviceBuffer()` from JS is refused.
thread_local bool g_creating = false;
thread_local DeviceQueue* g_pending_queue = nullptr;
thread_local AllocationPtr* g_pending_alloc = nullptr;
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
  Napi::MemoryManagement::AdjustExternalMemory(info.Env(), static_cast<int64_t>(alloc_->bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (!disposed_ && alloc_) {
    disposed_ = true;
    queue_->Free(alloc_);
    Napi::MemoryManagement::AdjustExternalMemory(Env(), -static_cast<int64_t>(alloc_->bytes));
  }
}

void DeviceBuffer::Release(Napi::Env env) {
  if (disposed_ || !alloc_) return;
  disposed_ = true;
  queue_->Free(alloc_);
  Napi::MemoryManagement::AdjustExternalMemory(env, -static_cast<int64_t>(alloc_->bytes));
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
