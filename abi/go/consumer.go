// Calls liboctattn from Go through cgo and the public header, as a Go runtime would.
package main

/*
#cgo LDFLAGS: -loctattn
#include <stdlib.h>
#include "octattn.h"
*/
import "C"

import (
	"fmt"
	"math"
	"os"
	"strings"
	"unsafe"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// checkLayouts compares cgo's view of the header's structs with their pinned layouts
// (as in abi/consumer.c; 0.2 appended k_start to the options, 0.3 chunk and the score
// modifiers).
func checkLayouts() {
	var t C.octattn_tensor
	var o C.octattn_attention_options
	var r C.octattn_run_info
	pins := []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof(octattn_tensor)", unsafe.Sizeof(t), 80},
		{"tensor.data", unsafe.Offsetof(t.data), 0},
		{"tensor.dtype", unsafe.Offsetof(t.dtype), 8},
		{"tensor.reserved", unsafe.Offsetof(t.reserved), 12},
		{"tensor.shape", unsafe.Offsetof(t.shape), 16},
		{"tensor.stride", unsafe.Offsetof(t.stride), 48},
		{"options.struct_size", unsafe.Offsetof(o.struct_size), 0},
		{"options.causal", unsafe.Offsetof(o.causal), 8},
		{"options.algorithm", unsafe.Offsetof(o.algorithm), 12},
		{"options.window", unsafe.Offsetof(o.window), 16},
		{"options.stride", unsafe.Offsetof(o.stride), 24},
		{"options.q_start", unsafe.Offsetof(o.q_start), 32},
		{"options.scale", unsafe.Offsetof(o.scale), 40},
		{"options.reserved", unsafe.Offsetof(o.reserved), 44},
		{"options.k_start", unsafe.Offsetof(o.k_start), 48},
		{"options.chunk", unsafe.Offsetof(o.chunk), 56},
		{"options.softcap", unsafe.Offsetof(o.softcap), 64},
		{"options.reserved2", unsafe.Offsetof(o.reserved2), 68},
		{"options.alibi_slopes", unsafe.Offsetof(o.alibi_slopes), 72},
		{"options.sinks", unsafe.Offsetof(o.sinks), 80},
		{"options.bias", unsafe.Offsetof(o.bias), 88},
		{"options.mask", unsafe.Offsetof(o.mask), 96},
		{"options.q_starts", unsafe.Offsetof(o.q_starts), 104},
		{"options.kv_starts", unsafe.Offsetof(o.kv_starts), 112},
		{"options.kv_lens", unsafe.Offsetof(o.kv_lens), 120},
		{"options.sequences", unsafe.Offsetof(o.sequences), 128},
		{"options.cu_seqlens_q", unsafe.Offsetof(o.cu_seqlens_q), 136},
		{"options.cu_seqlens_k", unsafe.Offsetof(o.cu_seqlens_k), 144},
		{"options.block_table", unsafe.Offsetof(o.block_table), 152},
		{"options.block_table_cols", unsafe.Offsetof(o.block_table_cols), 160},
		{"options.k_scale", unsafe.Offsetof(o.k_scale), 168},
		{"options.v_scale", unsafe.Offsetof(o.v_scale), 176},
		{"options.k_scale_rows", unsafe.Offsetof(o.k_scale_rows), 184},
		{"options.v_scale_rows", unsafe.Offsetof(o.v_scale_rows), 192},
		{"options.qk_precision", unsafe.Offsetof(o.qk_precision), 200},
		{"options.reserved3", unsafe.Offsetof(o.reserved3), 204},
		{"options.tree", unsafe.Offsetof(o.tree), 208},
		{"options.tree_row_bytes", unsafe.Offsetof(o.tree_row_bytes), 216},
		{"options.tree_stride", unsafe.Offsetof(o.tree_stride), 224},
		{"options.block_counts", unsafe.Offsetof(o.block_counts), 232},
		{"options.block_indices", unsafe.Offsetof(o.block_indices), 240},
		{"options.full_block_counts", unsafe.Offsetof(o.full_block_counts), 248},
		{"options.full_block_indices", unsafe.Offsetof(o.full_block_indices), 256},
		{"options.block_q", unsafe.Offsetof(o.block_q), 264},
		{"options.block_kv", unsafe.Offsetof(o.block_kv), 272},
		{"options.key_scores", unsafe.Offsetof(o.key_scores), 280},
		{"options.key_indices", unsafe.Offsetof(o.key_indices), 288},
		{"options.key_counts", unsafe.Offsetof(o.key_counts), 296},
		{"options.key_indices2", unsafe.Offsetof(o.key_indices2), 304},
		{"options.key_counts2", unsafe.Offsetof(o.key_counts2), 312},
		{"sizeof(octattn_attention_options)", unsafe.Sizeof(o), 320},
		{"run_info.struct_size", unsafe.Offsetof(r.struct_size), 0},
		{"run_info.algorithm", unsafe.Offsetof(r.algorithm), 8},
		{"run_info.backend", unsafe.Offsetof(r.backend), 12},
		{"run_info.target", unsafe.Offsetof(r.target), 16},
		{"run_info.threads", unsafe.Offsetof(r.threads), 20},
		{"run_info.shared_kv_rows", unsafe.Offsetof(r.shared_kv_rows), 24},
		{"sizeof(octattn_run_info)", unsafe.Sizeof(r), 32},
	}
	for _, p := range pins {
		if p.got != p.want {
			fail("layout: %s is %d, pinned %d", p.name, p.got, p.want)
		}
	}
	if unsafe.Sizeof(o) < 48 || unsafe.Sizeof(r) < 24 {
		fail("layout: an option struct is smaller than in version 0.1")
	}
}

