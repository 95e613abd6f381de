// The cache store: each (batch entry, head) of a contiguous store is a task; a paged
// store's tasks are heads, each writing its rows in order, so that two rows sent to one
// slot leave the later one's bytes whatever the thread count.
#include "lib/run/store.h"

#include <string.h>

#include <algorithm>
#include <cstdlib>

#include "lib/base/dtype.h"

namespace octattn {
namespace run {

namespace {

using base::Dtype;

float Source(const StoreCall& c, const float* row, int64_t d) {
  return base::LoadElem(row, d * c.src.stride[3], c.src.type);
}

// Values a row is widened into before the target's kernel stores them, at most.
constexpr int64_t kChunk = 2048;

// The most rows a (batch entry, head) whose whole lines the kernel writes past the caches
// (StoreRow::stream): a decode step's rows (a draft's included) are new lines, far apart,
// which cached stores read from memory first, one miss a line (on a Zen 4 core a step's
// store of f32 rows streamed took 0.6x the time, int8 0.65x); a prefill's long runs of
// rows come in order, and where they are in the caches already (rewritten, or a cache
// that fits L3) streaming them costs (two threads storing 2048 rows a head into lines in
// L3: twice the time).
constexpr int64_t kStreamRows = 16;

// Rows handed to the target's kernel (Table::store_rows) in one call: a decode step's
// rows of every (batch entry, head) pay one call and one dispatch between them. Rows
// widened into `x` go alone (the buffer is reused by the next chunk). Whether and how
// rows take the kernel is decided once a call: in chunks of whole scale groups (INT8; FP8
// with scales) or blocks that fit kChunk values; not where a destination's elements are
// strided or a group is wider than a chunk (those take the scalar definitions below, the
// same bytes).
class RowBatch {
 public:
  RowBatch(const kernels::Table& table, const StoreCall& c) : table_(table) {
    const Dtype t = c.dst.type;
    grouped_ = t == base::kI8 || (base::Scaled(t) && c.scale.hi != 0);
    unit_ = grouped_ ? c.group : base::Blocked(t) ? base::kQuantBlock : 1;
    kernel_ = c.dst.stride[3] == 1 && unit_ <= kChunk && t != base::kDsMla;
    chunk_ = kChunk / unit_ * unit_;
    in_place_ = c.src.type == base::kF32 && c.src.stride[3] == 1;
    whole_ =
        kernel_ && in_place_ && c.src.shape[3] <= chunk_ && (t != base::kI8 || c.scale_rows == 1);
    row_.n = c.src.shape[3];
    row_.t = t;
    row_.sc_type = c.scale.type;
    row_.sc_col = c.scale.stride[3];
    row_.group = grouped_ ? c.group : row_.n;
    row_.stream = c.src.shape[2] <= kStreamRows;
  }
  // Whether every row is one kernel row read in place (Room, Filled): a decode step's.
  bool whole() const { return whole_; }
  // The rows free for whole rows, each holding what every row shares: the caller sets
  // their x, out and sc, in a loop that calls nothing (its counters stay in registers),
  // then hands Filled the number it set.
  kernels::StoreRow* Room(int64_t* room) {
    for (; filled_ < kRows; ++filled_) rows_[filled_] = row_;
    *room = kRows - n_;
    return rows_ + n_;
  }
  void Filled(int64_t n) {
    n_ += n;
    if (n_ == kRows) Flush();
  }
  ~RowBatch() { Flush(); }
  void Flush() {
    if (n_ > 0) table_.store_rows(rows_, n_);
    n_ = 0;
  }
  // Row `row` (n == 1) of a store through the kernel into `out` (scale row `sc`); false
  // where the kernel does not apply.
  bool Add(const StoreCall& c, const float* row, void* out, void* sc) {
    if (!kernel_) return false;
    const int64_t dim = c.src.shape[3];
    const Dtype t = c.dst.type;
    for (int64_t d0 = 0; d0 < dim; d0 += chunk_) {
      const int64_t n = base::MinI(chunk_, dim - d0);
      const float* src = d0 == 0 ? row : base::ElemAt(row, d0 * c.src.stride[3], c.src.type);
      if (!in_place_) base::WidenRow(src, c.src.stride[3], c.src.type, n, x_);
      kernels::StoreRow& r = rows_[n_++];
      r = row_;
      r.x = in_place_ ? src : x_;
      r.n = n;
      r.out = d0 == 0 ? out : base::ElemAt(out, base::Blocked(t) ? d0 / base::kQuantBlock : d0, t);
      r.sc = !sc || d0 == 0 ? sc : base::ElemAt(sc, d0 / unit_ * c.scale.stride[3], c.scale.type);
      if (!grouped_) r.group = n;
      filled_ = 0;  // (r.n and r.group may be a chunk's)
      if (n_ == kRows || !in_place_) Flush();
    }
    return true;
  }

