// Package octattn computes causal self-attention on the CPU through liboctattn's C API
// (include/octattn.h), found with pkg-config: set PKG_CONFIG_PATH to an installed
// prefix's lib/pkgconfig (cmake --install build/release --prefix <prefix>).
//
// Tensors are views of []float32 slices with a shape and strides in elements, checked
// against the slice's length; the library validates everything else before it writes
// anything, and a failed call returns an *Error with its status and message.
package octattn

// #cgo pkg-config: octattn
// #include <stdlib.h>
// #include <octattn.h>
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Status codes of include/octattn.h.
const (
	OK                = 0
	NullPointer       = 1
	InvalidShape      = 2
	InvalidStride     = 3
	Overflow          = 4
	Aliasing          = 5
	InvalidOption     = 6
	StructSize        = 7
	WorkspaceTooSmall = 8
	Unsupported       = 9
	OutOfMemory       = 10
	Misaligned        = 11
	Internal          = 12
)

// Error is a failed call: the library's status and message.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("octattn: %s (%s)", e.Message, StatusString(e.Status))
}

// StatusString names a status as octattn_status_string does.
func StatusString(status int) string {
	return C.GoString(C.octattn_status_string(C.octattn_status(status)))
}

// Version is the library's version string.
func Version() string { return C.GoString(C.octattn_version_string()) }

// ModuleVersion is this module's release: the version of the header it was written
// against, tagged bindings/go/v0.11.0 in the repository (Go versions a module in a
// subfolder by tags prefixed with the folder). The library it links must be that
// release or a later one of the same major version.
const ModuleVersion = "0.11.0"

// Backend, Target and Algorithm choose what runs (see include/octattn.h).
type Backend int
type Target int
type Algorithm int

const (
	BackendAuto    Backend = 0
	BackendHighway Backend = 1
	BackendXsimd   Backend = 2

	TargetAuto   Target = 0
	TargetScalar Target = 1
	TargetSSE2   Target = 2
	TargetSSSE3  Target = 3
	TargetSSE4   Target = 4
	TargetAVX2   Target = 5
	TargetAVX512 Target = 6
	// ARM64
	TargetNEON     Target = 7
	TargetSVE2_128 Target = 8
	TargetSVE256   Target = 9
	// x86-64: avx512 with AVX512_BF16 (library 0.8 on)
	TargetAVX512BF16 Target = 10
	// x86-64: avx512_bf16 with AMX-BF16 tiles (library 0.9 on)
	TargetAMXBF16 Target = 11

	AlgorithmAuto      Algorithm = 0
	AlgorithmReference Algorithm = 1
	AlgorithmNaive     Algorithm = 2
	AlgorithmFused     Algorithm = 3
)

