// Entry points of ops.cpp (attention calls) and tensors.cpp (tensor storage, device state), each a
// function of the addon's exports (registered in addon.cpp).
#pragma once
#include <napi.h>

#include <cstdint>

namespace fab {
// The first element of a typed array. (Through t.ArrayBuffer().Data() an array whose memory is a
// SharedArrayBuffer was refused: napi_get_arraybuffer_info takes ArrayBuffers only.)
inline uint8_t* TypedArrayData(const Napi::TypedArray& t) {
  void* data = nullptr;
  if (napi_get_typedarray_info(t.Env(), t, nullptr, nullptr, &data, nullptr, nullptr) != napi_ok)
    throw Napi::Error::New(t.Env(), "internal: the typed array's memory could not be read");
  return static_cast<uint8_t*>(data);
}
// ops.cpp
Napi::Value Call_(const Napi::CallbackInfo& info);   // call(op, params, slots)
Napi::Value Merge(const Napi::CallbackInfo& info);   // merge(params, outs, lses, out, lse)
Napi::Value Bench(const Napi::CallbackInfo& info);   // bench(op, params, slots, warmup, reps)
Napi::Value Layout(const Napi::CallbackInfo& info);  // layout(): { fields, slots, ops }
// tensors.cpp
Napi::Value Alloc(const Napi::CallbackInfo& info);         // alloc(device, bytes, zero) -> handle
Napi::Value Free(const Napi::CallbackInfo& info);          // free(handle)
Napi::Value Upload(const Napi::CallbackInfo& info);        // upload(device, typedArray) -> handle | Promise<handle>
Napi::Value Download(const Napi::CallbackInfo& info);      // download(handle, typedArray) -> Promise<void>
Napi::Value CopyDevice(const Napi::CallbackInfo& info);    // copyDevice(handle, device) -> handle
Napi::Value Synchronize(const Napi::CallbackInfo& info);   // synchronize(device) -> Promise<void>
Napi::Value MemoryStats(const Napi::CallbackInfo& info);   // memoryStats(device) -> object
Napi::Value EmptyCache(const Napi::CallbackInfo& info);    // emptyCache(device) -> Promise<void>
Napi::Value ResetPeak(const Napi::CallbackInfo& info);     // resetPeakMemoryStats(device)
Napi::Value DebugFault(const Napi::CallbackInfo& info);    // debugFault(device): test hook
Napi::Value FillRandom(const Napi::CallbackInfo& info);    // fillRandom(handle, dtype, seed): bench hook
}  // namespace fab
