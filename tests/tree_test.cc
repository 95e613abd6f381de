// Trees of draft tokens (options.tree): each row reads the cached prefix and the tree
// columns its bits keep. The bits are the same pairs as a mask tensor: the calls' bytes
// (forward, backward, the mask stage) equal that tensor's; a batch of trees gives each
// sequence the bytes of its own call; a key outside a row's tree never reaches it; and
// every bad tree is a status with nothing written.
#include <functional>
#include <limits>

#include "support.h"

namespace octtest {
namespace {

// A random tree of n draft tokens in topological order: node c's parent is an earlier
// node or none (a root on the prefix); a row's bits are the node and its ancestors.
std::vector<std::vector<uint8_t>> RandomTree(int64_t n, std::mt19937& rng) {
  std::vector<std::vector<uint8_t>> kept(static_cast<size_t>(n),
                                         std::vector<uint8_t>(static_cast<size_t>(n), 0));
  for (int64_t c = 0; c < n; ++c) {
    const int64_t parent = c == 0 ? -1 : static_cast<int64_t>(rng() % (c + 1)) - 1;
    if (parent >= 0) kept[c] = kept[parent];
    kept[c][c] = 1;
  }
  return kept;
}

// Trees of a call in its packed form: `rows` rows per batch entry, row_bytes apart,
// entries `stride` apart (0: one tree for all), bit c of byte c / 8 (little-endian order).
struct Trees {
  std::vector<uint8_t> bits;
  int64_t row_bytes = 0, stride = 0;
  Trees(int64_t batch, int64_t rows, int64_t row_bytes_, int64_t stride_)
      : row_bytes(row_bytes_), stride(stride_) {
    // Bits past a sequence's columns are set: they must never be read.
    bits.assign(static_cast<size_t>((batch - 1) * stride + rows * row_bytes), 0xFF);
  }
  // Tree t (its rows from call row r0 of batch entry b) written in place.
  void Put(int64_t b, int64_t r0, const std::vector<std::vector<uint8_t>>& t) {
    for (size_t i = 0; i < t.size(); ++i) {
      uint8_t* row = bits.data() + b * stride + (r0 + static_cast<int64_t>(i)) * row_bytes;
      for (size_t c = 0; c < t.size(); ++c) {
        const uint8_t bit = static_cast<uint8_t>(1u << (c % 8));
        row[c / 8] = static_cast<uint8_t>(t[i][c] ? row[c / 8] | bit : row[c / 8] & ~bit);
      }
    }
  }
  void Into(octattn_attention_options* opt) const {
    opt->tree = bits.data();
    opt->tree_row_bytes = row_bytes;
    opt->tree_stride = stride;
  }
};

struct Case {
  int64_t batch, hq, hkv, n, prefix, d;
  int32_t causal;
  int64_t window;
  float softcap;
};

std::string Name(const Case& c) {
  return "B " + std::to_string(c.batch) + " Hq " + std::to_string(c.hq) + " Hkv " +
         std::to_string(c.hkv) + " tree " + std::to_string(c.n) + " prefix " +
         std::to_string(c.prefix) + " D " + std::to_string(c.d) + " causal " +
         std::to_string(c.causal) + " window " + std::to_string(c.window) + " softcap " +
         std::to_string(c.softcap);
}

// A call's trees and the mask tensor [batch, 1, n, prefix + n] of the same pairs.
struct TreeCall {
  Problem p;
  Trees trees;
  BoolTensor mask;
  std::vector<std::vector<std::vector<uint8_t>>> kept;
  TreeCall(const Case& c, uint32_t seed, int64_t extra_bytes, int64_t stride_pad)
      : p(c.batch, c.hq, c.hkv, c.n, c.prefix + c.n, c.d, c.d, seed, 2.0f),
        trees(c.batch, c.n, (c.n + 7) / 8 + extra_bytes,
              c.n * ((c.n + 7) / 8 + extra_bytes) + stride_pad),
        mask(c.batch, 1, c.n, c.prefix + c.n) {
    std::mt19937 rng(seed);
    for (int64_t b = 0; b < c.batch; ++b) {
      kept.push_back(RandomTree(c.n, rng));
      trees.Put(b, 0, kept.back());
      for (int64_t i = 0; i < c.n; ++i)
        for (int64_t j = 0; j < c.n; ++j) mask.at(b, 0, i, c.prefix + j) = kept[b][i][j];
    }
  }
};

octattn_attention_options CaseOptions(const Case& c, octattn_algorithm algorithm) {
  octattn_attention_options opt = Options(c.causal, c.window, 0, algorithm);
  opt.softcap = c.softcap;
  return opt;
}

const Case kCases[] = {{1, 1, 1, 1, 0, 16, 1, 0, 0.0f},    {2, 4, 2, 5, 3, 32, 1, 0, 0.0f},
                       {2, 4, 2, 64, 200, 64, 1, 0, 0.0f}, {1, 2, 1, 17, 300, 32, 0, 0, 0.0f},
                       {2, 6, 2, 40, 0, 64, 1, 0, 0.0f},   {1, 4, 4, 33, 90, 32, 1, 24, 0.0f},
                       {2, 2, 1, 9, 130, 128, 1, 0, 20.0f}};

TEST_CASE("a tree's bits give the bytes of the mask tensor of the same pairs", "[tree]") {
  uint32_t seed = 100;
  for (const Case& c : kCases)
    for (octattn_algorithm algo :
         {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE})
      for (int threads : {1, 2}) {
        INFO(Name(c) << " algorithm " << algo << " threads " << threads);
        ++seed;
        const TreeCall tc(c, seed, seed % 3, seed % 2 ? 5 : 0);
        Context ctx(threads);
        octattn_attention_options opt = CaseOptions(c, algo), mopt = opt;
        tc.trees.Into(&opt);
        mopt.mask = &tc.mask.t;
        RequireSameOutputs(ctx, opt, mopt, tc.p);
        // and within the bound of the reference
        if (algo == OCTATTN_ALGORITHM_FUSED) RequireWithinReference(ctx, opt, tc.p);
      }
}

// A tree call's bytes do not depend on the thread count or the tensors' layout: the
// fused path's decode-shaped plans split keys over threads as its prefill plans do not.
TEST_CASE("trees: thread count and layouts change no byte", "[tree][invariants]") {
  uint32_t seed = 500;
  for (const Case& c : kCases) {
    ++seed;
    const TreeCall tc(c, seed, 1, 0);
    octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED);
    tc.trees.Into(&opt);
    INFO(Name(c));
    RequireThreadAndLayoutInvariance(opt, tc.p);
  }
}

TEST_CASE("a tree_stride of 0: every batch entry reads the same tree", "[tree]") {
  const Case c{3, 4, 2, 21, 45, 32, 1, 0, 0.0f};
  std::mt19937 rng(8);
  const std::vector<std::vector<uint8_t>> kept = RandomTree(c.n, rng);
  Trees one(1, c.n, 3, 0);
  one.Put(0, 0, kept);
  BoolTensor mask(1, 1, c.n, c.prefix + c.n);
  for (int64_t i = 0; i < c.n; ++i)
    for (int64_t j = 0; j < c.n; ++j) mask.at(0, 0, i, c.prefix + j) = kept[i][j];
  Problem p(c.batch, c.hq, c.hkv, c.n, c.prefix + c.n, c.d, c.d, 12);
  Context ctx(2);
  octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED), mopt = opt;
  one.Into(&opt);
  mopt.mask = &mask.t;
  Tensor o = p.Out(), mo = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, o);
  Attend(ctx, mopt, p.q, p.k, p.v, mo);
  REQUIRE(BytesEqual(o, mo));
}

