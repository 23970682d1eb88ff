// DeviceContext: the binding's state for one CUDA device in one Node.js environment (the main
// thread, or one worker thread).
//
// Execution model (stream-ordered, as PyTorch's): every CUDA call the addon makes for a device is
// issued from the JS thread, in call order, on the context's one stream: allocations
// (cudaMallocAsync from the device's pool), copies, kernel launches and frees. Issuing returns at
// once, so an attention call's Promise settles as soon as its kernels are queued, and its outputs
// can feed the next call straight away; the GPU runs the queue with no gap between kernels.
// Freeing a tensor is a cudaFreeAsync on the same stream: the memory is reused only after the
// work queued before the free, so dispose() while queued work still reads a tensor is safe.
//
// Kernel launches leave the JS thread too (the launcher thread): a CUDA launch costs the host 4-5 us
// on a virtualised H200 host, more than the rest of a small call. So an attention call checks its
// arguments, takes its outputs from the pool and wraps them as handles on the JS thread, then hands
// the core call (the launch, with its scratch allocations) to the context's launcher thread
// (launch_queue.h, tested under ThreadSanitizer on a CPU), which issues such calls one at a time in
// the order they were submitted. Everything else the JS thread puts on the stream goes through
// stream(), which first flushes the launcher's queue (it runs what is left itself, on the JS
// thread, so nothing waits for a thread to wake up): the stream thus sees
// the work in call order, exactly as if the JS thread had issued all of it. Allocations stay on the
// JS thread (an allocation may enter the stream ahead of queued launches: the block it returns was
// freed after every use of it, and the launches that follow it are later calls'); frees that reach
// cudaFreeAsync go through the launcher's queue, behind the launches that may still use the block.
// A launch that fails on the launcher thread is reported like a failure inside queued work, at the
// next synchronize() or host read. FA_LAUNCH_THREAD=0 launches on the JS thread instead (the call
// then throws at once when its launch fails).
//
// Only waiting leaves the JS thread: a host read, synchronize() and emptyCache() record an event;
// the JS thread polls it for a short while (kSpinMicros: a small read right after a small call
// completes without any thread hand-off), then hands it to the context's waiter thread, which
// blocks on it and settles the Promise through a thread-safe function. Large host transfers
// (over kPinnedMax bytes) also run on the waiter thread, against a second stream ordered by events,
// so the JS thread never copies or waits on them.
//
// Errors: a call whose outputs cannot be allocated (out of memory after the pool was trimmed and
// the allocation retried) throws at once, with the CUDA error name, and leaves the context usable;
// so does a launch issued on the JS thread that fails. A launch that fails on the launcher thread
// (its scratch allocation, a bad configuration) is reported at the next synchronize() or host read.
// A failure inside queued work (a kernel fault) is reported by the next event that covers it, i.e.
// at the next synchronize() or host read; CUDA makes such errors sticky, so the context then
// records it and every later call on the device rejects with it.
#pragma once

#include <napi.h>

