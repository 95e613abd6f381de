// Machine limits measured in-process for `octattn bench --limits`: FMA peak of one core
// (independent chains per register width), OpenBLAS sgemm, read bandwidth (in order, and
// through blocks of kReadBlock bytes in shuffled order: a paged cache's reads; in slices
// of rows, a [T, H, D] cache's; and of every core at once).
#include "limits.h"

#include <dlfcn.h>
#ifdef __linux__
#include <sched.h>
#include <sys/mman.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#define OCTATTN_X86 1
#include <immintrin.h>
#else
#define OCTATTN_X86 0
#include <arm_neon.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>
#include <thread>
#include <vector>

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

#if OCTATTN_X86
// 2 flops per lane per FMA; 16 independent chains hide the FMA latency.
__attribute__((target("avx512f"), noinline)) double Fma512(long iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  const double t0 = Now();
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  const double dt = Now() - t0;
  alignas(64) float lanes[16];
  float sink = 0;
  for (int i = 0; i < 16; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    sink += lanes[0];
  }
  if (sink == 12345.0f) std::puts("");
  return 2.0 * 16 * 16 * iters / dt / 1e9;
}

__attribute__((target("avx2,fma"), noinline)) double Fma256(long iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  const double t0 = Now();
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  const double dt = Now() - t0;
  alignas(32) float lanes[8];
  float sink = 0;
  for (int i = 0; i < 12; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    sink += lanes[0];
  }
  if (sink == 12345.0f) std::puts("");
  return 2.0 * 8 * 12 * iters / dt / 1e9;
}

// SSE targets have no FMA: a multiply and an add per lane.
__attribute__((noinline)) double MulAdd128(long iters) {
  __m128 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm_set1_ps(1.0f + i * 1e-3f);
  const __m128 a = _mm_set1_ps(0.999999f), b = _mm_set1_ps(1e-7f);
  const double t0 = Now();
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], a), b);
  const double dt = Now() - t0;
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += _mm_cvtss_f32(acc[i]);
  if (sink == 12345.0f) std::puts("");
  return 2.0 * 4 * 12 * iters / dt / 1e9;
}

#else
// 2 flops per lane per FMA; 12 independent chains hide the FMA latency.
__attribute__((noinline)) double FmaNeon(long iters) {
  float32x4_t acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = vdupq_n_f32(1.0f + i * 1e-3f);
  const float32x4_t a = vdupq_n_f32(0.999999f), b = vdupq_n_f32(1e-7f);
  const double t0 = Now();
  for (long n = 0; n < iters; ++n)
    for (int i = 0; i < 12; ++i) acc[i] = vfmaq_f32(b, acc[i], a);
  const double dt = Now() - t0;
  float sink = 0;
  for (int i = 0; i < 12; ++i) sink += vgetq_lane_f32(acc[i], 0);
  if (sink == 12345.0f) std::puts("");
  return 2.0 * 4 * 12 * iters / dt / 1e9;
}
#endif

template <class F>
double Best(F f, long iters) {
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const double g = f(iters);
    if (g > best) best = g;
  }
  return best;
}

typedef void (*SgemmFn)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                        float, float*, int);

double Sgemm(int n) {
  // This environment sets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for old builds; they
  // slow a current one. OpenBLAS reads them when it loads, so they go before dlopen.
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("OPENBLAS_L2_SIZE");
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return 0;
  auto sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
  auto set_threads = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"));
  if (!sgemm) return 0;
  if (set_threads) set_threads(1);
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a), c(a);
  double best = 0;
  for (int r = 0; r < 4; ++r) {
    const double t0 = Now();
    sgemm(101 /*row major*/, 111 /*no trans*/, 111, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
          c.data(), n);
    const double g = 2.0 * n * n * static_cast<double>(n) / (Now() - t0) / 1e9;
    if (g > best) best = g;
  }
  return best;
}

// Eight floats per vector, unaligned loads: ymm on AVX2, two xmm halves elsewhere. The
// function is cloned per instruction set and the loader picks the one this CPU runs.
typedef float Floats8 __attribute__((vector_size(32), aligned(4)));

// The sum of `runs` runs of n floats (a multiple of 32) each, `stride` floats apart, four
// independent chains.
#if OCTATTN_X86 && defined(__clang__)
__attribute__((target_clones("avx2", "default")))  // never inlined: called through an ifunc
#elif OCTATTN_X86
__attribute__((target_clones("avx2", "default"), noinline))
#else
__attribute__((noinline))
#endif
float
SumRange(const float* p, size_t n, size_t runs = 1, size_t stride = 0) {
  Floats8 s0 = {}, s1 = {}, s2 = {}, s3 = {};
  for (size_t r = 0; r < runs; ++r, p += stride)
    for (size_t i = 0; i < n; i += 32) {
      s0 += *reinterpret_cast<const Floats8*>(p + i);
      s1 += *reinterpret_cast<const Floats8*>(p + i + 8);
      s2 += *reinterpret_cast<const Floats8*>(p + i + 16);
      s3 += *reinterpret_cast<const Floats8*>(p + i + 24);
    }
  const Floats8 sum = (s0 + s1) + (s2 + s3);
  return sum[0];
}

