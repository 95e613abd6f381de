"""Attention over a sequence sharded across processes, on torch.distributed (torch only).

    import octattn.distributed as od
    q, k, v = (od.shard(x, group) for x in (q, k, v))    # this rank's rows of [B, H, T, D]
    o = od.ring_attention(q, k, v, group)                 # causal; autograd works through it

Two ways to spread one attention call over the ranks of a process group:

- ring_attention: every rank keeps its query rows; the K/V shards travel around the ring
  (rank r sends to r + 1, receives from r - 1; the next shard's send and receive are
  posted before the current one is computed), each (query chunk, key chunk) pair is one
  octattn call with q_start and k_start at the chunks' positions, and the partials are
  merged by LSE (octattn_merge). The backward runs octattn's fused backward on the same
  pairs with the merged o and lse, the dK/dV accumulators travelling with the shards.
- all_to_all_attention (Ulysses): heads scattered and the sequence gathered by one
  all-to-all, one local octattn call over the whole sequence for H / P heads, and back;
  the backward the same way round. Query and kv heads must divide by the group's size.

The split (`split`): "zigzag" (default) cuts the T tokens into 2P chunks of ceil(T / 2P)
rows and gives rank r chunks r and 2P - 1 - r, so that every rank has as much causal work
as the others; "contiguous" gives rank r the r-th of P chunks of ceil(T / P) rows. A
rank's tensors hold its chunks' rows one after the other (shard() cuts them, gather()
puts a result back together, positions() says which tokens a rank holds). The ring's
split, the order of its steps and pairs, the pairs it skips and the order of its merges
are those of the C tool octattn-ring: the two give the same bytes for the same shards.

Every mask and modifier a shard can express through positions works: causal or not,
window, stride, chunk, sinks (merged once per row: with the diagonal pair), softcap,
ALiBi. Gradients: q, k, v and sinks; a rank's dsinks is its rows' share (sum it over the
ranks as any replicated parameter's gradient). A call that fails on one rank fails on
every rank (octattn.Error or ValueError naming the rank); a rank that waits longer than
`timeout` seconds for a peer raises RuntimeError instead of hanging.
"""
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import octattn
from octattn import _ctx_for

__all__ = ["ring_attention", "all_to_all_attention", "flash_attn_func", "shard", "gather",
           "positions", "chunks", "last_stats"]

_stats = {}


def last_stats():
    """What the last ring_attention or all_to_all_attention forward or backward of this
    process spent: kind, seconds in all, wait_seconds (blocked on peers: the ring's
    shard exchanges not hidden under compute, or the all-to-alls), steps."""
    return dict(_stats)


