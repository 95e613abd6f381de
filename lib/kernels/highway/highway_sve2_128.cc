// The Highway backend's SVE2_128 target (ARM64): the per-target body compiled once for
// SVE2 with 128-bit vectors. This unit's flags (lib/CMakeLists.txt: -march with
// sve2, -msve-vector-bits=128) make it Highway's static target, so no
// foreach_target: its code runs only where highway.cc's dispatch finds that target.
#include <hwy/highway.h>

#include "lib/kernels/kernels.h"

#if HWY_TARGET != HWY_SVE2_128
#error "octattn: highway_sve2_128.cc needs its flags from lib/CMakeLists.txt"
#endif

HWY_BEFORE_NAMESPACE();
namespace octattn {
namespace kernels {
namespace HWY_NAMESPACE {
#include "lib/kernels/highway/highway-inl.h"
}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace octattn
HWY_AFTER_NAMESPACE();
