package octattn

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
)

func data(n int, seed uint32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32((uint32(i)*2654435761+seed)%1000)/500 - 1
	}
	return x
}

// reference is causal attention in float64 over contiguous [B, H, T, D] data.
func reference(q, k, v []float32, b, hq, hkv, t, d int) []float64 {
	o := make([]float64, b*hq*t*d)
	scale := 1 / math.Sqrt(float64(d))
	for bi := 0; bi < b; bi++ {
		for h := 0; h < hq; h++ {
			kh := h / (hq / hkv)
			for i := 0; i < t; i++ {
				s := make([]float64, i+1)
				m := math.Inf(-1)
				for j := 0; j <= i; j++ {
					for c := 0; c < d; c++ {
						s[j] += float64(q[((bi*hq+h)*t+i)*d+c]) * float64(k[((bi*hkv+kh)*t+j)*d+c])
					}
					s[j] *= scale
					m = math.Max(m, s[j])
				}
				sum := 0.0
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					sum += s[j]
				}
				for j := range s {
					for c := 0; c < d; c++ {
						o[((bi*hq+h)*t+i)*d+c] += s[j] / sum * float64(v[((bi*hkv+kh)*t+j)*d+c])
					}
				}
			}
		}
	}
	return o
}

func TestAgainstFloat64WithGroupedQueries(t *testing.T) {
	b, hq, hkv, n, d := 2, 4, 2, 9, 16
	q, k, v := data(b*hq*n*d, 1), data(b*hkv*n*d, 2), data(b*hkv*n*d, 3)
	o := make([]float32, len(q))
	lse := make([]float32, b*hq*n)
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	tq, _ := BHTD(q, b, hq, n, d)
	tk, _ := BHTD(k, b, hkv, n, d)
	tv, _ := BHTD(v, b, hkv, n, d)
	to, _ := BHTD(o, b, hq, n, d)
	tl, _ := BHTD(lse, b, hq, n, 1)
	if err := ctx.Attention(nil, tq, tk, tv, to, &tl); err != nil {
		t.Fatal(err)
	}
	want := reference(q, k, v, b, hq, hkv, n, d)
	for i := range o {
		if math.Abs(float64(o[i])-want[i]) > 1e-5 {
			t.Fatalf("o[%d] = %v, want %v", i, o[i], want[i])
		}
	}
	run, err := ctx.LastRun()
	if err != nil || run.Algorithm != "fused" {
		t.Fatalf("last run %+v %v", run, err)
	}
}

func TestKeyScoresSumEachKVHeadsWeights(t *testing.T) {
	// One decode row per query head over 1500 keys: each kv head's keys receive its two
	// query heads' weights, which sum to 2; keys no row reads (past a window) get 0.
	hq, hkv, n, d := 4, 2, 1500, 16
	q, k, v := data(hq*d, 4), data(hkv*n*d, 5), data(hkv*n*d, 6)
	o, ks := make([]float32, len(q)), make([]float32, hkv*n)
	ctx, _ := NewContext()
	defer ctx.Close()
	tq, _ := BHTD(q, 1, hq, 1, d)
	tk, _ := BHTD(k, 1, hkv, n, d)
	tv, _ := BHTD(v, 1, hkv, n, d)
	to, _ := BHTD(o, 1, hq, 1, d)
	tks, _ := BHTD(ks, 1, hkv, n, 1)
	opts := &Options{Window: 1000}
	if err := ctx.AttentionKeyScores(opts, tq, tk, tv, to, nil, tks); err != nil {
		t.Fatal(err)
	}
	for h := 0; h < hkv; h++ {
		sum := 0.0
		for j := 0; j < n; j++ {
			x := ks[h*n+j]
			if (j < 500) != (x == 0) {
				t.Fatalf("kv head %d key %d: %v", h, j, x)
			}
			sum += float64(x)
		}
		if math.Abs(sum-2) > 1e-5 {
			t.Fatalf("kv head %d: the scores sum to %v", h, sum)
		}
	}
	bad := make([]float32, hkv*n)
	tb, _ := BHTD(bad, 1, 1, 2*n, 1)
	if err := ctx.AttentionKeyScores(opts, tq, tk, tv, to, nil, tb); !IsStatus(err, InvalidShape) {
		t.Fatalf("a wrong shape: %v", err)
	}
}

