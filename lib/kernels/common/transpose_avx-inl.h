// Transpose8x8 on x86 targets with AVX (eight floats per ymm register): unpack, shuffle,
// then swap 128-bit halves. Included by transpose-inl.h, inside a backend's vocabulary
// struct, only where the backend says its target has AVX (OCTATTN_AVX_TRANSPOSE), after
// <immintrin.h>.

// dst[c * dst_stride + r] = src[r * src_stride + c] for r, c < 8.
static OCTATTN_INLINE void Transpose8x8(const float* src, int64_t src_stride, float* dst,
                                        int64_t dst_stride) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  // r[c] holds column c (c < 4) of rows 0-3 in its low half and column c + 4 in its
  // high half; r[c + 4] the same for rows 4-7.
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
