#include "binding/context.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#ifdef FA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fab {

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

namespace {

// Type tag of device handles (napi Externals): a value from elsewhere is never taken for one.
const napi_type_tag kHandleTag = {0x8f3a61c2d94b0e17ULL, 0x5be04a7791c3d2a8ULL};

// Device memory reported to V8 as external memory, so that the garbage collector runs when
// undisposed device tensors pile up. V8 answers each increase above 64 MiB since its last full
// collection with GC work, which made a plain report of every output (64 MiB for one B4 H16 N4096
// D128 fp16 call) cost about a millisecond per call even when the caller disposes promptly. So the
// first kUnreportedBytes of live device memory per JS thread are not reported; everything above is.
constexpr int64_t kUnreportedBytes = int64_t(1) << 30;
thread_local int64_t g_live_bytes = 0;

void TrackDeviceBytes(napi_env env, int64_t delta) {
  const int64_t before = std::max<int64_t>(0, g_live_bytes - kUnreportedBytes);
  g_live_bytes += delta;
  const int64_t after = std::max<int64_t>(0, g_live_bytes - kUnreportedBytes);
  if (after != before) {
    int64_t adjusted = 0;
    napi_adjust_external_memory(env, after - before, &adjusted);
  }
}

struct EnvContexts {
  std::map<int, DeviceContext*> contexts;  // never deleted: finalizers may run after the cleanup
};
thread_local std::map<napi_env, EnvContexts*> g_envs;  // JS threads only

EnvContexts* ContextsFor(Napi::Env env, bool create) {
  auto it = g_envs.find(env);
  if (it != g_envs.end()) return it->second;
  if (!create) return nullptr;
  auto* e = new EnvContexts();
  g_envs[env] = e;
  napi_env raw = env;
  env.AddCleanupHook([e, raw]() {
    for (auto& kv : e->contexts) kv.second->Shutdown();
    g_envs.erase(raw);
  });
  return e;
}

#ifdef FA_WITH_CUDA
// Errors after which CUDA refuses further work in the context (a fault inside a kernel, a
// hardware error): everything but these leaves the context usable.
bool IsSticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
      return true;
    default:
      return false;
  }
}
#endif

int PinnedClass(size_t bytes) {
  int c = 12;  // 4 KiB minimum
  while ((size_t(1) << c) < bytes) ++c;
  return c;
}
constexpr size_t kPinnedCap = size_t(128) << 20;  // page-locked staging per context, at most

// FA_PROFILE_HOST=1 (development): where a queued launch and a host read spend their time; printed
// at exit (each context's queue figures added at its shutdown).
struct QueueProfile {
  bool on = [] {
    const char* e = getenv("FA_PROFILE_HOST");
    return e != nullptr && e[0] == '1';
  }();
  std::mutex mu;  // contexts of several devices / threads update these
  double wait_us = 0, run_us = 0, flush_us = 0, poll_us = 0;
  long launches = 0, by_js = 0, flushes = 0, reads = 0;
  void Add(const LaunchQueue::Stats& q) {
    std::lock_guard<std::mutex> lock(mu);
    wait_us += q.wait_us, run_us += q.run_us, flush_us += q.flush_us;
    launches += q.launches, by_js += q.by_flush, flushes += q.flushes;
  }
  ~QueueProfile() {
    if (!on || launches + reads == 0) return;
    fprintf(stderr, "flash-attention-node queue profile: %ld launches (%ld issued by the JS thread), %.2f us queued, %.2f us issuing each; "
            "%ld flushes with work queued, %.2f us each; %ld waits on an event, %.2f us polling each\n",
            launches, by_js, launches ? wait_us / launches : 0, launches ? run_us / launches : 0, flushes,
            flushes ? flush_us / flushes : 0, reads, reads ? poll_us / reads : 0);
  }
};
QueueProfile g_qprof;

}  // namespace

double NowUs() { return LaunchQueue::NowUs(); }

