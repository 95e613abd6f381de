// oneTBB behind the Pool interface: one task_arena per pool.
#include "lib/parallel/parallel.h"

#include <atomic>

#include <tbb/blocked_range.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>

namespace octattn {
namespace parallel {

int DefaultThreads() { return tbb::info::default_concurrency(); }

struct Pool::Impl {
  explicit Impl(int threads) : arena(threads) {}
  tbb::task_arena arena;
};

Pool::Pool(int threads) {
  const int max = DefaultThreads();
  threads_ = (threads <= 0 || threads > max) ? max : threads;
  impl_ = std::make_unique<Impl>(threads_);
}

Pool::~Pool() = default;

void Pool::RunRaw(int64_t tasks, Callback callback, void* fn) {
  if (tasks <= 0) return;
  if (threads_ == 1 || tasks == 1) {
    for (int64_t t = 0; t < tasks; ++t) callback(fn, t, 0);
    return;
  }
  // One worker per thread takes the next task index from a shared counter, so tasks
  // start in index order whatever thread runs them (parallel_for's range splitting
  // would start the last tasks, the shortest, early, and leave a long one to run alone
  // at the end).
  std::atomic<int64_t> next{0};
  const int64_t workers = tasks < threads_ ? tasks : threads_;
  impl_->arena.execute([&] {
    tbb::parallel_for(
        tbb::blocked_range<int64_t>(0, workers, 1),
        [&](const tbb::blocked_range<int64_t>&) {
          const int slot = tbb::this_task_arena::current_thread_index();
          for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < tasks;
               t = next.fetch_add(1, std::memory_order_relaxed))
            callback(fn, t, slot);
        },
        tbb::simple_partitioner());
  });
}

}  // namespace parallel
}  // namespace octattn
