"""Gated delta net: the recurrent decode step and the chunked (UT-transform) prefill form (row KERNEL-GDN).

The gated delta rule (Gated DeltaNet, arXiv:2412.06464), per (batch, value head),
with the state S laid out [dk, dv] and a_t = exp(g_t):

    S_t = a_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,      o_t = S_t^T q_t

computed as the steps
    S <- exp(g) * S;   kv = S^T k;   delta = beta * (v - kv);   S <- S + k delta^T;   o = S^T q.
g is the log decay (g <= 0), beta in (0, 1). Value head h reads query/key head
h // (heads // k_heads) (grouped value heads, as Qwen3-Next).

Options, both off by default: `use_qk_l2norm` replaces q and k by
x * rsqrt(sum(x^2) + eps) (Hugging Face/FLA's l2norm), and `scale` multiplies q
(Qwen3-Next passes head_k_dim ** -0.5); l2norm first, then the scale.

Rounding: q, k, v, g and beta are upcast to fp32; the state is fp32 in and out;
every step is fp32; the output is rounded once to q.dtype.
"""

from __future__ import annotations

import torch

from engine.ops._check import FLOAT_DTYPES, check_dim, check_tensor


def gated_delta_decode(
    q: torch.Tensor,  # q: [batch, k_heads, dk]
    k: torch.Tensor,  # k: [batch, k_heads, dk]
    v: torch.Tensor,  # v: [batch, heads, dv]
    g: torch.Tensor,  # g: [batch, heads], log decay
    beta: torch.Tensor,  # beta: [batch, heads]
    state: torch.Tensor,  # state: [batch, heads, dk, dv] fp32
    *,
    scale: float = 1.0,
    use_qk_l2norm: bool = False,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:  # (out [batch, heads, dv] q.dtype, new_state [batch, heads, dk, dv] fp32)
    """One token of the gated delta rule for every sequence; `state` is not modified."""
    qf, kf = _prepare_qk(q, k, v.shape[1], scale, use_qk_l2norm, eps)  # [batch, heads, dk]
    vf, bf = v.float(), beta.float()
    s = state * g.float().exp()[..., None, None]
    kv = (s * kf[..., None]).sum(dim=-2)  # S^T k: [batch, heads, dv]
    delta = (vf - kv) * bf[..., None]
    s = s + kf[..., None] * delta[..., None, :]
    out = (s * qf[..., None]).sum(dim=-2)  # S^T q
    return out.to(q.dtype), s


def check_gated_delta_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    *,
    scale: float = 1.0,
    use_qk_l2norm: bool = False,
    eps: float = 1e-6,
) -> None:
    _check(q, k, v, g, beta, state, seq_dim=False)


