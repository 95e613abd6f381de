// The score modifiers of one row as vector operations, for the Q K^T kernels' final
// store and the modifier passes. Included inside a per-target namespace that defines the
// SIMD vocabulary S, after common-inl.h.
//
// A row's scores are addressed by "space keys" g (the real keys, or the fused path's
// gathered strided columns), real key first + g * step.

// The modifiers of one row.
struct RowMods {
  float cap = 0.0f, inv_cap = 0.0f;  // cap 0: off
  bool alibi = false;
  float slope = 0.0f;
  int64_t qpos = 0;             // the row's position in key coordinates (ALiBi)
  const float* bias = nullptr;  // the row's bias at real key 0
  int64_t bias_col = 0;
  const uint8_t* mask = nullptr;  // the row's mask at real key 0
  int64_t mask_col = 0;
};

// Row `row` of query head `head` (counted from the Operands' head) at position qpos.
static inline RowMods RowModsOf(const Mods& m, int64_t head, int64_t row, int64_t qpos) {
  RowMods r;
  if (m.softcap > 0.0f) {
    r.cap = m.softcap;
    r.inv_cap = 1.0f / m.softcap;
  }
  if (m.slopes) {
    r.alibi = true;
    r.slope = m.slopes[head];
  }
  r.qpos = qpos;
  if (m.bias) {
    r.bias = m.bias + head * m.bias_head + row * m.bias_row;
    r.bias_col = m.bias_col;
  }
  if (m.mask) {
    r.mask = m.mask + head * m.mask_head + row * m.mask_row;
    r.mask_col = m.mask_col;
  }
  return r;
}

alignas(64) static constexpr float kIota[16] = {0, 1, 2,  3,  4,  5,  6,  7,
                                                8, 9, 10, 11, 12, 13, 14, 15};

// Softcap, ALiBi and bias of row m on the scaled scores x of space keys g0 .. g0 + L - 1,
// in that order. Lanes at or past key_end keep x (the caller masks them) and read no
// bias. `ninf` counts the -inf biases read (they become holes: BiasHoles).
static OCTATTN_INLINE typename S::V ModVec(const RowMods& m, typename S::V x, int64_t g0,
                                           int64_t key_end, int64_t first, int64_t step,
                                           typename S::V* ninf) {
  constexpr int64_t L = static_cast<int64_t>(S::kLanes);
  if (m.cap > 0.0f) x = S::Mul(S::Tanh(S::Mul(x, S::Set(m.inv_cap))), S::Set(m.cap));
  const int64_t j0 = first + g0 * step;  // real key of lane 0
  if (m.alibi) {
    const typename S::V d = S::MulAdd(S::Load(kIota), S::Set(static_cast<float>(step)),
                                      S::Set(static_cast<float>(j0 - m.qpos)));
    x = S::MulAdd(S::Set(m.slope), d, x);
  }
  if (m.bias) {
    const int64_t valid = key_end - g0;
    typename S::V bv;
    if (valid >= L && step == 1 && m.bias_col == 1) {
      bv = S::Load(m.bias + j0);
    } else {
      alignas(64) float tmp[L];
      for (int64_t l = 0; l < L; ++l)
        tmp[l] = l < valid ? m.bias[(j0 + l * step) * m.bias_col] : 0.0f;
      bv = S::Load(tmp);
    }
    x = S::Add(x, bv);
    *ninf = S::Add(*ninf, S::Indicator(bv, -__builtin_inff()));
  }
  return x;
}

// What QkStore applies to the final scores of its rows (null: nothing).
struct QkMods {
  const RowMods* rows[16];    // per row of the block
  typename S::V ninf[16];     // per row: -inf biases seen (ModVec)
  int64_t key_base, key_end;  // space key of pack column 0; keys from key_end on: masked
  int64_t first, step;
};
