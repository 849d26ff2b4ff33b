"""Achieved bandwidth against the ceiling measured in the same run.

First the device-to-device copy bandwidth (bytes read plus bytes written), then, for each arm of a
workload and each of its peers, the bytes that must move over the median time, and that as a fraction
of the copy ceiling. Prints one table, writes a PNG (fraction versus context length, one line per arm
and peer) and a ledger record. Each arm and peer is timed by CUDA-graph replay over a cycle of rotating
input sets (`--timing graph`, the default), or in an eager loop where it refuses capture; each row says
which.

    python -m lab bench bandwidth [--workload attn-decode] [--sweep ctx=1024,4096,32768] [--shape ...]
    python -m lab bench bandwidth --workload attn-decode --shapes peers --plot attn-peers.png

--shapes runs a list of shapes in one process: a named set of the workload (attn-decode's `peers`: the
six shapes of the FlashInfer comparison) or `KEY=INT,...;KEY=INT,...`; it then also prints one row per
shape with each arm's and peer's time, the engine's default arm against FlashInfer with tensor cores and
against the fastest peer, and the plot shows time per shape, one bar per arm and peer. A peer that cannot
run here (FlashInfer not installed) is a row saying why.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from engine.flags import FlagSnapshot
from lab.bench.figures import attn_figures
from lab.bench.stats import Band, drop_warmup
from lab.bench.timing import (
    MODES,
    arm_timer,
    clocks,
    describe,
    device_name,
    first_line,
    sets_for,
    time_once,
)
from lab.bench.workloads import DTYPES, WORKLOADS, parse_shape
from lab.gates.ledger import write_record

COPY_BYTES = 1 << 30  # 1 GiB each way: far past the L2, long enough to time well


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab bench bandwidth",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="attn-decode")
    p.add_argument("--shape", help="KEY=INT,... over the workload's defaults")
    p.add_argument("--sweep", help="KEY=V1,V2,... one run per value (the plot's x axis)")
    p.add_argument(
        "--shapes",
        help="a named shape set of the workload (attn-decode: peers) or "
        "'KEY=INT,...;KEY=INT,...': one run per shape, a per-shape table and a bar plot",
    )
    p.add_argument(
        "--arms",
        help="comma-separated subset of the workload's arms and peers; `default` names the arm the flags' defaults "
        "run (the engine's, whose ratios the per-shape table prints)",
    )
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--reps", type=int, default=8, help="repetitions per arm, the first dropped")
    p.add_argument("--inner", type=int, default=10, help="calls per eager timing sample")
    p.add_argument(
        "--timing",
        choices=MODES,
        default="graph",
        help="graph: replay one captured CUDA graph per arm and peer, eager where capture fails "
        "(default); eager: back-to-back Python calls between events",
    )
    p.add_argument("--plot", type=Path, help="write the PNG plot here")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write the ledger record into DIR")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write the ledger record from a tree that differs from HEAD (recorded as dirty)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    work = WORKLOADS[args.workload]
    try:
        if args.shapes and args.sweep:
            raise ValueError("--shapes and --sweep: give one of them")
        shapes = (
            listed_shapes(work, args.shape, args.shapes) if args.shapes else sweep_shapes(work, args.shape, args.sweep)
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    wanted = set(args.arms.split(",")) if args.arms else None
    if wanted and "default" in wanted:  # the default arm by its role, so a flip of the defaults needs no edit here
        engine = work.default_arm()
        if engine is None:
            print(
                f"error: --arms default: no single arm of {work.name} is what the flags' defaults run", file=sys.stderr
            )
            return 2
        wanted = (wanted - {"default"}) | {engine}
    known = {*work.arms, *work.peers}
    if wanted and not wanted <= known:
        print(
            f"error: --arms {','.join(sorted(wanted - known))}: not an arm or peer of {work.name} "
            f"(known: {', '.join(sorted(known))})",
            file=sys.stderr,
        )
        return 2
    if not torch.cuda.is_available():  # checked after the arguments, so a bad command line is named first
        print("error: bandwidth is measured on a GPU only (no CUDA device here)", file=sys.stderr)
        return 2
    device, dtype = torch.device("cuda"), DTYPES[args.dtype]
    before = clocks()
    ceiling = copy_bandwidth(device, args.reps)
    rows = []
    for shape in shapes:
        rows.extend(measure_shape(work, shape, device, dtype, args.reps, args.inner, ceiling, wanted, args.timing))
    record = {
        "workload": work.name,
        "dtype": args.dtype,
        "device": device_name(device),
        "timing": args.timing,
        "copy_bytes_per_s": ceiling,
        "clocks_before": before,
        "clocks_after": clocks(),
        "rows": rows,
    }
    print_table(record)
    if args.shapes:
        record["per_shape"] = per_shape(rows, work.default_arm())
        print()
        print(render_per_shape(record["per_shape"]))
    if not any("fraction" in r for r in rows):  # a benchmark that measured nothing has no result
        print(f"error: no arm or peer of {work.name} ran; see the table for why", file=sys.stderr)
        return 1
    if args.plot:
        plotted = write_bars(record, args.plot) if args.shapes else write_plot(record, args.plot, args.sweep)
        print(f"plot: {plotted}")
    if args.ledger:
        cmd = "python -m lab bench bandwidth " + " ".join(argv if argv is not None else sys.argv[1:])
        best = max((r for r in rows if "fraction" in r), key=lambda r: r["fraction"])
        summary = f"copy {ceiling / 1e12:.2f} TB/s; best {best['arm']} at {best['fraction']:.0%} of it"
        if args.shapes:
            summary += "; " + "; ".join(
                f"{p['label']}: engine/FI-TC {p['engine_over_flashinfer_tc']:.2f}x"
                for p in record["per_shape"]
                if "engine_over_flashinfer_tc" in p
            )
        slug = f"bandwidth-{work.name}" + ("-shapes" if args.shapes else "")
        path = write_record(
            args.ledger,
            slug,
            ["ENGINE-BENCH", "ENGINE-PERF"] if args.shapes else ["ENGINE-BENCH"],
            cmd,
            record["device"],
            summary,
            record,
            kind="bench",
            figures=attn_figures(record.get("per_shape", [])),
            allow_dirty=args.allow_dirty,
        )
        print(f"ledger: {path}")
    return 0


def sweep_shapes(work, shape_text: str | None, sweep: str | None) -> list[dict[str, int]]:
    base = parse_shape(shape_text, work.defaults)
    if not sweep:
        return [base]
    key, _, values = sweep.partition("=")
    if key not in base or not values:
        raise ValueError(f"--sweep {sweep!r}: expected KEY=V1,V2 with KEY in {sorted(base)}")
    return [{**base, key: int(v)} for v in values.split(",")]


def listed_shapes(work, shape_text: str | None, shapes: str) -> list[dict[str, int]]:
    """--shapes: a named set of the workload or 'KEY=INT,...;KEY=INT,...', each over --shape and the defaults."""
    base = parse_shape(shape_text, work.defaults)
    if shapes in work.shape_sets:
        return [{**base, **s} for s in work.shape_sets[shapes]]
    if "=" not in shapes:
        known = ", ".join(sorted(work.shape_sets)) or "none"
        raise ValueError(f"--shapes {shapes!r}: not a shape set of {work.name} (known: {known}) nor KEY=INT lists")
    return [parse_shape(part, base) for part in shapes.split(";") if part.strip()]


FLASHINFER_TC = "flashinfer-tc"


def shape_label(shape: dict[str, int]) -> str:
    keys = ("batch", "ctx", "hq", "hkv", "d")
    if all(k in shape for k in keys):
        return f"b{shape['batch']} ctx{shape['ctx']} {shape['hq']}/{shape['hkv']} d{shape['d']}"
    return ",".join(f"{k}={v}" for k, v in shape.items())


def per_shape(rows: list[dict], engine: str | None) -> list[dict]:
    """One entry per shape: each arm's and peer's median seconds (or why it did not run), and the engine's
    default arm (`engine`; None: no ratios) over FlashInfer with tensor cores and over the fastest peer (time
    ratios, >1 = engine faster)."""
    out: list[dict] = []
    for r in rows:
        label = shape_label(r["shape"])
        entry = next((e for e in out if e["label"] == label), None)
        if entry is None:
            entry = {"label": label, "shape": r["shape"], "median_s": {}, "unavailable": {}}
            out.append(entry)
        if "median_s" in r:
            entry["median_s"][r["arm"]] = r["median_s"]
        else:
            entry["unavailable"][r["arm"]] = r.get("unavailable", "")
    kinds = {r["arm"]: r["kind"] for r in rows}
    for e in out:
        t = e["median_s"]
        peers = {k: v for k, v in t.items() if kinds.get(k) == "peer"}
        if engine not in t:
            continue
        e["engine_arm"] = engine
        if FLASHINFER_TC in t:
            e["engine_over_flashinfer_tc"] = t[FLASHINFER_TC] / t[engine]
        if peers:
            best = min(peers, key=lambda k: peers[k])
            e["fastest_peer"] = best
            e["engine_over_fastest_peer"] = peers[best] / t[engine]
        arms = {k: v for k, v in t.items() if kinds.get(k) == "arm" and k != engine}
        if arms:
            best = min(arms, key=lambda k: arms[k])
            e["best_other_arm"] = best
            e["best_other_arm_over_engine"] = t[engine] / arms[best]
    return out


def render_per_shape(entries: list[dict]) -> str:
    names = list(dict.fromkeys(k for e in entries for k in [*e["median_s"], *e["unavailable"]]))
    lines = [f"{'shape (us)':<26} " + " ".join(f"{n:>14}" for n in names) + f" {'eng/FI-TC':>9} {'eng/fastest':>11}"]
    for e in entries:
        cells = []
        for n in names:
            if n in e["median_s"]:
                cells.append(f"{e['median_s'][n] * 1e6:>14.1f}")
            else:
                why = e["unavailable"].get(n, "")
                cells.append(f"{'not installed' if 'not installed' in why else 'n/a':>14}")
        fi, fast = (e.get(k) for k in ("engine_over_flashinfer_tc", "engine_over_fastest_peer"))
        fi_s, fast_s = ("-" if x is None else f"{x:.2f}x" for x in (fi, fast))
        lines.append(f"{e['label']:<26} " + " ".join(cells) + f" {fi_s:>9} {fast_s:>11}")
    engine = next((e["engine_arm"] for e in entries if "engine_arm" in e), None)
    if engine is None:
        lines.append("eng/X: not computed: the engine's default arm did not run")
    else:
        lines.append(f"eng/X: X's time over the engine's default arm ({engine}); above 1 the engine is faster")
    for e in entries:
        for n, why in e["unavailable"].items():
            lines.append(f"  {e['label']}: {n}: {why}")
    return "\n".join(lines)


def write_bars(record: dict, path: Path) -> str:
    """Median time per shape, one bar per arm and peer (log scale)."""
    try:
        import matplotlib  # why: an optional package, only --plot needs it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # why: as above, after choosing the Agg backend
    except ImportError:
        return "not written: matplotlib is not installed"
    entries = record["per_shape"]
    names = list(dict.fromkeys(k for e in entries for k in e["median_s"]))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        xs = [j + i * width for j, e in enumerate(entries) if name in e["median_s"]]
        ys = [e["median_s"][name] * 1e6 for e in entries if name in e["median_s"]]
        ax.bar(xs, ys, width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(entries))], [e["label"] for e in entries], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median us per call (graph replay)")
    ax.set_title(f"{record['workload']} ({record['dtype']}, {record['device']})")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return str(path)


def copy_bandwidth(device: torch.device, reps: int) -> float:
    """Bytes read plus bytes written per second by a large device-to-device copy (median)."""
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device=device).uniform_()
    dst = torch.empty_like(src)
    times = drop_warmup([time_once(dst.copy_, (src,), device, 5) for _ in range(reps)])
    return 2 * COPY_BYTES / statistics.median(times)


def measure_shape(work, shape, device, dtype, reps, inner, ceiling, wanted, timing: str = "graph") -> list[dict]:
    moved = work.bytes_moved(shape, dtype)
    sets = [work.make(shape, device, dtype, seed) for seed in range(sets_for(moved))]
    base = FlagSnapshot.from_env()  # each arm: the environment's flags with the arm's settings
    candidates = [(name, "arm", work.arm(name, base), None) for name in work.arms]
    candidates += [(name, "peer", run, prep) for name, (prep, run) in work.peers.items()]
    rows = []
    for name, kind, run, prep in candidates:
        if wanted and name not in wanted:
            continue
        row = {"arm": name, "kind": kind, "shape": shape, "bytes": moved}
        try:
            inputs = [prep(*s) for s in sets] if prep else sets
            run(*inputs[0])  # warm-up: compilation, autotuning, module load
            timer = arm_timer(run, inputs, device, timing, inner)
            row["timing"] = timer.as_record()
            times = drop_warmup([timer.sample(i) for i in range(reps)])
        except Exception as exc:  # an unavailable backend is reported, not fatal
            row["unavailable"] = first_line(exc)
            rows.append(row)
            continue
        band = Band.of(times)
        row.update(
            median_s=band.median,
            low_s=band.low,
            high_s=band.high,
            bytes_per_s=moved / band.median,
            fraction=moved / band.median / ceiling,
        )
        rows.append(row)
    return rows


def print_table(record: dict) -> None:
    print(
        f"copy bandwidth (read+write): {record['copy_bytes_per_s'] / 1e12:.3f} TB/s on {record['device']}; "
        f"timing asked: {record.get('timing', 'eager')}"
    )
    print(f"{'arm':<18} {'kind':<5} {'shape':<44} {'median ms':>10} {'TB/s':>7} {'of copy':>8}  timing")
    for r in record["rows"]:
        shape = ",".join(f"{k}={v}" for k, v in r["shape"].items())
        if "unavailable" in r:
            print(f"{r['arm']:<18} {r['kind']:<5} {shape:<44} unavailable: {r['unavailable'][:60]}")
            continue
        print(
            f"{r['arm']:<18} {r['kind']:<5} {shape:<44} {r['median_s'] * 1e3:>10.4f} "
            f"{r['bytes_per_s'] / 1e12:>7.3f} {r['fraction']:>7.1%}  {describe(r['timing'])}"
        )


def write_plot(record: dict, path: Path, sweep: str | None) -> str:
    try:
        import matplotlib  # why: an optional plotting package, imported only for --plot

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # why: as above; after matplotlib.use() picks the backend
    except ImportError:
        return "not written: matplotlib is not installed"
    key = (sweep or "ctx=").partition("=")[0]
    fig, ax = plt.subplots(figsize=(7, 4))
    for name in dict.fromkeys(r["arm"] for r in record["rows"]):
        pts = [(r["shape"][key], r["fraction"]) for r in record["rows"] if r["arm"] == name and "fraction" in r]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(key)
    ax.set_ylabel("fraction of copy bandwidth")
    ax.set_title(f"{record['workload']} ({record['dtype']}, {record['device']})")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return str(path)
