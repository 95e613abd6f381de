// One Highway target's unit: the including file defines OCTATTN_HWY_TARGET (a Highway
// target bit, or two for the scalar unit) and this file compiles the per-target body
// (highway-inl.h) for that target alone. foreach_target visits every target of the
// build; the others stay empty here, so each target's kernels compile in their own unit
// (in parallel) with Highway's per-function target attributes, not global -m flags.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/kernels/highway/highway-unit-inl.h"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // the AVX block transpose of the vocabulary
#endif

#include <hwy/highway.h>

#include "lib/kernels/kernels.h"

#if HWY_TARGET & (OCTATTN_HWY_TARGET)
HWY_BEFORE_NAMESPACE();
namespace octattn {
namespace kernels {
namespace HWY_NAMESPACE {
#include "lib/kernels/highway/highway-inl.h"
}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace octattn
HWY_AFTER_NAMESPACE();
#endif