DeviceContext* DeviceContext::Find(Napi::Env env, int device) {
  EnvContexts* e = ContextsFor(env, false);
  if (e == nullptr) return nullptr;
  auto it = e->contexts.find(device);
  return it == e->contexts.end() ? nullptr : it->second;
}

DeviceContext* DeviceContext::Get(Napi::Env env, int device) {
  EnvContexts* e = ContextsFor(env, true);
  auto it = e->contexts.find(device);
  if (it != e->contexts.end()) return it->second;
  auto* c = new DeviceContext(env, device);
  e->contexts[device] = c;
  return c;
}

DeviceContext::DeviceContext(Napi::Env env, int device) : device_(device) {
#ifdef FA_WITH_CUDA
  cudaError_t e = cudaSetDevice(device);
  cudaStream_t s = nullptr, cs = nullptr;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  cudaMemPool_t pool = nullptr;
  if (e == cudaSuccess) e = cudaDeviceGetDefaultMemPool(&pool, device);
  if (e == cudaSuccess) {
    // Keep freed blocks in the pool instead of returning them to the driver at every
    // synchronisation: steady-state calls then allocate without cudaMalloc / cudaFree.
    // emptyCache() hands them back.
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  if (e != cudaSuccess) {
    const std::string msg = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) +
                            " (setting up cuda:" + std::to_string(device) + ")";
    cudaGetLastError();
    if (s) cudaStreamDestroy(s);
    if (cs) cudaStreamDestroy(cs);
    throw Napi::Error::New(env, msg);
  }
  stream_ = s;
  copy_stream_ = cs;
  pool_ = pool;
#else
  throw Napi::Error::New(env, "flash-attention-node was built without CUDA");
#endif
  env_ = env;
  tsfn_ = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}),
                                        "flash-attention-node:cuda", 0, 1);
  tsfn_.Unref(env);
  waiter_ = std::thread([this] { WaiterLoop(); });
  const char* lt = getenv("FA_LAUNCH_THREAD");
  if (!(lt != nullptr && lt[0] == '0')) {
    const char* sp = getenv("FA_LAUNCH_SPIN_US");  // comparisons
    queue_ = std::make_unique<LaunchQueue>(sp != nullptr ? atoi(sp) : kLaunchSpinMicros, [device] {
#ifdef FA_WITH_CUDA
      cudaSetDevice(device);
#endif
    }, g_qprof.on);
  }
}

std::string DeviceContext::Submit(Launch launch, bool call) {
  enqueues_.fetch_add(1, std::memory_order_relaxed);
  // FA_TEST_FAIL_LAUNCH=n (tests): the n-th call's launch fails with a non-sticky CUDA error, to
  // test how a failed launch is reported (at once here, at the next wait through the launcher).
  static const long fail_at = [] {
    const char* e = getenv("FA_TEST_FAIL_LAUNCH");
    return e != nullptr ? atol(e) : 0L;
  }();
  if (call && fail_at > 0 && ++calls_submitted_ == fail_at) {
    // (the launch itself still runs: what it owns, such as a staged copy, is issued as usual)
    launch = [inner = std::move(launch)](int* code) -> std::string {
      (void)inner(code);
#ifdef FA_WITH_CUDA
      *code = static_cast<int>(cudaErrorInvalidValue);
#endif
      return "cudaErrorInvalidValue: launch failure injected by FA_TEST_FAIL_LAUNCH";
    };
  }
  // A call made while nothing is queued, right after the JS thread waited for the GPU or while the
  // launcher sleeps, finds the GPU idle: issuing it here reaches the GPU soonest (no hand-off, and
  // the driver's state stays in this core's cache); a call followed by a read at once (the round
  // trip) measured 32-38 us through the launcher against 28-29 us issued here. Calls that follow it
  // before the next wait go to the launcher, which is woken for them.
  const bool here = queue_ == nullptr || (call && !queue_->Pending() && (idle_hint_ || queue_->Sleeping()));
  if (call) idle_hint_ = false;
  MakeCurrent();  // (also for Push: a full ring is issued here)
  if (!here) {
    queue_->Push(std::move(launch));
    return "";
  }
  int code = 0;
  std::string err = LaunchQueue::Issue(launch, &code);
  if (!err.empty() && code != 0) Error(code, "after a failed launch");  // records a sticky error
  if (queue_ != nullptr && queue_->Sleeping()) queue_->Wake(true);
  return err;
}

