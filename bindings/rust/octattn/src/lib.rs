//! Causal self-attention on the CPU, through liboctattn's C API, without `unsafe`.
//!
//! ```
//! use octattn::{Context, Options, Tensor, TensorMut};
//!
//! let (b, hq, hkv, t, d) = (1, 4, 2, 8, 16);
//! let q = vec![0.5f32; b * hq * t * d];
//! let kv = vec![0.25f32; b * hkv * t * d];
//! let mut o = vec![0.0f32; b * hq * t * d];
//! let mut ctx = Context::new()?;
//! ctx.attention(
//!     &Options { window: 4, ..Options::default() },
//!     &Tensor::bhtd(&q, [b, hq, t, d])?,
//!     &Tensor::bhtd(&kv, [b, hkv, t, d])?,
//!     &Tensor::bhtd(&kv, [b, hkv, t, d])?,
//!     &mut TensorMut::bhtd(&mut o, [b, hq, t, d])?,
//!     None,
//! )?;
//! assert!((o[0] - 0.25).abs() < 1e-6);
//! # Ok::<(), octattn::Error>(())
//! ```
//!
//! Tensors are views of slices with a shape and strides in elements (`[B, H, T, D]`,
//! `[B, T, H, D]` or any other strides), checked against the slice's length; the library
//! validates everything else (shapes, aliasing, options) before it writes anything.
//! Semantics, accuracy and determinism are those of include/octattn.h.
use octattn_sys as sys;
use std::ffi::CStr;
use std::fmt;
use std::marker::PhantomData;
use std::sync::OnceLock;

/// A failed call: the library's status code and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: i32,
    pub message: String,
}

impl Error {
    /// The status's name, as octattn_status_string gives it.
    pub fn status_name(&self) -> String {
        text(unsafe { sys::octattn_status_string(self.status) })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "octattn: {} ({})", self.message, self.status_name())
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

fn text(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn invalid(status: i32, message: impl Into<String>) -> Error {
    Error {
        status,
        message: message.into(),
    }
}

/// The library's version string.
pub fn version() -> String {
    text(unsafe { sys::octattn_version_string() })
}

/// Which backend and target run the kernels (see include/octattn.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Auto = 0,
    Highway = 1,
    Xsimd = 2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Auto = 0,
    Scalar = 1,
    Sse2 = 2,
    Ssse3 = 3,
    Sse4 = 4,
    Avx2 = 5,
    Avx512 = 6,
    Neon = 7,
    Sve2_128 = 8,
    Sve256 = 9,
    /// avx512 with AVX512_BF16 (library 0.8 on): bf16 q.k on vdpbf16ps.
    Avx512Bf16 = 10,
    /// avx512_bf16 with AMX-BF16 (library 0.9 on): bf16 q.k of the fused path on AMX tiles.
    AmxBf16 = 11,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Algorithm {
    #[default]
    Auto = 0,
    Reference = 1,
    Naive = 2,
    Fused = 3,
}

/// What a call ran: names as octattn_algorithm_name, octattn_backend_name and
/// octattn_target_name give them.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub algorithm: String,
    pub backend: String,
    pub target: String,
    pub threads: i32,
    /// K/V rows of one kv head read once for several sequences (cascade decode).
    pub shared_kv_rows: i64,
}

/// The 16-bit element types q, k, v and o may have (since library 0.7), as `u16` bit
/// patterns: bfloat16 or IEEE binary16. A call computes in f32 on the exactly widened
/// values; a 16-bit o holds that result rounded to nearest even. On the `Avx512Bf16`
/// target bf16 q and k run on vdpbf16ps instead, within the bound the C header states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Half {
    Bf16,
    F16,
}

impl Half {
    fn dtype(self) -> sys::octattn_dtype {
        match self {
            Half::Bf16 => sys::OCTATTN_DTYPE_BF16,
            Half::F16 => sys::OCTATTN_DTYPE_F16,
        }
    }
}

/// The quantized KV cache formats k and v may have (since library 0.11), as bytes:
/// include/octattn.h defines each value (SEMANTICS: Quantized caches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quant {
    /// int8 values times a scale of `Options::k_scale` / `v_scale`.
    Int8,
    /// float8 e4m3fn codes, times optional scales.
    Fp8E4m3,
    /// float8 e5m2 codes, times optional scales.
    Fp8E5m2,
    /// ggml's 34-byte blocks of 32 values (strides count blocks).
    Q8_0,
    /// ggml's 18-byte blocks of 32 values (strides count blocks).
    Q4_0,
    /// DeepSeek V3.2's 656-byte latent rows of 576 values (strides count rows; k the
    /// rows, v their first 512 values).
    Fp8DsMla,
}

impl Quant {
    fn dtype(self) -> sys::octattn_dtype {
        match self {
            Quant::Int8 => sys::OCTATTN_DTYPE_INT8,
            Quant::Fp8E4m3 => sys::OCTATTN_DTYPE_FP8_E4M3,
            Quant::Fp8E5m2 => sys::OCTATTN_DTYPE_FP8_E5M2,
            Quant::Q8_0 => sys::OCTATTN_DTYPE_Q8_0,
            Quant::Q4_0 => sys::OCTATTN_DTYPE_Q4_0,
            Quant::Fp8DsMla => sys::OCTATTN_DTYPE_FP8_DS_MLA,
        }
    }
    // Bytes of a unit of the strides, and the shape in units.
    fn units(self, shape: [usize; 4]) -> (usize, [usize; 4]) {
        match self {
            Quant::Q8_0 => (34, [shape[0], shape[1], shape[2], shape[3] / 32]),
            Quant::Q4_0 => (18, [shape[0], shape[1], shape[2], shape[3] / 32]),
            Quant::Fp8DsMla => (656, [shape[0], shape[1], shape[2], 1]),
            _ => (1, shape),
        }
    }
    fn view(
        self,
        len: usize,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Result<([i64; 4], [i64; 4])> {
        let (unit, units) = self.units(shape);
        let (_, st) = checked(len / unit, units, strides)?;
        let (sh, _) = checked(usize::MAX, shape, [0; 4])?;
        Ok((sh, st))
    }
}

/// A view of `f32` data (or, from `half`, of bf16 or f16 data): shape and strides in
/// elements, every element inside the slice.
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    raw: sys::octattn_tensor,
    _data: PhantomData<&'a [f32]>,
}

/// A writable view (outputs).
#[derive(Debug)]
pub struct TensorMut<'a> {
    raw: sys::octattn_tensor,
    _data: PhantomData<&'a mut [f32]>,
}

/// A boolean mask tensor (`true`: the pair may be read), as bytes 0/1 or bools.
#[derive(Clone, Copy, Debug)]
pub struct MaskTensor<'a> {
    raw: sys::octattn_tensor,
    _data: PhantomData<&'a [bool]>,
}

fn checked(len: usize, shape: [usize; 4], strides: [usize; 4]) -> Result<([i64; 4], [i64; 4])> {
    let mut last = 0usize;
    let mut empty = false;
    for i in 0..4 {
        if shape[i] == 0 {
            empty = true;
        } else {
            last = (shape[i] - 1)
                .checked_mul(strides[i])
                .and_then(|x| x.checked_add(last))
                .ok_or_else(|| invalid(sys::OCTATTN_ERROR_OVERFLOW, "tensor extent overflows"))?;
        }
    }
    if !empty && last >= len {
        return Err(invalid(
            sys::OCTATTN_ERROR_INVALID_SHAPE,
            format!("a view of shape {shape:?} and strides {strides:?} needs {} elements, the slice has {len}", last + 1),
        ));
    }
    let to_i64 = |a: [usize; 4]| -> Result<[i64; 4]> {
        let mut r = [0i64; 4];
        for i in 0..4 {
            r[i] = i64::try_from(a[i])
                .map_err(|_| invalid(sys::OCTATTN_ERROR_OVERFLOW, "size beyond i64"))?;
        }
        Ok(r)
    };
    Ok((to_i64(shape)?, to_i64(strides)?))
}

fn dense(shape: [usize; 4]) -> [usize; 4] {
    [
        shape[1] * shape[2] * shape[3],
        shape[2] * shape[3],
        shape[3],
        1,
    ]
}

// [B, T, H, D] memory seen as [B, H, T, D].
fn bthd(shape: [usize; 4]) -> ([usize; 4], [usize; 4]) {
    let [b, t, h, d] = shape;
    ([b, h, t, d], [t * h * d, d, h * d, 1])
}

fn raw(data: *mut std::ffi::c_void, dtype: i32, s: ([i64; 4], [i64; 4])) -> sys::octattn_tensor {
    sys::octattn_tensor {
        data,
        dtype,
        reserved: 0,
        shape: s.0,
        stride: s.1,
    }
}

