//! Raw declarations of liboctattn's C API, as include/octattn.h declares them (version
//! 0.6: the struct layouts; its functions are those of 0.5). Every function is `unsafe`; the `octattn` crate is the safe API. The struct
//! layouts are checked at compile time against the numbers of the header's version, and
//! [`check_layouts`] compares them with the loaded library's own (octattn_struct_layout).
#![allow(non_camel_case_types)]
use std::os::raw::{c_char, c_void};

pub type octattn_status = i32;
pub type octattn_dtype = i32;
pub type octattn_algorithm = i32;
pub type octattn_backend = i32;
pub type octattn_target = i32;
pub type octattn_layout = i32;

pub const OCTATTN_OK: octattn_status = 0;
pub const OCTATTN_ERROR_NULL_POINTER: octattn_status = 1;
pub const OCTATTN_ERROR_INVALID_SHAPE: octattn_status = 2;
pub const OCTATTN_ERROR_INVALID_STRIDE: octattn_status = 3;
pub const OCTATTN_ERROR_OVERFLOW: octattn_status = 4;
pub const OCTATTN_ERROR_ALIASING: octattn_status = 5;
pub const OCTATTN_ERROR_INVALID_OPTION: octattn_status = 6;
pub const OCTATTN_ERROR_STRUCT_SIZE: octattn_status = 7;
pub const OCTATTN_ERROR_WORKSPACE_TOO_SMALL: octattn_status = 8;
pub const OCTATTN_ERROR_UNSUPPORTED: octattn_status = 9;
pub const OCTATTN_ERROR_OUT_OF_MEMORY: octattn_status = 10;
pub const OCTATTN_ERROR_MISALIGNED: octattn_status = 11;
pub const OCTATTN_ERROR_INTERNAL: octattn_status = 12;

pub const OCTATTN_DTYPE_F32: octattn_dtype = 1;
pub const OCTATTN_DTYPE_BF16: octattn_dtype = 2;
pub const OCTATTN_DTYPE_F16: octattn_dtype = 3;
pub const OCTATTN_DTYPE_BOOL: octattn_dtype = 4;
pub const OCTATTN_DTYPE_INT8: octattn_dtype = 5;
pub const OCTATTN_DTYPE_FP8_E4M3: octattn_dtype = 6;
pub const OCTATTN_DTYPE_FP8_E5M2: octattn_dtype = 7;
pub const OCTATTN_DTYPE_Q8_0: octattn_dtype = 8;
pub const OCTATTN_DTYPE_Q4_0: octattn_dtype = 9;
pub const OCTATTN_DTYPE_INT32: octattn_dtype = 10;
pub const OCTATTN_DTYPE_FP8_DS_MLA: octattn_dtype = 11;

pub const OCTATTN_ALGORITHM_AUTO: octattn_algorithm = 0;
pub const OCTATTN_ALGORITHM_REFERENCE: octattn_algorithm = 1;
pub const OCTATTN_ALGORITHM_NAIVE: octattn_algorithm = 2;
pub const OCTATTN_ALGORITHM_FUSED: octattn_algorithm = 3;
pub type octattn_qk_precision = i32;
pub const OCTATTN_QK_EXACT: octattn_qk_precision = 0;
pub const OCTATTN_QK_INT8: octattn_qk_precision = 1;

pub const OCTATTN_BACKEND_AUTO: octattn_backend = 0;
pub const OCTATTN_BACKEND_HIGHWAY: octattn_backend = 1;
pub const OCTATTN_BACKEND_XSIMD: octattn_backend = 2;

pub const OCTATTN_TARGET_AUTO: octattn_target = 0;
pub const OCTATTN_TARGET_SCALAR: octattn_target = 1;
pub const OCTATTN_TARGET_SSE2: octattn_target = 2;
pub const OCTATTN_TARGET_SSSE3: octattn_target = 3;
pub const OCTATTN_TARGET_SSE4: octattn_target = 4;
pub const OCTATTN_TARGET_AVX2: octattn_target = 5;
pub const OCTATTN_TARGET_AVX512: octattn_target = 6;
pub const OCTATTN_TARGET_NEON: octattn_target = 7;
pub const OCTATTN_TARGET_SVE2_128: octattn_target = 8;
pub const OCTATTN_TARGET_SVE_256: octattn_target = 9;
pub const OCTATTN_TARGET_AVX512_BF16: octattn_target = 10;
pub const OCTATTN_TARGET_AMX_BF16: octattn_target = 11;

