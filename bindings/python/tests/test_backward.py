"""The backward from Python: octattn.attention_backward and the autograd formula of
torch.ops.octattn.attention against float64 torch autograd of the explicit math, finite
differences, opcheck, layouts, and a small GPT trained against PyTorch's SDPA."""
import math

import pytest

import octattn

torch = pytest.importorskip("torch")
import octattn.ops  # noqa: E402,F401

import train_gpt  # noqa: E402


def math_attention(q, k, v, *, causal=True, window=0, softcap=0.0, alibi_slopes=None,
                   sinks=None, bias=None, mask=None):
    """include/octattn.h's SEMANTICS as differentiable torch ops: (o, lse)."""
    B, Hq, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = q @ k.transpose(-2, -1) / math.sqrt(D)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    qp = (Tk - Tq + torch.arange(Tq)).unsqueeze(1)
    kp = torch.arange(Tk).unsqueeze(0)
    if alibi_slopes is not None:
        s = s + alibi_slopes.view(1, Hq, 1, 1) * (kp - qp).to(s.dtype)
    if bias is not None:
        s = s + bias
    allowed = torch.ones(Tq, Tk, dtype=torch.bool)
    if causal:
        allowed = (qp - kp) >= 0
        if window:
            allowed &= (qp - kp) < window
    allowed = allowed.view(1, 1, Tq, Tk).expand(B, Hq, Tq, Tk)
    if mask is not None:
        allowed = allowed & mask
    s = s.masked_fill(~allowed, float("-inf"))
    if sinks is not None:
        s = torch.cat([s, sinks.view(1, Hq, 1, 1).expand(B, Hq, Tq, 1)], dim=-1)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)
    if sinks is not None:
        p = p[..., :-1]
    return p @ v, lse


def problem(seed, B=2, Hq=4, Hkv=2, Tq=37, Tk=37, D=16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, Tq, D, generator=g)
    k = torch.randn(B, Hkv, Tk, D, generator=g)
    v = torch.randn(B, Hkv, Tk, D, generator=g)
    return q, k, v, g


@pytest.mark.parametrize("mods", [
    {}, {"window": 9}, {"softcap": 1.5}, {"alibi": True}, {"sinks": True}, {"bias": True},
    {"bias_broadcast": True}, {"mask": True},
    {"softcap": 2.0, "alibi": True, "sinks": True, "bias": True, "mask": True},
])
def test_autograd_matches_float64_torch(mods):
    q, k, v, g = problem(3)
    B, Hq, Tq, Tk = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    extra = {}
    if mods.get("alibi"):
        extra["alibi_slopes"] = torch.tensor([2.0 ** (-8 * (h + 1) / Hq) for h in range(Hq)])
    if mods.get("sinks"):
        extra["sinks"] = torch.randn(Hq, generator=g)
    if mods.get("bias"):
        extra["bias"] = torch.randn(B, Hq, Tq, Tk, generator=g)
    if mods.get("bias_broadcast"):
        extra["bias"] = torch.randn(1, Hq, 1, Tk, generator=g)
    if mods.get("mask"):
        extra["mask"] = torch.rand(B, Hq, Tq, Tk, generator=g) > 0.25
        extra["mask"][..., 0] = True  # no empty rows: the math's softmax would be NaN there
    kw = {"window": mods.get("window", 0), "softcap": mods.get("softcap", 0.0)}
    leaves = {"q": q, "k": k, "v": v}
    for name in ("sinks", "bias"):
        if name in extra:
            leaves[name] = extra[name]
    dout = torch.randn(B, Hq, Tq, v.shape[3], generator=g)
    dlse = torch.randn(B, Hq, Tq, generator=g)

    ours = {n: t.clone().requires_grad_(True) for n, t in leaves.items()}
    args = {**extra, **{n: ours[n] for n in ("sinks", "bias") if n in ours}}
    o, lse = torch.ops.octattn.attention(ours["q"], ours["k"], ours["v"], **args, **kw)
    ((o * dout).sum() + (lse * dlse).sum()).backward()

    ref = {n: t.double().clone().requires_grad_(True) for n, t in leaves.items()}
    rargs = {n: (t.double() if t.dtype == torch.float32 else t) for n, t in extra.items()}
    rargs.update({n: ref[n] for n in ("sinks", "bias") if n in ref})
    ro, rlse = math_attention(ref["q"], ref["k"], ref["v"], **rargs, **kw)
    ((ro * dout.double()).sum() + (rlse * dlse.double()).sum()).backward()

    assert torch.allclose(o.double(), ro, atol=1e-5)
    for n in leaves:
        want = ref[n].grad
        got = ours[n].grad
        assert got is not None and got.shape == want.shape, n
        tol = 2e-5 * max(1.0, want.abs().max().item())
        err = (got.double() - want).abs().max().item()
        assert err <= tol, (n, err, tol)