TEST_CASE("trees on every target: the mask tensor's bytes", "[tree][dispatch]") {
  const Case c{2, 4, 2, Sized(24, 9), Sized(150, 20), 32, 1, 0, 0.0f};
  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    const TreeCall tc(c, 7, 1, 0);
    Context ctx(t, 2);
    octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED), mopt = opt;
    tc.trees.Into(&opt);
    mopt.mask = &tc.mask.t;
    Tensor o = tc.p.Out(), mo = tc.p.Out();
    Attend(ctx, opt, tc.p.q, tc.p.k, tc.p.v, o);
    Attend(ctx, mopt, tc.p.q, tc.p.k, tc.p.v, mo);
    REQUIRE(BytesEqual(o, mo));
  }
}

TEST_CASE("a key outside a row's tree never reaches the row, whatever its bits", "[tree]") {
  const Case c{1, 4, 2, 30, 70, 32, 1, 0, 0.0f};
  const TreeCall tc(c, 31, 0, 0);
  for (octattn_algorithm algo : {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE}) {
    Context ctx(2);
    octattn_attention_options opt = CaseOptions(c, algo);
    tc.trees.Into(&opt);
    Tensor o = tc.p.Out(), lse = tc.p.Lse();
    Attend(ctx, opt, tc.p.q, tc.p.k, tc.p.v, o, &lse);
    for (int64_t i : {int64_t{0}, int64_t{7}, int64_t{29}}) {
      INFO("algorithm " << algo << " row " << i);
      Problem hostile = tc.p;
      int64_t changed = 0;
      for (int64_t col = 0; col < c.n; ++col) {
        if (tc.kept[0][i][col]) continue;
        const float bad = col % 2 ? std::numeric_limits<float>::quiet_NaN() : INFINITY;
        for (int64_t h = 0; h < c.hkv; ++h) {
          for (int64_t d = 0; d < c.d; ++d) {
            hostile.k.at(0, h, c.prefix + col, d) = bad;
            hostile.v.at(0, h, c.prefix + col, d) = -bad;
          }
        }
        ++changed;
      }
      Tensor ho = tc.p.Out(), hlse = tc.p.Lse();
      Attend(ctx, opt, hostile.q, hostile.k, hostile.v, ho, &hlse);
      for (int64_t h = 0; h < c.hq; ++h) {
        REQUIRE(RowBytesEqual(o, ho, 0, h, i));
        REQUIRE(RowBytesEqual(lse, hlse, 0, h, i));
      }
      if (i > 0) REQUIRE(changed > 0);
    }
  }
}

