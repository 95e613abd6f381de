// Golden data from PyTorch (tests/golden/make_golden.py): every path and target agrees
// with scaled_dot_product_attention on the write-up's walkthrough and three variants, with
// explicit torch operations on six cases of score modifiers, and with SDPA on two padded
// batches given as a boolean mask (the library gets the sequences' lengths instead), and
// with SDPA on bf16 and f16 tensors (float64 on their values, and PyTorch's own kernel);
// and (tests/golden/make_golden_caches.py) with PyTorch's attention over the caches it
// quantized, DeepSeek's absorbed MLA math and key lists as explicit gathers.
#include <catch2/catch.hpp>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "lib/base/dtype.h"
#include "support.h"

using namespace octtest;

namespace {

struct Golden {
  std::string name;
  int64_t batch, q_heads, kv_heads, q_len, kv_len, dim, window, stride;
  std::vector<float> q, k, v, o;
  float softcap = 0;
  int64_t chunk = 0;
  std::vector<float> slopes, sinks, bias, mask;
  std::vector<int64_t> kv_starts, kv_lens;
  std::string dtype = "f32";
  std::vector<float> o16;  // PyTorch's 16-bit kernel
};

// Calls f(tag, rest of the line) for each line of a golden file but comments.
template <class F>
void ForEachLine(const char* path, F f) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string tag;
    s >> tag;
    f(tag, s);
  }
}

std::vector<Golden> Load() {
  std::vector<Golden> out;
  ForEachLine(OCTATTN_GOLDEN_FILE, [&](const std::string& tag, std::istringstream& s) {
    if (tag == "case") {
      Golden g;
      s >> g.name >> g.batch >> g.q_heads >> g.kv_heads >> g.q_len >> g.kv_len >> g.dim >>
          g.window >> g.stride;
      out.push_back(g);
      return;
    }
    REQUIRE(!out.empty());
    Golden& g = out.back();
    if (tag == "softcap") {
      s >> g.softcap;
      return;
    }
    if (tag == "chunk") {
      s >> g.chunk;
      return;
    }
    if (tag == "dtype") {
      s >> g.dtype;
      return;
    }
    if (tag == "kv_starts" || tag == "kv_lens") {
      std::vector<int64_t>& lens = tag == "kv_starts" ? g.kv_starts : g.kv_lens;
      int64_t n;
      while (s >> n) lens.push_back(n);
      REQUIRE(static_cast<int64_t>(lens.size()) == g.batch);
      return;
    }
    std::vector<float>* dst = tag == "q"        ? &g.q
                              : tag == "k"      ? &g.k
                              : tag == "v"      ? &g.v
                              : tag == "slopes" ? &g.slopes
                              : tag == "sinks"  ? &g.sinks
                              : tag == "bias"   ? &g.bias
                              : tag == "mask"   ? &g.mask
                              : tag == "o16"    ? &g.o16
                                                : &g.o;
    REQUIRE((tag == "o" || dst != &g.o));
    float x;
    while (s >> x) dst->push_back(x);
  });
  return out;
}

Tensor Make(int64_t a, int64_t b, int64_t c, int64_t d, const std::vector<float>& values) {
  Tensor t(a, b, c, d);
  REQUIRE(values.size() == t.buf.size());
  t.buf = values;
  t.t.data = t.buf.data();
  return t;
}

}  // namespace

