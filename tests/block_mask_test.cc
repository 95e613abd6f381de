// Block masks (options.block_counts ...): each block of rows reads the key blocks its
// lists name, the partial ones where the mask tensor also allows. The lists are pairs as
// a mask tensor holds them: the calls' bytes (forward, backward, the mask stage) equal
// that tensor's; how the pairs split between full and partial blocks changes no byte; a
// key of an unlisted block never reaches a row; every bad list is a status with nothing
// written.
#include <functional>
#include <limits>

#include "support.h"

namespace octtest {
namespace {

struct Case {
  int64_t batch, hq, hkv, tq, tk, d, bq, bkv;
  int32_t causal;
  int64_t window;
  float softcap;
  bool heads;    // lists per query head (else one for all)
  bool partial;  // a mask tensor decides the partial blocks' pairs
};

std::string Name(const Case& c) {
  return "B " + std::to_string(c.batch) + " Hq " + std::to_string(c.hq) + " Hkv " +
         std::to_string(c.hkv) + " T " + std::to_string(c.tq) + "x" + std::to_string(c.tk) + " D " +
         std::to_string(c.d) + " blocks " + std::to_string(c.bq) + "x" + std::to_string(c.bkv) +
         " causal " + std::to_string(c.causal) + " window " + std::to_string(c.window) +
         " softcap " + std::to_string(c.softcap) + " heads " + std::to_string(c.heads) +
         " partial " + std::to_string(c.partial);
}

int64_t Blocks(int64_t n, int64_t size) { return (n + size - 1) / size; }

// A call's block mask (random kinds), the partial blocks' mask tensor, and the mask tensor
// of the pairs they give together.
struct BlockCall {
  Problem p;
  BlockMask bm, as_partial;
  BoolTensor bits, pairs;
  BlockCall(const Case& c, uint32_t seed, int density_pct = 50)
      : p(c.batch, c.hq, c.hkv, c.tq, c.tk, c.d, c.d, seed, 2.0f),
        bits(c.batch, c.heads ? c.hq : 1, c.tq, c.tk),
        pairs(c.batch, c.heads ? c.hq : 1, c.tq, c.tk) {
    const int64_t heads = c.heads ? c.hq : 1, qb = Blocks(c.tq, c.bq), kb = Blocks(c.tk, c.bkv);
    bm = BlockMask(c.batch, heads, qb, kb, c.bq, c.bkv);
    std::mt19937 rng(seed);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t x = 0; x < qb; ++x)
          for (int64_t y = 0; y < kb; ++y) {
            const bool listed = static_cast<int>(rng() % 100) < density_pct;
            bm.at(b, h, x, y) = listed ? static_cast<uint8_t>(1 + rng() % 2) : 0;
          }
    as_partial = bm;
    bm.Build(1 + seed % 3);
    as_partial.Build(1, true);
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < c.tq; ++i)
          for (int64_t j = 0; j < c.tk; ++j) {
            const bool bit = !c.partial || rng() % 4 != 0;
            bits.at(b, h, i, j) = bit;
            pairs.at(b, h, i, j) = bm.Reads(b, h, i, j, bit);
          }
  }
  void Into(const Case& c, octattn_attention_options* opt) const {
    bm.Into(opt);
    if (c.partial) opt->mask = &bits.t;
  }
};

octattn_attention_options CaseOptions(const Case& c, octattn_algorithm algorithm) {
  octattn_attention_options opt = Options(c.causal, c.window, 0, algorithm);
  opt.softcap = c.softcap;
  return opt;
}

const Case kCases[] = {
    {1, 1, 1, 1, 1, 16, 1, 1, 1, 0, 0.0f, false, false},
    {2, 4, 2, 40, 40, 32, 16, 16, 1, 0, 0.0f, true, true},
    {1, 2, 1, 300, 700, 64, 128, 128, 0, 0, 0.0f, false, false},
    {2, 4, 2, 257, 600, 32, 64, 256, 1, 0, 0.0f, false, true},
    {1, 4, 4, 70, 530, 32, 7, 33, 1, 100, 0.0f, true, false},
    {2, 2, 1, 130, 300, 128, 32, 512, 1, 0, 20.0f, false, true},
    {1, 8, 2, 3, 2100, 64, 1, 128, 1, 0, 0.0f, true, false},  // decode-shaped, split keys
};