func TestMLAReadsVAsAViewOfTheLatentRows(t *testing.T) {
	// MLA's absorbed decode: 24 query heads on one latent kv head of 48 dimensions, v its
	// first 32 (a Tensor of k's data with k's strides and shape 32). The same bytes as v
	// copied out, on one and two threads (the keys split over threads).
	hq, n, d, dv := 24, 2600, 48, 32
	q, k := data(hq*d, 7), data(n*d, 8)
	cp := make([]float32, n*dv)
	for j := 0; j < n; j++ {
		copy(cp[j*dv:][:dv], k[j*d:][:dv])
	}
	tq, _ := BHTD(q, 1, hq, 1, d)
	tk, _ := BHTD(k, 1, 1, n, d)
	view := Tensor{Data: k, Shape: [4]int{1, 1, n, dv}, Strides: [4]int{n * d, n * d, d, 1}}
	tc, _ := BHTD(cp, 1, 1, n, dv)
	var outs [][]float32
	for i, v := range []Tensor{view, view, tc} {
		o := make([]float32, hq*dv)
		to, _ := BHTD(o, 1, hq, 1, dv)
		ctx, _ := NewContext()
		if err := ctx.SetThreads(1 + i%2); err != nil {
			t.Fatal(err)
		}
		if err := ctx.Attention(&Options{}, tq, tk, v, to, nil); err != nil {
			t.Fatal(err)
		}
		ctx.Close()
		outs = append(outs, o)
	}
	for _, o := range outs[1:] {
		for i := range o {
			if math.Float32bits(o[i]) != math.Float32bits(outs[0][i]) {
				t.Fatalf("element %d: %v vs %v", i, o[i], outs[0][i])
			}
		}
	}
}

func TestBTHDViewsGiveTheSameBytes(t *testing.T) {
	b, h, n, d := 1, 2, 5, 8
	x := data(b*n*h*d, 4) // [B, T, H, D]
	dense := make([]float32, len(x))
	for ti := 0; ti < n; ti++ {
		for hi := 0; hi < h; hi++ {
			copy(dense[(hi*n+ti)*d:][:d], x[(ti*h+hi)*d:][:d])
		}
	}
	ctx, _ := NewContext()
	defer ctx.Close()
	o1, o2 := make([]float32, len(x)), make([]float32, len(x))
	xt, _ := BTHD(x, b, n, h, d)
	ot, _ := BTHD(o1, b, n, h, d)
	if err := ctx.Attention(&Options{Window: 3}, xt, xt, xt, ot, nil); err != nil {
		t.Fatal(err)
	}
	dt, _ := BHTD(dense, b, h, n, d)
	od, _ := BHTD(o2, b, h, n, d)
	if err := ctx.Attention(&Options{Window: 3}, dt, dt, dt, od, nil); err != nil {
		t.Fatal(err)
	}
	for ti := 0; ti < n; ti++ {
		for hi := 0; hi < h; hi++ {
			for c := 0; c < d; c++ {
				if math.Float32bits(o1[(ti*h+hi)*d+c]) != math.Float32bits(o2[(hi*n+ti)*d+c]) {
					t.Fatal("layouts differ")
				}
			}
		}
	}
}

func TestErrorsCarryStatusAndMessageAndWriteNothing(t *testing.T) {
	ctx, _ := NewContext()
	defer ctx.Close()
	q, k := data(3*4*8, 5), data(2*4*8, 6)
	o := make([]float32, len(q))
	for i := range o {
		o[i] = 7
	}
	tq, _ := BHTD(q, 1, 3, 4, 8)
	tk, _ := BHTD(k, 1, 2, 4, 8)
	to, _ := BHTD(o, 1, 3, 4, 8)
	err := ctx.Attention(nil, tq, tk, tk, to, nil)
	if !IsStatus(err, InvalidShape) {
		t.Fatalf("got %v", err)
	}
	for _, x := range o {
		if x != 7 {
			t.Fatal("an output was written")
		}
	}
	tq2, _ := BHTD(q[:64], 1, 2, 4, 8)
	to2, _ := BHTD(o[:64], 1, 2, 4, 8)
	err = ctx.Attention(&Options{Full: true, Window: 2}, tq2, tk, tk, to2, nil)
	if !IsStatus(err, InvalidOption) || err.Error() == "" {
		t.Fatalf("got %v", err)
	}
	if _, err := BHTD(k, 1, 2, 4, 9); !IsStatus(err, InvalidShape) {
		t.Fatalf("a view past its slice: %v", err)
	}
	err = ctx.Attention(&Options{Sinks: []float32{1}}, tq2, tk, tk, to2, nil)
	if !IsStatus(err, InvalidShape) {
		t.Fatalf("sinks of the wrong length: %v", err)
	}
	closed, _ := NewContext()
	closed.Close()
	if err := closed.Attention(nil, tq2, tk, tk, to2, nil); !IsStatus(err, NullPointer) {
		t.Fatalf("a closed context: %v", err)
	}
}

