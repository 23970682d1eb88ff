// One submission queue per CUDA device.
//
// Every CUDA call the addon makes for a device runs on that device's submit thread, in the order the
// JS thread posted the jobs: allocations (stream-ordered, cudaMallocAsync), copies, kernel launches
// and frees all go through it, so a job always sees the effects of the jobs posted before it and the
// JS thread never calls into CUDA or waits on the GPU. After enqueuing its work a job records an
// event; a completion thread waits for the events in order and hands finished jobs back to the JS
// thread through a thread-safe function, where their Promises settle.
#pragma once

#include <napi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fab {

// Device memory owned by a DeviceBuffer (and, while jobs use it, by those jobs). `ptr` is written
// and read only on the device's submit thread.
struct Allocation {
  int device = 0;
  size_t bytes = 0;
  void* ptr = nullptr;
  std::string error;  // set when the stream-ordered allocation failed
};
using AllocationPtr = std::shared_ptr<Allocation>;

struct Job {
  virtual ~Job() = default;
  // Submit thread: enqueue work on `stream`. Return "" on success or an error message that starts
  // with the CUDA error name.
  virtual std::string Submit(void* stream) = 0;
  // Completion thread, after the GPU finished this job's work without error (e.g. read events).
  virtual void Finished() {}
  // JS thread, after the GPU finished (or Submit failed): settle the Promise.
  virtual void Complete(Napi::Env env, const std::string& error) = 0;
  // Allocations this job makes before Submit (outputs); freed again if the job fails.
  std::vector<AllocationPtr> allocate;
};

class DeviceQueue {
 public:
  // Queue for `device` in this environment, created on first use (JS thread only). Queues are
  // per Node environment (main thread, each worker thread) and shut down by its cleanup hook.
  static DeviceQueue* Get(Napi::Env env, int device);
  ~DeviceQueue();
  // Posts a job. JS thread only.
  void Post(Napi::Env env, std::unique_ptr<Job> job);
  // Frees an allocation after all previously posted work (stream-ordered). Any thread.
  void Free(AllocationPtr a);
  // Drains the queue, frees every allocation still alive and stops both threads. JS thread.
  void Shutdown();
  int device() const { return device_; }

 private:
  DeviceQueue(Napi::Env env, int device);
  void SubmitLoop();
  void CompleteLoop();
  void OnDone(Napi::Env env, Job* job, std::string* error);

  struct Pending {
    std::unique_ptr<Job> job;  // null for a free
    AllocationPtr to_free;
    void* event = nullptr;     // cudaEvent_t; null when Submit failed
    std::string error;
  };
  void Register(const AllocationPtr& a);

  int device_;
  void* stream_ = nullptr;
  std::string init_error_;
  Napi::ThreadSafeFunction tsfn_;
  int in_flight_ = 0;  // JS thread only: jobs posted and not yet completed (keeps the loop alive)

  std::mutex mu_;
  std::condition_variable submit_cv_, complete_cv_;
  // Entries in to_submit_ / to_complete_, readable without the mutex: each worker spins on its count
  // for a short while before sleeping on its condition variable, so back-to-back calls skip the
  // futex wake-up (tens of microseconds on some hosts).
  std::atomic<int> submit_queued_{0}, complete_queued_{0};
  std::deque<Pending> to_submit_;
  std::deque<Pending> to_complete_;
  bool stopping_ = false;
  bool submit_done_ = false;
  std::vector<std::weak_ptr<Allocation>> live_;  // every allocation made (for shutdown)
  size_t prune_at_ = 1024;
  std::vector<Pending> dead_;  // finished while shutting down: destroyed on the JS thread
  std::thread submit_thread_, complete_thread_;
};

}  // namespace fab