func main() {
	checkLayouts()
	const t, d = 7, 5
	// C memory for the tensors: cgo forbids C keeping pointers to Go memory.
	bufs := make([]*C.float, 4)
	vals := make([][]float32, 4)
	tensors := make([]C.octattn_tensor, 4)
	shape := [4]C.int64_t{1, 1, t, d}
	for n := range bufs {
		bufs[n] = (*C.float)(C.malloc(C.size_t(t * d * 4)))
		defer C.free(unsafe.Pointer(bufs[n]))
		vals[n] = unsafe.Slice((*float32)(unsafe.Pointer(bufs[n])), t*d)
		for i := range vals[n] {
			if n < 3 {
				vals[n][i] = float32(math.Cos(float64(i*(n+2)) * 0.41))
			}
		}
		if st := C.octattn_tensor_init(&tensors[n], unsafe.Pointer(bufs[n]), &shape[0], C.OCTATTN_LAYOUT_BHTD); st != 0 {
			fail("tensor_init: %d", st)
		}
	}
	var opts C.octattn_attention_options
	C.octattn_attention_options_init(&opts)
	var ctx *C.octattn_context
	if st := C.octattn_context_create(&ctx); st != 0 {
		fail("context_create: %d", st)
	}
	defer C.octattn_context_destroy(ctx)
	if st := C.octattn_attention(ctx, &opts, &tensors[0], &tensors[1], &tensors[2], &tensors[3], nil, nil, nil, 0); st != 0 {
		fail("attention: %s", C.GoString(C.octattn_context_last_error(ctx)))
	}
	q, k, v, o := vals[0], vals[1], vals[2], vals[3]
	for i := 0; i < t; i++ { // each causal row, in float64
		s := make([]float64, i+1)
		m := math.Inf(-1)
		for j := 0; j <= i; j++ {
			for c := 0; c < d; c++ {
				s[j] += float64(q[i*d+c]) * float64(k[j*d+c])
			}
			s[j] /= math.Sqrt(d)
			m = math.Max(m, s[j])
		}
		sum := 0.0
		for j := range s {
			s[j] = math.Exp(s[j] - m)
			sum += s[j]
		}
		for c := 0; c < d; c++ {
			want := 0.0
			for j := 0; j <= i; j++ {
				want += s[j] * float64(v[j*d+c])
			}
			if got := float64(o[i*d+c]); math.Abs(got-want/sum) > 1e-5 {
				fail("row %d dim %d: %g, want %g", i, c, got, want/sum)
			}
		}
	}
	opts.window = -1 // a bad option is a status and a message
	st := C.octattn_attention(ctx, &opts, &tensors[0], &tensors[1], &tensors[2], &tensors[3], nil, nil, nil, 0)
	if C.GoString(C.octattn_status_string(st)) != "invalid option" ||
		!strings.Contains(C.GoString(C.octattn_context_last_error(ctx)), "window") {
		fail("bad option: status %d", st)
	}
	fmt.Println("go consumer: ok, version", C.GoString(C.octattn_version_string()))
}