TEST_CASE("PyTorch golden outputs", "[golden][dispatch]") {
  const auto cases = Load();
  REQUIRE(cases.size() == 16);
  std::vector<std::pair<octattn_algorithm, Target>> paths{
      {OCTATTN_ALGORITHM_REFERENCE, {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO}}};
  for (const Target& t : AllTargets()) paths.push_back({OCTATTN_ALGORITHM_AUTO, t});
  for (const Golden& g : cases) {
    if (g.dtype != "f32") continue;  // the next test
    Tensor q = Make(g.batch, g.q_heads, g.q_len, g.dim, g.q);
    Tensor k = Make(g.batch, g.kv_heads, g.kv_len, g.dim, g.k);
    Tensor v = Make(g.batch, g.kv_heads, g.kv_len, g.dim, g.v);
    Tensor want = Make(g.batch, g.q_heads, g.q_len, g.dim, g.o);
    Tensor bias;
    std::vector<uint8_t> mask_bytes(g.mask.begin(), g.mask.end());
    octattn_tensor mask{};
    if (!g.bias.empty()) bias = Make(g.batch, g.q_heads, g.q_len, g.kv_len, g.bias);
    if (!g.mask.empty()) {
      const int64_t shape[4] = {g.batch, g.q_heads, g.q_len, g.kv_len};
      REQUIRE(octattn_tensor_init(&mask, mask_bytes.data(), shape, OCTATTN_LAYOUT_BHTD) ==
              OCTATTN_OK);
      mask.dtype = OCTATTN_DTYPE_BOOL;
    }
    for (const auto& path : paths) {
      INFO(g.name << " " << octattn_algorithm_name(path.first) << " " << path.second.Name());
      Context ctx(path.second);
      Tensor o(g.batch, g.q_heads, g.q_len, g.dim);
      octattn_attention_options opt = Options(1, g.window, g.stride, path.first);
      opt.softcap = g.softcap;
      opt.chunk = g.chunk;
      if (!g.slopes.empty()) opt.alibi_slopes = g.slopes.data();
      if (!g.sinks.empty()) opt.sinks = g.sinks.data();
      if (!g.bias.empty()) opt.bias = bias.ptr();
      if (!g.mask.empty()) opt.mask = &mask;
      if (!g.kv_starts.empty()) opt.kv_starts = g.kv_starts.data();
      if (!g.kv_lens.empty()) opt.kv_lens = g.kv_lens.data();
      Attend(ctx, opt, q, k, v, o);
      CHECK(MaxDiff(o, want) <= 1e-6);
    }
  }
}

namespace {

// 16-bit copy of exactly representable values, and the widened values of one.
std::vector<uint16_t> Narrow(const std::vector<float>& x, octattn_dtype type) {
  std::vector<uint16_t> h;
  for (float f : x) {
    h.push_back(type == OCTATTN_DTYPE_BF16 ? octattn::base::F32ToBf16(f)
                                           : octattn::base::F32ToF16(f));
    REQUIRE((type == OCTATTN_DTYPE_BF16 ? octattn::base::Bf16ToF32(h.back())
                                        : octattn::base::F16ToF32(h.back())) == f);
  }
  return h;
}
octattn_tensor View16(std::vector<uint16_t>& h, const int64_t shape[4], octattn_dtype type) {
  octattn_tensor t;
  REQUIRE(octattn_tensor_init(&t, h.data(), shape, OCTATTN_LAYOUT_BHTD) == OCTATTN_OK);
  t.dtype = type;
  return t;
}

}  // namespace

// The library's 16-bit o is its f32 result rounded to 16 bits: within the f32 bound plus
// half a unit in the last place (2^-8 of |o| for bf16, 2^-11 for f16) of float64 SDPA on
// the same values. PyTorch's 16-bit kernel rounds o (and, for bf16, its weights) too:
// the two agree to a unit of the 16-bit type at max|v| (2^-7 and 2^-10 of it).
TEST_CASE("PyTorch golden outputs in bf16 and f16", "[golden][dtype][dispatch]") {
  std::vector<std::pair<octattn_algorithm, Target>> paths{
      {OCTATTN_ALGORITHM_REFERENCE, {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO}}};
  for (const Target& t : AllTargets()) {
    paths.push_back({OCTATTN_ALGORITHM_NAIVE, t});
    paths.push_back({OCTATTN_ALGORITHM_FUSED, t});
  }
  int seen = 0;
  for (const Golden& g : Load()) {
    if (g.dtype == "f32") continue;
    ++seen;
    const octattn_dtype type = g.dtype == "bf16" ? OCTATTN_DTYPE_BF16 : OCTATTN_DTYPE_F16;
    const double half_ulp = type == OCTATTN_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
    std::vector<uint16_t> q16 = Narrow(g.q, type), k16 = Narrow(g.k, type), v16 = Narrow(g.v, type);
    const int64_t qs[4] = {g.batch, g.q_heads, g.q_len, g.dim};
    const int64_t ks[4] = {g.batch, g.kv_heads, g.kv_len, g.dim};
    const octattn_tensor q = View16(q16, qs, type), k = View16(k16, ks, type),
                         v = View16(v16, ks, type);
    double max_v = 0;
    for (float x : g.v) max_v = std::max(max_v, std::fabs(static_cast<double>(x)));
    for (const auto& path : paths) {
      INFO(g.name << " " << octattn_algorithm_name(path.first) << " " << path.second.Name());
      Context ctx(path.second);
      std::vector<uint16_t> o16(g.o.size(), 0);
      octattn_tensor o = View16(o16, qs, type);
      const octattn_attention_options opt = Options(1, 0, 0, path.first);
      REQUIRE(octattn_attention(ctx, &opt, &q, &k, &v, &o, nullptr, nullptr, nullptr, 0) ==
              OCTATTN_OK);
      REQUIRE(g.o16.size() == g.o.size());
      double worst64 = 0, worst_torch = 0;
      for (size_t i = 0; i < o16.size(); ++i) {
        const double got = type == OCTATTN_DTYPE_BF16 ? octattn::base::Bf16ToF32(o16[i])
                                                      : octattn::base::F16ToF32(o16[i]);
        // avx512_bf16's and amx_bf16's fused bf16 weighted sums: weights rounded to bf16
        // (the header)
        const double pairs = type == OCTATTN_DTYPE_BF16 && path.first == OCTATTN_ALGORITHM_FUSED &&
                                     (path.second.target == OCTATTN_TARGET_AVX512_BF16 ||
                                      path.second.target == OCTATTN_TARGET_AMX_BF16)
                                 ? 0x1p-8 * max_v
                                 : 0.0;
        const double allowed =
            1e-6 * max_v + pairs + half_ulp * std::fabs(static_cast<double>(g.o[i]));
        worst64 = std::max(worst64, std::fabs(got - g.o[i]) - allowed);
        worst_torch = std::max(worst_torch, std::fabs(got - g.o16[i]));
      }
      CHECK(worst64 <= 0);
      CHECK(worst_torch <= 2 * half_ulp * max_v);
    }
  }
  CHECK(seen == 4);
}