func TestThreadsTargetsAndABroadcastMask(t *testing.T) {
	ctx, _ := NewContext()
	defer ctx.Close()
	if err := ctx.SetThreads(1); err != nil || ctx.Threads() != 1 {
		t.Fatal(err)
	}
	if err := ctx.SetThreads(-1); !IsStatus(err, InvalidOption) {
		t.Fatal(err)
	}
	if err := ctx.SetTarget(BackendXsimd, TargetSSE2); err != nil {
		t.Fatal(err)
	}
	x := data(2*4*8, 7)
	o := make([]float32, len(x))
	xt, _ := BHTD(x, 1, 2, 4, 8)
	ot, _ := BHTD(o, 1, 2, 4, 8)
	mask := &Mask{Data: []bool{true, false, true, true}, Shape: [4]int{1, 2, 4, 4}, Strides: [4]int{0, 0, 0, 1}}
	if err := ctx.Attention(&Options{Mask: mask, AlibiSlopes: []float32{0.5, 0.25}}, xt, xt, xt, ot, nil); err != nil {
		t.Fatal(err)
	}
	run, _ := ctx.LastRun()
	if run.Backend != "xsimd" || run.Target != "sse2" || run.Threads != 1 {
		t.Fatalf("%+v", run)
	}
	for c := 0; c < 8; c++ { // row 1 reads key 0 only
		if math.Abs(float64(o[8+c]-x[c])) > 1e-6 {
			t.Fatal("the mask was not applied")
		}
	}
}

func TestABlockMaskGivesTheBytesOfItsMaskTensor(t *testing.T) {
	// 2 query blocks of 4 rows over 3 key blocks of 4 keys: block 0 reads key block 0
	// (full), block 1 key blocks 0 (partial, no mask tensor: read whole) and 2 (full).
	b, h, tq, tk, d := 1, 2, 8, 12, 8
	q, k := data(b*h*tq*d, 5), data(b*h*tk*d, 6)
	allow := make([]bool, tq*tk)
	for i := 0; i < tq; i++ {
		for j := 0; j < tk; j++ {
			allow[i*tk+j] = j < 4 || (i >= 4 && j >= 8)
		}
	}
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	run := func(opts *Options) ([]float32, error) {
		o := make([]float32, len(q))
		tq4, _ := BHTD(q, b, h, tq, d)
		tk4, _ := BHTD(k, b, h, tk, d)
		to, _ := BHTD(o, b, h, tq, d)
		return o, ctx.Attention(opts, tq4, tk4, tk4, to, nil)
	}
	lists := BlockMask{Counts: []int32{0, 1}, Indices: []int32{0, 0, 0, 0},
		FullCounts: []int32{1, 1}, FullIndices: []int32{0, 0, 2, 0},
		Entries: 1, Heads: 1, QBlocks: 2, N: 2, BlockQ: 4, BlockKV: 4}
	withBlocks, err := run(&Options{Full: true, Blocks: &lists})
	if err != nil {
		t.Fatal(err)
	}
	mask := &Mask{Data: allow, Shape: [4]int{1, 1, tq, tk}, Strides: [4]int{tq * tk, 0, tk, 1}}
	withMask, err := run(&Options{Full: true, Mask: mask})
	if err != nil {
		t.Fatal(err)
	}
	for i := range withBlocks {
		if math.Float32bits(withBlocks[i]) != math.Float32bits(withMask[i]) {
			t.Fatalf("element %d: %v vs %v", i, withBlocks[i], withMask[i])
		}
	}
	bad := lists
	bad.FullIndices = []int32{3, 0, 2, 0} // past the key blocks
	if _, err := run(&Options{Blocks: &bad}); !IsStatus(err, InvalidOption) {
		t.Fatal(err)
	}
	short := lists
	short.Indices = []int32{0, 0, 0}
	if _, err := run(&Options{Blocks: &short}); !IsStatus(err, InvalidShape) {
		t.Fatal(err)
	}
}

