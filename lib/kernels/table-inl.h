// Every kernel family of one target, and that target's table. Included once inside the
// per-target namespace of a backend (highway/highway.cc, xsimd/xsimd-arch-inl.h) after it
// defines the SIMD vocabulary S; no includes, no namespace of its own.
// Each family builds on the ones before it: the order matters.
// clang-format off
#include "lib/kernels/common/common-inl.h"
#include "lib/kernels/qk/qk-inl.h"
#include "lib/kernels/softmax/softmax-inl.h"
#include "lib/kernels/mask/mask-inl.h"
#include "lib/kernels/mods/mods-inl.h"
#include "lib/kernels/av/av-inl.h"
#include "lib/kernels/naive/naive-inl.h"
#include "lib/kernels/flash/flash-inl.h"
#include "lib/kernels/backward/backward-inl.h"
#include "lib/kernels/store/store-inl.h"
// clang-format on

static constexpr Table MakeTable(Backend backend, Target target) {
  Table t{};
  t.backend = backend;
  t.target = target;
  t.naive_scratch_floats = NaiveScratchFloats;
  t.naive_head = NaiveHead;
  t.scores_scratch_floats = ScoresScratchFloats;
  t.scores_head = ScoresHead;
  t.scale_rows = ScaleRows;
  t.softmax_scratch_floats = SoftmaxScratchFloats;
  t.softmax_rows = SoftmaxRows;
  t.mask_rows = MaskRows;
  t.modify_scratch_floats = ModifyScratchFloats;
  t.modify_rows = ModifyRows;
  t.weighted_sum_scratch_floats = WeightedSumScratchFloats;
  t.weighted_sum_head = WeightedSumHead;
  t.flash_scratch_floats = FlashScratchFloats;
  t.flash_state_floats = FlashStateFloats;
  t.flash_task = FlashTaskRun;
  t.flash_merge = FlashMerge;
  t.backward_scratch_floats = BackwardScratchFloats;
  t.backward_task = BackwardTaskRun;
  t.store_rows = StoreRowsRun;
  return t;
}
