// The vocabulary's Tanh, for soft-capped scores: Cephes' tanhf (about 2 ulp). Included
// inside each backend's vocabulary struct after Exp; its ops provide Abs, Div, IfLess and
// CopySign.
//
// |x| < 0.625: x + x^3 P(x^2), no cancellation near 0. Else (1 - e) / (1 + e) with
// e = exp(-2|x|) <= 0.29, which never overflows (e is 0 past |x| = 43.5: tanh is 1),
// and the sign of x. NaN stays NaN; +-inf gives +-1.

static OCTATTN_INLINE V Tanh(V x) {
  const V ax = Abs(x);
  const V z = Mul(x, x);
  V p = MulAdd(Set(-5.70498872745e-3f), z, Set(2.06390887954e-2f));
  p = MulAdd(p, z, Set(-5.37397155531e-2f));
  p = MulAdd(p, z, Set(1.33314422036e-1f));
  p = MulAdd(p, z, Set(-3.33332819422e-1f));
  const V small = MulAdd(Mul(p, z), x, x);
  const V e = Exp(Mul(ax, Set(-2.0f)));
  const V big = CopySign(Div(Sub(Set(1.0f), e), Add(Set(1.0f), e)), x);
  return IfLess(ax, Set(0.625f), small, big);
}