def test_finite_differences():
    # L = sum(dout * o) + sum(dlse * lse) by central differences of the float32 forward.
    q, k, v, g = problem(7, B=1, Hq=2, Hkv=1, Tq=5, Tk=6, D=4)
    sinks = torch.randn(2, generator=g)
    bias = torch.randn(1, 2, 5, 6, generator=g)
    kw = {"softcap": 1.3, "window": 4}
    dout = torch.randn(1, 2, 5, 4, generator=g)
    dlse = torch.randn(1, 2, 5, generator=g)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, sinks, bias)]
    o, lse = torch.ops.octattn.attention(leaves[0], leaves[1], leaves[2], sinks=leaves[3],
                                         bias=leaves[4], **kw)
    ((o * dout).sum() + (lse * dlse).sum()).backward()

    def loss(tensors):
        with torch.no_grad():
            o, lse = torch.ops.octattn.attention(tensors[0], tensors[1], tensors[2],
                                                 sinks=tensors[3], bias=tensors[4], **kw)
            return (o.double() * dout).sum().item() + (lse.double() * dlse).sum().item()

    h = 1e-2
    for i, leaf in enumerate(leaves):
        base = [t.detach().clone() for t in leaves]
        flat = base[i].view(-1)
        for e in range(flat.numel()):
            keep = flat[e].item()
            flat[e] = keep + h
            up = loss(base)
            flat[e] = keep - h
            down = loss(base)
            flat[e] = keep
            numeric = (up - down) / (2 * h)
            analytic = leaf.grad.view(-1)[e].item()
            assert abs(numeric - analytic) <= 2e-4 + 2e-3 * abs(analytic), (i, e, numeric,
                                                                          analytic)


def test_layouts_give_the_same_bytes():
    q, k, v, g = problem(11)
    dout = torch.randn(2, 4, 37, 16, generator=g)
    o, lse = octattn.attention(q, k, v, window=7, return_lse=True)
    base = octattn.attention_backward(q, k, v, o, lse, dout, window=7)
    t = [x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v, o, dout)]
    other = octattn.attention_backward(t[0], t[1], t[2], t[3], lse, t[4], window=7)
    bthd = [x.transpose(1, 2).contiguous() for x in (q, k, v, o, dout)]
    third = octattn.attention_backward(bthd[0], bthd[1], bthd[2], bthd[3], lse, bthd[4],
                                       window=7, layout="bthd")
    for a, b, c in zip(base, other, third):
        assert torch.equal(a, b)
        assert torch.equal(a, c.transpose(1, 2))


def test_numpy_and_reference_algorithm():
    np = pytest.importorskip("numpy")
    q, k, v, g = problem(13)
    dout = torch.randn(2, 4, 37, 16, generator=g)
    o, lse = octattn.attention(q.numpy(), k.numpy(), v.numpy(), return_lse=True)
    fused = octattn.attention_backward(q.numpy(), k.numpy(), v.numpy(), o, lse, dout.numpy())
    ref = octattn.attention_backward(q.numpy(), k.numpy(), v.numpy(), o, lse, dout.numpy(),
                                     algorithm="reference")
    for a, b in zip(fused, ref):
        assert isinstance(a, np.ndarray)
        assert np.abs(a - b).max() <= 1e-4