TEST_CASE("a block mask gives the bytes of the mask tensor of the same pairs", "[blocks]") {
  uint32_t seed = 100;
  for (const Case& c : kCases)
    for (octattn_algorithm algo :
         {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE})
      for (int threads : {1, 2}) {
        INFO(Name(c) << " algorithm " << algo << " threads " << threads);
        ++seed;
        const BlockCall bc(c, seed);
        Context ctx(threads);
        octattn_attention_options opt = CaseOptions(c, algo), mopt = opt;
        bc.Into(c, &opt);
        mopt.mask = &bc.pairs.t;
        RequireSameOutputs(ctx, opt, mopt, bc.p);
        // and within the bound of the reference
        if (algo == OCTATTN_ALGORITHM_FUSED) RequireWithinReference(ctx, opt, bc.p);
      }
}

TEST_CASE("full blocks listed as partial: the same bytes", "[blocks]") {
  uint32_t seed = 200;
  for (const Case& c : kCases) {
    if (c.partial) continue;  // (with a mask tensor, partial blocks read it)
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE}) {
      INFO(Name(c) << " algorithm " << algo);
      const BlockCall bc(c, ++seed);
      Context ctx(2);
      octattn_attention_options opt = CaseOptions(c, algo), popt = opt;
      bc.bm.Into(&opt);
      bc.as_partial.Into(&popt, false);
      Tensor o = bc.p.Out(), po = bc.p.Out();
      Attend(ctx, opt, bc.p.q, bc.p.k, bc.p.v, o);
      Attend(ctx, popt, bc.p.q, bc.p.k, bc.p.v, po);
      REQUIRE(BytesEqual(o, po));
    }
  }
}

TEST_CASE("block masks: thread count and layouts change no byte", "[blocks][invariants]") {
  uint32_t seed = 300;
  for (const Case& c : kCases) {
    ++seed;
    const BlockCall bc(c, seed);
    octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED);
    bc.Into(c, &opt);
    INFO(Name(c));
    RequireThreadAndLayoutInvariance(opt, bc.p);
  }
}

// Decode equals prefill: the last row alone, over the same keys, with its query block's
// lists as the decode call's block 0, gives the prefill row's bytes.
TEST_CASE("block masks: a decode row's bytes are its prefill row's", "[blocks]") {
  const Case c{1, 8, 2, 96, 3000, 64, 32, 128, 1, 0, 0.0f, true, false};
  const BlockCall bc(c, 9, 60);
  Context ctx(2);
  octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED);
  bc.Into(c, &opt);
  Tensor o = bc.p.Out();
  Attend(ctx, opt, bc.p.q, bc.p.k, bc.p.v, o);
  for (int64_t i : {int64_t{0}, int64_t{40}, c.tq - 1}) {
    INFO("row " << i);
    Problem one(1, c.hq, c.hkv, 1, c.tk, c.d, c.d, 1);
    one.k.CopyValuesFrom(bc.p.k);
    one.v.CopyValuesFrom(bc.p.v);
    one.q.ForEach([&](int64_t, int64_t h, int64_t, int64_t x) {
      one.q.at(0, h, 0, x) = bc.p.q.at(0, h, i, x);
    });
    BlockMask row(1, c.hq, 1, bc.bm.kb, 1, c.bkv);
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t y = 0; y < bc.bm.kb; ++y) row.at(0, h, 0, y) = bc.bm.kind(0, h, i / c.bq, y);
    row.Build();
    octattn_attention_options dopt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED);
    dopt.q_start = c.tk - c.tq + i;
    row.Into(&dopt);
    Tensor d = one.Out();
    Attend(ctx, dopt, one.q, one.k, one.v, d);
    for (int64_t h = 0; h < c.hq; ++h)
      for (int64_t x = 0; x < c.d; ++x)
        REQUIRE(std::memcmp(&d.at(0, h, 0, x), &o.at(0, h, i, x), 4) == 0);
  }
}

