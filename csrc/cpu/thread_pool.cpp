// Persistent thread pool behind fa::cpu::parallel_for (see thread_pool.h).
//
// Bookkeeping (the list of open jobs, who joined which job) sits under one mutex; claiming a task
// is a lock-free fetch_add on the job's counter. Tasks are coarse (a tile row of attention), so
// the mutex is taken only a few times per call and thread.
#include "cpu/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define FA_POOL_HAVE_ATFORK 1
#endif

namespace fa {
namespace cpu {
namespace {

constexpr int kMaxThreads = 256;

struct Job {
  TaskFn fn = nullptr;
  void* ctx = nullptr;
  int64_t n_tasks = 0;
  std::atomic<int64_t> next{0};     // next unclaimed task
  std::atomic<bool> failed{false};  // some task threw
  int max_threads = 1;              // participants allowed, caller included
  int joined = 1;                   // participants so far (slot numbers handed out), under mutex
  int active = 1;                   // participants still running tasks, under mutex
};

void run_tasks(Job& job, int slot) noexcept {
  for (;;) {
    const int64_t t = job.next.fetch_add(1, std::memory_order_relaxed);
    if (t >= job.n_tasks) break;
    try {
      job.fn(job.ctx, t, slot);
    } catch (...) {
      job.failed.store(true, std::memory_order_relaxed);
    }
  }
}

class Pool {
 public:
  Pool() {
    const unsigned hc = std::thread::hardware_concurrency();
    default_threads_ = hc == 0 ? 1 : static_cast<int>(std::min<unsigned>(hc, kMaxThreads));
  }
  // Never destroyed (see instance()): worker threads block on the condition variable until the
  // process exits, which avoids join-at-exit ordering problems inside a Node addon.

  int default_threads() const { return default_threads_; }

  bool run(int64_t n_tasks, int threads, TaskFn fn, void* ctx) noexcept {
    Job job;
    job.fn = fn;
    job.ctx = ctx;
    job.n_tasks = n_tasks;
    job.max_threads = threads;
    bool helpers = false;
    try {
      std::lock_guard<std::mutex> lock(mu_);
      grow_locked(threads - 1);
      if (!workers_.empty()) {
        jobs_.push_back(&job);
        helpers = true;
      }
    } catch (...) {
      helpers = false;  // e.g. a failed allocation in push_back: run alone
    }
    if (helpers) work_cv_.notify_all();

    run_tasks(job, 0);

    if (helpers) {
      std::unique_lock<std::mutex> lock(mu_);
      // No new helper can join once the job is off the list; wait for those that did.
      jobs_.erase(std::remove(jobs_.begin(), jobs_.end(), &job), jobs_.end());
      --job.active;
      while (job.active > 0) done_cv_.wait(lock);
    }
    return !job.failed.load(std::memory_order_relaxed);
  }

 private:
  // Starts workers until there are `want` of them (best effort: if the OS refuses a thread we
  // simply keep fewer). Caller holds mu_.
  void grow_locked(int want) {
    want = std::min(want, kMaxThreads - 1);
    while (static_cast<int>(workers_.size()) < want) {
      try {
        workers_.reserve(static_cast<size_t>(want));
        workers_.emplace_back([this] { worker_main(); });
      } catch (...) {
        return;
      }
    }
  }

  Job* find_job_locked() {
    for (Job* j : jobs_) {
      if (j->joined < j->max_threads && j->next.load(std::memory_order_relaxed) < j->n_tasks) return j;
    }
    return nullptr;
  }

  void worker_main() noexcept {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      Job* job = find_job_locked();
      if (job == nullptr) {
        work_cv_.wait(lock);
        continue;
      }
      const int slot = job->joined++;
      ++job->active;
      lock.unlock();
      run_tasks(*job, slot);
      lock.lock();
      if (--job->active == 0) done_cv_.notify_all();
    }
  }

  int default_threads_ = 1;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::vector<Job*> jobs_;
  std::vector<std::thread> workers_;
};

std::atomic<Pool*> g_pool{nullptr};
std::mutex g_pool_init_mu;

#if FA_POOL_HAVE_ATFORK
// A forked child inherits the pool object but none of its threads: start over with a fresh one
// (the old object is leaked on purpose; its mutex may have been held at the fork).
void reset_pool_in_child() { g_pool.store(nullptr, std::memory_order_relaxed); }
#endif

Pool* instance() noexcept {
  Pool* p = g_pool.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  try {
    std::lock_guard<std::mutex> lock(g_pool_init_mu);
    p = g_pool.load(std::memory_order_acquire);
    if (p == nullptr) {
#if FA_POOL_HAVE_ATFORK
      static bool atfork_done = false;
      if (!atfork_done) {
        pthread_atfork(nullptr, nullptr, reset_pool_in_child);
        atfork_done = true;
      }
#endif
      p = new Pool();  // intentionally never deleted
      g_pool.store(p, std::memory_order_release);
    }
  } catch (...) {
    return nullptr;
  }
  return p;
}

}  // namespace

int planned_threads(int requested, int64_t n_tasks) noexcept {
  if (n_tasks <= 1) return 1;
  int want = requested;
  if (want <= 0) {
    Pool* p = instance();
    want = p ? p->default_threads() : 1;
  }
  want = std::min(want, kMaxThreads);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(want, n_tasks)));
}

bool parallel_for(int64_t n_tasks, int requested, TaskFn fn, void* ctx) noexcept {
  if (n_tasks <= 0) return true;
  const int threads = planned_threads(requested, n_tasks);
  Pool* pool = threads > 1 ? instance() : nullptr;
  if (pool == nullptr) {
    Job job;
    job.fn = fn;
    job.ctx = ctx;
    job.n_tasks = n_tasks;
    run_tasks(job, 0);
    return !job.failed.load(std::memory_order_relaxed);
  }
  return pool->run(n_tasks, threads, fn, ctx);
}

}  // namespace cpu
}  // namespace fa
