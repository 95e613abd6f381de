// Scalar, double-accumulating attention: the definition every other path is held to.
#include "lib/reference/reference.h"

#include <cmath>
#include <limits>

namespace octattn {
namespace reference {

using base::LoadElem;
using base::StoreElem;
using kernels::ConstMatrix;
using kernels::KeyRow;
using kernels::Matrix;
using kernels::Operands;
using kernels::ValueRow;

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}

size_t HeadScratchDoubles(const Operands& t) {
  size_t n = base::SatAdd(base::Count(t.kv_len), base::Count(t.value_dim));
  // A quantized key or value row dequantized (floats, two to a double); q's row rounded
  // (OCTATTN_QK_INT8: its values, then a row of floats and one of int8).
  n = base::SatAdd(n, base::Count((t.head_dim + t.value_dim + 1) / 2));
  if (t.qk_block) n = base::SatAdd(n, base::Count(t.head_dim * 2));
  if (t.mods.Listed()) n = base::SatAdd(n, base::Count(t.kv_len / 8 + 1));  // a row's listed keys
  return t.key_acc ? base::SatAdd(n, base::Count(t.kv_len)) : n;            // key scores' sums
}

namespace {

// Whether row i (at qpos) reads key j: the analytic mask, then the mask tensor and a
// bias of -inf (whose entries are read only for pairs the analytic mask allows, and the
// bias only where the mask tensor allows the pair).
// With key lists, `listed` holds a byte per key: whether row i's lists name it.
bool PairAllowed(const Operands& t, int64_t i, int64_t qpos, int64_t j, const uint8_t* listed) {
  if (!base::Allowed(t.mask, qpos, j)) return false;
  if (listed && !listed[j]) return false;
  const kernels::Mods& m = t.mods;
  const base::RowBlocks blocks = kernels::RowBlocksOf(m, 0, i);
  if (!base::RowKeeps(blocks, base::BlockKindOf(blocks, j),
                      m.keep ? m.keep + i * m.keep_row : nullptr, m.keep_col, m.keep_bits,
                      m.keep_from, j))
    return false;
  if (m.bias && m.bias[i * m.bias_row + j * m.bias_col] == -std::numeric_limits<float>::infinity())
    return false;
  return true;
}

// Key lists: listed[j] = whether row i's lists name key j (entries validated: in [0,
// kv_len), or -1).
void MarkListed(const Operands& t, int64_t i, uint8_t* listed) {
  for (int64_t j = 0; j < t.kv_len; ++j) listed[j] = 0;
  kernels::ForEachListed(t.mods, i, [&](int64_t j) { listed[j] = 1; });
}

}  // namespace

void AttentionHead(const Operands& t, double* scratch) {
  double* s = scratch;
  double* acc = scratch + t.kv_len;
  float* row = reinterpret_cast<float*>(acc + t.value_dim);  // a dequantized row
  // OCTATTN_QK_INT8: the row of q rounded (u * n), from a widened row and its integers.
  double* sums = scratch + HeadScratchDoubles(t) - (t.key_acc ? t.kv_len : 0);
  double* qr = sums - (t.qk_block ? 2 * t.head_dim : 0);
  uint8_t* listed = t.mods.Listed() ? reinterpret_cast<uint8_t*>(qr - (t.kv_len / 8 + 1)) : nullptr;
  if (t.key_acc)
    for (int64_t j = 0; j < t.kv_len; ++j) sums[j] = 0.0;
  float* qf = reinterpret_cast<float*>(qr + t.head_dim);
  int8_t* qn = reinterpret_cast<int8_t*>(qf + t.head_dim);
  const kernels::Mods& mods = t.mods;
  const double sink = mods.sinks ? static_cast<double>(mods.sinks[0]) : kNegInf;
  for (int64_t i = 0; i < t.q_len; ++i) {
    const int64_t qpos = t.mask.q_start + i;
    const float* q = base::ElemAt(t.q, i * t.q_row, t.q_type);
    if (listed) MarkListed(t, i, listed);
    if (t.qk_block) {
      for (int64_t d = 0; d < t.head_dim; ++d) qf[d] = LoadElem(q, d * t.q_dim, t.q_type);
      for (int64_t d0 = 0; d0 < t.head_dim; d0 += t.qk_block) {
        const double u = base::QuantizeQBlock(qf + d0, t.qk_block, qn + d0);
        for (int64_t d = d0; d < d0 + t.qk_block; ++d) qr[d] = u * qn[d];
      }
    }
    double m = kNegInf;
    for (int64_t j = 0; j < t.kv_len; ++j) {
      if (!PairAllowed(t, i, qpos, j, listed)) {
        s[j] = kNegInf;
        continue;
      }
      const float* k = KeyRow(t, j);
      int64_t k_dim = t.k_dim;
      base::Dtype k_type = t.k_type;
      if (base::Quantized(k_type)) {
        kernels::DequantKey(t, j, row);
        k = row, k_dim = 1, k_type = base::kF32;
      }
      double dot = 0.0;
      for (int64_t d = 0; d < t.head_dim; ++d)
        dot += (t.qk_block ? qr[d] : static_cast<double>(LoadElem(q, d * t.q_dim, t.q_type))) *
               LoadElem(k, d * k_dim, k_type);
      double x = dot * t.scale;
      if (mods.softcap > 0.0f) x = mods.softcap * std::tanh(x / mods.softcap);
      if (mods.slopes) x += static_cast<double>(mods.slopes[0]) * static_cast<double>(j - qpos);
      if (mods.bias) x += mods.bias[i * mods.bias_row + j * mods.bias_col];
      s[j] = x;
      if (s[j] > m || std::isnan(s[j])) m = std::isnan(m) ? m : s[j];
    }
    for (int64_t d = 0; d < t.value_dim; ++d) acc[d] = 0.0;
    float* o = base::ElemAt(t.o, i * t.o_row, t.o_type);
    if (m == kNegInf) {  // nothing allowed, or every allowed score is -inf
      for (int64_t d = 0; d < t.value_dim; ++d) StoreElem(o, d * t.o_dim, t.o_type, 0.0f);
      if (t.lse) t.lse[i * t.lse_row] = static_cast<float>(sink);
      if (t.weights)
        for (int64_t j = 0; j < t.kv_len; ++j) t.weights[i * t.w_row + j * t.w_col] = 0.0f;
      continue;
    }
    if (sink > m) m = sink;
    double sum = sink == kNegInf ? 0.0 : std::exp(sink - m);
    for (int64_t j = 0; j < t.kv_len; ++j) {
      s[j] = s[j] == kNegInf ? 0.0 : std::exp(s[j] - m);
      sum += s[j];
    }
    for (int64_t j = 0; j < t.kv_len; ++j) {
      if (!PairAllowed(t, i, qpos, j, listed)) continue;  // masked value rows are never read
      const float* v = ValueRow(t, j);
      int64_t v_dim = t.v_dim;
      base::Dtype v_type = t.v_type;
      if (base::Quantized(v_type)) {
        kernels::DequantValue(t, j, row);
        v = row, v_dim = 1, v_type = base::kF32;
      }
      const double p = s[j] / sum;
      if (t.key_acc) sums[j] += p;
      for (int64_t d = 0; d < t.value_dim; ++d) acc[d] += p * LoadElem(v, d * v_dim, v_type);
    }
    for (int64_t d = 0; d < t.value_dim; ++d)
      StoreElem(o, d * t.o_dim, t.o_type, static_cast<float>(acc[d]));
    if (t.lse) t.lse[i * t.lse_row] = static_cast<float>(m + std::log(sum));
    if (t.weights)
      for (int64_t j = 0; j < t.kv_len; ++j)
        t.weights[i * t.w_row + j * t.w_col] = static_cast<float>(s[j] / sum);
  }
  if (t.key_acc)
    for (int64_t j = 0; j < t.kv_len; ++j) kernels::AddKeyScore(t.key_acc + j, sums[j]);
}

size_t BackwardScratchDoubles(const kernels::BackwardTask& t) {
  const Operands& op = t.op;
  size_t n = base::SatMul(base::Count(op.kv_len), base::Count(op.head_dim + op.value_dim + 3));
  n = base::SatAdd(n, base::Count(op.value_dim + op.head_dim));
  if (op.mods.Listed()) n = base::SatAdd(n, base::Count(op.kv_len / 8 + 1));  // a row's listed keys
  return n;
}

namespace {

// The operands of query head h of a group task (h counted from the task's first head).
Operands HeadOf(const Operands& op, int64_t h) {
  Operands r = op;
  r.q = base::ElemAt(op.q, h * op.q_head, op.q_type);
  r.o = base::ElemAt(op.o, h * op.o_head, op.o_type);
  if (r.lse) r.lse += h * op.lse_head;
  kernels::Mods& m = r.mods;
  if (m.slopes) m.slopes += h;
  if (m.sinks) m.sinks += h;
  if (m.bias) m.bias += h * m.bias_head;
  if (m.keep) m.keep += h * m.keep_head;
  kernels::AdvanceLists(&m, 0, h);
  return r;
}

}  // namespace

void BackwardGroup(const kernels::BackwardTask& t, double* scratch) {
  const int64_t n = t.op.kv_len, hd = t.op.head_dim, vd = t.op.value_dim;
  double* dk = scratch;
  double* dv = dk + n * hd;
  double* s = dv + n * vd;
  double* th = s + n;
  double* p = th + n;
  double* o = p + n;
  double* dq = o + vd;
  uint8_t* listed = t.op.mods.Listed() ? reinterpret_cast<uint8_t*>(dq + hd) : nullptr;
  for (int64_t x = 0; x < n * (hd + vd); ++x) dk[x] = 0.0;
  for (int64_t h = 0; h < t.heads; ++h) {
    const Operands op = HeadOf(t.op, h);
    const kernels::Mods& mods = op.mods;
    const double sink = mods.sinks ? static_cast<double>(mods.sinks[0]) : kNegInf;
    double dsink = 0.0;
    for (int64_t i = 0; i < op.q_len; ++i) {
      const int64_t qpos = op.mask.q_start + i;
      const float* q = base::ElemAt(op.q, i * op.q_row, op.q_type);
      const float* dout = base::ElemAt(t.dout, h * t.do_head + i * t.do_row, t.do_type);
      float* dq_out = t.dq + h * t.dq_head + i * t.dq_row;
      float* db = t.dbias ? t.dbias + h * t.db_head + i * t.db_row : nullptr;
      double m = kNegInf;
      if (listed) MarkListed(op, i, listed);
      for (int64_t j = 0; j < n; ++j) {
        s[j] = kNegInf;
        if (db) db[j * t.db_col] = 0.0f;
        if (!PairAllowed(op, i, qpos, j, listed)) continue;
        const float* k = KeyRow(op, j);
        double dot = 0.0;
        for (int64_t d = 0; d < hd; ++d)
          dot += static_cast<double>(LoadElem(q, d * op.q_dim, op.q_type)) *
                 LoadElem(k, d * op.k_dim, op.k_type);
        double x = dot * op.scale;
        th[j] = 0.0;
        if (mods.softcap > 0.0f) {
          th[j] = std::tanh(x / mods.softcap);
          x = mods.softcap * th[j];
        }
        if (mods.slopes) x += static_cast<double>(mods.slopes[0]) * static_cast<double>(j - qpos);
        if (mods.bias) x += mods.bias[i * mods.bias_row + j * mods.bias_col];
        s[j] = x;
        if (x > m || std::isnan(x)) m = std::isnan(m) ? m : x;
      }
      const double dlse = t.dlse ? t.dlse[h * t.dlse_head + i * t.dlse_row] : 0.0;
      for (int64_t d = 0; d < hd; ++d) dq_out[d * t.dq_dim] = 0.0f;
      if (m == kNegInf) {  // o = 0 whatever the inputs; lse = the sink: dlse reaches it
        if (sink != kNegInf) dsink += dlse;
        continue;
      }
      if (sink > m) m = sink;
      double sum = sink == kNegInf ? 0.0 : std::exp(sink - m);
      for (int64_t j = 0; j < n; ++j) {
        p[j] = s[j] == kNegInf ? 0.0 : std::exp(s[j] - m);
        sum += p[j];
      }
      for (int64_t d = 0; d < vd; ++d) o[d] = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        if (!PairAllowed(op, i, qpos, j, listed)) continue;
        p[j] /= sum;
        const float* v = ValueRow(op, j);
        for (int64_t d = 0; d < vd; ++d) o[d] += p[j] * LoadElem(v, d * op.v_dim, op.v_type);
      }
      double dd = -dlse;  // do . o - dlse
      for (int64_t d = 0; d < vd; ++d)
        dd += static_cast<double>(LoadElem(dout, d * t.do_dim, t.do_type)) * o[d];
      if (sink != kNegInf) dsink -= std::exp(sink - m) / sum * dd;
      for (int64_t d = 0; d < hd; ++d) dq[d] = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        if (!PairAllowed(op, i, qpos, j, listed)) continue;
        const float* v = ValueRow(op, j);
        const float* k = KeyRow(op, j);
        double dp = 0.0;
        for (int64_t d = 0; d < vd; ++d)
          dp += static_cast<double>(LoadElem(dout, d * t.do_dim, t.do_type)) *
                LoadElem(v, d * op.v_dim, op.v_type);
        const double ds = p[j] * (dp - dd);
        if (db) db[j * t.db_col] = static_cast<float>(ds);
        const double g = (mods.softcap > 0.0f ? ds * (1.0 - th[j] * th[j]) : ds) * op.scale;
        for (int64_t d = 0; d < hd; ++d) {
          dq[d] += g * LoadElem(k, d * op.k_dim, op.k_type);
          dk[j * hd + d] += g * LoadElem(q, d * op.q_dim, op.q_type);
        }
        for (int64_t d = 0; d < vd; ++d)
          dv[j * vd + d] += p[j] * LoadElem(dout, d * t.do_dim, t.do_type);
      }
      for (int64_t d = 0; d < hd; ++d) dq_out[d * t.dq_dim] = static_cast<float>(dq[d]);
    }
    if (t.dsinks) t.dsinks[h] = dsink;
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t d = 0; d < hd; ++d)
      t.dk[j * t.dk_row + d * t.dk_dim] = static_cast<float>(dk[j * hd + d]);
    for (int64_t d = 0; d < vd; ++d)
      t.dv[j * t.dv_row + d * t.dv_dim] = static_cast<float>(dv[j * vd + d]);
  }
}