TEST_CASE("block masks on every target: the mask tensor's bytes", "[blocks][dispatch]") {
  const Case c{2, 4, 2, Sized(150, 40), Sized(600, 90), 32, 32, 64, 1, 0, 0.0f, true, true};
  for (const Target& t : AllTargets()) {
    INFO(t.Name());
    const BlockCall bc(c, 7);
    Context ctx(t, 2);
    octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED), mopt = opt;
    bc.Into(c, &opt);
    mopt.mask = &bc.pairs.t;
    Tensor o = bc.p.Out(), mo = bc.p.Out();
    Attend(ctx, opt, bc.p.q, bc.p.k, bc.p.v, o);
    Attend(ctx, mopt, bc.p.q, bc.p.k, bc.p.v, mo);
    REQUIRE(BytesEqual(o, mo));
  }
}

TEST_CASE("a key of an unlisted block never reaches a row, whatever its bits", "[blocks]") {
  // Blocks of whole vectors, and blocks that end inside vectors and tiles.
  for (const Case& c : {Case{1, 4, 2, 64, 900, 32, 16, 64, 1, 0, 0.0f, false, false},
                        Case{1, 4, 2, 40, 700, 32, 7, 33, 1, 0, 0.0f, true, false}})
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE}) {
      const BlockCall bc(c, 31, 30);
      Context ctx(2);
      octattn_attention_options opt = CaseOptions(c, algo);
      bc.Into(c, &opt);
      Tensor o = bc.p.Out(), lse = bc.p.Lse();
      Attend(ctx, opt, bc.p.q, bc.p.k, bc.p.v, o, &lse);
      for (int64_t qb = 0; qb < bc.bm.qb; ++qb) {
        INFO(Name(c) << " algorithm " << algo << " query block " << qb);
        Problem hostile = bc.p;
        int64_t changed = 0;
        for (int64_t j = 0; j < c.tk; ++j) {
          bool read = false;  // by any head's lists
          for (int64_t h = 0; h < bc.bm.h; ++h) read |= bc.bm.kind(0, h, qb, j / c.bkv) != 0;
          if (read) continue;
          const float bad = j % 2 ? std::numeric_limits<float>::quiet_NaN() : INFINITY;
          for (int64_t h = 0; h < c.hkv; ++h)
            for (int64_t x = 0; x < c.d; ++x) {
              hostile.k.at(0, h, j, x) = bad;
              hostile.v.at(0, h, j, x) = -bad;
            }
          ++changed;
        }
        REQUIRE(changed > 0);
        Tensor ho = bc.p.Out(), hlse = bc.p.Lse();
        Attend(ctx, opt, hostile.q, hostile.k, hostile.v, ho, &hlse);
        for (int64_t h = 0; h < c.hq; ++h)
          for (int64_t i = qb * c.bq; i < std::min(c.tq, (qb + 1) * c.bq); ++i) {
            REQUIRE(RowBytesEqual(o, ho, 0, h, i));
            REQUIRE(RowBytesEqual(lse, hlse, 0, h, i));
          }
      }
    }
}

// The backward's gradients over a block mask equal those over the mask tensor of its
// pairs (which also gives dk and dv of unread keys as 0).
TEST_CASE("the backward over a block mask: the mask tensor's gradients", "[blocks][backward]") {
  uint32_t seed = 400;
  for (const Case& c : kCases) {
    for (octattn_algorithm algo : {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_REFERENCE}) {
      INFO(Name(c) << " algorithm " << algo);
      const BlockCall bc(c, ++seed);
      Context ctx(2);
      octattn_attention_options opt = CaseOptions(c, algo), mopt = opt;
      bc.Into(c, &opt);
      mopt.mask = &bc.pairs.t;
      RequireSameGradients(ctx, opt, mopt, bc.p, seed + 7);
    }
  }
}