// The backward's gradients over a tree equal those over the mask tensor of its pairs.
TEST_CASE("the backward over a tree: the mask tensor's gradients", "[tree][backward]") {
  uint32_t seed = 300;
  for (const Case& c : kCases) {
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_REFERENCE}) {
      INFO(Name(c) << " algorithm " << algo);
      const TreeCall tc(c, ++seed, 1, 0);
      Context ctx(2);
      octattn_attention_options opt = CaseOptions(c, algo), mopt = opt;
      tc.trees.Into(&opt);
      mopt.mask = &tc.mask.t;
      RequireSameGradients(ctx, opt, mopt, tc.p, seed + 7);
    }
  }
}

// A ragged batch of trees (rows packed along batch entry 0, each row's bits over its own
// sequence's tree) gives each sequence the bytes of its own call; so does a padded batch.
TEST_CASE("a batch of trees gives each sequence the bytes of its own call", "[tree][batches]") {
  std::mt19937 rng(5);
  const int64_t hq = 4, hkv = 2, d = 32;
  for (int iter = 0; iter < 6; ++iter) {
    const int64_t n_seq = 1 + iter % 4;
    std::vector<int64_t> n(n_seq), pre(n_seq), cu_q(n_seq + 1, 0), cu_k(n_seq + 1, 0);
    for (int64_t s = 0; s < n_seq; ++s) {
      n[s] = 1 + static_cast<int64_t>(rng() % 20);
      pre[s] = static_cast<int64_t>(rng() % 90);
      cu_q[s + 1] = cu_q[s] + n[s];
      cu_k[s + 1] = cu_k[s] + pre[s] + n[s];
    }
    const int64_t row_bytes = 3 + iter % 2;  // up to 24 columns
    Problem p(1, hq, hkv, cu_q[n_seq], cu_k[n_seq], d, d, 40 + iter);
    Trees trees(1, cu_q[n_seq], row_bytes, 0);
    std::vector<std::vector<std::vector<uint8_t>>> kept;
    for (int64_t s = 0; s < n_seq; ++s) {
      kept.push_back(RandomTree(n[s], rng));
      trees.Put(0, cu_q[s], kept.back());
    }
    for (octattn_algorithm algo :
         {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE}) {
      INFO("iteration " << iter << " algorithm " << algo);
      Context ctx(1 + iter % 2);
      octattn_attention_options opt = Options(1, 0, 0, algo);
      opt.sequences = n_seq;
      opt.cu_seqlens_q = cu_q.data();
      opt.cu_seqlens_k = cu_k.data();
      trees.Into(&opt);
      Tensor o = p.Out(), lse = p.Lse();
      Attend(ctx, opt, p.q, p.k, p.v, o, &lse);
      for (int64_t s = 0; s < n_seq; ++s) {
        Problem own(1, hq, hkv, n[s], pre[s] + n[s], d, d, 1);
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < n[s]; ++i)
            for (int64_t x = 0; x < d; ++x) own.q.at(0, h, i, x) = p.q.at(0, h, cu_q[s] + i, x);
        for (int64_t h = 0; h < hkv; ++h)
          for (int64_t j = 0; j < pre[s] + n[s]; ++j)
            for (int64_t x = 0; x < d; ++x) {
              own.k.at(0, h, j, x) = p.k.at(0, h, cu_k[s] + j, x);
              own.v.at(0, h, j, x) = p.v.at(0, h, cu_k[s] + j, x);
            }
        Trees mine(1, n[s], row_bytes, 0);
        mine.Put(0, 0, kept[s]);
        octattn_attention_options oo = Options(1, 0, 0, algo);
        mine.Into(&oo);
        Tensor so = own.Out(), slse = own.Lse();
        Attend(ctx, oo, own.q, own.k, own.v, so, &slse);
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < n[s]; ++i) {
            INFO("sequence " << s << " head " << h << " row " << i);
            for (int64_t x = 0; x < d; ++x)
              REQUIRE(std::memcmp(&o.at(0, h, cu_q[s] + i, x), &so.at(0, h, i, x), 4) == 0);
            REQUIRE(std::memcmp(&lse.at(0, h, cu_q[s] + i, 0), &slse.at(0, h, i, 0), 4) == 0);
          }
      }
    }
  }
  // Padded: every entry's tree over its last q_len valid keys (kv_lens), the padding after.
  const int64_t B = 3, tq = 6, tk = 50;
  Problem p(B, hq, hkv, tq, tk, d, d, 77);
  std::vector<int64_t> lens = {50, 3, 31};  // entry 1: fewer keys than tree columns
  Trees trees(B, tq, 1, tq + 2);
  std::vector<std::vector<std::vector<uint8_t>>> kept;
  for (int64_t b = 0; b < B; ++b) {
    kept.push_back(RandomTree(tq, rng));
    trees.Put(b, 0, kept.back());
  }
  Context ctx(2);
  octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
  opt.kv_lens = lens.data();
  trees.Into(&opt);
  Tensor o = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, o);
  for (int64_t b = 0; b < B; ++b) {
    Problem own(1, hq, hkv, tq, lens[b], d, d, 1);
    own.q.ForEach([&](int64_t, int64_t h, int64_t i, int64_t x) {
      own.q.at(0, h, i, x) = p.q.at(b, h, i, x);
    });
    own.k.ForEach([&](int64_t, int64_t h, int64_t j, int64_t x) {
      own.k.at(0, h, j, x) = p.k.at(b, h, j, x);
      own.v.at(0, h, j, x) = p.v.at(b, h, j, x);
    });
    Trees mine(1, tq, 1, 0);
    mine.Put(0, 0, kept[b]);
    octattn_attention_options oo = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
    mine.Into(&oo);
    Tensor so = own.Out();
    Attend(ctx, oo, own.q, own.k, own.v, so);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < tq; ++i) {
        INFO("entry " << b << " head " << h << " row " << i);
        for (int64_t x = 0; x < d; ++x)
          REQUIRE(std::memcmp(&o.at(b, h, i, x), &so.at(0, h, i, x), 4) == 0);
      }
  }
}

