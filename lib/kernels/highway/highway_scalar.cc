// The Highway backend's scalar target: EMU128 (or SCALAR where a build asks Highway for
// it), without SIMD instructions beyond the baseline (highway-unit-inl.h).
#define OCTATTN_HWY_TARGET (HWY_EMU128 | HWY_SCALAR)
#include "lib/kernels/highway/highway-unit-inl.h"