def chunks(seq_len, ranks, rank, split="zigzag"):
    """The [begin, end) token ranges rank `rank` of `ranks` holds, in the order its rows
    hold them (zigzag: chunks rank and 2P - 1 - rank of ceil(T / 2P) rows; contiguous:
    chunk rank of ceil(T / P) rows; clipped to T)."""
    if split == "zigzag":
        c = -(-seq_len // (2 * ranks))
        return [(min(seq_len, i * c), min(seq_len, (i + 1) * c))
                for i in (rank, 2 * ranks - 1 - rank)]
    if split == "contiguous":
        c = -(-seq_len // ranks)
        return [(min(seq_len, rank * c), min(seq_len, (rank + 1) * c))]
    raise ValueError(f"split is 'zigzag' or 'contiguous', not {split!r}")


def _group_info(group):
    if not dist.is_initialized():
        raise RuntimeError("octattn.distributed needs torch.distributed.init_process_group first")
    group = group if group is not None else dist.group.WORLD
    return group, dist.get_world_size(group), dist.get_rank(group)


def positions(seq_len, group=None, *, split="zigzag"):
    """The positions (int64) of the tokens this rank holds, in its rows' order: what a
    position embedding or RoPE of the local rows reads."""
    _, ranks, rank = _group_info(group)
    return torch.cat([torch.arange(b, e) for b, e in chunks(seq_len, ranks, rank, split)])


def shard(x, group=None, *, split="zigzag", dim=2):
    """This rank's rows of a whole-sequence tensor x (the sequence along `dim`: 2 for
    [B, H, T, D], 1 for [B, T, H, D]), a new contiguous tensor."""
    _, ranks, rank = _group_info(group)
    parts = [x.narrow(dim, b, e - b) for b, e in chunks(x.shape[dim], ranks, rank, split)]
    return torch.cat(parts, dim).contiguous()


def gather(x, group=None, *, split="zigzag", dim=2, seq_len=None):
    """The whole sequence from every rank's rows x (all ranks get it): shard's inverse."""
    group, ranks, rank = _group_info(group)
    seq_len = _seq_len(group, ranks, x.shape[dim], seq_len)
    sizes = [sum(e - b for b, e in chunks(seq_len, ranks, r, split)) for r in range(ranks)]
    # all_gather takes one size: every rank's rows padded to the largest count.
    shape = list(x.shape)
    shape[dim] = max(sizes)
    padded = x.new_zeros(shape)
    padded.narrow(dim, 0, x.shape[dim]).copy_(x)
    parts = [torch.empty_like(padded) for _ in range(ranks)]
    dist.all_gather(parts, padded, group=group)
    shape[dim] = seq_len
    out = x.new_empty(shape)
    for r in range(ranks):
        at = 0
        for b, e in chunks(seq_len, ranks, r, split):
            out.narrow(dim, b, e - b).copy_(parts[r].narrow(dim, at, e - b))
            at += e - b
    return out


def _seq_len(group, ranks, rows, seq_len):
    if seq_len is not None:
        return int(seq_len)
    n = torch.tensor([rows], dtype=torch.int64)
    dist.all_reduce(n, group=group)
    return int(n.item())


def _agree(group, error, what, timeout, known=False):
    """Raises on every rank if `error` (an exception or None) is set on any: the first
    failing rank's, as octattn.Error, ValueError or RuntimeError. known: every rank
    knows that one failed (the messages only are gathered)."""
    if not known:
        flag = torch.tensor([error is not None], dtype=torch.int64)
        _wait([dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group, async_op=True)],
              timeout, f"{what}: waiting for the other ranks")
        if not flag.item():
            return
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, _describe(error), group=group)
    _raise_first(everyone, lambda e: e, what)
    raise RuntimeError(f"{what}: a rank failed")  # (unreachable: one rank set its error)


def _wait(works, timeout, what):
    """Waits for the requests, at most `timeout` seconds each (None: the process group's
    own timeout); a request that times out or fails raises RuntimeError naming `what`."""
    for w in works:
        try:
            if timeout is None:
                w.wait()
            else:
                w.wait(timeout=timedelta(seconds=timeout))
        except RuntimeError as e:
            raise RuntimeError(f"{what}: {e}") from e


def _bhtd(x, layout):
    """x as a [B, H, T, D] view (bthd: transposed, no copy)."""
    return x if x is None or layout == "bhtd" else x.transpose(1, 2)


def _describe(error):
    if error is None:
        return None
    return (type(error).__name__, getattr(error, "status", None),
            getattr(error, "message", str(error)))


def _raise_first(everyone, pick, what):
    for r, e in enumerate(everyone):
        d = pick(e)
        if d is None:
            continue
        kind, status, message = d
        text = f"{what}: rank {r}: {message}"
        if kind == "Error" and status is not None:
            raise octattn.Error(status, text)
        if kind == "ValueError":
            raise ValueError(text)
        raise RuntimeError(f"{text} ({kind})")


