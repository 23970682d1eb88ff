// Tensor storage on CUDA devices and the device-wide calls: allocation, host <-> device copies,
// device-to-device copies, synchronize(), memoryStats(), emptyCache(). The execution model is in
// context.h: everything is issued on the device's stream from the JS thread; only waits (host
// reads, synchronize, emptyCache) and large host transfers leave it.
#include <napi.h>

#include <cstring>
#include <memory>
#include <string>

#include "binding/context.h"
#include "binding/ops.h"
#include "fa_core.h"

#ifdef FA_WITH_CUDA
#include <cuda_runtime.h>
extern "C" fa_status fa_internal_debug_fault(void* stream);
extern "C" fa_status fa_internal_fill_random(void* ptr, size_t n, int dtype, unsigned seed, void* stream);
#endif

namespace fab {

namespace {


int DeviceArg(const Napi::Value& v) {
  Napi::Env env = v.Env();
  if (!v.IsNumber()) throw Napi::TypeError::New(env, "internal: device must be a number");
  const int dev = v.As<Napi::Number>().Int32Value();
#ifdef FA_WITH_CUDA
  if (dev < 0 || dev >= DeviceCount())
    throw Napi::RangeError::New(env, "device cuda:" + std::to_string(dev) + " does not exist (" +
                                         std::to_string(DeviceCount()) + " CUDA devices)");
  return dev;
#else
  (void)dev;
  throw Napi::Error::New(env, "flash-attention-node was built without CUDA");
#endif
}

// A usable context (throws the sticky error of a broken one).
DeviceContext* Usable(Napi::Env env, int device) {
  DeviceContext* ctx = DeviceContext::Get(env, device);
  const std::string bad = ctx->Unusable();
  if (!bad.empty()) throw Napi::Error::New(env, bad);
  ctx->MakeCurrent();
  return ctx;
}

DevAlloc* HandleArg(const Napi::Value& v, const char* what) {
  DevAlloc* a = DeviceContext::Unwrap(v.Env(), v);
  if (a == nullptr) throw Napi::TypeError::New(v.Env(), std::string(what) + " is disposed or not a device tensor");
  return a;
}

struct HostView {
  void* data;
  size_t bytes;
};
HostView HostArg(const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray()) throw Napi::TypeError::New(v.Env(), std::string("internal: ") + what + " must be a typed array");
  Napi::TypedArray t = v.As<Napi::TypedArray>();
  return {TypedArrayData(t), t.ByteLength()};
}

}  // namespace

// alloc(device, bytes, zero) -> handle
Napi::Value Alloc(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DeviceContext* ctx = Usable(env, DeviceArg(info[0]));
  const double b = info[1].As<Napi::Number>().DoubleValue();
  if (!(b >= 0) || b > 9.0e15) throw Napi::RangeError::New(env, "internal: bad byte count");
  const size_t bytes = static_cast<size_t>(b);
  void* ptr = nullptr;
  std::string e = ctx->Alloc(bytes, &ptr);
  if (!e.empty()) throw Napi::Error::New(env, e);
#ifdef FA_WITH_CUDA
  if (info[2].ToBoolean().Value() && bytes > 0) {
    const cudaError_t err = cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(ctx->stream()));
    if (err != cudaSuccess) {
      ctx->FreeAsync(ptr);
      throw Napi::Error::New(env, ctx->Error(err, "zero-filling a new tensor"));
    }
  }
#endif
  return ctx->Wrap(env, ptr, bytes);
}

// free(handle): stream-ordered; a disposed or foreign value is ignored.
Napi::Value Free(const Napi::CallbackInfo& info) {
  DeviceContext::Release(info.Env(), DeviceContext::Unwrap(info.Env(), info[0]));
  return info.Env().Undefined();
}

// upload(device, typedArray) -> handle (small: copied through page-locked staging at once) or
// Promise<handle> (large: copied on the waiter thread; the handle is handed out once the device
// stream is ordered after the copy, so no later call can see the tensor before its data).
Napi::Value Upload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DeviceContext* ctx = Usable(env, DeviceArg(info[0]));
  const HostView h = HostArg(info[1], "upload source");
  void* dev = nullptr;
  std::string e = ctx->Alloc(h.bytes, &dev);
  if (!e.empty()) throw Napi::Error::New(env, e);