// checkLayouts compares cgo's view of the public structs (from the header this package
// was compiled with) with the loaded library's own.
func checkLayouts() error {
	type entry struct {
		typ, field string
		want       uintptr
	}
	var t C.octattn_tensor
	var o C.octattn_attention_options
	var r C.octattn_run_info
	entries := []entry{
		{"octattn_tensor", "", unsafe.Sizeof(t)},
		{"octattn_tensor", "data", unsafe.Offsetof(t.data)},
		{"octattn_tensor", "dtype", unsafe.Offsetof(t.dtype)},
		{"octattn_tensor", "shape", unsafe.Offsetof(t.shape)},
		{"octattn_tensor", "stride", unsafe.Offsetof(t.stride)},
		{"octattn_attention_options", "", unsafe.Sizeof(o)},
		{"octattn_attention_options", "causal", unsafe.Offsetof(o.causal)},
		{"octattn_attention_options", "window", unsafe.Offsetof(o.window)},
		{"octattn_attention_options", "q_start", unsafe.Offsetof(o.q_start)},
		{"octattn_attention_options", "k_start", unsafe.Offsetof(o.k_start)},
		{"octattn_attention_options", "chunk", unsafe.Offsetof(o.chunk)},
		{"octattn_attention_options", "softcap", unsafe.Offsetof(o.softcap)},
		{"octattn_attention_options", "alibi_slopes", unsafe.Offsetof(o.alibi_slopes)},
		{"octattn_attention_options", "sinks", unsafe.Offsetof(o.sinks)},
		{"octattn_attention_options", "bias", unsafe.Offsetof(o.bias)},
		{"octattn_attention_options", "mask", unsafe.Offsetof(o.mask)},
		{"octattn_attention_options", "q_starts", unsafe.Offsetof(o.q_starts)},
		{"octattn_attention_options", "kv_starts", unsafe.Offsetof(o.kv_starts)},
		{"octattn_attention_options", "kv_lens", unsafe.Offsetof(o.kv_lens)},
		{"octattn_attention_options", "sequences", unsafe.Offsetof(o.sequences)},
		{"octattn_attention_options", "cu_seqlens_q", unsafe.Offsetof(o.cu_seqlens_q)},
		{"octattn_attention_options", "cu_seqlens_k", unsafe.Offsetof(o.cu_seqlens_k)},
		{"octattn_attention_options", "block_table", unsafe.Offsetof(o.block_table)},
		{"octattn_attention_options", "block_table_cols", unsafe.Offsetof(o.block_table_cols)},
		{"octattn_attention_options", "k_scale", unsafe.Offsetof(o.k_scale)},
		{"octattn_attention_options", "v_scale_rows", unsafe.Offsetof(o.v_scale_rows)},
		{"octattn_attention_options", "qk_precision", unsafe.Offsetof(o.qk_precision)},
		{"octattn_attention_options", "tree_stride", unsafe.Offsetof(o.tree_stride)},
		{"octattn_attention_options", "block_counts", unsafe.Offsetof(o.block_counts)},
		{"octattn_attention_options", "block_indices", unsafe.Offsetof(o.block_indices)},
		{"octattn_attention_options", "full_block_counts", unsafe.Offsetof(o.full_block_counts)},
		{"octattn_attention_options", "full_block_indices", unsafe.Offsetof(o.full_block_indices)},
		{"octattn_attention_options", "block_q", unsafe.Offsetof(o.block_q)},
		{"octattn_attention_options", "block_kv", unsafe.Offsetof(o.block_kv)},
		{"octattn_attention_options", "key_scores", unsafe.Offsetof(o.key_scores)},
		{"octattn_attention_options", "key_indices", unsafe.Offsetof(o.key_indices)},
		{"octattn_attention_options", "key_counts", unsafe.Offsetof(o.key_counts)},
		{"octattn_attention_options", "key_indices2", unsafe.Offsetof(o.key_indices2)},
		{"octattn_attention_options", "key_counts2", unsafe.Offsetof(o.key_counts2)},
		{"octattn_run_info", "", unsafe.Sizeof(r)},
		{"octattn_run_info", "threads", unsafe.Offsetof(r.threads)},
		{"octattn_run_info", "shared_kv_rows", unsafe.Offsetof(r.shared_kv_rows)},
	}
	for _, e := range entries {
		typ := C.CString(e.typ)
		var field *C.char
		if e.field != "" {
			field = C.CString(e.field)
		}
		var got C.size_t
		status := C.octattn_struct_layout(typ, field, &got)
		C.free(unsafe.Pointer(typ))
		if field != nil {
			C.free(unsafe.Pointer(field))
		}
		if status != C.OCTATTN_OK {
			return fmt.Errorf("octattn: the library does not know %s %s", e.typ, e.field)
		}
		if uintptr(got) != e.want {
			return fmt.Errorf("octattn: %s %s is %d in the library, %d in this package", e.typ, e.field, got, e.want)
		}
	}
	return nil
}

var layoutErr = checkLayouts()

// Dtype is an element type of q, k, v and o (the library's OCTATTN_DTYPE_*).
type Dtype int

const (
	F32  Dtype = C.OCTATTN_DTYPE_F32
	BF16 Dtype = C.OCTATTN_DTYPE_BF16 // bfloat16 bit patterns in uint16 (library 0.7 on)
	F16  Dtype = C.OCTATTN_DTYPE_F16  // IEEE binary16 bit patterns in uint16 (library 0.7 on)
	// Quantized KV caches (k and v; library 0.11 on), their bytes in Tensor.Bytes
	// (include/octattn.h, SEMANTICS: Quantized caches).
	Int8    Dtype = C.OCTATTN_DTYPE_INT8     // int8 values times Options.KScale / VScale
	FP8E4M3 Dtype = C.OCTATTN_DTYPE_FP8_E4M3 // float8 e4m3fn codes, times optional scales
	FP8E5M2 Dtype = C.OCTATTN_DTYPE_FP8_E5M2 // float8 e5m2 codes, times optional scales
	Q8_0    Dtype = C.OCTATTN_DTYPE_Q8_0     // ggml's 34-byte blocks of 32 values
	Q4_0    Dtype = C.OCTATTN_DTYPE_Q4_0     // ggml's 18-byte blocks of 32 values
	// DeepSeek V3.2's 656-byte latent rows of 576 values (strides count rows; k the rows,
	// v their first 512 values).
	FP8DSMLA Dtype = C.OCTATTN_DTYPE_FP8_DS_MLA
)

// unitBytes is the bytes of one element of a quantized Dtype (of one block for Q8_0
// and Q4_0, whose strides count blocks).
func unitBytes(t Dtype) int {
	switch t {
	case Q8_0:
		return 34
	case Q4_0:
		return 18
	case FP8DSMLA:
		return 656
	}
	return 1
}