class _Plan:
    """One call's split and options, and every rank's row counts (gathered once, so that
    a rank whose tensors do not match the split fails on every rank alike)."""

    def __init__(self, group, seq_len, split, opts, rows, error, timeout):
        self.group, self.ranks, self.rank = _group_info(group)
        self.split, self.opts = split, opts
        mine = torch.tensor(list(rows) + [error is not None], dtype=torch.int64)
        everyone = [torch.empty_like(mine) for _ in range(self.ranks)]
        _wait([dist.all_gather(everyone, mine, group=self.group, async_op=True)], timeout,
              f"{opts['what']}: rank {self.rank} waiting for the other ranks to start")
        if any(int(e[3]) for e in everyone):
            _agree(self.group, error, opts["what"], timeout, known=True)
        counts = [tuple(int(n) for n in e[:3]) for e in everyone]
        for r, c in enumerate(counts):
            if len(set(c)) != 1:
                raise ValueError(f"{opts['what']}: rank {r}: q, k and v hold {c[0]}, {c[1]} "
                                 f"and {c[2]} rows (each a rank's rows of one sequence)")
        self.seq_len = int(seq_len) if seq_len is not None else sum(c[0] for c in counts)
        for r, c in enumerate(counts):
            want = sum(e - b for b, e in chunks(self.seq_len, self.ranks, r, split))
            if c[0] != want:
                raise ValueError(
                    f"{opts['what']}: rank {r} holds {c[0]} rows, but with T = "
                    f"{self.seq_len} over {self.ranks} ranks ({split} split) it holds "
                    f"{want}: tokens {chunks(self.seq_len, self.ranks, r, split)}")
        self.mine = chunks(self.seq_len, self.ranks, self.rank, split)

    def theirs(self, owner):
        return chunks(self.seq_len, self.ranks, owner, self.split)

    def skip(self, qc, kc):
        """A pair with no allowed (query, key): none of its keys is in the past of its
        queries, or (no strided columns) all lie before every window, or before every
        query's chunk. The rule of the C tool, whose masks are causal without chunks."""
        o = self.opts
        if qc[1] == qc[0] or kc[1] == kc[0]:
            return True
        if not o["causal"]:
            return False
        if kc[0] >= qc[1]:
            return True
        if o["stride"] == 0 and o["window"] > 0 and kc[1] <= qc[0] - o["window"] + 1:
            return True
        return o["chunk"] > 0 and (kc[1] - 1) // o["chunk"] < qc[0] // o["chunk"]


def _rows(x, chunk_list, i):
    """Chunk i's rows of a [B, H, rows, D] (or [B, H, rows]) tensor holding chunk_list."""
    at = sum(e - b for b, e in chunk_list[:i])
    return x.narrow(2, at, chunk_list[i][1] - chunk_list[i][0])


def _exchange(plan, tensors, incoming, tag):
    """Posts the sends of `tensors` to the right neighbour and the receives of `incoming`
    from the left one (one tag each); returns the requests."""
    right = dist.get_global_rank(plan.group, (plan.rank + 1) % plan.ranks)
    left = dist.get_global_rank(plan.group, (plan.rank - 1) % plan.ranks)
    ops = []
    for i, (t, r) in enumerate(zip(tensors, incoming)):
        ops.append(dist.P2POp(dist.isend, t, right, plan.group, tag + i))
        ops.append(dist.P2POp(dist.irecv, r, left, plan.group, tag + i))
    return dist.batch_isend_irecv(ops)


def _like_shard(plan, x, owner, dtype=None):
    """An empty tensor for owner's rows of x ([B, H, rows, D])."""
    n = sum(e - b for b, e in plan.theirs(owner))
    return torch.empty((x.shape[0], x.shape[1], n, x.shape[3]),
                       dtype=dtype if dtype is not None else x.dtype)


def _call_options(o, qc, kc):
    return dict(causal=o["causal"], window=o["window"], stride=o["stride"], chunk=o["chunk"],
                scale=o["scale"], softcap=o["softcap"], q_start=qc[0], k_start=kc[0])


