// A call given a large enough workspace allocates nothing, dense or a batch of
// sequences (padded, ragged, paged), forward and backward: malloc and friends are
// interposed in this executable and counted while the call runs.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <vector>

#include "support.h"

using namespace octtest;

// ASan owns malloc: GCC says so with __SANITIZE_ADDRESS__, clang with __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OCTATTN_UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(OCTATTN_UNDER_ASAN)
#define OCTATTN_COUNT_ALLOCATIONS 0
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

#if OCTATTN_COUNT_ALLOCATIONS
namespace {

// Allocations made while `call` runs (after one warm-up call of the same arguments, which
// starts the thread pool's workers).
long AllocationsOf(const std::function<octattn_status()>& call) {
  REQUIRE(call() == OCTATTN_OK);
  g_allocations = 0;
  g_counting = true;
  const octattn_status st = call();
  g_counting = false;
  REQUIRE(st == OCTATTN_OK);
  return g_allocations.load();
}

}  // namespace
#endif

TEST_CASE("batches of sequences with a caller's workspace perform no allocation", "[fused][api]") {
#if !OCTATTN_COUNT_ALLOCATIONS
  SUCCEED("allocation counting is off under AddressSanitizer");
#else
  // Five sequences: decode-shaped (one query row over many keys: split into units and
  // merged), prefill-shaped, one with no valid key and one with no query row. Emulated
  // (qemu), one decode-shaped sequence past a key span and short others.
  const int64_t long_kv = Sized(1500, 1100), other_kv = Sized(1100, 40), rows = Sized(37, 6);
  const std::vector<int64_t> q_lens = {1, rows, 1, 0, 5}, kv_lens = {long_kv, 60, 0, 9, other_kv};
  const int64_t n = static_cast<int64_t>(q_lens.size()), hq = 4, hkv = 2, d = 32;
  std::vector<int64_t> cu_q = {0}, cu_k = {0}, starts(q_lens.size(), 0);
  for (int64_t s = 0; s < n; ++s) {
    cu_q.push_back(cu_q.back() + q_lens[s]);
    cu_k.push_back(cu_k.back() + kv_lens[s]);
  }
  const int64_t max_q = rows, max_k = long_kv;
  for (int threads : {1, 2}) {
    Context ctx(threads);
    for (octattn_algorithm algo :
         {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE}) {
      INFO("threads " << threads << " " << octattn_algorithm_name(algo));
      // Padded [B, H, T, D]: each sequence its entry's first rows (valid keys kv_lens).
      Problem padded(n, hq, hkv, max_q, max_k, d, d, 3);
      Tensor po = padded.Out(), plse = padded.Lse();
      octattn_attention_options popt = Options(1, 0, 0, algo);
      popt.kv_starts = starts.data();
      popt.kv_lens = kv_lens.data();
      // Ragged [1, H, total, D].
      Problem ragged(1, hq, hkv, cu_q.back(), cu_k.back(), d, d, 4);
      Tensor ro = ragged.Out(), rlse = ragged.Lse();
      octattn_attention_options ropt = Options(1, 0, 0, algo);
      ropt.sequences = n;
      ropt.cu_seqlens_q = cu_q.data();
      ropt.cu_seqlens_k = cu_k.data();
      struct Case {
        const char* name;
        Problem* p;
        Tensor* o;
        Tensor* lse;
        const octattn_attention_options* opt;
      };
      for (const Case& c : {Case{"padded", &padded, &po, &plse, &popt},
                            Case{"ragged", &ragged, &ro, &rlse, &ropt}}) {
        INFO(c.name);
        size_t bytes = 0;
        REQUIRE(octattn_attention_workspace_size(ctx, c.opt, c.p->q.ptr(), c.p->k.ptr(),
                                                 c.p->v.ptr(), c.o->ptr(), c.lse->ptr(), nullptr,
                                                 &bytes) == OCTATTN_OK);
        std::vector<char> ws(bytes);
        CHECK(AllocationsOf([&] {
                return octattn_attention(ctx, c.opt, c.p->q.ptr(), c.p->k.ptr(), c.p->v.ptr(),
                                         c.o->ptr(), c.lse->ptr(), nullptr, ws.data(), bytes);
              }) == 0);
        if (algo == OCTATTN_ALGORITHM_NAIVE) continue;  // the backward: fused or reference
        Tensor dout = c.p->Out(), dq(c.p->q), dk(c.p->k), dv(c.p->v);
        dout.Fill(9);
        REQUIRE(octattn_attention_backward_workspace_size(
                    ctx, c.opt, c.p->q.ptr(), c.p->k.ptr(), c.p->v.ptr(), c.o->ptr(), c.lse->ptr(),
                    dout.ptr(), nullptr, dq.ptr(), dk.ptr(), dv.ptr(), nullptr, nullptr,
                    &bytes) == OCTATTN_OK);
        std::vector<char> bws(bytes);
        CHECK(AllocationsOf([&] {
                return octattn_attention_backward(ctx, c.opt, c.p->q.ptr(), c.p->k.ptr(),
                                                  c.p->v.ptr(), c.o->ptr(), c.lse->ptr(),
                                                  dout.ptr(), nullptr, dq.ptr(), dk.ptr(), dv.ptr(),
                                                  nullptr, nullptr, bws.data(), bytes);
              }) == 0);
      }
      if (algo == OCTATTN_ALGORITHM_NAIVE) continue;  // a paged cache: fused or reference
      // Paged: pools of 16-row blocks [blocks, Hkv, 16, D], the sequences' blocks
      // scattered through them.
      const int64_t block = 16, cols = (max_k + block - 1) / block;
      const int64_t blocks = n * cols;
      Tensor kpool(blocks, hkv, block, d), vpool(blocks, hkv, block, d);
      kpool.Fill(5);
      vpool.Fill(6);
      std::vector<int32_t> table(static_cast<size_t>(n * cols));
      for (size_t i = 0; i < table.size(); ++i)
        table[i] = static_cast<int32_t>((i * 7) % static_cast<size_t>(blocks));
      Tensor q(n, hq, 1, d), o(n, hq, 1, d), lse(n, hq, 1, 1);  // a decode step
      q.Fill(7);
      octattn_attention_options gopt = Options(1, 0, 0, algo);
      gopt.kv_lens = kv_lens.data();
      gopt.block_table = table.data();
      gopt.block_table_cols = cols;
      size_t bytes = 0;
      REQUIRE(octattn_attention_workspace_size(ctx, &gopt, q.ptr(), kpool.ptr(), vpool.ptr(),
                                               o.ptr(), lse.ptr(), nullptr, &bytes) == OCTATTN_OK);
      std::vector<char> ws(bytes);
      INFO("paged");
      CHECK(AllocationsOf([&] {
              return octattn_attention(ctx, &gopt, q.ptr(), kpool.ptr(), vpool.ptr(), o.ptr(),
                                       lse.ptr(), nullptr, ws.data(), bytes);
            }) == 0);
    }
  }
#endif
}
