"""Nsight Compute's raw page (`ncu --csv --page raw`) as one row per profiled kernel: what limits it.

Each LOG is the output of one `ncu ... python -m lab bench launch ...` run: ncu's `==PROF==` lines, the
launcher's own lines (its `launch: WORKLOAD ARM SHAPE ...` line labels every kernel of the log; without one,
the log's file name does) and the raw page: a row of metric names, a row of units, a row per kernel. Per
kernel: duration, DRAM and SM throughput (% of peak), achieved and theoretical occupancy and what limits the
latter (the smallest per-SM block limit: registers, shared memory, block size (warps), blocks), waves per SM,
registers per thread, shared memory per block and the top two warp stall reasons. Sections it reads:
SpeedOfLight, Occupancy, LaunchStats, WarpStateStats. Prints a markdown table (and one line per arm and shape:
its kernels' total time and time-weighted DRAM %); --markdown writes it, --ledger writes a ledger record.
Exit 1 when a log holds no profiled kernel (a `not measured` line names it): a table that examined nothing has
not passed.

    python -m lab bench ncu_table OUT/logs/ncu2-*.log --markdown OUT/ncu2-table.md --ledger OUT/ledger
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab.gates.ledger import write_record

HEADER_START = '"ID","Process ID"'
LAUNCH_LINE = re.compile(r"^launch: (\S+) (\S+) (\S+) x\d+ on ")
REQUIRED = ("Kernel Name", "gpu__time_duration.sum")
# SpeedOfLight's DRAM throughput, by the names ncu versions give it (the H200's ncu: gpu__dram_throughput)
DRAM = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
# the per-SM block limits of the Occupancy section: the smallest is what bounds theoretical occupancy
LIMITS = {
    "launch__occupancy_limit_registers": "registers",
    "launch__occupancy_limit_shared_mem": "shared memory",
    "launch__occupancy_limit_warps": "block size",
    "launch__occupancy_limit_blocks": "blocks",
    "launch__occupancy_limit_barriers": "barriers",
}
# warp stall reasons, in the first of these metric families the log has (WarpStateStats, then sampling)
STALL_FAMILIES = (
    (
        re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
        "cycles per issued instruction",
    ),
    (re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+)\.ratio$"), "warp latency ratio"),
    (re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+)\.pct$"), "% of warp latency"),
    (re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$"), "samples"),
    (re.compile(r"^smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct$"), "% of active warps"),
)
NOT_STALLS = ("selected",)  # issuing, not stalled
SHAPE_KEYS = {"batch": "b", "ctx": "c", "block": "blk", "rows": "m"}  # short labels; other keys keep their name
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3}
_TIME_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}


class NcuError(ValueError):
    """A log that is not ncu's raw page, or holds no kernel: the message names the log."""


@dataclass
class Kernel:
    label: str  # WORKLOAD ARM SHAPE of the launch that ran it
    kernel: str  # the function's name, no namespace, template arguments or parameters
    grid: str
    block: str
    duration_us: float
    dram_pct: float | None
    sm_pct: float | None
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    limiter: str  # what bounds theoretical occupancy, "registers" ... (ties joined by "/")
    blocks_per_sm: int | None  # the smallest block limit
    waves_per_sm: float | None
    registers_per_thread: int | None
    smem_per_block_bytes: int | None  # static + dynamic
    stalls: list[tuple[str, float]] = field(default_factory=list)  # the top two, largest first
    stall_unit: str = ""
    device: str | None = None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    kernels: list[Kernel] = []
    missing: list[dict[str, str]] = []
    for path in args.logs:
        try:
            kernels += parse_log(path.read_text(errors="replace"), str(path))
        except NcuError as exc:
            missing.append({"log": str(path), "reason": str(exc)})
        except OSError as exc:
            missing.append({"log": str(path), "reason": f"{path}: unreadable ({exc.strerror}): the run did not happen"})
    if not kernels:
        print(f"error: no profiled kernel in {len(args.logs)} log(s): nothing to tabulate", file=sys.stderr)
        return 1
    text = markdown(kernels, missing)
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(text)
    if args.ledger:
        device = args.device or next((k.device for k in kernels if k.device), None) or "unknown"
        runs = len({k.label for k in kernels})
        summary = f"ncu limiter table: {len(kernels)} kernels of {runs} arm/shape runs"
        if missing:
            summary += f"; {len(missing)} log(s) without a profiled kernel"
        results = {
            "kernels": [asdict(k) for k in kernels],
            "per_run": per_run(kernels),
            "not_measured": missing,
            "logs_commit": args.sha,  # the tree the logs came from, as given; the record names this one
        }
        command = args.command or "python -m lab bench ncu_table " + " ".join(map(str, args.logs))
        path = write_record(
            args.ledger,
            args.slug,
            ["ENGINE-PERF"],
            command,
            device,
            summary,
            results,
            kind="bench",
            allow_dirty=args.allow_dirty,
        )
        print(f"ledger: {path}")
    return 1 if missing else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m lab bench ncu_table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="ncu --csv --page raw output, one run per log")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="write the table to FILE too")
    p.add_argument("--ledger", type=Path, metavar="DIR", help="write a ledger record into DIR")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="write the ledger record from a tree that differs from HEAD (recorded as dirty)",
    )
    p.add_argument("--slug", default="ncu-table", help="the record's file name after its date (default ncu-table)")
    p.add_argument("--command", help="the record's command (default: this command line)")
    p.add_argument("--device", help="the record's device (default: ncu's device__attribute_display_name)")
    p.add_argument("--sha", help="the record's commit, where the logs came from another tree (default: HEAD here)")
    return p


