// The C contract at its boundary: every status provoked, nothing written on failure,
// option structs, workspace, memory limit, introspection.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "lib/api/context.h"
#include "support.h"

using namespace octtest;

namespace {

#if defined(__aarch64__)
// xsimd's one target on ARM64, and a target of the other architecture.
constexpr octattn_target kXsimdBaseline = OCTATTN_TARGET_NEON;
constexpr octattn_target kForeignTarget = OCTATTN_TARGET_AVX2;
#else
constexpr octattn_target kXsimdBaseline = OCTATTN_TARGET_SSE2;
constexpr octattn_target kForeignTarget = OCTATTN_TARGET_NEON;
#endif

// A small valid problem with canary-filled outputs.
struct Call {
  Problem p{2, 4, 2, 5, 7, 8, 6, 3};
  Tensor o = p.Out(), lse = p.Lse(), w = p.Weights();
  octattn_attention_options opt = Options();
  Call() {
    o.Fill(99, 7, 8);
    lse.Fill(98, 7, 8);
    w.Fill(97, 7, 8);
  }
  octattn_status Run(octattn_context* ctx, void* ws = nullptr, size_t ws_size = 0,
                     bool with_w = true) {
    return octattn_attention(ctx, &opt, p.q.ptr(), p.k.ptr(), p.v.ptr(), o.ptr(), lse.ptr(),
                             with_w ? w.ptr() : nullptr, ws, ws_size);
  }
};

// Whole buffers, bytes: the views of `after` may have been changed by the test.
void ExpectUntouched(const Call& before, const Call& after) {
  auto same = [](const Tensor& x, const Tensor& y) {
    return x.buf.size() == y.buf.size() &&
           std::memcmp(x.buf.data(), y.buf.data(), x.buf.size() * sizeof(float)) == 0;
  };
  CHECK(same(before.o, after.o));
  CHECK(same(before.lse, after.lse));
  CHECK(same(before.w, after.w));
}

// Runs `mutate` on a fresh call and expects `status` with outputs untouched.
template <class Mutate>
void ExpectStatus(octattn_status status, Mutate&& mutate) {
  Context ctx;
  Call call;
  const Call pristine = call;
  octattn_status got = mutate(ctx, call);
  INFO("message: " << ctx.Error());
  CHECK(got == status);
  if (status != OCTATTN_OK) {
    CHECK(!ctx.Error().empty());
    ExpectUntouched(pristine, call);
  }
}

}  // namespace

TEST_CASE("status strings are distinct and static", "[api]") {
  std::vector<std::string> seen;
  for (octattn_status s = OCTATTN_OK; s <= OCTATTN_ERROR_INTERNAL; ++s) {
    const std::string name = octattn_status_string(s);
    CHECK(name != "unknown status");
    for (const auto& other : seen) CHECK(other != name);
    seen.push_back(name);
  }
  CHECK(std::string(octattn_status_string(-1)) == "unknown status");
  CHECK(std::string(octattn_status_string(1000)) == "unknown status");
}

TEST_CASE("version macros and functions agree", "[api]") {
  CHECK(octattn_version_number() == OCTATTN_VERSION_NUMBER);
  CHECK(std::string(octattn_version_string()) == std::to_string(OCTATTN_VERSION_MAJOR) + "." +
                                                     std::to_string(OCTATTN_VERSION_MINOR) + "." +
                                                     std::to_string(OCTATTN_VERSION_PATCH));
}

TEST_CASE("a valid call succeeds", "[api]") {
  ExpectStatus(OCTATTN_OK, [](Context& ctx, Call& c) { return c.Run(ctx); });
}

TEST_CASE("NULL pointers", "[api]") {
  Call c;
  CHECK(c.Run(nullptr) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_context_create(nullptr) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_context_set_threads(nullptr, 1) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_context_get_threads(nullptr, nullptr) == OCTATTN_ERROR_NULL_POINTER);
  Context ctx;
  size_t bytes;
  CHECK(octattn_attention_workspace_size(ctx, nullptr, c.p.q.ptr(), c.p.k.ptr(), c.p.v.ptr(),
                                         c.o.ptr(), nullptr, nullptr,
                                         nullptr) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_attention_workspace_size(ctx, nullptr, c.p.q.ptr(), c.p.k.ptr(), c.p.v.ptr(),
                                         c.o.ptr(), nullptr, nullptr, &bytes) == OCTATTN_OK);
}

