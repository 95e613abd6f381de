// Scalar, double-accumulating attention: the definition every other path is held to.
#include "lib/reference/reference.h"

#include <cmath>
#include <limits>

namespace octattn {
namespace reference {

using kernels::ConstMatrix;
using kernels::Matrix;
using kernels::Operands;

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();
}

size_t HeadScratchDoubles(const Operands& t) {
  return plan::SatAdd(plan::Count(t.kv_len), plan::Count(t.value_dim));
}

namespace {

// Whether row i (at qpos) reads key j: the analytic mask, then the mask tensor and a
// bias of -inf (whose entries are read only for pairs the analytic mask allows, and the
// bias only where the mask tensor allows the pair).
bool PairAllowed(const Operands& t, int64_t i, int64_t qpos, int64_t j) {
  if (!plan::Allowed(t.mask, qpos, j)) return false;
  const kernels::Mods& m = t.mods;
  if (m.mask && m.mask[i * m.mask_row + j * m.mask_col] == 0) return false;
  if (m.bias && m.bias[i * m.bias_row + j * m.bias_col] == -std::numeric_limits<float>::infinity())
    return false;
  return true;
}

}  // namespace

void AttentionHead(const Operands& t, double* scratch) {
  double* s = scratch;
  double* acc = scratch + t.kv_len;
  const kernels::Mods& mods = t.mods;
  const double sink = mods.sinks ? static_cast<double>(mods.sinks[0]) : kNegInf;
  for (int64_t i = 0; i < t.q_len; ++i) {
    const int64_t qpos = t.mask.q_start + i;
    const float* q = t.q + i * t.q_row;
    double m = kNegInf;
    for (int64_t j = 0; j < t.kv_len; ++j) {
      if (!PairAllowed(t, i, qpos, j)) {
        s[j] = kNegInf;
        continue;
      }
      const float* k = t.k + j * t.k_row;
      double dot = 0.0;
      for (int64_t d = 0; d < t.head_dim; ++d)
        dot += static_cast<double>(q[d * t.q_dim]) * k[d * t.k_dim];
      double x = dot * t.scale;
      if (mods.softcap > 0.0f) x = mods.softcap * std::tanh(x / mods.softcap);
      if (mods.slopes) x += static_cast<double>(mods.slopes[0]) * static_cast<double>(j - qpos);
      if (mods.bias) x += mods.bias[i * mods.bias_row + j * mods.bias_col];
      s[j] = x;
      if (s[j] > m || std::isnan(s[j])) m = std::isnan(m) ? m : s[j];
    }
    for (int64_t d = 0; d < t.value_dim; ++d) acc[d] = 0.0;
    float* o = t.o + i * t.o_row;
    if (m == kNegInf) {  // nothing allowed, or every allowed score is -inf
      for (int64_t d = 0; d < t.value_dim; ++d) o[d * t.o_dim] = 0.0f;
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
      if (!PairAllowed(t, i, qpos, j)) continue;  // masked value rows are never read
      const float* v = t.v + j * t.v_row;
      const double p = s[j] / sum;
      for (int64_t d = 0; d < t.value_dim; ++d) acc[d] += p * v[d * t.v_dim];
    }
    for (int64_t d = 0; d < t.value_dim; ++d) o[d * t.o_dim] = static_cast<float>(acc[d]);
    if (t.lse) t.lse[i * t.lse_row] = static_cast<float>(m + std::log(sum));
    if (t.weights)
      for (int64_t j = 0; j < t.kv_len; ++j)
        t.weights[i * t.w_row + j * t.w_col] = static_cast<float>(s[j] / sum);
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
              const plan::Mask& mask) {
  for (int64_t i = 0; i < q_len; ++i)
    for (int64_t j = 0; j < kv_len; ++j)
      if (!plan::Allowed(mask, mask.q_start + i, j))
        scores[i * row + j * col] = -std::numeric_limits<float>::infinity();
}

}  // namespace reference
}  // namespace octattn
