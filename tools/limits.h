// Machine limits for the benchmark (see limits.cc).
#ifndef OCTATTN_TOOLS_LIMITS_H_
#define OCTATTN_TOOLS_LIMITS_H_

#include <stddef.h>

#include <cstdlib>
#include <memory>

struct Limits {
  double fma512 = 0;     // GFLOP/s, one core, zmm FMA (0: not supported)
  double fma256 = 0;     // ymm FMA
  double muladd128 = 0;  // xmm multiply + add (SSE targets have no FMA)
  double fma128 = 0;     // ARM64: NEON FMA (the peak of every ARM64 target, see bench.cc)
  double sgemm = 0;      // OpenBLAS sgemm, one thread (0: library not found)
  double read_gbps = 0;  // one core streaming read
  // The same reads through 64 KiB blocks in shuffled order: the reads of a paged KV cache
  // of 16-row blocks with 4 KiB rows (Hkv 8, D 128, f32), whose blocks lie anywhere.
  double read_blocks_gbps = 0;
  int threads = 0;               // the CPUs this process may use
  double read_threads_gbps = 0;  // that many threads reading at once, in order
  // Reads of kSlice bytes of rows kSliceRow bytes apart, kSliceGroup rows a pass, every
  // slice of a group's rows in turn: the reads of decode from a [T, H, D] cache (f32, 8
  // kv heads of 128) whose kv heads share each group of key rows.
  double read_slices_gbps = 0;
};
constexpr size_t kReadBlock = size_t{64} << 10;
constexpr size_t kSliceRow = 4096, kSlice = 512, kSliceGroup = 32;

// `bytes` of memory from malloc, or aligned to `align` bytes (a power of two, 0: malloc's),
// or with `huge_pages` and 2 MiB or more, 2 MiB aligned and advised as transparent huge
// pages before their first touch (bench --huge-pages: the tensors, and the reads beside
// them). Free with std::free; throws std::bad_alloc.
void* AllocBytes(size_t bytes, bool huge_pages, size_t align = 0);

// `bytes` read by `threads` threads at once, each its own part of a buffer of at most
// kReadPassMax bytes (allocated once, by AllocBytes), in order, as often as the bytes
// take: bench --vs-read times one pass beside each timed call, so that the call's rate
// and the read's are taken in the same state of a shared host, from the same kind of
// pages as the call's tensors.
constexpr size_t kReadPassMax = size_t{256} << 20;
class ReadPass {
 public:
  ReadPass(size_t bytes, int threads, bool huge_pages = false);
  size_t Bytes() const;  // read each pass: `bytes` in whole 128-byte runs per thread
  double Seconds();      // one pass: seconds from all threads' start to the last one's end

 private:
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> buf_;
  size_t part_ = 0, share_ = 0;  // floats: each thread's part of buf_, and how many it reads
  int threads_ = 1;
};

// The FMA peaks (of the instruction sets this CPU has) always; sgemm and read bandwidth
// only when `full`. `quick`: a thousandth of the work, for tests (not a measurement).
Limits MeasureLimits(bool full, bool quick = false);

#endif  // OCTATTN_TOOLS_LIMITS_H_