def gated_delta_chunked(
    q: torch.Tensor,  # q: [batch, T, k_heads, dk]
    k: torch.Tensor,  # k: [batch, T, k_heads, dk]
    v: torch.Tensor,  # v: [batch, T, heads, dv]
    g: torch.Tensor,  # g: [batch, T, heads], log decay
    beta: torch.Tensor,  # beta: [batch, T, heads]
    state: torch.Tensor,  # state: [batch, heads, dk, dv] fp32, the state before token 0
    chunk_size: int,
    *,
    scale: float = 1.0,
    use_qk_l2norm: bool = False,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:  # (out [batch, T, heads, dv] q.dtype, final_state fp32)
    """The same recurrence over T tokens, a chunk of `chunk_size` tokens at a time (the last may be shorter).

    Within a chunk of L tokens with G_t = g_1 + ... + g_t (cumulative log decay)
    and D[t, i] = exp(G_t - G_i) for i <= t (0 above the diagonal), unrolling the
    recurrence from the chunk's entry state S gives S_t = exp(G_t) S + sum_{i<=t} D[t, i] k_i u_i^T
    with the pseudo-values u_t = beta_t (v_t - exp(G_t) S^T k_t - sum_{i<t} D[t, i] (k_i.k_t) u_i).
    In matrices (rows are tokens), with A = strictly_lower(diag(beta) (K K^T * D)):
        (I + A) U = diag(beta) V - diag(beta exp(G)) K S            (a unit lower-triangular solve:
                                                                      the UT transform / WY form)
        O = diag(exp(G)) Q S + ((Q K^T) * D) U
        S' = exp(G_L) S + (diag(exp(G_L - G)) K)^T U
    All fp32; equal to `gated_delta_decode` applied token by token up to fp32 reassociation.
    """
    _check(q, k, v, g, beta, state, seq_dim=True)
    if chunk_size < 1:
        raise ValueError(f"chunk_size: expected >= 1, got {chunk_size}")
    batch, seq, heads, dv = v.shape
    # [batch, heads, T, ...] in fp32
    qf, kf = _prepare_qk(q.transpose(1, 2), k.transpose(1, 2), heads, scale, use_qk_l2norm, eps)
    vf = v.transpose(1, 2).float()
    gf, bf = g.transpose(1, 2).float(), beta.transpose(1, 2).float()
    out = torch.empty(batch, heads, seq, dv, dtype=torch.float32, device=v.device)
    s = state
    for lo in range(0, seq, chunk_size):
        hi = min(lo + chunk_size, seq)
        out[:, :, lo:hi], s = _chunk(
            qf[:, :, lo:hi], kf[:, :, lo:hi], vf[:, :, lo:hi], gf[:, :, lo:hi], bf[:, :, lo:hi], s
        )
    return out.transpose(1, 2).to(q.dtype), s


def _chunk(
    q: torch.Tensor,  # q: [batch, heads, L, dk]
    k: torch.Tensor,  # k: [batch, heads, L, dk]
    v: torch.Tensor,  # v: [batch, heads, L, dv]
    g: torch.Tensor,  # g: [batch, heads, L]
    beta: torch.Tensor,  # beta: [batch, heads, L]
    s: torch.Tensor,  # s: [batch, heads, dk, dv]
) -> tuple[torch.Tensor, torch.Tensor]:  # (out [batch, heads, L, dv], state after the chunk)
    n = q.shape[2]
    cum = g.cumsum(dim=-1)  # G_t
    lower = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    # mask before exp: above the diagonal G_t - G_i > 0 and may overflow
    decay = (cum[..., :, None] - cum[..., None, :]).masked_fill(~lower, float("-inf")).exp()  # D
    a = (beta[..., None] * (k @ k.transpose(-1, -2)) * decay).tril(-1)
    eye = torch.eye(n, dtype=q.dtype, device=q.device)
    rhs = beta[..., None] * v - (beta * cum.exp())[..., None] * (k @ s)  # diag(b)V - diag(b exp(G)) K S
    u = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
    out = cum.exp()[..., None] * (q @ s) + ((q @ k.transpose(-1, -2)) * decay) @ u
    tail = (cum[..., -1:] - cum).exp()  # exp(G_L - G_i)
    s_new = cum[..., -1].exp()[..., None, None] * s + (tail[..., None] * k).transpose(-1, -2) @ u
    return out, s_new


def _prepare_qk(
    q: torch.Tensor,  # q: [batch, (T,) k_heads, dk] or [batch, k_heads, (T,) dk]; heads on dim 1
    k: torch.Tensor,
    heads: int,
    scale: float,
    use_qk_l2norm: bool,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 q and k with each key head repeated for its value heads, l2-normalised and scaled as asked."""
    group = heads // q.shape[1]
    qf = q.float().repeat_interleave(group, dim=1)
    kf = k.float().repeat_interleave(group, dim=1)
    if use_qk_l2norm:
        qf = qf * torch.rsqrt((qf * qf).sum(dim=-1, keepdim=True) + eps)
        kf = kf * torch.rsqrt((kf * kf).sum(dim=-1, keepdim=True) + eps)
    return qf * scale, kf


def _check(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    seq_dim: bool,
) -> None:
    rank = 4 if seq_dim else 3
    check_tensor(q, "q", ndim=rank, dtypes=FLOAT_DTYPES)
    check_tensor(k, "k", ndim=rank, dtypes=FLOAT_DTYPES)
    check_tensor(v, "v", ndim=rank, dtypes=FLOAT_DTYPES)
    check_tensor(g, "g", ndim=rank - 1, dtypes=FLOAT_DTYPES)
    check_tensor(beta, "beta", ndim=rank - 1, dtypes=FLOAT_DTYPES)
    check_tensor(state, "state", ndim=4, dtypes=(torch.float32,))
    if k.shape != q.shape:
        raise ValueError(f"k: shape {tuple(k.shape)} != q's {tuple(q.shape)}")
    lead = v.shape[:-1]  # [batch, (T,) heads]
    for name, t in (("g", g), ("beta", beta)):
        if t.shape != lead:
            raise ValueError(f"{name}: shape {tuple(t.shape)} != v's leading dims {tuple(lead)}")
    for dim in range(rank - 2):
        check_dim(q, "q", dim, v.shape[dim], f"v's dim {dim}")
    heads, k_heads = v.shape[-2], q.shape[-2]
    if k_heads == 0 or heads % k_heads:
        raise ValueError(f"v: {heads} value heads is not a multiple of q's {k_heads} key heads")
    expected = (v.shape[0], heads, q.shape[-1], v.shape[-1])
    if tuple(state.shape) != expected:
        raise ValueError(f"state: shape {tuple(state.shape)} != [batch, heads, dk, dv] {expected}")
