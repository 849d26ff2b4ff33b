"""Causal prefill attention over packed sequences and paged decode attention (row KERNEL-ATTN-PAGED).

Rounding points (Hugging Face's eager attention, `eager_attention_forward`, in
the model dtype; the Qwen3 oracle must load with `attn_implementation="eager"`
for token-exact runs, since SDPA keeps scores and probabilities in fp32):
1. scores = (q @ k^T) rounded to the dtype (fp32 accumulation inside the GEMM),
2. scores * scale rounded to the dtype,
3. masked positions get -inf; softmax in fp32 over the row,
4. probabilities rounded to the dtype,
5. out = probs @ v rounded to the dtype (fp32 accumulation inside the GEMM).
In fp32 every step is fp32 and the rounding points vanish.

GQA: query head h reads KV head h // (Hq // Hkv) (Hugging Face's repeat_kv).
Sliding window W (Hugging Face/Mistral semantics): the query at position i
attends key positions j with i - W < j <= i, i.e. the W most recent positions,
itself included. None means no window.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from engine.ops._check import FLOAT_DTYPES, INDEX_DTYPES, check_dim, check_same_dtype, check_tensor, refuse_capture


def prefill_attention(
    q: torch.Tensor,  # q: [tokens, Hq, D]
    k: torch.Tensor,  # k: [tokens, Hkv, D]
    v: torch.Tensor,  # v: [tokens, Hkv, D]
    seq_lens: Sequence[int] | torch.Tensor,  # seq_lens: [num_seqs]; sum == tokens
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,  # [1 or 2, num_seqs] int32: seq_lens on q's device (kernel arms)
) -> torch.Tensor:  # [tokens, Hq, D], q.dtype
    """Causal self-attention within each of several sequences packed back to back.

    Sequence s owns tokens [sum(seq_lens[:s]), sum(seq_lens[:s+1])) and its
    positions start at 0. Rounding: the module docstring's five points.
    `device_lens`, when given, holds the same lengths on the device for the kernel arms (a serving step
    uploads them once for every layer); the reference reads `seq_lens`.
    """
    lens = _lens(seq_lens, "seq_lens")
    out = torch.empty_like(q)
    start = 0
    for n in lens:
        if n == 0:
            continue
        pos = torch.arange(n, device=q.device)
        allowed = _allowed(pos, pos, sliding_window)
        qh = q[start : start + n].transpose(0, 1)  # [Hq, n, D]
        out[start : start + n] = _attend(qh, k[start : start + n], v[start : start + n], allowed, scale).transpose(0, 1)
        start += n
    return out


def check_prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_lens: Sequence[int] | torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,
) -> None:
    _check_qkv(q, k, v)
    lens = _lens(seq_lens, "seq_lens")
    if sum(lens) != q.shape[0]:
        raise ValueError(f"seq_lens: sum {sum(lens)} != q's tokens {q.shape[0]}")
    _check_window(sliding_window)
    _check_device_lens(device_lens, len(lens), q, (1, 2))


def extend_attention(
    q: torch.Tensor,  # q: [tokens, Hq, D], each sequence's new tokens packed back to back
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D], the new tokens' K/V already stored
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, Hkv, D]
    block_tables: torch.Tensor | None,  # block_tables: [num_seqs, max_blocks] int32
    seq_lens: Sequence[int],  # new tokens per sequence; sum == tokens
    prefix_lens: Sequence[int],  # tokens of each sequence already in the cache before its new ones
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,  # [2, num_seqs] int32: seq_lens, prefix_lens on q's device
) -> torch.Tensor:  # [tokens, Hq, D], q.dtype
    """Causal attention of each sequence's new tokens over its cached prefix and themselves.

    The new tokens of sequence s sit at positions prefix_lens[s] .. prefix_lens[s] + seq_lens[s] - 1;
    keys are read from the paged cache (a chunked prefill, a prefix-cache hit, a decode row of a mixed
    step). With every prefix 0 this is prefill_attention. Rounding: the module docstring's points.
    `device_lens`, when given, holds seq_lens and prefix_lens on the device for the kernel arms; the
    reference reads the lists.
    """
    assert block_tables is not None  # check_extend_attention refuses None
    lens, pres = _lens(seq_lens, "seq_lens"), _lens(prefix_lens, "prefix_lens")
    k_flat = k_cache.reshape(-1, *k_cache.shape[2:])
    v_flat = v_cache.reshape(-1, *v_cache.shape[2:])
    out = torch.empty_like(q)
    start = 0
    for b, (n, pre) in enumerate(zip(lens, pres)):
        if n == 0:
            continue
        k_seq, v_seq = gather_sequence(k_flat, v_flat, block_tables[b], pre + n, k_cache.shape[1])
        allowed = _allowed(
            torch.arange(pre, pre + n, device=q.device), torch.arange(pre + n, device=q.device), sliding_window
        )
        qh = q[start : start + n].transpose(0, 1)  # [Hq, n, D]
        out[start : start + n] = _attend(qh, k_seq, v_seq, allowed, scale).transpose(0, 1)
        start += n
    return out


def check_extend_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor | None,
    seq_lens: Sequence[int],
    prefix_lens: Sequence[int],
    scale: float,
    sliding_window: int | None = None,
    device_lens: torch.Tensor | None = None,
) -> None:
    check_tensor(q, "q", ndim=3, dtypes=FLOAT_DTYPES)
    lens, pres = _lens(seq_lens, "seq_lens"), _lens(prefix_lens, "prefix_lens")
    if block_tables is None or len(pres) != len(lens) or block_tables.shape[0] != len(lens):
        raise ValueError(f"extend_attention: {len(lens)} sequences need as many prefix_lens and block_tables rows")
    if sum(lens) != q.shape[0]:
        raise ValueError(f"seq_lens: sum {sum(lens)} != q's tokens {q.shape[0]}")
    _check_window(sliding_window)
    _check_caches(q, k_cache, v_cache)
    _check_device_lens(device_lens, len(lens), q, (2,))


def paged_decode_attention(
    q: torch.Tensor,  # q: [batch, Hq, D]
    k_cache: torch.Tensor,  # k_cache: [num_blocks, block_size, Hkv, D]
    v_cache: torch.Tensor,  # v_cache: [num_blocks, block_size, Hkv, D]
    block_tables: torch.Tensor,  # block_tables: [batch, max_blocks] int32
    context_lens: torch.Tensor,  # context_lens: [batch] int32, >= 1
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [batch, Hq, D], q.dtype
    """One query token per sequence against its paged K/V (the new token's K/V already stored).

    Sequence b's keys are positions 0..context_lens[b]-1, position p at slot
    `block_tables[b, p // block_size] * block_size + p % block_size`; the query
    sits at position context_lens[b]-1. Rounding: the module docstring's points.
    """
    refuse_capture(q, "paged_decode_attention", "leave VT_KERNELS on to capture the decode step")
    k_flat, v_flat = check_paged(q, k_cache, v_cache, block_tables, context_lens)
    if q.shape[0] == 0:
        return torch.empty_like(q)
    if q.dtype == torch.float32:
        return _decode_by_length(q, k_flat, v_flat, block_tables, context_lens, k_cache.shape[1], scale, sliding_window)
    # bf16/fp16 (bitwise the per-sequence loop's): every sequence at once, padded to the longest: a padded key
    # is masked (-inf, probability exactly 0), so it adds exact zeros to the P.V sums; one batched matmul per
    # rounding point instead of one per sequence
    bs, lens = k_cache.shape[1], context_lens.long()
    pos = torch.arange(int(lens.max()), device=q.device)
    valid = pos[None, :] < lens[:, None]  # [batch, L]
    slots = block_tables.long()[:, pos // bs] * bs + pos % bs
    slots = torch.where(valid, slots, 0)  # padding reads slot 0 (finite: the cache is zero-filled)
    diff = (lens - 1)[:, None] - pos[None, :]
    allowed = valid & (diff < sliding_window if sliding_window is not None else valid)
    group = q.shape[1] // k_cache.shape[2]
    kh = k_flat[slots].permute(0, 2, 1, 3).repeat_interleave(group, dim=1)  # [batch, Hq, L, D]
    vh = v_flat[slots].permute(0, 2, 1, 3).repeat_interleave(group, dim=1)
    scores = torch.matmul(q[:, :, None, :], kh.transpose(-1, -2)) * scale  # rounding points 1 and 2
    scores = scores.masked_fill(~allowed[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # points 3 and 4
    return torch.matmul(probs, vh)[:, :, 0, :]  # point 5


def _decode_by_length(
    q: torch.Tensor,  # q: [batch, Hq, D] float32
    k_flat: torch.Tensor,  # k_flat: [num_slots, Hkv, D]
    v_flat: torch.Tensor,  # v_flat: [num_slots, Hkv, D]
    block_tables: torch.Tensor,  # block_tables: [batch, max_blocks]
    context_lens: torch.Tensor,  # context_lens: [batch]
    block_size: int,
    scale: float,
    window: int | None,
) -> torch.Tensor:  # [batch, Hq, D]
    """fp32 decode attention, a pass per sequence through views of one packed gather (a length shared by
    GROUP_BATCH sequences: one pass for them): every sum runs over exactly a sequence's own keys, as
    transformers' eager attention of that one sequence does.

    fp32 is the oracle's own dtype in the token gates, and padding a sequence's keys changes MKL's sums:
    the q.k products of the last (n mod 4) keys and of contexts up to 12 keys, the softmax's sum below 16
    keys, and the P.V sums with them through those (measured; enough to flip a near-tie token of the d256-g8
    gate model). Given the same probabilities, though, zero-probability padded keys leave the P.V sums as
    they are, and a softmax row of a full vector of keys or more is its padded row's: the plan's long rows
    share one softmax and one P.V product (see _Plan). Sequences of one length share every shape, so their
    batch is bitwise the one-at-a-time result (tests/engine/ops/test_paged_attn.py holds every row to
    transformers' eager decode of that sequence alone, over random lengths)."""
    plan = _plan(q, k_flat, block_tables, context_lens, block_size)
    d = q.shape[2]
    k_rows, v_rows = k_flat.reshape(-1, d), v_flat.reshape(-1, d)
    # one gather per buffer of exactly the keys the passes read, into the plan's buffers, which its views read
    torch.index_select(k_rows, 0, plan.src, out=plan.k)
    if plan.vp is not None:  # the long rows' values, padded (see _Plan)
        torch.index_select(v_rows, 0, plan.src_vp, out=plan.vp.view(-1, d))
    if plan.src_rest.numel():
        torch.index_select(v_rows, 0, plan.src_rest, out=plan.v_rest)
    qh = q[:, :, None, :]  # [batch, Hq, 1, D]
    qs = qh.unbind(0)
    # a sequence alone: [Hq, 1, D] @ [Hq, D, n] into its scores, every score scaled by one multiply (elementwise:
    # the same products as one multiply per sequence), then its softmax @ [Hq, n, D] into its output rows
    for b, kt, scores in plan.singles:
        torch.bmm(qs[b], kt, out=scores)
    plan.scores.mul_(scale)  # rounding points 1 and 2
    if window is not None:
        for _, _, scores in plan.singles:
            n = scores.shape[-1]
            if n > window:  # the query sits at n - 1: it sees the last `window` keys
                scores[..., : n - window] = float("-inf")
    if plan.padded is not None:  # the long rows: one softmax and one P.V for all of them (see _Plan)
        plan.padded.masked_scatter_(plan.pad_mask, plan.scores)  # their scores come first
        torch.ops.aten._softmax.out(plan.padded, -1, False, out=plan.probs)
        torch.bmm(plan.probs_rows, plan.vp_rows, out=plan.out_long)
    for v, scores, out in plan.shorts:  # points 3 and 4 (fp32: no rounding), then 5
        torch.bmm(torch.softmax(scores, dim=-1), v, out=out)
    for idx, kt, v, out in plan.groups:  # one length: [k, Hq, 1, D] @ [k, Hq, D, n], then P.V
        out.copy_(_attend_fp32(qh[idx], kt, v, kt.shape[-1], scale, window, torch.matmul))
    return plan.out.index_select(0, plan.unpack)[:, :, 0, :]  # pass order back to batch order


class _Plan:
    """A decode call's passes over one packed gather of exactly each sequence's keys ([Hq, n, D] rows per
    sequence, query head h reading KV head h // group), with the gather's buffers, the scores' and the outputs',
    and every pass's views of them: the same for every layer of a step (the tables and lengths are), so built once
    a step. Each view has the strides the padded gather's views had (K^T a transposed view of [n, D] rows)."""

    def __init__(
        self, key: tuple[object, ...], table: torch.Tensor, lens: list[int], q: torch.Tensor, hkv: int, bs: int
    ):
        self.key, self.table = key, table
        (batch, hq, d), device = q.shape, q.device
        rows_of: dict[int, list[int]] = {}
        for b, n in enumerate(lens):
            rows_of.setdefault(n, []).append(b)
        passes = [
            (n, r) for n, rows in rows_of.items() for r in ([rows] if len(rows) >= GROUP_BATCH else [[b] for b in rows])
        ]
        # the long rows (PAD_SOFTMAX_MIN keys or more), on the CPU, when padding them to the longest at most doubles
        # them: one softmax and one P.V product for all of them over -inf scores and zero probabilities. torch's CPU
        # softmax sums a row in the same vector lanes whatever -inf (exp 0) follows once the row fills a vector
        # (below that: a scalar path), and MKL's P.V sum over a row's keys only adds exact zeros for the padded
        # ones (measured over head dims 32-256 and up to 1100 keys): each row gets its own call's bits
        # (tests/engine/ops/test_paged_attn.py). A GPU's kernels split a row by its length: not there.
        long = [n for n, r in passes if len(r) == 1 and n >= PAD_SOFTMAX_MIN]
        if device.type != "cpu" or len(long) < 2 or len(long) * max(long) > 2 * sum(long):
            long = []
        passes.sort(key=lambda p: len(p[1]) > 1 or not long or p[0] < PAD_SOFTMAX_MIN)  # the long rows first
        order = [b for _, r in passes for b in r]  # the packing order: pass after pass
        perm = torch.tensor(order, device=device)
        lens_t = torch.tensor([lens[b] for b in order], device=device)
        pos = torch.arange(max(lens), device=device)
        slots = table.long()[perm][:, pos // bs] * bs + pos % bs  # [batch, L]
        heads = torch.arange(hq, device=device) // (hq // hkv)
        src = slots[:, None, :] * hkv + heads[None, :, None]  # row of the cache viewed [slots * Hkv, D]
        keep = torch.lt(pos.expand(hq, -1), lens_t[:, None, None])  # [batch, Hq, L], contiguous: a fast select
        self.src = torch.masked_select(src, keep)  # pass after pass, head after head, position after position
        self.k = torch.empty(self.src.numel(), d, dtype=q.dtype, device=device)
        self.v = torch.empty_like(self.k)
        long_rows = hq * sum(long)  # the packed rows of the long passes (their values go to the padded buffer)
        self.src_rest, self.v_rest = self.src[long_rows:], self.v[long_rows:]
        self.out = torch.empty(batch, hq, 1, d, dtype=q.dtype, device=device)  # pass order
        unpack = [0] * batch
        for i, b in enumerate(order):
            unpack[b] = i
        self.unpack = torch.tensor(unpack, device=device)
        self.scores = torch.empty(sum(hq * n for n, r in passes if len(r) == 1), dtype=q.dtype, device=device)
        self.singles: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (row, K^T, scores) of every single pass
        self.shorts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (V, scores, out) of the others
        self.groups: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]] = []
        at = at_scores = first = 0
        out_rows = self.out.unbind(0)  # one op for every single pass's output view
        k_, v_, s_ = self.k.as_strided, self.v.as_strided, self.scores.as_strided  # one op per view
        for n, r in passes:
            k = len(r)
            if k == 1:
                scores = s_((hq, 1, n), (n, n, 1), at_scores)
                self.singles.append((r[0], k_((hq, d, n), (n * d, 1, d), at), scores))
                if first >= len(long):
                    self.shorts.append((v_((hq, n, d), (n * d, d, 1), at), scores, out_rows[first]))
                at_scores += hq * n
            else:
                kt = k_((k, hq, d, n), (hq * n * d, n * d, 1, d), at)
                v = v_((k, hq, n, d), (hq * n * d, n * d, d, 1), at)
                self.groups.append((torch.tensor(r, device=device), kt, v, self.out[first : first + k]))
            at, first = at + k * hq * n * d, first + k
        self.padded: torch.Tensor | None = None
        self.vp: torch.Tensor | None = None
        if long:
            rows, width = len(long), max(long)
            self.padded = torch.full((rows, hq, 1, width), float("-inf"), dtype=q.dtype, device=device)
            mask = keep[:rows, :, :width]  # [long, Hq, width]: the long rows lead the packing order
            self.pad_mask = mask[:, :, None, :]
            self.probs = torch.empty_like(self.padded)
            # a padded key reads its sequence's first (finite) value row: times its probability, 0, it adds 0
            self.src_vp = torch.where(mask, src[:rows, :, :width], src[:rows, :, :1]).reshape(-1)
            self.vp = torch.empty(rows, hq, width, d, dtype=q.dtype, device=device)
            self.probs_rows = self.probs.view(rows * hq, 1, width)
            self.vp_rows = self.vp.view(rows * hq, width, d)
            self.out_long = self.out[:rows].view(rows * hq, 1, d)


class _Local(threading.local):
    """The last call's plan, per thread (an engine loop runs in one; the plan's buffers are its scratch)."""

    plan: _Plan | None = None


_LOCAL = _Local()


def _plan(
    q: torch.Tensor, k_flat: torch.Tensor, block_tables: torch.Tensor, context_lens: torch.Tensor, block_size: int
) -> _Plan:
    """The plan for these inputs: this thread's last one when the tables and lengths are equal by value and the
    shapes the same (a step's layers), else a new one (kept on the CPU only)."""
    lens = context_lens.tolist()
    key = (tuple(lens), block_size, q.shape, q.dtype, q.device, k_flat.shape[1], block_tables.shape, block_tables.dtype)
    last = _LOCAL.plan
    if last is not None and last.key == key and torch.equal(last.table, block_tables):
        return last
    plan = _Plan(key, block_tables.clone(), lens, q, k_flat.shape[1], block_size)
    if q.device.type == "cpu":  # kept for the next layer; on a GPU its buffers would outlive the engine's memory
        _LOCAL.plan = plan
    return plan


PAD_SOFTMAX_MIN = 32  # keys from which a row's softmax is its padded row's (a full 16-lane vector, with margin)
GROUP_BATCH = 8  # sequences of one length from which one indexed pass beats a pass each (CPU: 4 break even)


def _attend_fp32(
    q: torch.Tensor,  # q: [..., Hq, 1, D]
    kt: torch.Tensor,  # kt: [..., Hq, D, n], a transposed view of [..., n, D] rows
    v: torch.Tensor,  # v: [..., Hq, n, D]
    n: int,
    scale: float,
    window: int | None,
    mm: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],  # torch.bmm (3-d) or torch.matmul (4-d)
) -> torch.Tensor:  # [..., Hq, 1, D]
    """One query over exactly n keys, transformers' eager order: q.k, times the scale, softmax, P.V."""
    scores = mm(q, kt).mul_(scale)  # rounding points 1 and 2
    if window is not None and n > window:  # the query sits at n - 1: it sees the last `window` keys
        scores[..., : n - window] = float("-inf")
    return mm(torch.softmax(scores, dim=-1), v)  # points 3 and 4 (fp32: no rounding), then point 5


