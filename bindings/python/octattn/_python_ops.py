"""torch.ops.octattn.attention and attention_backward defined through torch.library in
Python: what octattn.ops registers where the package has no native operators for the
running torch (see octattn.ops)."""
from typing import Optional, Tuple

import torch

import octattn


@torch.library.custom_op("octattn::attention", mutates_args=(), device_types="cpu")
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              alibi_slopes: Optional[torch.Tensor] = None, sinks: Optional[torch.Tensor] = None,
              bias: Optional[torch.Tensor] = None, mask: Optional[torch.Tensor] = None,
              q_starts: Optional[torch.Tensor] = None, kv_starts: Optional[torch.Tensor] = None,
              kv_lens: Optional[torch.Tensor] = None, key_indices: Optional[torch.Tensor] = None,
              key_counts: Optional[torch.Tensor] = None,
              key_indices2: Optional[torch.Tensor] = None,
              key_counts2: Optional[torch.Tensor] = None, *, causal: bool = True,
              window: int = 0, stride: int = 0, scale: Optional[float] = None,
              q_start: Optional[int] = None, k_start: int = 0, chunk: int = 0,
              softcap: float = 0.0, layout: str = "bhtd",
              algorithm: str = "auto") -> Tuple[torch.Tensor, torch.Tensor]:
    return octattn.attention(q, k, v, causal=causal, window=window, stride=stride, scale=scale,
                             q_start=q_start, k_start=k_start, chunk=chunk, softcap=softcap,
                             alibi_slopes=alibi_slopes, sinks=sinks, bias=bias, mask=mask,
                             layout=layout, algorithm=algorithm, return_lse=True,
                             q_starts=q_starts, kv_starts=kv_starts, kv_lens=kv_lens,
                             key_indices=key_indices, key_counts=key_counts,
                             key_indices2=key_indices2, key_counts2=key_counts2)


@torch.library.custom_op("octattn::attention_backward", mutates_args=(), device_types="cpu")
def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                       lse: torch.Tensor, dout: torch.Tensor, dlse: Optional[torch.Tensor],
                       alibi_slopes: Optional[torch.Tensor] = None,
                       sinks: Optional[torch.Tensor] = None, bias: Optional[torch.Tensor] = None,
                       mask: Optional[torch.Tensor] = None,
                       q_starts: Optional[torch.Tensor] = None,
                       kv_starts: Optional[torch.Tensor] = None,
                       kv_lens: Optional[torch.Tensor] = None,
                       key_indices: Optional[torch.Tensor] = None,
                       key_counts: Optional[torch.Tensor] = None,
                       key_indices2: Optional[torch.Tensor] = None,
                       key_counts2: Optional[torch.Tensor] = None, *, causal: bool = True,
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
        layout=layout, q_starts=q_starts, kv_starts=kv_starts, kv_lens=kv_lens,
        key_indices=key_indices, key_counts=key_counts, key_indices2=key_indices2,
        key_counts2=key_counts2)
    rest = list(grads[3:])
    dsinks = rest.pop(0) if return_dsinks else q.new_empty((0,), dtype=torch.float32)
    dbias = rest.pop(0) if return_dbias else q.new_empty((0,), dtype=torch.float32)
    return grads[0], grads[1], grads[2], dsinks, dbias


def _setup_context(ctx, inputs, keyword_only_inputs, output):
    q, k, v, alibi_slopes, sinks, bias, mask, *rest = inputs  # then sequences, key lists
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, alibi_slopes, sinks, bias, mask, *rest)
    ctx.options = dict(keyword_only_inputs)


def _backward(ctx, grad_o, grad_lse):
    q, k, v, o, lse, alibi_slopes, sinks, bias, mask, *rest = ctx.saved_tensors
    need = ctx.needs_input_grad
    want_dsinks = sinks is not None and need[4]
    want_dbias = bias is not None and need[5]
    opts = ctx.options
    if opts.get("algorithm", "auto") == "naive":
        opts = dict(opts, algorithm="auto")  # the backward has fused and reference only
    dq, dk, dv, dsinks, dbias = attention_backward(
        q, k, v, o, lse, grad_o, grad_lse, alibi_slopes, sinks, bias, mask, *rest,
        return_dsinks=want_dsinks, return_dbias=want_dbias, **opts)
    dsinks = dsinks.to(sinks.dtype) if want_dsinks else None
    if not want_dbias:
        dbias = None
    else:
        dims = [d for d in range(4) if bias.shape[d] == 1 and dbias.shape[d] != 1]
        if dims:
            dbias = dbias.sum(dim=dims, keepdim=True)
        dbias = dbias.to(bias.dtype)
    # The library's gradients are float32; autograd wants each in its input's dtype.
    return (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, dsinks, dbias) + (None,) * 8


def register(fake_attention, fake_backward):
    """The fake kernels (shared with the native operators) and the autograd formula."""
    attention.register_fake(fake_attention)
    attention_backward.register_fake(fake_backward)
    attention.register_autograd(_backward, setup_context=_setup_context)
