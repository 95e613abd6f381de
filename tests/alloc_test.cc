// A call given a large enough workspace allocates nothing: malloc and friends are
// interposed in this executable and counted while the call runs.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>

#include "support.h"

using namespace octtest;

#if defined(__SANITIZE_ADDRESS__)
#define OCTATTN_COUNT_ALLOCATIONS 0  // ASan owns malloc
#else
#define OCTATTN_COUNT_ALLOCATIONS 1
#endif

#if OCTATTN_COUNT_ALLOCATIONS
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
void Count() {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  Count();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
void* memalign(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
int posix_memalign(void** p, size_t a, size_t n) {
  Count();
  *p = __libc_memalign(a, n);
  return *p ? 0 : 12;
}
}
#endif

TEST_CASE("a call with a caller's workspace performs no allocation", "[fused][api]") {
#if !OCTATTN_COUNT_ALLOCATIONS
  SUCCEED("allocation counting is off under AddressSanitizer");
#else
  struct Shape {
    int64_t q_len, kv_len;
    octattn_algorithm algo;
  };
  for (int threads : {1, 2}) {
    for (const Shape& s :
         {Shape{300, 300, OCTATTN_ALGORITHM_FUSED}, Shape{1, 3000, OCTATTN_ALGORITHM_FUSED},
          Shape{70, 70, OCTATTN_ALGORITHM_NAIVE}, Shape{40, 40, OCTATTN_ALGORITHM_REFERENCE}}) {
      INFO("threads " << threads << " q_len " << s.q_len << " kv_len " << s.kv_len << " "
                      << octattn_algorithm_name(s.algo));
      Context ctx(threads);
      Problem p(2, 8, 2, s.q_len, s.kv_len, 64, 64, 1);
      Tensor o = p.Out(), lse = p.Lse();
      const auto opt = Options(1, 0, 0, s.algo);
      size_t bytes = 0;
      REQUIRE(octattn_attention_workspace_size(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(),
                                               lse.ptr(), nullptr, &bytes) == OCTATTN_OK);
      std::vector<char> ws(bytes);
      // A first call warms up the thread pool (its workers and their task pools).
      REQUIRE(octattn_attention(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(),
                                nullptr, ws.data(), bytes) == OCTATTN_OK);
      g_allocations = 0;
      g_counting = true;
      const octattn_status st = octattn_attention(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(),
                                                  o.ptr(), lse.ptr(), nullptr, ws.data(), bytes);
      g_counting = false;
      REQUIRE(st == OCTATTN_OK);
      CHECK(g_allocations.load() == 0);
    }
  }
  // The counter sees the library's allocations: a fresh context without a workspace
  // allocates its scratch on the first call.
  Context fresh(1);
  Problem p(1, 2, 2, 50, 50, 16, 16, 2);
  Tensor o = p.Out();
  g_allocations = 0;
  g_counting = true;
  const octattn_status st = octattn_attention(fresh, nullptr, p.q.ptr(), p.k.ptr(), p.v.ptr(),
                                              o.ptr(), nullptr, nullptr, nullptr, 0);
  g_counting = false;
  REQUIRE(st == OCTATTN_OK);
  CHECK(g_allocations.load() > 0);
#endif
}
