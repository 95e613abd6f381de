// Causality: overwriting position p of q, k and v with any bits (NaN, infinities,
// denormals, huge values), and the bias and mask entries of key p, leaves every output
// row before p byte-identical, for every mask, alignment, GQA ratio, layout, algorithm
// (AUTO too), backend, target, thread count, score modifier and the dtypes of q, k, v
// and o (the 16-bit patterns of NaN and the infinities then), and quantized caches (any
// bytes in the row, NaN, Inf and zero scales of its own); the lse and weights rows too
// when the input requests them.
#include "fuzz_support.h"

using namespace fuzz;

namespace {

// A quantized cache the input may draw for k and v (their f32 values stored by
// octattn_kv_store): INT8 with per-token scales of G channels (keys: or KIVI's by channel
// within blocks of 2 or 4 rows), FP8 e4m3 with per-head scales, FP8 e5m2 without, Q8_0 or
// Q4_0 where the dimensions are whole blocks.
struct QuantCache {
  octattn_dtype type = OCTATTN_DTYPE_F32;
  int64_t group = 1, k_rows = 1;
  std::vector<uint8_t> kb, vb;
  octattn_tensor kt{}, vt{};
  std::unique_ptr<Tensor> ks, vs;  // scales (null: none)

  static int64_t Unit(octattn_dtype t) {
    return t == OCTATTN_DTYPE_Q8_0 ? 34 : t == OCTATTN_DTYPE_Q4_0 ? 18 : 1;
  }
  // The layout: [B, H, T, D] with rows of D values (blocked: D / 32 blocks).
  static octattn_tensor View(const Tensor& x, octattn_dtype type, std::vector<uint8_t>* buf) {
    octattn_tensor t = x.t;
    t.dtype = type;
    const bool blocked = type == OCTATTN_DTYPE_Q8_0 || type == OCTATTN_DTYPE_Q4_0;
    const int64_t units = blocked ? t.shape[3] / 32 : t.shape[3];
    t.stride[3] = 1, t.stride[2] = units, t.stride[1] = t.shape[2] * units;
    t.stride[0] = t.shape[1] * t.stride[1];
    buf->assign(static_cast<size_t>(t.shape[0] * t.stride[0] * Unit(type)), 0);
    t.data = buf->data();
    return t;
  }
  void Store(octattn_context* ctx, const Tensor& k, const Tensor& v) {
    kt = View(k, type, &kb);
    vt = View(v, type, &vb);
    if (type == OCTATTN_DTYPE_INT8) {
      ks = std::make_unique<Tensor>(k.t.shape[0], k.t.shape[1], k.t.shape[2] / k_rows,
                                    k_rows > 1 ? k.t.shape[3] : k.t.shape[3] / group);
      vs = std::make_unique<Tensor>(v.t.shape[0], v.t.shape[1], v.t.shape[2], 1);
    } else if (type == OCTATTN_DTYPE_FP8_E4M3) {
      ks = std::make_unique<Tensor>(1, k.t.shape[1], 1, 1);
      vs = std::make_unique<Tensor>(1, v.t.shape[1], 1, 1);
      for (float& x : ks->buf) x = 0.75f;
      for (float& x : vs->buf) x = 1.5f;
    }
    const int64_t rows = type == OCTATTN_DTYPE_INT8 ? k_rows : 0;
    FUZZ_CHECK(octattn_kv_store(ctx, &k.t, &kt, ks ? &ks->t : nullptr, rows, nullptr) ==
               OCTATTN_OK);
    FUZZ_CHECK(octattn_kv_store(ctx, &v.t, &vt, vs ? &vs->t : nullptr, 0, nullptr) == OCTATTN_OK);
  }
  QuantCache Copy() const {
    QuantCache c;
    c.type = type, c.group = group, c.k_rows = k_rows;
    c.kb = kb, c.vb = vb, c.kt = kt, c.vt = vt;
    c.kt.data = c.kb.data();
    c.vt.data = c.vb.data();
    if (ks) c.ks = std::make_unique<Tensor>(*ks);
    if (vs) c.vs = std::make_unique<Tensor>(*vs);
    return c;
  }
  // Row pos of (b, h) of every operand and the scales read with it alone, overwritten
  // with `bytes` (any patterns: NaN and Inf codes and blocks, NaN, Inf and zero scales).
  void Edit(int64_t b, int64_t h, int64_t pos, const uint8_t* bytes, size_t n) {
    size_t i = 0;
    for (octattn_tensor* t : {&kt, &vt}) {
      uint8_t* row = static_cast<uint8_t*>(t->data) +
                     (b * t->stride[0] + h * t->stride[1] + pos * t->stride[2]) * Unit(type);
      for (int64_t e = 0; e < t->stride[2] * Unit(type); ++e) row[e] = bytes[i++ % n];
    }
    float f[4];
    std::memcpy(f, bytes, sizeof(f));
    if (type == OCTATTN_DTYPE_INT8) {
      for (int64_t g = 0; g < vs->t.shape[3]; ++g) vs->at(b, h, pos, g) = f[g % 4];
      if (pos % k_rows == 0)  // a scale row of keys pos and on only
        for (int64_t g = 0; g < ks->t.shape[3]; ++g) ks->at(b, h, pos / k_rows, g) = f[(g + 1) % 4];
    }
  }
  octattn_attention_options Options(octattn_attention_options o) const {
    o.k_scale = ks ? &ks->t : nullptr;
    o.v_scale = vs ? &vs->t : nullptr;
    o.k_scale_rows = type == OCTATTN_DTYPE_INT8 ? k_rows : 0;
    return o;
  }
};

// The format from one byte (F32: none), where the problem's sizes allow it.
QuantCache ReadQuant(Input& in, const Problem& p) {
  QuantCache c;
  const uint8_t b = in.Byte();
  if (!(b & 0x80)) return c;
  const octattn_dtype pick[5] = {OCTATTN_DTYPE_INT8, OCTATTN_DTYPE_FP8_E4M3, OCTATTN_DTYPE_FP8_E5M2,
                                 OCTATTN_DTYPE_Q8_0, OCTATTN_DTYPE_Q4_0};
  c.type = pick[b % 5];
  const bool blocks = p.head_dim % 32 == 0 && p.value_dim % 32 == 0;
  if ((c.type == OCTATTN_DTYPE_Q8_0 || c.type == OCTATTN_DTYPE_Q4_0) && !blocks)
    c.type = OCTATTN_DTYPE_INT8;
  if (c.type == OCTATTN_DTYPE_INT8) {
    c.group = (b & 8) && p.head_dim % 8 == 0 ? 8 : p.head_dim;
    c.k_rows = (b & 16) && p.kv_len % 4 == 0 ? ((b & 32) ? 4 : 2) : 1;
  }
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  Problem p = Problem::Read(in, 48);
  p.ReadTypes(in, true);
  const int64_t pos = in.Range(0, p.kv_len - 1);
  const int64_t edit_batch = in.Range(0, p.batch - 1);
  float bits[4];
  for (float& b : bits) b = in.AnyBits();
  QuantCache quant = ReadQuant(in, p);
  if (quant.type != OCTATTN_DTYPE_F32) p.types.kv = OCTATTN_DTYPE_F32;  // q and o as drawn
  Tensors base(p, p.layout);
  FillInputs(in, base);

  Context ctx(p, p.threads);
  // The call on f32 or 16-bit k and v, or on the quantized cache.
  auto attend = [&](const octattn_attention_options& o, Tensors& t, QuantCache& c) {
    if (c.type == OCTATTN_DTYPE_F32) return Attend(ctx, o, t);
    const octattn_attention_options qo = c.Options(o);
    return Run(t.types, ctx, &qo, &t.q.t, &c.kt, &c.vt, &t.o.t, t.has_lse ? &t.lse.t : nullptr,
               t.has_w ? &t.w.t : nullptr);
  };
  if (quant.type != OCTATTN_DTYPE_F32) quant.Store(ctx, base.k, base.v);
  FUZZ_CHECK(attend(p.opt, base, quant) == OCTATTN_OK);
  Tensors edited = base;
  QuantCache edited_quant = quant.Copy();
  int n = 0;
  for (int64_t h = 0; h < p.kv_heads; ++h) {
    for (int64_t d = 0; d < p.head_dim; ++d) edited.k.at(edit_batch, h, pos, d) = bits[n++ % 4];
    for (int64_t d = 0; d < p.value_dim; ++d) edited.v.at(edit_batch, h, pos, d) = bits[n++ % 4];
    if (quant.type != OCTATTN_DTYPE_F32)
      edited_quant.Edit(edit_batch, h, pos, reinterpret_cast<const uint8_t*>(bits), sizeof(bits));
  }
  const int64_t q_start = p.q_start();
  const int64_t row = pos - q_start;  // the query row at position pos, if any
  if (p.opt.causal && row >= 0 && row < p.q_len)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t d = 0; d < p.head_dim; ++d) edited.q.at(edit_batch, h, row, d) = bits[n++ % 4];
  // The modifier tensors' entries of key pos: read only by rows at pos or later.
  ModData& m = *p.mods;
  std::unique_ptr<Tensor> bias;
  std::unique_ptr<BoolTensor> mask;
  octattn_attention_options opt = p.opt;
  if (m.bias) {
    bias = std::make_unique<Tensor>(*m.bias);
    for (int64_t a = 0; a < bias->t.shape[0]; ++a)
      for (int64_t h = 0; h < bias->t.shape[1]; ++h)
        for (int64_t i = 0; i < bias->t.shape[2]; ++i) bias->at(a, h, i, pos) = bits[n++ % 4];
    opt.bias = &bias->t;
  }
  if (m.mask) {
    mask = std::make_unique<BoolTensor>(*m.mask);
    mask->t.data = mask->buf.data();
    for (int64_t a = 0; a < mask->t.shape[0]; ++a)
      for (int64_t h = 0; h < mask->t.shape[1]; ++h)
        for (int64_t i = 0; i < mask->t.shape[2]; ++i) {
          uint8_t& x = mask->at(a, h, i, pos);
          x = x ? 0 : 1;
        }
    opt.mask = &mask->t;
  }
  FUZZ_CHECK(attend(opt, edited, edited_quant) == OCTATTN_OK);
  if (!p.opt.causal) return 0;  // full attention: every row may read position pos
  // A sink makes no row read a key; chunks only narrow what rows read.
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        // The tensors' edits reach every batch that shares them: rows at pos or later
        // in other batches may change then.
        if (q_start + i < pos || (b != edit_batch && !m.bias && !m.mask))
          FUZZ_CHECK(OutputRowsEqual(edited, base, b, h, i));
  return 0;
}