namespace {

// c[i][j] = sum_t a[i][t] * b[t][j] in double, i < m, j < n, t < inner.
void Product(ConstMatrix a, ConstMatrix b, Matrix c, int64_t m, int64_t n, int64_t inner) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t t = 0; t < inner; ++t)
        acc += static_cast<double>(a.data[i * a.row + t * a.col]) * b.data[t * b.row + j * b.col];
      c.data[i * c.row + j * c.col] = static_cast<float>(acc);
    }
}

}  // namespace

void ScoresHead(ConstMatrix q, ConstMatrix k, Matrix scores, int64_t q_len, int64_t kv_len,
                int64_t head_dim) {
  // k as a [head_dim, kv_len] matrix: q k^T.
  Product(q, ConstMatrix{k.data, k.col, k.row}, scores, q_len, kv_len, head_dim);
}

void SoftmaxRow(float* row, int64_t n, int64_t col, float* lse) {
  double m = kNegInf;
  for (int64_t j = 0; j < n; ++j) {
    const double x = row[j * col];
    if (x > m || std::isnan(x)) m = std::isnan(m) ? m : x;
  }
  if (m == kNegInf) {
    for (int64_t j = 0; j < n; ++j) row[j * col] = 0.0f;
    if (lse) *lse = -std::numeric_limits<float>::infinity();
    return;
  }
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) sum += std::exp(row[j * col] - m);
  for (int64_t j = 0; j < n; ++j)
    row[j * col] = static_cast<float>(std::exp(row[j * col] - m) / sum);
  if (lse) *lse = static_cast<float>(m + std::log(sum));
}

