"""octattn as a PyTorch operator: torch.ops.octattn.attention.

    import octattn.ops
    o, lse = torch.ops.octattn.attention(q, k, v, causal=True)

The tensors (q, k, v, then alibi_slopes, sinks, bias, mask) are positional or keyword,
the other options keyword-only. A torch.library custom op with a fake (meta) implementation, so torch.compile traces
it without a graph break (the real kernel runs eagerly inside the compiled graph). The
arguments are those of octattn.attention; it always returns (o, lse). Its autograd
formula is octattn_attention_backward (octattn.attention_backward): gradients of q, k,
v, the sinks and a bias tensor (summed over the dimensions it broadcasts), from the
gradients of o and of lse; ALiBi slopes and the mask are constants.
"""
from typing import Optional, Tuple

import torch

import octattn


@torch.library.custom_op("octattn::attention", mutates_args=(), device_types="cpu")
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              alibi_slopes: Optional[torch.Tensor] = None, sinks: Optional[torch.Tensor] = None,
              bias: Optional[torch.Tensor] = None, mask: Optional[torch.Tensor] = None, *,
              causal: bool = True, window: int = 0, stride: int = 0,
              scale: Optional[float] = None, q_start: Optional[int] = None, k_start: int = 0,
              chunk: int = 0, softcap: float = 0.0, layout: str = "bhtd",
              algorithm: str = "auto") -> Tuple[torch.Tensor, torch.Tensor]:
    return octattn.attention(q, k, v, causal=causal, window=window, stride=stride, scale=scale,
                             q_start=q_start, k_start=k_start, chunk=chunk, softcap=softcap,
                             alibi_slopes=alibi_slopes, sinks=sinks, bias=bias, mask=mask,
                             layout=layout, algorithm=algorithm, return_lse=True)


@attention.register_fake
def _(q, k, v, alibi_slopes=None, sinks=None, bias=None, mask=None, *, causal=True, window=0,
      stride=0, scale=None, q_start=None, k_start=0, chunk=0, softcap=0.0, layout="bhtd",
      algorithm="auto"):
    o = q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]))  # q's dtype
    if layout == "bthd":
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)
    return o, lse


@torch.library.custom_op("octattn::attention_backward", mutates_args=(), device_types="cpu")
def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       lse: torch.Tensor, dout: torch.Tensor, dlse: Optional[torch.Tensor],
                       alibi_slopes: Optional[torch.Tensor] = None,
                       sinks: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                       mask: Optional[torch.Tensor] = None, *, causal: bool = True,
                       window: int = 0, stride: int = 0, scale: Optional[float] = None,
                       q_start: Optional[int] = None, k_start: int = 0, chunk: int = 0,
                       softcap: float = 0.0, layout: str = "bhtd", algorithm: str = "auto",
                       return_dsinks: bool = False, return_dbias: bool = False
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                  torch.Tensor]:
    """(dq, dk, dv, dsinks, dbias) of octattn.attention_backward; dsinks and dbias are
    empty tensors unless asked for."""
    grads = octattn.attention_backward(
        q, k, v, o, lse, dout, dlse, causal=causal, window=window, stride=stride, scale=scale,
        q_start=q_start, k_start=k_start, chunk=chunk, softcap=softcap,
        alibi_slopes=alibi_slopes, sinks=sinks, bias=bias, mask=mask,
        return_dsinks=return_dsinks, return_dbias=return_dbias, algorithm=algorithm,
        layout=layout)
    rest = list(grads[3:])
    dsinks = rest.pop(0) if return_dsinks else q.new_empty((0,))
    dbias = rest.pop(0) if return_dbias else q.new_empty((0,))
    return grads[0], grads[1], grads[2], dsinks, dbias


@attention_backward.register_fake
def _(q, k, v, o, lse, dout, dlse, alibi_slopes=None, sinks=None, bias=None, mask=None, *,
      causal=True, window=0, stride=0, scale=None, q_start=None, k_start=0, chunk=0,
      softcap=0.0, layout="bhtd", algorithm="auto", return_dsinks=False, return_dbias=False):
    bthd = layout == "bthd"
    heads = q.shape[2] if bthd else q.shape[1]
    rows = q.shape[1] if bthd else q.shape[2]
    keys = k.shape[1] if bthd else k.shape[2]
    dsinks = q.new_empty((heads,) if return_dsinks else (0,))
    dbias = q.new_empty((q.shape[0], heads, rows, keys) if return_dbias else (0,))
    return q.new_empty(q.shape), q.new_empty(k.shape), q.new_empty(v.shape), dsinks, dbias


def _setup_context(ctx, inputs, keyword_only_inputs, output):
    q, k, v, alibi_slopes, sinks, bias, mask = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, alibi_slopes, sinks, bias, mask)
    ctx.options = dict(keyword_only_inputs)


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse, alibi_slopes, sinks, bias, mask = ctx.saved_tensors
    need = ctx.needs_input_grad
    want_dsinks = sinks is not None and need[4]
    want_dbias = bias is not None and need[5]
    opts = ctx.options
    if opts.get("algorithm", "auto") == "naive":
        opts = dict(opts, algorithm="auto")  # the backward has fused and reference only
    dq, dk, dv, dsinks, dbias = attention_backward(
        q, k, v, o, lse, grad_o, grad_lse, alibi_slopes, sinks, bias, mask,
        return_dsinks=want_dsinks, return_dbias=want_dbias, **opts)
    dsinks = dsinks.to(sinks.dtype) if want_dsinks else None
    if not want_dbias:
        dbias = None
    else:
        dims = [d for d in range(4) if bias.shape[d] == 1 and dbias.shape[d] != 1]
        if dims:
            dbias = dbias.sum(dim=dims, keepdim=True)
        dbias = dbias.to(bias.dtype)
    return dq, dk, dv, None, dsinks, dbias, None


attention.register_autograd(_backward, setup_context=_setup_context)
