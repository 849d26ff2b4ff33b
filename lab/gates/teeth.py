"""The gates' teeth: seeded rounding bugs the near-tie razor must catch, twins it must let pass, catch rates.

`python -m lab gate teeth [--seeds 10] [--bugs ...]` (or `python -m lab.gates.teeth`) runs, for each
seeded bug and each prompt seed, the near-tie razor at its defaults (16 prompts x 64 tokens, the checkpoint's
dtype and bfloat16, band 0.5 nats, near-ties at most 1% of the positions) and, for comparison, the razor at
its former defaults (4 prompts x 16 tokens, no near-tie budget; in bfloat16, where float32 sees nothing) and
the token gate at its defaults, all on the CPU against transformers; it prints the catch rate of each. The good twins are
reorderings a correct kernel may make (fp32 accumulation in another order): the razor should pass them.

The bugs patch the pure-torch references (engine/ops/, and the kernel table's pointers to them) for the
duration of one run; they are the engine's own rounding points moved, as a fast kernel could move them.

`--razor fp32-probs` measures the razor's other setting (engine/kernels/table.py FP32_PROBS_RAZOR: the online oracle,
wider budgets, and the log-prob distance of the engine's own top-20 log-probs from the oracle's, per dtype) the same
way, on an engine whose attention is an online softmax as a tensor-core arm (and SDPA's own kernels) computes it:
fp32 scores and statistics, the probabilities rounded only for the P.V product. The bugs outside attention go on top
of it, the reference's bf16 rounding of scores and probabilities is a bug, and the same softmax over two KV splits
is the good twin. `--prompt-sets 4` judges 4 x 16 prompts, the
sample at which the setting separates bugs from twins; `--device cuda` runs the references and the oracle on the
GPU, where the razor meets the oracle's production numerics.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from engine import kernels
from engine.flags import REFERENCE
from engine.model.config import checkpoint_dtype, load_config
from engine.ops import gemv, norm, paged_attn, rope
from lab.data.gate_models import write_gate_models
from lab.gates import harness
from lab.gates.ledger import write_record
from lab.gates.neartie import DEFAULT_BAND, DEFAULT_TOP_K
from lab.gates.oracle import Oracle, attend_online
from lab.gates.tokens import DEFAULT_PROMPT_LENS, RAZOR_NEW_TOKENS, RAZOR_PROMPT_LENS, default_prompts, token_gate

WINDOW_MODEL = "d64-g1"  # the gate model the window bug runs on (lab/data/gate_models.py): a window of 40


@contextlib.contextmanager
def patched(module: ModuleType, name: str, fn: Callable[..., Any]) -> Iterator[None]:
    """`module.name` replaced by `fn`, and so is every kernel-table op whose reference it is; restored after."""
    original = getattr(module, name)
    ops = [op for op in kernels.TABLE.values() if op.reference is original]
    setattr(module, name, fn)
    for op in ops:
        op.reference = fn
    try:
        yield
    finally:
        setattr(module, name, original)
        for op in ops:
            op.reference = original


# --- the seeded bugs ----------------------------------------------------------------------------------------
def _probs_fp32(
    qh: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """Attention with the probabilities left in fp32 (P@V in fp32, one rounding at the end)."""
    group = qh.shape[0] // k.shape[1]
    kh = k.transpose(0, 1).repeat_interleave(group, dim=0)
    vh = v.transpose(0, 1).repeat_interleave(group, dim=0)
    scores = (torch.matmul(qh, kh.transpose(1, 2)) * scale).masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
    return torch.einsum("hqk,hkd->hqd", probs, vh.float()).to(qh.dtype)  # fp32 math, as split-KV's reference


def _rms_round_after_weight(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm that multiplies by the weight in fp32 and rounds once, after it (HF rounds before)."""
    xf = x.float()
    return (weight.float() * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)


_RMS_NORM = norm.rms_norm


