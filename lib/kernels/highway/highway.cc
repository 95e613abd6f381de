// The Highway backend: the kernel families (highway-inl.h) compiled once per Highway
// target of this unit (foreach_target: the x86 targets, or NEON and the scalar one on
// ARM64), each copy with its own target attributes, and the dispatch over them, the
// x86 units highway_avx512_bf16.cc (OCTATTN_HWY_AVX512_BF16) and highway_amx_bf16.cc
// (OCTATTN_HWY_AMX_BF16) and, on ARM64, the SVE
// units (highway_sve_256.cc, highway_sve2_128.cc, each compiled for one vector length;
// OCTATTN_HWY_SVE): Highway's CPU detection, best first, as HWY_DYNAMIC_DISPATCH would
// (AVX512_BF16 and AMX, which Highway does not know, from CPUID).
// The sanitizer tree leaves Highway's plain AVX3 to the avx512_bf16 unit (lib/CMakeLists.txt):
// disabled here only, not in that unit, whose static target it is.
#if defined(OCTATTN_NO_HWY_AVX3) && !defined(OCTATTN_HWY_AVX3_LEFT_OUT)
#define OCTATTN_HWY_AVX3_LEFT_OUT 1
#ifndef OCTATTN_HWY_DISABLED  // the targets the build leaves out, where it leaves any
#define OCTATTN_HWY_DISABLED 0
#endif
#undef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (OCTATTN_HWY_DISABLED | HWY_AVX3 | HWY_AVX3_DL)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lib/kernels/highway/highway.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // the AVX block transpose of the vocabulary
#endif

#include <hwy/highway.h>

