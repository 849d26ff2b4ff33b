"""Where a decode step's time goes: a few steps under torch.profiler, grouped by kernel (by op on a CPU).

On a GPU the steps run as the runner runs them (CUDA-graph replay unless VT_EAGER=1), followed in the
same profiler session by as many eager steps: kineto records the kernels inside a replayed graph on
recent torch, and the eager steps are the cross-check (same kernels per step) and the fallback when it
does not. On a CPU the unit is the aten op and its self time.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import torch

from lab.drive import Session

TOP = 15
PHASE = "vt_profile_phase:"  # the record_function label around each phase's steps
_LAUNCH = re.compile(r"^cu(da)?(Graph)?Launch")  # host API calls that start device work
_WRAPPERS = ("cutlass::Kernel", "cutlass::Kernel2", "cutlass::device_kernel")  # named by their first template arg


@dataclass(frozen=True)
class Event:
    name: str  # grouped name (kernel_family for kernels)
    kind: str  # "kernel", "copy" (memcpy/memset), "op" (a CPU op) or "launch" (a host launch call)
    us: float  # device time (kernel, copy), self time (op); 0 for a launch
    start: float | None = None  # device events: the start on the device clock (us); the critical path needs it


def profile_decode(runner, prompts: list[list[int]], steps: int) -> dict:
    """Profile `steps` decode steps of the batch of sequences after `prompts` (one each); the breakdown of the
    runner's own mode, with the batch it ran."""
    if steps < 1:
        raise ValueError(f"--profile-steps {steps}: must be at least 1")
    if not prompts:
        raise ValueError("profile_decode: no prompts: the batch profiled has at least one sequence")
    phases, note = _record(runner, prompts, steps)
    return {"batch": len(prompts), **_breakdown_of(runner, phases, steps, note)}


def _breakdown_of(runner, phases: dict[str, list[Event]], steps: int, note: str) -> dict:
    if runner.device.type != "cuda":
        return breakdown(
            phases["eager"], steps, "op", "eager (CPU: aten ops, nested ones included, by self time)", note
        )
    eager = breakdown(phases["eager"], steps, "kernel", "eager", note)
    if "graph" not in phases:
        return eager
    if not any(e.kind == "kernel" for e in phases["graph"]):
        eager.update(
            mode="eager, VT_EAGER semantics (the profiler recorded no kernels inside the replayed "
            "graph; the eager step runs the same kernels)"
        )
        return eager
    graph = breakdown(phases["graph"], steps, "kernel", "CUDA-graph replay", note)
    graph["eager_check"] = {
        k: eager[k] for k in ("kernels_per_step", "copies_per_step", "device_ms_per_step", "launches_per_step")
    }
    return graph


def exposed(work: list[Event]) -> tuple[dict[tuple[str, str], float], float, float]:
    """The device timeline's critical path: each event's time past the end of all device work that started before
    it (in start order), by group; then the idle time (no device work at all) and the span, in us. A programmatic
    dependent launch starts before its predecessor ends and waits: only what it runs after that end is its own, so
    the groups' exposed times and the idle time add up to the span, where the device times overlap past it."""
    timed = sorted((e.start, e.start + e.us, (e.name, e.kind)) for e in work if e.start is not None)
    out: dict[tuple[str, str], float] = defaultdict(float)
    if not timed:
        return out, 0.0, 0.0
    first = frontier = timed[0][0]
    idle = 0.0
    for start, end, group in timed:
        idle += max(0.0, start - frontier)
        out[group] += max(0.0, end - max(start, frontier))
        frontier = max(frontier, end)
    return out, idle, frontier - first


