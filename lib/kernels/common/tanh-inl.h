// The vocabulary's Tanh, for soft-capped scores. Included inside each backend's
// vocabulary struct after Exp; its ops provide Min, Max, Div and NaNOr.
//
// tanh(x) = x P(x^2) / Q(x^2) on |x| <= 7.905 (x clamped there, where tanh rounds to 1
// within 5 ulp), P of degree 6 and Q of degree 3 in x^2: a rational fit of this library
// (weighted least squares on relative error, 5.9e-9 in double; in float with FMA Horner
// steps 3.4e-7 relative at most, measured over [-12, 12] in steps of 3e-6 and down to
// 1e-38). One division, no exp: a third of the cost of exp-based forms. Odd, so
// tanh(-x) = -tanh(x) exactly; NaN stays NaN, +-inf gives +-1.

static OCTATTN_INLINE V Tanh(V x) {
  const V xc = Min(Max(x, Set(-7.90531110763549805f)), Set(7.90531110763549805f));
  const V z = Mul(xc, xc);
  V p = MulAdd(z, Set(-1.2698795002363326e-13f), Set(6.741329183748366e-11f));
  p = MulAdd(p, z, Set(-2.3000655605430819e-08f));
  p = MulAdd(p, z, Set(1.1797460261181404e-05f));
  p = MulAdd(p, z, Set(3.1635591515054694e-03f));
  p = MulAdd(p, z, Set(1.3136907468558004e-01f));
  p = MulAdd(p, z, Set(9.999999997566843e-01f));
  V q = MulAdd(z, Set(2.6339896489606602e-04f), Set(2.473104106451296e-02f));
  q = MulAdd(q, z, Set(4.6470240110660871e-01f));
  q = MulAdd(q, z, Set(1.0f));
  return NaNOr(x, Div(Mul(p, xc), q));
}
