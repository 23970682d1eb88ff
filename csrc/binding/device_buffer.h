// DeviceBuffer: the JS handle of one device allocation (the storage of a CUDA Tensor).
#pragma once
#include <napi.h>

#include "binding/device_queue.h"

namespace fab {

class DeviceBuffer : public Napi::ObjectWrap<DeviceBuffer> {
 public:
  static void Init(Napi::Env env, Napi::Object exports);
  // A new handle whose memory the next job posted to `queue` allocates (listed in job->allocate).
  static Napi::Object Create(Napi::Env env, DeviceQueue* queue, AllocationPtr alloc);
  // The buffer behind a JS value, or nullptr (with a JS exception pending) when it is not a live
  // DeviceBuffer.
  static DeviceBuffer* FromValue(Napi::Value v, const char* what);

  explicit DeviceBuffer(const Napi::CallbackInfo& info);
  ~DeviceBuffer() override;

  const AllocationPtr& allocation() const { return alloc_; }
  DeviceQueue* queue() const { return queue_; }
  bool disposed() const { return disposed_; }
  // Frees the memory (stream-ordered, after all work posted so far) and marks the handle disposed.
  void Release(Napi::Env env);

 private:
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value GetBytes(const Napi::CallbackInfo& info);
  Napi::Value GetDevice(const Napi::CallbackInfo& info);

  AllocationPtr alloc_;
  DeviceQueue* queue_ = nullptr;
  bool disposed_ = false;
};

}  // namespace fab