def _rms_eps_x10(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _RMS_NORM(x, weight, eps * 10)


def _rope_fp32(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE with the products and their sum in fp32, rounded once (HF rounds each product, then the sum)."""
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos.float()[:, None, :] + rotated * sin.float()[:, None, :]).to(x.dtype)


_EAGER_ATTEND = paged_attn._attend  # the reference: scores and probabilities rounded to the dtype


def _window_off_by_one(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """The sliding-window mask one key too wide: W + 1 most recent positions."""
    diff = q_pos[:, None] - k_pos[None, :]
    ok = diff >= 0
    if window is not None:
        ok &= diff <= window
    return ok


# --- the good twins: legitimate reorderings -----------------------------------------------------------------
def _linear_fp32_accumulate(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """A GEMV's arithmetic: upcast, fp32 products and sums in the matmul's order, one rounding."""
    y = torch.einsum("...k,nk->...n", x.float(), weight.float())
    return (y if bias is None else y + bias.float()).to(x.dtype)


def _attend_split_pv(
    qh: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """The reference's rounding points, with P@V summed in two halves in fp32 (a split-KV kernel's order)."""
    group = qh.shape[0] // k.shape[1]
    kh = k.transpose(0, 1).repeat_interleave(group, dim=0)
    vh = v.transpose(0, 1).repeat_interleave(group, dim=0)
    scores = (torch.matmul(qh, kh.transpose(1, 2)) * scale).masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(qh.dtype)
    h = (probs.shape[-1] + 1) // 2
    pf, vf = probs.float(), vh.float()
    out = torch.einsum("hqk,hkd->hqd", pf[..., :h], vf[:, :h]) + torch.einsum("hqk,hkd->hqd", pf[..., h:], vf[:, h:])
    return out.to(qh.dtype)


_attend_online = attend_online  # the fp32-probs setting's base: the online oracle's own attention


def _decode_per_sequence(
    q: torch.Tensor,  # [batch, Hq, D]
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    context_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:  # [batch, Hq, D]
    """The decode reference through `paged_attn._attend` and `_allowed`, one sequence at a time. The reference
    decodes with its own batched copy of the eager rounding, so a patch of `_attend` (the fp32-probs base, the
    attention bugs and twins) or of `_allowed` would reach only the prefill without this."""
    k_flat = k_cache.reshape(-1, *k_cache.shape[2:])
    v_flat = v_cache.reshape(-1, *v_cache.shape[2:])
    out = torch.empty_like(q)
    for b, n in enumerate(context_lens.tolist()):
        k_seq, v_seq = paged_attn.gather_sequence(k_flat, v_flat, block_tables[b], n, k_cache.shape[1])
        pos = torch.arange(n, device=q.device)
        allowed = paged_attn._allowed(pos[-1:], pos, sliding_window)
        out[b] = paged_attn._attend(q[b][:, None, :], k_seq, v_seq, allowed, scale)[:, 0, :]
    return out


@contextlib.contextmanager
def _online_base() -> Iterator[None]:
    """The fp32-probs setting's engine: prefill and decode attention as an online softmax."""
    with (
        patched(paged_attn, "paged_decode_attention", _decode_per_sequence),
        patched(paged_attn, "_attend", _attend_online),
    ):
        yield


def _attend_online_split(
    qh: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """The online softmax over two KV splits (a split-KV kernel's order)."""
    return _attend_online(qh, k, v, allowed, scale, splits=2)


@dataclass(frozen=True)
class Seeded:
    name: str
    what: str
    patch: Callable[[], contextlib.AbstractContextManager[None]]
    good: bool = False  # a twin the razor must pass
    window: bool = False  # runs on the window gate model (a window bug is invisible without one)
    razors: tuple[str, ...] = ("eager",)  # the razor settings (kernels.RAZORS) it is measured under


BOTH = ("eager", "fp32-probs")
SEEDED: dict[str, Seeded] = {
    s.name: s
    for s in (
        Seeded(
            "probs-fp32",
            "attention probabilities left in fp32",
            lambda: patched(paged_attn, "_attend", _probs_fp32),
        ),
        Seeded(
            "rmsnorm-round-after-weight",
            "RMSNorm rounds after the weight multiply",
            lambda: patched(norm, "rms_norm", _rms_round_after_weight),
            razors=BOTH,
        ),
        Seeded("eps-x10", "RMSNorm eps x10", lambda: patched(norm, "rms_norm", _rms_eps_x10), razors=BOTH),
        Seeded(
            "rope-fp32",
            "RoPE in fp32, one rounding",
            lambda: patched(rope, "apply_rope_neox", _rope_fp32),
            razors=BOTH,
        ),
        Seeded(
            "window-off-by-one",
            "sliding window one key too wide",
            lambda: patched(paged_attn, "_allowed", _window_off_by_one),
            window=True,
            razors=BOTH,
        ),
        Seeded(
            "probs-rounded",
            "attention scores and probabilities rounded to the dtype (the reference's rounding)",
            lambda: patched(paged_attn, "_attend", _EAGER_ATTEND),
            razors=("fp32-probs",),
        ),
        Seeded(
            "good-linear-fp32-accumulate",
            "linear as a GEMV: fp32 accumulation, one rounding",
            lambda: patched(gemv, "linear", _linear_fp32_accumulate),
            good=True,
            razors=BOTH,
        ),
        Seeded(
            "good-attention-split-pv",
            "P@V summed in two fp32 halves",
            lambda: patched(paged_attn, "_attend", _attend_split_pv),
            good=True,
        ),
        Seeded(
            "good-online-split",
            "an online softmax over two splits, probabilities rounded for P.V",
            lambda: patched(paged_attn, "_attend", _attend_online_split),
            good=True,
            razors=("fp32-probs",),
        ),
    )
}
BUGS = [s for s in SEEDED.values() if not s.good and "eager" in s.razors]
# the engine each setting is measured on: its own reference, or an online softmax (fp32 statistics, P rounded for P.V)
BASES: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "eager": contextlib.nullcontext,
    "fp32-probs": _online_base,
}


def seeded_for(razor: str) -> list[Seeded]:
    """The bugs and twins measured under one razor setting."""
    return [s for s in SEEDED.values() if razor in s.razors]


class Oracles:
    """One transformers model per (directory, dtype, attention) on one device, loaded on first use."""

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self._loaded: dict[tuple[Path, str, str], Oracle] = {}

    def __call__(self, model_dir: Path, dtype: str, attn: str = "eager") -> Oracle:
        key = (model_dir, dtype, attn)
        if key not in self._loaded:
            self._loaded[key] = Oracle(model_dir, harness.DTYPES[dtype], self.device, attn_implementation=attn)
        return self._loaded[key]


def razor_caught(
    seeded: Seeded,
    model_dir: Path,
    seed: int,
    oracles: Oracles,
    razor: kernels.Razor = kernels.EAGER_RAZOR,
    prompt_sets: int = 1,
) -> bool:
    """Whether the near-tie razor at `razor`'s setting fails with the bug in, on that setting's engine
    (BASES): 16 x 64 (`prompt_sets` times the 16 prompt lengths), each default dtype, on the oracles' device."""
    prompts = default_prompts(load_config(model_dir).vocab_size, seed, RAZOR_PROMPT_LENS * prompt_sets)
    for dtype in dict.fromkeys([checkpoint_dtype(load_config(model_dir)), "bfloat16"]):
        setup = _setup(model_dir, prompts, RAZOR_NEW_TOKENS, dtype, oracles.device)
        limit = razor.logprob_limit(dtype)
        with BASES[razor.name](), seeded.patch():
            ours, tops = setup.ours_with_logprobs() if limit is not None else (setup.ours(), None)
        result = harness.neartie(
            setup,
            ours=ours,
            oracle=oracles(model_dir, dtype, razor.oracle_attn),
            max_near_tie_rate=razor.max_near_tie_rate,
            max_out_of_band_rate=razor.max_out_of_band_rate,
            engine_logprobs=tops,
            max_logprob_dist=limit,
        )
        if not result.passed:
            return True
    return False


def former_razor_caught(seeded: Seeded, model_dir: Path, seed: int, oracles: Oracles) -> tuple[bool, bool]:
    """(token gate, former razor) at the former defaults in bfloat16 (in float32 neither sees a bf16 bug):
    4 prompts x 16 tokens, no near-tie budget."""
    prompts = default_prompts(load_config(model_dir).vocab_size, seed, DEFAULT_PROMPT_LENS)
    setup = _setup(model_dir, prompts, 16, "bfloat16", oracles.device)
    oracle = oracles(model_dir, setup.dtype)
    with seeded.patch():
        ours = setup.ours()
    tokens = token_gate(prompts, ours, [oracle.greedy(p, 16) for p in prompts])
    razor = harness.neartie(setup, DEFAULT_BAND, DEFAULT_TOP_K, ours=ours, oracle=oracle, max_near_tie_rate=1.0)
    return not tokens.passed, not razor.passed


def _setup(model_dir: Path, prompts: list[list[int]], new: int, dtype: str, device: str) -> harness.Setup:
    """The engine side of one run. On a GPU every op runs its torch reference (the bugs patch those), so the
    device changes only where the oracle and the references compute, not which code is judged."""
    flags = REFERENCE if device != "cpu" else None
    return harness.Setup(model_dir, prompts, new, dtype, device=device, flags=flags)


def model_for(seeded: Seeded, window_dir: Path | None) -> Path:
    if seeded.window:
        if window_dir is None:
            raise ValueError(f"{seeded.name}: needs the window gate model ({WINDOW_MODEL})")
        return window_dir
    return harness.TINY_MODEL


def window_model_dir(out: Path) -> Path:
    return write_gate_models(out, [WINDOW_MODEL])[WINDOW_MODEL]


CATCH_RATE = 0.9  # a bug is caught when the razor fails at least this share of its seeds
FALSE_ALARM_RATE = 0.1  # a correct twin passes when the razor fails at most this share of its seeds


def record_kind(caught_by: dict[str, dict[str, Any]]) -> tuple[str, tuple[int, int] | None]:
    """The ledger kind of a teeth run and its comparator self-test: the seeded bugs are corruption the razor must
    report, so a run with bugs is a gate whose self-test is (bugs seeded, bugs caught at the catch rate); correct
    twins alone seed none, and their false-alarm counts are a measurement (a note)."""
    bugs = [c for c in caught_by.values() if not c["good_twin"]]
    if not bugs:
        return "note", None
    return "gate", (len(bugs), sum(c["caught"] >= CATCH_RATE * c["seeds"] for c in bugs))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab gate teeth", description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=10, help="prompt seeds per bug (default 10)")
    p.add_argument(
        "--bugs",
        nargs="+",
        metavar="NAME",
        help="seeded bugs and twins of the --razor setting (default all of them; eager: "
        f"{' '.join(s.name for s in seeded_for('eager'))}; fp32-probs: {' '.join(s.name for s in seeded_for('fp32-probs'))})",
    )
    p.add_argument(
        "--former", action="store_true", help="also the token gate and the razor at the former defaults, in bfloat16"
    )
    p.add_argument("--models-dir", type=Path, default=Path("/tmp/rowgate-gate-models"), help="window gate model")
    p.add_argument(
        "--razor",
        choices=list(kernels.RAZORS),
        default="eager",
        help="the razor setting measured (engine/kernels/table.py RAZORS): eager (the default), or fp32-probs, on an "
        "engine whose attention is an online softmax (fp32 statistics), against the online oracle",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="where the engine's references and the oracle run (default cpu; cuda: the oracle's GPU numerics, as "
        "the razor meets them in a flip)",
    )
    p.add_argument(
        "--prompt-sets",
        type=int,
        default=1,
        metavar="K",
        help="judge K x 16 prompts of the razor's lengths per run (default 1: the razor's own 16 x 64; the budgets "
        "are rates, so a larger sample separates a bug's count from a correct reordering's)",
    )
    p.add_argument("--json", type=Path, metavar="FILE", help="also write {passed, examined, summary} here (lab ci)")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="also write the catch rates as a ledger record into DIR")
    args = p.parse_args(argv)
    razor = kernels.RAZORS[args.razor]
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"error: --device {args.device}: no CUDA device here")
        return 2
    known = [s.name for s in seeded_for(razor.name)]
    names = args.bugs or known
    unknown = [n for n in names if n not in known]
    errors = [
        *(
            [f"no seeded bug {', '.join(unknown)} under --razor {razor.name} (known: {', '.join(known)})"]
            * bool(unknown)
        ),
        *(["--seeds < 1"] * (args.seeds < 1)),
        *(["--prompt-sets < 1"] * (args.prompt_sets < 1)),
        *(["--former measures the eager setting only"] * (args.former and razor.name != "eager")),
    ]
    if errors:
        print("\n".join(f"error: {e}" for e in errors))
        return 2
    torch.set_num_threads(1)  # tiny models: one thread is fastest, and the results do not depend on it
    oracles = Oracles(args.device)
    window_dir = window_model_dir(args.models_dir) if any(SEEDED[n].window for n in names) else None
    limits = ", ".join(f"{dt} {v:g}" for dt, v in razor.max_logprob_dist)
    print(
        f"razor: {razor.name} on {args.device}: oracle attention {razor.oracle_attn}, near-ties at most {razor.max_near_tie_rate}, "
        f"out of band at most {razor.max_out_of_band_rate}"
        + (f", log-prob distance at most {limits} nats" if limits else "")
    )
    print(f"{'seeded':30s} {'razor':>6s}" + (f" {'former':>6s} {'tokens':>6s}" if args.former else "") + "  what")
    worst, rates, caught_by = 0, [], {}
    for name in names:
        s = SEEDED[name]
        t0 = time.perf_counter()
        model = model_for(s, window_dir)
        caught = [razor_caught(s, model, seed, oracles, razor, args.prompt_sets) for seed in range(args.seeds)]
        rate = f"{sum(caught)}/{args.seeds}"
        cols = f"{name:30s} {rate:>6s}"
        if args.former:
            former = [former_razor_caught(s, model, seed, oracles) for seed in range(args.seeds)]
            cols += f" {sum(r for _, r in former)}/{args.seeds}".rjust(
                7
            ) + f" {sum(t for t, _ in former)}/{args.seeds}".rjust(7)
        verdict = sum(caught) < CATCH_RATE * args.seeds if not s.good else sum(caught) > FALSE_ALARM_RATE * args.seeds
        worst = max(worst, int(verdict))
        kind = "pass expected" if s.good else "catch expected"
        print(f"{cols}  {s.what} ({kind}; {time.perf_counter() - t0:.0f}s)", flush=True)
        rates.append(f"{name} {rate}")
        caught_by[name] = {"caught": sum(caught), "seeds": args.seeds, "good_twin": s.good}
    verdict = f"teeth: {'FAIL' if worst else 'PASS'}: razor catch rate >= 9/10 for every bug, false alarms <= 1/10"
    print(verdict)
    summary = f"{razor.name} on {args.device}: " + ", ".join(rates) + f" ({verdict.split(':')[1].strip()})"
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        examined = len(names) * args.seeds
        args.json.write_text(json.dumps({"passed": not worst, "examined": examined, "summary": summary}) + "\n")
    if args.ledger:
        command = "python -m lab gate teeth " + " ".join(argv if argv is not None else sys.argv[1:])
        results = {"razor": razor.name, "passed": not worst, "prompt_sets": args.prompt_sets, "bugs": caught_by}
        kind, selftest = record_kind(caught_by)
        at = write_record(args.ledger, f"teeth-{razor.name}-{args.device.split(':')[0]}", ["ENGINE-PERSISTENT"],
                          command, args.device, "teeth: " + summary, results, kind=kind, selftest=selftest)  # fmt: skip
        print(f"ledger: {at}")
    return worst


if __name__ == "__main__":
    sys.exit(main())
