"""A peer's paged decode attention in place of the engine's arms, for one gate run: the razor's calibration.

`python -m lab gate neartie|tokens --attn-peer NAME` runs the model with every `paged_decode_attention`
call taken by the peer (FlashInfer or SDPA, lab/bench/attn_peers.py: the functions the attention
benchmark times), on the engine's own paged cache and block tables, so the gate judges a model whose decode
attention is a production kernel. The peer is the op's injected arm (`kernels.Op.injected`) for the run and
is counted as `paged_decode_attention/peer:NAME`; a gate whose peer ran 0 times fails. Prefill attention is
still the engine's (only decode steps read the peer), and decode steps run eager (`VT_EAGER`): FlashInfer's
plan and the SDPA peers' per-sequence copies read the lengths on the host, which a CUDA graph cannot replay.
Sliding windows: every peer takes them (FlashInfer's `window_left = W - 1`; SDPA on the window's keys).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from engine import kernels
from engine.flags import FlagSnapshot
from engine.model.config import ModelConfig
from lab.bench.attn_peers import FLASHINFER_DECODE_GROUPS, FlashInferDecode, import_flashinfer, sdpa_paged

ENGINE = "engine"  # no peer: the engine's own arms, as the flags choose them
OP = "paged_decode_attention"
HALF = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Peer:
    name: str
    what: str
    make: Callable[[torch.device], Callable[..., torch.Tensor]]  # the kernel, with the op's signature
    dtypes: tuple[torch.dtype, ...] | None = None  # None: any
    cuda_only: bool = True
    flashinfer: bool = False  # needs the flashinfer package
    groups: tuple[int, ...] | None = None  # query heads per KV head it takes (None: any)
    head_dims: tuple[int, ...] | None = None

    @property
    def arm(self) -> str:
        """The name its calls are counted under: `paged_decode_attention/peer:NAME`."""
        return f"peer:{self.name}"


PEERS: dict[str, Peer] = {
    p.name: p
    for p in (
        Peer(
            "flashinfer-tc",
            "FlashInfer 0.5.3 BatchDecodeWithPagedKVCacheWrapper with tensor cores (its prefill kernel)",
            lambda device: FlashInferDecode(True, device),
            HALF,
            flashinfer=True,
            head_dims=(64, 128, 256),
        ),
        Peer(
            "flashinfer",
            "FlashInfer 0.5.3 BatchDecodeWithPagedKVCacheWrapper, its decode kernel",
            lambda device: FlashInferDecode(False, device),
            HALF,
            flashinfer=True,
            groups=FLASHINFER_DECODE_GROUPS,
            head_dims=(64, 128, 256),
        ),
        Peer("sdpa-cudnn", "SDPA, cuDNN backend, on contiguous copies", lambda _: sdpa_paged("CUDNN_ATTENTION"), HALF),
        Peer("sdpa-flash", "SDPA, flash backend, on contiguous copies", lambda _: sdpa_paged("FLASH_ATTENTION"), HALF),
        Peer(
            "sdpa-math",
            "SDPA, math backend, on contiguous copies (any dtype, CPU too)",
            lambda _: sdpa_paged("MATH"),
            cuda_only=False,
        ),
    )
}
CHOICES = (ENGINE, *PEERS)


def refusal(name: str, config: ModelConfig, dtype: torch.dtype, device: str) -> str | None:
    """Why peer `name` cannot run this model in `dtype` on `device` (None: it can), naming the fix."""
    if name == ENGINE:
        return None
    peer = PEERS[name]
    if peer.flashinfer:
        try:
            import_flashinfer()
        except RuntimeError as exc:
            return f"--attn-peer {name} needs FlashInfer: {exc}"
    if peer.cuda_only and not device.startswith("cuda"):
        return f"--attn-peer {name} runs on CUDA only: pass --device cuda (sdpa-math runs on the CPU)"
    if peer.dtypes is not None and dtype not in peer.dtypes:
        takes = "/".join(str(t).removeprefix("torch.") for t in peer.dtypes)
        return f"--attn-peer {name} takes {takes}, not {str(dtype).removeprefix('torch.')}: pass --dtype bfloat16"
    group = config.num_attention_heads // config.num_key_value_heads
    if peer.groups is not None and group not in peer.groups:
        return (
            f"--attn-peer {name} takes {', '.join(map(str, peer.groups))} query heads per KV head; this model has "
            f"{group} ({config.num_attention_heads}/{config.num_key_value_heads}): flashinfer-tc takes any"
        )
    if peer.head_dims is not None and config.head_dim not in peer.head_dims:
        dims = ", ".join(map(str, peer.head_dims))
        return f"--attn-peer {name} takes head_dim {dims}; this model has {config.head_dim}"
    return None


def flags(name: str, base: FlagSnapshot) -> FlagSnapshot:
    """The run's flags: `base`, with decode steps eager for a peer (its host reads cannot be captured)."""
    return base if name == ENGINE else base.with_(VT_EAGER=True)


@contextmanager
def injected(name: str, device: str | torch.device) -> Iterator[Peer | None]:
    """Within: every paged_decode_attention call runs peer `name` (ENGINE: nothing changes)."""
    if name == ENGINE:
        yield None
        return
    peer = PEERS[name]
    op = kernels.paged_decode_attention
    if op.injected is not None:
        raise RuntimeError(f"{OP} already runs {op.injected.name}; one peer at a time")
    op.injected = kernels.Arm(peer.arm, (), lambda *_, **__: True, peer.what, peer.make(torch.device(device)))
    try:
        yield peer
    finally:
        op.injected = None


def calls(name: str, seen: kernels.Counts | None = None) -> int:
    """paged_decode_attention calls that peer `name` ran, in `seen` (default: the counters now)."""
    seen = seen or kernels.counts()
    return seen.ran[(OP, PEERS[name].arm)]
