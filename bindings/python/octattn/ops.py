"""octattn as PyTorch operators: torch.ops.octattn.attention and attention_backward.

    import octattn.ops
    o, lse = torch.ops.octattn.attention(q, k, v, causal=True)

The tensors (q, k, v, then alibi_slopes, sinks, bias, mask, a padded batch's q_starts,
kv_starts and kv_lens, and key lists' key_indices, key_counts, key_indices2 and
key_counts2, int32, with no gradient) are positional or keyword, the other options
keyword-only. The arguments are those of octattn.attention (not the ragged, paged
or quantized calls'); it always returns (o, lse). Its autograd formula is octattn_attention_backward
(octattn.attention_backward): gradients of q, k, v, the sinks and a bias tensor (summed
over the dimensions it broadcasts), from the gradients of o and of lse; ALiBi slopes and
the mask are constants. Fake (meta) kernels let torch.compile trace both operators
without a graph break (the real kernels run eagerly inside the compiled graph).

`native` says how the operators are registered. True: in C++ (the package's
_torch_ops-<torch version>.so, built with the package where torch was importable, for
that torch version), the schemas, kernels and autograd formula all native, so that an
eager call costs about as much as octattn.attention's. False (a package built without
torch, such as the manylinux wheel, or for another torch version: rebuild it with `pip
install --no-build-isolation` in this environment; or OCTATTN_TORCH_NATIVE=0 in the
environment): the same operators
through torch.library in Python, which costs tens of microseconds a call. Either way the
calls run on octattn's per-thread contexts (octattn.set_threads, set_target and last_run
apply), and a failed call raises RuntimeError (octattn.Error from the Python operators)
whose text names the status ("INVALID_SHAPE: ...").
"""
import ctypes
import os

import torch

from octattn import _octattn

__all__ = ["attention", "attention_backward", "native"]


def _native_path():
    """The package's native operators for the running torch, or None (also where the
    environment sets OCTATTN_TORCH_NATIVE=0: the Python operators, for tests)."""
    if os.environ.get("OCTATTN_TORCH_NATIVE") == "0":
        return None
    version = torch.__version__.split("+")[0]
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"_torch_ops-{version}.so")
    return path if os.path.exists(path) else None


_path = _native_path()
native = _path is not None
if native:
    torch.ops.load_library(_path)
    ctypes.CDLL(_path).octattn_torch_bind(ctypes.c_void_p(_octattn._operator_context_source()))


def _fake_attention(q, k, v, alibi_slopes=None, sinks=None, bias=None, mask=None,
                    q_starts=None, kv_starts=None, kv_lens=None, key_indices=None,
                    key_counts=None, key_indices2=None, key_counts2=None, *, causal=True,
                    window=0, stride=0, scale=None, q_start=None, k_start=0, chunk=0,
                    softcap=0.0, layout="bhtd", algorithm="auto"):
    o = q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))  # q's dtype
    if layout == "bthd":
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)
    return o, lse


def _fake_backward(q, k, v, o, lse, dout, dlse, alibi_slopes=None, sinks=None, bias=None,
                   mask=None, q_starts=None, kv_starts=None, kv_lens=None, key_indices=None,
                   key_counts=None, key_indices2=None, key_counts2=None, *, causal=True,
                   window=0, stride=0, scale=None, q_start=None, k_start=0, chunk=0,
                   softcap=0.0, layout="bhtd", algorithm="auto", return_dsinks=False,
                   return_dbias=False):
    bthd = layout == "bthd"
    heads = q.shape[2] if bthd else q.shape[1]
    rows = q.shape[1] if bthd else q.shape[2]
    keys = k.shape[1] if bthd else k.shape[2]
    f32 = torch.float32
    dsinks = q.new_empty((heads,) if return_dsinks else (0,), dtype=f32)
    dbias = q.new_empty((q.shape[0], heads, rows, keys) if return_dbias else (0,), dtype=f32)
    return (q.new_empty(q.shape, dtype=f32), q.new_empty(k.shape, dtype=f32),
            q.new_empty(v.shape, dtype=f32), dsinks, dbias)


if native:
    torch.library.register_fake("octattn::attention", _fake_attention)
    torch.library.register_fake("octattn::attention_backward", _fake_backward)
else:
    from . import _python_ops  # noqa: F401 (defines the same operators in Python)
    _python_ops.register(_fake_attention, _fake_backward)

attention = torch.ops.octattn.attention
attention_backward = torch.ops.octattn.attention_backward