TEST_CASE("a paged cache under a tree: the bytes of contiguous keys", "[tree][batches]") {
  std::mt19937 rng(9);
  const int64_t B = 2, hq = 4, hkv = 2, d = 32, tq = 12, bs = 16, cols = 8;
  const std::vector<int64_t> lens = {100, 37};
  Problem p(B, hq, hkv, tq, cols * bs, d, d, 91);
  Trees trees(B, tq, 2, 2 * tq);
  for (int64_t b = 0; b < B; ++b) trees.Put(b, 0, RandomTree(tq, rng));
  // Block b * cols + c holds rows c * bs .. of entry b, in reverse block order.
  const int64_t blocks = B * cols;
  Tensor pk(blocks, hkv, bs, d, kBTHD), pv(blocks, hkv, bs, d, kBTHD);
  std::vector<int32_t> table(static_cast<size_t>(B * cols));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t blk = blocks - 1 - (b * cols + c);
      table[static_cast<size_t>(b * cols + c)] = static_cast<int32_t>(blk);
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t r = 0; r < bs; ++r)
          for (int64_t x = 0; x < d; ++x) {
            pk.at(blk, h, r, x) = p.k.at(b, h, c * bs + r, x);
            pv.at(blk, h, r, x) = p.v.at(b, h, c * bs + r, x);
          }
    }
  Context ctx(2);
  octattn_attention_options opt = Options(1, 0, 0, OCTATTN_ALGORITHM_FUSED);
  opt.kv_lens = lens.data();
  trees.Into(&opt);
  Tensor o = p.Out(), po = p.Out();
  Attend(ctx, opt, p.q, p.k, p.v, o);
  opt.block_table = table.data();
  opt.block_table_cols = cols;
  Attend(ctx, opt, p.q, pk, pv, po);
  REQUIRE(BytesEqual(o, po));
}