func TestKeyListsGiveTheReferenceBytesOfTheirMaskTensor(t *testing.T) {
	// 2 heads on one kv head, 6 rows over 40 keys: each row's list (unsorted, with a
	// duplicate, -1 and a key past its position), the second list a local window.
	hq, tq, tk, d, n := 2, 6, 40, 8, 5
	q, k := data(hq*tq*d, 21), data(tk*d, 22)
	indices := make([]int32, tq*n)
	counts := make([]int32, tq)
	local := make([]int32, tq*2)
	allow := make([]bool, tq*tk)
	for i := 0; i < tq; i++ {
		pos := tk - tq + i
		row := []int{(7*i + 3) % tk, (11*i + 1) % tk, (7*i + 3) % tk, tk - 1, -1}
		counts[i] = 5
		if i == 2 {
			counts[i] = 0
		}
		for x, j := range row {
			indices[i*n+x] = int32(j)
			if i != 2 && j >= 0 && j <= pos {
				allow[i*tk+j] = true
			}
		}
		for x := 0; x < 2; x++ {
			local[i*2+x] = int32(pos - x)
			allow[i*tk+pos-x] = true
		}
	}
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	run := func(opts *Options) ([]float32, error) {
		o := make([]float32, len(q))
		tq4, _ := BHTD(q, 1, hq, tq, d)
		tk4, _ := BHTD(k, 1, 1, tk, d)
		to, _ := BHTD(o, 1, hq, tq, d)
		return o, ctx.Attention(opts, tq4, tk4, tk4, to, nil)
	}
	list := KeyList{Indices: indices, Counts: counts, Entries: 1, Heads: 1, Rows: tq, N: n}
	window := KeyList{Indices: local, Entries: 1, Heads: 1, Rows: tq, N: 2}
	withLists, err := run(&Options{KeyList: &list, KeyList2: &window, Algorithm: AlgorithmReference})
	if err != nil {
		t.Fatal(err)
	}
	mask := &Mask{Data: allow, Shape: [4]int{1, 1, tq, tk}, Strides: [4]int{tq * tk, 0, tk, 1}}
	withMask, err := run(&Options{Mask: mask, Algorithm: AlgorithmReference})
	if err != nil {
		t.Fatal(err)
	}
	fused, err := run(&Options{KeyList: &list, KeyList2: &window, Algorithm: AlgorithmFused})
	if err != nil {
		t.Fatal(err)
	}
	for i := range withLists {
		if math.Float32bits(withLists[i]) != math.Float32bits(withMask[i]) {
			t.Fatalf("element %d: %v vs %v", i, withLists[i], withMask[i])
		}
		if math.Abs(float64(fused[i]-withMask[i])) > 1e-5 {
			t.Fatalf("fused element %d: %v vs %v", i, fused[i], withMask[i])
		}
	}
	bad := list
	bad.Indices = append([]int32{int32(tk)}, indices[1:]...) // past the cache
	if _, err := run(&Options{KeyList: &bad}); !IsStatus(err, InvalidOption) {
		t.Fatal(err)
	}
	short := list
	short.Counts = counts[:3]
	if _, err := run(&Options{KeyList: &short}); !IsStatus(err, InvalidShape) {
		t.Fatal(err)
	}
}

func TestATreeGivesTheBytesOfItsMaskTensor(t *testing.T) {
	// 2 entries, 6 draft tokens over 5 prefix keys: entry 0 a binary tree (node c's
	// parent (c+1)/2-1), entry 1 a chain.
	b, h, n, p, d := 2, 2, 6, 5, 8
	q, k := data(b*h*n*d, 3), data(b*h*(p+n)*d, 4)
	bits := make([]byte, b*n)
	allow := make([]bool, b*n*(p+n))
	for e := 0; e < b; e++ {
		for i := 0; i < n; i++ {
			for c := i; c >= 0; {
				bits[e*n+i] |= 1 << c
				if e == 0 {
					c = (c+1)/2 - 1
				} else {
					c--
				}
			}
			for j := 0; j < p+n; j++ {
				allow[(e*n+i)*(p+n)+j] = j < p || bits[e*n+i]>>(j-p)&1 == 1
			}
		}
	}
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	run := func(opts *Options) ([]float32, error) {
		o := make([]float32, len(q))
		tq, _ := BHTD(q, b, h, n, d)
		tk, _ := BHTD(k, b, h, p+n, d)
		to, _ := BHTD(o, b, h, n, d)
		return o, ctx.Attention(opts, tq, tk, tk, to, nil)
	}
	withTree, err := run(&Options{Tree: bits, TreeRowBytes: 1, TreeStride: n})
	if err != nil {
		t.Fatal(err)
	}
	mask := &Mask{Data: allow, Shape: [4]int{b, 1, n, p + n}, Strides: [4]int{n * (p + n), 0, p + n, 1}}
	withMask, err := run(&Options{Mask: mask})
	if err != nil {
		t.Fatal(err)
	}
	for i := range withTree {
		if math.Float32bits(withTree[i]) != math.Float32bits(withMask[i]) {
			t.Fatalf("element %d: %v vs %v", i, withTree[i], withMask[i])
		}
	}
	if _, err := run(&Options{Tree: bits[:b*n-1], TreeRowBytes: 1, TreeStride: n}); !IsStatus(err, InvalidOption) {
		t.Fatal(err)
	}
}