TEST_CASE("every status is provoked and leaves the outputs untouched", "[api]") {
  SECTION("null tensor") {
    ExpectStatus(OCTATTN_ERROR_NULL_POINTER, [](Context& ctx, Call& c) {
      return octattn_attention(ctx, &c.opt, c.p.q.ptr(), nullptr, c.p.v.ptr(), c.o.ptr(), nullptr,
                               nullptr, nullptr, 0);
    });
  }
  SECTION("null data") {
    ExpectStatus(OCTATTN_ERROR_NULL_POINTER, [](Context& ctx, Call& c) {
      c.p.v.t.data = nullptr;
      return c.Run(ctx);
    });
  }
  SECTION("zero and negative sizes") {
    ExpectStatus(OCTATTN_ERROR_INVALID_SHAPE, [](Context& ctx, Call& c) {
      c.p.q.t.shape[2] = 0;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_INVALID_SHAPE, [](Context& ctx, Call& c) {
      c.p.k.t.shape[3] = -4;
      return c.Run(ctx);
    });
  }
  SECTION("mismatched sizes") {
    ExpectStatus(OCTATTN_ERROR_INVALID_SHAPE, [](Context& ctx, Call& c) {
      c.p.k.t.shape[0] = 1;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_INVALID_SHAPE, [](Context& ctx, Call& c) {
      c.lse.t.shape[2] = 4;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_INVALID_SHAPE, [](Context& ctx, Call& c) {
      c.w.t.shape[3] = 6;
      return c.Run(ctx);
    });
  }
  SECTION("q_heads not a multiple of kv_heads") {
    ExpectStatus(OCTATTN_ERROR_INVALID_SHAPE, [](Context& ctx, Call& c) {
      c.p.k.t.shape[1] = 3;
      c.p.v.t.shape[1] = 3;
      return c.Run(ctx);
    });
  }
  SECTION("negative stride, overlapping output elements") {
    ExpectStatus(OCTATTN_ERROR_INVALID_STRIDE, [](Context& ctx, Call& c) {
      c.p.q.t.stride[1] = -1;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_INVALID_STRIDE, [](Context& ctx, Call& c) {
      c.o.t.stride[2] = 0;  // every row written to the same place
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_INVALID_STRIDE, [](Context& ctx, Call& c) {
      c.w.t.stride[3] = 2;
      c.w.t.stride[2] = 3;  // columns and rows interleave
      return c.Run(ctx);
    });
  }
  SECTION("overflow") {
    ExpectStatus(OCTATTN_ERROR_OVERFLOW, [](Context& ctx, Call& c) {
      c.p.k.t.stride[0] = INT64_MAX / 2;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_OVERFLOW, [](Context& ctx, Call& c) {
      c.p.k.t.shape[2] = int64_t{1} << 61;
      c.p.k.t.stride[2] = 0;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_OVERFLOW, [](Context& ctx, Call& c) {
      c.p.q.t.stride[0] = int64_t{1} << 62;  // fits int64_t elements, not size_t bytes
      return c.Run(ctx);
    });
  }
  SECTION("aliasing") {
    ExpectStatus(OCTATTN_ERROR_ALIASING, [](Context& ctx, Call& c) {
      c.o.t.data = c.p.v.t.data;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_ALIASING, [](Context& ctx, Call& c) {
      c.lse.t.data = c.w.t.data;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_ALIASING, [](Context& ctx, Call& c) {
      return c.Run(ctx, c.o.buf.data(), c.o.buf.size() * sizeof(float));
    });
    // Two outputs interleaved in one buffer share no element, but their extents
    // overlap: refused, as the header says.
    ExpectStatus(OCTATTN_ERROR_ALIASING, [](Context& ctx, Call& c) {
      // w's buffer is [2, 4, 5, 7]: lse takes its column 0, o its columns 1..6.
      const int64_t strides[4] = {140, 35, 7, 1};
      c.lse.t.data = c.w.buf.data();
      c.o.t.data = c.w.buf.data() + 1;
      std::memcpy(c.lse.t.stride, strides, sizeof(strides));
      std::memcpy(c.o.t.stride, strides, sizeof(strides));
      return c.Run(ctx, nullptr, 0, false);
    });
  }
  SECTION("invalid options") {
    auto opt = [](void (*f)(octattn_attention_options&)) {
      ExpectStatus(OCTATTN_ERROR_INVALID_OPTION, [f](Context& ctx, Call& c) {
        f(c.opt);
        return c.Run(ctx);
      });
    };
    opt([](octattn_attention_options& o) { o.window = -1; });
    opt([](octattn_attention_options& o) { o.stride = -2; });
    opt([](octattn_attention_options& o) { o.causal = 2; });
    opt([](octattn_attention_options& o) { o.algorithm = 17; });
    opt([](octattn_attention_options& o) { o.causal = 0, o.window = 4; });
    opt([](octattn_attention_options& o) { o.q_start = (int64_t{1} << 62) + 1; });
    opt([](octattn_attention_options& o) { o.scale = NAN; });
    opt([](octattn_attention_options& o) { o.scale = INFINITY; });
    opt([](octattn_attention_options& o) { o.reserved = 1; });
    ExpectStatus(OCTATTN_ERROR_INVALID_OPTION, [](Context& ctx, Call& c) {
      c.p.q.t.dtype = 42;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_INVALID_OPTION, [](Context& ctx, Call& c) {
      c.p.v.t.reserved = 3;
      return c.Run(ctx);
    });
    Context ctx;
    CHECK(octattn_context_set_threads(ctx, -1) == OCTATTN_ERROR_INVALID_OPTION);
    CHECK(octattn_context_set_target(ctx, 7, OCTATTN_TARGET_AUTO) == OCTATTN_ERROR_INVALID_OPTION);
    CHECK(octattn_context_set_target(ctx, OCTATTN_BACKEND_XSIMD, 12) ==
          OCTATTN_ERROR_INVALID_OPTION);
    octattn_tensor t;
    const int64_t shape[4] = {1, 1, 1, 1};
    float x;
    CHECK(octattn_tensor_init(&t, &x, shape, 9) == OCTATTN_ERROR_INVALID_OPTION);
    size_t n;
    CHECK(octattn_available_targets(5, nullptr, 0, &n) == OCTATTN_ERROR_INVALID_OPTION);
  }
  SECTION("struct_size") {
    ExpectStatus(OCTATTN_ERROR_STRUCT_SIZE, [](Context& ctx, Call& c) {
      c.opt.struct_size = 8;
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_STRUCT_SIZE, [](Context& ctx, Call& c) {
      struct {
        octattn_attention_options known;
        uint64_t future;
      } bigger;
      bigger.known = c.opt;
      bigger.known.struct_size = sizeof(bigger);
      bigger.future = 1;  // a field this version does not know, set
      return octattn_attention(ctx, &bigger.known, c.p.q.ptr(), c.p.k.ptr(), c.p.v.ptr(), c.o.ptr(),
                               nullptr, nullptr, nullptr, 0);
    });
    Context ctx;
    octattn_run_info info{};
    info.struct_size = 4;
    CHECK(octattn_context_last_run(ctx, &info) == OCTATTN_ERROR_STRUCT_SIZE);
  }
  SECTION("workspace too small") {
    ExpectStatus(OCTATTN_ERROR_WORKSPACE_TOO_SMALL, [](Context& ctx, Call& c) {
      size_t bytes = 0;
      REQUIRE(octattn_attention_workspace_size(ctx, &c.opt, c.p.q.ptr(), c.p.k.ptr(), c.p.v.ptr(),
                                               c.o.ptr(), c.lse.ptr(), c.w.ptr(),
                                               &bytes) == OCTATTN_OK);
      std::vector<char> ws(bytes);
      return c.Run(ctx, ws.data(), bytes - 1);
    });
  }
  SECTION("unsupported") {
    ExpectStatus(OCTATTN_ERROR_UNSUPPORTED, [](Context& ctx, Call& c) {
      c.o.t.dtype = OCTATTN_DTYPE_BF16;  // o is f32 or q's dtype (f32 here)
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_UNSUPPORTED, [](Context& ctx, Call& c) {
      c.lse.t.dtype = OCTATTN_DTYPE_F16;  // lse and weights are f32
      return c.Run(ctx);
    });
    ExpectStatus(OCTATTN_ERROR_UNSUPPORTED, [](Context& ctx, Call& c) {
      c.opt.algorithm = OCTATTN_ALGORITHM_FUSED;  // weights need the naive path
      return c.Run(ctx);
    });
    Context ctx;
    // Highway compiles no SSE2-only target; xsimd none for scalar.
    CHECK(octattn_context_set_target(ctx, OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_SSE2) ==
          OCTATTN_ERROR_UNSUPPORTED);
    CHECK(octattn_context_set_target(ctx, OCTATTN_BACKEND_XSIMD, OCTATTN_TARGET_SCALAR) ==
          OCTATTN_ERROR_UNSUPPORTED);
    // A target of the other architecture (ARM64 on x86-64 and the reverse), both backends.
    for (octattn_backend b : {OCTATTN_BACKEND_HIGHWAY, OCTATTN_BACKEND_XSIMD})
      CHECK(octattn_context_set_target(ctx, b, kForeignTarget) == OCTATTN_ERROR_UNSUPPORTED);
    CHECK(!ctx.Error().empty());
  }
  SECTION("out of memory: the context's memory limit") {
    ExpectStatus(OCTATTN_ERROR_OUT_OF_MEMORY, [](Context& ctx, Call& c) {
      REQUIRE(octattn_context_set_memory_limit(ctx, 64) == OCTATTN_OK);
      return c.Run(ctx);
    });
  }
  SECTION("misaligned data") {
    ExpectStatus(OCTATTN_ERROR_MISALIGNED, [](Context& ctx, Call& c) {
      c.p.q.t.data = reinterpret_cast<char*>(c.p.q.buf.data()) + 1;
      c.p.q.t.shape[0] = 1;  // stay inside the buffer
      return c.Run(ctx);
    });
  }
  SECTION("internal: the guard maps unexpected exceptions") {
    Context ctx;
    const octattn_status st = octattn::api::Guard(
        ctx, []() -> octattn::api::Check { throw std::logic_error("broken invariant"); });
    CHECK(st == OCTATTN_ERROR_INTERNAL);
    CHECK(ctx.Error().find("broken invariant") != std::string::npos);
    CHECK(octattn::api::Guard(ctx, []() -> octattn::api::Check { throw std::bad_alloc(); }) ==
          OCTATTN_ERROR_OUT_OF_MEMORY);
  }
}

TEST_CASE("a caller's workspace: exact size works, gives the same bytes, is not limited", "[api]") {
  for (octattn_algorithm algo : {OCTATTN_ALGORITHM_REFERENCE, OCTATTN_ALGORITHM_NAIVE}) {
    Context ctx;
    Call a, b;
    a.opt.algorithm = b.opt.algorithm = algo;
    size_t bytes = 0;
    REQUIRE(octattn_attention_workspace_size(ctx, &a.opt, a.p.q.ptr(), a.p.k.ptr(), a.p.v.ptr(),
                                             a.o.ptr(), a.lse.ptr(), a.w.ptr(),
                                             &bytes) == OCTATTN_OK);
    REQUIRE(a.Run(ctx) == OCTATTN_OK);
    REQUIRE(octattn_context_set_memory_limit(ctx, 1) == OCTATTN_OK);
    std::vector<char> ws(bytes);
    REQUIRE(b.Run(ctx, ws.data(), bytes) == OCTATTN_OK);
    CHECK(BytesEqual(a.o, b.o));
    CHECK(BytesEqual(a.lse, b.lse));
    CHECK(BytesEqual(a.w, b.w));
  }
}

TEST_CASE("options: defaults, NULL means defaults, larger struct with zero tail", "[api]") {
  octattn_attention_options o;
  REQUIRE(octattn_attention_options_init(&o) == OCTATTN_OK);
  CHECK(o.struct_size == sizeof(o));
  CHECK(o.causal == 1);
  CHECK(o.window == 0);
  CHECK(o.stride == 0);
  CHECK(o.q_start == OCTATTN_Q_START_DEFAULT);
  CHECK(o.scale == 0.0f);
  CHECK(o.algorithm == OCTATTN_ALGORITHM_AUTO);
  CHECK(octattn_attention_options_init(nullptr) == OCTATTN_ERROR_NULL_POINTER);

  Context ctx;
  Call a, b, c;
  REQUIRE(a.Run(ctx) == OCTATTN_OK);
  REQUIRE(octattn_attention(ctx, nullptr, b.p.q.ptr(), b.p.k.ptr(), b.p.v.ptr(), b.o.ptr(),
                            b.lse.ptr(), b.w.ptr(), nullptr, 0) == OCTATTN_OK);
  struct {
    octattn_attention_options known;
    uint64_t future[2];
  } bigger{};
  bigger.known = c.opt;
  bigger.known.struct_size = sizeof(bigger);
  REQUIRE(octattn_attention(ctx, &bigger.known, c.p.q.ptr(), c.p.k.ptr(), c.p.v.ptr(), c.o.ptr(),
                            c.lse.ptr(), c.w.ptr(), nullptr, 0) == OCTATTN_OK);
  CHECK(BytesEqual(a.o, b.o));
  CHECK(BytesEqual(a.o, c.o));
}

TEST_CASE("options: init_size writes the caller's struct only, any version", "[api]") {
  octattn_attention_options current;
  REQUIRE(octattn_attention_options_init(&current) == OCTATTN_OK);
  // Each version's size, a size between two versions, and a newer header's larger
  // struct: exactly struct_size bytes written, the canaries after them untouched.
  for (size_t size :
       {size_t{48}, size_t{56}, size_t{60}, size_t{104}, sizeof(current), sizeof(current) + 24}) {
    std::vector<unsigned char> buf(sizeof(current) + 64, 0xA5);
    auto* o = reinterpret_cast<octattn_attention_options*>(buf.data());
    REQUIRE(octattn_attention_options_init_size(o, size) == OCTATTN_OK);
    CHECK(o->struct_size == size);
    CHECK(o->causal == 1);
    CHECK(o->q_start == OCTATTN_Q_START_DEFAULT);
    const size_t known = std::min(size, sizeof(current));
    CHECK(std::memcmp(buf.data() + sizeof(size_t),
                      reinterpret_cast<const unsigned char*>(&current) + sizeof(size_t),
                      known - sizeof(size_t)) == 0);
    for (size_t i = known; i < size; ++i) CHECK(buf[i] == 0);
    for (size_t i = size; i < buf.size(); ++i) CHECK(buf[i] == 0xA5);
  }
  std::vector<unsigned char> buf(sizeof(current), 0xA5);
  auto* o = reinterpret_cast<octattn_attention_options*>(buf.data());
  CHECK(octattn_attention_options_init_size(o, 47) == OCTATTN_ERROR_STRUCT_SIZE);
  CHECK(octattn_attention_options_init_size(o, 0) == OCTATTN_ERROR_STRUCT_SIZE);
  for (unsigned char x : buf) CHECK(x == 0xA5);  // nothing written on failure
  CHECK(octattn_attention_options_init_size(nullptr, sizeof(current)) ==
        OCTATTN_ERROR_NULL_POINTER);

  // A 0.1-sized struct so initialized runs as the defaults do.
  Context ctx;
  Call a, b;
  REQUIRE(octattn_attention(ctx, nullptr, a.p.q.ptr(), a.p.k.ptr(), a.p.v.ptr(), a.o.ptr(),
                            a.lse.ptr(), a.w.ptr(), nullptr, 0) == OCTATTN_OK);
  REQUIRE(octattn_attention_options_init_size(o, 48) == OCTATTN_OK);
  REQUIRE(octattn_attention(ctx, o, b.p.q.ptr(), b.p.k.ptr(), b.p.v.ptr(), b.o.ptr(), b.lse.ptr(),
                            b.w.ptr(), nullptr, 0) == OCTATTN_OK);
  CHECK(BytesEqual(a.o, b.o));
}

TEST_CASE("introspection: last run, targets, threads, environment", "[api][dispatch]") {
  Context ctx(1);
  int32_t threads = -1;
  REQUIRE(octattn_context_get_threads(ctx, &threads) == OCTATTN_OK);
  CHECK(threads == 1);
  Call c;
  REQUIRE(c.Run(ctx) == OCTATTN_OK);
  octattn_run_info info{};
  info.struct_size = sizeof(info);
  REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
  CHECK(info.algorithm == OCTATTN_ALGORITHM_NAIVE);  // weights were requested
  CHECK(info.backend == OCTATTN_BACKEND_HIGHWAY);
  CHECK(info.threads == 1);
  octattn_target best[8];
  size_t n = 0;
  REQUIRE(octattn_available_targets(OCTATTN_BACKEND_HIGHWAY, best, 8, &n) == OCTATTN_OK);
  REQUIRE(n >= 1);
  CHECK(info.target == best[0]);

  c.opt.algorithm = OCTATTN_ALGORITHM_REFERENCE;
  REQUIRE(c.Run(ctx) == OCTATTN_OK);
  REQUIRE(octattn_context_last_run(ctx, &info) == OCTATTN_OK);
  CHECK(info.algorithm == OCTATTN_ALGORITHM_REFERENCE);
  CHECK(info.target == OCTATTN_TARGET_SCALAR);

  size_t count = 0;
  REQUIRE(octattn_available_targets(OCTATTN_BACKEND_XSIMD, nullptr, 0, &count) == OCTATTN_OK);
  CHECK(count >= 1);  // sse2 at least on any x86-64, neon on any ARM64
  CHECK(octattn_available_targets(OCTATTN_BACKEND_XSIMD, nullptr, 0, nullptr) ==
        OCTATTN_ERROR_NULL_POINTER);

  // OCTATTN_BACKEND / OCTATTN_TARGET choose a new context's default.
  setenv("OCTATTN_BACKEND", "xsimd", 1);
  setenv("OCTATTN_TARGET", kXsimdBaseline == OCTATTN_TARGET_SSE2 ? "sse2" : "neon", 1);
  {
    Context env_ctx;
    Call e;
    REQUIRE(e.Run(env_ctx) == OCTATTN_OK);
    REQUIRE(octattn_context_last_run(env_ctx, &info) == OCTATTN_OK);
    CHECK(info.backend == OCTATTN_BACKEND_XSIMD);
    CHECK(info.target == kXsimdBaseline);
  }
  unsetenv("OCTATTN_BACKEND");
  unsetenv("OCTATTN_TARGET");
  // OCTATTN_THREADS sets a new context's thread cap (a value above the hardware's is
  // capped, as set_threads caps it); anything but a decimal integer is ignored.
  int32_t all = 0, got = 0;
  octattn_context* raw = nullptr;
  REQUIRE(octattn_context_create(&raw) == OCTATTN_OK);
  REQUIRE(octattn_context_get_threads(raw, &all) == OCTATTN_OK);
  octattn_context_destroy(raw);
  for (const char* text : {"1", "0", "99999", "-1", "2x", "", "99999999999"}) {
    setenv("OCTATTN_THREADS", text, 1);
    REQUIRE(octattn_context_create(&raw) == OCTATTN_OK);
    REQUIRE(octattn_context_get_threads(raw, &got) == OCTATTN_OK);
    octattn_context_destroy(raw);
    INFO("OCTATTN_THREADS=" << text);
    CHECK(got == (std::string(text) == "1" ? 1 : all));
  }
  unsetenv("OCTATTN_THREADS");
  CHECK(std::string(octattn_context_last_error(nullptr)).empty());
  octattn_context_destroy(nullptr);  // accepted
}

TEST_CASE("tensor_init describes both layouts", "[api]") {
  float data[2 * 3 * 4 * 5];
  const int64_t shape[4] = {2, 3, 4, 5};
  octattn_tensor t;
  REQUIRE(octattn_tensor_init(&t, data, shape, OCTATTN_LAYOUT_BHTD) == OCTATTN_OK);
  CHECK(t.stride[0] == 60);
  CHECK(t.stride[1] == 20);
  CHECK(t.stride[2] == 5);
  CHECK(t.stride[3] == 1);
  REQUIRE(octattn_tensor_init(&t, data, shape, OCTATTN_LAYOUT_BTHD) == OCTATTN_OK);
  CHECK(t.stride[0] == 60);
  CHECK(t.stride[1] == 5);
  CHECK(t.stride[2] == 15);
  CHECK(t.stride[3] == 1);
  const int64_t bad[4] = {2, 0, 4, 5};
  CHECK(octattn_tensor_init(&t, data, bad, OCTATTN_LAYOUT_BHTD) == OCTATTN_ERROR_INVALID_SHAPE);
  CHECK(octattn_tensor_init(nullptr, data, shape, OCTATTN_LAYOUT_BHTD) ==
        OCTATTN_ERROR_NULL_POINTER);
  const int64_t huge[4] = {int64_t{1} << 40, int64_t{1} << 40, 1, 1};
  CHECK(octattn_tensor_init(&t, data, huge, OCTATTN_LAYOUT_BHTD) == OCTATTN_ERROR_OVERFLOW);
}

TEST_CASE("last_run: defined before any call, written only as far as struct_size", "[api]") {
  Context ctx(1);
  struct {
    octattn_run_info info;
    unsigned char tail[32];
  } big;
  std::memset(&big, 0xA5, sizeof(big));
  big.info.struct_size = sizeof(big);
  REQUIRE(octattn_context_last_run(ctx, &big.info) == OCTATTN_OK);
  CHECK(big.info.struct_size == sizeof(big));           // left as given
  CHECK(big.info.algorithm == OCTATTN_ALGORITHM_AUTO);  // nothing has run yet
  CHECK(big.info.backend == OCTATTN_BACKEND_AUTO);
  CHECK(big.info.target == OCTATTN_TARGET_AUTO);
  CHECK(big.info.threads == 0);
  for (unsigned char b : big.tail) CHECK(b == 0xA5);
  // Head layout copies record nothing; the stages do.
  Tensor src(1, 3, 8, 1), dst(1, 2, 3, 4);
  src.Fill(1);
  REQUIRE(octattn_split_heads(ctx, src.ptr(), 2, dst.ptr()) == OCTATTN_OK);
  REQUIRE(octattn_context_last_run(ctx, &big.info) == OCTATTN_OK);
  CHECK(big.info.algorithm == OCTATTN_ALGORITHM_AUTO);
  Tensor scores(1, 2, 3, 3);
  scores.Fill(2);
  REQUIRE(octattn_softmax(ctx, scores.ptr(), nullptr) == OCTATTN_OK);
  REQUIRE(octattn_context_last_run(ctx, &big.info) == OCTATTN_OK);
  CHECK(big.info.algorithm == OCTATTN_ALGORITHM_NAIVE);
  CHECK(big.info.threads == 1);
  for (unsigned char b : big.tail) CHECK(b == 0xA5);
}

TEST_CASE("last_error keeps the last failure's message across later successes", "[api]") {
  Context ctx;
  Call c;
  c.opt.window = -1;
  REQUIRE(c.Run(ctx) == OCTATTN_ERROR_INVALID_OPTION);
  const std::string message = ctx.Error();
  CHECK(message.find("window") != std::string::npos);
  c.opt.window = 0;
  REQUIRE(c.Run(ctx) == OCTATTN_OK);
  CHECK(ctx.Error() == message);
}

TEST_CASE("options: an options struct of a newer header is read up to what this library knows",
          "[api]") {
  // A caller built against a newer header passes a larger struct: known fields are
  // read, a zero tail accepted, a non-zero byte anywhere past the known fields refused.
  Context ctx;
  Call a;
  a.opt.window = 3;
  REQUIRE(a.Run(ctx, nullptr, 0, false) == OCTATTN_OK);
  for (size_t extra : {size_t{1}, size_t{8}, size_t{24}}) {
    std::vector<unsigned char> buf(sizeof(octattn_attention_options) + extra, 0);
    octattn_attention_options opt = a.opt;
    opt.struct_size = buf.size();
    std::memcpy(buf.data(), &opt, sizeof(opt));
    auto* big = reinterpret_cast<octattn_attention_options*>(buf.data());
    Call b;
    REQUIRE(octattn_attention(ctx, big, b.p.q.ptr(), b.p.k.ptr(), b.p.v.ptr(), b.o.ptr(),
                              b.lse.ptr(), nullptr, nullptr, 0) == OCTATTN_OK);
    CHECK(BytesEqual(a.o, b.o));
    buf.back() = 1;
    Call d;
    const Call pristine = d;
    CHECK(octattn_attention(ctx, big, d.p.q.ptr(), d.p.k.ptr(), d.p.v.ptr(), d.o.ptr(), d.lse.ptr(),
                            nullptr, nullptr, 0) == OCTATTN_ERROR_STRUCT_SIZE);
    ExpectUntouched(pristine, d);
  }
}

TEST_CASE("sizes that cannot be allocated are a status, fast, with nothing allocated or written",
          "[api]") {
  // Stride-0 (broadcast) inputs of 2^31 rows pass validation. Outputs may not broadcast
  // (their elements would overlap): they get real strides, and with 2^31 rows a far
  // address that the call never touches, since it must fail before writing.
  float one = 1.0f;
  const int64_t n = int64_t{1} << 31;
  octattn_tensor q{}, k{}, v{};
  for (octattn_tensor* t : {&q, &k, &v}) {
    t->data = &one;
    t->dtype = OCTATTN_DTYPE_F32;
    t->shape[0] = t->shape[1] = 1;
    t->shape[2] = n;
    t->shape[3] = 64;  // every stride 0
  }
  std::vector<float> out(64, 7.0f), lse_out(1, 7.0f);
  octattn_tensor o{}, lse{};
  o.data = out.data();
  o.dtype = lse.dtype = OCTATTN_DTYPE_F32;
  lse.data = lse_out.data();
  const int64_t o_shape[4] = {1, 1, 1, 64}, o_stride[4] = {64, 64, 64, 1};
  for (int d = 0; d < 4; ++d) {
    o.shape[d] = o_shape[d];
    o.stride[d] = o_stride[d];
    lse.shape[d] = d == 3 ? 1 : o_shape[d];
    lse.stride[d] = 1;
  }
  Context ctx(1);
  // One query row at position 2^31 - 1 against 2^31 keys: the reference needs 2^31 + 64
  // doubles per slot (16 GiB), over the context's limit.
  q.shape[2] = 1;
  auto opt = Options(1, 0, 0, OCTATTN_ALGORITHM_REFERENCE);
  REQUIRE(octattn_context_set_memory_limit(ctx, uint64_t{1} << 30) == OCTATTN_OK);
  CHECK(octattn_attention(ctx, &opt, &q, &k, &v, &o, &lse, nullptr, nullptr, 0) ==
        OCTATTN_ERROR_OUT_OF_MEMORY);
  // 2^31 query rows against 2^31 keys: the naive path's scores are 2^64 bytes.
  q.shape[2] = o.shape[2] = n;
  o.data = reinterpret_cast<float*>(uintptr_t{1} << 44);  // a far address, never touched
  opt.algorithm = OCTATTN_ALGORITHM_NAIVE;
  size_t bytes = 0;
  CHECK(octattn_attention_workspace_size(ctx, &opt, &q, &k, &v, &o, nullptr, nullptr, &bytes) ==
        OCTATTN_ERROR_OVERFLOW);
  CHECK(ctx.Error().find("overflows") != std::string::npos);
  CHECK(octattn_attention(ctx, &opt, &q, &k, &v, &o, nullptr, nullptr, nullptr, 0) ==
        OCTATTN_ERROR_OVERFLOW);
  std::vector<char> ws(1024);
  CHECK(octattn_attention(ctx, &opt, &q, &k, &v, &o, nullptr, nullptr, ws.data(), ws.size()) ==
        OCTATTN_ERROR_OVERFLOW);
  for (float x : out) CHECK(x == 7.0f);
  CHECK(lse_out[0] == 7.0f);
}

TEST_CASE("options of version 0.1's size: k_start keeps its default, whatever follows", "[api]") {
  // A 0.1 caller's struct is 48 bytes: the library must not read k_start from beyond it.
  Context ctx;
  Call a, b;
  a.opt.window = 3;
  REQUIRE(a.Run(ctx, nullptr, 0, false) == OCTATTN_OK);
  std::vector<unsigned char> buf(sizeof(octattn_attention_options), 0xA5);
  octattn_attention_options opt = a.opt;
  opt.struct_size = 48;
  std::memcpy(buf.data(), &opt, 48);  // bytes 48.. (k_start) stay garbage
  auto* old = reinterpret_cast<octattn_attention_options*>(buf.data());
  REQUIRE(octattn_attention(ctx, old, b.p.q.ptr(), b.p.k.ptr(), b.p.v.ptr(), b.o.ptr(), b.lse.ptr(),
                            nullptr, nullptr, 0) == OCTATTN_OK);
  CHECK(BytesEqual(a.o, b.o));
  // The options' positions stay within +-2^62, their difference too.
  ExpectStatus(OCTATTN_ERROR_INVALID_OPTION, [](Context& c, Call& x) {
    x.opt.k_start = (int64_t{1} << 62) + 1;
    return x.Run(c);
  });
  ExpectStatus(OCTATTN_ERROR_INVALID_OPTION, [](Context& c, Call& x) {
    x.opt.k_start = -(int64_t{1} << 62);
    x.opt.q_start = int64_t{1} << 62;
    return x.Run(c);
  });
}

TEST_CASE("options: a struct_size between two versions reads only the fields it covers whole",
          "[api]") {
  // 52 bytes cover half of k_start: it keeps its default (the bytes are not read).
  Context ctx;
  Call a, b;
  REQUIRE(a.Run(ctx, nullptr, 0, false) == OCTATTN_OK);
  octattn_attention_options opt = a.opt;
  opt.k_start = -1;  // would move every key if it were read
  opt.struct_size = 52;
  REQUIRE(octattn_attention(ctx, &opt, b.p.q.ptr(), b.p.k.ptr(), b.p.v.ptr(), b.o.ptr(),
                            b.lse.ptr(), nullptr, nullptr, 0) == OCTATTN_OK);
  CHECK(BytesEqual(a.o, b.o));
}

TEST_CASE("layout: the structs' sizes and offsets as the library was built", "[api]") {
  size_t n = 12345;
  CHECK(octattn_struct_layout("octattn_tensor", nullptr, &n) == OCTATTN_OK);
  CHECK(n == sizeof(octattn_tensor));
  CHECK(octattn_struct_layout("octattn_tensor", "stride", &n) == OCTATTN_OK);
  CHECK(n == offsetof(octattn_tensor, stride));
  CHECK(octattn_struct_layout("octattn_attention_options", nullptr, &n) == OCTATTN_OK);
  CHECK(n == sizeof(octattn_attention_options));
  CHECK(octattn_struct_layout("octattn_attention_options", "mask", &n) == OCTATTN_OK);
  CHECK(n == offsetof(octattn_attention_options, mask));
  CHECK(octattn_struct_layout("octattn_attention_options", "k_start", &n) == OCTATTN_OK);
  CHECK(n == offsetof(octattn_attention_options, k_start));
  CHECK(octattn_struct_layout("octattn_run_info", "threads", &n) == OCTATTN_OK);
  CHECK(n == offsetof(octattn_run_info, threads));
  n = 777;
  CHECK(octattn_struct_layout("octattn_tensor", "strides", &n) == OCTATTN_ERROR_INVALID_OPTION);
  CHECK(octattn_struct_layout("octattn_context", nullptr, &n) == OCTATTN_ERROR_INVALID_OPTION);
  CHECK(n == 777);  // not written on failure
  CHECK(octattn_struct_layout(nullptr, nullptr, &n) == OCTATTN_ERROR_NULL_POINTER);
  CHECK(octattn_struct_layout("octattn_tensor", nullptr, nullptr) == OCTATTN_ERROR_NULL_POINTER);
}