TEST_CASE("the mask stage applies a tree as its mask tensor", "[tree][stages]") {
  const Case c{2, 3, 3, 11, 20, 16, 1, 0, 0.0f};
  const TreeCall tc(c, 3, 2, 0);
  Context ctx(1);
  Tensor s(c.batch, c.hq, c.n, c.prefix + c.n), ms(c.batch, c.hq, c.n, c.prefix + c.n);
  s.Fill(4);
  ms.CopyValuesFrom(s);
  octattn_attention_options opt = Options(), mopt = opt;
  tc.trees.Into(&opt);
  mopt.mask = &tc.mask.t;
  REQUIRE(octattn_mask(ctx, &opt, s.ptr()) == OCTATTN_OK);
  REQUIRE(octattn_mask(ctx, &mopt, ms.ptr()) == OCTATTN_OK);
  REQUIRE(BytesEqual(s, ms));
  // Every masked entry is a tree column the row's bits drop, or a causal one.
  int64_t dropped = 0;
  s.ForEach([&](int64_t b, int64_t h, int64_t i, int64_t j) {
    const bool keep = j < c.prefix || (tc.kept[b][i][j - c.prefix] && j - c.prefix <= i);
    REQUIRE((s.at(b, h, i, j) == -INFINITY) == !keep);
    dropped += !keep && j - c.prefix <= i;
  });
  REQUIRE(dropped > 0);
}