namespace {

// A tensor of tests/golden/caches.txt: its dtype, logical shape and bytes as PyTorch laid
// them out (row-major; blocked and latent rows whole).
struct Raw {
  octattn_dtype dtype = OCTATTN_DTYPE_F32;
  int64_t shape[4] = {0, 0, 0, 0};
  std::vector<uint8_t> bytes;
  std::string of;  // a view: the bytes of tensor `of` of the case, this shape[3]
};

struct CacheCase {
  std::string name;
  std::map<std::string, Raw> tensors;
  double scale = 0, bound = 0;
  int64_t k_scale_rows = 0;
};

octattn_dtype DtypeNamed(const std::string& s) {
  static const std::map<std::string, octattn_dtype> names{{"f32", OCTATTN_DTYPE_F32},
                                                          {"bf16", OCTATTN_DTYPE_BF16},
                                                          {"int8", OCTATTN_DTYPE_INT8},
                                                          {"fp8_e4m3", OCTATTN_DTYPE_FP8_E4M3},
                                                          {"fp8_e5m2", OCTATTN_DTYPE_FP8_E5M2},
                                                          {"q8_0", OCTATTN_DTYPE_Q8_0},
                                                          {"q4_0", OCTATTN_DTYPE_Q4_0},
                                                          {"int32", OCTATTN_DTYPE_INT32},
                                                          {"fp8_ds_mla", OCTATTN_DTYPE_FP8_DS_MLA}};
  const auto it = names.find(s);
  REQUIRE(it != names.end());
  return it->second;
}

double HexDouble(const std::string& s) {
  return std::strtod(s.c_str(), nullptr);
}  // C++17 streams do not read hex floats

std::vector<CacheCase> LoadCaches() {
  std::vector<CacheCase> out;
  ForEachLine(OCTATTN_GOLDEN_CACHES_FILE, [&](const std::string& tag, std::istringstream& s) {
    if (tag == "case") {
      out.emplace_back();
      s >> out.back().name;
      return;
    }
    REQUIRE(!out.empty());
    CacheCase& c = out.back();
    std::string a, b;
    if (tag == "tensor") {
      std::string dtype, hex;
      s >> a >> dtype;
      Raw& r = c.tensors[a];
      r.dtype = DtypeNamed(dtype);
      for (int64_t& x : r.shape) s >> x;
      s >> hex;
      REQUIRE(hex.size() % 2 == 0);
      for (size_t i = 0; i < hex.size(); i += 2)
        r.bytes.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    } else if (tag == "view") {
      int64_t last;
      s >> a >> b >> last;
      REQUIRE(c.tensors.count(b) == 1);
      Raw& r = c.tensors[a];
      r = c.tensors[b];
      r.bytes.clear();
      r.of = b;
      r.shape[3] = last;
    } else if (tag == "scale" || tag == "bound") {
      s >> a;
      (tag == "scale" ? c.scale : c.bound) = HexDouble(a);
    } else {
      REQUIRE(tag == "k_scale_rows");
      s >> c.k_scale_rows;
    }
  });
  return out;
}

// The row-major tensor over r's bytes: strides in elements, in blocks of 32 values for
// Q8_0 and Q4_0, in rows for FP8_DS_MLA (row-major over the stored row's width: the
// viewed tensor's for a view).
octattn_tensor View(const CacheCase& c, const std::string& name) {
  const Raw& r = c.tensors.at(name);
  const Raw& data = r.of.empty() ? r : c.tensors.at(r.of);
  octattn_tensor t{};
  t.data = const_cast<uint8_t*>(data.bytes.data());
  t.dtype = r.dtype;
  for (int d = 0; d < 4; ++d) t.shape[d] = r.shape[d];
  int64_t unit = data.shape[3];
  if (r.dtype == OCTATTN_DTYPE_Q8_0 || r.dtype == OCTATTN_DTYPE_Q4_0) unit /= 32;
  if (r.dtype == OCTATTN_DTYPE_FP8_DS_MLA) unit = 1;
  t.stride[3] = 1;
  t.stride[2] = unit;
  t.stride[1] = unit * data.shape[2];
  t.stride[0] = t.stride[1] * data.shape[1];
  return t;
}

std::vector<float> FloatsOf(const Raw& r) {
  REQUIRE(r.dtype == OCTATTN_DTYPE_F32);
  std::vector<float> f(r.bytes.size() / 4);
  std::memcpy(f.data(), r.bytes.data(), r.bytes.size());
  return f;
}

}  // namespace