def breakdown(events: list[Event], steps: int, unit: str, mode: str, note: str = "") -> dict:
    """Per step: how many kernels (ops), their total time, and the TOP groups by time with their share; where the
    device events carry their starts, also each group's time on the critical path and the device's idle time."""
    work = [e for e in events if e.kind in (unit, "copy")]
    total_us = sum(e.us for e in work)
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in work:
        groups[(e.name, e.kind)].append(e.us)
    ranked = sorted(groups.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    timeline = unit == "kernel" and bool(work) and all(e.start is not None for e in work)
    path, idle, span = exposed(work) if timeline else ({}, 0.0, 0.0)
    top = [
        {
            "name": name,
            "kind": kind,
            "count_per_step": len(us) / steps,
            "ms_per_step": sum(us) / steps / 1e3,
            "share": sum(us) / total_us if total_us > 0 else 0.0,
            **(
                {"exposed_ms_per_step": path[(name, kind)] / steps / 1e3, "exposed_share": path[(name, kind)] / span}
                if timeline and span > 0
                else {}
            ),
        }
        for (name, kind), us in ranked[:TOP]
    ]
    critical = {"span_ms_per_step": span / steps / 1e3, "idle_ms_per_step": idle / steps / 1e3} if timeline else {}
    return {
        **critical,
        "mode": mode,
        "unit": unit,
        "steps": steps,
        "kernels_per_step": sum(e.kind == unit for e in events) / steps,
        "copies_per_step": sum(e.kind == "copy" for e in events) / steps,
        "launches_per_step": sum(e.kind == "launch" for e in events) / steps,
        "device_ms_per_step": total_us / steps / 1e3,
        "groups": len(groups),
        "top": top,
        "note": note,
    }


def kernel_family(name: str) -> str:
    """A kernel's name without return type, template arguments and parameters:
    `void vt::splitkv_partial_kernel<__nv_bfloat16, 4, 1>(vt::PagedArgs, float*)` -> `vt::splitkv_partial_kernel`.
    Generic wrappers keep their first template argument: `cutlass::Kernel2[cutlass_80_tensorop_..._tn]`."""
    text = name.replace("(anonymous namespace)", "{anon}")
    base = _top_level(text).strip()
    base = base.split()[-1] if base else text  # drops `void` and other return types
    if base in _WRAPPERS and "<" in text:
        inner = _top_level(_first_template_arg(text[text.index("<") + 1 :])).strip()
        return f"{base}[{inner.split()[-1] if inner else '?'}]"
    return base


def _first_template_arg(rest: str) -> str:
    """The text up to the first top-level `,` or the `>` closing the list that `rest` starts inside."""
    depth = 0
    for i, ch in enumerate(rest):
        if ch in "<(":
            depth += 1
        elif ch in ">)" and depth:
            depth -= 1
        elif ch in ",>" and not depth:
            return rest[:i]
    return rest


def _top_level(text: str) -> str:
    """The characters outside every <...> and (...) group."""
    out, angle, paren = [], 0, 0
    for ch in text:
        if ch == "(":
            paren += 1
        elif ch == ")" and paren:
            paren -= 1
        elif ch == "<" and not paren:
            angle += 1
        elif ch == ">" and angle and not paren:
            angle -= 1
        elif not angle and not paren:
            out.append(ch)
    return "".join(out)


def _record(runner, prompts: list[list[int]], steps: int) -> tuple[dict[str, list[Event]], str]:
    """Run the phases (graph then eager on a GPU, eager elsewhere) in one profiler session."""
    from torch.profiler import (  # why: loads kineto; only --profile
        ProfilerActivity,
        profile,
        record_function,
    )

    cuda = runner.device.type == "cuda"
    sid = max(runner.blocks.lengths, default=-1) + 1  # sequence ids nobody holds
    note, graphed = "", runner.use_graph
    with torch.inference_mode():
        session = Session(runner, list(range(sid, sid + len(prompts))), prompts)
        try:
            session.prefill()
            session.decode()  # captures the graph when graphed (the warm-up step)
            graphed = runner.use_graph  # False from here on if the capture was refused
            if cuda and not graphed:
                note = "the runner runs eagerly (VT_EAGER=1, or the step could not be captured)"
            phases = [("graph", True)] if graphed else []
            phases.append(("eager", False))
            runner.use_graph = False
            session.decode()  # warm the eager path too
            _sync(runner.device)
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=acts) as prof:
                for label, use_graph in phases:
                    runner.use_graph = use_graph
                    with record_function(PHASE + label):
                        for _ in range(steps):
                            session.decode()
                        _sync(runner.device)
        finally:
            runner.use_graph = graphed
            session.close()
    return split_phases(prof.events(), [label for label, _ in phases]), note


def split_phases(function_events, labels: list[str]) -> dict[str, list[Event]]:
    """Sort the profiler's events into phases: a host event into the record_function range that holds
    its start; a device event into the last phase started before it (each phase ends with a sync, so
    its device work cannot spill into the next; this tolerates skew between the two clocks)."""
    spans = {
        e.name[len(PHASE) :]: (e.time_range.start, e.time_range.end)
        for e in function_events
        if e.name.startswith(PHASE) and e.device_type.name == "CPU"
    }
    missing = [label for label in labels if label not in spans]
    if missing:
        raise RuntimeError(f"profiler trace has no range for phase(s) {missing}: cannot attribute its events")
    by_start = sorted(labels, key=lambda label: spans[label][0])
    out: dict[str, list[Event]] = {label: [] for label in labels}
    for fe in function_events:
        ev = to_event(fe)
        if ev is None:
            continue
        start = fe.time_range.start
        if ev.kind in ("kernel", "copy"):
            began = [label for label in by_start if spans[label][0] <= start]
            if began:
                out[began[-1]].append(ev)
            continue
        home = next((label for label in labels if spans[label][0] <= start <= spans[label][1]), None)
        if home is not None:
            out[home].append(ev)
    return out


