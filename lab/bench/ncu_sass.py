"""Nsight Compute's SASS page (`ncu --import R --page source --csv --print-source sass`) read per kernel: where its
warps stall and which instructions ask memory for more than they use.

Per kernel: the stall mix (each reason's share of the warp-state samples), the instructions with the most samples
and their top reasons, and the global loads' L2 sectors against the ideal (ncu's "L2 Theoretical Sectors Global
Excessive": the sectors an access pattern requests past the ones its bytes need) and the shared wavefronts against
theirs, each with the instructions that cost the most. Sections the profile needs: SourceCounters and
WarpStateStats (with MemoryWorkloadAnalysis_Tables for the sector columns).

    ncu --section SourceCounters --section WarpStateStats --section MemoryWorkloadAnalysis_Tables -o R python ...
    ncu --import R.ncu-rep --page source --csv --print-source sass > sass.csv
    python -m lab bench ncu_sass sass.csv [--top 8] [--json FILE]

Exit 1 when the file holds no instruction row (a `not measured` line says so): a summary of nothing has not passed.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
SECTORS, SECTORS_IDEAL, SECTORS_EXCESS = (
    "L2 Theoretical Sectors Global",
    "L2 Theoretical Sectors Global Ideal",
    "L2 Theoretical Sectors Global Excessive",
)
WAVES, WAVES_EXCESS = "L1 Wavefronts Shared", "L1 Wavefronts Shared Excessive"
WAVES_IDEAL = "L1 Wavefronts Shared Ideal"


@dataclass
class Instruction:
    address: str
    source: str
    samples: float
    stalls: dict[str, float]
    sectors: float
    sectors_ideal: float
    sectors_excess: float
    waves: float
    waves_excess: float


@dataclass
class Kernel:
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def total(self, attr: str) -> float:
        return sum(getattr(i, attr) for i in self.instructions)

    def stall_mix(self) -> dict[str, float]:
        """Each reason's share of all samples, largest first (reasons with no sample left out)."""
        sums: dict[str, float] = {}
        for ins in self.instructions:
            for reason, n in ins.stalls.items():
                sums[reason] = sums.get(reason, 0.0) + n
        whole = sum(sums.values()) or 1.0
        return {r: n / whole for r, n in sorted(sums.items(), key=lambda kv: -kv[1]) if n > 0}

    def top(self, attr: str, n: int) -> list[Instruction]:
        return [i for i in sorted(self.instructions, key=lambda i: -getattr(i, attr)) if getattr(i, attr) > 0][:n]


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0  # "-" or an empty cell: the metric does not apply to this instruction


def parse(lines: Iterable[str]) -> list[Kernel]:
    """The kernels of one SASS page: a `"Kernel Name",...` row opens each, the next row names its columns."""
    kernels: list[Kernel] = []
    header: list[str] | None = None
    for row in csv.reader(lines):
        if not row:
            continue
        if row[0] == "Kernel Name":
            kernels.append(Kernel(row[1] if len(row) > 1 else "?"))
            header = None
        elif header is None and kernels:
            header = row
            if "Address" not in header or "Source" not in header:
                raise ValueError(f"{kernels[-1].name}: not a SASS page header (no Address/Source column): {row[:4]}")
        elif header is not None:
            cell = dict(zip(header, row, strict=False))
            stalls = {
                k.removeprefix("stall_"): _number(v)
                for k, v in cell.items()
                if k.startswith("stall_") and "Not Issued" not in k
            }
            kernels[-1].instructions.append(
                Instruction(
                    cell["Address"],
                    cell["Source"].strip(),
                    _number(cell.get(SAMPLES, "")),
                    stalls,
                    _number(cell.get(SECTORS, "")),
                    _number(cell.get(SECTORS_IDEAL, "")),
                    _number(cell.get(SECTORS_EXCESS, "")),
                    _number(cell.get(WAVES, "")),
                    _number(cell.get(WAVES_EXCESS, "")),
                )
            )
    return kernels


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "n/a"


def report(k: Kernel, top: int) -> list[str]:
    samples, sectors, excess = k.total("samples"), k.total("sectors"), k.total("sectors_excess")
    waves, waves_excess = k.total("waves"), k.total("waves_excess")
    lines = [f"kernel {k.name}: {len(k.instructions)} instructions, {samples:.0f} stall samples"]
    mix = k.stall_mix()
    lines.append("stalls: " + ", ".join(f"{r} {100 * s:.1f}%" for r, s in list(mix.items())[:6]))
    for ins in k.top("samples", top):
        reasons = sorted(ins.stalls.items(), key=lambda kv: -kv[1])[:2]
        why = ", ".join(f"{r} {n:.0f}" for r, n in reasons if n > 0)
        lines.append(f"  {_pct(ins.samples, samples):>6} {ins.source[:64]:<64} {why}")
    lines.append(
        f"global sectors: {sectors:.0f}, {excess:.0f} excessive ({_pct(excess, sectors)}); "
        f"shared wavefronts: {waves:.0f}, {waves_excess:.0f} excessive ({_pct(waves_excess, waves)})"
    )
    for ins in k.top("sectors_excess", top):
        lines.append(
            f"  {ins.source[:64]:<64} sectors {ins.sectors:.0f} (ideal {ins.sectors_ideal:.0f}), "
            f"wavefronts {ins.waves:.0f} (excessive {ins.waves_excess:.0f})"
        )
    return lines


def summary(k: Kernel, top: int) -> dict:
    return {
        "kernel": k.name,
        "instructions": len(k.instructions),
        "samples": k.total("samples"),
        "stall_mix": k.stall_mix(),
        "sectors": k.total("sectors"),
        "sectors_excess": k.total("sectors_excess"),
        "waves": k.total("waves"),
        "waves_excess": k.total("waves_excess"),
        "top_samples": [asdict(i) for i in k.top("samples", top)],
        "top_excess": [asdict(i) for i in k.top("sectors_excess", top)],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab bench ncu_sass", description=__doc__.split("\n\n")[0])
    p.add_argument("csv", type=Path, nargs="+", help="ncu's SASS page as CSV (one or more files)")
    p.add_argument("--top", type=int, default=8, help="instructions listed per table (default 8)")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the summaries as JSON")
    args = p.parse_args(argv)
    if args.top < 1:
        p.error("--top must be at least 1")
    out: list[dict] = []
    for path in args.csv:
        if not path.is_file():
            p.error(f"{path}: no such file")
        with path.open(newline="") as f:
            try:
                kernels = parse(f)
            except ValueError as e:
                print(f"error: {path}: {e}", file=sys.stderr)
                return 2
        measured = [k for k in kernels if k.instructions]
        if not measured:
            print(f"not measured: {path} holds no SASS instruction row (was it `--page source --print-source sass`?)")
            return 1
        for k in measured:
            print("\n".join(report(k, args.top)))
            out.append({"file": str(path), **summary(k, args.top)})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