def _ring_forward(plan, q, k, v, alibi_slopes, sinks, timeout):
    """o [B, H, rows, Dv] and lse [B, H, rows] (float32) of this rank's rows; q, k, v
    [B, H, rows, D] views."""
    ctx = _ctx_for(q, None)
    t0, waited = time.perf_counter(), 0.0
    b, h, dv = q.shape[0], q.shape[1], v.shape[3]
    runs, lses = [], []
    for cb, ce in plan.mine:  # each chunk's running result starts empty: lse -inf
        runs.append(torch.zeros((b, h, ce - cb, dv), dtype=torch.float32))
        lses.append(torch.full((b, h, ce - cb), float("-inf"), dtype=torch.float32))
    cur = (k.contiguous(), v.contiguous())
    for step in range(plan.ranks):
        owner = (plan.rank - step) % plan.ranks
        works, nxt = [], None
        if step + 1 < plan.ranks:  # the next shard travels while this one is computed
            src = (plan.rank - step - 1) % plan.ranks
            nxt = (_like_shard(plan, cur[0], src), _like_shard(plan, cur[1], src))
            works = _exchange(plan, cur, nxt, 2 * step)
        theirs = plan.theirs(owner)
        error = None
        try:
            for qi, qc in enumerate(plan.mine):
                for ki, kc in enumerate(theirs):
                    if plan.skip(qc, kc):
                        continue
                    diag = step == 0 and ki == qi  # the sinks join each row's softmax once
                    part, part_lse = octattn.attention(
                        _rows(q, plan.mine, qi), _rows(cur[0], theirs, ki),
                        _rows(cur[1], theirs, ki), alibi_slopes=alibi_slopes,
                        sinks=sinks if diag else None, algorithm="fused", return_lse=True,
                        out=torch.empty_like(runs[qi]), **_call_options(plan.opts, qc, kc))
                    ctx.merge([runs[qi], part], [lses[qi], part_lse], runs[qi], lses[qi])
        except (octattn.Error, ValueError) as e:
            error = e
        w0 = time.perf_counter()
        _wait(works, timeout, f"{plan.opts['what']}: rank {plan.rank} waiting for a K/V shard "
                              f"(step {step})")
        waited += time.perf_counter() - w0
        if step == 0:  # a call that fails fails on the first step, and on every rank
            _agree(plan.group, error, plan.opts["what"], timeout)
        elif error is not None:
            raise error
        if nxt is not None:
            cur = nxt
    _stats.clear()
    _stats.update(kind="ring forward", seconds=time.perf_counter() - t0, wait_seconds=waited,
                  steps=plan.ranks)
    return torch.cat(runs, 2), torch.cat(lses, 2)