// Tensor is a view of float32 data as [B, H, T, D] with strides in elements, or, with
// Type BF16 or F16, of the 16-bit patterns in Half (q, k, v and o of Attention: a call
// computes in float32 on the exactly widened values; a 16-bit o holds that result
// rounded to nearest even; on TargetAVX512BF16 bf16 q and k run on vdpbf16ps instead,
// within the bound the C header states).
type Tensor struct {
	Data    []float32
	Shape   [4]int
	Strides [4]int
	Half    []uint16
	Type    Dtype  // 0 or F32: Data
	Bytes   []byte // Int8, FP8E4M3, FP8E5M2, Q8_0, Q4_0 (strides in elements, Q8_0 and Q4_0: in blocks)
}

// QuantBHTD views contiguous [B, H, T, D] data of a quantized Dtype (Q8_0 and Q4_0: d a
// multiple of 32, rows of d / 32 blocks; FP8DSMLA: rows of 656 bytes, d at most 576).
func QuantBHTD(data []byte, typ Dtype, b, h, t, d int) (Tensor, error) {
	u := d
	if typ == Q8_0 || typ == Q4_0 {
		u = d / 32
	}
	if typ == FP8DSMLA {
		u = 1
	}
	x := Tensor{Shape: [4]int{b, h, t, d}, Strides: [4]int{h * t * u, t * u, u, 1}, Bytes: data, Type: typ}
	return x, quantExtent(x)
}

// quantExtent checks that a quantized view's units lie inside its bytes.
func quantExtent(x Tensor) error {
	shape := x.Shape
	if x.Type == Q8_0 || x.Type == Q4_0 {
		shape[3] /= 32
	}
	if x.Type == FP8DSMLA {
		shape[3] = 1
	}
	return extent(len(x.Bytes)/unitBytes(x.Type), shape, x.Strides)
}

// Mask is a boolean view [B, Hq, Tq, Tk] (true: the pair may be read); a stride of 0
// broadcasts.
type Mask struct {
	Data    []bool
	Shape   [4]int
	Strides [4]int
}

func extent(n int, shape, strides [4]int) error {
	last := 0
	for i := 0; i < 4; i++ {
		if shape[i] < 0 || strides[i] < 0 {
			return &Error{InvalidShape, "negative size or stride"}
		}
		if shape[i] == 0 {
			return nil
		}
		last += (shape[i] - 1) * strides[i]
	}
	if last >= n {
		return &Error{InvalidShape, fmt.Sprintf("a view of shape %v and strides %v needs %d elements, the slice has %d", shape, strides, last+1, n)}
	}
	return nil
}

// BHTD views contiguous [B, H, T, D] data.
func BHTD(data []float32, b, h, t, d int) (Tensor, error) {
	x := Tensor{Data: data, Shape: [4]int{b, h, t, d}, Strides: [4]int{h * t * d, t * d, d, 1}}
	return x, extent(len(data), x.Shape, x.Strides)
}

// BTHD views contiguous [B, T, H, D] data (a projection's output) as [B, H, T, D].
func BTHD(data []float32, b, t, h, d int) (Tensor, error) {
	x := Tensor{Data: data, Shape: [4]int{b, h, t, d}, Strides: [4]int{t * h * d, d, h * d, 1}}
	return x, extent(len(data), x.Shape, x.Strides)
}

// HalfBHTD views contiguous [B, H, T, D] bf16 or f16 data.
func HalfBHTD(data []uint16, typ Dtype, b, h, t, d int) (Tensor, error) {
	x := Tensor{Shape: [4]int{b, h, t, d}, Strides: [4]int{h * t * d, t * d, d, 1}, Half: data, Type: typ}
	return x, extent(len(data), x.Shape, x.Strides)
}