#ifdef FA_WITH_CUDA
  cudaStream_t s = static_cast<cudaStream_t>(ctx->stream());
  if (h.bytes == 0) return ctx->Wrap(env, dev, 0);
  if (Pinned* pin = ctx->TakePinned(h.bytes)) {
    std::memcpy(pin->ptr, h.data, h.bytes);
    const cudaError_t err = cudaMemcpyAsync(dev, pin->ptr, h.bytes, cudaMemcpyHostToDevice, s);
    ctx->RetirePinned(pin);
    if (err != cudaSuccess) {
      ctx->FreeAsync(dev);
      throw Napi::Error::New(env, ctx->Error(err, "copying to the device"));
    }
    return ctx->Wrap(env, dev, h.bytes);
  }
  cudaEvent_t allocated = nullptr, copied = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&allocated, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(allocated, s);
  if (err != cudaSuccess) {
    if (allocated) cudaEventDestroy(allocated);
    if (copied) cudaEventDestroy(copied);
    ctx->FreeAsync(dev);
    throw Napi::Error::New(env, ctx->Error(err, "copying to the device"));
  }
  auto keep = std::make_shared<Napi::ObjectReference>(Napi::Persistent(info[1].As<Napi::Object>()));
  auto deferred = std::make_shared<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(env));
  cudaStream_t cs = static_cast<cudaStream_t>(ctx->copy_stream());
  const size_t bytes = h.bytes;
  void* src = h.data;
  ctx->Enqueue(
      [=]() -> std::string {
        cudaError_t r = cudaStreamWaitEvent(cs, allocated, 0);
        if (r == cudaSuccess) r = cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, cs);
        if (r == cudaSuccess) r = cudaEventRecord(copied, cs);
        if (r == cudaSuccess) r = cudaStreamSynchronize(cs);
        return r == cudaSuccess ? "" : "#" + std::to_string(static_cast<int>(r));
      },
      [=](Napi::Env e2, const std::string& r) {
        keep->Reset();
        ctx->MakeCurrent();
        std::string msg;
        if (r.empty()) {
          const cudaError_t w = cudaStreamWaitEvent(static_cast<cudaStream_t>(ctx->stream()), copied, 0);
          if (w != cudaSuccess) msg = ctx->Error(w, "copying to the device");
        } else {
          msg = ctx->Error(std::stoi(r.substr(1)), "copying to the device");
        }
        cudaEventDestroy(allocated);
        cudaEventDestroy(copied);
        if (!msg.empty()) {
          ctx->FreeAsync(dev);
          return deferred->Reject(Napi::Error::New(e2, msg).Value());
        }
        deferred->Resolve(ctx->Wrap(e2, dev, bytes));
      });
  return deferred->Promise();
#else
  return env.Undefined();
#endif
}

// download(handle, typedArray) -> Promise<void>: the tensor's bytes, once the work queued before
// (including the work that produced it) is done. Small tensors go through page-locked staging and
// settle without a thread hand-off when the GPU is nearly there; large ones are snapshotted on the
// device (so later calls may overwrite or free the tensor at once) and copied on the waiter thread.
Napi::Value Download(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DevAlloc* a = HandleArg(info[0], "tensor");
  DeviceContext* ctx = a->ctx;
  {
    const std::string bad = ctx->Unusable();
    if (!bad.empty()) throw Napi::Error::New(env, bad);
    ctx->MakeCurrent();
  }
  const HostView h = HostArg(info[1], "download target");
  if (h.bytes > a->bytes) throw Napi::RangeError::New(env, "internal: download size mismatch");
  auto deferred = std::make_shared<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(env));