void DeviceContext::Flush() {
  if (queue_ == nullptr || !queue_->Pending()) return;
  MakeCurrent();
  queue_->Flush();
}

std::string DeviceContext::TakeLaunchError() {
  if (queue_ == nullptr) return "";
  int code = 0;
  std::string err = queue_->TakeError(&code);
  if (!err.empty() && code != 0) Error(code, "after a failed launch");  // records a sticky error
  return err;
}

std::string DeviceContext::Unusable() const {
  if (shut_down_) return "cuda:" + std::to_string(device_) + " was shut down with its environment";
  return sticky_;
}

void DeviceContext::MakeCurrent() const {
#ifdef FA_WITH_CUDA
  thread_local int current = -1;
  if (current != device_) {
    cudaSetDevice(device_);
    current = device_;
  }
#endif
}

std::string DeviceContext::Error(int code, const std::string& what) {
#ifdef FA_WITH_CUDA
  const cudaError_t e = static_cast<cudaError_t>(code);
  std::string msg = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " (" + what + ")";
  if (IsSticky(e)) {
    if (sticky_.empty())
      sticky_ = "cuda:" + std::to_string(device_) + " is unusable after a failure in queued work: " + msg;
  } else {
    cudaGetLastError();  // clear a non-sticky error so it is not blamed on a later call
  }
  return msg;
#else
  (void)code;
  return what;
#endif
}

std::string DeviceContext::Alloc(size_t bytes, void** ptr, bool cacheable) {
  *ptr = nullptr;
#ifdef FA_WITH_CUDA
  if (!sticky_.empty()) return sticky_;
  const size_t n = ((bytes ? bytes : 1) + 255) & ~size_t(255);
  if (cacheable) {
    auto it = cache_.find(n);
    if (it != cache_.end() && !it->second.empty()) {
      *ptr = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= n;
      return "";
    }
  }
  MakeCurrent();
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  cudaError_t e = cudaMallocAsync(ptr, n, s);
  if (e == cudaErrorMemoryAllocation) {
    // The pool may hold freed blocks that are too fragmented for this size: let the queued work
    // finish, hand every unused block back to the driver and try once more.
    cudaGetLastError();
    ReleaseCache();
    Flush();
    cudaStreamSynchronize(s);
    cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(pool_), 0);
    e = cudaMallocAsync(ptr, n, s);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(pool_), 0);  // don't keep what we could not use
    }
  }
  if (e != cudaSuccess) {
    *ptr = nullptr;
    return Error(e, "allocating " + std::to_string(bytes) + " bytes on cuda:" + std::to_string(device_));
  }
  if (cacheable && n <= kCacheBlock) sizes_[*ptr] = n;
  return "";
#else
  (void)bytes, (void)cacheable;
  return "built without CUDA";
#endif
}

void DeviceContext::FreeAsync(void* ptr) {
#ifdef FA_WITH_CUDA
  if (ptr == nullptr || shut_down_) return;
  auto it = sizes_.find(ptr);
  if (it != sizes_.end() && cached_bytes_ + it->second <= kCacheTotal) {
    cache_[it->second].push_back(ptr);
    cached_bytes_ += it->second;
    return;
  }
  if (it != sizes_.end()) sizes_.erase(it);
  // Behind the queued launches that may still use the block (at once with the launcher off).
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  Submit([ptr, s](int*) -> std::string {
    if (cudaFreeAsync(ptr, s) != cudaSuccess) cudaGetLastError();
    return "";
  }, /*call=*/false);
#else
  (void)ptr;
#endif
}

