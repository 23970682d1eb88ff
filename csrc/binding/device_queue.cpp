#include "binding/device_queue.h"

#include <chrono>
#include <map>
#include <thread>

#ifdef FA_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fab {

#ifdef FA_WITH_CUDA
static std::string CudaMessage(cudaError_t e, const std::string& what) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) + " (" + what + ")";
}
#endif

namespace {
// Waits up to 100 us for `count` to become non-zero, without sleeping.
void SpinUntilQueued(const std::atomic<int>& count) {
  if (count.load(std::memory_order_acquire) != 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
  while (count.load(std::memory_order_acquire) == 0 && std::chrono::steady_clock::now() < until) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }
}

struct EnvQueues {
  std::map<int, std::unique_ptr<DeviceQueue>> queues;
};
EnvQueues* QueuesFor(Napi::Env env) {
  static thread_local std::map<napi_env, EnvQueues*> per_env;  // JS threads only
  auto it = per_env.find(env);
  if (it != per_env.end()) return it->second;
  auto* q = new EnvQueues();
  per_env[env] = q;
  napi_env raw = env;
  // The queues are shut down but not deleted: finalizers of DeviceBuffers that run after the cleanup
  // hooks still call Free(), which then does nothing.
  env.AddCleanupHook([q, raw]() {
    for (auto& kv : q->queues) kv.second->Shutdown();
    per_env.erase(raw);
  });
  return q;
}
}  // namespace

DeviceQueue* DeviceQueue::Get(Napi::Env env, int device) {
  EnvQueues* qs = QueuesFor(env);
  auto& slot = qs->queues[device];
  if (!slot) slot.reset(new DeviceQueue(env, device));
  return slot.get();
}

DeviceQueue::DeviceQueue(Napi::Env env, int device) : device_(device) {
  tsfn_ = Napi::ThreadSafeFunction::New(env, Napi::Function::New(env, [](const Napi::CallbackInfo&) {}),
                                        "flash-attention-node:cuda", 0, 1);
  tsfn_.Unref(env);
  submit_thread_ = std::thread([this] { SubmitLoop(); });
  complete_thread_ = std::thread([this] { CompleteLoop(); });
}

DeviceQueue::~DeviceQueue() { Shutdown(); }

void DeviceQueue::Post(Napi::Env env, std::unique_ptr<Job> job) {
  if (in_flight_++ == 0) tsfn_.Ref(env);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (live_.size() >= prune_at_) {  // drop entries whose buffers are gone
      std::vector<std::weak_ptr<Allocation>> keep;
      for (auto& w : live_) if (!w.expired()) keep.push_back(w);
      live_.swap(keep);
      prune_at_ = 2 * live_.size() + 1024;
    }
    for (auto& a : job->allocate) live_.push_back(a);
    Pending p;
    p.job = std::move(job);
    to_submit_.push_back(std::move(p));
    submit_queued_.fetch_add(1, std::memory_order_release);
  }
  submit_cv_.notify_one();
}

void DeviceQueue::Free(AllocationPtr a) {
  if (!a) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (submit_done_) return;  // shut down: Shutdown() already freed everything
    Pending p;
    p.to_free = std::move(a);
    to_submit_.push_back(std::move(p));
    submit_queued_.fetch_add(1, std::memory_order_release);
  }
  submit_cv_.notify_one();
}