#ifdef FA_WITH_CUDA
  cudaStream_t s = static_cast<cudaStream_t>(ctx->stream());
  auto keep = std::make_shared<Napi::ObjectReference>(Napi::Persistent(info[1].As<Napi::Object>()));
  if (h.bytes == 0) {
    deferred->Resolve(env.Undefined());
    return deferred->Promise();
  }
  if (Pinned* pin = ctx->TakePinned(h.bytes)) {
    const cudaError_t err = cudaMemcpyAsync(pin->ptr, a->ptr, h.bytes, cudaMemcpyDeviceToHost, s);
    if (err != cudaSuccess) {
      ctx->ReturnPinned(pin);
      throw Napi::Error::New(env, ctx->Error(err, "copying to the host"));
    }
    void* dst = h.data;
    const size_t bytes = h.bytes;
    ctx->WhenReached("copying to the host", [=](Napi::Env e2, const std::string& r) {
      if (r.empty()) std::memcpy(dst, pin->ptr, bytes);
      ctx->ReturnPinned(pin);
      keep->Reset();
      if (!r.empty()) return deferred->Reject(Napi::Error::New(e2, r).Value());
      deferred->Resolve(e2.Undefined());
    }, env);
    return deferred->Promise();
  }
  // Large: snapshot on the device, then the waiter copies the snapshot out. A launch that failed on
  // the launcher thread is reported here (the small path reports it through WhenReached).
  {
    const std::string failed = ctx->TakeLaunchError();
    if (!failed.empty()) {
      keep->Reset();
      deferred->Reject(Napi::Error::New(env, failed).Value());
      return deferred->Promise();
    }
  }
  void* snap = nullptr;
  std::string e = ctx->Alloc(h.bytes, &snap, /*cacheable=*/false);  // freed on the copy stream
  if (!e.empty()) {
    // No room for a snapshot: wait here for the stream and copy directly (rare).
    cudaError_t err = cudaStreamSynchronize(s);
    if (err == cudaSuccess) err = cudaMemcpy(h.data, a->ptr, h.bytes, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) throw Napi::Error::New(env, ctx->Error(err, "copying to the host"));
    deferred->Resolve(env.Undefined());
    return deferred->Promise();
  }
  cudaEvent_t ready = nullptr;
  cudaError_t err = cudaMemcpyAsync(snap, a->ptr, h.bytes, cudaMemcpyDeviceToDevice, s);
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(ready, s);
  if (err != cudaSuccess) {
    if (ready) cudaEventDestroy(ready);
    cudaFreeAsync(snap, s);
    throw Napi::Error::New(env, ctx->Error(err, "copying to the host"));
  }
  cudaStream_t cs = static_cast<cudaStream_t>(ctx->copy_stream());
  void* dst = h.data;
  const size_t bytes = h.bytes;
  ctx->Enqueue(
      [=]() -> std::string {
        cudaError_t r = cudaStreamWaitEvent(cs, ready, 0);
        if (r == cudaSuccess) r = cudaMemcpyAsync(dst, snap, bytes, cudaMemcpyDeviceToHost, cs);
        if (r == cudaSuccess) r = cudaStreamSynchronize(cs);
        cudaFreeAsync(snap, cs);
        cudaEventDestroy(ready);
        return r == cudaSuccess ? "" : "#" + std::to_string(static_cast<int>(r));
      },
      [=](Napi::Env e2, const std::string& r) {
        keep->Reset();
        if (!r.empty())
          return deferred->Reject(Napi::Error::New(e2, ctx->Error(std::stoi(r.substr(1)), "copying to the host")).Value());
        deferred->Resolve(e2.Undefined());
      });
#endif
  return deferred->Promise();
}

// copyDevice(handle, device) -> handle: a copy on `device`, stream-ordered on both devices.
Napi::Value CopyDevice(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DevAlloc* a = HandleArg(info[0], "tensor");
  DeviceContext* src = a->ctx;
  {
    const std::string bad = src->Unusable();
    if (!bad.empty()) throw Napi::Error::New(env, bad);
  }
  DeviceContext* dst = Usable(env, DeviceArg(info[1]));
  void* ptr = nullptr;
  std::string e = dst->Alloc(a->bytes, &ptr);
  if (!e.empty()) throw Napi::Error::New(env, e);
#ifdef FA_WITH_CUDA
  cudaError_t err = cudaSuccess;
  if (src == dst) {
    err = cudaMemcpyAsync(ptr, a->ptr, a->bytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(dst->stream()));
  } else {
    // dst stream: allocation -> event; src stream waits for it, copies, records; dst waits.
    cudaEvent_t allocated = nullptr, copied = nullptr;
    err = cudaEventCreateWithFlags(&allocated, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventRecord(allocated, static_cast<cudaStream_t>(dst->stream()));
    if (err == cudaSuccess) {
      src->MakeCurrent();
      err = cudaStreamWaitEvent(static_cast<cudaStream_t>(src->stream()), allocated, 0);
      if (err == cudaSuccess)
        err = cudaMemcpyPeerAsync(ptr, dst->device(), a->ptr, src->device(), a->bytes,
                                  static_cast<cudaStream_t>(src->stream()));
      if (err == cudaSuccess) err = cudaEventRecord(copied, static_cast<cudaStream_t>(src->stream()));
      dst->MakeCurrent();
      if (err == cudaSuccess) err = cudaStreamWaitEvent(static_cast<cudaStream_t>(dst->stream()), copied, 0);
    }
    if (allocated) cudaEventDestroy(allocated);
    if (copied) cudaEventDestroy(copied);
  }
  if (err != cudaSuccess) {
    dst->FreeAsync(ptr);
    throw Napi::Error::New(env, dst->Error(err, "copying between devices"));
  }
#endif
  return dst->Wrap(env, ptr, a->bytes);
}

// synchronize(device) -> Promise<void>: all work queued on the device so far is done; rejects with
// the CUDA error of failed queued work.
Napi::Value Synchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int device = DeviceArg(info[0]);
  auto deferred = std::make_shared<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(env));
  DeviceContext* ctx = DeviceContext::Find(env, device);
  if (ctx == nullptr) {  // nothing was ever queued on it from this environment
    deferred->Resolve(env.Undefined());
    return deferred->Promise();
  }
  ctx->WhenReached("synchronize", [deferred](Napi::Env e2, const std::string& r) {
    if (!r.empty()) return deferred->Reject(Napi::Error::New(e2, r).Value());
    deferred->Resolve(e2.Undefined());
  }, env);
  return deferred->Promise();
}

