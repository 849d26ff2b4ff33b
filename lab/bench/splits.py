"""The paged decode attention's split-KV count, measured: at each point of a grid of (rows = batch x KV heads,
context, head_dim), and at the six peer shapes, every candidate split count of one arm timed as a CUDA graph over
rotating input sets, the counts interleaved rep by rep, rep 0 dropped; the fastest against the occupancy rule's
count by the A/B rule of lab.bench.stats (a win needs non-overlapping bands and every pair agreeing).

    python -m lab bench splits [--arm tiled|onepass] [--rows 8,16,...] [--contexts 1024,...] [--head-dims 128,256]
                               [--no-peers] [--reps 8] [--dtype bfloat16] [--ledger DIR] [--out FILE]

`--arm tiled` (the option's default) is the two-pass arm, the pipelined P.V pass (with VT_ATTN_PDL's dependent launch
where its grid is at most 2 blocks per SM, as `tiled_pipelined_pdl` takes it), which `VT_ATTN_ONEPASS=0` runs;
`onepass` the one-pass arm, the engine's default since its flip.
Prints one line per point: the rule's count and time, the fastest count and time, the ratio (rule time over the
fastest's: > 1 the rule is slower), the verdict, and the count the table keeps: the fastest where it wins, else
the rule's. A point that fails (out of memory) is named and passed over, and the run exits 1. `--out FILE` writes
that table (engine/cuda/split_table.py's format; commit it as engine/data/attn_splits/<device>.json for
VT_ATTN_SPLIT_TABLE), `--ledger DIR` the ledger record."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from lab.bench.figures import PEER_SHAPES, attn_shape_id
from lab.bench.stats import ab_verdict, drop_warmup
from lab.bench.timing import first_line
from lab.gates.ledger import figure, head_sha, repo_root, write_record

ARMS = ("tiled", "onepass")
ROWS = (8, 16, 32, 64, 128, 256, 512)  # batch x KV heads: the b1 step's 8 to b64 at 8 KV heads
CONTEXTS = (1024, 2048, 4096, 8192, 32768)
HEAD_DIMS = (128, 256)
# the query and KV heads a grid point runs at, per head_dim: Qwen3-0.6B's 16/8 at 128, the peer shape's 16/2 at 256
HEADS = {64: (16, 8), 128: (16, 8), 256: (16, 2)}
BLOCK = 32  # tokens per cache block
TILE = 64  # tokens per K/V tile of the kernels
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # candidates; 64 is kMaxSplits
WAVE_BLOCKS = 16  # candidates stop where the grid passes this many blocks per SM (or the rule's, if more)


def parse_ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated positive integers") from None
    if any(x < 1 for x in out):
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be at least 1")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m lab bench splits", description=__doc__.split("\n\n")[0])
    p.add_argument("--arm", choices=ARMS, default="tiled", help="the arm whose split count is measured")
    p.add_argument("--rows", type=parse_ints, default=list(ROWS), help="batch x KV heads, comma-separated")
    p.add_argument("--contexts", type=parse_ints, default=list(CONTEXTS), help="tokens, multiples of 32")
    p.add_argument("--head-dims", type=parse_ints, default=list(HEAD_DIMS), help=f"of {sorted(HEADS)}")
    p.add_argument("--no-peers", action="store_true", help="the grid alone, without the six peer shapes")
    p.add_argument("--reps", type=int, default=8, help="repetitions per split count, interleaved (rep 0 dropped)")
    p.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record into DIR")
    p.add_argument("--out", type=Path, metavar="FILE", help="write the measured table (JSON) to FILE")
    p.add_argument("--allow-dirty", action="store_true", help="write the record from a tree that differs from HEAD")
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The usage errors argparse's types do not catch, each naming the value (exit 2)."""
    if args.reps < 2:
        p.error(f"--reps {args.reps}: need at least 2 (rep 0 is dropped)")
    odd = [c for c in args.contexts if c % BLOCK]
    if odd:
        p.error(f"--contexts {odd[0]}: must be a multiple of {BLOCK} (the cache block), so the capacity is the context")
    dims = [d for d in args.head_dims if d not in HEADS]
    if dims:
        p.error(f"--head-dims {dims[0]}: expected one of {', '.join(map(str, sorted(HEADS)))}")
    for d in args.head_dims:
        kv = HEADS[d][1]
        bad = [r for r in args.rows if r % kv]
        if bad:
            p.error(f"--rows {bad[0]}: head_dim {d} runs at {kv} KV heads, so rows must be a multiple of {kv}")