func TestBackwardMatchesTheReferenceAlgorithm(t *testing.T) {
	b, hq, hkv, n, d := 1, 4, 2, 70, 16
	q, k, v, dout := data(b*hq*n*d, 11), data(b*hkv*n*d, 12), data(b*hkv*n*d, 13), data(b*hq*n*d, 14)
	o := make([]float32, len(q))
	lse := make([]float32, b*hq*n)
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	sinks := []float32{0.5, -1, 0.25, 2}
	tq, _ := BHTD(q, b, hq, n, d)
	tk, _ := BHTD(k, b, hkv, n, d)
	tv, _ := BHTD(v, b, hkv, n, d)
	to, _ := BHTD(o, b, hq, n, d)
	tl, _ := BHTD(lse, b, hq, n, 1)
	td, _ := BHTD(dout, b, hq, n, d)
	if err := ctx.Attention(&Options{Window: 20, Sinks: sinks}, tq, tk, tv, to, &tl); err != nil {
		t.Fatal(err)
	}
	grads := func(algorithm Algorithm) [][]float32 {
		dq, dk, dv := make([]float32, len(q)), make([]float32, len(k)), make([]float32, len(v))
		g := Grads{DSinks: make([]float32, hq)}
		g.DQ, _ = BHTD(dq, b, hq, n, d)
		g.DK, _ = BHTD(dk, b, hkv, n, d)
		g.DV, _ = BHTD(dv, b, hkv, n, d)
		opts := &Options{Window: 20, Sinks: sinks, Algorithm: algorithm}
		if err := ctx.AttentionBackward(opts, tq, tk, tv, to, tl, td, nil, &g); err != nil {
			t.Fatal(err)
		}
		return [][]float32{dq, dk, dv, g.DSinks}
	}
	fused, ref := grads(AlgorithmFused), grads(AlgorithmReference)
	for i := range fused {
		for j := range fused[i] {
			if math.Abs(float64(fused[i][j]-ref[i][j])) > 1e-4 {
				t.Fatalf("gradient %d[%d]: %v vs reference %v", i, j, fused[i][j], ref[i][j])
			}
		}
	}
	g := Grads{DSinks: make([]float32, 3)}
	g.DQ, _ = BHTD(make([]float32, len(q)), b, hq, n, d)
	g.DK, _ = BHTD(make([]float32, len(k)), b, hkv, n, d)
	g.DV, _ = BHTD(make([]float32, len(v)), b, hkv, n, d)
	err = ctx.AttentionBackward(&Options{Sinks: sinks}, tq, tk, tv, to, tl, td, nil, &g)
	if !IsStatus(err, InvalidShape) {
		t.Fatalf("short DSinks: %v", err)
	}
}

// A left-padded batch and the same sequences as a ragged batch give each sequence the
// bytes of a call of its own; arrays of the wrong length are refused, nothing written.
func TestPaddedAndRaggedBatchesGiveEachSequenceItsOwnBytes(t *testing.T) {
	hq, hkv, n, d := 4, 2, 12, 8
	q, k, v := data(3*hq*n*d, 21), data(3*hkv*n*d, 22), data(3*hkv*n*d, 23)
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	// rows [a, e) of batch entry b, every head, as contiguous [1, h, e - a, d] data
	cut := func(x []float32, b, h, a, e int) []float32 {
		var out []float32
		for hh := 0; hh < h; hh++ {
			at := (b*h + hh) * n * d
			out = append(out, x[at+a*d:at+e*d]...)
		}
		return out
	}
	own := func(b, a, e int, qs, ks, vs []float32) []float32 {
		m := e - a
		qq, kk, vv := cut(qs, b, hq, a, e), cut(ks, b, hkv, a, e), cut(vs, b, hkv, a, e)
		o := make([]float32, len(qq))
		tq, _ := BHTD(qq, 1, hq, m, d)
		tk, _ := BHTD(kk, 1, hkv, m, d)
		tv, _ := BHTD(vv, 1, hkv, m, d)
		to, _ := BHTD(o, 1, hq, m, d)
		if err := ctx.Attention(nil, tq, tk, tv, to, nil); err != nil {
			t.Fatal(err)
		}
		return o
	}
	same := func(x, y []float32) bool {
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				return false
			}
		}
		return len(x) == len(y)
	}
	starts := []int64{0, 5, 9}
	o := make([]float32, len(q))
	tq, _ := BHTD(q, 3, hq, n, d)
	tk, _ := BHTD(k, 3, hkv, n, d)
	tv, _ := BHTD(v, 3, hkv, n, d)
	to, _ := BHTD(o, 3, hq, n, d)
	opts := &Options{KVStarts: starts, KVLens: []int64{12, 7, 3}}
	if err := ctx.Attention(opts, tq, tk, tv, to, nil); err != nil {
		t.Fatal(err)
	}
	for b, p := range starts {
		if !same(cut(o, b, hq, int(p), n), own(b, int(p), n, q, k, v)) {
			t.Fatalf("padded sequence %d differs from its own call", b)
		}
	}
	cu := []int64{0, 5, 6, 12}
	qr, kr, vr := q[:hq*n*d], k[:hkv*n*d], v[:hkv*n*d]
	or := make([]float32, len(qr))
	rq, _ := BHTD(qr, 1, hq, n, d)
	rk, _ := BHTD(kr, 1, hkv, n, d)
	rv, _ := BHTD(vr, 1, hkv, n, d)
	ro, _ := BHTD(or, 1, hq, n, d)
	if err := ctx.Attention(&Options{CuSeqlensQ: cu, CuSeqlensK: cu}, rq, rk, rv, ro, nil); err != nil {
		t.Fatal(err)
	}
	for s := 0; s < 3; s++ {
		a, e := int(cu[s]), int(cu[s+1])
		if !same(cut(or, 0, hq, a, e), own(0, a, e, qr, kr, vr)) {
			t.Fatalf("ragged sequence %d differs from its own call", s)
		}
	}
	untouched := make([]float32, len(q))
	for i := range untouched {
		untouched[i] = 7
	}
	tu, _ := BHTD(untouched, 3, hq, n, d)
	err = ctx.Attention(&Options{KVLens: []int64{1, 2}}, tq, tk, tv, tu, nil)
	if e, ok := err.(*Error); !ok || e.Status != InvalidOption {
		t.Fatalf("short KVLens: %v", err)
	}
	for _, x := range untouched {
		if x != 7 {
			t.Fatal("a refused call wrote its output")
		}
	}
}