def _ring_backward(plan, q, k, v, out, lse, dout, dlse, alibi_slopes, sinks, timeout):
    """dq, dk, dv (float32, [B, H, rows, D]) and this rank's share of dsinks. The dK/dV
    sums travel with their shard: at each step a rank adds its part to the sums the
    ranks before it made (received during its own compute) and passes them on; after the
    last step the sums that arrive are the rank's own shard's."""
    t0, waited = time.perf_counter(), 0.0
    what = plan.opts["what"] + " backward"
    dq = torch.zeros(q.shape, dtype=torch.float32)
    dsinks = torch.zeros(sinks.shape, dtype=torch.float32) if sinks is not None else None
    cur = (k.contiguous(), v.contiguous())
    incoming = None  # (requests, (dk, dv)): the sums of the shard in hand, arriving
    for step in range(plan.ranks):
        owner = (plan.rank - step) % plan.ranks
        works, nxt = [], None
        if step + 1 < plan.ranks:
            src = (plan.rank - step - 1) % plan.ranks
            nxt = (_like_shard(plan, cur[0], src), _like_shard(plan, cur[1], src))
            works = _exchange(plan, cur, nxt, 2 * step)
        theirs = plan.theirs(owner)
        part = (torch.zeros(cur[0].shape, dtype=torch.float32),
                torch.zeros(cur[1].shape, dtype=torch.float32))
        error = None
        try:
            for qi, qc in enumerate(plan.mine):
                lse_q = _rows(lse, plan.mine, qi)
                dlse_q = None if dlse is None else _rows(dlse, plan.mine, qi)
                for ki, kc in enumerate(theirs):
                    if plan.skip(qc, kc):
                        continue
                    diag = step == 0 and ki == qi
                    grads = octattn.attention_backward(
                        _rows(q, plan.mine, qi), _rows(cur[0], theirs, ki),
                        _rows(cur[1], theirs, ki), _rows(out, plan.mine, qi), lse_q,
                        _rows(dout, plan.mine, qi), dlse_q, alibi_slopes=alibi_slopes,
                        sinks=sinks if diag else None, return_dsinks=diag and sinks is not None,
                        algorithm="fused", **_call_options(plan.opts, qc, kc))
                    _rows(dq, plan.mine, qi).add_(grads[0])
                    _rows(part[0], theirs, ki).add_(grads[1])
                    _rows(part[1], theirs, ki).add_(grads[2])
                    if diag and sinks is not None:
                        dsinks.add_(grads[3])
        except (octattn.Error, ValueError) as e:
            error = e
        w0 = time.perf_counter()
        _wait(works, timeout, f"{what}: rank {plan.rank} waiting for a K/V shard (step {step})")
        if incoming is not None:
            _wait(incoming[0], timeout, f"{what}: rank {plan.rank} waiting for dK/dV sums "
                                        f"(step {step})")
        waited += time.perf_counter() - w0
        if step == 0:
            _agree(plan.group, error, what, timeout)
        elif error is not None:
            raise error
        # The shard's sums in a fixed order: the earlier ranks' first, then this one's.
        acc = part if incoming is None else (incoming[1][0].add_(part[0]),
                                             incoming[1][1].add_(part[1]))
        if plan.ranks == 1:
            return dq, acc[0], acc[1], dsinks
        after = (plan.rank - step - 1) % plan.ranks  # the shard the left neighbour sends on
        bufs = (_like_shard(plan, cur[0], after, torch.float32),
                _like_shard(plan, cur[1], after, torch.float32))
        incoming = (_exchange(plan, acc, bufs, 4 * plan.ranks + 2 * step), bufs)
        if nxt is not None:
            cur = nxt
    w0 = time.perf_counter()
    _wait(incoming[0], timeout, f"{what}: rank {plan.rank} waiting for its dK/dV")
    waited += time.perf_counter() - w0
    _stats.clear()
    _stats.update(kind="ring backward", seconds=time.perf_counter() - t0, wait_seconds=waited,
                  steps=plan.ranks)
    return dq, incoming[1][0], incoming[1][1], dsinks


def _options(what, causal, window, stride, chunk, scale, softcap):
    return dict(what=what, causal=bool(causal), window=int(window), stride=int(stride),
                chunk=int(chunk), scale=scale, softcap=float(softcap))


def _start(group, seq_len, split, opts, timeout, layout, q, k, v, check=None):
    """The plan of a call, after every rank's tensors and options were checked."""
    error = None
    rows = (-1, -1, -1)
    try:
        if layout not in ("bhtd", "bthd"):
            raise ValueError(f"layout is 'bhtd' or 'bthd', not {layout!r}")
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor) or x.dim() != 4:
                raise ValueError(f"{name} must be a 4-dimensional torch tensor")
        chunks(1, 1, 0, split)  # the split's name
        rows = tuple(_bhtd(x, layout).shape[2] for x in (q, k, v))
        if check is not None:
            check()
    except ValueError as e:
        error = e
    return _Plan(group, seq_len, split, opts, rows, error, timeout)