def grid(rows: list[int], contexts: list[int], head_dims: list[int], peers: bool = True) -> list[dict[str, Any]]:
    """The points to measure: every (rows, context, head_dim) at HEADS' heads, then (with `peers`) the peer shapes
    of these head dims at their own heads (in place of a grid point with the same rows, context and head_dim),
    named `peer`."""
    points: dict[tuple[int, int, int], dict[str, Any]] = {}
    for d in head_dims:
        hq, hkv = HEADS[d]
        for r in rows:
            for c in contexts:
                points[(r, c, d)] = {"batch": r // hkv, "hq": hq, "hkv": hkv, "ctx": c, "d": d, "peer": None}
    for s in PEER_SHAPES if peers else ():
        if s["d"] in head_dims:
            key = (s["batch"] * s["hkv"], s["ctx"], s["d"])
            points[key] = {**{k: s[k] for k in ("batch", "hq", "hkv", "ctx", "d")}, "peer": attn_shape_id(s)}
    return [points[k] for k in sorted(points, key=lambda k: (k[2], k[0], k[1]))]


def candidates(rule: int, context: int, rows: int, sms: int) -> list[int]:
    """The split counts worth timing: none past the context's tiles (a split would be empty), none whose grid passes
    WAVE_BLOCKS blocks per SM unless the rule's does; the rule's own count always."""
    tiles = max(1, -(-context // TILE))
    most = max(rows * rule, WAVE_BLOCKS * sms)
    return sorted({n for n in SPLITS if n <= tiles and rows * n <= most} | {rule})


def summarise(point: dict[str, Any], rule: int, samples: dict[int, list[float]], timing: str) -> dict[str, Any]:
    """One point's row from every count's samples (seconds, rep 0 included): the fastest count by median against the
    rule's by the A/B rule, and the count the table keeps (the fastest where it wins, else the rule's)."""
    kept = {n: drop_warmup(s) for n, s in samples.items()}
    best = min(kept, key=lambda n: (statistics.median(kept[n]), n))
    v = ab_verdict(kept[rule], kept[best])
    return {
        **point,
        "rows": point["batch"] * point["hkv"],
        "rule": rule,
        "rule_us": round(v.base.median * 1e6, 3),
        "best": best,
        "best_us": round(v.test.median * 1e6, 3),
        "ratio": round(v.median_ratio, 4),
        "verdict": "same" if best == rule else v.label,
        "splits": best if v.label == "win" else rule,
        "counts": {str(n): round(statistics.median(s) * 1e6, 3) for n, s in kept.items()},
        "timing": timing,
    }


def table_text(rows: list[dict[str, Any]], arm: str, dtype: str, device: str) -> str:
    out = [
        f"split counts of the {arm} arm, {dtype}, {device} (ratio: the rule's time over the fastest count's)",
        f"{'rows':>5}{'ctx':>7}{'d':>5}{'heads':>7}{'rule':>6}{'rule us':>10}{'best':>6}{'best us':>10}{'ratio':>8}"
        f"  {'verdict':<14}{'table':>6}  peer",
    ]
    for r in rows:
        out.append(
            f"{r['rows']:>5}{r['ctx']:>7}{r['d']:>5}{str(r['hq']) + '/' + str(r['hkv']):>7}{r['rule']:>6}"
            f"{r['rule_us']:>10.2f}{r['best']:>6}{r['best_us']:>10.2f}{r['ratio']:>8.3f}  {r['verdict']:<14}"
            f"{r['splits']:>6}  {r['peer'] or ''}"
        )
    wins = sum(r["splits"] != r["rule"] for r in rows)
    out.append(f"{wins} of {len(rows)} points keep another count than the rule's")
    return "\n".join(out)


def table_doc(
    rows: list[dict[str, Any]], arm: str, dtype: str, device: str, command: str, missed: Sequence[str] = ()
) -> dict[str, Any]:
    """The measured table in engine/cuda/split_table.py's format: per point its count, and beside it what it was
    chosen from; the points not measured, with why."""
    keep = ("rule", "rule_us", "best", "best_us", "ratio", "verdict", "hq", "hkv", "peer")
    points = [
        {"rows": r["rows"], "context": r["ctx"], "head_dim": r["d"], "splits": r["splits"], **{k: r[k] for k in keep}}
        for r in rows
    ]
    table: dict[str, Any] = {"device": device, "dtype": dtype, "arm": arm, "command": command, "commit": _commit()}
    table.update(not_measured=list(missed), points=points)
    return {"schema": 1, "kind": "attn-split-table", "tables": [table]}


def _commit() -> str | None:
    return head_sha(repo_root(Path(__file__).resolve().parent))


# a point in the record, one short string (a list of lists renders a line per number and passes the size cap)
POINT_FORMAT = "rows x context x head_dim, rule count:us, fastest count:us, rule/fastest, verdict, table count"


def point_text(r: dict[str, Any]) -> str:
    return (
        f"{r['rows']}x{r['ctx']}x{r['d']} {r['rule']}:{r['rule_us']:.2f} {r['best']}:{r['best_us']:.2f} "
        f"{r['ratio']:.3f} {r['verdict']} {r['splits']}"
    )


def record(
    ledger: Path,
    rows: list[dict[str, Any]],
    arm: str,
    dtype: str,
    device: str,
    command: str,
    allow_dirty: bool,
    missed: Sequence[str] = (),
) -> Path:
    """One record: every point as a `point_text` (small enough to stay in the record); figures the points
    measured, the points whose table count is not the rule's, the largest ratio and each peer shape's ratio."""
    ratios = [r["rule_us"] / (r["best_us"] if r["splits"] == r["best"] else r["rule_us"]) for r in rows]
    figures = [
        figure("points", len(rows), "count"),
        figure("points_not_rule", sum(r["splits"] != r["rule"] for r in rows), "count"),
        figure("max_rule_over_table", max(ratios), "x"),
        figure("geomean_rule_over_table", math.exp(sum(map(math.log, ratios)) / len(ratios)), "x"),
    ]
    figures += [figure(f"splits/{r['peer']}/rule_over_table", q, "x") for r, q in zip(rows, ratios) if r["peer"]]
    moved = [f"{r['rows']}x{r['ctx']}x{r['d']}: {r['rule']}->{r['splits']}" for r in rows if r["splits"] != r["rule"]]
    summary = (
        f"split counts of the {arm} arm ({dtype}, {device}) at {len(rows)} points: the table keeps another count than "
        f"the rule's at {len(moved)} ({', '.join(moved[:8])}{', ...' if len(moved) > 8 else ''}); largest rule/table "
        f"time {max(ratios):.2f}x" + (f"; {len(missed)} points not measured" if missed else "")
    )
    results = {
        "arm": arm,
        "dtype": dtype,
        "device": device,
        "format": POINT_FORMAT,
        "points": [point_text(r) for r in rows],
        "not_measured": list(missed)[:12],
    }
    return write_record(
        ledger,
        f"attn-split-table-{arm}",
        ["ENGINE-PERSISTENT"],
        command,
        "cuda",
        summary,
        results,
        kind="bench",
        figures=figures,
        allow_dirty=allow_dirty,
    )


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    check_args(p, args)
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (the attention kernels run only on a GPU; nothing was measured)")
        return 0
    argv_ = argv if argv is not None else sys.argv[1:]
    command = "python -m lab bench splits " + " ".join(argv_)
    dev, dtype = torch.device("cuda", torch.cuda.current_device()), getattr(torch, args.dtype)
    from engine.cuda import split_table  # why: the engine's bindings, imported where a GPU is there to run them

    device = split_table.device_name(dev.index or 0)
    points = grid(args.rows, args.contexts, args.head_dims, peers=not args.no_peers)

    def keep(rows: list[dict[str, Any]], missed: list[str]) -> None:  # the table so far: a timeout keeps it
        if args.out and rows:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(table_doc(rows, args.arm, args.dtype, device, command, missed), indent=1))

    rows, missed = measure_all(
        points, lambda p: measure(p, args.arm, args.reps, dev, dtype), lambda p: refused(args.arm, p, dev), keep
    )
    if not rows:
        print(f"FAIL: the {args.arm} arm measured no point of this grid on {device}: no table, no record")
        return 1
    print(table_text(rows, args.arm, args.dtype, device))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = table_doc(rows, args.arm, args.dtype, device, command, missed)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"table: {args.out}")
    if args.ledger:
        path = record(args.ledger, rows, args.arm, args.dtype, device, command, args.allow_dirty, missed)
        print(f"ledger: {path}")
    failed = [m for m in missed if ": failed: " in m]
    if failed:
        print(f"FAIL: {len(failed)} of {len(points)} points failed (the table holds the {len(rows)} measured)")
    return 1 if failed else 0


def measure_all(
    points: list[dict[str, Any]],
    measure_one: Callable[[dict[str, Any]], dict[str, Any]],
    refuse: Callable[[dict[str, Any]], str | None],
    after: Callable[[list[dict[str, Any]], list[str]], None] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each point's row, in order, and the points not measured with why: refused by the arm, or failed (an out of
    memory, a launch error), named and passed over so the other points still run. `after` sees the rows and misses
    so far once each point is done (the bench rewrites its table: a run stopped at its limit keeps what it measured)."""
    rows, missed = [], []
    for point in points:
        name = f"{point['batch'] * point['hkv']}x{point['ctx']}x{point['d']}"
        why = refuse(point)
        if why is None:
            try:
                row = measure_one(point)
            except Exception as exc:  # noqa: BLE001 - one point's failure is named; the grid goes on
                why = f"failed: {first_line(exc)}"
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
        if why is not None:
            missed.append(f"{name}: {why}")
            print(f"  {name}: not measured ({why})", flush=True)
            continue
        rows.append(row)
        print(
            f"  {name}: rule {row['rule']} {row['rule_us']:.2f} us, best {row['best']} {row['best_us']:.2f} us, "
            f"kept {row['splits']} ({row['verdict']})",
            flush=True,
        )
        if after is not None:
            after(rows, missed)
    return rows, missed


# --- GPU -------------------------------------------------------------------------------------------------------------


def make_set(point: dict[str, Any], dev: torch.device, dtype: torch.dtype, seed: int) -> tuple:
    """One input set made on the device (quick at 8 GB): blocks scattered over the cache, every length `ctx`."""
    g = torch.Generator(device=dev).manual_seed(seed)
    batch, hkv, d, ctx = point["batch"], point["hkv"], point["d"], point["ctx"]
    blocks = ctx // BLOCK
    table = torch.randperm(batch * blocks, generator=g, device=dev).view(batch, blocks).to(torch.int32)
    k = torch.randn(batch * blocks, BLOCK, hkv, d, generator=g, device=dev, dtype=dtype)
    v = torch.randn(batch * blocks, BLOCK, hkv, d, generator=g, device=dev, dtype=dtype)
    q = torch.randn(batch, point["hq"], d, generator=g, device=dev, dtype=dtype)
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=dev)
    return q, k, v, table, lens, d**-0.5


def refused(arm: str, point: dict[str, Any], dev: torch.device) -> str | None:
    """Why the arm cannot run this point on this device (the one-pass arm's head_dim 256 needs two blocks per SM)."""
    from engine.cuda import device as cuda_device  # why: GPU only
    from engine.cuda import paged_attn_onepass

    if arm == "onepass" and not paged_attn_onepass.fits(point["d"], cuda_device.probe(dev.index or 0)):
        return f"the one-pass arm's head_dim {point['d']} block does not fit this device as it needs"
    return None


def launcher(arm: str, splits: int, pdl: bool):
    """The arm's launch at a fixed split count, as the kernel table would run it there."""
    from engine.cuda import paged_attn_onepass, paged_attn_tiled  # why: GPU only

    if arm == "onepass":
        return lambda q, k, v, t, lens, scale: paged_attn_onepass.launch_decode(q, k, v, t, lens, scale, None, splits)
    return lambda q, k, v, t, lens, scale: paged_attn_tiled.launch_decode(
        q, k, v, t, lens, scale, None, splits, pipelined=True, pdl=pdl
    )


def measure(point: dict[str, Any], arm: str, reps: int, dev: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    from engine.cuda import device as cuda_device  # why: GPU only
    from engine.cuda import paged_attn_onepass, paged_attn_tiled
    from lab.bench.timing import arm_timer, describe, sets_for  # why: beside the GPU code that uses them

    rows, ctx, d = point["batch"] * point["hkv"], point["ctx"], point["d"]
    rule_of = paged_attn_onepass.num_splits if arm == "onepass" else paged_attn_tiled.num_splits
    rule = rule_of(rows, ctx, d, dtype, dev.index or 0)
    sms = cuda_device.probe(dev.index or 0).sms
    counts = candidates(rule, ctx, rows, sms)
    per_set = 2 * point["batch"] * ctx * point["hkv"] * d * torch.empty((), dtype=dtype).element_size()
    sets = [make_set(point, dev, dtype, seed) for seed in range(sets_for(per_set))]
    pdl_most = paged_attn_tiled.PDL_BLOCKS_PER_SM * sms  # VT_ATTN_PDL's arm takes grids up to this many blocks
    timers = {n: arm_timer(launcher(arm, n, rows * n <= pdl_most), sets, dev) for n in counts}
    samples: dict[int, list[float]] = {n: [] for n in counts}
    for rep in range(reps):  # interleaved: each rep times every count back to back
        for n in counts:
            samples[n].append(timers[n].sample(rep))
    modes = sorted({describe(t.as_record()) for t in timers.values()})
    row = summarise(point, rule, samples, "; ".join(modes))
    del timers, sets
    torch.cuda.empty_cache()
    return row


if __name__ == "__main__":
    raise SystemExit(main())