def test_errors():
    q, k, v, g = problem(17)
    o, lse = octattn.attention(q, k, v, return_lse=True)
    with pytest.raises(octattn.Error) as e:
        octattn.attention_backward(q, k, v, o, lse, o[:, :, :5], causal=True)
    assert e.value.status_name == "INVALID_SHAPE"
    with pytest.raises(octattn.Error) as e:
        octattn.attention_backward(q, k, v, o, lse, o, return_dsinks=True)
    assert e.value.status_name == "INVALID_OPTION"
    with pytest.raises(octattn.Error) as e:
        octattn.attention_backward(q, k, v, o, lse, o, algorithm="naive")
    assert e.value.status_name == "UNSUPPORTED"


def test_opcheck_with_gradients():
    q, k, v, g = problem(19, B=1, Tq=9, Tk=9)
    args = tuple(t.requires_grad_(True) for t in (q, k, v))
    torch.library.opcheck(torch.ops.octattn.attention.default, args, {"causal": True},
                          test_utils=("test_schema", "test_autograd_registration",
                                      "test_faketensor", "test_aot_dispatch_dynamic"))


def test_training_matches_sdpa():
    # Two GPTs from the same seed, 60 AdamW steps: the loss curves stay together (their
    # difference is f32 rounding, amplified by training) and the loss falls.
    # One thread: a model this small gains nothing from more, and torch's threads wait
    # spinning on a core another process holds.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ours = train_gpt.train("octattn", steps=60)
        theirs = train_gpt.train("sdpa", steps=60)
    finally:
        torch.set_num_threads(threads)
    diff = max(abs(a - b) for a, b in zip(ours, theirs))
    assert diff <= 1e-3, diff
    assert ours[-1] < ours[0] - 1.0


# Every tensor the operators give for one problem (o, lse and the gradients of q, k, v,
# the sinks and a broadcast bias), printed as lists: run in this process and in one whose
# operators are the Python ones.
_PARITY = r"""
import json, sys, torch, octattn.ops
g = torch.Generator().manual_seed(23)
q, k, v = (torch.randn(2, h, 7, 8, generator=g) for h in (4, 2, 2))
sinks, bias = torch.randn(4, generator=g), torch.randn(1, 4, 7, 7, generator=g)
leaves = [t.requires_grad_(True) for t in (q, k, v, sinks, bias)]
o, lse = torch.ops.octattn.attention(q, k, v, None, sinks, bias, window=5, softcap=2.0)
(o.square().sum() + lse.sum()).backward()
out = [o, lse] + [t.grad for t in leaves]
torch.library.opcheck(torch.ops.octattn.attention.default, (q, k, v, None, sinks, bias),
                      {"window": 5}, test_utils=("test_schema", "test_autograd_registration",
                                                 "test_faketensor", "test_aot_dispatch_dynamic"))
print(json.dumps({"native": octattn.ops.native, "out": [t.tolist() for t in out]}))
"""


