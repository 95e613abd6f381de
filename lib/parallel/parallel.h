// The only door to TBB: a thread-capped pool that runs independent tasks, telling each
// one the slot (0 .. threads-1) whose scratch it may use.
#ifndef OCTATTN_LIB_PARALLEL_PARALLEL_H_
#define OCTATTN_LIB_PARALLEL_PARALLEL_H_

#include <stdint.h>

#include <functional>
#include <memory>

namespace octattn {
namespace parallel {

// Hardware threads TBB would use by default.
int DefaultThreads();

class Pool {
 public:
  // threads <= 0 or above DefaultThreads() means DefaultThreads().
  explicit Pool(int threads);
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  int threads() const { return threads_; }

  // Runs fn(task, slot) for task in [0, tasks), each exactly once, tasks started in
  // index order (callers put the longest first). Exceptions propagate to the caller.
  void Run(int64_t tasks, const std::function<void(int64_t task, int slot)>& fn);

 private:
  struct Impl;
  int threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parallel
}  // namespace octattn

#endif  // OCTATTN_LIB_PARALLEL_PARALLEL_H_