void DeviceContext::ReleaseCache() {
#ifdef FA_WITH_CUDA
  if (cached_bytes_ == 0) return;
  Flush();  // the frees below come after every queued launch
  MakeCurrent();
  for (auto& kv : cache_) {
    for (void* p : kv.second) {
      sizes_.erase(p);
      if (cudaFreeAsync(p, static_cast<cudaStream_t>(stream_)) != cudaSuccess) cudaGetLastError();
    }
    kv.second.clear();
  }
  cached_bytes_ = 0;
#endif
}

void DeviceContext::LinkAlloc(DevAlloc* a) {
  a->prev = nullptr;
  a->next = live_;
  if (live_) live_->prev = a;
  live_ = a;
}
void DeviceContext::UnlinkAlloc(DevAlloc* a) {
  if (a->prev) a->prev->next = a->next;
  else if (live_ == a) live_ = a->next;
  if (a->next) a->next->prev = a->prev;
  a->prev = a->next = nullptr;
}

Napi::Value DeviceContext::Wrap(Napi::Env env, void* ptr, size_t bytes) {
  auto* a = new DevAlloc();
  a->ctx = this;
  a->ptr = ptr;
  a->bytes = bytes;
  LinkAlloc(a);
  napi_value ext;
  napi_status st = napi_create_external(
      env, a,
      [](napi_env e, void* data, void*) {
        auto* al = static_cast<DevAlloc*>(data);
        if (al->ptr != nullptr) Release(Napi::Env(e), al);
        delete al;
      },
      nullptr, &ext);
  if (st != napi_ok) {
    UnlinkAlloc(a);
    FreeAsync(ptr);
    delete a;
    throw Napi::Error::New(env, "internal: cannot create a device handle");
  }
  napi_type_tag_object(env, ext, &kHandleTag);
  TrackDeviceBytes(env, static_cast<int64_t>(bytes));
  return Napi::Value(env, ext);
}

namespace {
// The DevAlloc behind a handle of ours, live or freed; nullptr for any other value.
DevAlloc* HandleData(napi_env env, napi_value v) {
  napi_valuetype t;
  if (napi_typeof(env, v, &t) != napi_ok || t != napi_external) return nullptr;
  bool ok = false;
  if (napi_check_object_type_tag(env, v, &kHandleTag, &ok) != napi_ok || !ok) return nullptr;
  void* data = nullptr;
  if (napi_get_value_external(env, v, &data) != napi_ok) return nullptr;
  return static_cast<DevAlloc*>(data);
}
}  // namespace

DevAlloc* DeviceContext::Unwrap(Napi::Env env, Napi::Value v) {
  DevAlloc* a = HandleData(env, v);
  return a != nullptr && a->ptr != nullptr ? a : nullptr;
}

DevAlloc* DeviceContext::UnwrapSpare(Napi::Env env, Napi::Value v) {
  DevAlloc* a = HandleData(env, v);
  return a != nullptr && a->ptr == nullptr ? a : nullptr;
}

// A freed handle taken up again: what Wrap does, minus the External and its finalizer (a new
// External with a finalizer, and its collection later, cost ~0.7-0.9 us per output on a CPU of
// this class: more than the rest of the binding's part of a small call).
void DeviceContext::Refill(Napi::Env env, DevAlloc* a, void* ptr, size_t bytes) {
  a->ctx = this;
  a->ptr = ptr;
  a->bytes = bytes;
  LinkAlloc(a);
  TrackDeviceBytes(env, static_cast<int64_t>(bytes));
}

void DeviceContext::Release(Napi::Env env, DevAlloc* a) {
  if (a == nullptr || a->ptr == nullptr) return;
  DeviceContext* c = a->ctx;
  if (!c->shut_down_) {
    c->FreeAsync(a->ptr);
    c->UnlinkAlloc(a);
  }
  a->ptr = nullptr;
  TrackDeviceBytes(env, -static_cast<int64_t>(a->bytes));
}