// memoryStats(device) -> { allocated, reserved, peakAllocated, free, total } in bytes: the
// device's stream-ordered pool (memory in use by tensors and workspaces, memory held from the
// driver, the peak in use since the start or resetPeakMemoryStats) and the device's free / total
// memory as the driver reports it.
Napi::Value MemoryStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int device = DeviceArg(info[0]);
  DeviceContext* ctx = DeviceContext::Get(env, device);
  double allocated = 0, reserved = 0, peak = 0, free_b = 0, total_b = 0;
  ctx->MemoryStats(&allocated, &reserved, &peak);
#ifdef FA_WITH_CUDA
  ctx->MakeCurrent();
  size_t fr = 0, to = 0;
  if (cudaMemGetInfo(&fr, &to) == cudaSuccess) {
    free_b = double(fr);
    total_b = double(to);
  } else {
    cudaGetLastError();
  }
#endif
  Napi::Object o = Napi::Object::New(env);
  o.Set("allocated", allocated);
  o.Set("reserved", reserved);
  o.Set("peakAllocated", peak);
  o.Set("free", free_b);
  o.Set("total", total_b);
  o.Set("indexSlotUploads", ctx->index_slot_uploads());
  o.Set("indexStagedUploads", ctx->index_staged_uploads());
  return o;
}

Napi::Value ResetPeak(const Napi::CallbackInfo& info) {
  DeviceContext::Get(info.Env(), DeviceArg(info[0]))->ResetPeak();
  return info.Env().Undefined();
}

// emptyCache(device) -> Promise<void>: once the queued work is done, the pool's unused memory goes
// back to the driver (other processes can then have it) and unused page-locked staging is freed.
Napi::Value EmptyCache(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int device = DeviceArg(info[0]);
  auto deferred = std::make_shared<Napi::Promise::Deferred>(Napi::Promise::Deferred::New(env));
  DeviceContext* ctx = DeviceContext::Find(env, device);
  if (ctx == nullptr) {
    deferred->Resolve(env.Undefined());
    return deferred->Promise();
  }
#ifdef FA_WITH_CUDA
  ctx->ReleaseCache();
  cudaStream_t s = static_cast<cudaStream_t>(ctx->stream());
  ctx->Enqueue(
      [ctx, s]() -> std::string {
        const cudaError_t r = cudaStreamSynchronize(s);
        if (r != cudaSuccess) return "#" + std::to_string(static_cast<int>(r));
        return ctx->Trim();
      },
      [ctx, deferred](Napi::Env e2, const std::string& r) {
        if (!r.empty()) return deferred->Reject(Napi::Error::New(e2, ctx->Error(std::stoi(r.substr(1)), "emptyCache")).Value());
        ctx->FreePinnedCache();
        deferred->Resolve(e2.Undefined());
      });
#endif
  return deferred->Promise();
}

// debugFault(device): queues a kernel that traps (tests of how a failure inside queued work
// surfaces). It makes the device unusable for the rest of the process, as any kernel fault does.
Napi::Value DebugFault(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DeviceContext* ctx = Usable(env, DeviceArg(info[0]));
#ifdef FA_WITH_CUDA
  if (fa_internal_debug_fault(ctx->stream()) != FA_OK) throw Napi::Error::New(env, fa_last_error());
#else
  (void)ctx;
#endif
  return env.Undefined();
}

}  // namespace fab

namespace fab {
// fillRandom(handle, dtype, seed): benchmark hook, approximately standard-normal values on the device.
Napi::Value FillRandom(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DevAlloc* a = HandleArg(info[0], "tensor");
  const int dtype = info[1].As<Napi::Number>().Int32Value();
  const unsigned seed = info[2].As<Napi::Number>().Uint32Value();
  const std::string bad = a->ctx->Unusable();
  if (!bad.empty()) throw Napi::Error::New(env, bad);
#ifdef FA_WITH_CUDA
  a->ctx->MakeCurrent();
  const size_t es = dtype == FA_FLOAT32 ? 4 : 2;
  if (fa_internal_fill_random(a->ptr, a->bytes / es, dtype, seed, a->ctx->stream()) != FA_OK)
    throw Napi::Error::New(env, fa_last_error());
#else
  (void)dtype, (void)seed;
#endif
  return env.Undefined();
}
}  // namespace fab