#include "lib/kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace octattn {
namespace kernels {
namespace HWY_NAMESPACE {
#include "lib/kernels/highway/highway-inl.h"
}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace octattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <hwy/targets.h>
#if OCTATTN_HWY_AMX_BF16
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace octattn {
namespace kernels {

#if OCTATTN_HWY_AVX512_BF16
namespace bf16 {
namespace N_AVX3 {
const Table* GetTable();
}
}  // namespace bf16
#endif
#if OCTATTN_HWY_AMX_BF16
namespace amx {
namespace N_AVX3 {
const Table* GetTable();
}
}  // namespace amx
#endif
#if OCTATTN_HWY_SVE
namespace N_SVE_256 {
const Table* GetTable();
}
namespace N_SVE2_128 {
const Table* GetTable();
}
#endif
#if HWY_TARGETS & HWY_SCALAR  // the scalar target: SCALAR where the build asks for it
#define OCTATTN_HWY_SCALAR_NS N_SCALAR
#else
#define OCTATTN_HWY_SCALAR_NS N_EMU128
#endif

namespace {

struct Unit {
  Target target;
  int64_t hwy_bits;  // the Highway targets whose CPUs run it
  const Table* (*table)();
  bool (*extra)();  // what else the CPU needs (null: nothing)
  // Whether auto may pick it. amx_bf16 runs only when asked for: its bf16 prefill runs
  // 2.6-2.9x avx512_bf16's, but its decode 0.86-0.88x on 16 sequences of 256..7936 keys
  // and 0.72-0.95x on one of 4096..65536 (the key pairs and value rows of each group
  // arranged in scratch for the tiles, so that decode equals prefill; Intel host with
  // AMX, Hq 32 / Hkv 8, D 128, one and two threads), and decode is the step a user
  // waits on.
  bool automatic = true;
};

#if OCTATTN_HWY_AVX512_BF16
bool HasAvx512Bf16() {
  __builtin_cpu_init();  // idempotent; this may run before libgcc's constructor
  // (Its unit is compiled with AVX512_VNNI too, which every such CPU has.)
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni");
}
#endif
#if OCTATTN_HWY_AMX_BF16
// AMX-TILE and AMX-BF16 (CPUID leaf 7: EDX bits 24 and 22), the tile state enabled by
// the OS (XCR0 bits 17 and 18), and Linux's grant of the tile data to this process
// (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 18; refused: not this target).
// Asked once; the grant is the process's.
bool HasAmxBf16() {
  static const bool ok = [] {
    if (!HasAvx512Bf16()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    if (!(d & (1u << 24)) || !(d & (1u << 22))) return false;
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return ok;
}
#endif

// Best first. Highway reports SVE_256 for SVE with 256-bit vectors and SVE2_128 for SVE2
// with 128-bit ones; any other ARM64 CPU runs NEON.
constexpr Unit kUnits[] = {
#if OCTATTN_HWY_AMX_BF16
    {kAmxBf16, HWY_AVX3, &amx::N_AVX3::GetTable, &HasAmxBf16, false},
#endif
#if OCTATTN_HWY_AVX512_BF16
    {kAvx512Bf16, HWY_AVX3, &bf16::N_AVX3::GetTable, &HasAvx512Bf16},
#endif
#if HWY_TARGETS & HWY_AVX3
    {kAvx512, HWY_AVX3, &N_AVX3::GetTable, nullptr},
#endif
#if HWY_TARGETS & HWY_AVX2
    {kAvx2, HWY_AVX2, &N_AVX2::GetTable, nullptr},
#endif
#if HWY_TARGETS & HWY_SSE4
    {kSse4, HWY_SSE4, &N_SSE4::GetTable, nullptr},
#endif
#if HWY_TARGETS & HWY_SSSE3
    {kSsse3, HWY_SSSE3, &N_SSSE3::GetTable, nullptr},
#endif
#if OCTATTN_HWY_SVE
    {kSve2_128, HWY_SVE2_128, &N_SVE2_128::GetTable, nullptr},
#endif
#if OCTATTN_HWY_SVE
    {kSve256, HWY_SVE_256, &N_SVE_256::GetTable, nullptr},
#endif
#if HWY_TARGETS & HWY_NEON
    {kNeon, HWY_NEON, &N_NEON::GetTable, nullptr},
#endif
    {kScalar, -1, &OCTATTN_HWY_SCALAR_NS::GetTable, nullptr},  // every CPU
};

bool Runs(const Unit& u, int64_t supported) {
  return (supported & u.hwy_bits) && (!u.extra || u.extra());
}

}  // namespace

// Whether the plain AVX-512 unit is compiled (a lean tree has only avx512_bf16's, which
// then serves bf16 too).
constexpr bool kPlainAvx512 = (HWY_TARGETS & HWY_AVX3) != 0;

const Table* HighwayBest(bool bf16_dot) {
  const int64_t supported = hwy::SupportedTargets();
  for (const Unit& u : kUnits)
    if (u.automatic && (bf16_dot || !kPlainAvx512 || u.target != kAvx512Bf16) && Runs(u, supported))
      return u.table();
  return nullptr;  // not reached: the scalar unit runs everywhere
}

const Table* HighwayTable(Target target) {
  const int64_t supported = hwy::SupportedTargets();
  for (const Unit& u : kUnits)
    if (u.target == target) return Runs(u, supported) ? u.table() : nullptr;
  return nullptr;
}

const Table* HighwayQkInt8(const Table* chosen) {
  if (!chosen || chosen->backend != kHighway || chosen->target != kAvx512) return chosen;
  const Table* dot = HighwayTable(kAvx512Bf16);
  return dot ? dot : chosen;
}

bool AutoTakesBf16Dot() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return !__builtin_cpu_is("intel");
#else
  return true;
#endif
}

// By the vendor, as libgcc's CPU model holds it (__builtin_cpu_init is idempotent).
Tuning DefaultTuning() {
  Tuning t;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  t.in_place_rows = t.vendor_fetch = __builtin_cpu_is("intel");
  if (__builtin_cpu_is("znver1")) t.direct_rows = 4;
#endif
  return t;
}

}  // namespace kernels
}  // namespace octattn
#endif  // HWY_ONCE