// A ragged batch: entry s of the lists is sequence s, its rows and keys counted from its
// own first; each sequence gets the bytes of its own call.
TEST_CASE("a ragged batch under a block mask: each sequence's own call", "[blocks][batches]") {
  std::mt19937 rng(5);
  const int64_t hq = 4, hkv = 2, d = 32, bq = 8, bkv = 16;
  const int64_t n_seq = 3;
  std::vector<int64_t> tq = {20, 1, 33}, tk = {70, 130, 33}, cu_q(n_seq + 1, 0), cu_k(n_seq + 1, 0);
  for (int64_t s = 0; s < n_seq; ++s) {
    cu_q[s + 1] = cu_q[s] + tq[s];
    cu_k[s + 1] = cu_k[s] + tk[s];
  }
  BlockMask bm(n_seq, 1, Blocks(33, bq), Blocks(130, bkv), bq, bkv);
  for (int64_t s = 0; s < n_seq; ++s)
    for (int64_t x = 0; x < bm.qb; ++x)
      for (int64_t y = 0; y < Blocks(tk[s], bkv); ++y)
        bm.at(s, 0, x, y) = static_cast<uint8_t>(rng() % 3);
  bm.Build();
  Problem p(1, hq, hkv, cu_q[n_seq], cu_k[n_seq], d, d, 40);
  for (octattn_algorithm algo :
       {OCTATTN_ALGORITHM_FUSED, OCTATTN_ALGORITHM_NAIVE, OCTATTN_ALGORITHM_REFERENCE}) {
    INFO("algorithm " << algo);
    Context ctx(2);
    octattn_attention_options opt = Options(1, 0, 0, algo);
    opt.q_start = 0;
    opt.sequences = n_seq;
    opt.cu_seqlens_q = cu_q.data();
    opt.cu_seqlens_k = cu_k.data();
    bm.Into(&opt);
    Tensor o = p.Out();
    Attend(ctx, opt, p.q, p.k, p.v, o);
    for (int64_t s = 0; s < n_seq; ++s) {
      Problem own(1, hq, hkv, tq[s], tk[s], d, d, 1);
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < tq[s]; ++i)
          for (int64_t x = 0; x < d; ++x) own.q.at(0, h, i, x) = p.q.at(0, h, cu_q[s] + i, x);
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t j = 0; j < tk[s]; ++j)
          for (int64_t x = 0; x < d; ++x) {
            own.k.at(0, h, j, x) = p.k.at(0, h, cu_k[s] + j, x);
            own.v.at(0, h, j, x) = p.v.at(0, h, cu_k[s] + j, x);
          }
      BlockMask mine(1, 1, bm.qb, Blocks(tk[s], bkv), bq, bkv);
      for (int64_t x = 0; x < bm.qb; ++x)
        for (int64_t y = 0; y < mine.kb; ++y) mine.at(0, 0, x, y) = bm.kind(s, 0, x, y);
      mine.Build();
      octattn_attention_options oo = Options(1, 0, 0, algo);
      oo.q_start = 0;
      mine.Into(&oo);
      Tensor so = own.Out();
      Attend(ctx, oo, own.q, own.k, own.v, so);
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t i = 0; i < tq[s]; ++i) {
          INFO("sequence " << s << " head " << h << " row " << i);
          for (int64_t x = 0; x < d; ++x)
            REQUIRE(std::memcmp(&o.at(0, h, cu_q[s] + i, x), &so.at(0, h, i, x), 4) == 0);
        }
    }
  }
}

TEST_CASE("the mask stage applies a block mask as its mask tensor", "[blocks][stages]") {
  const Case c{2, 3, 3, 20, 45, 16, 4, 8, 1, 0, 0.0f, true, true};
  const BlockCall bc(c, 3);
  Context ctx(1);
  Tensor s(c.batch, c.hq, c.tq, c.tk), ms(c.batch, c.hq, c.tq, c.tk);
  s.Fill(4);
  ms.CopyValuesFrom(s);
  octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED), mopt = opt;
  bc.Into(c, &opt);
  mopt.mask = &bc.pairs.t;
  REQUIRE(octattn_mask(ctx, &opt, s.ptr()) == OCTATTN_OK);
  REQUIRE(octattn_mask(ctx, &mopt, ms.ptr()) == OCTATTN_OK);
  REQUIRE(BytesEqual(s, ms));
}