#include "binding/launch_queue.h"

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace fab {

// CUDA devices visible to this process (read once; 0 without CUDA or without a driver).
int DeviceCount();

// Steady-clock microseconds (the FA_PROFILE_HOST profiles).
double NowUs();

class DeviceContext;

// One device allocation behind a JS handle (a type-tagged napi External). Freed by free() from JS,
// by the handle's finalizer, or by the context's shutdown, whichever comes first.
struct DevAlloc {
  DeviceContext* ctx = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
  DevAlloc* prev = nullptr;  // the context's list of live allocations
  DevAlloc* next = nullptr;
};

// A device buffer that one call's host index arrays are copied into on the index stream
// (the default; FA_INDEX_STREAM=0 turns it off: DeviceContext::TakeIndexSlot).
struct IndexSlot {
  void* dev = nullptr;
  void* copied = nullptr;  // cudaEvent_t: recorded on the index stream after the copy into dev
  void* done = nullptr;    // cudaEvent_t: recorded on the stream after the kernels that read dev
};

// A page-locked host buffer for small transfers.
struct Pinned {
  void* ptr = nullptr;
  size_t bytes = 0;  // capacity (a power of two)
  void* event = nullptr;  // cudaEvent_t: recorded after the upload that reads it
  int cls = 0;
  // False while a queued launch is still to issue the copy that reads this buffer and record its
  // event (RetirePinnedQueued); set by whichever thread issues it.
  std::atomic<bool> recorded{true};
};

class DeviceContext {
 public:
  static constexpr size_t kPinnedMax = size_t(4) << 20;  // transfers up to this use pinned staging
  static constexpr int kSpinMicros = 100;
  static constexpr int kLaunchSpinMicros = 200;  // the launcher spins this long for more work

  // The context of `device` in this environment, created on first use. Throws a Napi::Error when
  // the device cannot be set up. JS thread only, like every method below unless noted.
  static DeviceContext* Get(Napi::Env env, int device);
  // Contexts of this environment that exist (for memoryStats of devices never used: none).
  static DeviceContext* Find(Napi::Env env, int device);

  int device() const { return device_; }
  // Every piece of work is queued on the stream through this accessor, which counts the calls:
  // enqueues() then tells whether anything was queued between two points (an over-count is
  // harmless; it only turns off what relies on nothing having been queued).
  // It first flushes the launcher's queue (see above).
  void* stream() {
    Flush();
    enqueues_.fetch_add(1, std::memory_order_relaxed);
    return stream_;
  }
  // The stream handle without a flush or a count: for launches submitted through Submit (they run
  // in submission order) and for the launcher thread itself.
  void* raw_stream() const { return stream_; }

  // A core call to issue on the stream in call order: returns "" on success, else the error message
  // and, in *cuda_code, the CUDA error behind it (0 when none). It must capture only device
  // pointers and values (it may run after the JS objects of the call are gone).
  using Launch = fab::Launch;
  // Counted as one use of the stream. Queues `launch` on the launcher thread and returns "", or runs
  // it here and returns its error message, if any (a CUDA error recorded as by Error()): with the
  // launcher off (FA_LAUNCH_THREAD=0), or for a call that finds the GPU idle (nothing queued, and
  // a wait just ended or the launcher sleeps). `call` false: work that never needs to reach the
  // GPU soon (a free), queued whenever the launcher is on. JS thread.
  std::string Submit(Launch launch, bool call = true);
  // Issues every queued launch before returning (runs them on the calling JS thread). JS thread.
  void Flush();
  // The first failure of a launch issued off the JS thread since the last call, as an Error()
  // message (sticky errors recorded), or "". JS thread.
  std::string TakeLaunchError();
  uint64_t enqueues() const { return enqueues_.load(std::memory_order_relaxed); }
  // The device memory written by the last forward / paged call (its out and lse) and enqueues()
  // right after it: a paged decode call that follows with nothing queued in between, on caches that
  // overlap neither range, may read its caches before the previous kernel ends (fa_fwd_params::
  // decode_early_kv). JS thread.
  struct LastWrites {
    uint64_t after = ~uint64_t(0);
    uintptr_t lo[2] = {0, 0}, hi[2] = {0, 0};
  };
  LastWrites last_attention;

  // "" when the device can take work, else the recorded sticky error (with the device named).
  std::string Unusable() const;
  // Makes this device current on the calling thread (cheap when it already is).
  void MakeCurrent() const;
  // Message for a CUDA error: "<name>: <description> (<what>)"; records it as the sticky error
  // when CUDA reports one of the errors that corrupt the context.
  std::string Error(int cuda_error, const std::string& what);

  // Stream-ordered allocation of `bytes` (>= 1) on the stream. On out-of-memory the pool is trimmed
  // (after the stream drains) and the allocation tried once more. Returns "" or the error message.
  // Blocks of up to kCacheBlock bytes freed with FreeAsync are kept in a small cache keyed by size
  // and handed out again without a CUDA call: every allocation and free of the context is ordered
  // on its one stream, so reuse in call order is exactly what cudaFreeAsync + cudaMallocAsync on
  // that stream would give, minus two driver calls per tensor (a decode step makes many).
  // cacheable = false: a block freed elsewhere (another stream), never cached.
  std::string Alloc(size_t bytes, void** ptr, bool cacheable = true);
  void FreeAsync(void* ptr);
  // Frees the cached blocks (stream-ordered). JS thread.
  void ReleaseCache();
  static constexpr size_t kCacheBlock = size_t(32) << 20;
  static constexpr size_t kCacheTotal = size_t(512) << 20;
  // A new JS handle owning `ptr` (bytes long); the memory is reported to V8 above a threshold.
  Napi::Value Wrap(Napi::Env env, void* ptr, size_t bytes);
  // The allocation behind a handle, or nullptr when `v` is not a live handle.
  static DevAlloc* Unwrap(Napi::Env env, Napi::Value v);
  // A handle of ours whose memory was freed (a spare the JS side keeps for reuse), else nullptr.
  static DevAlloc* UnwrapSpare(Napi::Env env, Napi::Value v);
  // Gives a spare handle `ptr` (bytes long) to own, as Wrap does for a new handle.
  void Refill(Napi::Env env, DevAlloc* spare, void* ptr, size_t bytes);
  // Frees a handle's memory now (stream-ordered). Idempotent.
  static void Release(Napi::Env env, DevAlloc* a);

  // Work finished off the JS thread: `work` runs on the waiter thread (returns "" or an error
  // message), then `done` runs on the JS thread with that result.
  using Work = std::function<std::string()>;
  using Done = std::function<void(Napi::Env, const std::string&)>;
  void Enqueue(Work work, Done done);
  // Records an event on the stream and calls `done` once the GPU reached it: at once when it does
  // within kSpinMicros, else through the waiter thread. `done` gets "" or the error message.
  void WhenReached(const std::string& what, Done done, Napi::Env env);

  // Page-locked staging buffers (JS thread).
  Pinned* TakePinned(size_t bytes);  // nullptr when none can be had (caller takes the large path)
  void ReturnPinned(Pinned* p);      // free for reuse now
  void RetirePinned(Pinned* p);      // reusable once its recorded event completes
  // Reusable once a queued launch has issued the copy that reads it, recorded its event
  // (p->recorded) and that event completed.
  void RetirePinnedQueued(Pinned* p);

  // By default (FA_INDEX_STREAM=0 turns it off; on since the thirty-sixth session, when the whole
  // GPU suite passed with it and the H200 probes favoured it again) a call's host index arrays go
  // to one of kIndexSlots device buffers with a copy on a stream of their own, which the call's
  // stream waits for (an event) instead of holding the copy in its own order; a slot is reused once
  // the kernels of the call before that used it are done (its `done` event, waited for on the index
  // stream). JS thread. nullptr: off, more than kIndexSlotBytes, or the set-up failed (the staged
  // copy on the call's stream then).
  static constexpr int kIndexSlots = 8;
  // 1 MiB each (8 MiB of device memory, allocated at the first host index array): a page table of
  // 64 sequences x 4000 pages fits.
  static constexpr size_t kIndexSlotBytes = size_t(1) << 20;
  IndexSlot* TakeIndexSlot(size_t bytes);
  void* index_stream() const { return index_stream_; }
  // How the calls' host index arrays went to the device so far (JS thread; reported by
  // memoryStats for the tests that check which path a call took): through an index slot, or
  // the staged copy on the call's stream (default, too large for a slot, or no staging buffer).
  void CountIndexUpload(bool slot) { ++(slot ? index_slot_uploads_ : index_staged_uploads_); }
  double index_slot_uploads() const { return double(index_slot_uploads_); }
  double index_staged_uploads() const { return double(index_staged_uploads_); }

  // Pool figures: bytes in use, bytes reserved from the driver, peak in use.
  void MemoryStats(double* allocated, double* reserved, double* peak);
  void ResetPeak();
  // Returns the pool's unused memory to the driver (call once the stream is drained). Thread-safe
  // (runs on the waiter thread, and on the launcher thread in a launch's out-of-memory retry).
  std::string Trim();
  // Frees the page-locked staging buffers not in use (JS thread).
  void FreePinnedCache();
  // The second stream for large host transfers (waiter thread).
  void* copy_stream() const { return copy_stream_; }

  // Drains the stream, frees every live allocation, stops the waiter thread (environment cleanup).
  void Shutdown();
  bool shut_down() const { return shut_down_; }

 private:
  DeviceContext(Napi::Env env, int device);
  void WaiterLoop();
  void LinkAlloc(DevAlloc* a);
  void UnlinkAlloc(DevAlloc* a);

  struct Item {
    Work work;
    Done done;
    std::string result;
  };

  int device_;
  napi_env env_ = nullptr;
  void* stream_ = nullptr;
  void* copy_stream_ = nullptr;
  void* index_stream_ = nullptr;  // FA_INDEX_STREAM=1: created with the slots, at the first host index array
  std::vector<IndexSlot> index_slots_;
  size_t index_next_ = 0;
  int index_mode_ = -1;  // FA_INDEX_STREAM, read on first use
  uint64_t index_slot_uploads_ = 0, index_staged_uploads_ = 0;
  void* pool_ = nullptr;
  std::string sticky_;
  bool shut_down_ = false;
  mutable std::atomic<uint64_t> enqueues_{0};
  DevAlloc* live_ = nullptr;

  std::unordered_map<void*, size_t> sizes_;                // cacheable blocks: their rounded size
  std::unordered_map<size_t, std::vector<void*>> cache_;  // freed blocks by size
  size_t cached_bytes_ = 0;
  std::vector<Pinned*> pinned_free_[32];
  std::deque<Pinned*> pinned_busy_;
  size_t pinned_total_ = 0;

  Napi::ThreadSafeFunction tsfn_;
  int pending_ = 0;  // items enqueued and not yet done (JS thread): keeps the event loop alive
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item*> todo_;
  bool stopping_ = false;
  std::thread waiter_;

  // The launcher thread and its queue (launch_queue.h); null with FA_LAUNCH_THREAD=0 and after
  // Shutdown (Submit then issues everything itself).
  std::unique_ptr<LaunchQueue> queue_;
  bool idle_hint_ = false;    // JS thread: a wait for the GPU ended and no call was made since
  long calls_submitted_ = 0;  // JS thread (FA_TEST_FAIL_LAUNCH)
  std::vector<void*> wait_events_;  // JS thread: cudaEvent_t of WhenReached, for reuse
};

}  // namespace fab