void DeviceContext::Enqueue(Work work, Done done) {
  if (pending_++ == 0) tsfn_.Ref(Napi::Env(env_));
  auto* it = new Item{std::move(work), std::move(done), ""};
  {
    std::lock_guard<std::mutex> lock(mu_);
    todo_.push_back(it);
  }
  cv_.notify_one();
}

void DeviceContext::WaiterLoop() {
#ifdef FA_WITH_CUDA
  cudaSetDevice(device_);
#endif
  for (;;) {
    Item* it = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !todo_.empty(); });
      if (todo_.empty()) break;  // stopping and drained
      it = todo_.front();
      todo_.pop_front();
    }
    it->result = it->work ? it->work() : "";
    napi_status st = tsfn_.NonBlockingCall(it, [this](Napi::Env env, Napi::Function, Item* item) {
      std::unique_ptr<Item> owned(item);
      if (env != nullptr) {
        // (as CpuWorker::OnWorkComplete: a JS thread that is going away cannot settle the Promise,
        // and node-addon-api's exception for that must not leave this callback)
        try {
          Napi::HandleScope scope(env);
          item->done(env, item->result);
        } catch (...) {
        }
        try {
          if (--pending_ == 0) tsfn_.Unref(env);
        } catch (...) {
        }
      }
    });
    // The environment is going away: the item (which may hold JS references) is leaked rather than
    // destroyed off the JS thread.
    (void)st;
  }
}

