// Machine limits for the benchmark (see limits.cc).
#ifndef OCTATTN_TOOLS_LIMITS_H_
#define OCTATTN_TOOLS_LIMITS_H_

struct Limits {
  double fma512 = 0;     // GFLOP/s, one core, zmm FMA (0: not supported)
  double fma256 = 0;     // ymm FMA
  double muladd128 = 0;  // xmm multiply + add (SSE targets have no FMA)
  double fma128 = 0;     // ARM64: NEON FMA (the peak of every ARM64 target, see bench.cc)
  double sgemm = 0;      // OpenBLAS sgemm, one thread (0: library not found)
  double read_gbps = 0;  // one core streaming read
};

// The FMA peaks (of the instruction sets this CPU has) always; sgemm and read bandwidth
// only when `full`. `quick`: a thousandth of the work, for tests (not a measurement).
Limits MeasureLimits(bool full, bool quick = false);

#endif  // OCTATTN_TOOLS_LIMITS_H_