void WeightedSumHead(ConstMatrix p, ConstMatrix v, Matrix o, int64_t q_len, int64_t kv_len,
                     int64_t value_dim) {
  Product(p, v, o, q_len, value_dim, kv_len);
}

void MaskHead(float* scores, int64_t row, int64_t col, int64_t q_len, int64_t kv_len,
              const base::Mask& mask) {
  for (int64_t i = 0; i < q_len; ++i)
    for (int64_t j = 0; j < kv_len; ++j)
      if (!base::Allowed(mask, mask.q_start + i, j))
        scores[i * row + j * col] = -std::numeric_limits<float>::infinity();
}

namespace {

// The table's entries count scratch in floats: a double is two of them, and the slot
// is 64-byte aligned.
size_t HeadFloats(const Operands& op) { return base::SatMul(HeadScratchDoubles(op), 2); }
void Head(const Operands& op, float* scratch) {
  AttentionHead(op, reinterpret_cast<double*>(scratch));
}
size_t BackwardFloats(const kernels::BackwardTask& t) {
  return base::SatMul(BackwardScratchDoubles(t), 2);
}
void Backward(const kernels::BackwardTask& t, float* scratch) {
  BackwardGroup(t, reinterpret_cast<double*>(scratch));
}

kernels::Table MakeTable() {
  kernels::Table t{};
  t.backend = kernels::kReference;
  t.target = kernels::kScalar;
  t.naive_scratch_floats = &HeadFloats;
  t.naive_head = &Head;
  t.backward_scratch_floats = &BackwardFloats;
  t.backward_task = &Backward;
  return t;
}

}  // namespace

const kernels::Table* Table() {
  static const kernels::Table table = MakeTable();
  return &table;
}

}  // namespace reference
}  // namespace octattn
