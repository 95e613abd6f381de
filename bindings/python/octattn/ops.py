"""octattn as a PyTorch operator: torch.ops.octattn.attention.

    import octattn.ops
    o, lse = torch.ops.octattn.attention(q, k, v, causal=True)

The tensors (q, k, v, then alibi_slopes, sinks, bias, mask) are positional or keyword,
the other options keyword-only. A torch.library custom op with a fake (meta) implementation, so torch.compile traces
it without a graph break (the real kernel runs eagerly inside the compiled graph). The
arguments are those of octattn.attention; it always returns (o, lse). Gradients are not
defined yet: calling it on tensors that require grad raises when backward runs.
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
    o = q.new_empty((q.shape[0], q.shape[1], q.shape[2], v.shape[3]), dtype=torch.float32)
    if layout == "bthd":
        lse = q.new_empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32)
    else:
        lse = q.new_empty((q.shape[0], q.shape[1], q.shape[2]), dtype=torch.float32)
    return o, lse