TEST_CASE("bad trees: a status, a message and nothing written", "[tree][api]") {
  const Case c{2, 2, 1, 12, 10, 16, 1, 0, 0.0f};
  TreeCall tc(c, 11, 0, 0);
  Context ctx(1);
  Tensor out = tc.p.Out();
  struct Bad {
    const char* name;
    octattn_status want;
    std::function<void(octattn_attention_options*)> edit;
  };
  BoolTensor mask(1, 1, 1, c.prefix + c.n);
  std::vector<int64_t> cu_q = {0, 3, 12}, cu_k = {0, 5, 22};
  std::vector<uint8_t> small(4 * 12, 0xFF);
  const Bad bads[] = {
      {"tree with a mask tensor", OCTATTN_ERROR_INVALID_OPTION,
       [&](octattn_attention_options* o) { o->mask = &mask.t; }},
      {"tree_row_bytes 0", OCTATTN_ERROR_INVALID_OPTION,
       [&](octattn_attention_options* o) { o->tree_row_bytes = 0; }},
      {"tree_row_bytes negative", OCTATTN_ERROR_INVALID_OPTION,
       [&](octattn_attention_options* o) { o->tree_row_bytes = -2; }},
      {"fewer bits than rows", OCTATTN_ERROR_INVALID_OPTION,
       [&](octattn_attention_options* o) { o->tree_row_bytes = 1; }},
      {"tree_stride negative", OCTATTN_ERROR_INVALID_STRIDE,
       [&](octattn_attention_options* o) { o->tree_stride = -1; }},
      {"tree_row_bytes without a tree", OCTATTN_ERROR_INVALID_OPTION,
       [&](octattn_attention_options* o) { o->tree = nullptr; }},
      {"tree_stride without a tree", OCTATTN_ERROR_INVALID_OPTION,
       [&](octattn_attention_options* o) {
         o->tree = nullptr;
         o->tree_row_bytes = 0;
         o->tree_stride = 4;
       }},
      {"extent overflows", OCTATTN_ERROR_OVERFLOW,
       [&](octattn_attention_options* o) { o->tree_stride = INT64_MAX - 5; }},
      {"tree inside o", OCTATTN_ERROR_ALIASING,
       [&](octattn_attention_options* o) {
         o->tree = reinterpret_cast<const uint8_t*>(out.buf.data());
       }},
      {"a ragged sequence with more rows than bits", OCTATTN_ERROR_INVALID_OPTION,
       [&](octattn_attention_options* o) {
         o->tree = small.data();
         o->tree_row_bytes = 1;  // sequence 1 has 9 rows
         o->sequences = 2;
         o->cu_seqlens_q = cu_q.data();
         o->cu_seqlens_k = cu_k.data();
       }},
  };
  for (const Bad& bad : bads) {
    INFO(bad.name);
    octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED);
    tc.trees.Into(&opt);
    bad.edit(&opt);
    if (std::string(bad.name).rfind("a ragged", 0) == 0) {
      // The ragged rows of batch entry 0: q [1, H, 12, D], k [1, Hkv, 22, D].
      Problem rp(1, c.hq, c.hkv, 12, 22, c.d, c.d, 2);
      Tensor ro = rp.Out();
      for (float& x : ro.buf) x = 7.0f;
      const octattn_status st = octattn_attention(ctx, &opt, rp.q.ptr(), rp.k.ptr(), rp.v.ptr(),
                                                  ro.ptr(), nullptr, nullptr, nullptr, 0);
      REQUIRE(st == bad.want);
      REQUIRE(!ctx.Error().empty());
      for (float x : ro.buf) REQUIRE(x == 7.0f);
      continue;
    }
    for (float& x : out.buf) x = 7.0f;
    const octattn_status st = octattn_attention(ctx, &opt, tc.p.q.ptr(), tc.p.k.ptr(), tc.p.v.ptr(),
                                                out.ptr(), nullptr, nullptr, nullptr, 0);
    INFO(ctx.Error());
    REQUIRE(st == bad.want);
    REQUIRE(!ctx.Error().empty());
    for (float x : out.buf) REQUIRE(x == 7.0f);
  }
}

}  // namespace
}  // namespace octtest