def _parity(native):
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ)
    env.pop("OCTATTN_TORCH_NATIVE", None)
    if not native:
        env["OCTATTN_TORCH_NATIVE"] = "0"
    r = subprocess.run([sys.executable, "-c", _PARITY], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_native_and_python_operators_give_the_same_bytes():
    """The operators registered in C++ and in Python (OCTATTN_TORCH_NATIVE=0) compute o,
    lse and every gradient alike (the same library calls), and both pass opcheck. Where
    the package was built with torch (OCTATTN_TEST_TORCH_NATIVE=1 in CI), the native ones
    must be the ones loaded."""
    import os
    native, python = _parity(True), _parity(False)
    assert python["native"] is False
    if os.environ.get("OCTATTN_TEST_TORCH_NATIVE") == "1":
        assert native["native"] is True and octattn.ops.native
    assert native["out"] == python["out"]


def test_operator_errors_name_the_status():
    q, k, v, g = problem(29, B=1, Tq=4, Tk=4)
    with pytest.raises(RuntimeError, match="INVALID_SHAPE"):
        torch.ops.octattn.attention(q[..., :3], k, v)
    with pytest.raises(ValueError, match="layout"):
        torch.ops.octattn.attention(q, k, v, layout="tbhd")
    with pytest.raises(ValueError, match="algorithm"):
        torch.ops.octattn.attention(q, k, v, algorithm="fast")
    with pytest.raises(TypeError):
        torch.ops.octattn.attention(q.double(), k, v)
    with pytest.raises(ValueError, match="sinks"):
        torch.ops.octattn.attention(q, k, v, None, torch.zeros(3))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_tensors_train_through_the_operator(dtype):
    """bf16 and f16 q, k, v: autograd's gradients are the library's float32 gradients of
    the 16-bit tensors rounded to each input's dtype; those are the float32 call's on the
    widened values (f16 bit for bit; bf16 within the rounding of the avx512_bf16 rule,
    where that target runs)."""
    q, k, v, g = problem(30, B=2, Tq=9, Tk=11)
    leaves = [t.to(dtype).requires_grad_(True) for t in (q, k, v)]
    o, lse = torch.ops.octattn.attention(*leaves, window=5)
    dout = torch.randn(o.shape, generator=g).to(dtype)
    (o.float() * dout.float()).sum().backward()
    direct = octattn.attention_backward(*[t.detach() for t in leaves], o.detach(), lse.detach(),
                                        dout, window=5)
    for leaf, d in zip(leaves, direct):
        assert d.dtype == torch.float32
        assert leaf.grad.dtype == dtype and torch.equal(leaf.grad, d.to(dtype))
    wide = octattn.attention_backward(*[t.detach().float() for t in leaves], o.detach().float(),
                                      lse.detach(), dout.float(), window=5)
    pairs = dtype == torch.bfloat16 and octattn.last_run()["target"] in ("avx512_bf16", "amx_bf16")
    for a, b in zip(direct, wide):
        if not pairs:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=0, atol=2**-6 * float(b.abs().max()))


def test_operators_run_on_the_package_contexts():
    """octattn.set_target applies to the operators, and last_run reports their calls."""
    q, k, v, g = problem(31, B=1, Tq=4, Tk=4)
    targets = octattn.available_targets("xsimd")
    octattn.set_target("xsimd", targets[-1])
    try:
        torch.ops.octattn.attention(q, k, v)
        run = octattn.last_run()
        assert run["backend"] == "xsimd" and run["target"] == targets[-1], run
    finally:
        octattn.set_target()


def test_padded_batch_through_the_operator_gives_each_sequence_its_own_bytes():
    """kv_starts and kv_lens (a left-padded batch, as transformers pads) through the
    operator: o, lse and the gradients of each sequence are the bytes of the operator on
    that sequence's rows alone, and padding key rows get zero gradients."""
    q, k, v, g = problem(37, B=3, Tq=8, Tk=8)
    starts, lens = torch.tensor([0, 3, 6]), torch.tensor([8, 5, 2])
    dout = torch.randn(3, 4, 8, 16, generator=g)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    o, lse = torch.ops.octattn.attention(*leaves, window=4, kv_starts=starts, kv_lens=lens,
                                         q_starts=-starts)
    (o * dout).sum().backward()
    for s in range(3):
        a, n = int(starts[s]), int(lens[s])
        one = [q[s:s + 1].clone(), k[s:s + 1, :, a:a + n].clone(), v[s:s + 1, :, a:a + n].clone()]
        one = [t.requires_grad_(True) for t in one]
        o1, lse1 = torch.ops.octattn.attention(*one, window=4, q_start=-a)
        (o1 * dout[s:s + 1]).sum().backward()
        assert torch.equal(o[s:s + 1], o1) and torch.equal(lse[s:s + 1], lse1), s
        assert torch.equal(leaves[0].grad[s:s + 1], one[0].grad), s
        for i in (1, 2):
            assert torch.equal(leaves[i].grad[s:s + 1, :, a:a + n], one[i].grad), (s, i)
            assert not leaves[i].grad[s, :, :a].any() and not leaves[i].grad[s, :, a + n:].any()
    with pytest.raises(ValueError, match="kv_lens"):
        torch.ops.octattn.attention(q, k, v, kv_lens=lens[:2])
    with pytest.raises(TypeError, match="kv_starts"):
        torch.ops.octattn.attention(q, k, v, kv_starts=starts.int())
