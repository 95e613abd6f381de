// Causality: overwriting position p of q, k and v with any bits (NaN, infinities,
// denormals, huge values), and the bias and mask entries of key p, leaves every output
// row before p byte-identical, for every mask, alignment, GQA ratio, layout, algorithm
// (AUTO too), backend, target, thread count, score modifier and the dtypes of q, k, v
// and o (the 16-bit patterns of NaN and the infinities then), and quantized caches (any
// bytes in the row, NaN, Inf and zero scales of its own); the lse and weights rows too
// when the input requests them. A tree of draft tokens (options.tree, any bits) may
// stand for the mask tensor: its bits of key p's column flip with the edit. A block mask
// (random lists, any block sizes) or key lists (unsorted, duplicates, -1, counts of 0,
// entries past the causal bound) may narrow what every row reads; v may be a view of k's
// first columns (MLA's latent rows, read once).
#include "fuzz_support.h"

using namespace fuzz;

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
  std::vector<uint8_t> tree;
  p.ReadTree(in, &tree);
  BlockMask block_mask;
  p.ReadBlocks(in, &block_mask);
  KeyLists lists;
  p.ReadLists(in, &lists);
  // v as a view of k's first value_dim columns (MLA's latent rows), f32 caches only.
  const bool v_of_k = quant.type == OCTATTN_DTYPE_F32 && p.types.kv == OCTATTN_DTYPE_F32 &&
                      p.value_dim <= p.head_dim && (in.Byte() & 1);

  Context ctx(p, p.threads);
  // The call on f32 or 16-bit k and v (or v a view of k), or on the quantized cache.
  auto attend = [&](const octattn_attention_options& o, Tensors& t, QuantCache& c) {
    if (c.type == OCTATTN_DTYPE_F32 && v_of_k) {
      octattn_tensor view = t.k.t;
      view.shape[3] = p.value_dim;
      return Run(t.types, ctx, &o, &t.q.t, &t.k.t, &view, &t.o.t, t.has_lse ? &t.lse.t : nullptr,
                 t.has_w ? &t.w.t : nullptr);
    }
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
  std::vector<uint8_t> edited_tree = tree;
  const int64_t col = pos - (p.kv_len - p.q_len);  // key pos's tree column
  if (!tree.empty() && col >= 0) {
    opt.tree = edited_tree.data();
    for (int64_t b = 0; b < (p.opt.tree_stride ? p.batch : 1); ++b)
      for (int64_t i = 0; i < p.q_len; ++i)
        edited_tree[static_cast<size_t>(b * p.opt.tree_stride + i * p.opt.tree_row_bytes +
                                        col / 8)] ^= static_cast<uint8_t>(1u << (col % 8));
  }
  FUZZ_CHECK(attend(opt, edited, edited_quant) == OCTATTN_OK);
  if (!p.opt.causal) return 0;  // full attention: every row may read position pos
  // A sink makes no row read a key; chunks only narrow what rows read.
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.q_heads; ++h)
      for (int64_t i = 0; i < p.q_len; ++i)
        // The tensors' edits reach every batch that shares them: rows at pos or later
        // in other batches may change then.
        if (q_start + i < pos || (b != edit_batch && !m.bias && !m.mask && tree.empty()))
          FUZZ_CHECK(OutputRowsEqual(edited, base, b, h, i));
  return 0;
}
