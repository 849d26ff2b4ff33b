"""The figure names of the ENGINE-PERF tables: what `bench bandwidth --shapes` and `bench decode` write into their
ledger records and what `lab report perf` reads back.

One naming, in one place, so a writer and the reader cannot drift apart:

    attn/<shape>/<arm or peer>      us   median time of one paged decode attention call (graph replay)
    attn/<shape>/engine             us   the same for the engine's default arm at that run's defaults
    decode/b<B>.ctx<C>/step         ms   one decode step at batch B after a C-token prompt
    decode/b<B>.ctx<C>/floor        ms   its weight-streaming floor (weights, plus the K/V once at batch > 1)
    decode/b<B>.ctx<C>/floor_pct    %    floor over step
    decode/b<B>.ctx<C>/hf_compiled  ms   transformers, static cache, torch.compile + CUDA graph, same run

`<shape>` is `b64.ctx4096.h32x8.d128` (batch, context, query/KV heads, head_dim). A record written before the
benchmarks wrote figures (schema 1, or schema 2 without them) is read through the same functions from its results.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENGINE = "engine"
# the six shapes of the attention peer comparison (`bench bandwidth --shapes peers`, the first table of `lab report
# perf`): here, where the light reader and the benchmark both take them
PEER_SHAPES: tuple[dict[str, int], ...] = (
    {"batch": 64, "ctx": 4096, "hq": 32, "hkv": 8, "d": 128},
    {"batch": 1, "ctx": 32768, "hq": 32, "hkv": 8, "d": 128},
    {"batch": 1, "ctx": 1024, "hq": 16, "hkv": 8, "d": 128},
    {"batch": 8, "ctx": 2048, "hq": 16, "hkv": 8, "d": 128},
    {"batch": 32, "ctx": 1024, "hq": 16, "hkv": 8, "d": 128},
    {"batch": 64, "ctx": 4096, "hq": 16, "hkv": 2, "d": 256},
)


def attn_shape_id(shape: Mapping[str, int]) -> str:
    return f"b{shape['batch']}.ctx{shape['ctx']}.h{shape['hq']}x{shape['hkv']}.d{shape['d']}"


def attn_name(shape: Mapping[str, int], arm: str) -> str:
    return f"attn/{attn_shape_id(shape)}/{arm}"


def decode_name(batch: int, context: int, what: str) -> str:
    return f"decode/b{batch}.ctx{context}/{what}"


def attn_figures(per_shape: list[dict]) -> list[dict[str, Any]]:
    """`bench bandwidth --shapes`'s per-shape entries as figures: each arm's and peer's median, and the engine's
    default arm again as `engine` (the arm the ratios are taken against)."""
    out: list[dict[str, Any]] = []
    for entry in per_shape:
        times = entry.get("median_s") or {}
        for arm, seconds in times.items():
            out.append({"name": attn_name(entry["shape"], arm), "value": _us(seconds), "unit": "us"})
        engine = entry.get("engine_arm")
        if engine in times:
            out.append({"name": attn_name(entry["shape"], ENGINE), "value": _us(times[engine]), "unit": "us"})
    return out


def _us(seconds: float) -> float:
    return round(float(seconds) * 1e6, 3)  # a nanosecond is past the timing's resolution; the record stays small


def decode_figures(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`bench decode`'s record as figures: the step, and where the run measured them its floor and the compiled
    transformers peer."""
    batch, context = int(record.get("batch", 1)), int(record["context"])
    out = [{"name": decode_name(batch, context, "step"), "value": float(record["step_ms"]), "unit": "ms"}]
    if "floor_ms" in record:
        out.append({"name": decode_name(batch, context, "floor"), "value": float(record["floor_ms"]), "unit": "ms"})
        pct = 100.0 * float(record["floor_fraction"])
        out.append({"name": decode_name(batch, context, "floor_pct"), "value": pct, "unit": "%"})
    if "hf_compiled_step_ms" in record:
        ms = float(record["hf_compiled_step_ms"])
        out.append({"name": decode_name(batch, context, "hf_compiled"), "value": ms, "unit": "ms"})
    return out


def from_results(results: Any) -> list[dict[str, Any]]:
    """The figures a record's results hold, for a record that did not write them: a six-shape bandwidth run's
    per-shape table or a decode step's measurement; nothing for anything else."""
    if not isinstance(results, dict):
        return []
    if results.get("workload") == "attn-decode" and isinstance(results.get("per_shape"), list):
        return attn_figures(results["per_shape"])
    if {"step_ms", "context", "weight_bytes"} <= results.keys():
        return decode_figures(results)
    return []
