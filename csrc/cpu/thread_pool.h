// A small persistent thread pool for the CPU backend.
//
// One process-wide pool of std::threads, created lazily on first use with
// hardware_concurrency() - 1 workers (the calling thread is the remaining one). parallel_for
// hands out task indices dynamically, lets the calling thread work too, and returns only when
// every task has finished. Several threads may call parallel_for at the same time (the Node
// addon runs attention calls on libuv worker threads): each call is a separate job, idle workers
// join whichever job still has unclaimed tasks, and every caller always makes progress on its own
// job, so concurrent and even nested calls cannot deadlock. Nothing here throws.
#ifndef FA_CPU_THREAD_POOL_H
#define FA_CPU_THREAD_POOL_H

#include <stdint.h>

namespace fa {
namespace cpu {

using TaskFn = void (*)(void* ctx, int64_t task, int slot);

// Number of threads (caller included) a job of n_tasks tasks runs on when `requested` threads are
// asked for (<= 0: the pool's default, i.e. hardware_concurrency). Always in [1, max(1, n_tasks)].
// `slot` values passed to the task function lie in [0, planned_threads(...)).
int planned_threads(int requested, int64_t n_tasks) noexcept;

// Runs fn(ctx, t, slot) for every t in [0, n_tasks), on at most planned_threads(requested,
// n_tasks) threads, the caller being one of them (slot 0). Within one call no two threads ever
// share a slot, so per-slot scratch needs no locking. Blocks until all tasks are done. Returns
// false when some task threw (the exception is swallowed; the remaining tasks still run).
bool parallel_for(int64_t n_tasks, int requested, TaskFn fn, void* ctx) noexcept;

// Convenience wrapper for a callable f(int64_t task, int slot).
template <class F>
bool parallel_for(int64_t n_tasks, int requested, F& f) noexcept {
  return parallel_for(
      n_tasks, requested,
      [](void* c, int64_t t, int s) { (*static_cast<F*>(c))(t, s); }, static_cast<void*>(&f));
}

}  // namespace cpu
}  // namespace fa

#endif  // FA_CPU_THREAD_POOL_H
