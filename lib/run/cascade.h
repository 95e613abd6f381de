// Cascade decode's groups (plan::CascadeGroup): formed from a call's sequences.
#ifndef OCTATTN_LIB_RUN_CASCADE_H_
#define OCTATTN_LIB_RUN_CASCADE_H_

#include "lib/plan/schedule.h"
#include "lib/run/call.h"

namespace octattn {
namespace run {

// Forms the groups of a call (after its plans were added to b): grows b's slot to a group
// task's. A dense call's group is all its entries or none (BatchSchedule::dense_spans).
// For a call of sequences with `seqs` (its entries in its scratch) and b->groups set,
// also links and marks the members there, writes the groups and counts their tasks and
// the rows they share; without, sizes only.
void FormCascade(const Call& c, plan::Sequence* seqs, plan::BatchSchedule* b);

}  // namespace run
}  // namespace octattn

#endif  // OCTATTN_LIB_RUN_CASCADE_H_
