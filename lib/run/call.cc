// The descriptors of a call's kernels: one builder each, from a sequence and a head.
#include "lib/run/call.h"

#include <algorithm>

namespace octattn {
namespace run {

kernels::Mods ModsAt(const kernels::Mods& m, const TensorInfo& bias, const TensorInfo& mask,
                     int64_t b, int64_t h) {
  kernels::Mods r = m;
  if (r.slopes) r.slopes += h;
  if (r.sinks) r.sinks += h;
  if (r.bias) r.bias += b * bias.stride[0] + h * bias.stride[1];
  if (r.keep) r.keep += b * mask.stride[0] + h * mask.stride[1];
  kernels::AdvanceLists(&r, 0, h);  // a block mask's entries are sequences: OperandsOf's
  return r;
}

plan::Sequence SequenceAt(const Call& c, int64_t n) {
  if (c.seqs) return c.seqs[n];
  plan::Sequence seq{};
  if (c.sequences > 0) {
    c.source.resolve(c.source.arrays, n, &seq);
    return seq;
  }
  const plan::CallShape& sh = c.shape;
  seq.batch = n;
  seq.entry = n;
  seq.q_len = sh.q_len;
  seq.kv_len = sh.kv_len;
  seq.seg_len = sh.kv_len;
  seq.mask = sh.mask;
  return seq;
}

// The scales of kv head kvh of a sequence (kernels::Scales), none where absent.
static kernels::Scales ScalesOf(const ScaleInfo& s, const plan::Sequence& seq, int64_t b,
                                int64_t kvh) {
  kernels::Scales r;
  if (s.t.hi == 0) return r;
  const TensorInfo& t = s.t;
  r.type = t.type;
  r.row = t.stride[2];
  r.col = t.stride[3];
  r.rows = s.rows;
  r.rows_shift = base::Log2IfPow2(s.rows);
  r.group = s.group;
  if (seq.paging.blocks) {  // block 0 of the kv head, as k
    r.block = t.stride[0];
    r.data = base::ElemAt(t.data, kvh * t.stride[1], t.type);
  } else {
    r.row0 = seq.k_row;
    r.data = base::ElemAt(t.data, b * t.stride[0] + kvh * t.stride[1], t.type);
  }
  return r;
}

kernels::Operands OperandsOf(const Call& c, const plan::Sequence& seq, int64_t h) {
  const plan::CallShape& sh = c.shape;
  const int64_t b = seq.batch, kvh = h / (sh.q_heads / sh.kv_heads);
  kernels::Operands t{};
  t.q_type = c.q.type;
  t.k_type = c.k.type;
  t.v_type = c.v.type;
  t.o_type = c.o.type;
  t.q_head = c.q.stride[1];
  t.q_row = c.q.stride[2];
  t.q_dim = c.q.stride[3];
  t.q = base::ElemAt(c.q.data, b * c.q.stride[0] + h * t.q_head + seq.q_row * t.q_row, t.q_type);
  t.k_row = c.k.stride[2];
  t.k_dim = c.k.stride[3];
  t.v_row = c.v.stride[2];
  t.v_dim = c.v.stride[3];
  if (seq.paging.blocks) {  // block 0 of the kv head; rows through the block table
    t.k = base::ElemAt(c.k.data, kvh * c.k.stride[1], t.k_type);
    t.v = base::ElemAt(c.v.data, kvh * c.v.stride[1], t.v_type);
    t.paging = &seq.paging;
  } else {
    t.k = base::ElemAt(c.k.data, b * c.k.stride[0] + kvh * c.k.stride[1] + seq.k_row * t.k_row,
                       t.k_type);
    t.v = base::ElemAt(c.v.data, b * c.v.stride[0] + kvh * c.v.stride[1] + seq.k_row * t.v_row,
                       t.v_type);
  }
  t.k_scales = ScalesOf(c.k_scale, seq, b, kvh);
  t.v_scales = ScalesOf(c.v_scale, seq, b, kvh);
  t.o_head = c.o.stride[1];
  t.o_row = c.o.stride[2];
  t.o_dim = c.o.stride[3];
  t.o = base::ElemAt(c.o.data, b * c.o.stride[0] + h * t.o_head + seq.q_row * t.o_row, t.o_type);
  if (c.has_lse) {
    t.lse_head = c.lse.stride[1];
    t.lse_row = c.lse.stride[2];
    t.lse = c.lse.data + b * c.lse.stride[0] + h * t.lse_head + seq.q_row * t.lse_row;
  }
  if (c.key_acc) {
    const int64_t keys = c.key_scores.shape[2];
    // (A paged sequence's rows are its own logical rows: its entry's; a contiguous one's,
    // its batch entry's rows.)
    const int64_t e = seq.paging.blocks ? seq.entry : b;
    t.key_acc = c.key_acc + (e * sh.kv_heads + kvh) * keys + seq.k_col;
  }
  if (c.has_weights) {
    t.w_row = c.weights.stride[2];
    t.w_col = c.weights.stride[3];
    t.weights = c.weights.data + b * c.weights.stride[0] + h * c.weights.stride[1] +
                seq.q_row * t.w_row + seq.k_col * t.w_col;
  }
  t.q_len = seq.q_len;
  t.kv_len = seq.kv_len;
  t.head_dim = sh.head_dim;
  t.value_dim = sh.value_dim;
  t.scale = c.scale;
  t.qk_block = sh.qk_block;
  t.mask = seq.mask;
  t.mods = ModsAt(sh.mods, c.bias, c.mask, b, h);
  kernels::AdvanceLists(&t.mods, seq.entry, 0);
  for (kernels::Mods::KeyList& l : t.mods.keys) {  // (q's entry and row; the kv head's list)
    if (!l.idx) continue;
    l.idx += b * l.idx_entry + kvh * l.idx_head + seq.q_row * l.idx_row;
    if (l.count) l.count += b * l.count_entry + kvh * l.count_head + seq.q_row * l.count_row;
  }
  if (t.mods.bias) t.mods.bias += seq.q_row * t.mods.bias_row + seq.k_col * t.mods.bias_col;
  if (t.mods.keep) t.mods.keep += seq.q_row * t.mods.keep_row;
  // A tree's columns are the sequence's last q_len key rows; a mask tensor's, the call's.
  if (t.mods.keep_bits)
    t.mods.keep_from = seq.kv_len - seq.q_len;
  else if (t.mods.keep)
    t.mods.keep += seq.k_col * t.mods.keep_col;
  return t;
}

kernels::FlashTask FlashTaskOf(const Call& c, const plan::Sequence& seq, int64_t kvh) {
  const int64_t group = c.shape.q_heads / c.shape.kv_heads;
  kernels::FlashTask t{};
  t.tuning = c.tuning;
  t.op = OperandsOf(c, seq, kvh * group);
  t.heads = group;
  t.row_begin = 0;
  t.row_end = seq.q_len;
  t.gathered = 1;
  t.span_begin = 0;
  const kernels::Mods& m = t.op.mods;
  const int64_t keys = m.Listed() ? std::min(seq.kv_len, m.ListCapacity()) : seq.kv_len;
  t.span_end = (keys + kernels::kSpanKeys - 1) / kernels::kSpanKeys;
  return t;
}

kernels::BackwardTask BackwardTaskOf(const BackwardCall& c, const plan::Sequence& seq, int64_t n,
                                     int64_t kvh, double* sink_sums) {
  const plan::CallShape& sh = c.fwd.shape;
  const int64_t group = sh.q_heads / sh.kv_heads, h = kvh * group;
  const int64_t b = seq.batch, i = seq.q_row, j = seq.k_row;
  kernels::BackwardTask t{};
  t.op = OperandsOf(c.fwd, seq, h);
  t.heads = group;
  t.do_head = c.dout.stride[1];
  t.do_row = c.dout.stride[2];
  t.do_dim = c.dout.stride[3];
  t.do_type = c.dout.type;
  t.dout =
      base::ElemAt(c.dout.data, b * c.dout.stride[0] + h * t.do_head + i * t.do_row, t.do_type);
  if (c.dlse.hi != 0) {
    t.dlse_head = c.dlse.stride[1];
    t.dlse_row = c.dlse.stride[2];
    t.dlse = c.dlse.data + b * c.dlse.stride[0] + h * t.dlse_head + i * t.dlse_row;
  }
  t.dq_head = c.dq.stride[1];
  t.dq_row = c.dq.stride[2];
  t.dq_dim = c.dq.stride[3];
  t.dq = c.dq.data + b * c.dq.stride[0] + h * t.dq_head + i * t.dq_row;
  t.dk_row = c.dk.stride[2];
  t.dk_dim = c.dk.stride[3];
  t.dk = c.dk.data + b * c.dk.stride[0] + kvh * c.dk.stride[1] + j * t.dk_row;
  t.dv_row = c.dv.stride[2];
  t.dv_dim = c.dv.stride[3];
  t.dv = c.dv.data + b * c.dv.stride[0] + kvh * c.dv.stride[1] + j * t.dv_row;
  if (c.dbias.hi != 0) {
    t.db_head = c.dbias.stride[1];
    t.db_row = c.dbias.stride[2];
    t.db_col = c.dbias.stride[3];
    t.dbias = c.dbias.data + b * c.dbias.stride[0] + h * t.db_head + i * t.db_row + j * t.db_col;
  }
  if (sink_sums) t.dsinks = sink_sums + n * sh.q_heads + h;
  return t;
}

}  // namespace run
}  // namespace octattn