def parse_log(text: str, source: str) -> list[Kernel]:
    """Every kernel row of one log's raw page, labelled by its `launch:` line (else by the file name)."""
    lines = text.splitlines()
    labels = [m.groups() for m in map(LAUNCH_LINE.match, lines) if m]
    label = " ".join((labels[-1][0], labels[-1][1], short_shape(labels[-1][2]))) if labels else Path(source).stem
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADER_START)), None)
    if start is None:
        reason = next((line for line in lines if "No kernels were profiled" in line or "==ERROR==" in line), "")
        raise NcuError(f"{source}: no ncu raw page (a header starting {HEADER_START}){': ' + reason if reason else ''}")
    rows = list(csv.reader(line for line in lines[start:] if line.startswith('"')))
    header = rows[0]
    absent = [name for name in REQUIRED if name not in header]
    if absent:
        raise NcuError(
            f"{source}: the raw page has no {', '.join(absent)} column (profile with --section SpeedOfLight)"
        )
    has_units = len(rows) > 1 and rows[1][:1] == [""]  # ncu's second row: each column's unit
    units = rows[1] if has_units else [""] * len(header)
    data = rows[2:] if has_units else rows[1:]
    if len(units) != len(header):
        raise NcuError(f"{source}: the units row has {len(units)} fields, the header {len(header)}")
    if not data:
        raise NcuError(f"{source}: the raw page has a header but no kernel row")
    out = []
    for n, row in enumerate(data, 1):
        if len(row) != len(header):
            raise NcuError(f"{source}: kernel row {n} has {len(row)} fields, the header {len(header)}")
        out.append(_kernel(label, dict(zip(header, zip(row, units, strict=True), strict=True)), f"{source} row {n}"))
    return out


