package octattn_test

import (
	"fmt"

	octattn "github.com/octattn/octattn/bindings/go"
)

// One decode step: a query token of 8 heads against a [B, T, H, D] cache of 256 tokens
// and 2 kv heads.
func Example() {
	hq, hkv, t, d := 8, 2, 256, 64
	q := make([]float32, hq*d)
	cache := make([]float32, t*hkv*d)
	for i := range cache {
		cache[i] = float32(i%11) * 0.05
	}
	o := make([]float32, hq*d)
	ctx, err := octattn.NewContext()
	if err != nil {
		panic(err)
	}
	defer ctx.Close()
	qt, _ := octattn.BTHD(q, 1, 1, hq, d)
	kv, _ := octattn.BTHD(cache, 1, t, hkv, d)
	ot, _ := octattn.BTHD(o, 1, 1, hq, d)
	if err := ctx.Attention(nil, qt, kv, kv, ot, nil); err != nil {
		panic(err)
	}
	fmt.Printf("%.4f\n", o[0]) // a zero query weighs every key equally: the mean of the cache rows
	// Output: 0.2490
}
