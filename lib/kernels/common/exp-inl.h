// The vocabulary's Exp: exp(x) for the x <= 0 of a softmax (a score minus its row's
// maximum), -inf giving 0 and NaN passed through, as IEEE and the reference do. Included
// inside each backend's vocabulary struct after its ops, which provide Pow2Bits,
// ZeroBelow and NaNOr, with OCTATTN_EXP_AVX512 set where the target has AVX-512.
//
// x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2; exp(r) by Cephes' expf
// polynomial (about 1 ulp), times 2^n built in the exponent bits. x is clamped to
// kExpMin first, where 2^n is still a normal number, and results below it are 0: exp
// of such an x is under 1.2e-38 and no term of a softmax with a maximum of exp(0) = 1.

static constexpr float kExpMin = -87.0f;

static OCTATTN_INLINE V Exp(V x) {
#if OCTATTN_EXP_AVX512
  // NaN x is max's second operand, so that it runs through the arithmetic and comes out
  // NaN (NaNOr's compare and blend left out).
  const V xc = FromRaw(_mm512_max_ps(_mm512_set1_ps(kExpMin), ToRaw(x)));
#else
  const V xc = Max(x, Set(kExpMin));
#endif
  // n in the low mantissa bits of t: adding 1.5 * 2^23 rounds to an integer.
  const V t = MulAdd(xc, Set(1.44269504088896341f), Set(12582912.0f));
  const V n = Sub(t, Set(12582912.0f));
  V r = MulAdd(n, Set(-0.693359375f), xc);  // ln2 in two parts: n * 0.693359375 is exact
  r = MulAdd(n, Set(2.12194440e-4f), r);
  V p = MulAdd(Set(1.9875691500e-4f), r, Set(1.3981999507e-3f));
  p = MulAdd(p, r, Set(8.3334519073e-3f));
  p = MulAdd(p, r, Set(4.1665795894e-2f));
  p = MulAdd(p, r, Set(1.6666665459e-1f));
  p = MulAdd(p, r, Set(5.0000001201e-1f));
  p = Add(MulAdd(p, Mul(r, r), r), Set(1.0f));
#if OCTATTN_EXP_AVX512
  // p * 2^n by vscalefps, the multiply by Pow2Bits(t)'s exact power of two in one
  // operation, zero below kExpMin (not NaN) by its mask: the same bits, five operations
  // fewer of the softmax's twenty a vector.
  const __mmask16 keep = _mm512_cmp_ps_mask(ToRaw(x), _mm512_set1_ps(kExpMin), _CMP_NLT_UQ);
  return FromRaw(_mm512_maskz_scalef_ps(keep, ToRaw(p), ToRaw(n)));
#else
  return NaNOr(x, ZeroBelow(x, kExpMin, Mul(p, Pow2Bits(t))));
#endif
}