impl<'a> Tensor<'a> {
    /// `data` as [B, H, T, D] with any strides (in elements).
    pub fn new(data: &'a [f32], shape: [usize; 4], strides: [usize; 4]) -> Result<Self> {
        let s = checked(data.len(), shape, strides)?;
        Ok(Tensor {
            raw: raw(data.as_ptr() as *mut _, sys::OCTATTN_DTYPE_F32, s),
            _data: PhantomData,
        })
    }
    /// Contiguous [B, H, T, D].
    pub fn bhtd(data: &'a [f32], shape: [usize; 4]) -> Result<Self> {
        Self::new(data, shape, dense(shape))
    }
    /// Contiguous [B, T, H, D] memory (shape given in that order), viewed as [B, H, T, D].
    pub fn bthd(data: &'a [f32], shape: [usize; 4]) -> Result<Self> {
        let (s, st) = bthd(shape);
        Self::new(data, s, st)
    }
    /// A quantized cache's bytes as [B, H, T, D] with any strides (in elements; Q8_0 and
    /// Q4_0: in blocks, D a multiple of 32): k and v of `attention`.
    pub fn quantized(
        data: &'a [u8],
        kind: Quant,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Result<Self> {
        let s = kind.view(data.len(), shape, strides)?;
        Ok(Tensor {
            raw: raw(data.as_ptr() as *mut _, kind.dtype(), s),
            _data: PhantomData,
        })
    }
    /// bf16 or f16 `data` (bit patterns) as [B, H, T, D] with any strides (in elements):
    /// q, k and v of `attention` (a 16-bit model, or f32 queries over a 16-bit cache), and
    /// q, k, v, o and dout of `attention_backward`.
    pub fn half(
        data: &'a [u16],
        kind: Half,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Result<Self> {
        let s = checked(data.len(), shape, strides)?;
        Ok(Tensor {
            raw: raw(data.as_ptr() as *mut _, kind.dtype(), s),
            _data: PhantomData,
        })
    }
}

impl<'a> TensorMut<'a> {
    pub fn new(data: &'a mut [f32], shape: [usize; 4], strides: [usize; 4]) -> Result<Self> {
        let s = checked(data.len(), shape, strides)?;
        Ok(TensorMut {
            raw: raw(data.as_mut_ptr() as *mut _, sys::OCTATTN_DTYPE_F32, s),
            _data: PhantomData,
        })
    }
    pub fn bhtd(data: &'a mut [f32], shape: [usize; 4]) -> Result<Self> {
        Self::new(data, shape, dense(shape))
    }
    pub fn bthd(data: &'a mut [f32], shape: [usize; 4]) -> Result<Self> {
        let (s, st) = bthd(shape);
        Self::new(data, s, st)
    }
    /// A quantized cache's bytes, written by `Context::kv_store`.
    pub fn quantized(
        data: &'a mut [u8],
        kind: Quant,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Result<Self> {
        let s = kind.view(data.len(), shape, strides)?;
        Ok(TensorMut {
            raw: raw(data.as_mut_ptr() as *mut _, kind.dtype(), s),
            _data: PhantomData,
        })
    }
    /// A bf16 or f16 output (o, in q's type), [B, H, T, D] with any strides.
    pub fn half(
        data: &'a mut [u16],
        kind: Half,
        shape: [usize; 4],
        strides: [usize; 4],
    ) -> Result<Self> {
        let s = checked(data.len(), shape, strides)?;
        Ok(TensorMut {
            raw: raw(data.as_mut_ptr() as *mut _, kind.dtype(), s),
            _data: PhantomData,
        })
    }
}

impl<'a> MaskTensor<'a> {
    /// [B, Hq, Tq, Tk] with any strides (0 broadcasts).
    pub fn new(data: &'a [bool], shape: [usize; 4], strides: [usize; 4]) -> Result<Self> {
        let s = checked(data.len(), shape, strides)?;
        Ok(MaskTensor {
            raw: raw(data.as_ptr() as *mut _, sys::OCTATTN_DTYPE_BOOL, s),
            _data: PhantomData,
        })
    }
}

/// The options of an attention call (include/octattn.h); `Options::default()` is
/// plain causal attention with scale 1/sqrt(D), the queries being the newest tokens.
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    pub causal: bool,
    pub window: i64,
    pub stride: i64,
    /// None: k_start + kv_len - q_len.
    pub q_start: Option<i64>,
    pub k_start: i64,
    /// None: 1/sqrt(head_dim).
    pub scale: Option<f32>,
    pub chunk: i64,
    pub softcap: f32,
    pub algorithm: Algorithm,
    /// One slope per query head.
    pub alibi_slopes: Option<&'a [f32]>,
    /// One sink logit per query head.
    pub sinks: Option<&'a [f32]>,
    pub bias: Option<Tensor<'a>>,
    pub mask: Option<MaskTensor<'a>>,
    /// Sequences (include/octattn.h, SEMANTICS: Sequences): one entry per sequence, the
    /// position of its first query row.
    pub q_starts: Option<&'a [i64]>,
    /// The first valid key row of each sequence (left padding).
    pub kv_starts: Option<&'a [i64]>,
    /// The valid key rows of each sequence (right padding; paged: the context length).
    pub kv_lens: Option<&'a [i64]>,
    /// A ragged batch: n + 1 offsets of each sequence's query rows and key rows, packed
    /// along the rows of batch entry 0 (q, k, v [1, H, total, D]).
    pub cu_seqlens: Option<(&'a [i64], &'a [i64])>,
    /// A paged cache (SEMANTICS: Paged): the block ids of each sequence, `cols` per
    /// sequence; k and v are pools [blocks, kv_heads, block_size, D] (any strides).
    pub block_table: Option<(&'a [i32], usize)>,
    /// A quantized cache's scales (SEMANTICS: Quantized caches): f32 [B, Hkv, R, D / G],
    /// sizes of 1 broadcasting; key row j reads scale row j / k_scale_rows (0: 1).
    pub k_scale: Option<Tensor<'a>>,
    pub v_scale: Option<Tensor<'a>>,
    pub k_scale_rows: usize,
    pub v_scale_rows: usize,
    /// q . k over an INT8, Q8_0 or Q4_0 key cache as int8 dot products, q rounded to int8
    /// in blocks (SEMANTICS: Quantized caches, OCTATTN_QK_INT8); false: exact.
    pub qk_int8: bool,
    /// A tree of draft tokens per batch entry (SEMANTICS: Trees): packed bits,
    /// `row_bytes` from one query row's bits to the next, `stride` bytes from one batch
    /// entry's rows to the next (0: every entry reads the same tree).
    pub tree: Option<(&'a [u8], usize, usize)>,
    /// A block mask (SEMANTICS: Block masks): flex_attention's BlockMask lists.
    pub blocks: Option<BlockMask<'a>>,
    /// Token-sparse attention (SEMANTICS: Key lists): each query row's key rows, and a
    /// second list joined to the first (a local window).
    pub key_list: Option<KeyList<'a>>,
    pub key_list2: Option<KeyList<'a>>,
}

/// A key list, C-contiguous: `indices` [entries, heads, rows, n] (each query row's key
/// rows from its sequence's first valid key, -1 for none, any order) and `counts`
/// [entries, heads, rows] (None: all n read); entries and heads (kv heads) of 1 broadcast.
#[derive(Clone, Copy, Debug)]
pub struct KeyList<'a> {
    pub indices: &'a [i32],
    pub counts: Option<&'a [i32]>,
    pub entries: usize,
    pub heads: usize,
    pub rows: usize,
    pub n: usize,
}

/// A block mask's lists, C-contiguous: `counts` [entries, heads, q_blocks] and `indices`
/// [entries, heads, q_blocks, n] (the partial blocks: flex's kv_num_blocks, kv_indices),
/// `full` the same for the full blocks; entries and heads of 1 broadcast.
#[derive(Clone, Copy, Debug)]
pub struct BlockMask<'a> {
    pub counts: &'a [i32],
    pub indices: &'a [i32],
    pub full: Option<(&'a [i32], &'a [i32])>,
    pub entries: usize,
    pub heads: usize,
    pub q_blocks: usize,
    /// Each list's capacity (the last dimension of the indices).
    pub n: usize,
    pub block_q: usize,
    pub block_kv: usize,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            causal: true,
            window: 0,
            stride: 0,
            q_start: None,
            k_start: 0,
            scale: None,
            chunk: 0,
            softcap: 0.0,
            algorithm: Algorithm::Auto,
            alibi_slopes: None,
            sinks: None,
            bias: None,
            mask: None,
            q_starts: None,
            kv_starts: None,
            kv_lens: None,
            cu_seqlens: None,
            block_table: None,
            k_scale: None,
            v_scale: None,
            k_scale_rows: 0,
            v_scale_rows: 0,
            qk_int8: false,
            tree: None,
            blocks: None,
            key_list: None,
            key_list2: None,
        }
    }
}

