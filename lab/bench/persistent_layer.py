"""One decode layer two ways in one process: today's chain (the engine's Qwen3DecoderLayer through the kernel table)
against the persistent decode layer (engine/cuda/persistent.py: the whole layer in one launch), on Qwen3-0.6B's layer
shape with seeded random weights and a paged K/V cache (lab/persistent/case.py, the inputs the persistent kernel's
GPU tests use). Each arm is timed as a CUDA graph over rotating input sets (so the weights come from DRAM), the arms
interleaved rep by rep, rep 0 dropped, medians with min-max bands and per-pair ratios (lab.bench.stats).

    python -m lab bench persistent_layer [--batches 1,8,32] [--context 1024] [--reps 12] [--ledger DIR]

Prints one table, last: per batch both medians in microseconds, the ratio (chain time over the persistent layer's:
> 1 is the persistent layer faster) with its verdict, the share of the layer's weight-streaming floor each reaches
(the layer's weight bytes over the device-to-device copy bandwidth measured in the same run, as `bench decode`'s
floor), and the largest difference of the layer's outputs. A persistent layer that raises or sets its error word is
reported as failed with its message, beside the chain's row."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch

from engine.cuda import persistent
from engine.cuda.persistent_schedule import build as build_schedule
from engine.flags import FlagSnapshot
from engine.kernels.layer import persistent_weights
from engine.model.batch import ForwardBatch
from lab.bench.bandwidth import copy_bandwidth
from lab.bench.stats import Band, ab_verdict, drop_warmup
from lab.bench.timing import arm_timer, describe, first_line, sets_for
from lab.gates.ledger import figure, write_record
from lab.persistent import case as C

CONTEXT = 1024
BATCHES = (1, 8, 32)
# the time model's tiles, as the persistent kernel's GPU tests (tests/engine/cuda/test_persistent.py) build them
TILES = persistent.TILES


def layer_weight_bytes(hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, elt: int) -> int:
    """Bytes of one Qwen3 layer's weights, each read once per step: q/k/v, o, gate/up, down, the two layer norms and
    the q/k norms."""
    q, kv = heads * head_dim, kv_heads * head_dim
    matrices = (q + 2 * kv) * hidden + hidden * q + 2 * inter * hidden + hidden * inter
    return (matrices + 2 * hidden + 2 * head_dim) * elt


def floor_share(weight_bytes: int, copy_bytes_per_s: float, seconds: float) -> float:
    """The weight-streaming floor (weight bytes over the copy bandwidth) as a share of a measured time: 1.0 is at the
    floor."""
    return weight_bytes / copy_bytes_per_s / seconds


def parse_batches(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated batch sizes, e.g. 1,8,32") from None
    if not out or any(b < 1 for b in out):
        raise argparse.ArgumentTypeError(f"{text!r}: every batch size must be at least 1")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab bench persistent_layer", description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=parse_batches, default=list(BATCHES), help="comma-separated (default 1,8,32)")
    p.add_argument("--context", type=int, default=CONTEXT, help="every sequence's context, this step's token included")
    p.add_argument("--reps", type=int, default=12, help="repetitions per arm, interleaved (rep 0 dropped)")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record (the table, per batch) into DIR")
    p.add_argument("--allow-dirty", action="store_true", help="write the record from a tree that differs from HEAD")
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.reps < 2:
        p.error(f"--reps {args.reps}: need at least 2 (rep 0 is dropped)")
    if args.context < 1:
        p.error(f"--context {args.context}: must be at least 1")
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (the chain's kernels and the persistent layer run only on a GPU)")
        return 0

    dev, dtype = torch.device("cuda"), torch.bfloat16
    ceiling = copy_bandwidth(dev, 6)
    rows = [measure(b, args.context, args.reps, dev, dtype, ceiling) for b in args.batches]
    print(table(rows, ceiling, torch.cuda.get_device_name(dev), args.context))
    if args.ledger:
        argv_ = argv if argv is not None else sys.argv[1:]
        command = "python -m lab bench persistent_layer " + " ".join(argv_)
        print(f"ledger: {record(args.ledger, rows, ceiling, args.context, command, args)}")
    return 0


def table(rows: list[dict[str, Any]], ceiling: float, device: str, context: int) -> str:
    wb = rows[0]["weight_bytes"] if rows else 0
    out = [
        f"persistent layer vs the chain, Qwen3-0.6B's layer, bf16, context {context}, {device}",
        f"floor: {wb} weight bytes over {ceiling / 1e12:.2f} TB/s (device-to-device copy, measured in this run)",
        f"{'batch':>5}{'chain us':>10}{'persist us':>12}{'ratio':>8}  {'verdict':<14}{'chain %fl':>10}"
        f"{'persist %fl':>12}{'max |diff|':>11}  timing",
    ]
    for r in rows:
        out.append(
            f"{r['batch']:>5}{_num(r, 'chain_us', '.2f'):>10}{_num(r, 'persistent_us', '.2f'):>12}"
            f"{_num(r, 'ratio', '.3f'):>8}  {r.get('verdict') or '-':<14}{_num(r, 'chain_floor_pct', '.1f'):>10}"
            f"{_num(r, 'persistent_floor_pct', '.1f'):>12}{_num(r, 'diff', '.2e'):>11}  {r.get('timing', '-')}"
        )
        for arm in ("chain", "persistent"):
            if r.get(f"{arm}_error"):
                out.append(f"      {arm} FAILED: {r[f'{arm}_error']}")
    return "\n".join(out)


def _num(row: dict[str, Any], key: str, fmt: str) -> str:
    return "-" if row.get(key) is None else format(row[key], fmt)


def record(ledger: Path, rows: list[dict[str, Any]], ceiling: float, context: int, command: str, args: Any) -> Path:
    """One record: every batch's row; figures the b1 ratio (chain time over the persistent layer's) and the share of
    the weight floor the persistent layer reaches at b1, where b1 ran and the persistent layer did not fail."""

    b1 = next((r for r in rows if r["batch"] == 1), None)
    figures = []
    if b1 is not None and b1.get("ratio") is not None:
        figures.append(figure("b1_ratio", b1["ratio"], "x"))
        figures.append(figure("b1_floor_pct", b1["persistent_floor_pct"], "%"))
    parts = []
    for r in rows:
        if r.get("persistent_error"):
            parts.append(f"b{r['batch']} persistent failed ({r['persistent_error']})")
        elif r.get("ratio") is not None:
            parts.append(f"b{r['batch']} {r['ratio']:.2f}x ({r['verdict']}, {r['persistent_floor_pct']:.0f}% of floor)")
        else:
            parts.append(f"b{r['batch']} chain failed ({r.get('chain_error')})")
    summary = f"persistent layer vs the chain, Qwen3-0.6B's layer, bf16, context {context}: " + "; ".join(parts)
    return write_record(
        ledger,
        "persistent-layer-vs-chain",
        ["ENGINE-PERSISTENT"],
        command,
        "cuda",
        summary,
        {"context": context, "copy_bytes_per_s": ceiling, "batches": rows},
        kind="bench",
        figures=figures,
        allow_dirty=args.allow_dirty,
    )


# --- GPU -------------------------------------------------------------------------------------------------------------


def measure(
    batch: int,
    context: int,
    reps: int,
    dev: torch.device,
    dtype: torch.dtype,
    ceiling: float,
    n_sets: int | None = None,
) -> dict:
    """One batch's row over `n_sets` input sets (default: enough to move twice the L2 cache). Either arm failing is
    caught and named; the other arm is still timed where it can be (on the CPU the persistent arm refuses, which is
    how the tests take this path)."""

    elt = torch.tensor([], dtype=dtype).element_size()
    wb = layer_weight_bytes(1024, 16, 8, 128, 3072, elt)
    row: dict[str, Any] = {"batch": batch, "context": context, "weight_bytes": wb}
    sets = []
    try:
        sets = [make_set(batch, context, seed, dev, dtype) for seed in range(n_sets or sets_for(wb))]
        mlp, res2 = sets[0]["chain"]()
        chain_out = mlp + res2  # the persistent layer's `out`
        _sync(dev)
    except Exception as exc:  # noqa: BLE001 - a first GPU run reports, it does not stop
        row["chain_error"] = first_line(exc, 400)
        return row
    launches: list[_Launch] = []
    try:
        got = sets[0]["check"]()  # persistent.run: its refusals, the launcher's code and the error word
        row["diff"] = (got.float() - chain_out.float()).abs().max().item()
        launches = [s["launcher"]() for s in sets]
    except Exception as exc:  # noqa: BLE001
        row["persistent_error"] = first_line(exc, 400)
        _drain(dev)
    try:
        tc = arm_timer(lambda f: f(), [(s["chain"],) for s in sets], dev)
        tp = arm_timer(lambda f: f(), [(x.call,) for x in launches], dev) if launches else None
        chain_s, persist_s = [], []
        for rep in range(reps):  # interleaved: each pair ran back to back
            chain_s.append(tc.sample(rep))
            if tp is not None:
                persist_s.append(tp.sample(rep))
        timing = f"chain {describe(tc.as_record())}"
        if tp is not None:
            timing += f"; persistent {describe(tp.as_record())}"
        row["timing"] = timing
    except Exception as exc:  # noqa: BLE001
        row["timing_error"] = first_line(exc, 400)
        row.setdefault("chain_error", f"while timing: {row['timing_error']}")
        return row
    chain = Band.of(drop_warmup(chain_s))
    row.update(chain_us=chain.median * 1e6, chain_floor_pct=100 * floor_share(wb, ceiling, chain.median))
    if tp is not None:
        errors = [int(x.control[persistent.ERROR].item()) for x in launches if x.control is not None]
        if any(errors):
            row["persistent_error"] = f"error word {max(errors):#x} after the timed replays"
            return row
        v = ab_verdict(drop_warmup(chain_s), drop_warmup(persist_s))
        row.update(
            persistent_us=v.test.median * 1e6,
            persistent_floor_pct=100 * floor_share(wb, ceiling, v.test.median),
            ratio=v.median_ratio,
            verdict=v.label,
        )
    return row


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _drain(dev: torch.device) -> None:
    try:
        _sync(dev)
    except Exception:  # noqa: BLE001 - a sticky fault shows again in the chain's timing, which reports it
        pass


def make_set(batch: int, context: int, seed: int, dev: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """One input set: a seeded layer and decode step on the device, each arm with its own copy of the caches.
    `chain` runs today's layer, `check` the persistent layer through `persistent.run` (validated, synchronising),
    `launcher` makes the same launch without the host-side table build and error-word read, so a CUDA graph can
    hold it (made only once `check` passed: it loads the compiled kernel)."""

    case = C.make(C.QWEN3_0_6B, [context] * batch, seed=seed, device=dev, dtype=dtype)
    layer = case.layer
    s = case.step
    a: Any = layer.self_attn  # nn.Module attributes: typed loosely by torch
    assert s.x is not None and s.residual is not None  # a middle layer's step: its input and the running residual
    x, residual = s.x.to(dev, dtype), s.residual.to(dev, dtype)
    cos, sin = s.cos.to(dev, dtype).contiguous(), s.sin.to(dev, dtype).contiguous()
    slots, tables, lens = s.slot_mapping.to(dev), s.block_tables.to(dev), s.context_lens.to(dev)
    kc, vc = s.k_cache.to(dev, dtype), s.v_cache.to(dev, dtype)
    batch_ = ForwardBatch(
        is_prefill=False,
        slot_mapping=slots,
        kv_caches=[(kc.clone(), vc.clone())],
        block_tables=tables,
        context_lens=lens,
        flags=FlagSnapshot.defaults(),
    )

    def chain() -> tuple[torch.Tensor, torch.Tensor]:  # (mlp, res2): the next layer's norm forms their sum
        with torch.no_grad():
            return layer(x, residual, (cos, sin), batch_)

    def nan(width: int) -> torch.Tensor:  # a cell the kernel fails to write shows in the difference
        return torch.full((batch, width), float("nan"), dtype=dtype, device=dev)

    weights = persistent_weights(layer)
    # NaN-poisoned outputs: a cell the kernel fails to write shows in the difference
    t = persistent.tensors(
        x, residual, weights, (kc.clone(), vc.clone()), slots, (cos, sin), tables, lens, a.num_heads, context,
        float("nan"),
    )  # fmt: skip
    sch = build_schedule(case.shape(False, **TILES))
    eps, scale, window = layer.input_layernorm.eps, a.scaling, a.sliding_window
    kinds = persistent.BUILT

    def check() -> torch.Tensor:
        persistent.run(sch, kinds, t, eps, scale, window)
        _sync(dev)
        return t.out

    return {
        "chain": chain,
        "check": check,
        "launcher": lambda: _Launch(t, eps, scale, window),
    }


class _Launch:
    """The decode step's launch (`persistent.launch`: the table cached per shape, nothing read back), which a CUDA
    graph captures; `control` keeps the control words of the last launch made or captured, read after the timing."""

    def __init__(self, t: Any, eps: float, scale: float, window: int | None) -> None:
        self.t, self.eps, self.scale = t, eps, scale
        self.shape = persistent.decode_shape(
            t.x.shape[0], t.x.shape[1], t.q.shape[1] // t.q_norm.shape[0], t.k.shape[1] // t.k_norm.shape[0],
            t.q_norm.shape[0], t.act.shape[1], t.residual is None, window,
        )  # fmt: skip
        self.control: torch.Tensor | None = None

    def call(self) -> torch.Tensor:
        self.control = persistent.launch(self.shape, self.t, self.eps, self.scale)
        return self.t.out


if __name__ == "__main__":
    raise SystemExit(main())