// bf16 patterns: the high half of a float32's bits; their values widened back.
func toBF16(x []float32) ([]uint16, []float32) {
	h, w := make([]uint16, len(x)), make([]float32, len(x))
	for i, f := range x {
		h[i] = uint16(math.Float32bits(f) >> 16)
		w[i] = math.Float32frombits(uint32(h[i]) << 16)
	}
	return h, w
}

func TestBF16TensorsAreTheFloat32CallOnTheirValues(t *testing.T) {
	const b, hq, hkv, n, d = 1, 4, 2, 300, 16
	q16, q := toBF16(data(b*hq*n*d, 31))
	k16, k := toBF16(data(b*hkv*n*d, 32))
	v16, v := toBF16(data(b*hkv*n*d, 33))
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	tq, _ := BHTD(q, b, hq, n, d)
	tk, _ := BHTD(k, b, hkv, n, d)
	tv, _ := BHTD(v, b, hkv, n, d)
	want := make([]float32, len(q))
	tw, _ := BHTD(want, b, hq, n, d)
	if err := ctx.Attention(nil, tq, tk, tv, tw, nil); err != nil {
		t.Fatal(err)
	}
	// f32 queries over the bf16 cache: the same bytes.
	hk, _ := HalfBHTD(k16, BF16, b, hkv, n, d)
	hv, _ := HalfBHTD(v16, BF16, b, hkv, n, d)
	o := make([]float32, len(q))
	to, _ := BHTD(o, b, hq, n, d)
	if err := ctx.Attention(nil, tq, hk, hv, to, nil); err != nil {
		t.Fatal(err)
	}
	for i := range o {
		if math.Float32bits(o[i]) != math.Float32bits(want[i]) {
			t.Fatalf("element %d: %v, the f32 call %v", i, o[i], want[i])
		}
	}
	// All bf16, o too: the f32 result rounded (within half a bf16 unit).
	hq16, _ := HalfBHTD(q16, BF16, b, hq, n, d)
	o16 := make([]uint16, len(q))
	ho, _ := HalfBHTD(o16, BF16, b, hq, n, d)
	if err := ctx.Attention(nil, hq16, hk, hv, ho, nil); err != nil {
		t.Fatal(err)
	}
	// On avx512_bf16 and amx_bf16 the weighted sums round the weights to bf16: the header adds
	// max|v| * 2^-8 to the bound there.
	pairs := 0.0
	if run, err := ctx.LastRun(); err == nil && (run.Target == "avx512_bf16" || run.Target == "amx_bf16") {
		for _, x := range v {
			pairs = math.Max(pairs, math.Abs(float64(x))/256)
		}
	}
	for i, h := range o16 {
		got := math.Float32frombits(uint32(h) << 16)
		if math.Abs(float64(got-want[i])) > math.Abs(float64(want[i]))/256+pairs {
			t.Fatalf("element %d: %v, the f32 call %v", i, got, want[i])
		}
	}
	// An f16 o under bf16 queries: refused, nothing written.
	bad := make([]uint16, len(q))
	hb, _ := HalfBHTD(bad, F16, b, hq, n, d)
	if err := ctx.Attention(nil, hq16, hk, hv, hb, nil); !IsStatus(err, Unsupported) {
		t.Fatalf("got %v, want Unsupported", err)
	}
	for _, h := range bad {
		if h != 0 {
			t.Fatal("a refused call wrote o")
		}
	}
}

