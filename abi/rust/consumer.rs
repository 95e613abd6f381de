//! Calls liboctattn from Rust through the C header's ABI, declared by hand (no crates):
//! the struct layouts and calling convention as a Rust runtime would bind them.
use std::ffi::CStr;
use std::os::raw::{c_char, c_void};

#[repr(C)]
#[derive(Clone, Copy)]
struct Tensor {
    data: *mut c_void,
    dtype: i32,
    reserved: i32,
    shape: [i64; 4],
    stride: [i64; 4],
}

#[repr(C)]
struct Options {
    struct_size: usize,
    causal: i32,
    algorithm: i32,
    window: i64,
    stride: i64,
    q_start: i64,
    scale: f32,
    reserved: i32,
    k_start: i64, // since 0.2
    chunk: i64,   // since 0.3
    softcap: f32,
    reserved2: i32,
    alibi_slopes: *const f32,
    sinks: *const f32,
    bias: *const Tensor,
    mask: *const Tensor,
    q_starts: *const i64, // since 0.6
    kv_starts: *const i64,
    kv_lens: *const i64,
    sequences: i64,
    cu_seqlens_q: *const i64,
    cu_seqlens_k: *const i64,
    block_table: *const i32,
    block_table_cols: i64,
    k_scale: *const Tensor,
    v_scale: *const Tensor,
    k_scale_rows: i64,
    v_scale_rows: i64,
    qk_precision: i32,
    reserved3: i32,
    tree: *const u8,
    tree_row_bytes: i64,
    tree_stride: i64,
    block_counts: *const Tensor,
    block_indices: *const Tensor,
    full_block_counts: *const Tensor,
    full_block_indices: *const Tensor,
    block_q: i64,
    block_kv: i64,
    key_scores: *mut Tensor,
    key_indices: *const Tensor,
    key_counts: *const Tensor,
    key_indices2: *const Tensor,
    key_counts2: *const Tensor,
}

#[link(name = "octattn")]
extern "C" {
    fn octattn_version_string() -> *const c_char;
    fn octattn_status_string(status: i32) -> *const c_char;
    fn octattn_context_create(out: *mut *mut c_void) -> i32;
    fn octattn_context_destroy(ctx: *mut c_void);
    fn octattn_context_last_error(ctx: *const c_void) -> *const c_char;
    fn octattn_attention_options_init(options: *mut Options) -> i32;
    fn octattn_context_last_run(ctx: *const c_void, info: *mut RunInfo) -> i32;
    fn octattn_tensor_init(t: *mut Tensor, data: *mut c_void, shape: *const i64, layout: i32) -> i32;
    fn octattn_attention(ctx: *mut c_void, options: *const Options, q: *const Tensor, k: *const Tensor,
                         v: *const Tensor, o: *mut Tensor, lse: *mut Tensor, weights: *mut Tensor,
                         workspace: *mut c_void, workspace_size: usize) -> i32;
}

fn text(p: *const c_char) -> String {
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[repr(C)]
struct RunInfo {
    struct_size: usize,
    algorithm: i32,
    backend: i32,
    target: i32,
    threads: i32,
    shared_kv_rows: i64,
}

// The layouts, pinned as in abi/consumer.c (0.2 appended k_start to the options, 0.3
// chunk and the score modifiers, 0.6 the sequences of padded, ragged and paged batches).
const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(size_of::<Tensor>() == 80);
    assert!(offset_of!(Tensor, data) == 0 && offset_of!(Tensor, dtype) == 8);
    assert!(offset_of!(Tensor, reserved) == 12 && offset_of!(Tensor, shape) == 16);
    assert!(offset_of!(Tensor, stride) == 48);
    assert!(size_of::<Options>() == 320 && offset_of!(Options, k_start) == 48);
    assert!(offset_of!(Options, key_scores) == 280);
    assert!(offset_of!(Options, key_indices) == 288 && offset_of!(Options, key_counts2) == 312);
    assert!(offset_of!(Options, tree) == 208 && offset_of!(Options, tree_row_bytes) == 216);
    assert!(offset_of!(Options, tree_stride) == 224);
    assert!(offset_of!(Options, block_counts) == 232 && offset_of!(Options, block_indices) == 240);
    assert!(offset_of!(Options, full_block_counts) == 248);
    assert!(offset_of!(Options, full_block_indices) == 256);
    assert!(offset_of!(Options, block_q) == 264 && offset_of!(Options, block_kv) == 272);
    assert!(offset_of!(Options, k_scale) == 168 && offset_of!(Options, v_scale) == 176);
    assert!(offset_of!(Options, k_scale_rows) == 184 && offset_of!(Options, v_scale_rows) == 192);
    assert!(offset_of!(Options, qk_precision) == 200 && offset_of!(Options, reserved3) == 204);
    assert!(offset_of!(Options, chunk) == 56 && offset_of!(Options, softcap) == 64);
    assert!(offset_of!(Options, reserved2) == 68 && offset_of!(Options, alibi_slopes) == 72);
    assert!(offset_of!(Options, sinks) == 80 && offset_of!(Options, bias) == 88);
    assert!(offset_of!(Options, mask) == 96 && offset_of!(Options, q_starts) == 104);
    assert!(offset_of!(Options, kv_starts) == 112 && offset_of!(Options, kv_lens) == 120);
    assert!(offset_of!(Options, sequences) == 128 && offset_of!(Options, cu_seqlens_q) == 136);
    assert!(offset_of!(Options, cu_seqlens_k) == 144 && offset_of!(Options, block_table) == 152);
    assert!(offset_of!(Options, block_table_cols) == 160);
    assert!(offset_of!(Options, struct_size) == 0 && offset_of!(Options, causal) == 8);
    assert!(offset_of!(Options, algorithm) == 12 && offset_of!(Options, window) == 16);
    assert!(offset_of!(Options, stride) == 24 && offset_of!(Options, q_start) == 32);
    assert!(offset_of!(Options, scale) == 40 && offset_of!(Options, reserved) == 44);
    assert!(size_of::<RunInfo>() == 32 && offset_of!(RunInfo, shared_kv_rows) == 24);
    assert!(offset_of!(RunInfo, struct_size) == 0 && offset_of!(RunInfo, algorithm) == 8);
    assert!(offset_of!(RunInfo, backend) == 12 && offset_of!(RunInfo, target) == 16);
    assert!(offset_of!(RunInfo, threads) == 20);
};