// Options of an attention call. The zero value is plain causal attention with scale
// 1/sqrt(D), the queries being the newest tokens.
type Options struct {
	Full        bool   // full (non-causal) attention
	Window      int64  // sliding window (0: none)
	Stride      int64  // global columns, with a window
	QStart      *int64 // nil: k_start + kv_len - q_len
	KStart      int64
	Scale       float32 // 0: 1/sqrt(D)
	Chunk       int64
	Softcap     float32
	Algorithm   Algorithm
	AlibiSlopes []float32 // one per query head
	Sinks       []float32 // one per query head
	Bias        *Tensor
	Mask        *Mask
	// Sequences (include/octattn.h, SEMANTICS: Sequences), one entry per sequence: the
	// position of its first query row, its first valid key row (left padding) and its
	// valid key rows (right padding; paged: the context length).
	QStarts  []int64
	KVStarts []int64
	KVLens   []int64
	// A ragged batch: n + 1 offsets of each sequence's query rows and key rows, packed
	// along the rows of batch entry 0 (q, k, v [1, H, total, D]).
	CuSeqlensQ, CuSeqlensK []int64
	// A paged cache (SEMANTICS: Paged): BlockTableCols block ids per sequence; k and v
	// are pools [blocks, kv_heads, block_size, D] (any strides).
	BlockTable     []int32
	BlockTableCols int
	// A quantized cache's scales (SEMANTICS: Quantized caches): float32 [B, Hkv, R, D / G]
	// (sizes of 1 broadcast); key row j reads scale row j / KScaleRows (0: 1).
	KScale, VScale         *Tensor
	KScaleRows, VScaleRows int64
	// QkInt8: q . k over an INT8, Q8_0 or Q4_0 key cache as int8 dot products, q rounded
	// to int8 in blocks (SEMANTICS: Quantized caches, OCTATTN_QK_INT8); false: exact.
	QkInt8 bool
	// A tree of draft tokens per batch entry (SEMANTICS: Trees): packed bits,
	// TreeRowBytes from one query row's bits to the next, TreeStride bytes from one batch
	// entry's rows to the next (0: every entry reads the same tree).
	Tree                     []byte
	TreeRowBytes, TreeStride int
	// A block mask (SEMANTICS: Block masks): flex_attention's BlockMask lists.
	Blocks *BlockMask
	// Token-sparse attention (SEMANTICS: Key lists): each query row's key rows, and a
	// second list joined to the first (a local window).
	KeyList, KeyList2 *KeyList
}

// Context holds a thread cap, a backend and target, and scratch memory reused across
// calls. A context must not be used by two goroutines at once.
type Context struct {
	c *C.octattn_context
}

// NewContext creates a context (thread cap: OCTATTN_THREADS, else every hardware
// thread). It fails if this package's struct layouts differ from the library's.
func NewContext() (*Context, error) {
	if layoutErr != nil {
		return nil, layoutErr
	}
	ctx := &Context{}
	if s := C.octattn_context_create(&ctx.c); s != C.OCTATTN_OK {
		return nil, &Error{int(s), "octattn_context_create failed"}
	}
	runtime.SetFinalizer(ctx, (*Context).Close)
	return ctx, nil
}

// Close frees the context; it may be called more than once.
func (ctx *Context) Close() {
	if ctx.c != nil {
		C.octattn_context_destroy(ctx.c)
		ctx.c = nil
	}
}

func (ctx *Context) check(s C.octattn_status) error {
	if s == C.OCTATTN_OK {
		return nil
	}
	return &Error{int(s), C.GoString(C.octattn_context_last_error(ctx.c))}
}

func (ctx *Context) live() error {
	if ctx == nil || ctx.c == nil {
		return &Error{NullPointer, "the context is closed"}
	}
	return nil
}

// SetThreads caps the threads of this context's calls (0: every hardware thread).
func (ctx *Context) SetThreads(n int) error {
	if err := ctx.live(); err != nil {
		return err
	}
	return ctx.check(C.octattn_context_set_threads(ctx.c, C.int32_t(n)))
}

// Threads is the context's thread cap.
func (ctx *Context) Threads() int {
	var n C.int32_t
	C.octattn_context_get_threads(ctx.c, &n)
	return int(n)
}

// SetTarget chooses the backend and target of this context's calls.
func (ctx *Context) SetTarget(b Backend, t Target) error {
	if err := ctx.live(); err != nil {
		return err
	}
	return ctx.check(C.octattn_context_set_target(ctx.c, C.octattn_backend(b), C.octattn_target(t)))
}

// RunInfo says what a call ran.
type RunInfo struct {
	Algorithm, Backend, Target string
	Threads                    int
	// K/V rows of one kv head read once for several sequences (cascade decode).
	SharedKVRows int64
}

// LastRun is what the last call on this context ran.
func (ctx *Context) LastRun() (RunInfo, error) {
	var info C.octattn_run_info
	info.struct_size = C.size_t(unsafe.Sizeof(info))
	if err := ctx.check(C.octattn_context_last_run(ctx.c, &info)); err != nil {
		return RunInfo{}, err
	}
	backend := C.GoString(C.octattn_backend_name(info.backend))
	if info.algorithm == C.OCTATTN_ALGORITHM_REFERENCE {
		backend = "reference"
	}
	return RunInfo{C.GoString(C.octattn_algorithm_name(info.algorithm)), backend,
		C.GoString(C.octattn_target_name(info.target)), int(info.threads),
		int64(info.shared_kv_rows)}, nil
}

// A call's C structs, pointing at pinned Go memory.
type call struct {
	pin runtime.Pinner
}