def _kernel(label: str, cells: dict[str, tuple[str, str]], where: str) -> Kernel:
    def num(name: str) -> float | None:
        value, unit = cells.get(name, ("", ""))
        return number(value, unit)

    duration = num("gpu__time_duration.sum")
    if duration is None:
        raise NcuError(f"{where}: gpu__time_duration.sum is {cells['gpu__time_duration.sum'][0]!r}, not a number")
    limits = {LIMITS[name]: int(v) for name in LIMITS if (v := num(name)) is not None}
    least = min(limits.values()) if limits else None
    static, dynamic = num("launch__shared_mem_per_block_static"), num("launch__shared_mem_per_block_dynamic")
    registers = num("launch__registers_per_thread")
    stalls, unit = top_stalls({name: v for name in cells if (v := num(name)) is not None})
    device = cells.get("device__attribute_display_name", ("", ""))[0] or None
    return Kernel(
        label=label,
        kernel=short_name(cells["Kernel Name"][0]),
        grid=cells.get("Grid Size", ("", ""))[0],
        block=cells.get("Block Size", ("", ""))[0],
        duration_us=round(duration, 3),
        dram_pct=next((v for name in DRAM if (v := num(name)) is not None), None),
        sm_pct=num("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        achieved_occupancy_pct=num("sm__warps_active.avg.pct_of_peak_sustained_active"),
        theoretical_occupancy_pct=num("sm__maximum_warps_per_active_cycle_pct"),
        limiter="/".join(k for k, v in limits.items() if v == least) if limits else "-",
        blocks_per_sm=least,
        waves_per_sm=num("launch__waves_per_multiprocessor"),
        registers_per_thread=None if registers is None else int(registers),
        smem_per_block_bytes=None if static is None and dynamic is None else int((static or 0) + (dynamic or 0)),
        stalls=stalls,
        stall_unit=unit,
        device=device,
    )


def number(value: str, unit: str = "") -> float | None:
    """A raw-page cell in base units (microseconds for times, bytes for sizes); None where ncu printed none."""
    text = value.strip().replace(",", "")  # ncu groups thousands with commas
    try:
        x = float(text)
    except ValueError:
        return None
    if unit in _TIME_US:
        return x * _TIME_US[unit]
    head = unit.split("/", 1)[0]  # "Kbyte/block"
    if head.endswith("byte") and head[:-4] in _PREFIX:
        return x * _PREFIX[head[:-4]]
    return x


def top_stalls(values: dict[str, float], n: int = 2) -> tuple[list[tuple[str, float]], str]:
    """The n largest warp stall reasons of the first metric family present, and that family's unit."""
    for pattern, unit in STALL_FAMILIES:
        found = {}
        for name, v in values.items():
            m = pattern.match(name)
            if m and m.group(1) not in NOT_STALLS and not m.group(1).endswith("_not_issued") and v > 0:
                found[m.group(1)] = v
        if found:
            ranked = sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
            return [(k, round(v, 3)) for k, v in ranked], unit
    return [], ""


def short_name(name: str) -> str:
    """`void vt::tiled_pv_kernel<__nv_bfloat16, 128>(vt::PagedArgs, ...)` -> `tiled_pv_kernel`."""
    out: list[str] = []
    depth = 0
    for ch in name.replace("(anonymous namespace)", "anonymous"):
        if ch in "<(":
            if depth == 0 and ch == "(" and out:
                break
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    base = "".join(out).strip().split(" ")[-1]
    return base.split("::")[-1] or name


def short_shape(text: str) -> str:
    """`batch=64,ctx=4096,hq=32` -> `b64 c4096 hq32`."""
    parts = (p.partition("=") for p in text.split(","))
    return " ".join(f"{SHAPE_KEYS.get(k, k)}{v}" if sep else k for k, sep, v in parts)


def per_run(kernels: list[Kernel]) -> list[dict]:
    """Per arm and shape: its kernels, their total time and the time-weighted DRAM throughput."""
    runs: dict[str, list[Kernel]] = {}
    for k in kernels:
        runs.setdefault(k.label, []).append(k)
    out = []
    for label, ks in runs.items():
        total = sum(k.duration_us for k in ks)
        weighted = sum(k.duration_us * k.dram_pct for k in ks if k.dram_pct is not None)
        dram = weighted / total if total and all(k.dram_pct is not None for k in ks) else None
        out.append(
            {
                "label": label,
                "kernels": len(ks),
                "total_us": round(total, 3),
                "dram_pct": None if dram is None else round(dram, 2),
            }
        )
    return out


def _f(x: float | int | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def _clip(name: str, width: int = 48) -> str:  # cuBLAS names run past 100 characters; the record keeps them whole
    return name if len(name) <= width else name[: width - 3] + "..."


def markdown(kernels: list[Kernel], missing: list[dict[str, str]]) -> str:
    units = sorted({k.stall_unit for k in kernels if k.stall_unit})
    lines = [
        "| arm / shape | kernel | us | DRAM % | SM % | occupancy % achieved / theoretical | limited by (blocks/SM) "
        "| waves/SM | regs | smem/block B | top stalls |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---|",
    ]
    previous = None
    for k in kernels:
        stalls = ", ".join(f"{r} {v:.1f}" for r, v in k.stalls) or "-"
        label, previous = ("" if k.label == previous else k.label), k.label  # a run's label on its first kernel
        lines.append(
            f"| {label} | {_clip(k.kernel)} | {_f(k.duration_us)} | {_f(k.dram_pct)} | {_f(k.sm_pct)} | "
            f"{_f(k.achieved_occupancy_pct)} / {_f(k.theoretical_occupancy_pct)} | {k.limiter} ({_f(k.blocks_per_sm)}) | "
            f"{_f(k.waves_per_sm, 2)} | {_f(k.registers_per_thread)} | {_f(k.smem_per_block_bytes)} | {stalls} |"
        )
    lines += ["", "| arm / shape | kernels | total us | DRAM % (time-weighted) |", "|---|---:|---:|---:|"]
    lines += [
        f"| {r['label']} | {r['kernels']} | {_f(r['total_us'])} | {_f(r['dram_pct'])} |" for r in per_run(kernels)
    ]
    lines.append("")
    lines.append(f"stalls: {', '.join(units) or 'none in the logs'}; {len(kernels)} kernels")
    lines += [f"not measured: {m['reason']}" for m in missing]
    return "\n".join(lines) + "\n"