pub const OCTATTN_LAYOUT_BHTD: octattn_layout = 0;
pub const OCTATTN_LAYOUT_BTHD: octattn_layout = 1;

pub const OCTATTN_Q_START_DEFAULT: i64 = i64::MIN;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct octattn_tensor {
    pub data: *mut c_void,
    pub dtype: octattn_dtype,
    pub reserved: i32,
    pub shape: [i64; 4],
    pub stride: [i64; 4],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct octattn_attention_options {
    pub struct_size: usize,
    pub causal: i32,
    pub algorithm: octattn_algorithm,
    pub window: i64,
    pub stride: i64,
    pub q_start: i64,
    pub scale: f32,
    pub reserved: i32,
    pub k_start: i64,
    pub chunk: i64,
    pub softcap: f32,
    pub reserved2: i32,
    pub alibi_slopes: *const f32,
    pub sinks: *const f32,
    pub bias: *const octattn_tensor,
    pub mask: *const octattn_tensor,
    // Since 0.6: the sequences of padded, ragged and paged batches.
    pub q_starts: *const i64,
    pub kv_starts: *const i64,
    pub kv_lens: *const i64,
    pub sequences: i64,
    pub cu_seqlens_q: *const i64,
    pub cu_seqlens_k: *const i64,
    pub block_table: *const i32,
    pub block_table_cols: i64,
    // since 0.11
    pub k_scale: *const octattn_tensor,
    pub v_scale: *const octattn_tensor,
    pub k_scale_rows: i64,
    pub v_scale_rows: i64,
    pub qk_precision: octattn_qk_precision,
    pub reserved3: i32,
    pub tree: *const u8,
    pub tree_row_bytes: i64,
    pub tree_stride: i64,
    pub block_counts: *const octattn_tensor,
    pub block_indices: *const octattn_tensor,
    pub full_block_counts: *const octattn_tensor,
    pub full_block_indices: *const octattn_tensor,
    pub block_q: i64,
    pub block_kv: i64,
    pub key_scores: *mut octattn_tensor,
    pub key_indices: *const octattn_tensor,
    pub key_counts: *const octattn_tensor,
    pub key_indices2: *const octattn_tensor,
    pub key_counts2: *const octattn_tensor,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct octattn_run_info {
    pub struct_size: usize,
    pub algorithm: octattn_algorithm,
    pub backend: octattn_backend,
    pub target: octattn_target,
    pub threads: i32,
    pub shared_kv_rows: i64,
}

/// Opaque context.
#[repr(C)]
pub struct octattn_context {
    _private: [u8; 0],
}

// The layouts of version 0.11 (fields are only ever appended).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<octattn_tensor>() == 80 && offset_of!(octattn_tensor, stride) == 48);
    assert!(size_of::<octattn_attention_options>() == 320);
    assert!(offset_of!(octattn_attention_options, key_scores) == 280);
    assert!(offset_of!(octattn_attention_options, key_counts2) == 312);
    assert!(offset_of!(octattn_attention_options, tree) == 208);
    assert!(offset_of!(octattn_attention_options, tree_stride) == 224);
    assert!(offset_of!(octattn_attention_options, block_counts) == 232);
    assert!(offset_of!(octattn_attention_options, block_kv) == 272);
    assert!(offset_of!(octattn_attention_options, v_scale_rows) == 192);
    assert!(offset_of!(octattn_attention_options, qk_precision) == 200);
    assert!(offset_of!(octattn_attention_options, k_start) == 48);
    assert!(offset_of!(octattn_attention_options, mask) == 96);
    assert!(offset_of!(octattn_attention_options, block_table_cols) == 160);
    assert!(size_of::<octattn_run_info>() == 32);
    assert!(offset_of!(octattn_run_info, shared_kv_rows) == 24);
};

extern "C" {
    pub fn octattn_version_number() -> u32;
    pub fn octattn_version_string() -> *const c_char;
    pub fn octattn_status_string(status: octattn_status) -> *const c_char;
    pub fn octattn_struct_layout(
        type_: *const c_char,
        field: *const c_char,
        out: *mut usize,
    ) -> octattn_status;
    pub fn octattn_backend_name(backend: octattn_backend) -> *const c_char;
    pub fn octattn_target_name(target: octattn_target) -> *const c_char;
    pub fn octattn_algorithm_name(algorithm: octattn_algorithm) -> *const c_char;
    pub fn octattn_tensor_init(
        tensor: *mut octattn_tensor,
        data: *mut c_void,
        shape: *const i64,
        layout: octattn_layout,
    ) -> octattn_status;
    pub fn octattn_context_create(out: *mut *mut octattn_context) -> octattn_status;
    pub fn octattn_context_destroy(ctx: *mut octattn_context);
    pub fn octattn_context_set_threads(ctx: *mut octattn_context, threads: i32) -> octattn_status;
    pub fn octattn_context_get_threads(
        ctx: *const octattn_context,
        out: *mut i32,
    ) -> octattn_status;
    pub fn octattn_context_set_target(
        ctx: *mut octattn_context,
        backend: octattn_backend,
        target: octattn_target,
    ) -> octattn_status;
    pub fn octattn_context_set_memory_limit(
        ctx: *mut octattn_context,
        bytes: u64,
    ) -> octattn_status;
    pub fn octattn_context_last_error(ctx: *const octattn_context) -> *const c_char;
    pub fn octattn_context_last_run(
        ctx: *const octattn_context,
        info: *mut octattn_run_info,
    ) -> octattn_status;
    pub fn octattn_available_targets(
        backend: octattn_backend,
        targets: *mut octattn_target,
        capacity: usize,
        count: *mut usize,
    ) -> octattn_status;
    pub fn octattn_attention_options_init(
        options: *mut octattn_attention_options,
    ) -> octattn_status;
    /// Since 0.10: writes `struct_size` bytes only, whatever version declared the struct.
    pub fn octattn_attention_options_init_size(
        options: *mut octattn_attention_options,
        struct_size: usize,
    ) -> octattn_status;
    pub fn octattn_attention_workspace_size(
        ctx: *mut octattn_context,
        options: *const octattn_attention_options,
        q: *const octattn_tensor,
        k: *const octattn_tensor,
        v: *const octattn_tensor,
        o: *const octattn_tensor,
        lse: *const octattn_tensor,
        weights: *const octattn_tensor,
        bytes: *mut usize,
    ) -> octattn_status;
    pub fn octattn_attention(
        ctx: *mut octattn_context,
        options: *const octattn_attention_options,
        q: *const octattn_tensor,
        k: *const octattn_tensor,
        v: *const octattn_tensor,
        o: *mut octattn_tensor,
        lse: *mut octattn_tensor,
        weights: *mut octattn_tensor,
        workspace: *mut c_void,
        workspace_size: usize,
    ) -> octattn_status;
    /// Since 0.5.
    pub fn octattn_attention_backward(
        ctx: *mut octattn_context,
        options: *const octattn_attention_options,
        q: *const octattn_tensor,
        k: *const octattn_tensor,
        v: *const octattn_tensor,
        o: *const octattn_tensor,
        lse: *const octattn_tensor,
        dout: *const octattn_tensor,
        dlse: *const octattn_tensor,
        dq: *mut octattn_tensor,
        dk: *mut octattn_tensor,
        dv: *mut octattn_tensor,
        dsinks: *mut f32,
        dbias: *mut octattn_tensor,
        workspace: *mut c_void,
        workspace_size: usize,
    ) -> octattn_status;
    /// Since 0.5.
    pub fn octattn_attention_backward_workspace_size(
        ctx: *mut octattn_context,
        options: *const octattn_attention_options,
        q: *const octattn_tensor,
        k: *const octattn_tensor,
        v: *const octattn_tensor,
        o: *const octattn_tensor,
        lse: *const octattn_tensor,
        dout: *const octattn_tensor,
        dlse: *const octattn_tensor,
        dq: *const octattn_tensor,
        dk: *const octattn_tensor,
        dv: *const octattn_tensor,
        dsinks: *const f32,
        dbias: *const octattn_tensor,
        bytes: *mut usize,
    ) -> octattn_status;
    pub fn octattn_merge(
        ctx: *mut octattn_context,
        parts: usize,
        o_parts: *const octattn_tensor,
        lse_parts: *const octattn_tensor,
        o: *mut octattn_tensor,
        lse: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_kv_store(
        ctx: *mut octattn_context,
        src: *const octattn_tensor,
        dst: *mut octattn_tensor,
        scale: *mut octattn_tensor,
        scale_rows: i64,
        slots: *const i64,
    ) -> octattn_status;
    pub fn octattn_scores(
        ctx: *mut octattn_context,
        q: *const octattn_tensor,
        k: *const octattn_tensor,
        scores: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_scale(
        ctx: *mut octattn_context,
        scores: *mut octattn_tensor,
        scale: f32,
    ) -> octattn_status;
    pub fn octattn_mask(
        ctx: *mut octattn_context,
        options: *const octattn_attention_options,
        scores: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_modify_scores(
        ctx: *mut octattn_context,
        options: *const octattn_attention_options,
        scores: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_softmax(
        ctx: *mut octattn_context,
        scores: *mut octattn_tensor,
        lse: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_softmax_sinks(
        ctx: *mut octattn_context,
        scores: *mut octattn_tensor,
        sinks: *const f32,
        lse: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_weighted_sum(
        ctx: *mut octattn_context,
        weights: *const octattn_tensor,
        v: *const octattn_tensor,
        o: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_split_heads(
        ctx: *mut octattn_context,
        src: *const octattn_tensor,
        heads: i64,
        dst: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_merge_heads(
        ctx: *mut octattn_context,
        src: *const octattn_tensor,
        dst: *mut octattn_tensor,
    ) -> octattn_status;
    pub fn octattn_split_qkv(
        ctx: *mut octattn_context,
        src: *const octattn_tensor,
        q_heads: i64,
        kv_heads: i64,
        q: *mut octattn_tensor,
        k: *mut octattn_tensor,
        v: *mut octattn_tensor,
    ) -> octattn_status;
}

/// Compares these declarations' sizes and field offsets with the loaded library's own
/// (octattn_struct_layout): Err names the first difference.
pub fn check_layouts() -> Result<(), String> {
    use std::mem::{offset_of, size_of};
    type O = octattn_attention_options;
    type T = octattn_tensor;
    type R = octattn_run_info;
    let expected: &[(&str, Option<&str>, usize)] = &[
        ("octattn_tensor", None, size_of::<T>()),
        ("octattn_tensor", Some("data"), offset_of!(T, data)),
        ("octattn_tensor", Some("dtype"), offset_of!(T, dtype)),
        ("octattn_tensor", Some("reserved"), offset_of!(T, reserved)),
        ("octattn_tensor", Some("shape"), offset_of!(T, shape)),
        ("octattn_tensor", Some("stride"), offset_of!(T, stride)),
        ("octattn_attention_options", None, size_of::<O>()),
        (
            "octattn_attention_options",
            Some("struct_size"),
            offset_of!(O, struct_size),
        ),
        (
            "octattn_attention_options",
            Some("causal"),
            offset_of!(O, causal),
        ),
        (
            "octattn_attention_options",
            Some("algorithm"),
            offset_of!(O, algorithm),
        ),
        (
            "octattn_attention_options",
            Some("window"),
            offset_of!(O, window),
        ),
        (
            "octattn_attention_options",
            Some("stride"),
            offset_of!(O, stride),
        ),
        (
            "octattn_attention_options",
            Some("q_start"),
            offset_of!(O, q_start),
        ),
        (
            "octattn_attention_options",
            Some("scale"),
            offset_of!(O, scale),
        ),
        (
            "octattn_attention_options",
            Some("reserved"),
            offset_of!(O, reserved),
        ),
        (
            "octattn_attention_options",
            Some("k_start"),
            offset_of!(O, k_start),
        ),
        (
            "octattn_attention_options",
            Some("chunk"),
            offset_of!(O, chunk),
        ),
        (
            "octattn_attention_options",
            Some("softcap"),
            offset_of!(O, softcap),
        ),
        (
            "octattn_attention_options",
            Some("reserved2"),
            offset_of!(O, reserved2),
        ),
        (
            "octattn_attention_options",
            Some("alibi_slopes"),
            offset_of!(O, alibi_slopes),
        ),
        (
            "octattn_attention_options",
            Some("sinks"),
            offset_of!(O, sinks),
        ),
        (
            "octattn_attention_options",
            Some("bias"),
            offset_of!(O, bias),
        ),
        (
            "octattn_attention_options",
            Some("mask"),
            offset_of!(O, mask),
        ),
        (
            "octattn_attention_options",
            Some("q_starts"),
            offset_of!(O, q_starts),
        ),
        (
            "octattn_attention_options",
            Some("kv_starts"),
            offset_of!(O, kv_starts),
        ),
        (
            "octattn_attention_options",
            Some("kv_lens"),
            offset_of!(O, kv_lens),
        ),
        (
            "octattn_attention_options",
            Some("sequences"),
            offset_of!(O, sequences),
        ),
        (
            "octattn_attention_options",
            Some("cu_seqlens_q"),
            offset_of!(O, cu_seqlens_q),
        ),
        (
            "octattn_attention_options",
            Some("cu_seqlens_k"),
            offset_of!(O, cu_seqlens_k),
        ),
        (
            "octattn_attention_options",
            Some("block_table"),
            offset_of!(O, block_table),
        ),
        (
            "octattn_attention_options",
            Some("block_table_cols"),
            offset_of!(O, block_table_cols),
        ),
        (
            "octattn_attention_options",
            Some("k_scale"),
            offset_of!(O, k_scale),
        ),
        (
            "octattn_attention_options",
            Some("v_scale"),
            offset_of!(O, v_scale),
        ),
        (
            "octattn_attention_options",
            Some("k_scale_rows"),
            offset_of!(O, k_scale_rows),
        ),
        (
            "octattn_attention_options",
            Some("v_scale_rows"),
            offset_of!(O, v_scale_rows),
        ),
        (
            "octattn_attention_options",
            Some("qk_precision"),
            offset_of!(O, qk_precision),
        ),
        (
            "octattn_attention_options",
            Some("reserved3"),
            offset_of!(O, reserved3),
        ),
        (
            "octattn_attention_options",
            Some("tree"),
            offset_of!(O, tree),
        ),
        (
            "octattn_attention_options",
            Some("tree_row_bytes"),
            offset_of!(O, tree_row_bytes),
        ),
        (
            "octattn_attention_options",
            Some("tree_stride"),
            offset_of!(O, tree_stride),
        ),
        (
            "octattn_attention_options",
            Some("block_counts"),
            offset_of!(O, block_counts),
        ),
        (
            "octattn_attention_options",
            Some("block_indices"),
            offset_of!(O, block_indices),
        ),
        (
            "octattn_attention_options",
            Some("full_block_counts"),
            offset_of!(O, full_block_counts),
        ),
        (
            "octattn_attention_options",
            Some("full_block_indices"),
            offset_of!(O, full_block_indices),
        ),
        (
            "octattn_attention_options",
            Some("block_q"),
            offset_of!(O, block_q),
        ),
        (
            "octattn_attention_options",
            Some("block_kv"),
            offset_of!(O, block_kv),
        ),
        (
            "octattn_attention_options",
            Some("key_scores"),
            offset_of!(O, key_scores),
        ),
        (
            "octattn_attention_options",
            Some("key_indices"),
            offset_of!(O, key_indices),
        ),
        (
            "octattn_attention_options",
            Some("key_counts"),
            offset_of!(O, key_counts),
        ),
        (
            "octattn_attention_options",
            Some("key_indices2"),
            offset_of!(O, key_indices2),
        ),
        (
            "octattn_attention_options",
            Some("key_counts2"),
            offset_of!(O, key_counts2),
        ),
        ("octattn_run_info", None, size_of::<R>()),
        (
            "octattn_run_info",
            Some("struct_size"),
            offset_of!(R, struct_size),
        ),
        (
            "octattn_run_info",
            Some("algorithm"),
            offset_of!(R, algorithm),
        ),
        ("octattn_run_info", Some("backend"), offset_of!(R, backend)),
        ("octattn_run_info", Some("target"), offset_of!(R, target)),
        ("octattn_run_info", Some("threads"), offset_of!(R, threads)),
        (
            "octattn_run_info",
            Some("shared_kv_rows"),
            offset_of!(R, shared_kv_rows),
        ),
    ];
    for &(ty, field, want) in expected {
        let ty_c = std::ffi::CString::new(ty).unwrap();
        let field_c = field.map(|f| std::ffi::CString::new(f).unwrap());
        let mut got = 0usize;
        let status = unsafe {
            octattn_struct_layout(
                ty_c.as_ptr(),
                field_c.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
                &mut got,
            )
        };
        let what = format!("{ty}{}", field.map(|f| format!(".{f}")).unwrap_or_default());
        if status != OCTATTN_OK {
            return Err(format!(
                "the library does not know {what} (status {status})"
            ));
        }
        if got != want {
            return Err(format!(
                "{what}: {got} in the library, {want} in octattn-sys"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn layouts_match_the_library() {
        super::check_layouts().unwrap();
    }
}