impl Options<'_> {
    // The C struct; the per-head arrays are checked against the query heads.
    // The tensors it points at are held in `held` (bias, mask, k_scale, v_scale, then a
    // block mask's four, then the key lists' indices and counts).
    fn raw(
        &self,
        batch: i64,
        q_heads: i64,
        q_rows: i64,
        held: &mut [sys::octattn_tensor; 12],
    ) -> Result<sys::octattn_attention_options> {
        let mut o = std::mem::MaybeUninit::<sys::octattn_attention_options>::uninit();
        // The sized init: it writes this crate's struct, whatever library is loaded.
        unsafe {
            sys::octattn_attention_options_init_size(
                o.as_mut_ptr(),
                std::mem::size_of::<sys::octattn_attention_options>(),
            )
        };
        let mut o = unsafe { o.assume_init() };
        o.causal = self.causal as i32;
        o.window = self.window;
        o.stride = self.stride;
        o.q_start = self.q_start.unwrap_or(sys::OCTATTN_Q_START_DEFAULT);
        o.k_start = self.k_start;
        o.scale = self.scale.unwrap_or(0.0);
        o.chunk = self.chunk;
        o.softcap = self.softcap;
        o.algorithm = self.algorithm as i32;
        for (name, a, dst) in [
            ("alibi_slopes", self.alibi_slopes, &mut o.alibi_slopes),
            ("sinks", self.sinks, &mut o.sinks),
        ] {
            if let Some(a) = a {
                if a.len() as i64 != q_heads {
                    return Err(invalid(
                        sys::OCTATTN_ERROR_INVALID_SHAPE,
                        format!("{name}: {} entries for {q_heads} query heads", a.len()),
                    ));
                }
                *dst = a.as_ptr();
            }
        }
        let [bias, mask, k_scale, v_scale, held_lists @ ..] = held;
        if let Some(b) = self.bias {
            *bias = b.raw;
            o.bias = bias;
        }
        if let Some(m) = self.mask {
            *mask = m.raw;
            o.mask = mask;
        }
        if let Some(t) = self.k_scale {
            *k_scale = t.raw;
            o.k_scale = k_scale;
        }
        if let Some(t) = self.v_scale {
            *v_scale = t.raw;
            o.v_scale = v_scale;
        }
        o.k_scale_rows = self.k_scale_rows as i64;
        o.v_scale_rows = self.v_scale_rows as i64;
        o.qk_precision = if self.qk_int8 {
            sys::OCTATTN_QK_INT8
        } else {
            sys::OCTATTN_QK_EXACT
        };
        // The sequences: the batch entries, or a ragged batch's n.
        let sequences = match self.cu_seqlens {
            Some((cq, ck)) => {
                if cq.is_empty() || cq.len() != ck.len() {
                    return Err(invalid(
                        sys::OCTATTN_ERROR_INVALID_OPTION,
                        format!(
                            "cu_seqlens: {} and {} offsets, n + 1 each",
                            cq.len(),
                            ck.len()
                        ),
                    ));
                }
                o.sequences = cq.len() as i64 - 1;
                o.cu_seqlens_q = cq.as_ptr();
                o.cu_seqlens_k = ck.as_ptr();
                o.sequences
            }
            None => batch,
        };
        for (name, a, dst) in [
            ("q_starts", self.q_starts, &mut o.q_starts),
            ("kv_starts", self.kv_starts, &mut o.kv_starts),
            ("kv_lens", self.kv_lens, &mut o.kv_lens),
        ] {
            if let Some(a) = a {
                if a.len() as i64 != sequences {
                    return Err(invalid(
                        sys::OCTATTN_ERROR_INVALID_OPTION,
                        format!("{name}: {} entries for {sequences} sequences", a.len()),
                    ));
                }
                *dst = a.as_ptr();
            }
        }
        if let Some((table, cols)) = self.block_table {
            if cols == 0 || table.len() as i64 != sequences * cols as i64 {
                return Err(invalid(
                    sys::OCTATTN_ERROR_INVALID_OPTION,
                    format!(
                        "block_table: {} ids for {sequences} sequences of {cols}",
                        table.len()
                    ),
                ));
            }
            o.block_table = table.as_ptr();
            o.block_table_cols = cols as i64;
        }
        if let Some((bits, row_bytes, stride)) = self.tree {
            // The bytes the library reads: every entry's q_rows rows.
            let need =
                (batch.max(1) as u128 - 1) * stride as u128 + q_rows as u128 * row_bytes as u128;
            if (bits.len() as u128) < need {
                return Err(invalid(
                    sys::OCTATTN_ERROR_INVALID_OPTION,
                    format!("tree: {} bytes, the rows need {need}", bits.len()),
                ));
            }
            o.tree = bits.as_ptr();
            o.tree_row_bytes = row_bytes as i64;
            o.tree_stride = stride as i64;
        }
        if let Some(m) = self.blocks {
            let lists = [Some((m.counts, m.indices)), m.full];
            let (e, h, qb, n) = (
                m.entries as i64,
                m.heads as i64,
                m.q_blocks as i64,
                m.n as i64,
            );
            for (x, l) in lists.iter().enumerate() {
                let Some((c, i)) = l else { continue };
                // The lengths the shapes claim, checked here: the library reads them all.
                if c.len() as i64 != e * h * qb || i.len() as i64 != e * h * qb * n || n < 1 {
                    return Err(invalid(
                        sys::OCTATTN_ERROR_INVALID_SHAPE,
                        format!(
                            "blocks: {} counts and {} indices for [{e}, {h}, {qb}, {n}]",
                            c.len(),
                            i.len()
                        ),
                    ));
                }
                held_lists[x * 2] = raw(
                    c.as_ptr() as *mut _,
                    sys::OCTATTN_DTYPE_INT32,
                    ([e, h, qb, 1], [h * qb, qb, 1, 1]),
                );
                held_lists[x * 2 + 1] = raw(
                    i.as_ptr() as *mut _,
                    sys::OCTATTN_DTYPE_INT32,
                    ([e, h, qb, n], [h * qb * n, qb * n, n, 1]),
                );
            }
            o.block_counts = &held_lists[0];
            o.block_indices = &held_lists[1];
            if m.full.is_some() {
                o.full_block_counts = &held_lists[2];
                o.full_block_indices = &held_lists[3];
            }
            o.block_q = m.block_q as i64;
            o.block_kv = m.block_kv as i64;
        }
        for (x, l) in [self.key_list, self.key_list2].iter().enumerate() {
            let Some(l) = l else { continue };
            let (e, h, r, n) = (l.entries as i64, l.heads as i64, l.rows as i64, l.n as i64);
            // The lengths the shapes claim, checked here: the library reads them all.
            let counts_ok = l.counts.map_or(true, |c| c.len() as i64 == e * h * r);
            if l.indices.len() as i64 != e * h * r * n || !counts_ok || n < 1 {
                return Err(invalid(
                    sys::OCTATTN_ERROR_INVALID_SHAPE,
                    format!(
                        "key_list: {} indices and {} counts for [{e}, {h}, {r}, {n}]",
                        l.indices.len(),
                        l.counts.map_or(0, |c| c.len())
                    ),
                ));
            }
            held_lists[4 + x * 2] = raw(
                l.indices.as_ptr() as *mut _,
                sys::OCTATTN_DTYPE_INT32,
                ([e, h, r, n], [h * r * n, r * n, n, 1]),
            );
            let indices: *const sys::octattn_tensor = &held_lists[4 + x * 2];
            let counts: *const sys::octattn_tensor = match l.counts {
                Some(c) => {
                    held_lists[5 + x * 2] = raw(
                        c.as_ptr() as *mut _,
                        sys::OCTATTN_DTYPE_INT32,
                        ([e, h, r, 1], [h * r, r, 1, 1]),
                    );
                    &held_lists[5 + x * 2]
                }
                None => std::ptr::null(),
            };
            if x == 0 {
                o.key_indices = indices;
                o.key_counts = counts;
            } else {
                o.key_indices2 = indices;
                o.key_counts2 = counts;
            }
        }
        Ok(o)
    }
}

fn layouts() -> Result<()> {
    static CHECKED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    CHECKED
        .get_or_init(sys::check_layouts)
        .clone()
        .map_err(|m| invalid(sys::OCTATTN_ERROR_STRUCT_SIZE, m))
}

/// A thread cap, a backend and target, and scratch memory reused across calls. A
/// context is `Send` (it may move to another thread) but not `Sync`: calls take
/// `&mut self`.
pub struct Context {
    raw: *mut sys::octattn_context,
}

unsafe impl Send for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        unsafe { sys::octattn_context_destroy(self.raw) }
    }
}

impl Context {
    /// A new context (thread cap: OCTATTN_THREADS, else every hardware thread). The
    /// first context of a process also checks octattn-sys's struct layouts against the
    /// library's.
    pub fn new() -> Result<Self> {
        layouts()?;
        let mut raw = std::ptr::null_mut();
        let status = unsafe { sys::octattn_context_create(&mut raw) };
        if status != sys::OCTATTN_OK {
            return Err(invalid(status, "octattn_context_create failed"));
        }
        Ok(Context { raw })
    }

    fn check(&self, status: i32) -> Result<()> {
        if status == sys::OCTATTN_OK {
            Ok(())
        } else {
            Err(Error {
                status,
                message: text(unsafe { sys::octattn_context_last_error(self.raw) }),
            })
        }
    }

    /// Caps the threads of this context's calls (0: every hardware thread).
    pub fn set_threads(&mut self, threads: i32) -> Result<()> {
        self.check(unsafe { sys::octattn_context_set_threads(self.raw, threads) })
    }

    pub fn threads(&self) -> i32 {
        let mut n = 0;
        unsafe { sys::octattn_context_get_threads(self.raw, &mut n) };
        n
    }

    pub fn set_target(&mut self, backend: Backend, target: Target) -> Result<()> {
        self.check(unsafe {
            sys::octattn_context_set_target(self.raw, backend as i32, target as i32)
        })
    }

    /// What the last call ran.
    pub fn last_run(&self) -> Result<RunInfo> {
        let mut info = sys::octattn_run_info {
            struct_size: std::mem::size_of::<sys::octattn_run_info>(),
            ..Default::default()
        };
        self.check(unsafe { sys::octattn_context_last_run(self.raw, &mut info) })?;
        let backend = if info.algorithm == sys::OCTATTN_ALGORITHM_REFERENCE {
            "reference".to_string()
        } else {
            text(unsafe { sys::octattn_backend_name(info.backend) })
        };
        Ok(RunInfo {
            algorithm: text(unsafe { sys::octattn_algorithm_name(info.algorithm) }),
            backend,
            target: text(unsafe { sys::octattn_target_name(info.target) }),
            threads: info.threads,
            shared_kv_rows: info.shared_kv_rows,
        })
    }

    /// o = softmax(scale * q k^T + M) v; lse (optional, [B, Hq, Tq, 1]) gets each row's
    /// log-sum-exp. On failure nothing is written.
    /// Converts `src`'s rows (f32 or 16-bit [B, H, T, D]) into `dst`, a view of a cache's
    /// rows of any dtype (src's shape), or with `slots` (one per row of every batch entry,
    /// vLLM's slot mapping; -1 skips) a pool [blocks, H, block_size, D]. `scale`: an Int8
    /// dst's output ([B, H, T / scale_rows, D / G]), an fp8 dst's input (None: 1).
    pub fn kv_store(
        &mut self,
        src: &Tensor,
        dst: &mut TensorMut,
        scale: Option<&mut TensorMut>,
        scale_rows: usize,
        slots: Option<&[i64]>,
    ) -> Result<()> {
        let rows = (src.raw.shape[0] * src.raw.shape[2]) as usize;
        if let Some(s) = slots {
            if s.len() != rows {
                return Err(invalid(
                    sys::OCTATTN_ERROR_INVALID_OPTION,
                    format!("slots: {} entries for {rows} rows", s.len()),
                ));
            }
        }
        let scale_ptr = scale.map_or(std::ptr::null_mut(), |t| &mut t.raw as *mut _);
        self.check(unsafe {
            sys::octattn_kv_store(
                self.raw,
                &src.raw,
                &mut dst.raw,
                scale_ptr,
                scale_rows as i64,
                slots.map_or(std::ptr::null(), |s| s.as_ptr()),
            )
        })
    }