void DeviceContext::WhenReached(const std::string& what, Done done, Napi::Env env) {
#ifdef FA_WITH_CUDA
  if (!Unusable().empty()) return done(env, Unusable());
  MakeCurrent();
  Flush();
  // A failed queued launch is reported once the GPU has reached this point like any other wait:
  // the caller may have queued work (a copy into a staging buffer) that must be done first.
  const std::string failed = TakeLaunchError();
  if (!failed.empty()) {
    Done inner = std::move(done);
    done = [inner, failed](Napi::Env e2, const std::string& r) { inner(e2, r.empty() ? failed : r); };
  }
  idle_hint_ = true;  // the GPU will be idle when this wait ends (see Submit)
  const double tp = g_qprof.on ? NowUs() : 0;
  cudaEvent_t ev = nullptr;
  cudaError_t e = cudaSuccess;
  if (!wait_events_.empty()) {
    ev = static_cast<cudaEvent_t>(wait_events_.back());
    wait_events_.pop_back();
  } else {
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  }
  if (e == cudaSuccess) e = cudaEventRecord(ev, static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) {
    if (ev) cudaEventDestroy(ev);
    return done(env, Error(e, what));
  }
  // Poll briefly on the JS thread: a small read right after a small call is done within
  // microseconds, and settling here saves the hand-off to the waiter thread and back.
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  for (;;) {
    e = cudaEventQuery(ev);
    if (e != cudaErrorNotReady || std::chrono::steady_clock::now() >= until) break;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  if (g_qprof.on) {
    std::lock_guard<std::mutex> lock(g_qprof.mu);
    g_qprof.poll_us += NowUs() - tp, ++g_qprof.reads;
  }
  if (e != cudaErrorNotReady) {
    if (e == cudaSuccess && wait_events_.size() < 8) wait_events_.push_back(ev);
    else cudaEventDestroy(ev);
    return done(env, e == cudaSuccess ? "" : Error(e, what));
  }
  cudaGetLastError();
  Enqueue(
      [ev]() -> std::string {
        const cudaError_t r = cudaEventSynchronize(ev);
        cudaEventDestroy(ev);
        return r == cudaSuccess ? "" : std::string("#") + std::to_string(static_cast<int>(r));
      },
      [this, what, done](Napi::Env env2, const std::string& r) {
        // The waiter reports a CUDA error as "#<code>": turned into the message (and recorded as
        // sticky) here, on the JS thread, which owns the context's state.
        if (!r.empty() && r[0] == '#') return done(env2, Error(std::stoi(r.substr(1)), what));
        done(env2, r);
      });
#else
  (void)what;
  done(env, "built without CUDA");
#endif
}

Pinned* DeviceContext::TakePinned(size_t bytes) {
#ifdef FA_WITH_CUDA
  if (bytes > kPinnedMax) return nullptr;
  // Uploads whose copies have completed free their buffers (oldest first).
  while (!pinned_busy_.empty() && pinned_busy_.front()->recorded.load(std::memory_order_acquire) &&
         cudaEventQuery(static_cast<cudaEvent_t>(pinned_busy_.front()->event)) != cudaErrorNotReady) {
    Pinned* p = pinned_busy_.front();
    pinned_busy_.pop_front();
    pinned_free_[p->cls].push_back(p);
  }
  cudaGetLastError();
  const int cls = PinnedClass(bytes);
  if (!pinned_free_[cls].empty()) {
    Pinned* p = pinned_free_[cls].back();
    pinned_free_[cls].pop_back();
    return p;
  }
  const size_t cap = size_t(1) << cls;
  if (pinned_total_ + cap > kPinnedCap) return nullptr;
  MakeCurrent();
  void* host = nullptr;
  if (cudaHostAlloc(&host, cap, cudaHostAllocDefault) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  cudaEvent_t ev = nullptr;
  if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    cudaFreeHost(host);
    return nullptr;
  }
  auto* p = new Pinned();
  p->ptr = host;
  p->bytes = cap;
  p->event = ev;
  p->cls = cls;
  pinned_total_ += cap;
  return p;
#else
  (void)bytes;
  return nullptr;
#endif
}

#ifdef FA_WITH_CUDA
// Frees the index slots' buffers and events (those that exist) and the index stream, and empties
// `slots` (a failed set-up, or Shutdown once the index stream is drained).
static void FreeIndexSlots(std::vector<IndexSlot>& slots, void* stream) {
  for (IndexSlot& sl : slots) {
    if (sl.dev) cudaFree(sl.dev);
    if (sl.copied) cudaEventDestroy(static_cast<cudaEvent_t>(sl.copied));
    if (sl.done) cudaEventDestroy(static_cast<cudaEvent_t>(sl.done));
  }
  slots.clear();
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
}
#endif

IndexSlot* DeviceContext::TakeIndexSlot(size_t bytes) {
#ifdef FA_WITH_CUDA
  if (index_mode_ < 0) {
    const char* e = getenv("FA_INDEX_STREAM");
    index_mode_ = e != nullptr && e[0] == '0' ? 0 : 1;  // on unless FA_INDEX_STREAM=0
  }
  if (index_mode_ != 1 || bytes > kIndexSlotBytes) return nullptr;
  if (index_slots_.empty()) {
    MakeCurrent();
    cudaStream_t is = nullptr;
    bool ok = cudaStreamCreateWithFlags(&is, cudaStreamNonBlocking) == cudaSuccess;
    std::vector<IndexSlot> slots(kIndexSlots);
    for (IndexSlot& sl : slots) {
      cudaEvent_t copied = nullptr, done = nullptr;
      ok = ok && cudaMalloc(&sl.dev, kIndexSlotBytes) == cudaSuccess;
      ok = ok && cudaEventCreateWithFlags(&copied, cudaEventDisableTiming) == cudaSuccess;
      sl.copied = copied;
      ok = ok && cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess;
      sl.done = done;
    }
    if (!ok) {
      FreeIndexSlots(slots, is);
      cudaGetLastError();
      index_mode_ = 0;
      return nullptr;
    }
    index_stream_ = is;
    index_slots_ = std::move(slots);
  }
  return &index_slots_[index_next_++ % index_slots_.size()];
#else
  (void)bytes;
  return nullptr;
#endif
}

void DeviceContext::ReturnPinned(Pinned* p) {
  if (p) pinned_free_[p->cls].push_back(p);
}

void DeviceContext::RetirePinnedQueued(Pinned* p) {
  if (p == nullptr) return;
  p->recorded.store(false, std::memory_order_relaxed);
  pinned_busy_.push_back(p);
}

void DeviceContext::RetirePinned(Pinned* p) {
#ifdef FA_WITH_CUDA
  if (p == nullptr) return;
  cudaEventRecord(static_cast<cudaEvent_t>(p->event), static_cast<cudaStream_t>(stream_));
  pinned_busy_.push_back(p);
#else
  (void)p;
#endif
}

void DeviceContext::MemoryStats(double* allocated, double* reserved, double* peak) {
  *allocated = *reserved = *peak = 0;
#ifdef FA_WITH_CUDA
  Flush();  // queued frees
  cudaMemPool_t pool = static_cast<cudaMemPool_t>(pool_);
  uint64_t v = 0;
  // Cached free blocks (Alloc / FreeAsync) are in use by the pool but not by any tensor.
  if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) == cudaSuccess)
    *allocated = double(v) - double(cached_bytes_);
  if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v) == cudaSuccess) *reserved = double(v);
  if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &v) == cudaSuccess) *peak = double(v);
  cudaGetLastError();
