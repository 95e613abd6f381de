// The mask stage: entries a row may not read become -inf, written as runs from the
// row's key ranges (base::KeysOf), not pair by pair. Included inside a per-target
// namespace that defines the SIMD vocabulary S, after common-inl.h.

// row[j * col] = value for j in [begin, end); whole vectors where the row is contiguous.
static inline void FillRun(float* row, int64_t col, int64_t begin, int64_t end, float value) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  int64_t j = begin;
  if (col == 1) {
    const typename S::V vv = S::Set(value);
    for (; j + L <= end; j += L) S::Store(vv, row + j);
  }
  for (; j < end; ++j) row[j * col] = value;
}

static void MaskRows(Matrix s, int64_t rows, int64_t cols, const base::Mask& mask) {
  const float ninf = -__builtin_inff();
  for (int64_t i = 0; i < rows; ++i) {
    float* row = s.data + i * s.row;
    const base::RowKeys keys = base::KeysOf(mask, mask.q_start + i, cols);
    // Below the dense run: only the strided columns stay.
    if (keys.stride > 0) {
      int64_t c = base::NextOnStride(keys.strided_begin, keys.stride, keys.phase);
      FillRun(row, s.col, 0, base::MinI(c, keys.lo), ninf);
      for (; c < keys.strided_end; c += keys.stride)
        FillRun(row, s.col, c + 1, base::MinI(c + keys.stride, keys.lo), ninf);
    } else {
      FillRun(row, s.col, 0, keys.lo, ninf);
    }
    FillRun(row, s.col, keys.hi, cols, ninf);
  }
}