    pub fn attention(
        &mut self,
        options: &Options,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &mut TensorMut,
        lse: Option<&mut TensorMut>,
    ) -> Result<()> {
        self.attend(options, q, k, v, o, lse, None)
    }

    /// `attention` that also writes each key's attention received (options.key_scores,
    /// since 0.11): key_scores [B, Hkv, Tk, 1] (paged: [sequences, Hkv, logical rows, 1]),
    /// the sum over the key's kv head's query heads and the query rows of their weights,
    /// for KV-cache eviction (H2O, SnapKV). Every element is written; a key no row reads
    /// gets 0.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_key_scores(
        &mut self,
        options: &Options,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &mut TensorMut,
        lse: Option<&mut TensorMut>,
        key_scores: &mut TensorMut,
    ) -> Result<()> {
        self.attend(options, q, k, v, o, lse, Some(key_scores))
    }

    #[allow(clippy::too_many_arguments)]
    fn attend(
        &mut self,
        options: &Options,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &mut TensorMut,
        lse: Option<&mut TensorMut>,
        key_scores: Option<&mut TensorMut>,
    ) -> Result<()> {
        let mut held = [q.raw; 12];
        let mut opts = options.raw(q.raw.shape[0], q.raw.shape[1], q.raw.shape[2], &mut held)?;
        if let Some(ks) = key_scores {
            opts.key_scores = &mut ks.raw;
        }
        let lse_ptr = lse.map_or(std::ptr::null_mut(), |l| &mut l.raw as *mut _);
        self.check(unsafe {
            sys::octattn_attention(
                self.raw,
                &opts,
                &q.raw,
                &k.raw,
                &v.raw,
                &mut o.raw,
                lse_ptr,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        })
    }

    /// The gradients of `attention` (octattn_attention_backward, since 0.5): given the
    /// forward's options and inputs, the o and lse it returned, dout = dL/do and
    /// optionally dlse = dL/dlse, writes dq, dk, dv, and dsinks (one entry per query
    /// head; needs options.sinks) and dbias ([B, Hq, Tq, Tk]) when given. q, k, v, o and
    /// dout may be bf16 or f16 (`Tensor::half`, any mix); the gradients are f32. The same
    /// bytes for any thread count and layout; on failure nothing is written.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_backward(
        &mut self,
        options: &Options,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &Tensor,
        lse: &Tensor,
        dout: &Tensor,
        dlse: Option<&Tensor>,
        dq: &mut TensorMut,
        dk: &mut TensorMut,
        dv: &mut TensorMut,
        dsinks: Option<&mut [f32]>,
        dbias: Option<&mut TensorMut>,
    ) -> Result<()> {
        let mut held = [q.raw; 12];
        let opts = options.raw(q.raw.shape[0], q.raw.shape[1], q.raw.shape[2], &mut held)?;
        let dsinks_ptr = match dsinks {
            Some(s) if s.len() as i64 != q.raw.shape[1] => {
                return Err(invalid(
                    sys::OCTATTN_ERROR_INVALID_SHAPE,
                    format!(
                        "dsinks: {} entries for {} query heads",
                        s.len(),
                        q.raw.shape[1]
                    ),
                ))
            }
            Some(s) => s.as_mut_ptr(),
            None => std::ptr::null_mut(),
        };
        let dlse_ptr = dlse.map_or(std::ptr::null(), |t| &t.raw as *const _);
        let dbias_ptr = dbias.map_or(std::ptr::null_mut(), |t| &mut t.raw as *mut _);
        self.check(unsafe {
            sys::octattn_attention_backward(
                self.raw,
                &opts,
                &q.raw,
                &k.raw,
                &v.raw,
                &o.raw,
                &lse.raw,
                &dout.raw,
                dlse_ptr,
                &mut dq.raw,
                &mut dk.raw,
                &mut dv.raw,
                dsinks_ptr,
                dbias_ptr,
                std::ptr::null_mut(),
                0,
            )
        })
    }

    /// Bytes of scratch the call would need (the context allocates and keeps it).
    pub fn workspace_size(
        &mut self,
        options: &Options,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        o: &TensorMut,
    ) -> Result<usize> {
        let mut held = [q.raw; 12];
        let opts = options.raw(q.raw.shape[0], q.raw.shape[1], q.raw.shape[2], &mut held)?;
        let mut bytes = 0usize;
        self.check(unsafe {
            sys::octattn_attention_workspace_size(
                self.raw,
                &opts,
                &q.raw,
                &k.raw,
                &v.raw,
                &o.raw,
                std::ptr::null(),
                std::ptr::null(),
                &mut bytes,
            )
        })?;
        Ok(bytes)
    }

    /// Combines partial outputs over key shards by their LSE (octattn_merge).
    pub fn merge(
        &mut self,
        o_parts: &[Tensor],
        lse_parts: &[Tensor],
        o: &mut TensorMut,
        lse: Option<&mut TensorMut>,
    ) -> Result<()> {
        if o_parts.len() != lse_parts.len() {
            return Err(invalid(
                sys::OCTATTN_ERROR_INVALID_SHAPE,
                "as many lse parts as output parts",
            ));
        }
        let op: Vec<_> = o_parts.iter().map(|t| t.raw).collect();
        let lp: Vec<_> = lse_parts.iter().map(|t| t.raw).collect();
        let lse_ptr = lse.map_or(std::ptr::null_mut(), |l| &mut l.raw as *mut _);
        self.check(unsafe {
            sys::octattn_merge(
                self.raw,
                op.len(),
                op.as_ptr(),
                lp.as_ptr(),
                &mut o.raw,
                lse_ptr,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Causal attention in f64, [B, H, T, D] contiguous, GQA by repeat-interleave.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        b: usize,
        hq: usize,
        hkv: usize,
        t: usize,
        d: usize,
    ) -> Vec<f64> {
        let mut o = vec![0.0f64; b * hq * t * d];
        let scale = 1.0 / (d as f64).sqrt();
        for bi in 0..b {
            for h in 0..hq {
                let kh = h / (hq / hkv);
                for i in 0..t {
                    let qi = &q[((bi * hq + h) * t + i) * d..][..d];
                    let s: Vec<f64> = (0..=i)
                        .map(|j| {
                            let kj = &k[((bi * hkv + kh) * t + j) * d..][..d];
                            scale
                                * qi.iter()
                                    .zip(kj)
                                    .map(|(a, b)| *a as f64 * *b as f64)
                                    .sum::<f64>()
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for (j, w) in e.iter().enumerate() {
                        let vj = &v[((bi * hkv + kh) * t + j) * d..][..d];
                        for c in 0..d {
                            o[((bi * hq + h) * t + i) * d + c] += w / sum * vj[c] as f64;
                        }
                    }
                }
            }
        }
        o
    }

    fn data(n: usize, seed: u32) -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 500.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn matches_the_reference_with_grouped_queries() {
        let (b, hq, hkv, t, d) = (2, 4, 2, 9, 16);
        let (q, k, v) = (
            data(b * hq * t * d, 1),
            data(b * hkv * t * d, 2),
            data(b * hkv * t * d, 3),
        );
        let mut o = vec![0.0f32; q.len()];
        let mut lse = vec![0.0f32; b * hq * t];
        let mut ctx = Context::new().unwrap();
        ctx.attention(
            &Options::default(),
            &Tensor::bhtd(&q, [b, hq, t, d]).unwrap(),
            &Tensor::bhtd(&k, [b, hkv, t, d]).unwrap(),
            &Tensor::bhtd(&v, [b, hkv, t, d]).unwrap(),
            &mut TensorMut::bhtd(&mut o, [b, hq, t, d]).unwrap(),
            Some(&mut TensorMut::bhtd(&mut lse, [b, hq, t, 1]).unwrap()),
        )
        .unwrap();
        let want = reference(&q, &k, &v, b, hq, hkv, t, d);
        for (a, w) in o.iter().zip(&want) {
            assert!((*a as f64 - w).abs() < 1e-5, "{a} vs {w}");
        }
        assert!(lse.iter().all(|x| x.is_finite()));
        assert_eq!(ctx.last_run().unwrap().algorithm, "fused");
    }

    #[test]
    fn mla_reads_v_as_a_view_of_the_latent_rows() {
        // MLA's absorbed decode: 24 query heads on one latent kv head of 48 dimensions, v
        // its first 32 (a view of k's slice: k's strides, shape 32). The same bytes as v
        // copied out, on one and two threads (the keys split over threads).
        let (hq, tk, d, dv) = (24, 2600, 48, 32);
        let (q, k) = (data(hq * d, 7), data(tk * d, 8));
        let copy: Vec<f32> = k.chunks(d).flat_map(|row| row[..dv].to_vec()).collect();
        let view = Tensor::new(&k, [1, 1, tk, dv], [tk * d, tk * d, d, 1]).unwrap();
        let mut outs = Vec::new();
        for (threads, v) in [
            (1, view),
            (2, view),
            (1, Tensor::bhtd(&copy, [1, 1, tk, dv]).unwrap()),
        ] {
            let mut o = vec![0.0f32; hq * dv];
            let mut ctx = Context::new().unwrap();
            ctx.set_threads(threads).unwrap();
            ctx.attention(
                &Options::default(),
                &Tensor::bhtd(&q, [1, hq, 1, d]).unwrap(),
                &Tensor::bhtd(&k, [1, 1, tk, d]).unwrap(),
                &v,
                &mut TensorMut::bhtd(&mut o, [1, hq, 1, dv]).unwrap(),
                None,
            )
            .unwrap();
            outs.push(o);
        }
        assert!(outs.iter().all(|o| o
            .iter()
            .map(|x| x.to_bits())
            .eq(outs[0].iter().map(|x| x.to_bits()))));
        assert!(outs[0].iter().all(|x| x.is_finite() && x.abs() <= 1.0));
    }

    #[test]
    fn key_scores_sum_each_kv_heads_weights() {
        // One decode row per query head over 1500 keys: each kv head's keys receive its two
        // query heads' weights, which sum to 2; keys no row reads (past a window) get 0.
        let (hq, hkv, tk, d) = (4, 2, 1500, 16);
        let (q, k, v) = (
            data(hq * d, 4),
            data(hkv * tk * d, 5),
            data(hkv * tk * d, 6),
        );
        let mut o = vec![0.0f32; q.len()];
        let mut ks = vec![-1.0f32; hkv * tk];
        let mut ctx = Context::new().unwrap();
        let options = Options {
            window: 1000,
            ..Options::default()
        };
        ctx.attention_key_scores(
            &options,
            &Tensor::bhtd(&q, [1, hq, 1, d]).unwrap(),
            &Tensor::bhtd(&k, [1, hkv, tk, d]).unwrap(),
            &Tensor::bhtd(&v, [1, hkv, tk, d]).unwrap(),
            &mut TensorMut::bhtd(&mut o, [1, hq, 1, d]).unwrap(),
            None,
            &mut TensorMut::bhtd(&mut ks, [1, hkv, tk, 1]).unwrap(),
        )
        .unwrap();
        for h in 0..hkv {
            let row = &ks[h * tk..(h + 1) * tk];
            assert!(row[..500].iter().all(|&x| x == 0.0));
            assert!(row[500..].iter().all(|&x| x > 0.0));
            let sum: f64 = row.iter().map(|&x| x as f64).sum();
            assert!((sum - 2.0).abs() < 1e-5, "{sum}");
        }
        // A wrong shape: a status, nothing written.
        let mut bad = vec![-1.0f32; hkv * tk];
        let err = ctx
            .attention_key_scores(
                &options,
                &Tensor::bhtd(&q, [1, hq, 1, d]).unwrap(),
                &Tensor::bhtd(&k, [1, hkv, tk, d]).unwrap(),
                &Tensor::bhtd(&v, [1, hkv, tk, d]).unwrap(),
                &mut TensorMut::bhtd(&mut o, [1, hq, 1, d]).unwrap(),
                None,
                &mut TensorMut::bhtd(&mut bad, [1, 1, tk * 2, 1]).unwrap(),
            )
            .unwrap_err();
        assert_eq!(err.status, sys::OCTATTN_ERROR_INVALID_SHAPE);
        assert!(bad.iter().all(|&x| x == -1.0));
    }

    type Narrow = dyn Fn(&[f32]) -> Vec<u16>;
    type Widen = dyn Fn(&[u16]) -> Vec<f32>;

    #[test]
    fn bf16_and_f16_tensors_are_the_f32_call_on_their_values() {
        let (b, hq, hkv, t, d) = (1, 4, 2, 300, 16);
        let shape = |h| [b, h, t, d];
        // bf16: the high half of an f32 pattern; f16: values k / 64, |k| < 64, exact.
        let bf16 =
            |x: &[f32]| -> Vec<u16> { x.iter().map(|f| (f.to_bits() >> 16) as u16).collect() };
        let f16 = |x: &[f32]| -> Vec<u16> {
            x.iter()
                .map(|f| {
                    let k = (f * 64.0).round() as i32;
                    if k == 0 {
                        return 0;
                    }
                    let (sign, a) = (if k < 0 { 0x8000u16 } else { 0 }, k.unsigned_abs());
                    let e = 31 - a.leading_zeros(); // a = 1.m * 2^e, value a * 2^-6
                    let m = (a << (10 - e)) & 0x3FF;
                    sign | (((e + 15 - 6) as u16) << 10) | m as u16
                })
                .collect()
        };
        let widen_bf16 = |h: &[u16]| -> Vec<f32> {
            h.iter()
                .map(|x| f32::from_bits((*x as u32) << 16))
                .collect()
        };
        let widen_f16 = |h: &[u16]| -> Vec<f32> {
            h.iter()
                .map(|x| {
                    let (e, m) = (((x >> 10) & 31) as i32, (x & 0x3FF) as f32);
                    let v = if e == 0 {
                        m * 2f32.powi(-24)
                    } else {
                        (1024.0 + m) * 2f32.powi(e - 25)
                    };
                    if x & 0x8000 != 0 {
                        -v
                    } else {
                        v
                    }
                })
                .collect()
        };
        let (q, k, v) = (
            data(b * hq * t * d, 21),
            data(b * hkv * t * d, 22),
            data(b * hkv * t * d, 23),
        );
        let mut ctx = Context::new().unwrap();
        for kind in [Half::Bf16, Half::F16] {
            let (narrow, widen): (&Narrow, &Widen) = match kind {
                Half::Bf16 => (&bf16, &widen_bf16),
                Half::F16 => (&f16, &widen_f16),
            };
            let (q16, k16, v16) = (narrow(&q), narrow(&k), narrow(&v));
            let (qw, kw, vw) = (widen(&q16), widen(&k16), widen(&v16));
            let mut want = vec![0.0f32; q.len()];
            ctx.attention(
                &Options::default(),
                &Tensor::bhtd(&qw, shape(hq)).unwrap(),
                &Tensor::bhtd(&kw, shape(hkv)).unwrap(),
                &Tensor::bhtd(&vw, shape(hkv)).unwrap(),
                &mut TensorMut::bhtd(&mut want, shape(hq)).unwrap(),
                None,
            )
            .unwrap();
            // f32 queries over the 16-bit cache: the same bytes.
            let mut o = vec![0.0f32; q.len()];
            ctx.attention(
                &Options::default(),
                &Tensor::bhtd(&qw, shape(hq)).unwrap(),
                &Tensor::half(&k16, kind, shape(hkv), dense(shape(hkv))).unwrap(),
                &Tensor::half(&v16, kind, shape(hkv), dense(shape(hkv))).unwrap(),
                &mut TensorMut::bhtd(&mut o, shape(hq)).unwrap(),
                None,
            )
            .unwrap();
            assert!(o.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()));
            // All 16-bit, o too: within half a unit of the 16-bit type of the f32 result.
            let mut o16 = vec![0u16; q.len()];
            ctx.attention(
                &Options::default(),
                &Tensor::half(&q16, kind, shape(hq), dense(shape(hq))).unwrap(),
                &Tensor::half(&k16, kind, shape(hkv), dense(shape(hkv))).unwrap(),
                &Tensor::half(&v16, kind, shape(hkv), dense(shape(hkv))).unwrap(),
                &mut TensorMut::half(&mut o16, kind, shape(hq), dense(shape(hq))).unwrap(),
                None,
            )
            .unwrap();
            // (plus half the spacing of f16's subnormals, 2^-25, below its normal range)
            let half_ulp = if kind == Half::Bf16 {
                2f32.powi(-8)
            } else {
                2f32.powi(-11)
            };
            // On avx512_bf16 and amx_bf16 the bf16 weighted sums round the weights to bf16:
            // the header adds max|v| * 2^-8 to the bound there.
            let target = ctx.last_run().unwrap().target;
            let pairs =
                if kind == Half::Bf16 && matches!(target.as_str(), "avx512_bf16" | "amx_bf16") {
                    vw.iter().fold(0.0f32, |m, x| m.max(x.abs())) * 2f32.powi(-8)
                } else {
                    0.0
                };
            for (a, w) in widen(&o16).iter().zip(&want) {
                assert!(
                    (a - w).abs() <= half_ulp * w.abs() + 2f32.powi(-25) + pairs,
                    "{a} vs {w}"
                );
            }
        }
        // o in f16 under bf16 queries: refused, nothing written.
        let (q16, k16) = (bf16(&q), bf16(&k));
        let mut o16 = vec![7u16; q.len()];
        let err = ctx
            .attention(
                &Options::default(),
                &Tensor::half(&q16, Half::Bf16, shape(hq), dense(shape(hq))).unwrap(),
                &Tensor::half(&k16, Half::Bf16, shape(hkv), dense(shape(hkv))).unwrap(),
                &Tensor::half(&k16, Half::Bf16, shape(hkv), dense(shape(hkv))).unwrap(),
                &mut TensorMut::half(&mut o16, Half::F16, shape(hq), dense(shape(hq))).unwrap(),
                None,
            )
            .unwrap_err();
        assert_eq!(err.status, sys::OCTATTN_ERROR_UNSUPPORTED);
        assert!(o16.iter().all(|x| *x == 7));
    }

    #[test]
    fn a_tree_gives_the_bytes_of_its_mask_tensor() {
        // 2 entries, 6 draft tokens over 5 prefix keys; node c's parent is c / 2 - 1
        // (a binary tree), entry 1's tree a chain.
        let (b, h, n, p, d) = (2, 2, 6, 5, 8);
        let (q, k) = (data(b * h * n * d, 3), data(b * h * (p + n) * d, 4));
        let mut bits = vec![0u8; b * n];
        let mut allow = vec![true; b * n * (p + n)];
        for e in 0..b {
            for i in 0..n {
                let mut c = i as i64;
                while c >= 0 {
                    bits[e * n + i] |= 1 << c;
                    c = if e == 0 { (c + 1) / 2 - 1 } else { c - 1 };
                }
                for c in 0..n {
                    allow[(e * n + i) * (p + n) + p + c] = bits[e * n + i] >> c & 1 == 1;
                }
            }
        }
        let mut ctx = Context::new().unwrap();
        let mut run = |opts: &Options| {
            let mut o = vec![0.0f32; q.len()];
            ctx.attention(
                opts,
                &Tensor::bhtd(&q, [b, h, n, d]).unwrap(),
                &Tensor::bhtd(&k, [b, h, p + n, d]).unwrap(),
                &Tensor::bhtd(&k, [b, h, p + n, d]).unwrap(),
                &mut TensorMut::bhtd(&mut o, [b, h, n, d]).unwrap(),
                None,
            )
            .map(|()| o)
        };
        let mask = MaskTensor::new(&allow, [b, 1, n, p + n], [n * (p + n), 0, p + n, 1]).unwrap();
        let with_tree = run(&Options {
            tree: Some((&bits, 1, n)),
            ..Options::default()
        })
        .unwrap();
        let with_mask = run(&Options {
            mask: Some(mask),
            ..Options::default()
        })
        .unwrap();
        assert!(with_tree
            .iter()
            .zip(&with_mask)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        // Fewer bytes than the rows need: refused before the call.
        let err = run(&Options {
            tree: Some((&bits[..b * n - 1], 1, n)),
            ..Options::default()
        })
        .unwrap_err();
        assert_eq!(err.status, sys::OCTATTN_ERROR_INVALID_OPTION);
    }

    #[test]
    fn a_block_mask_gives_the_bytes_of_its_mask_tensor() {
        // 2 query blocks of 4 rows over 3 key blocks of 4 keys: block 0 reads key block 0
        // (full), block 1 key blocks 0 (partial, no mask tensor: read whole) and 2 (full).
        let (b, h, t, d) = (1, 2, 8, 8);
        let tk = 12;
        let (q, k) = (data(b * h * t * d, 5), data(b * h * tk * d, 6));
        let counts = [0, 1];
        let indices = [0, 0, 0, 0];
        let full_counts = [1, 1];
        let full_indices = [0, 0, 2, 0];
        let mut allow = vec![false; t * tk];
        for i in 0..t {
            for j in 0..tk {
                allow[i * tk + j] = j < 4 || (i >= 4 && j >= 8);
            }
        }
        let mut ctx = Context::new().unwrap();
        let mut run = |opts: &Options| {
            let mut o = vec![0.0f32; q.len()];
            ctx.attention(
                opts,
                &Tensor::bhtd(&q, [b, h, t, d]).unwrap(),
                &Tensor::bhtd(&k, [b, h, tk, d]).unwrap(),
                &Tensor::bhtd(&k, [b, h, tk, d]).unwrap(),
                &mut TensorMut::bhtd(&mut o, [b, h, t, d]).unwrap(),
                None,
            )
            .map(|()| o)
        };
        let lists = BlockMask {
            counts: &counts,
            indices: &indices,
            full: Some((&full_counts, &full_indices)),
            entries: 1,
            heads: 1,
            q_blocks: 2,
            n: 2,
            block_q: 4,
            block_kv: 4,
        };
        let with_blocks = run(&Options {
            causal: false,
            blocks: Some(lists),
            ..Options::default()
        })
        .unwrap();
        let mask = MaskTensor::new(&allow, [1, 1, t, tk], [t * tk, 0, tk, 1]).unwrap();
        let with_mask = run(&Options {
            causal: false,
            mask: Some(mask),
            ..Options::default()
        })
        .unwrap();
        assert!(with_blocks
            .iter()
            .zip(&with_mask)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        // An index past the key blocks: the library's status.
        let bad = [3, 0, 2, 0];
        let err = run(&Options {
            blocks: Some(BlockMask {
                full: Some((&full_counts, &bad)),
                ..lists
            }),
            ..Options::default()
        })
        .unwrap_err();
        assert_eq!(err.status, sys::OCTATTN_ERROR_INVALID_OPTION);
    }

    #[test]
    fn key_lists_give_the_reference_bytes_of_their_mask_tensor() {
        // 2 heads on one kv head, 6 rows over 40 keys: each row's list (unsorted, with a
        // duplicate, -1 and a key past its position), the second list a local window.
        let (hq, t, tk, d, n) = (2, 6, 40, 8, 5);
        let (q, k) = (data(hq * t * d, 21), data(tk * d, 22));
        let mut indices = vec![-1i32; t * n];
        let mut counts = vec![0i32; t];
        let mut local = vec![0i32; t * 2];
        let mut allow = vec![false; t * tk];
        for i in 0..t {
            let pos = tk - t + i;
            let row = [
                (7 * i + 3) % tk,
                (11 * i + 1) % tk,
                (7 * i + 3) % tk,
                tk - 1,
            ];
            counts[i] = if i == 2 { 0 } else { 5 };
            for (x, &j) in row.iter().enumerate() {
                indices[i * n + x] = j as i32;
                if i != 2 && j <= pos {
                    allow[i * tk + j] = true;
                }
            }
            for x in 0..2 {
                local[i * 2 + x] = (pos - x) as i32;
                allow[i * tk + pos - x] = true;
            }
        }
        let mut ctx = Context::new().unwrap();
        let mut run = |opts: &Options| {
            let mut o = vec![0.0f32; q.len()];
            ctx.attention(
                opts,
                &Tensor::bhtd(&q, [1, hq, t, d]).unwrap(),
                &Tensor::bhtd(&k, [1, 1, tk, d]).unwrap(),
                &Tensor::bhtd(&k, [1, 1, tk, d]).unwrap(),
                &mut TensorMut::bhtd(&mut o, [1, hq, t, d]).unwrap(),
                None,
            )
            .map(|()| o)
        };
        let list = KeyList {
            indices: &indices,
            counts: Some(&counts),
            entries: 1,
            heads: 1,
            rows: t,
            n,
        };
        let window = KeyList {
            indices: &local,
            counts: None,
            n: 2,
            ..list
        };
        let lists = Options {
            key_list: Some(list),
            key_list2: Some(window),
            algorithm: Algorithm::Reference,
            ..Options::default()
        };
        let with_lists = run(&lists).unwrap();
        let mask = MaskTensor::new(&allow, [1, 1, t, tk], [t * tk, 0, tk, 1]).unwrap();
        let with_mask = run(&Options {
            mask: Some(mask),
            algorithm: Algorithm::Reference,
            ..Options::default()
        })
        .unwrap();
        assert!(with_lists
            .iter()
            .zip(&with_mask)
            .all(|(x, y)| x.to_bits() == y.to_bits()));
        let fused = run(&Options {
            algorithm: Algorithm::Fused,
            ..lists
        })
        .unwrap();
        assert!(fused
            .iter()
            .zip(&with_mask)
            .all(|(x, y)| (x - y).abs() < 1e-5));
        // A key past the cache: the library's status.
        let mut bad = indices.clone();
        bad[0] = tk as i32;
        let err = run(&Options {
            key_list: Some(KeyList {
                indices: &bad,
                ..list
            }),
            ..Options::default()
        })
        .unwrap_err();
        assert_eq!(err.status, sys::OCTATTN_ERROR_INVALID_OPTION);
    }

    #[test]
    fn backward_matches_the_reference_algorithm() {
        let (b, hq, hkv, t, d) = (1, 4, 2, 70, 16);
        let (q, k, v, dout) = (
            data(b * hq * t * d, 11),
            data(b * hkv * t * d, 12),
            data(b * hkv * t * d, 13),
            data(b * hq * t * d, 14),
        );
        let sinks = [0.5f32, -1.0, 0.25, 2.0];
        let opts = Options {
            window: 20,
            sinks: Some(&sinks),
            ..Options::default()
        };
        let mut o = vec![0.0f32; q.len()];
        let mut lse = vec![0.0f32; b * hq * t];
        let mut ctx = Context::new().unwrap();
        let (tq, tk, tv) = (
            Tensor::bhtd(&q, [b, hq, t, d]).unwrap(),
            Tensor::bhtd(&k, [b, hkv, t, d]).unwrap(),
            Tensor::bhtd(&v, [b, hkv, t, d]).unwrap(),
        );
        ctx.attention(
            &opts,
            &tq,
            &tk,
            &tv,
            &mut TensorMut::bhtd(&mut o, [b, hq, t, d]).unwrap(),
            Some(&mut TensorMut::bhtd(&mut lse, [b, hq, t, 1]).unwrap()),
        )
        .unwrap();
        // The gradients by one algorithm, with `sinks_len` entries for dsinks.
        let mut grads = |algorithm: Algorithm, sinks_len: usize| {
            let (mut dq, mut dk, mut dv) = (
                vec![0.0f32; q.len()],
                vec![0.0f32; k.len()],
                vec![0.0f32; v.len()],
            );
            let mut ds = vec![0.0f32; sinks_len];
            ctx.attention_backward(
                &Options { algorithm, ..opts },
                &tq,
                &tk,
                &tv,
                &Tensor::bhtd(&o, [b, hq, t, d]).unwrap(),
                &Tensor::bhtd(&lse, [b, hq, t, 1]).unwrap(),
                &Tensor::bhtd(&dout, [b, hq, t, d]).unwrap(),
                None,
                &mut TensorMut::bhtd(&mut dq, [b, hq, t, d]).unwrap(),
                &mut TensorMut::bhtd(&mut dk, [b, hkv, t, d]).unwrap(),
                &mut TensorMut::bhtd(&mut dv, [b, hkv, t, d]).unwrap(),
                Some(&mut ds),
                None,
            )
            .map(|()| [dq, dk, dv, ds])
        };
        let fused = grads(Algorithm::Fused, hq).unwrap();
        let reference = grads(Algorithm::Reference, hq).unwrap();
        for (f, r) in fused.iter().zip(&reference) {
            for (a, w) in f.iter().zip(r) {
                assert!((a - w).abs() < 1e-4, "{a} vs {w}");
            }
        }
        let err = grads(Algorithm::Auto, hq - 1).unwrap_err();
        assert_eq!(err.status, octattn_sys::OCTATTN_ERROR_INVALID_SHAPE);
    }

    #[test]
    fn bf16_backward_is_the_f32_call_on_their_values() {
        // bf16 q, k, v, o and dout: the f32 gradients of the f32 call on their values,
        // byte for byte where the target widens them; on avx512_bf16 and amx_bf16 whole
        // tiles' products run on bf16 pairs, within the header's added terms.
        let (b, hq, hkv, t, d) = (1, 4, 2, 150, 16);
        let (sq, skv) = ([b, hq, t, d], [b, hkv, t, d]);
        let bf16 = |x: &[f32]| -> (Vec<u16>, Vec<f32>) {
            let h: Vec<u16> = x.iter().map(|f| (f.to_bits() >> 16) as u16).collect();
            let w = h
                .iter()
                .map(|x| f32::from_bits((*x as u32) << 16))
                .collect();
            (h, w)
        };
        let (q16, q) = bf16(&data(b * hq * t * d, 51));
        let (k16, k) = bf16(&data(b * hkv * t * d, 52));
        let (v16, v) = bf16(&data(b * hkv * t * d, 53));
        let (do16, dout) = bf16(&data(b * hq * t * d, 54));
        let mut ctx = Context::new().unwrap();
        let mut of = vec![0.0f32; q.len()];
        let mut lse = vec![0.0f32; b * hq * t];
        ctx.attention(
            &Options::default(),
            &Tensor::bhtd(&q, sq).unwrap(),
            &Tensor::bhtd(&k, skv).unwrap(),
            &Tensor::bhtd(&v, skv).unwrap(),
            &mut TensorMut::bhtd(&mut of, sq).unwrap(),
            Some(&mut TensorMut::bhtd(&mut lse, [b, hq, t, 1]).unwrap()),
        )
        .unwrap();
        let (o16, o) = bf16(&of); // the bf16 o of a bf16 forward, and its values
        let lse = Tensor::bhtd(&lse, [b, hq, t, 1]).unwrap();
        fn half(x: &[u16], s: [usize; 4]) -> Tensor<'_> {
            Tensor::half(x, Half::Bf16, s, dense(s)).unwrap()
        }
        let grads = |ctx: &mut Context, ins: [Tensor; 5], dq16: Option<&mut [u16]>| {
            let (mut dq, mut dk, mut dv) = (
                vec![0.0f32; q.len()],
                vec![0.0f32; k.len()],
                vec![0.0f32; v.len()],
            );
            let mut dq_t = match dq16 {
                Some(h) => TensorMut::half(h, Half::Bf16, sq, dense(sq)).unwrap(),
                None => TensorMut::bhtd(&mut dq, sq).unwrap(),
            };
            let r = ctx.attention_backward(
                &Options::default(),
                &ins[0],
                &ins[1],
                &ins[2],
                &ins[3],
                &lse,
                &ins[4],
                None,
                &mut dq_t,
                &mut TensorMut::bhtd(&mut dk, skv).unwrap(),
                &mut TensorMut::bhtd(&mut dv, skv).unwrap(),
                None,
                None,
            );
            r.map(|()| [dq, dk, dv])
        };
        let want = grads(
            &mut ctx,
            [
                Tensor::bhtd(&q, sq).unwrap(),
                Tensor::bhtd(&k, skv).unwrap(),
                Tensor::bhtd(&v, skv).unwrap(),
                Tensor::bhtd(&o, sq).unwrap(),
                Tensor::bhtd(&dout, sq).unwrap(),
            ],
            None,
        )
        .unwrap();
        let narrow = || {
            [
                half(&q16, sq),
                half(&k16, skv),
                half(&v16, skv),
                half(&o16, sq),
                half(&do16, sq),
            ]
        };
        let got = grads(&mut ctx, narrow(), None).unwrap();
        let target = ctx.last_run().unwrap().target;
        let pairs = matches!(target.as_str(), "avx512_bf16" | "amx_bf16");
        for (g, w) in got.iter().zip(&want) {
            let top = w.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            for (a, b) in g.iter().zip(w) {
                if pairs {
                    assert!((a - b).abs() <= top / 64.0, "{a} vs {b} on {target}");
                } else {
                    assert_eq!(a.to_bits(), b.to_bits(), "{a} vs {b} on {target}");
                }
            }
        }
        // A bf16 dq: refused, nothing written.
        let mut dq16 = vec![0u16; q.len()];
        let err = grads(&mut ctx, narrow(), Some(&mut dq16)).unwrap_err();
        assert_eq!(err.status, sys::OCTATTN_ERROR_UNSUPPORTED);
        assert!(dq16.iter().all(|x| *x == 0));
    }

    #[test]
    fn bthd_views_give_the_same_bytes() {
        let (b, h, t, d) = (1, 2, 5, 8);
        let x = data(b * t * h * d, 4); // [B, T, H, D]
        let mut dense = vec![0.0f32; x.len()]; // the same numbers as [B, H, T, D]
        for ti in 0..t {
            for hi in 0..h {
                for c in 0..d {
                    dense[(hi * t + ti) * d + c] = x[(ti * h + hi) * d + c];
                }
            }
        }
        let mut ctx = Context::new().unwrap();
        let mut o1 = vec![0.0f32; x.len()];
        let mut o2 = vec![0.0f32; x.len()];
        let xt = Tensor::bthd(&x, [b, t, h, d]).unwrap();
        ctx.attention(
            &Options::default(),
            &xt,
            &xt,
            &xt,
            &mut TensorMut::bthd(&mut o1, [b, t, h, d]).unwrap(),
            None,
        )
        .unwrap();
        let dt = Tensor::bhtd(&dense, [b, h, t, d]).unwrap();
        ctx.attention(
            &Options::default(),
            &dt,
            &dt,
            &dt,
            &mut TensorMut::bhtd(&mut o2, [b, h, t, d]).unwrap(),
            None,
        )
        .unwrap();
        for ti in 0..t {
            for hi in 0..h {
                for c in 0..d {
                    assert_eq!(
                        o1[(ti * h + hi) * d + c].to_bits(),
                        o2[(hi * t + ti) * d + c].to_bits()
                    );
                }
            }
        }
    }

    #[test]
    fn errors_carry_status_and_message_and_write_nothing() {
        let q = data(3 * 4 * 8, 5);
        let k = data(2 * 4 * 8, 6);
        let mut o = vec![7.0f32; q.len()];
        let mut ctx = Context::new().unwrap();
        let err = ctx
            .attention(
                &Options::default(),
                &Tensor::bhtd(&q, [1, 3, 4, 8]).unwrap(),
                &Tensor::bhtd(&k, [1, 2, 4, 8]).unwrap(),
                &Tensor::bhtd(&k, [1, 2, 4, 8]).unwrap(),
                &mut TensorMut::bhtd(&mut o, [1, 3, 4, 8]).unwrap(),
                None,
            )
            .unwrap_err();
        assert_eq!(err.status, octattn_sys::OCTATTN_ERROR_INVALID_SHAPE);
        assert!(err.message.contains("kv_heads"), "{}", err.message);
        assert!(o.iter().all(|x| *x == 7.0));
        let err = ctx
            .attention(
                &Options {
                    causal: false,
                    window: 2,
                    ..Options::default()
                },
                &Tensor::bhtd(&k, [1, 2, 4, 8]).unwrap(),
                &Tensor::bhtd(&k, [1, 2, 4, 8]).unwrap(),
                &Tensor::bhtd(&k, [1, 2, 4, 8]).unwrap(),
                &mut TensorMut::bhtd(&mut o[..64], [1, 2, 4, 8]).unwrap(),
                None,
            )
            .unwrap_err();
        assert_eq!(err.status, octattn_sys::OCTATTN_ERROR_INVALID_OPTION);
        assert_eq!(err.status_name(), "invalid option");
        // views are checked against their slices before any call
        assert_eq!(
            Tensor::bhtd(&k, [1, 2, 4, 9]).unwrap_err().status,
            octattn_sys::OCTATTN_ERROR_INVALID_SHAPE
        );
        let slopes = [0.5f32; 3];
        let err = ctx
            .attention(
                &Options {
                    alibi_slopes: Some(&slopes),
                    ..Options::default()
                },
                &Tensor::bhtd(&k, [1, 2, 4, 8]).unwrap(),
                &Tensor::bhtd(&k, [1, 2, 4, 8]).unwrap(),
                &Tensor::bhtd(&k, [1, 2, 4, 8]).unwrap(),
                &mut TensorMut::bhtd(&mut o[..64], [1, 2, 4, 8]).unwrap(),
                None,
            )
            .unwrap_err();
        assert_eq!(err.status, octattn_sys::OCTATTN_ERROR_INVALID_SHAPE);
    }

    #[test]
    fn threads_targets_and_a_broadcast_mask() {
        let mut ctx = Context::new().unwrap();
        ctx.set_threads(1).unwrap();
        assert_eq!(ctx.threads(), 1);
        assert!(ctx.set_threads(-1).is_err());
        ctx.set_target(Backend::Xsimd, Target::Sse2).unwrap();
        let x = data(2 * 4 * 8, 7);
        let allow = [true, false, true, true]; // key 1 masked for every row
        let opts = Options {
            mask: Some(MaskTensor::new(&allow, [1, 2, 4, 4], [0, 0, 0, 1]).unwrap()),
            ..Options::default()
        };
        let mut o = vec![0.0f32; x.len()];
        let xt = Tensor::bhtd(&x, [1, 2, 4, 8]).unwrap();
        ctx.attention(
            &opts,
            &xt,
            &xt,
            &xt,
            &mut TensorMut::bhtd(&mut o, [1, 2, 4, 8]).unwrap(),
            None,
        )
        .unwrap();
        let run = ctx.last_run().unwrap();
        assert_eq!(
            (run.backend.as_str(), run.target.as_str(), run.threads),
            ("xsimd", "sse2", 1)
        );
        // row 1 reads key 0 only (key 1 is masked): its output is v row 0
        for c in 0..8 {
            assert!((o[8 + c] - x[c]).abs() < 1e-6);
        }
    }

    #[test]
    fn padded_and_ragged_batches_give_each_sequence_its_own_bytes() {
        let (hq, hkv, t, d) = (4, 2, 12, 8);
        let (q, k, v) = (
            data(3 * hq * t * d, 21),
            data(3 * hkv * t * d, 22),
            data(3 * hkv * t * d, 23),
        );
        let mut ctx = Context::new().unwrap();
        // One call on contiguous [b, H, n, d] data: its status and its output (filled with
        // 7 before the call).
        let mut attend = |opts: &Options, q: &[f32], k: &[f32], v: &[f32], b: usize, n: usize| {
            let mut o = vec![7.0f32; q.len()];
            let r = ctx.attention(
                opts,
                &Tensor::bhtd(q, [b, hq, n, d]).unwrap(),
                &Tensor::bhtd(k, [b, hkv, n, d]).unwrap(),
                &Tensor::bhtd(v, [b, hkv, n, d]).unwrap(),
                &mut TensorMut::bhtd(&mut o, [b, hq, n, d]).unwrap(),
                None,
            );
            (r, o)
        };
        // Rows [a, e) of batch entry b of [_, h, t, d] data, every head.
        let cut = |x: &[f32], h: usize, b: usize, a: usize, e: usize| -> Vec<f32> {
            (0..h)
                .flat_map(|hh| x[((b * h + hh) * t + a) * d..((b * h + hh) * t + e) * d].to_vec())
                .collect()
        };
        // Left padding: sequence b's tokens are rows starts[b].. of batch entry b.
        let (starts, lens) = ([0i64, 5, 9], [12i64, 7, 3]);
        let opts = Options {
            kv_starts: Some(&starts),
            kv_lens: Some(&lens),
            ..Options::default()
        };
        let (r, o) = attend(&opts, &q, &k, &v, 3, t);
        r.unwrap();
        for (b, &start) in starts.iter().enumerate() {
            let p = start as usize;
            let (qb, kb, vb) = (
                cut(&q, hq, b, p, t),
                cut(&k, hkv, b, p, t),
                cut(&v, hkv, b, p, t),
            );
            let (r, own) = attend(&Options::default(), &qb, &kb, &vb, 1, t - p);
            r.unwrap();
            assert_eq!(cut(&o, hq, b, p, t), own, "sequence {b}");
            assert!(
                cut(&o, hq, b, 0, p).iter().all(|&x| x == 0.0),
                "padded rows are zeros"
            );
        }
        // Ragged: the same three sequences packed along the rows of batch entry 0.
        let cu = [0i64, 5, 6, 12];
        let opts = Options {
            cu_seqlens: Some((&cu, &cu)),
            ..Options::default()
        };
        let (qr, kr, vr) = (
            cut(&q, hq, 0, 0, t),
            cut(&k, hkv, 0, 0, t),
            cut(&v, hkv, 0, 0, t),
        );
        let (r, or) = attend(&opts, &qr, &kr, &vr, 1, t);
        r.unwrap();
        for s in 0..3 {
            let (a, e) = (cu[s] as usize, cu[s + 1] as usize);
            let (qs, ks, vs) = (
                cut(&qr, hq, 0, a, e),
                cut(&kr, hkv, 0, a, e),
                cut(&vr, hkv, 0, a, e),
            );
            let (r, own) = attend(&Options::default(), &qs, &ks, &vs, 1, e - a);
            r.unwrap();
            assert_eq!(cut(&or, hq, 0, a, e), own, "sequence {s}");
        }
        // Arrays of the wrong length: an error before the call, nothing written.
        let short = [1i64, 2];
        let opts = Options {
            kv_lens: Some(&short),
            ..Options::default()
        };
        let (r, untouched) = attend(&opts, &q, &k, &v, 3, t);
        assert_eq!(r.unwrap_err().status, sys::OCTATTN_ERROR_INVALID_OPTION);
        assert!(untouched.iter().all(|&x| x == 7.0));
    }
    #[test]
    fn a_deepseek_fp8_latent_cache_is_the_f32_call_on_its_values() {
        // Latent rows stored as 656-byte rows, read as k (576 values) and v (the first
        // 512 of the same rows); their values by the header's definition.
        let (hq, n) = (8usize, 200usize);
        let latent = data(n * 576, 61);
        let q = data(hq * 576, 62);
        let mut ctx = Context::new().unwrap();
        let mut rows = vec![0u8; n * 656];
        let (shape, strides) = ([1, 1, n, 576], [n, n, 1, 1]);
        ctx.kv_store(
            &Tensor::bhtd(&latent, shape).unwrap(),
            &mut TensorMut::quantized(&mut rows, Quant::Fp8DsMla, shape, strides).unwrap(),
            None,
            0,
            None,
        )
        .unwrap();
        let e4m3 = |b: u8| -> f32 {
            let (e, m) = (((b >> 3) & 15) as i32, (b & 7) as f32);
            let x = if e == 0 { m * 2f32.powi(-9) } else { (8.0 + m) * 2f32.powi(e - 10) };
            if b & 0x80 != 0 { -x } else { x }
        };
        let mut values = vec![0f32; n * 576];
        for j in 0..n {
            let r = &rows[j * 656..(j + 1) * 656];
            for d in 0..576 {
                values[j * 576 + d] = if d < 512 {
                    let g = 512 + 4 * (d / 128);
                    f32::from_le_bytes([r[g], r[g + 1], r[g + 2], r[g + 3]]) * e4m3(r[d])
                } else {
                    let at = 528 + 2 * (d - 512);
                    f32::from_bits(u32::from(u16::from_le_bytes([r[at], r[at + 1]])) << 16)
                };
            }
        }
        let value_rows: Vec<f32> = (0..n * 512).map(|i| values[i / 512 * 576 + i % 512]).collect();
        let qt = Tensor::bhtd(&q, [1, hq, 1, 576]).unwrap();
        let (mut o, mut want) = (vec![0f32; hq * 512], vec![0f32; hq * 512]);
        ctx.attention(
            &Options::default(),
            &qt,
            &Tensor::quantized(&rows, Quant::Fp8DsMla, shape, strides).unwrap(),
            &Tensor::quantized(&rows, Quant::Fp8DsMla, [1, 1, n, 512], strides).unwrap(),
            &mut TensorMut::bhtd(&mut o, [1, hq, 1, 512]).unwrap(),
            None,
        )
        .unwrap();
        ctx.attention(
            &Options::default(),
            &qt,
            &Tensor::bhtd(&values, shape).unwrap(),
            &Tensor::bhtd(&value_rows, [1, 1, n, 512]).unwrap(),
            &mut TensorMut::bhtd(&mut want, [1, hq, 1, 512]).unwrap(),
            None,
        )
        .unwrap();
        assert_eq!(o, want);
        for (x, y) in values.iter().zip(&latent) {
            assert!((x - y).abs() <= y.abs() / 16.0 + 1e-2, "{x} {y}");
        }
    }
    #[test]
    fn an_int8_cache_is_the_f32_call_on_its_values() {
        let (b, hq, hkv, n, d, g) = (1usize, 4usize, 2usize, 300usize, 64usize, 32usize);
        let q = data(b * hq * n * d, 51);
        let k = data(b * hkv * n * d, 52);
        let mut ctx = Context::new().unwrap();
        let shape = [b, hkv, n, d];
        let mut kq = vec![0u8; k.len()];
        let mut ks = vec![0f32; k.len() / g];
        ctx.kv_store(
            &Tensor::bhtd(&k, shape).unwrap(),
            &mut TensorMut::quantized(&mut kq, Quant::Int8, shape, dense(shape)).unwrap(),
            Some(&mut TensorMut::bhtd(&mut ks, [b, hkv, n, d / g]).unwrap()),
            0,
            None,
        )
        .unwrap();
        let values: Vec<f32> = (0..k.len())
            .map(|i| ks[i / g] * (kq[i] as i8) as f32)
            .collect();
        let qt = Tensor::bhtd(&q, [b, hq, n, d]).unwrap();
        let mut o = vec![0f32; q.len()];
        let mut want = vec![0f32; q.len()];
        let opts = Options {
            k_scale: Some(Tensor::bhtd(&ks, [b, hkv, n, d / g]).unwrap()),
            ..Default::default()
        };
        let kt = Tensor::quantized(&kq, Quant::Int8, shape, dense(shape)).unwrap();
        let vt = Tensor::bhtd(&k, shape).unwrap();
        ctx.attention(
            &opts,
            &qt,
            &kt,
            &vt,
            &mut TensorMut::bhtd(&mut o, [b, hq, n, d]).unwrap(),
            None,
        )
        .unwrap();
        ctx.attention(
            &Options::default(),
            &qt,
            &Tensor::bhtd(&values, shape).unwrap(),
            &vt,
            &mut TensorMut::bhtd(&mut want, [b, hq, n, d]).unwrap(),
            None,
        )
        .unwrap();
        assert!(o.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits()));
        // Without its scales an int8 cache is refused.
        let mut o2 = vec![0f32; q.len()];
        let err = ctx.attention(
            &Options::default(),
            &qt,
            &kt,
            &vt,
            &mut TensorMut::bhtd(&mut o2, [b, hq, n, d]).unwrap(),
            None,
        );
        assert!(err.is_err());
    }
}
