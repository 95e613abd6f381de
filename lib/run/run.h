// The runners: one for the forward and one for the backward, for every call (dense, or
// padded, ragged and paged batches of sequences), over the pool and the call's scratch.
// The boundary validates and acquires the scratch; everything after that is here.
#ifndef OCTATTN_LIB_RUN_RUN_H_
#define OCTATTN_LIB_RUN_RUN_H_

#include <stddef.h>
#include <stdint.h>

#include "lib/parallel/parallel.h"
#include "lib/run/call.h"

namespace octattn {
namespace run {

// Bytes of scratch a validated call takes with `threads` slots: the slots, the decode
// partials and a call of sequences' tables (SIZE_MAX: it does not fit in size_t).
size_t ForwardWorkspaceBytes(const Call& c, int threads);
// Runs a validated call in `scratch` of ForwardWorkspaceBytes(c, pool.threads()) bytes,
// 64-byte aligned. Binds a call of sequences' entries there (c->seqs).
void Forward(parallel::Pool& pool, Call* c, void* scratch);

size_t BackwardWorkspaceBytes(const BackwardCall& c, int threads);
void Backward(parallel::Pool& pool, BackwardCall* c, void* scratch);

// Runs body(task, slot_scratch) for each of `tasks` on the pool, each thread's slot being
// `slot_bytes` of `scratch`: the one way tasks reach the pool (the stages' too).
template <class Body>
void RunTasks(parallel::Pool& pool, int64_t tasks, void* scratch, size_t slot_bytes, Body&& body) {
  char* base = static_cast<char*>(scratch);
  pool.Run(tasks, [&](int64_t task, int slot) {
    body(task, base + static_cast<size_t>(slot) * slot_bytes);
  });
}

}  // namespace run
}  // namespace octattn

#endif  // OCTATTN_LIB_RUN_RUN_H_