class _RingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, plan, alibi_slopes, timeout, layout):
        qb, kb, vb = _bhtd(q, layout), _bhtd(k, layout), _bhtd(v, layout)
        s = None if sinks is None else sinks.detach().to(torch.float32).contiguous()
        out, lse = _ring_forward(plan, qb, kb, vb, alibi_slopes, s, timeout)
        ctx.save_for_backward(q, k, v, sinks, out, lse)
        ctx.plan, ctx.alibi_slopes, ctx.timeout, ctx.layout = plan, alibi_slopes, timeout, layout
        o = out.to(q.dtype)
        return (o if layout == "bhtd" else o.transpose(1, 2)), lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, sinks, out, lse = ctx.saved_tensors
        layout = ctx.layout
        s = None if sinks is None else sinks.detach().to(torch.float32).contiguous()
        # (on float32 copies: 16-bit q, k, v widened exactly, as the ring's forward reads
        # them, so that the gradients are the float32 ring's on those values)
        dq, dk, dv, dsinks = _ring_backward(
            ctx.plan, *(_bhtd(x, layout).float() for x in (q, k, v)), out, lse,
            _bhtd(dout, layout).to(torch.float32), dlse, ctx.alibi_slopes, s, ctx.timeout)
        back = [_bhtd(g, layout).to(x.dtype) for g, x in ((dq, q), (dk, k), (dv, v))]
        ds = None if sinks is None or not ctx.needs_input_grad[3] else dsinks.to(sinks.dtype)
        return back[0], back[1], back[2], ds, None, None, None, None


def ring_attention(q, k, v, group=None, *, causal=True, window=0, stride=0, chunk=0,
                   scale=None, softcap=0.0, alibi_slopes=None, sinks=None, layout="bhtd",
                   split="zigzag", seq_len=None, timeout=300.0, return_lse=False):
    """Ring attention over the ranks of `group` (None: the default group).

    q [B, Hq, rows, D], k and v [B, Hkv, rows, D / Dv] (layout="bthd": [B, rows, H, D]):
    this rank's rows of the sequence under `split` (shard() cuts them); the options of
    octattn.attention, positions counting from the sequence's first token. seq_len: the
    whole sequence's length (None: the sum of every rank's rows). Returns o (q's dtype and
    layout), and with return_lse the natural-log LSE [B, Hq, rows] (float32). Autograd
    gives q, k, v and sinks their gradients (the ring backward). timeout: seconds a rank
    waits for a peer before it raises (None: the process group's own)."""
    opts = _options("ring_attention", causal, window, stride, chunk, scale, softcap)
    plan = _start(group, seq_len, split, opts, timeout, layout, q, k, v)
    slopes = None if alibi_slopes is None else alibi_slopes.detach().to(torch.float32)
    o, lse = _RingFunction.apply(q, k, v, sinks, plan, slopes, timeout, layout)
    return (o, lse) if return_lse else o


def _a2a(plan, send, send_sizes, recv_sizes, timeout, what):
    """One all_to_all_single of flat float tensors with these element counts."""
    recv = torch.empty(sum(recv_sizes), dtype=send.dtype)
    work = dist.all_to_all_single(recv, send, recv_sizes, send_sizes, group=plan.group,
                                  async_op=True)
    t0 = time.perf_counter()
    _wait([work], timeout, what)
    plan.waited += time.perf_counter() - t0
    return recv


def _rows_of(plan, r):
    return sum(e - b for b, e in plan.theirs(r))


def _to_heads(plan, x, timeout, what):
    """This rank's rows of every head ([B, H, rows, D]) -> every row of this rank's H / P
    heads ([B, H / P, T, D]), the rows in sequence order."""
    b, h, n, d = x.shape
    hp = h // plan.ranks
    send = torch.cat([x[:, j * hp:(j + 1) * hp].reshape(-1) for j in range(plan.ranks)])
    recv_sizes = [b * hp * _rows_of(plan, r) * d for r in range(plan.ranks)]
    recv = _a2a(plan, send, [b * hp * n * d] * plan.ranks, recv_sizes, timeout, what)
    full = torch.empty((b, hp, plan.seq_len, d), dtype=x.dtype)
    at = 0
    for r in range(plan.ranks):
        block = recv[at:at + recv_sizes[r]].view(b, hp, _rows_of(plan, r), d)
        at += recv_sizes[r]
        theirs = plan.theirs(r)
        for i, (cb, ce) in enumerate(theirs):
            full[:, :, cb:ce].copy_(_rows(block, theirs, i))
    return full


