// The only door to TBB: a thread-capped pool that runs independent tasks, telling each
// one the slot (0 .. threads-1) whose scratch it may use.
#ifndef OCTATTN_LIB_PARALLEL_PARALLEL_H_
#define OCTATTN_LIB_PARALLEL_PARALLEL_H_

#include <stdint.h>

#include <memory>
#include <type_traits>

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
  // No std::function: a call with a caller's workspace allocates nothing.
  template <class F>
  void Run(int64_t tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    RunRaw(
        tasks, [](void* f, int64_t task, int slot) { (*static_cast<Fn*>(f))(task, slot); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Callback = void (*)(void* fn, int64_t task, int slot);
  void RunRaw(int64_t tasks, Callback callback, void* fn);

  struct Impl;
  int threads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace parallel
}  // namespace octattn

#endif  // OCTATTN_LIB_PARALLEL_PARALLEL_H_