func (c *call) tensor(x Tensor, name string) (C.octattn_tensor, error) {
	var t C.octattn_tensor
	if (x.Type >= Int8 && x.Type <= Q4_0) || x.Type == FP8DSMLA {
		if err := quantExtent(x); err != nil {
			return t, fmt.Errorf("%s: %w", name, err)
		}
		t.dtype = C.octattn_dtype(x.Type)
		if len(x.Bytes) > 0 {
			c.pin.Pin(&x.Bytes[0])
			t.data = unsafe.Pointer(&x.Bytes[0])
		}
	} else if x.Type == BF16 || x.Type == F16 {
		if err := extent(len(x.Half), x.Shape, x.Strides); err != nil {
			return t, fmt.Errorf("%s: %w", name, err)
		}
		t.dtype = C.octattn_dtype(x.Type)
		if len(x.Half) > 0 {
			c.pin.Pin(&x.Half[0])
			t.data = unsafe.Pointer(&x.Half[0])
		}
	} else {
		if x.Type != 0 && x.Type != F32 {
			return t, &Error{InvalidOption, fmt.Sprintf("%s: unknown Type %d", name, x.Type)}
		}
		if err := extent(len(x.Data), x.Shape, x.Strides); err != nil {
			return t, fmt.Errorf("%s: %w", name, err)
		}
		t.dtype = C.OCTATTN_DTYPE_F32
		if len(x.Data) > 0 {
			c.pin.Pin(&x.Data[0])
			t.data = unsafe.Pointer(&x.Data[0])
		}
	}
	for i := 0; i < 4; i++ {
		t.shape[i] = C.int64_t(x.Shape[i])
		t.stride[i] = C.int64_t(x.Strides[i])
	}
	return t, nil
}

// BlockMask holds a block mask's lists, C-contiguous: Counts [Entries, Heads, QBlocks]
// and Indices [Entries, Heads, QBlocks, N] (the partial blocks: flex's kv_num_blocks and
// kv_indices), FullCounts and FullIndices the same for the full blocks (nil: none);
// Entries and Heads of 1 broadcast.
type BlockMask struct {
	Counts, Indices, FullCounts, FullIndices []int32
	Entries, Heads, QBlocks, N               int
	BlockQ, BlockKV                          int
}

// blocks points opts at the lists of m, their lengths checked against its shape (the
// library reads them all).
func (c *call) blocks(m *BlockMask, opts *C.octattn_attention_options) error {
	e, h, qb, n := m.Entries, m.Heads, m.QBlocks, m.N
	lists := [][2][]int32{{m.Counts, m.Indices}}
	if m.FullCounts != nil || m.FullIndices != nil {
		lists = append(lists, [2][]int32{m.FullCounts, m.FullIndices})
	}
	dst := [][2]**C.octattn_tensor{{&opts.block_counts, &opts.block_indices},
		{&opts.full_block_counts, &opts.full_block_indices}}
	for x, l := range lists {
		if e < 1 || h < 1 || qb < 1 || n < 1 || len(l[0]) != e*h*qb || len(l[1]) != e*h*qb*n {
			return &Error{InvalidShape, fmt.Sprintf("Blocks: %d counts and %d indices for [%d, %d, %d, %d]", len(l[0]), len(l[1]), e, h, qb, n)}
		}
		for y, sizes := range [2][4]int{{e, h, qb, 1}, {e, h, qb, n}} {
			*dst[x][y] = c.int32Tensor(l[y], sizes)
		}
	}
	opts.block_q = C.int64_t(m.BlockQ)
	opts.block_kv = C.int64_t(m.BlockKV)
	return nil
}

// KeyList holds a key list, C-contiguous: Indices [Entries, Heads, Rows, N] (each query
// row's key rows from its sequence's first valid key, -1 for none, any order) and Counts
// [Entries, Heads, Rows] (nil: all N read); Entries and Heads (kv heads) of 1 broadcast.
type KeyList struct {
	Indices, Counts         []int32
	Entries, Heads, Rows, N int
}

// keyList points *indices (and *counts) at the tensors of l, its lengths checked against
// its shape (the library reads them all).
func (c *call) keyList(l *KeyList, indices, counts **C.octattn_tensor) error {
	e, h, r, n := l.Entries, l.Heads, l.Rows, l.N
	if e < 1 || h < 1 || r < 1 || n < 1 || len(l.Indices) != e*h*r*n ||
		(l.Counts != nil && len(l.Counts) != e*h*r) {
		return &Error{InvalidShape, fmt.Sprintf("KeyList: %d indices and %d counts for [%d, %d, %d, %d]", len(l.Indices), len(l.Counts), e, h, r, n)}
	}
	*indices = c.int32Tensor(l.Indices, [4]int{e, h, r, n})
	if l.Counts != nil {
		*counts = c.int32Tensor(l.Counts, [4]int{e, h, r, 1})
	}
	return nil
}