def _to_rows(plan, y, timeout, what):
    """_to_heads' inverse: [B, H / P, T, D] -> this rank's rows of every head."""
    b, hp, _, d = y.shape
    pieces = [torch.cat([y[:, :, cb:ce] for cb, ce in plan.theirs(r)], 2).reshape(-1)
              for r in range(plan.ranks)]
    n = _rows_of(plan, plan.rank)
    recv = _a2a(plan, torch.cat(pieces), [p.numel() for p in pieces],
                [b * hp * n * d] * plan.ranks, timeout, what)
    return recv.view(plan.ranks, b, hp, n, d).permute(1, 0, 2, 3, 4).reshape(
        b, plan.ranks * hp, n, d)


def _head_slice(a, plan, heads):
    if a is None:
        return None
    hp = heads // plan.ranks
    return a.detach().to(torch.float32)[plan.rank * hp:(plan.rank + 1) * hp].contiguous()


class _AllToAllFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, sinks, plan, alibi_slopes, timeout, layout):
        what = plan.opts["what"]
        t0, plan.waited = time.perf_counter(), 0.0
        qb, kb, vb = (_bhtd(x, layout).to(torch.float32) for x in (q, k, v))
        qf, kf, vf = (_to_heads(plan, x, timeout, what) for x in (qb, kb, vb))
        heads = q.shape[1 if layout == "bhtd" else 2]
        s = _head_slice(sinks, plan, heads)
        slopes = _head_slice(alibi_slopes, plan, heads)
        o = plan.opts
        error, of, lsef = None, None, None
        try:
            of, lsef = octattn.attention(
                qf, kf, vf, causal=o["causal"], window=o["window"], stride=o["stride"],
                chunk=o["chunk"], scale=o["scale"], softcap=o["softcap"], q_start=0,
                k_start=0, alibi_slopes=slopes, sinks=s, algorithm="fused", return_lse=True)
        except (octattn.Error, ValueError) as e:
            error = e
        _agree(plan.group, error, what, timeout)
        out = _to_rows(plan, of, timeout, what)
        lse = _to_rows(plan, lsef.unsqueeze(-1), timeout, what).squeeze(-1)
        ctx.save_for_backward(q, k, v, sinks, qf, kf, vf, of, lsef)
        ctx.plan, ctx.slopes, ctx.timeout, ctx.layout, ctx.heads = (plan, slopes, timeout,
                                                                    layout, heads)
        out = out.to(q.dtype)
        _stats.clear()
        _stats.update(kind="all-to-all forward", seconds=time.perf_counter() - t0,
                      wait_seconds=plan.waited, steps=1)
        return (out if layout == "bhtd" else out.transpose(1, 2)), lse

    @staticmethod
    def backward(ctx, dout, dlse):
        q, k, v, sinks, qf, kf, vf, of, lsef = ctx.saved_tensors
        plan, layout, timeout = ctx.plan, ctx.layout, ctx.timeout
        what = plan.opts["what"] + " backward"
        t0, plan.waited = time.perf_counter(), 0.0
        doutf = _to_heads(plan, _bhtd(dout, layout).to(torch.float32), timeout, what)
        dlsef = None
        if dlse is not None:
            dlsef = _to_heads(plan, dlse.to(torch.float32).unsqueeze(-1), timeout,
                              what).squeeze(-1)
        s = _head_slice(sinks, plan, ctx.heads)
        o = plan.opts
        error, grads = None, None
        try:
            grads = octattn.attention_backward(
                qf, kf, vf, of, lsef, doutf, dlsef, causal=o["causal"], window=o["window"],
                stride=o["stride"], chunk=o["chunk"], scale=o["scale"], softcap=o["softcap"],
                q_start=0, k_start=0, alibi_slopes=ctx.slopes, sinks=s,
                return_dsinks=s is not None, algorithm="fused")
        except (octattn.Error, ValueError) as e:
            error = e
        _agree(plan.group, error, what, timeout)
        back = [_bhtd(_to_rows(plan, g, timeout, what), layout).to(x.dtype)
                for g, x in zip(grads[:3], (q, k, v))]
        ds = None
        if sinks is not None and ctx.needs_input_grad[3]:
            hp = ctx.heads // plan.ranks
            ds = torch.zeros(sinks.shape, dtype=torch.float32)
            ds[plan.rank * hp:(plan.rank + 1) * hp] = grads[3]
            ds = ds.to(sinks.dtype)
        _stats.clear()
        _stats.update(kind="all-to-all backward", seconds=time.perf_counter() - t0,
                      wait_seconds=plan.waited, steps=1)
        return back[0], back[1], back[2], ds, None, None, None, None