// Quantized caches (int8 by token and group, KIVI's keys by channel, fp8 e4m3 with
// vLLM's per-head scales and e5m2 with one scale, ggml's q8_0 and q4_0 blocks),
// DeepSeek's absorbed MLA over bf16 and fp8 latent rows (v a view of k), and key lists
// (an indexer's unsorted lists with duplicates and a local window; DeepSeek V3.2's
// sparse MLA over fp8 latent rows): every algorithm on every target within the header's
// bound of PyTorch's float64 attention on the values PyTorch dequantized.
TEST_CASE("PyTorch golden outputs over quantized caches, MLA and key lists",
          "[golden][quant][dispatch]") {
  const auto cases = LoadCaches();
  REQUIRE(cases.size() == 10);
  std::vector<std::pair<octattn_algorithm, Target>> paths{
      {OCTATTN_ALGORITHM_REFERENCE, {OCTATTN_BACKEND_HIGHWAY, OCTATTN_TARGET_AUTO}}};
  for (const Target& t : AllTargets()) {
    paths.push_back({OCTATTN_ALGORITHM_NAIVE, t});
    paths.push_back({OCTATTN_ALGORITHM_FUSED, t});
  }
  for (const CacheCase& c : cases) {
    const auto& ts = c.tensors;
    const octattn_tensor q = View(c, "q"), k = View(c, "k"), v = View(c, "v");
    const std::vector<float> want = FloatsOf(ts.at("o"));
    octattn_tensor extra[6];
    const char* names[6] = {"k_scale",    "v_scale",      "key_indices",
                            "key_counts", "key_indices2", "key_counts2"};
    const octattn_tensor* given[6] = {};
    for (int i = 0; i < 6; ++i)
      if (ts.count(names[i])) {
        extra[i] = View(c, names[i]);
        given[i] = &extra[i];
      }
    for (const auto& path : paths) {
      INFO(c.name << " " << octattn_algorithm_name(path.first) << " " << path.second.Name());
      Context ctx(path.second);
      octattn_attention_options opt = Options(1, 0, 0, path.first);
      opt.scale = static_cast<float>(c.scale);
      opt.k_scale = given[0];
      opt.v_scale = given[1];
      opt.k_scale_rows = c.k_scale_rows;
      opt.key_indices = given[2];
      opt.key_counts = given[3];
      opt.key_indices2 = given[4];
      opt.key_counts2 = given[5];
      Tensor o(q.shape[0], q.shape[1], q.shape[2], v.shape[3]);
      const octattn_status st =
          octattn_attention(ctx, &opt, &q, &k, &v, o.ptr(), nullptr, nullptr, nullptr, 0);
      INFO(ctx.Error());
      REQUIRE(st == OCTATTN_OK);
      REQUIRE(o.buf.size() == want.size());
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i)
        worst = std::max(worst, std::fabs(static_cast<double>(o.buf[i]) - want[i]));
      CHECK(worst <= c.bound);
    }
  }
}