def to_event(fe) -> Event | None:
    """One FunctionEvent as an Event, or None for what the breakdown does not count (annotations, ...)."""
    if fe.name.startswith(PHASE):  # the phase ranges, on either timeline, are not work
        return None
    kind = getattr(fe, "activity_type", None) or guess_kind(fe)
    if fe.device_type.name == "CUDA":
        if kind == "kernel":
            return Event(kernel_family(fe.name), "kernel", fe.time_range.elapsed_us(), float(fe.time_range.start))
        if kind in ("gpu_memcpy", "gpu_memset"):
            return Event(fe.name, "copy", fe.time_range.elapsed_us(), float(fe.time_range.start))
        return None
    if fe.name.startswith(PHASE) or fe.is_user_annotation:
        return None
    if kind in ("cuda_runtime", "cuda_driver"):
        return Event(fe.name, "launch", 0.0) if _LAUNCH.match(fe.name) else None
    if kind in ("cpu_op", ""):
        return Event(fe.name, "op", fe.self_cpu_time_total)
    return None


def guess_kind(fe) -> str:
    """The activity type from the name, for torch builds whose FunctionEvents do not carry it (2.11)."""
    if fe.device_type.name == "CUDA":
        return "gpu_memcpy" if ("Memcpy" in fe.name or "Memset" in fe.name) else "kernel"
    return "cuda_runtime" if fe.name.startswith(("cuda", "cu")) else "cpu_op"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def render(p: dict, step_ms: float | None = None) -> str:
    """The breakdown as a table: counts and times per step, then the top groups."""
    unit = p["unit"] + "s"
    batch = f" at batch {p['batch']}" if "batch" in p else ""
    lines = [f"profile of {p['steps']} decode steps{batch}: {p['mode']}"]
    if p.get("note"):
        lines.append(f"  note: {p['note']}")
    lines.append(f"{unit + ' per step':<34} {p['kernels_per_step']:>10.1f}")
    if p["unit"] == "kernel":
        lines.append(f"{'copies per step (memcpy/memset)':<34} {p['copies_per_step']:>10.1f}")
        lines.append(f"{'host launch calls per step':<34} {p['launches_per_step']:>10.1f}")
    busy = f"  ({p['device_ms_per_step'] / step_ms:.1%} of the timed step)" if step_ms else ""
    if step_ms and p["device_ms_per_step"] > step_ms:  # why: a dependent launch's time counts from its early start
        busy += "; kernels overlap: a programmatic dependent launch starts before its predecessor ends"
    what = "device time" if p["unit"] == "kernel" else "op self time"
    lines.append(f"{what + ' per step':<34} {p['device_ms_per_step']:>10.3f} ms{busy}")
    if "eager_check" in p:
        e = p["eager_check"]
        lines.append(
            f"{'eager step, for comparison':<34} {e['kernels_per_step']:>10.1f} kernels, "
            f"{e['device_ms_per_step']:.3f} ms, {e['launches_per_step']:.0f} launch calls"
        )
    path = "span_ms_per_step" in p
    if path:
        lines.append(
            f"{'device span per step':<34} {p['span_ms_per_step']:>10.3f} ms, of it idle (no kernel running) "
            f"{p['idle_ms_per_step']:.3f} ms"
        )
    head = f"top {len(p['top'])} of {p['groups']} groups by time"
    extra = f" {'exposed':>10} {'of span':>8}" if path else ""
    lines.append(f"{head:<50} {'count/step':>10} {'ms/step':>10} {'share':>7}{extra}")
    for row in p["top"]:
        name = row["name"] if len(row["name"]) <= 48 else row["name"][:45] + "..."
        crit = f" {row['exposed_ms_per_step']:>10.4f} {row['exposed_share']:>8.1%}" if "exposed_share" in row else ""
        lines.append(
            f"  {name:<48} {row['count_per_step']:>10.2f} {row['ms_per_step']:>10.4f} {row['share']:>7.1%}{crit}"
        )
    if path:
        lines.append("  (exposed: the time past the end of all device work that started before it, the critical path)")
    rest = 1 - sum(row["share"] for row in p["top"])
    if p["groups"] > len(p["top"]):
        lines.append(f"  {'(the other ' + str(p['groups'] - len(p['top'])) + ')':<48} {'':>10} {'':>10} {rest:>7.1%}")
    return "\n".join(lines)
