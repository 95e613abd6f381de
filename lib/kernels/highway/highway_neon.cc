// The Highway backend's NEON (ARM64) target (highway-unit-inl.h).
#define OCTATTN_HWY_TARGET HWY_NEON
#include "lib/kernels/highway/highway-unit-inl.h"