// bf16 q, k, v, o and dout train: the float32 gradients are the float32 call's on their
// values (byte for byte where the target widens them; on avx512_bf16 and amx_bf16 the
// products of whole tiles run on bf16 pairs, within the header's added terms); a bf16
// gradient is refused with nothing written.
func TestBF16BackwardIsTheFloat32CallOnTheirValues(t *testing.T) {
	const b, hq, hkv, n, d = 1, 4, 2, 150, 16
	q16, q := toBF16(data(b*hq*n*d, 51))
	k16, k := toBF16(data(b*hkv*n*d, 52))
	v16, v := toBF16(data(b*hkv*n*d, 53))
	do16, dout := toBF16(data(b*hq*n*d, 54))
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	tq, _ := BHTD(q, b, hq, n, d)
	tk, _ := BHTD(k, b, hkv, n, d)
	tv, _ := BHTD(v, b, hkv, n, d)
	lse := make([]float32, b*hq*n)
	tl, _ := BHTD(lse, b, hq, n, 1)
	of := make([]float32, len(q))
	to, _ := BHTD(of, b, hq, n, d)
	if err := ctx.Attention(nil, tq, tk, tv, to, &tl); err != nil {
		t.Fatal(err)
	}
	o16, o := toBF16(of) // the bf16 o a bf16 forward would hand back, and its values
	grads := func(q, k, v, o, dout Tensor, dq Tensor) ([][]float32, error) {
		dk, dv := make([]float32, len(k16)), make([]float32, len(v16))
		g := Grads{DQ: dq}
		g.DK, _ = BHTD(dk, b, hkv, n, d)
		g.DV, _ = BHTD(dv, b, hkv, n, d)
		err := ctx.AttentionBackward(nil, q, k, v, o, tl, dout, nil, &g)
		return [][]float32{dq.Data, dk, dv}, err
	}
	half := func(x []uint16, h int) Tensor {
		r, _ := HalfBHTD(x, BF16, b, h, n, d)
		return r
	}
	wide := func(x []float32, h int) Tensor {
		r, _ := BHTD(x, b, h, n, d)
		return r
	}
	want, err := grads(tq, tk, tv, wide(o, hq), wide(dout, hq), wide(make([]float32, len(q)), hq))
	if err != nil {
		t.Fatal(err)
	}
	got, err := grads(half(q16, hq), half(k16, hkv), half(v16, hkv), half(o16, hq), half(do16, hq),
		wide(make([]float32, len(q)), hq))
	if err != nil {
		t.Fatal(err)
	}
	run, err := ctx.LastRun()
	if err != nil {
		t.Fatal(err)
	}
	pairs := run.Target == "avx512_bf16" || run.Target == "amx_bf16"
	for i := range want {
		top := 0.0
		for _, x := range want[i] {
			top = math.Max(top, math.Abs(float64(x)))
		}
		for j, x := range got[i] {
			if pairs && math.Abs(float64(x-want[i][j])) > top/64 ||
				!pairs && math.Float32bits(x) != math.Float32bits(want[i][j]) {
				t.Fatalf("gradient %d[%d] on %s: %v, the float32 call %v", i, j, run.Target, x, want[i][j])
			}
		}
	}
	// A bf16 dq: refused, nothing written to any gradient.
	bad := make([]uint16, len(q))
	g := Grads{DQ: half(bad, hq)}
	dk := make([]float32, len(k16))
	g.DK, _ = BHTD(dk, b, hkv, n, d)
	g.DV, _ = BHTD(make([]float32, len(v16)), b, hkv, n, d)
	err = ctx.AttentionBackward(nil, half(q16, hq), half(k16, hkv), half(v16, hkv), half(o16, hq), tl,
		half(do16, hq), nil, &g)
	if !IsStatus(err, Unsupported) {
		t.Fatalf("a bf16 dq: %v, want Unsupported", err)
	}
	for i := range bad {
		if bad[i] != 0 {
			t.Fatal("a refused call wrote dq")
		}
	}
	for i := range dk {
		if dk[i] != 0 {
			t.Fatal("a refused call wrote dk")
		}
	}
}