void DeviceQueue::SubmitLoop() {
#ifdef FA_WITH_CUDA
  cudaError_t e = cudaSetDevice(device_);
  cudaStream_t stream = nullptr;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) init_error_ = CudaMessage(e, "creating the device stream");
  stream_ = stream;
  // Keep freed blocks in the device's stream-ordered pool instead of returning them to the driver
  // at every synchronisation: steady-state calls then allocate without cudaMalloc/cudaFree.
  cudaMemPool_t pool = nullptr;
  if (e == cudaSuccess && cudaDeviceGetDefaultMemPool(&pool, device_) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  cudaGetLastError();
#else
  init_error_ = "flash-attention-node was built without CUDA";
#endif
  for (;;) {
    Pending p;
    SpinUntilQueued(submit_queued_);
    {
      std::unique_lock<std::mutex> lock(mu_);
      submit_cv_.wait(lock, [this] { return stopping_ || !to_submit_.empty(); });
      if (to_submit_.empty()) break;  // stopping and drained
      p = std::move(to_submit_.front());
      to_submit_.pop_front();
      submit_queued_.fetch_sub(1, std::memory_order_relaxed);
    }
#ifdef FA_WITH_CUDA
    if (p.to_free) {
      if (p.to_free->ptr && init_error_.empty()) cudaFreeAsync(p.to_free->ptr, stream);
      p.to_free->ptr = nullptr;
      continue;
    }
    std::string err = init_error_;
    if (err.empty()) {
      for (auto& a : p.job->allocate) {
        void* ptr = nullptr;
        cudaError_t ae = cudaMallocAsync(&ptr, a->bytes ? a->bytes : 1, stream);
        if (ae == cudaErrorMemoryAllocation && pool) {
          // The pool may hold freed blocks: give them back to the driver and try once more.
          cudaGetLastError();
          cudaStreamSynchronize(stream);
          cudaMemPoolTrimTo(pool, 0);
          ae = cudaMallocAsync(&ptr, a->bytes ? a->bytes : 1, stream);
        }
        if (ae != cudaSuccess) {
          cudaGetLastError();  // clear the non-sticky allocation error
          err = CudaMessage(ae, "allocating " + std::to_string(a->bytes) + " bytes on cuda:" +
                                    std::to_string(device_));
          a->error = err;
          break;
        }
        a->ptr = ptr;
      }
    }
    if (err.empty()) err = p.job->Submit(stream);
    if (err.empty()) {
      cudaEvent_t ev = nullptr;
      cudaError_t ee = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
      if (ee == cudaSuccess) ee = cudaEventRecord(ev, stream);
      if (ee != cudaSuccess) err = CudaMessage(ee, "recording the completion event");
      p.event = ev;
    }
    if (!err.empty()) {
      for (auto& a : p.job->allocate) {
        if (a->ptr) cudaFreeAsync(a->ptr, stream);
        a->ptr = nullptr;
      }
    }
    p.error = err;
#else
    if (p.to_free) continue;
    p.error = init_error_;
#endif
    {
      std::lock_guard<std::mutex> lock(mu_);
      to_complete_.push_back(std::move(p));
      complete_queued_.fetch_add(1, std::memory_order_release);
    }
    complete_cv_.notify_one();
  }
  std::lock_guard<std::mutex> lock(mu_);
  submit_done_ = true;
  complete_cv_.notify_one();
}

void DeviceQueue::CompleteLoop() {
#ifdef FA_WITH_CUDA
  cudaSetDevice(device_);
#endif
  for (;;) {
    Pending p;
    bool stopping;
    SpinUntilQueued(complete_queued_);
    {
      std::unique_lock<std::mutex> lock(mu_);
      complete_cv_.wait(lock, [this] { return submit_done_ || !to_complete_.empty(); });
      if (to_complete_.empty()) break;
      p = std::move(to_complete_.front());
      to_complete_.pop_front();
      complete_queued_.fetch_sub(1, std::memory_order_relaxed);
      stopping = stopping_;
    }
#ifdef FA_WITH_CUDA
    if (p.event) {
      cudaError_t e = cudaEventSynchronize(static_cast<cudaEvent_t>(p.event));
      if (e != cudaSuccess && p.error.empty()) p.error = CudaMessage(e, "running on the GPU");
      cudaEventDestroy(static_cast<cudaEvent_t>(p.event));
      p.event = nullptr;
    }
#endif
    if (p.error.empty() && p.job) p.job->Finished();
    if (stopping) {
      std::lock_guard<std::mutex> lock(mu_);
      dead_.push_back(std::move(p));
      continue;
    }
    auto* heap = new Pending(std::move(p));
    napi_status st = tsfn_.BlockingCall(heap, [this](Napi::Env env, Napi::Function, Pending* done) {
      std::unique_ptr<Pending> owned(done);
      if (env != nullptr) {
        Napi::HandleScope scope(env);
        owned->job->Complete(env, owned->error);
        if (--in_flight_ == 0) tsfn_.Unref(env);
      }
    });
    if (st != napi_ok) {  // environment is going away
      std::lock_guard<std::mutex> lock(mu_);
      dead_.push_back(std::move(*heap));
      delete heap;
    }
  }
}

void DeviceQueue::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  submit_cv_.notify_all();
  complete_cv_.notify_all();
  if (submit_thread_.joinable()) submit_thread_.join();
  if (complete_thread_.joinable()) complete_thread_.join();
#ifdef FA_WITH_CUDA
  // Free what users never disposed and the GC never collected.
  cudaSetDevice(device_);
  for (auto& w : live_) {
    if (auto a = w.lock()) {
      if (a->ptr) cudaFreeAsync(a->ptr, static_cast<cudaStream_t>(stream_));
      a->ptr = nullptr;
    }
  }
  if (stream_) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
    stream_ = nullptr;
  }
#endif
  dead_.clear();  // releases the JS references those jobs held (still on the JS thread)
  tsfn_.Release();
}

}  // namespace fab
