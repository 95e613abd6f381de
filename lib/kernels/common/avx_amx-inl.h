// AMX-BF16 tiles (the amx_bf16 unit only, which defines OCTATTN_AMX_BF16): a
// block of R <= 16 query rows against 64 packed keys, 32 dimensions (16 pairs) a
// tdpbf16ps. Tiles 0-3 hold the four 16-key column blocks of the R x 64 sums, tile 4 the
// rows' pairs, tiles 5-7 the keys' pairs (16 pair rows of 16 keys, 64 bytes each).
// A score's sum is then AMX's own: tdpbf16ps adds each tile step's 32 products to the
// sum with roundings of its own (measured: neither a chain of FMAs nor one rounding of
// the exact sum), and each element of a tile depends on its row of A and column of B
// alone (whatever the rows: measured on the CPU the tests run on).
static constexpr bool kAmx = true;
// The tile configuration for R rows (ldtilecfg's 64-byte layout: palette 1, then the
// bytes per row of tiles 0-15 as 16-bit words at byte 16, their rows at byte 48).
static OCTATTN_INLINE void AmxConfigure(int rows) {
  alignas(64) uint8_t cfg[64] = {};
  cfg[0] = 1;
  for (int t = 0; t < 8; ++t) {
    cfg[16 + 2 * t] = 64;
    cfg[48 + t] = static_cast<uint8_t>(t < 5 ? rows : 16);
  }
  _tile_loadconfig(cfg);
}
static OCTATTN_INLINE void AmxRelease() { _tile_release(); }
// Sums in tiles 0 .. nc - 1 (nc of 1 .. 4): loaded from and stored to c (R rows of 16
// * nc floats, rows 256 bytes apart, block j at c + 16 j).
static OCTATTN_INLINE void AmxLoadSums(const float* c, int nc) {
  _tile_loadd(0, c, 256);
  if (nc > 1) _tile_loadd(1, c + 16, 256);
  if (nc > 2) _tile_loadd(2, c + 32, 256);
  if (nc > 3) _tile_loadd(3, c + 48, 256);
}
static OCTATTN_INLINE void AmxStoreSums(float* c, int nc) {
  _tile_stored(0, c, 256);
  if (nc > 1) _tile_stored(1, c + 16, 256);
  if (nc > 2) _tile_stored(2, c + 32, 256);
  if (nc > 3) _tile_stored(3, c + 48, 256);
}
// One tdpbf16ps step of the sums in tiles 0 .. nc - 1: R rows of 16 pairs at a
// (a_stride bytes apart) by 16 pair rows at b (b_stride bytes apart), block j of 16
// columns at b + 64 j bytes.
static OCTATTN_INLINE void AmxStep(const void* a, int64_t a_stride, const void* b, int64_t b_stride,
                                   int nc) {
  const char* bc = static_cast<const char*>(b);
  _tile_loadd(4, a, a_stride);
  _tile_loadd(5, bc, b_stride);
  _tile_dpbf16ps(0, 4, 5);
  if (nc > 1) {
    _tile_loadd(6, bc + 64, b_stride);
    _tile_dpbf16ps(1, 4, 6);
  }
  if (nc > 2) {
    _tile_loadd(7, bc + 128, b_stride);
    _tile_dpbf16ps(2, 4, 7);
  }
  if (nc > 3) {
    _tile_loadd(5, bc + 192, b_stride);
    _tile_dpbf16ps(3, 4, 5);
  }
}
// c[r][0, 16 nk) = the sums over `halves` (1 or 2) steps of 16 pairs of row r of a (its
// pairs from a + 64 bytes a step on, rows a_stride bytes apart) with keys 0 .. 16 nk - 1
// of b (nk of 1 .. 4; pair row p of a step at b + p * b_stride bytes, its keys' pairs
// from there on, 64 bytes per 16 keys), from zero; rows of c 256 bytes apart. The tiles
// must be configured (AmxConfigure).
static OCTATTN_INLINE void AmxDot64(const void* a, int64_t a_stride, const void* b,
                                    int64_t b_stride, int halves, int nk, float* c) {
  _tile_zero(0);
  if (nk > 1) _tile_zero(1);
  if (nk > 2) _tile_zero(2);
  if (nk > 3) _tile_zero(3);
  for (int h = 0; h < halves; ++h)
    AmxStep(static_cast<const char*>(a) + 64 * h, a_stride,
            static_cast<const char*>(b) + 16 * h * b_stride, b_stride, nk);
  AmxStoreSums(c, nk);
}