// int32Tensor is a C-contiguous INT32 tensor of the given sizes over a (len(a) is their
// product), pinned for the call.
func (c *call) int32Tensor(a []int32, sizes [4]int) *C.octattn_tensor {
	t := &C.octattn_tensor{dtype: C.OCTATTN_DTYPE_INT32}
	c.pin.Pin(&a[0])
	t.data = unsafe.Pointer(&a[0])
	stride := 1
	for i := 3; i >= 0; i-- {
		t.shape[i] = C.int64_t(sizes[i])
		t.stride[i] = C.int64_t(stride)
		stride *= sizes[i]
	}
	c.pin.Pin(t)
	return t
}

func (c *call) options(o *Options, batch, qHeads, qRows int) (*C.octattn_attention_options, error) {
	opts := &C.octattn_attention_options{}
	// The sized init writes this package's struct, whatever library is loaded.
	C.octattn_attention_options_init_size(opts, C.size_t(unsafe.Sizeof(*opts)))
	if o == nil {
		return opts, nil
	}
	if o.Full {
		opts.causal = 0
	}
	opts.window = C.int64_t(o.Window)
	opts.stride = C.int64_t(o.Stride)
	if o.QStart != nil {
		opts.q_start = C.int64_t(*o.QStart)
	}
	opts.k_start = C.int64_t(o.KStart)
	opts.scale = C.float(o.Scale)
	opts.chunk = C.int64_t(o.Chunk)
	opts.softcap = C.float(o.Softcap)
	opts.algorithm = C.octattn_algorithm(o.Algorithm)
	for _, a := range []struct {
		name string
		s    []float32
		dst  **C.float
	}{{"AlibiSlopes", o.AlibiSlopes, &opts.alibi_slopes}, {"Sinks", o.Sinks, &opts.sinks}} {
		if a.s == nil {
			continue
		}
		if len(a.s) != qHeads {
			return nil, &Error{InvalidShape, fmt.Sprintf("%s: %d entries for %d query heads", a.name, len(a.s), qHeads)}
		}
		c.pin.Pin(&a.s[0])
		*a.dst = (*C.float)(unsafe.Pointer(&a.s[0]))
	}
	if o.Bias != nil {
		b, err := c.tensor(*o.Bias, "Bias")
		if err != nil {
			return nil, err
		}
		bp := &b
		c.pin.Pin(bp)
		opts.bias = bp
	}
	if o.Mask != nil {
		m := o.Mask
		if err := extent(len(m.Data), m.Shape, m.Strides); err != nil {
			return nil, fmt.Errorf("Mask: %w", err)
		}
		mt := &C.octattn_tensor{dtype: C.OCTATTN_DTYPE_BOOL}
		if len(m.Data) > 0 {
			c.pin.Pin(&m.Data[0])
			mt.data = unsafe.Pointer(&m.Data[0])
		}
		for i := 0; i < 4; i++ {
			mt.shape[i] = C.int64_t(m.Shape[i])
			mt.stride[i] = C.int64_t(m.Strides[i])
		}
		c.pin.Pin(mt)
		opts.mask = mt
	}
	for _, sc := range []struct {
		name string
		t    *Tensor
		dst  **C.octattn_tensor
	}{{"KScale", o.KScale, &opts.k_scale}, {"VScale", o.VScale, &opts.v_scale}} {
		if sc.t == nil {
			continue
		}
		t, err := c.tensor(*sc.t, sc.name)
		if err != nil {
			return nil, err
		}
		tp := &t
		c.pin.Pin(tp)
		*sc.dst = tp
	}
	opts.k_scale_rows = C.int64_t(o.KScaleRows)
	opts.v_scale_rows = C.int64_t(o.VScaleRows)
	if o.QkInt8 {
		opts.qk_precision = C.OCTATTN_QK_INT8
	}
	if o.Tree != nil {
		// The bytes the library reads: every entry's qRows rows.
		need := (max(batch, 1)-1)*o.TreeStride + qRows*o.TreeRowBytes
		if o.TreeRowBytes < 0 || o.TreeStride < 0 || len(o.Tree) < need || len(o.Tree) == 0 {
			return nil, &Error{InvalidOption, fmt.Sprintf("Tree: %d bytes, the rows need %d", len(o.Tree), need)}
		}
		c.pin.Pin(&o.Tree[0])
		opts.tree = (*C.uint8_t)(unsafe.Pointer(&o.Tree[0]))
		opts.tree_row_bytes = C.int64_t(o.TreeRowBytes)
		opts.tree_stride = C.int64_t(o.TreeStride)
	}
	if o.Blocks != nil {
		if err := c.blocks(o.Blocks, opts); err != nil {
			return nil, err
		}
	}
	if o.KeyList != nil {
		if err := c.keyList(o.KeyList, &opts.key_indices, &opts.key_counts); err != nil {
			return nil, err
		}
	}
	if o.KeyList2 != nil {
		if err := c.keyList(o.KeyList2, &opts.key_indices2, &opts.key_counts2); err != nil {
			return nil, err
		}
	}
	if err := c.sequences(o, opts, batch); err != nil {
		return nil, err
	}
	c.pin.Pin(opts)
	return opts, nil
}