 private:
  static constexpr int64_t kRows = 64;
  const kernels::Table& table_;
  bool grouped_, kernel_, in_place_, whole_;
  int64_t unit_, chunk_;
  kernels::StoreRow row_{};  // what every row shares (a whole row's n and group)
  kernels::StoreRow rows_[kRows];
  int64_t n_ = 0;
  int64_t filled_ = 0;  // rows_[0, filled_) hold row_'s shared fields (Room)
  float x_[kChunk];
};

// An FP8_DS_MLA row (kDsMlaValues values): each group of kDsMlaGroup of its fp8 values
// gets s = max|x| / 448 in the row's f32 scale and the codes of x / s (s == 0: code 0; a
// group holding NaN or Inf: s NaN and codes 0); the rope values rounded to bf16.
void StoreDsMlaRow(const StoreCall& c, const float* row, uint8_t* o) {
  for (int64_t g0 = 0; g0 < base::kDsMlaFp8; g0 += base::kDsMlaGroup) {
    uint32_t top = 0;
    for (int64_t d = g0; d < g0 + base::kDsMlaGroup; ++d)
      top = std::max(top, base::AbsBits(Source(c, row, d)));
    const bool finite = top < 0x7F800000u;
    const float s = finite ? base::FloatOf(top) / 448.0f : __builtin_nanf("");
    memcpy(o + base::kDsMlaScales + 4 * (g0 / base::kDsMlaGroup), &s, 4);
    for (int64_t d = g0; d < g0 + base::kDsMlaGroup; ++d)
      o[d] = !finite || s == 0.0f ? 0 : base::F32ToFp8(Source(c, row, d) / s, base::kE4m3);
  }
  for (int64_t d = base::kDsMlaFp8; d < base::kDsMlaValues; ++d) {
    const uint16_t h = base::F32ToBf16(Source(c, row, d));
    memcpy(o + base::kDsMlaRope + 2 * (d - base::kDsMlaFp8), &h, 2);
  }
}

// Rows [t0, t0 + n) of (b, h), n = scale_rows (one scale row of an INT8 cache) or 1; `out`
// their destination rows (null: skipped), `sc` the scale row of the first of them (null:
// none).
void StoreRows(RowBatch& batch, const StoreCall& c, int64_t b, int64_t h, int64_t t0, int64_t n,
               float* const* out, const void* sc) {
  const TensorInfo &src = c.src, &dst = c.dst;
  const int64_t dim = src.shape[3];
  const Dtype t = dst.type;
  const float* rows[kMaxStoreScaleRows];
  for (int64_t r = 0; r < n; ++r)
    rows[r] = base::ElemAt(
        src.data, b * src.stride[0] + h * src.stride[1] + (t0 + r) * src.stride[2], src.type);
  if (n == 1 && out[0] && batch.Add(c, rows[0], out[0], const_cast<void*>(sc))) return;
  batch.Flush();  // rows before this one are written first (paged rows may share a slot)
  if (t == base::kI8) {
    float* s = const_cast<float*>(static_cast<const float*>(sc));
    for (int64_t g0 = 0; g0 < dim; g0 += c.group) {
      // The largest |x| of the block as its bits (the kernel's StoreInt8 on n rows).
      uint32_t top = 0;
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = g0; d < g0 + c.group; ++d)
          top = std::max(top, base::AbsBits(Source(c, rows[r], d)));
      const bool finite = top < 0x7F800000u;
      const int64_t at = g0 / c.group * c.scale.stride[3];
      base::StoreElem(s, at, c.scale.type,
                      finite ? base::FloatOf(top) / 127.0f : __builtin_nanf(""));
      const float sv = base::LoadElem(s, at, c.scale.type);  // as the cache reads it
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = g0; d < g0 + c.group; ++d) {
          const int i = !finite || sv == 0.0f ? 0
                                              : base::RoundClamp(Source(c, rows[r], d) / sv, -127,
                                                                 127, base::RoundMagic());
          reinterpret_cast<int8_t*>(out[r])[d * dst.stride[3]] = static_cast<int8_t>(i);
        }
    }
    return;
  }
  for (int64_t r = 0; r < n; ++r) {
    if (!out[r]) continue;
    if (t == base::kDsMla) {
      StoreDsMlaRow(c, rows[r], reinterpret_cast<uint8_t*>(out[r]));
      continue;
    }
    if (base::Scaled(t)) {  // fp8 (blocked rows are contiguous: the kernel's)
      uint8_t* o = reinterpret_cast<uint8_t*>(out[r]);
      for (int64_t d = 0; d < dim; ++d) {
        const float s =
            sc ? base::LoadElem(sc, d / c.group * c.scale.stride[3], c.scale.type) : 1.0f;
        o[d * dst.stride[3]] = base::F32ToFp8(Source(c, rows[r], d) / s, t);
      }
    } else {
      for (int64_t d = 0; d < dim; ++d)
        base::StoreElem(out[r], d * dst.stride[3], t, Source(c, rows[r], d));
    }
  }
}

// The rows of heads [h0, h1) of batch entries [b0, b1), each head's in order, where the
// batch takes them whole (RowBatch::whole): each row's addresses from locals alone.
void StoreWhole(RowBatch& batch, const StoreCall& c, int64_t b0, int64_t b1, int64_t h0,
                int64_t h1) {
  const TensorInfo &dst = c.dst, &sc = c.scale;
  const int64_t rows = c.src.shape[2], size = base::DtypeBytes(dst.type);
  const int64_t sc_size = sc.hi != 0 ? base::DtypeBytes(sc.type) : 0;
  const char* src = reinterpret_cast<const char*>(c.src.data);
  const int64_t r0 = c.src.stride[0] * 4, r1 = c.src.stride[1] * 4, r2 = c.src.stride[2] * 4;
  const int64_t d0 = dst.stride[0] * size, d1 = dst.stride[1] * size, d2 = dst.stride[2] * size;
  const int64_t s0 = sc.stride[0] * sc_size, s1 = sc.stride[1] * sc_size,
                s2 = sc.stride[2] * sc_size;
  char* out = reinterpret_cast<char*>(dst.data);
  char* scale = reinterpret_cast<char*>(sc.data);
  const int64_t* slots = c.slots;
  const int64_t block_size = c.block_size;
  int64_t h = h0, b = b0, t = 0;  // the next row
  if (!slots && rows == 1) {
    // A decode step's store, a row a (batch entry, head), in the order of the source's
    // rows in memory: the inner loop along the smaller stride (rows a page apart would
    // share the L1's sets and evict one another between the kernel's two passes).
    const bool heads_inner = std::abs(r1) <= std::abs(r0);
    const int64_t outer0 = heads_inner ? b0 : h0, outer1 = heads_inner ? b1 : h1;
    const int64_t inner0 = heads_inner ? h0 : b0, inner1 = heads_inner ? h1 : b1;
    const int64_t xi = heads_inner ? r1 : r0, oi = heads_inner ? d1 : d0,
                  si = heads_inner ? s1 : s0;
    int64_t i0 = inner0;
    for (int64_t j = outer0; j < outer1;) {
      int64_t room;
      kernels::StoreRow* r = batch.Room(&room);
      const int64_t n = base::MinI(room, inner1 - i0);
      const int64_t bb = heads_inner ? j : i0, hh = heads_inner ? i0 : j;
      const char* x = src + bb * r0 + hh * r1;
      char* o = out + bb * d0 + hh * d1;
      char* s = sc_size != 0 ? scale + bb * s0 + hh * s1 : nullptr;
      for (int64_t i = 0; i < n; ++i, x += xi, o += oi, s += si) {
        r[i].x = reinterpret_cast<const float*>(x);
        r[i].out = o;
        r[i].sc = s;
      }
      if ((i0 += n) == inner1) i0 = inner0, ++j;
      batch.Filled(n);
    }
    return;
  }
  while (h < h1) {
    int64_t room;
    kernels::StoreRow* r = batch.Room(&room);
    int64_t n = 0;
    for (; n < room && h < h1;) {
      int64_t block = b, row = t;
      const bool skip = slots && slots[b * rows + t] < 0;
      if (slots && !skip) {
        block = slots[b * rows + t] / block_size;
        row = slots[b * rows + t] % block_size;
      }
      if (!skip) {
        r[n].x = reinterpret_cast<const float*>(src + b * r0 + h * r1 + t * r2);
        r[n].out = out + block * d0 + h * d1 + row * d2;
        r[n].sc = sc_size != 0 ? scale + block * s0 + h * s1 + row * s2 : nullptr;
        ++n;
      }
      if (++t == rows) {
        t = 0;
        if (++b == b1) b = b0, ++h;
      }
    }
    batch.Filled(n);
  }
}

// The rows of (b, h) in order, a scale row's rows at a time.
void StoreHead(RowBatch& batch, const StoreCall& c, int64_t b, int64_t h) {
  const TensorInfo &dst = c.dst, &sc = c.scale;
  const int64_t rows = c.src.shape[2], n = c.dst.type == base::kI8 ? c.scale_rows : 1;
  for (int64_t t0 = 0; t0 < rows; t0 += n) {
    float* out[kMaxStoreScaleRows];
    int64_t block = b, row = t0;  // where row t0 goes: (block or batch entry, row)
    if (c.slots) {
      const int64_t slot = c.slots[b * rows + t0];
      if (slot < 0) continue;  // (a scale row's slots are all negative or none: validated)
      block = slot / c.block_size;
      row = slot % c.block_size;
    }
    for (int64_t r = 0; r < n; ++r)
      out[r] = base::ElemAt(dst.data,
                            block * dst.stride[0] + h * dst.stride[1] + (row + r) * dst.stride[2],
                            dst.type);
    // Scale row of rows that start a scale row (INT8), or of each row (FP8: broadcast).
    const void* s = nullptr;
    if (sc.hi != 0)
      s = base::ElemAt(sc.data,
                       block * sc.stride[0] + h * sc.stride[1] +
                           (c.scale_rows == 1 ? row : row / c.scale_rows) * sc.stride[2],
                       sc.type);
    StoreRows(batch, c, b, h, t0, n, out, s);
  }
}

}  // namespace

