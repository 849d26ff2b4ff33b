"""Paged decode attention's peers, one function each: what `bench bandwidth --workload attn-decode` times and
what the gates run in place of the engine's arms (lab/gates/peer_attention.py).

FlashInfer 0.5.3 `BatchDecodeWithPagedKVCacheWrapper` reads the engine's own paged cache (NHD: [pages,
page_size, Hkv, D], the engine's layout) through the same block tables; SDPA runs on contiguous copies of
each sequence's K/V. A sliding window W (the W most recent keys, the query's own included) is FlashInfer's
`window_left = W - 1`, and for SDPA the last W keys of the copy (one query row: the same set).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch
import torch.nn.functional as F

FLASHINFER_WANTED = "flashinfer-python==0.5.3"
FLASHINFER_WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended float workspace per wrapper
# FlashInfer's decode kernel without tensor cores is compiled for these query heads per KV head
# (DISPATCH_GQA_GROUP_SIZE); with tensor cores it runs its prefill kernel, which takes any group
FLASHINFER_DECODE_GROUPS = (1, 2, 3, 4, 8)


def import_flashinfer() -> ModuleType:
    """The flashinfer module, or a RuntimeError that names the package and version to install."""
    try:
        import flashinfer  # why: an optional package, only the FlashInfer peers need it
    except ImportError:
        raise RuntimeError(f"not installed (pip install {FLASHINFER_WANTED})") from None
    return flashinfer


def page_table(
    table: torch.Tensor,  # [batch, max_blocks] int32: the engine's block tables
    lens: torch.Tensor,  # [batch] int32: keys per sequence
    block: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # indptr [batch + 1], indices [pages], last [batch]
    """The block tables as FlashInfer's CSR page table (reads `lens` on the host)."""
    n = [-(-int(x) // block) for x in lens.tolist()]  # blocks in use per sequence
    indptr = torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32, device=table.device)
    indices = torch.cat([table[b, : n[b]] for b in range(table.shape[0])]).to(torch.int32)
    last = torch.tensor([int(x) - (c - 1) * block for x, c in zip(lens.tolist(), n)], dtype=torch.int32)
    return indptr, indices, last.to(table.device)


class FlashInferDecode:
    """One `BatchDecodeWithPagedKVCacheWrapper` (NHD), with or without tensor cores: `plan` for one batch's
    tables, lengths and window, then `run` as often as that plan holds (every layer with that window)."""

    def __init__(self, tensor_cores: bool, device: torch.device) -> None:
        flashinfer = import_flashinfer()
        workspace = torch.zeros(FLASHINFER_WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", use_tensor_cores=tensor_cores)

    def plan(
        self,
        q: torch.Tensor,  # [batch, Hq, D]
        k: torch.Tensor,  # [pages, page_size, Hkv, D]
        table: torch.Tensor,
        lens: torch.Tensor,
        scale: float,
        window: int | None = None,
    ) -> None:
        indptr, indices, last = page_table(table, lens, k.shape[1])
        self.wrapper.plan(
            indptr,
            indices,
            last,
            q.shape[1],
            k.shape[2],
            q.shape[2],
            k.shape[1],
            window_left=-1 if window is None else window - 1,
            q_data_type=q.dtype,
            kv_data_type=k.dtype,
            sm_scale=scale,
        )

    def run(self, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:  # [batch, Hq, D]
        return self.wrapper.run(q, kv)

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        table: torch.Tensor,
        lens: torch.Tensor,
        scale: float,
        window: int | None = None,
    ) -> torch.Tensor:
        """paged_decode_attention's signature: plan on these tables, then run (eager only: plan reads the host)."""
        self.plan(q, k, table, lens, scale, window)
        return self.run(q.contiguous(), (k, v))


def flashinfer_prepare(tensor_cores: bool) -> Callable:
    """prepare() of a FlashInfer peer in the bench: one wrapper per input set, planned before timing."""

    def prepare(q, k, v, table, lens, scale):
        peer = FlashInferDecode(tensor_cores, q.device)
        peer.plan(q, k, table, lens, scale)
        return peer, q, (k, v)

    return prepare


def flashinfer_run(peer: FlashInferDecode, q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return peer.run(q, kv)


def sdpa(backend_name: str) -> Callable[..., torch.Tensor]:
    """The SDPA peer on one backend (`SDPBackend` member name): q [B, Hq, 1, D] against K/V [B, Hkv, n, D]."""

    def run(q4: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, scale: float) -> torch.Tensor:
        from torch.nn.attention import (  # why: only the SDPA peers need it
            SDPBackend,
            sdpa_kernel,
        )

        with sdpa_kernel(getattr(SDPBackend, backend_name)):
            return F.scaled_dot_product_attention(q4, kc, vc, scale=scale, enable_gqa=True)

    return run


def contiguous(q, k, v, table, lens, scale):
    """The bench's input set laid out contiguously per sequence, [batch, Hkv, ctx, D] (every length equal)."""
    b, n = table.shape
    ctx = int(lens[0])
    kc = k[table.long()].reshape(b, n * k.shape[1], *k.shape[2:])[:, :ctx].transpose(1, 2).contiguous()
    vc = v[table.long()].reshape(b, n * v.shape[1], *v.shape[2:])[:, :ctx].transpose(1, 2).contiguous()
    return q[:, :, None, :], kc, vc, scale


def sequence_kv(
    k: torch.Tensor,  # [pages, page_size, Hkv, D]
    v: torch.Tensor,
    row: torch.Tensor,  # [max_blocks]: one sequence's block table
    n: int,  # its keys
    window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:  # each [1, Hkv, keys, D]: the keys the query attends
    """One sequence's keys copied out of the paged cache, laid out [keys, Hkv, D] (BSHD strides: cuDNN's
    ragged path, which `TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1` takes instead of a new graph per length)."""
    block = k.shape[1]
    used = row[: -(-n // block)].long()
    start = 0 if window is None else max(0, n - window)
    kc = k[used].reshape(-1, *k.shape[2:])[start:n].transpose(0, 1)[None]
    vc = v[used].reshape(-1, *v.shape[2:])[start:n].transpose(0, 1)[None]
    return kc, vc


def sdpa_paged(backend_name: str) -> Callable[..., torch.Tensor]:
    """The SDPA peer with paged_decode_attention's signature: each sequence's K/V copied out of the paged
    cache (its window's keys only), then SDPA on that backend, one sequence at a time (reads the lengths on
    the host: eager only)."""
    attend = sdpa(backend_name)

    def run(
        q: torch.Tensor,  # [batch, Hq, D]
        k: torch.Tensor,
        v: torch.Tensor,
        table: torch.Tensor,
        lens: torch.Tensor,
        scale: float,
        window: int | None = None,
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        for b, n in enumerate(lens.tolist()):
            kc, vc = sequence_kv(k, v, table[b], int(n), window)
            if kc.shape[2] == 1:  # cuDNN refuses one key; one logit's softmax is exactly 1, so the output is its V
                out[b] = vc[0, :, 0, :].repeat_interleave(q.shape[1] // vc.shape[1], dim=0)
                continue
            out[b] = attend(q[b][None, :, None, :].contiguous(), kc, vc, scale)[0, :, 0, :]
        return out

    return run