// sequences sets the sequence options, their lengths checked against the sequences
// (the batch entries, or a ragged batch's n).
func (c *call) sequences(o *Options, opts *C.octattn_attention_options, batch int) error {
	n := batch
	if o.CuSeqlensQ != nil || o.CuSeqlensK != nil {
		if len(o.CuSeqlensQ) < 1 || len(o.CuSeqlensQ) != len(o.CuSeqlensK) {
			return &Error{InvalidOption, fmt.Sprintf("CuSeqlensQ, CuSeqlensK: %d and %d offsets, n + 1 each", len(o.CuSeqlensQ), len(o.CuSeqlensK))}
		}
		n = len(o.CuSeqlensQ) - 1
		opts.sequences = C.int64_t(n)
		c.pin.Pin(&o.CuSeqlensQ[0])
		c.pin.Pin(&o.CuSeqlensK[0])
		opts.cu_seqlens_q = (*C.int64_t)(unsafe.Pointer(&o.CuSeqlensQ[0]))
		opts.cu_seqlens_k = (*C.int64_t)(unsafe.Pointer(&o.CuSeqlensK[0]))
	}
	for _, a := range []struct {
		name string
		s    []int64
		dst  **C.int64_t
	}{{"QStarts", o.QStarts, &opts.q_starts}, {"KVStarts", o.KVStarts, &opts.kv_starts},
		{"KVLens", o.KVLens, &opts.kv_lens}} {
		if a.s == nil {
			continue
		}
		if len(a.s) != n {
			return &Error{InvalidOption, fmt.Sprintf("%s: %d entries for %d sequences", a.name, len(a.s), n)}
		}
		if n > 0 {
			c.pin.Pin(&a.s[0])
			*a.dst = (*C.int64_t)(unsafe.Pointer(&a.s[0]))
		}
	}
	if o.BlockTable != nil {
		if o.BlockTableCols < 1 || len(o.BlockTable) != n*o.BlockTableCols {
			return &Error{InvalidOption, fmt.Sprintf("BlockTable: %d ids for %d sequences of %d", len(o.BlockTable), n, o.BlockTableCols)}
		}
		c.pin.Pin(&o.BlockTable[0])
		opts.block_table = (*C.int32_t)(unsafe.Pointer(&o.BlockTable[0]))
		opts.block_table_cols = C.int64_t(o.BlockTableCols)
	}
	return nil
}

// Attention writes o = softmax(scale * q k^T + M) v, and each row's log-sum-exp into
// lse ([B, Hq, Tq, 1]) when it is not nil. On failure nothing is written.
func (ctx *Context) Attention(opts *Options, q, k, v, o Tensor, lse *Tensor) error {
	return ctx.attend(opts, q, k, v, o, lse, nil)
}

// AttentionKeyScores is Attention that also writes each key's attention received
// (options.key_scores, since 0.11) into keyScores, float32 [B, Hkv, Tk, 1] (paged:
// [sequences, Hkv, logical rows, 1]): the sum over the key's kv head's query heads and
// the query rows of their weights, for KV-cache eviction (H2O, SnapKV). Every element is
// written; a key no row reads gets 0.
func (ctx *Context) AttentionKeyScores(opts *Options, q, k, v, o Tensor, lse *Tensor, keyScores Tensor) error {
	return ctx.attend(opts, q, k, v, o, lse, &keyScores)
}

func (ctx *Context) attend(opts *Options, q, k, v, o Tensor, lse, keyScores *Tensor) error {
	if err := ctx.live(); err != nil {
		return err
	}
	var c call
	defer c.pin.Unpin()
	tq, err := c.tensor(q, "q")
	if err != nil {
		return err
	}
	tk, err := c.tensor(k, "k")
	if err != nil {
		return err
	}
	tv, err := c.tensor(v, "v")
	if err != nil {
		return err
	}
	to, err := c.tensor(o, "o")
	if err != nil {
		return err
	}
	var tl *C.octattn_tensor
	if lse != nil {
		t, err := c.tensor(*lse, "lse")
		if err != nil {
			return err
		}
		tl = &t
	}
	options, err := c.options(opts, q.Shape[0], q.Shape[1], q.Shape[2])
	if err != nil {
		return err
	}
	if keyScores != nil {
		t, err := c.tensor(*keyScores, "keyScores")
		if err != nil {
			return err
		}
		ks := &C.octattn_tensor{}
		*ks = t
		c.pin.Pin(ks)
		options.key_scores = ks
	}
	return ctx.check(C.octattn_attention(ctx.c, options, &tq, &tk, &tv, &to, tl, nil, nil, 0))
}

