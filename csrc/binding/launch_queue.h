// LaunchQueue: the launcher thread of a DeviceContext (context.h) and its queue, with no CUDA or
// Node-API in it (tools/launch_queue_stress.cpp runs it under ThreadSanitizer on a CPU).
//
// One producer thread (the JS thread) pushes closures; they are issued one at a time, in push order,
// by whichever thread holds the run lock: the queue's own thread, or the producer when it flushes
// (it then issues what is left itself instead of waiting for that thread). The ring's head advances
// only after a closure was issued, so !Pending() means nothing is queued or being issued, and the
// producer may then issue a closure itself without breaking the order.
//
// Every wait spins: a thread put to sleep on a contended lock or a condition variable took
// microseconds to wake on a virtualised H200 host, as long as a CUDA launch. Only the idle queue
// thread sleeps, after spin_us without work; Push wakes it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fab {

// A closure to issue in order: "" on success, else the error message and, in *code, the CUDA
// error behind it (0 when none).
using Launch = std::function<std::string(int* code)>;

class LaunchQueue {
 public:
  static constexpr uint64_t kRing = 1024;
  // Development figures (profile = true): time queued and issuing per closure, flushes.
  struct Stats {
    double wait_us = 0, run_us = 0, flush_us = 0;
    long launches = 0, by_flush = 0, flushes = 0;
  };

  // thread_init runs first on the queue's thread (it makes the device current there).
  LaunchQueue(int spin_us, std::function<void()> thread_init, bool profile)
      : spin_us_(spin_us), profile_(profile), thread_([this, init = std::move(thread_init)] {
          if (init) init();
          Loop();
        }) {}
  ~LaunchQueue() { Stop(); }
  LaunchQueue(const LaunchQueue&) = delete;
  LaunchQueue& operator=(const LaunchQueue&) = delete;

  // Something is queued or being issued.
  bool Pending() const { return head_.load(std::memory_order_acquire) != tail_.load(std::memory_order_acquire); }
  // The queue's thread is asleep (or about to be): the GPU has had nothing from it for spin_us.
  bool Sleeping() const { return sleeping_.load(std::memory_order_relaxed); }

  // Producer: queues `launch` (issuing what is queued first when the ring is full).
  void Push(Launch launch) {
    const uint64_t t = tail_.load(std::memory_order_relaxed);
    if (t - head_.load(std::memory_order_acquire) >= kRing) Flush();
    ring_[t % kRing] = new Queued{std::move(launch), profile_ ? NowUs() : 0.0};
    // Sequentially consistent, as the thread's store to sleeping_ and its check of the ring after
    // it: of the two stores, the one later in their single total order sees the other.
    tail_.store(t + 1, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) Wake(false);
  }
  // Producer: issues every queued closure on the calling thread before returning (the queue's
  // thread may be issuing one: that one is waited for).
  void Flush() {
    if (!Pending()) return;
    const double t0 = profile_ ? NowUs() : 0;
    RunLock();
    const uint64_t before = head_.load(std::memory_order_relaxed);
    while (RunOne()) {
    }
    if (profile_) stats_.by_flush += long(head_.load(std::memory_order_relaxed) - before), ++stats_.flushes, stats_.flush_us += NowUs() - t0;
    RunUnlock();
  }
  // Wakes the sleeping thread; nothing_queued: for work expected soon (it spins again).
  void Wake(bool nothing_queued) {
    {
      std::lock_guard<std::mutex> lock(sleep_mu_);  // (the thread is before its check or waiting)
      if (nothing_queued) wake_ = true;
    }
    sleep_cv_.notify_one();
  }
  // The first failure of a closure issued since the last call ("" when none) and its CUDA error.
  std::string TakeError(int* code) {
    RunLock();
    std::string err;
    err.swap(error_);
    *code = error_code_;
    error_code_ = 0;
    RunUnlock();
    return err;
  }
  // Issues what is queued and ends the thread (idempotent). Push must not be called after it.
  void Stop() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    Wake(false);
    thread_.join();
    Flush();
  }
  Stats stats() {
    RunLock();
    Stats s = stats_;
    RunUnlock();
    return s;
  }

  // Runs a closure; an exception escaping it becomes its error, so that no thread leaves the ring
  // half-issued or the run lock held.
  static std::string Issue(const Launch& launch, int* code) {
    try {
      return launch(code);
    } catch (const std::exception& e) {
      *code = 0;
      return std::string("internal: exception while issuing a launch: ") + e.what();
    } catch (...) {
      *code = 0;
      return "internal: exception while issuing a launch";
    }
  }
  static double NowUs() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

 private:
  struct Queued {
    Launch fn;
    double pushed_us;  // profile only
  };
  bool RunLockTry() { return !run_busy_.exchange(true, std::memory_order_acquire); }
  void RunLock() {
    while (!RunLockTry()) Pause();
  }
  void RunUnlock() { run_busy_.store(false, std::memory_order_release); }
  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  // Issues the oldest queued closure; false when none. Caller holds the run lock.
  bool RunOne() {
    const uint64_t h = head_.load(std::memory_order_relaxed);
    if (h == tail_.load(std::memory_order_acquire)) return false;
    Queued* q = ring_[h % kRing];
    int code = 0;
    const double t0 = profile_ ? NowUs() : 0;
    std::string err = Issue(q->fn, &code);
    if (profile_) stats_.wait_us += t0 - q->pushed_us, stats_.run_us += NowUs() - t0, ++stats_.launches;
    delete q;
    if (!err.empty() && error_.empty()) {
      error_ = std::move(err);
      error_code_ = code;
    }
    head_.store(h + 1, std::memory_order_release);
    return true;
  }
  void Loop() {
    for (;;) {
      // Back-to-back calls arrive a few microseconds apart: spin a while before sleeping, so that a
      // steady stream of them never waits for this thread to wake up.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us_);
      while (!Pending() && !stop_.load(std::memory_order_relaxed) && std::chrono::steady_clock::now() < until) Pause();
      if (!Pending()) {
        std::unique_lock<std::mutex> lock(sleep_mu_);
        sleeping_.store(true, std::memory_order_seq_cst);  // (see Push)
        sleep_cv_.wait(lock, [this] {
          return tail_.load(std::memory_order_seq_cst) != head_.load(std::memory_order_acquire) || wake_ ||
                 stop_.load(std::memory_order_relaxed);
        });
        sleeping_.store(false, std::memory_order_relaxed);
        wake_ = false;
        if (!Pending() && stop_.load(std::memory_order_relaxed)) break;  // stopping and drained
        if (!Pending()) continue;  // woken for work to come: spin again
      }
      if (!RunLockTry()) continue;  // the producer is flushing
      while (RunOne()) {
      }
      RunUnlock();
    }
  }

  const int spin_us_;
  const bool profile_;
  Queued* ring_[kRing] = {};
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) std::atomic<bool> run_busy_{false};
  std::atomic<bool> sleeping_{false};
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;
  std::condition_variable sleep_cv_;
  bool wake_ = false;        // guarded by sleep_mu_
  std::string error_;        // guarded by the run lock
  int error_code_ = 0;       // guarded by the run lock
  Stats stats_;              // guarded by the run lock
  std::thread thread_;       // last: starts once every member above is initialised
};

}  // namespace fab