func TestInt8CacheIsTheFloat32CallOnItsValues(t *testing.T) {
	const b, hq, hkv, n, d, g = 1, 4, 2, 300, 64, 32
	q, k, v := data(b*hq*n*d, 41), data(b*hkv*n*d, 42), data(b*hkv*n*d, 43)
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	tq, _ := BHTD(q, b, hq, n, d)
	// The cache stored by KVStore: int8 values, one float32 scale per token and g channels.
	store := func(x []float32) (Tensor, Tensor, []float32) {
		src, _ := BHTD(x, b, hkv, n, d)
		dst, _ := QuantBHTD(make([]byte, len(x)), Int8, b, hkv, n, d)
		sc := make([]float32, b*hkv*n*d/g)
		ts, _ := BHTD(sc, b, hkv, n, d/g)
		if err := ctx.KVStore(src, dst, &ts, 0, nil); err != nil {
			t.Fatal(err)
		}
		values := make([]float32, len(x))
		for i := range values {
			values[i] = sc[i/g] * float32(int8(dst.Bytes[i]))
		}
		return dst, ts, values
	}
	qk, ks, kd := store(k)
	qv, vs, vd := store(v)
	o := make([]float32, len(q))
	to, _ := BHTD(o, b, hq, n, d)
	if err := ctx.Attention(&Options{KScale: &ks, VScale: &vs}, tq, qk, qv, to, nil); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, len(q))
	tw, _ := BHTD(want, b, hq, n, d)
	tk, _ := BHTD(kd, b, hkv, n, d)
	tv, _ := BHTD(vd, b, hkv, n, d)
	if err := ctx.Attention(nil, tq, tk, tv, tw, nil); err != nil {
		t.Fatal(err)
	}
	for i := range o {
		if math.Float32bits(o[i]) != math.Float32bits(want[i]) {
			t.Fatalf("element %d: %v, the f32 call on the values %v", i, o[i], want[i])
		}
	}
	// Without its scales an int8 cache is refused.
	if err := ctx.Attention(nil, tq, qk, qv, to, nil); err == nil {
		t.Fatal("an int8 cache without scales was accepted")
	}
}

// DeepSeek V3.2's fp8 latent rows, stored by KVStore and read as k (576 values) and v
// (the first 512 of the same rows): the float32 call on the values the header defines.
func TestDeepSeekLatentCacheIsTheFloat32CallOnItsValues(t *testing.T) {
	const hq, n = 8, 200
	latent, q := data(n*576, 61), data(hq*576, 62)
	ctx, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	src, _ := BHTD(latent, 1, 1, n, 576)
	rows := make([]byte, n*656)
	k, err := QuantBHTD(rows, FP8DSMLA, 1, 1, n, 576)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctx.KVStore(src, k, nil, 0, nil); err != nil {
		t.Fatal(err)
	}
	v := k
	v.Shape[3] = 512
	e4m3 := func(b byte) float32 {
		e, m := int((b>>3)&15), float64(b&7)
		x := math.Ldexp(8+m, e-10)
		if e == 0 {
			x = math.Ldexp(m, -9)
		}
		if b&0x80 != 0 {
			x = -x
		}
		return float32(x)
	}
	values, valueRows := make([]float32, n*576), make([]float32, n*512)
	for j := 0; j < n; j++ {
		r := rows[j*656 : (j+1)*656]
		for d := 0; d < 576; d++ {
			if d < 512 {
				g := 512 + 4*(d/128)
				values[j*576+d] = math.Float32frombits(binary.LittleEndian.Uint32(r[g:])) * e4m3(r[d])
				valueRows[j*512+d] = values[j*576+d]
			} else {
				values[j*576+d] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(r[528+2*(d-512):])) << 16)
			}
		}
	}
	tq, _ := BHTD(q, 1, hq, 1, 576)
	o, want := make([]float32, hq*512), make([]float32, hq*512)
	to, _ := BHTD(o, 1, hq, 1, 512)
	tw, _ := BHTD(want, 1, hq, 1, 512)
	if err := ctx.Attention(nil, tq, k, v, to, nil); err != nil {
		t.Fatal(err)
	}
	tk, _ := BHTD(values, 1, 1, n, 576)
	tv, _ := BHTD(valueRows, 1, 1, n, 512)
	if err := ctx.Attention(nil, tq, tk, tv, tw, nil); err != nil {
		t.Fatal(err)
	}
	for i := range o {
		if math.Float32bits(o[i]) != math.Float32bits(want[i]) {
			t.Fatalf("element %d: %v, the f32 call on the values %v", i, o[i], want[i])
		}
	}
}

// The linked library is this module's release or a later one with the same major version.
func TestTheLibraryIsAtLeastTheModulesRelease(t *testing.T) {
	var lib, mod [3]int
	if _, err := fmt.Sscanf(Version(), "%d.%d.%d", &lib[0], &lib[1], &lib[2]); err != nil {
		t.Fatalf("library version %q: %v", Version(), err)
	}
	if _, err := fmt.Sscanf(ModuleVersion, "%d.%d.%d", &mod[0], &mod[1], &mod[2]); err != nil {
		t.Fatalf("ModuleVersion %q: %v", ModuleVersion, err)
	}
	older := lib[0] != mod[0] || lib[1] < mod[1] || (lib[1] == mod[1] && lib[2] < mod[2])
	if older {
		t.Fatalf("library %s, module %s", Version(), ModuleVersion)
	}
}
