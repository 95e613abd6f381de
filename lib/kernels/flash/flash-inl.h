// The fused path: online-softmax attention over K/V tiles, never holding more than a
// tile of scores. Tiles are packed (transposed K, V panels), except that decode-sized
// row lists read the tiles every row reads whole in place (direct-inl.h).
// Included inside a per-target namespace that defines the SIMD vocabulary S, after the
// common, qk and av families.
// Its rooms, by phase, in the order each builds on the ones before it:
// clang-format off
#include "lib/kernels/flash/state-inl.h"
#include "lib/kernels/flash/block-inl.h"
#include "lib/kernels/flash/direct-inl.h"
#include "lib/kernels/flash/pack-inl.h"
#include "lib/kernels/flash/task-inl.h"
// clang-format on