def all_to_all_attention(q, k, v, group=None, *, causal=True, window=0, stride=0, chunk=0,
                         scale=None, softcap=0.0, alibi_slopes=None, sinks=None,
                         layout="bhtd", split="zigzag", seq_len=None, timeout=300.0,
                         return_lse=False):
    """All-to-all (Ulysses) attention over the ranks of `group`: ring_attention's
    arguments and results; Hq and Hkv must divide by the group's size. Each rank
    computes H / P heads over the whole sequence (its memory grows with T, its traffic is
    four all-to-alls of a shard's q, k, v and o)."""
    opts = _options("all_to_all_attention", causal, window, stride, chunk, scale, softcap)
    ranks = _group_info(group)[1]

    def check():
        hq, hkv = (x.shape[1 if layout == "bhtd" else 2] for x in (q, k))
        if hq % ranks or hkv % ranks:
            raise ValueError(f"q heads ({hq}) and kv heads ({hkv}) must divide by the "
                             f"group's {ranks} ranks")

    plan = _start(group, seq_len, split, opts, timeout, layout, q, k, v, check=check)
    o, lse = _AllToAllFunction.apply(q, k, v, sinks, plan, alibi_slopes, timeout, layout)
    return (o, lse) if return_lse else o


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    """flash_attn.flash_attn_func's signature on octattn, for libraries that take it as
    their local attention (Ulysses-style sequence parallelism calls it on the gathered
    sequence): q [B, Tq, Hq, D], k and v [B, Tk, Hkv, D]; the queries are the last Tq
    positions (flash-attn's bottom-right causal alignment); window_size (left, right) with
    right 0 or -1 (with causal, -1 reads as 0). Returns o, or (o, lse [B, Hq, Tq], None)
    with return_attn_probs. Gradients through torch.ops.octattn.attention; dropout and
    ALiBi slopes of shape [B, Hq] are not supported (ValueError)."""
    import octattn.ops  # noqa: F401  (torch.ops.octattn.attention and its autograd)
    if dropout_p:
        raise ValueError("flash_attn_func: octattn has no dropout (dropout_p must be 0)")
    left, right = window_size
    if right not in (-1, 0) or (right == -1 and left >= 0 and not causal):
        raise ValueError("flash_attn_func: window_size (left, right) needs right 0 "
                         "(or -1 with causal)")
    window = left + 1 if left >= 0 else 0
    causal = bool(causal) or right == 0
    if alibi_slopes is not None and alibi_slopes.dim() != 1:
        raise ValueError("flash_attn_func: alibi_slopes of shape [Hq] only")
    o, lse = torch.ops.octattn.attention(
        q, k, v, alibi_slopes=None if alibi_slopes is None else alibi_slopes.to(torch.float32),
        causal=causal, window=window, scale=softmax_scale, softcap=float(softcap),
        layout="bthd")
    return (o, lse, None) if return_attn_probs else o