// GB/s of one thread reading `bytes`: in order, or in blocks of block_bytes read in a
// shuffled order (fixed seed), each from its start to its end. Best of five.
double ReadBandwidth(size_t bytes, size_t block_bytes) {
  const size_t block = block_bytes / sizeof(float) / 32 * 32;
  const size_t n = bytes / sizeof(float) / (block ? block : 32) * (block ? block : 32);
  std::vector<float> buf(n, 1.0f);
  std::vector<size_t> order(block ? n / block : 1, 0);
  for (size_t b = 0; b < order.size(); ++b) order[b] = b * block;
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  const size_t len = block ? block : n;
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    float sink = 0;
    const double t0 = Now();
    for (const size_t first : order) sink += SumRange(buf.data() + first, len);
    const double dt = Now() - t0;
    if (sink == -1.0f) std::puts("");
    best = std::max(best, n * sizeof(float) / dt / 1e9);
  }
  return best;
}

// GB/s of one thread reading `bytes` as rows of kSliceRow bytes in groups of kSliceGroup
// rows: each group in kSliceRow / kSlice passes, pass x reading slice x (kSlice bytes at
// x * kSlice) of every row of the group. Best of five.
double ReadSlices(size_t bytes) {
  constexpr size_t row = kSliceRow / sizeof(float), slice = kSlice / sizeof(float);
  const size_t rows = std::max<size_t>(1, bytes / kSliceRow / kSliceGroup) * kSliceGroup;
  // Rows on 4 KiB boundaries, as a tensor allocator's alignment puts them.
  std::vector<float> store(rows * row + row, 1.0f);
  float* rows0 =
      store.data() +
      (row - reinterpret_cast<uintptr_t>(store.data()) % kSliceRow / sizeof(float)) % row;
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    float sink = 0;
    const double t0 = Now();
    for (size_t g = 0; g < rows; g += kSliceGroup)
      for (size_t x = 0; x < row; x += slice)
        sink += SumRange(rows0 + g * row + x, slice, kSliceGroup, row);
    const double dt = Now() - t0;
    if (sink == -1.0f) std::puts("");
    best = std::max(best, rows * kSliceRow / dt / 1e9);
  }
  return best;
}

// The CPUs this process may run on (its affinity mask; elsewhere every CPU).
int UsableCpus() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
#endif
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Reads `share` floats from part [p, p + part) (multiples of 32 floats), wrapping.
float SumShare(const float* p, size_t part, size_t share) {
  float sink = 0;
  for (size_t done = 0; done < share;) {
    const size_t n = std::min(part, share - done);
    sink += SumRange(p, n);
    done += n;
  }
  return sink;
}

}  // namespace

void* AllocBytes(size_t bytes, bool huge_pages, size_t align) {
  const size_t huge = size_t{2} << 20;
  void* p = nullptr;
  if (huge_pages && bytes >= huge) {
    const size_t size = (bytes + huge - 1) / huge * huge;
    p = std::aligned_alloc(huge, size);
#ifdef MADV_HUGEPAGE
    if (p) madvise(p, size, MADV_HUGEPAGE);
#endif
  } else if (align > 0) {
    p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
  } else {
    p = std::malloc(bytes);
  }
  if (!p) throw std::bad_alloc();
  return p;
}

ReadPass::ReadPass(size_t bytes, int threads, bool huge_pages) : threads_(std::max(1, threads)) {
  const size_t t = static_cast<size_t>(threads_);
  share_ = std::max<size_t>(1, bytes / sizeof(float) / t / 32) * 32;
  part_ = std::min(share_, kReadPassMax / sizeof(float) / t / 32 * 32);
  buf_.reset(static_cast<float*>(AllocBytes(part_ * t * sizeof(float), huge_pages)));
  std::fill_n(buf_.get(), part_ * t, 1.0f);
}
size_t ReadPass::Bytes() const { return share_ * static_cast<size_t>(threads_) * sizeof(float); }

double ReadPass::Seconds() {
  std::vector<float> sinks(static_cast<size_t>(threads_));
  double dt;
  if (threads_ == 1) {
    const double t0 = Now();
    sinks[0] = SumShare(buf_.get(), part_, share_);
    dt = Now() - t0;
  } else {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads_; ++t)
      pool.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        sinks[static_cast<size_t>(t)] =
            SumShare(buf_.get() + static_cast<size_t>(t) * part_, part_, share_);
      });
    while (ready.load() < threads_) std::this_thread::yield();
    const double t0 = Now();
    go.store(true, std::memory_order_release);
    for (std::thread& th : pool) th.join();
    dt = Now() - t0;
  }
  for (float x : sinks)
    if (x == -1.0f) std::puts("");
  return dt;
}

// GB/s of `threads` threads reading `bytes` in order, each its own contiguous part, all
// started together (a ReadPass). Best of five.
static double ReadBandwidthThreads(size_t bytes, int threads) {
  ReadPass read(bytes, threads);
  double best = 0;
  for (int r = 0; r < 5; ++r) best = std::max(best, read.Bytes() / read.Seconds() / 1e9);
  return best;
}

Limits MeasureLimits(bool full, bool quick) {
  Limits l;
  // Each measurement runs only on a CPU that has its instructions.
  const long iters = quick ? 20'000 : 20'000'000;
#if OCTATTN_X86
  if (__builtin_cpu_supports("avx512f")) l.fma512 = Best(Fma512, iters);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    l.fma256 = Best(Fma256, iters);
  l.muladd128 = Best(MulAdd128, iters);
#else
  l.fma128 = Best(FmaNeon, iters);
#endif
  if (full) {
    const size_t bytes = quick ? size_t{1} << 20 : size_t{256} << 20;
    l.read_gbps = ReadBandwidth(bytes, 0);
    l.read_blocks_gbps = ReadBandwidth(bytes, kReadBlock);
    l.read_slices_gbps = ReadSlices(bytes);
    l.threads = UsableCpus();
    l.read_threads_gbps = ReadBandwidthThreads(bytes, l.threads);
    l.sgemm = Sgemm(quick ? 64 : 2048);
  }
  return l;
}