def check_paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> None:
    """Shapes and dtypes only (no host read of context_lens), so a captured decode step can run it."""
    check_tensor(q, "q", ndim=3, dtypes=FLOAT_DTYPES)
    check_paged_shapes(q, k_cache, v_cache, block_tables, context_lens)
    _check_window(sliding_window)


def check_paged_shapes(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
) -> None:
    check_tensor(k_cache, "k_cache", ndim=4)
    check_tensor(v_cache, "v_cache", ndim=4)
    check_same_dtype(k_cache, "k_cache", q, "q")
    check_same_dtype(v_cache, "v_cache", q, "q")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: shape {tuple(v_cache.shape)} != k_cache's {tuple(k_cache.shape)}")
    check_dim(k_cache, "k_cache", 3, q.shape[2], "q's head_dim")
    _check_groups(q.shape[1], k_cache.shape[2])
    check_tensor(block_tables, "block_tables", ndim=2, dtypes=INDEX_DTYPES)
    check_tensor(context_lens, "context_lens", ndim=1, dtypes=INDEX_DTYPES)
    check_dim(block_tables, "block_tables", 0, q.shape[0], "q's batch")
    check_dim(context_lens, "context_lens", 0, q.shape[0], "q's batch")


def check_paged(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:  # k/v caches viewed as [num_slots, Hkv, D]
    """The context lengths' values against the tables (a host read: the references only); returns the
    caches viewed flat."""
    block_size = k_cache.shape[1]
    if context_lens.numel():
        if int(context_lens.min()) < 1:
            raise ValueError("context_lens: every sequence needs at least its own token (>= 1)")
        need = (int(context_lens.max()) + block_size - 1) // block_size
        if need > block_tables.shape[1]:
            raise ValueError(f"block_tables: {block_tables.shape[1]} blocks per row, context needs {need}")
    num_slots = k_cache.shape[0] * block_size
    return k_cache.reshape(num_slots, *k_cache.shape[2:]), v_cache.reshape(num_slots, *v_cache.shape[2:])


def gather_sequence(
    k_flat: torch.Tensor,  # k_flat: [num_slots, Hkv, D]
    v_flat: torch.Tensor,  # v_flat: [num_slots, Hkv, D]
    block_table: torch.Tensor,  # block_table: [max_blocks]
    n: int,
    block_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:  # each [n, Hkv, D]
    """Positions 0..n-1 of one sequence, gathered from the paged cache."""
    pos = torch.arange(n, device=k_flat.device)
    slots = block_table.long()[pos // block_size] * block_size + pos % block_size
    return k_flat[slots], v_flat[slots]


def _attend(
    qh: torch.Tensor,  # qh: [Hq, Lq, D]
    k: torch.Tensor,  # k: [Lk, Hkv, D]
    v: torch.Tensor,  # v: [Lk, Hkv, D]
    allowed: torch.Tensor,  # allowed: [Lq, Lk] bool
    scale: float,
) -> torch.Tensor:  # [Hq, Lq, D]
    group = qh.shape[0] // k.shape[1]
    kh = k.transpose(0, 1).repeat_interleave(group, dim=0)  # [Hq, Lk, D]
    vh = v.transpose(0, 1).repeat_interleave(group, dim=0)
    scores = torch.matmul(qh, kh.transpose(1, 2)) * scale  # rounding points 1 and 2
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(qh.dtype)  # points 3 and 4
    return torch.matmul(probs, vh)  # point 5


def _allowed(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """[Lq, Lk] mask: causal, and within the window when one is set."""
    diff = q_pos[:, None] - k_pos[None, :]
    ok = diff >= 0
    if window is not None:
        ok &= diff < window
    return ok


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    check_tensor(q, "q", ndim=3, dtypes=FLOAT_DTYPES)
    check_tensor(k, "k", ndim=3)
    check_tensor(v, "v", ndim=3)
    check_same_dtype(k, "k", q, "q")
    check_same_dtype(v, "v", q, "q")
    if v.shape != k.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} != k's {tuple(k.shape)}")
    check_dim(k, "k", 0, q.shape[0], "q's tokens")
    check_dim(k, "k", 2, q.shape[2], "q's head_dim")
    _check_groups(q.shape[1], k.shape[1])


def _check_groups(num_q_heads: int, num_kv_heads: int) -> None:
    if num_kv_heads == 0 or num_q_heads % num_kv_heads:
        raise ValueError(f"q: {num_q_heads} heads is not a multiple of the {num_kv_heads} KV heads")


def _check_caches(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    check_tensor(k_cache, "k_cache", ndim=4)
    check_same_dtype(k_cache, "k_cache", q, "q")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"v_cache: shape {tuple(v_cache.shape)} != k_cache's {tuple(k_cache.shape)}")
    check_dim(k_cache, "k_cache", 3, q.shape[2], "q's head_dim")
    _check_groups(q.shape[1], k_cache.shape[2])


def _check_device_lens(lens: torch.Tensor | None, seqs: int, q: torch.Tensor, rows: tuple[int, ...]) -> None:
    """Shape, dtype and device only: the values are the lists' own (no host read here)."""
    if lens is None:
        return
    check_tensor(lens, "device_lens", ndim=2, dtypes=(torch.int32,))
    if lens.shape[0] not in rows or lens.shape[1] != seqs or lens.device != q.device:
        raise ValueError(
            f"device_lens: expected [{'/'.join(map(str, rows))}, {seqs}] int32 on {q.device}, "
            f"got {tuple(lens.shape)} on {lens.device}"
        )


def _check_window(window: int | None) -> None:
    if window is not None and window < 1:
        raise ValueError(f"sliding_window: expected None or >= 1, got {window}")


def _lens(seq_lens: Sequence[int] | torch.Tensor, name: str) -> list[int]:
    if isinstance(seq_lens, torch.Tensor):
        check_tensor(seq_lens, name, ndim=1, dtypes=INDEX_DTYPES)
        seq_lens = seq_lens.tolist()
    lens = [int(n) for n in seq_lens]
    if any(n < 0 for n in lens):
        raise ValueError(f"{name}: negative length in {lens}")
    return lens