#endif
}

void DeviceContext::ResetPeak() {
#ifdef FA_WITH_CUDA
  uint64_t zero = 0;
  cudaMemPoolSetAttribute(static_cast<cudaMemPool_t>(pool_), cudaMemPoolAttrUsedMemHigh, &zero);
  cudaGetLastError();
#endif
}

std::string DeviceContext::Trim() {
#ifdef FA_WITH_CUDA
  cudaSetDevice(device_);
  const cudaError_t e = cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(pool_), 0);
  return e == cudaSuccess ? "" : std::string("#") + std::to_string(static_cast<int>(e));
#else
  return "";
#endif
}

void DeviceContext::FreePinnedCache() {
#ifdef FA_WITH_CUDA
  for (auto& list : pinned_free_) {
    for (Pinned* p : list) {
      cudaFreeHost(p->ptr);
      cudaEventDestroy(static_cast<cudaEvent_t>(p->event));
      pinned_total_ -= p->bytes;
      delete p;
    }
    list.clear();
  }
  cudaGetLastError();
#endif
}

void DeviceContext::Shutdown() {
  if (shut_down_) return;
  if (queue_ != nullptr) {  // issues what is queued, then stops
    MakeCurrent();
    queue_->Stop();
    if (g_qprof.on) g_qprof.Add(queue_->stats());
    queue_.reset();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (waiter_.joinable()) waiter_.join();
#ifdef FA_WITH_CUDA
  cudaSetDevice(device_);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  ReleaseCache();
  // Free what users never disposed and the garbage collector never collected.
  for (DevAlloc* a = live_; a != nullptr;) {
    DevAlloc* next = a->next;
    if (a->ptr) cudaFreeAsync(a->ptr, s);
    a->ptr = nullptr;
    a->prev = a->next = nullptr;
    a = next;
  }
  live_ = nullptr;
  cudaStreamSynchronize(s);
  cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_));
  if (index_stream_ != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(index_stream_));
    FreeIndexSlots(index_slots_, index_stream_);
    index_stream_ = nullptr;
  }
  while (!pinned_busy_.empty()) {
    pinned_free_[pinned_busy_.front()->cls].push_back(pinned_busy_.front());
    pinned_busy_.pop_front();
  }
  FreePinnedCache();
  for (void* ev : wait_events_) cudaEventDestroy(static_cast<cudaEvent_t>(ev));
  wait_events_.clear();
  cudaStreamDestroy(s);
  cudaStreamDestroy(static_cast<cudaStream_t>(copy_stream_));
  cudaMemPoolTrimTo(static_cast<cudaMemPool_t>(pool_), 0);
  cudaGetLastError();
#endif
  shut_down_ = true;
  tsfn_.Release();
}

}  // namespace fab