// KVStore converts src's rows (float32 or 16-bit [B, H, T, D]) into dst, a view of a
// cache's rows of any Dtype (src's shape), or with slots (one per row of every batch
// entry, vLLM's slot mapping; -1 skips) a pool [blocks, H, block_size, D]. scale: an
// Int8 dst's output, [B, H, T / scaleRows, D / G] (pools: [blocks, H, block_size /
// scaleRows, D / G]); an FP8 dst's input (nil: 1); nil for the others. On failure
// nothing is written.
func (ctx *Context) KVStore(src, dst Tensor, scale *Tensor, scaleRows int, slots []int64) error {
	if err := ctx.live(); err != nil {
		return err
	}
	var c call
	defer c.pin.Unpin()
	ts, err := c.tensor(src, "src")
	if err != nil {
		return err
	}
	td, err := c.tensor(dst, "dst")
	if err != nil {
		return err
	}
	var tsc *C.octattn_tensor
	if scale != nil {
		t, err := c.tensor(*scale, "scale")
		if err != nil {
			return err
		}
		tsc = &t
	}
	var sl *C.int64_t
	if slots != nil {
		if len(slots) != src.Shape[0]*src.Shape[2] {
			return &Error{InvalidOption, fmt.Sprintf("slots: %d entries for %d rows", len(slots), src.Shape[0]*src.Shape[2])}
		}
		if len(slots) > 0 {
			c.pin.Pin(&slots[0])
			sl = (*C.int64_t)(unsafe.Pointer(&slots[0]))
		}
	}
	return ctx.check(C.octattn_kv_store(ctx.c, &ts, &td, tsc, C.int64_t(scaleRows), sl))
}

// Grads are the outputs of AttentionBackward: DQ, DK and DV (the shapes of q, k and v)
// are required; DSinks (one entry per query head; needs Options.Sinks) and DBias ([B,
// Hq, Tq, Tk]) are written when not nil.
type Grads struct {
	DQ, DK, DV Tensor
	DSinks     []float32
	DBias      *Tensor
}

// AttentionBackward writes the gradients of Attention (octattn_attention_backward,
// since 0.5) given the forward's options and inputs, the o and lse it returned, dout =
// dL/do and dlse = dL/dlse (nil: zero). The bytes do not depend on the thread count or
// the layout; on failure nothing is written.
func (ctx *Context) AttentionBackward(opts *Options, q, k, v, o, lse, dout Tensor, dlse *Tensor, g *Grads) error {
	if err := ctx.live(); err != nil {
		return err
	}
	var c call
	defer c.pin.Unpin()
	var in [7]C.octattn_tensor
	for i, x := range []struct {
		t    Tensor
		name string
	}{{q, "q"}, {k, "k"}, {v, "v"}, {o, "o"}, {lse, "lse"}, {dout, "dout"}} {
		t, err := c.tensor(x.t, x.name)
		if err != nil {
			return err
		}
		in[i] = t
	}
	var tdl *C.octattn_tensor
	if dlse != nil {
		t, err := c.tensor(*dlse, "dlse")
		if err != nil {
			return err
		}
		in[6] = t
		tdl = &in[6]
	}
	var out [4]C.octattn_tensor
	for i, x := range []struct {
		t    Tensor
		name string
	}{{g.DQ, "DQ"}, {g.DK, "DK"}, {g.DV, "DV"}} {
		t, err := c.tensor(x.t, x.name)
		if err != nil {
			return err
		}
		out[i] = t
	}
	var tdb *C.octattn_tensor
	if g.DBias != nil {
		t, err := c.tensor(*g.DBias, "DBias")
		if err != nil {
			return err
		}
		out[3] = t
		tdb = &out[3]
	}
	var ds *C.float
	if g.DSinks != nil {
		if len(g.DSinks) != q.Shape[1] {
			return &Error{InvalidShape, fmt.Sprintf("DSinks: %d entries for %d query heads", len(g.DSinks), q.Shape[1])}
		}
		c.pin.Pin(&g.DSinks[0])
		ds = (*C.float)(unsafe.Pointer(&g.DSinks[0]))
	}
	options, err := c.options(opts, q.Shape[0], q.Shape[1], q.Shape[2])
	if err != nil {
		return err
	}
	return ctx.check(C.octattn_attention_backward(ctx.c, options, &in[0], &in[1], &in[2], &in[3], &in[4],
		&in[5], tdl, &out[0], &out[1], &out[2], ds, tdb, nil, 0))
}

// IsStatus reports whether err is an *Error with the given status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}