fn main() {
    let (t, d) = (6usize, 4usize);
    let mut bufs: Vec<Vec<f32>> = (0..4)
        .map(|n| (0..t * d).map(|i| if n == 3 { 0.0 } else { ((i * (n + 3)) as f32 * 0.37).sin() }).collect())
        .collect();
    let shape = [1i64, 1, t as i64, d as i64];
    let mut tensors = [Tensor { data: std::ptr::null_mut(), dtype: 0, reserved: 0, shape: [0; 4], stride: [0; 4] }; 4];
    for (ten, buf) in tensors.iter_mut().zip(bufs.iter_mut()) {
        assert_eq!(unsafe { octattn_tensor_init(ten, buf.as_mut_ptr() as *mut c_void, shape.as_ptr(), 0) }, 0);
    }
    let mut opts: Options = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { octattn_attention_options_init(&mut opts) }, 0);
    assert_eq!(opts.struct_size, std::mem::size_of::<Options>(), "option struct layout differs");
    let mut ctx: *mut c_void = std::ptr::null_mut();
    assert_eq!(unsafe { octattn_context_create(&mut ctx) }, 0);
    let (q, k, v) = (tensors[0], tensors[1], tensors[2]);
    let mut o = tensors[3];
    let st = unsafe {
        octattn_attention(ctx, &opts, &q, &k, &v, &mut o, std::ptr::null_mut(), std::ptr::null_mut(),
                          std::ptr::null_mut(), 0)
    };
    assert_eq!(st, 0, "{}", text(unsafe { octattn_context_last_error(ctx) }));
    // Each causal row, recomputed here in f64.
    for i in 0..t {
        let s: Vec<f64> = (0..=i)
            .map(|j| (0..d).map(|c| bufs[0][i * d + c] as f64 * bufs[1][j * d + c] as f64).sum::<f64>() / (d as f64).sqrt())
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let sum: f64 = e.iter().sum();
        for c in 0..d {
            let want: f64 = (0..=i).map(|j| e[j] * bufs[2][j * d + c] as f64).sum::<f64>() / sum;
            assert!((bufs[3][i * d + c] as f64 - want).abs() < 1e-5, "row {} dim {}", i, c);
        }
    }
    let mut info = RunInfo { struct_size: std::mem::size_of::<RunInfo>(), algorithm: 0, backend: 0, target: 0, threads: 0, shared_kv_rows: -1 };
    assert_eq!(unsafe { octattn_context_last_run(ctx, &mut info) }, 0);
    assert_eq!(info.algorithm, 3, "auto runs fused without weights");
    assert!(info.threads >= 1);
    assert_eq!(info.shared_kv_rows, 0, "a dense call shares no rows");
    // A bad option is a status and a message.
    opts.window = -1;
    let st = unsafe {
        octattn_attention(ctx, &opts, &q, &k, &v, &mut o, std::ptr::null_mut(), std::ptr::null_mut(),
                          std::ptr::null_mut(), 0)
    };
    assert_eq!(text(unsafe { octattn_status_string(st) }), "invalid option");
    assert!(text(unsafe { octattn_context_last_error(ctx) }).contains("window"));
    unsafe { octattn_context_destroy(ctx) };
    println!("rust consumer: ok, version {}", text(unsafe { octattn_version_string() }));
}
