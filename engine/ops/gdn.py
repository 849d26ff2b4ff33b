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

Around the recurrence, the parts of Qwen3-Next's gated delta net layer, rounded as Hugging Face's
Qwen3NextGatedDeltaNet: `gdn_gating` (beta and the log decay g from the projections), the short causal
convolution over q/k/v (`causal_conv1d` for a prefill, `causal_conv1d_update` for one decode token; the
conv state holds the last `kernel` inputs, oldest first) and `gated_rms_norm` on the output.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

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
    check_gated_delta_chunked(q, k, v, g, beta, state, chunk_size)
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


def check_gated_delta_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk_size: int,
    *,
    scale: float = 1.0,
    use_qk_l2norm: bool = False,
    eps: float = 1e-6,
) -> None:
    _check(q, k, v, g, beta, state, seq_dim=True)
    if chunk_size < 1:
        raise ValueError(f"chunk_size: expected >= 1, got {chunk_size}")


def gdn_gating(
    a: torch.Tensor,  # a: [tokens, heads], the decay projection
    b: torch.Tensor,  # b: [tokens, heads], the update-strength projection
    a_log: torch.Tensor,  # a_log: [heads], log of the decay rate A
    dt_bias: torch.Tensor,  # dt_bias: [heads]
) -> tuple[torch.Tensor, torch.Tensor]:  # (g [tokens, heads] fp32, beta [tokens, heads] b.dtype)
    """`g = -exp(A_log) * softplus(a + dt_bias)` in fp32 (a, A_log upcast first) and `beta = sigmoid(b)` in b's dtype."""
    g = -a_log.float().exp() * F.softplus(a.float() + dt_bias)
    return g, b.sigmoid()


def check_gdn_gating(a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor) -> None:
    check_tensor(a, "a", ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor(b, "b", ndim=2, dtypes=FLOAT_DTYPES)
    if b.shape != a.shape:
        raise ValueError(f"b: shape {tuple(b.shape)} != a's {tuple(a.shape)}")
    for name, t in (("a_log", a_log), ("dt_bias", dt_bias)):
        check_tensor(t, name, ndim=1, dtypes=FLOAT_DTYPES)
        check_dim(t, name, 0, a.shape[1], "a's heads")


def causal_conv1d(
    x: torch.Tensor,  # x: [T, channels], one sequence's inputs
    weight: torch.Tensor,  # weight: [channels, kernel], depthwise
    state: torch.Tensor | None = None,  # state: [channels, kernel], the inputs before x (None: zeros, a new sequence)
) -> tuple[torch.Tensor, torch.Tensor]:  # (silu(conv(x)) [T, channels] x.dtype, new state [channels, kernel] x.dtype)
    """The depthwise causal convolution of one sequence, then SiLU; the new state is its last `kernel` inputs.

    As Hugging Face's causal_conv1d_fn (a new sequence: zero left padding) and its continuation from a cached
    state (the state's inputs prepended, no padding): one F.conv1d in the weight's dtype, SiLU, rounded to
    x.dtype."""
    n, kernel = x.shape[0], weight.shape[1]
    xt = x.T[None]  # [1, channels, T]
    w = weight[:, None, :]
    if state is None:
        out = F.conv1d(xt.to(weight.dtype), w, padding=kernel - 1, groups=w.shape[0])[..., :n]
        full = F.pad(xt, (max(kernel - n, 0), 0))
    else:
        full = torch.cat([state[None].to(x.dtype), xt], dim=-1)
        out = F.conv1d(full.to(weight.dtype), w, groups=w.shape[0])[..., -n:]
    return F.silu(out).to(x.dtype)[0].T, full[0, :, -kernel:]


def check_causal_conv1d(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor | None = None) -> None:
    check_tensor(x, "x", ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor(weight, "weight", ndim=2, dtypes=FLOAT_DTYPES)
    check_dim(weight, "weight", 0, x.shape[1], "x's channels")
    if state is not None:
        check_tensor(state, "state", ndim=2, dtypes=FLOAT_DTYPES)
        if state.shape != weight.shape:
            raise ValueError(f"state: shape {tuple(state.shape)} != weight's [channels, kernel] {tuple(weight.shape)}")


def causal_conv1d_update(
    x: torch.Tensor,  # x: [batch, channels], one new input per sequence
    weight: torch.Tensor,  # weight: [channels, kernel]
    state: torch.Tensor,  # state: [batch, channels, kernel], each sequence's last inputs, oldest first
) -> tuple[torch.Tensor, torch.Tensor]:  # (out [batch, channels] x.dtype, new state [batch, channels, kernel])
    """One decode token of `causal_conv1d`, as Hugging Face's causal_conv1d_update: the state and x side by side,
    an unpadded F.conv1d whose last output is the token's, SiLU; the state becomes the last `kernel` inputs."""
    full = torch.cat([state, x[..., None].to(state.dtype)], dim=-1).to(weight.dtype)  # [batch, channels, kernel + 1]
    out = F.conv1d(full, weight[:, None, :], groups=weight.shape[0])[..., -1]
    return F.silu(out).to(x.dtype), full[..., 1:].to(state.dtype)


def check_causal_conv1d_update(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor) -> None:
    check_tensor(x, "x", ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor(weight, "weight", ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor(state, "state", ndim=3, dtypes=FLOAT_DTYPES)
    check_dim(weight, "weight", 0, x.shape[1], "x's channels")
    expected = (x.shape[0], *weight.shape)
    if tuple(state.shape) != expected:
        raise ValueError(f"state: shape {tuple(state.shape)} != [batch, channels, kernel] {expected}")


def gated_rms_norm(
    x: torch.Tensor,  # x: [rows, dv], the recurrence's output
    gate: torch.Tensor,  # gate: [rows, dv] (z)
    weight: torch.Tensor,  # weight: [dv], x.dtype
    eps: float,
) -> torch.Tensor:  # [rows, dv], x.dtype
    """`weight * rms_normalise(x) * silu(gate)`, rounded as Hugging Face's Qwen3NextRMSNormGated: the normalised
    value rounds to x.dtype, the weight multiply is in x.dtype, then the product with the fp32 silu(gate)
    is fp32 and rounds once to x.dtype."""
    xf = x.to(torch.float32)
    normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return ((weight * normed) * F.silu(gate.to(torch.float32))).to(x.dtype)


def check_gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    check_tensor(x, "x", ndim=2, dtypes=FLOAT_DTYPES)
    check_tensor(gate, "gate", ndim=2, dtypes=FLOAT_DTYPES)
    if gate.shape != x.shape:
        raise ValueError(f"gate: shape {tuple(gate.shape)} != x's {tuple(x.shape)}")
    check_tensor(weight, "weight", ndim=1, dtypes=(x.dtype,))
    check_dim(weight, "weight", 0, x.shape[1], "x's last dim")


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