void Store(parallel::Pool& pool, const kernels::Table& table, const StoreCall& c) {
  const int64_t batch_size = c.src.shape[0], heads = c.src.shape[1];
  const int64_t values = batch_size * heads * c.src.shape[2] * c.src.shape[3];
  // A decode step's few rows cost less than waking the pool.
  const bool alone = values < (int64_t{1} << 16) || pool.threads() == 1;
  // Heads [h0, h1) of batch entries [b0, b1), each head's rows in order.
  auto rows = [&](RowBatch& batch, int64_t b0, int64_t b1, int64_t h0, int64_t h1) {
    if (batch.whole()) return StoreWhole(batch, c, b0, b1, h0, h1);
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t b = b0; b < b1; ++b) StoreHead(batch, c, b, h);
  };
  if (alone) {
    RowBatch batch(table, c);
    return rows(batch, 0, batch_size, 0, heads);
  }
  if (c.slots) {  // heads: each writes its rows in order
    pool.Run(heads, [&](int64_t h, int) {
      RowBatch batch(table, c);
      rows(batch, 0, batch_size, h, h + 1);
    });
    return;
  }
  pool.Run(batch_size * heads, [&](int64_t i, int) {
    RowBatch batch(table, c);
    rows(batch, i / heads, i / heads + 1, i % heads, i % heads + 1);
  });
}

}  // namespace run
}  // namespace octattn