// Every bad block mask is a status, and o keeps its bytes.
TEST_CASE("bad block masks: a status, nothing written", "[blocks][api]") {
  const Case c{2, 4, 2, 40, 100, 16, 16, 32, 1, 0, 0.0f, true, false};
  const BlockCall bc(c, 5);
  Context ctx(1);
  struct Bad {
    const char* what;
    octattn_status status;
    std::function<void(BlockMask*, octattn_attention_options*)> edit;
  };
  const Bad bads[] = {
      {"no indices", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask*, octattn_attention_options* o) { o->block_indices = nullptr; }},
      {"full counts alone", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask*, octattn_attention_options* o) { o->full_block_indices = nullptr; }},
      {"block_q 0", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask*, octattn_attention_options* o) { o->block_q = 0; }},
      {"block sizes without lists", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask*, octattn_attention_options* o) {
         o->block_counts = o->block_indices = nullptr;
         o->full_block_counts = o->full_block_indices = nullptr;
       }},
      {"a count past the list", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask* m, octattn_attention_options*) {
         m->counts[0][3] = static_cast<int32_t>(m->n + 1);
       }},
      {"a negative count", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask* m, octattn_attention_options*) { m->counts[1][2] = -1; }},
      {"an index past the key blocks", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask* m, octattn_attention_options*) {
         m->counts[0][0] = 1;
         m->indices[0][0] = static_cast<int32_t>(m->kb);
       }},
      {"a negative index", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask* m, octattn_attention_options*) {
         m->counts[1][1] = 1;
         m->indices[1][m->n] = -1;
       }},
      {"an unsorted list", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask* m, octattn_attention_options*) {
         m->counts[0][0] = 2;
         m->indices[0][0] = 2;
         m->indices[0][1] = 1;
       }},
      {"a block on both lists", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask* m, octattn_attention_options*) {
         m->counts[0][0] = 1;
         m->indices[0][0] = 1;
         m->counts[1][0] = 1;
         m->indices[1][0] = 1;
       }},
      {"a float tensor", OCTATTN_ERROR_INVALID_OPTION,
       [](BlockMask* m, octattn_attention_options*) { m->t[1].dtype = OCTATTN_DTYPE_F32; }},
      {"too few query blocks", OCTATTN_ERROR_INVALID_SHAPE,
       [](BlockMask* m, octattn_attention_options*) {
         for (octattn_tensor& t : m->t) t.shape[2] = 2;
       }},
      {"the wrong head count", OCTATTN_ERROR_INVALID_SHAPE,
       [](BlockMask* m, octattn_attention_options*) { m->t[2].shape[1] = 3; }},
      {"counts of two columns", OCTATTN_ERROR_INVALID_SHAPE,
       [](BlockMask* m, octattn_attention_options*) { m->t[0].shape[3] = 2; }},
      {"a negative stride", OCTATTN_ERROR_INVALID_STRIDE,
       [](BlockMask* m, octattn_attention_options*) { m->t[1].stride[3] = -1; }},
  };
  for (const Bad& bad : bads) {
    INFO(bad.what);
    BlockMask m = bc.bm;
    m.Build(2);
    octattn_attention_options use = CaseOptions(c, OCTATTN_ALGORITHM_FUSED);
    m.Into(&use);
    bad.edit(&m, &use);  // the tensors point at m's lists: edits of their values are seen
    Tensor o = bc.p.Out();
    o.Fill(77);
    const Tensor before = o;
    const octattn_status st = octattn_attention(ctx, &use, bc.p.q.ptr(), bc.p.k.ptr(), bc.p.v.ptr(),
                                                o.ptr(), nullptr, nullptr, nullptr, 0);
    INFO(ctx.Error());
    REQUIRE(st == bad.status);
    REQUIRE(BytesEqual(o, before));
  }
  // An output over a list: ALIASING.
  BlockMask m = bc.bm;
  m.Build();
  Tensor o = bc.p.Out();
  octattn_tensor alias = *o.ptr();
  alias.data = m.indices[0].data();
  octattn_attention_options opt = CaseOptions(c, OCTATTN_ALGORITHM_FUSED);
  m.Into(&opt);
  const std::vector<int32_t> before = m.indices[0];
  REQUIRE(octattn_attention(ctx, &opt, bc.p.q.ptr(), bc.p.k.ptr(), bc.p.v.ptr(), &alias, nullptr,
                            nullptr, nullptr, 0) == OCTATTN_ERROR_ALIASING);
  REQUIRE(m.indices[0] == before);
}

}  // namespace
}  // namespace octtest
