//! One decode step: a new query token of 8 heads against a KV cache of 256 tokens and
//! 2 kv heads, in a [B, T, H, D] cache layout.
use octattn::{Context, Options, Tensor, TensorMut};

fn main() -> Result<(), octattn::Error> {
    let (hq, hkv, t, d) = (8, 2, 256, 64);
    let q: Vec<f32> = (0..hq * d).map(|i| (i % 7) as f32 * 0.1).collect();
    let cache: Vec<f32> = (0..t * hkv * d).map(|i| (i % 11) as f32 * 0.05).collect();
    let mut o = vec![0.0f32; hq * d];
    let mut ctx = Context::new()?;
    ctx.attention(
        &Options::default(),
        &Tensor::bthd(&q, [1, 1, hq, d])?,
        &Tensor::bthd(&cache, [1, t, hkv, d])?,
        &Tensor::bthd(&cache, [1, t, hkv, d])?,
        &mut TensorMut::bthd(&mut o, [1, 1, hq, d])?,
        None,
    )?;
    let run = ctx.last_run()?;
    println!(
        "octattn {}: o[0] = {:.6} ({} {} {}, {} threads)",
        octattn::version(),
        o[0],
        run.algorithm,
        run.backend,
        run.target,
        run.threads
    );
    Ok(())
}
