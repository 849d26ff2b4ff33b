"""The persistent schedule's static proof (engine/cuda/persistent_schedule.py): `check` finds, without running
anything, what would make a table wrong on some interleaving of the blocks that take its tasks. The simulation
(lab/persistent/sim.py) runs the table; this proves it for every interleaving from the regions and counters alone.

A cell may be written more than once (a step's `shared` scratch: each layer writes its own version), so the proof
is by versions: a read sees the last write queued before it, which must be ordered before the read (read after
write); a write over an earlier one must be ordered after it (write after write) and after every task that reads the
earlier version (write after read). Ordered means done before the task starts, through the counters it waits on."""

from __future__ import annotations

from collections import defaultdict

from engine.cuda.persistent_schedule import Region, Schedule, Task


def check(sch: Schedule) -> list[str]:
    """Problems that would make the table wrong on some interleaving, found without running it: a wait on more
    signals than its counter gets; a producer queued after its consumer (blocks taking tasks in order could all
    wait on it); a read of a cell no task writes, or whose writer is not ordered before the reader by the counters;
    a write over a cell whose earlier write, or a reader of it, is not ordered before the writer (a race some
    interleaving loses)."""
    problems: list[str] = []
    signallers: dict[int, list[int]] = defaultdict(list)
    for t in sch.tasks:
        signallers[t.signal].append(t.index)
    before: list[set[int]] = []  # tasks done before each one starts, by its waits (transitively)
    for t in sch.tasks:
        done: set[int] = set()
        for counter, target in t.waits:
            if target > sch.expected[counter]:
                problems.append(
                    f"task {t.index} ({t.kind.name}) waits for {sch.counters[counter]} >= {target}, "
                    f"but only {sch.expected[counter]} tasks signal it"
                )
            if any(p >= t.index for p in signallers[counter]):
                problems.append(f"task {t.index} ({t.kind.name}) waits on {sch.counters[counter]}, signalled later")
            if target >= len(signallers[counter]):  # every signaller has finished
                for p in signallers[counter]:
                    if p < t.index:
                        done |= {p} | before[p]
        before.append(done)
    writers: dict[str, list[tuple[int, Region]]] = defaultdict(list)  # in queue order
    readers: dict[str, list[tuple[int, Region]]] = defaultdict(list)
    for t in sch.tasks:
        for r in t.reads:
            readers[r.buffer].append((t.index, r))
        for w in t.writes:
            writers[w.buffer].append((t.index, w))
    external = sch.inputs()
    for t in sch.tasks:
        problems += _reads(sch, t, before, writers, external)
        problems += _writes(sch, t, before, writers, readers)
    return problems


def _name(sch: Schedule, index: int) -> str:
    return f"task {index} ({sch.tasks[index].kind.name})"


def _reads(sch: Schedule, t: Task, before: list[set[int]], writers, external: set[str]) -> list[str]:
    problems = []
    for r in t.reads:
        if r.buffer in external:
            continue
        seen: set[Region] = set()  # the regions written before it, each once (a rewrite covers the same cells)
        covered = 0
        earlier = [(i, w) for i, w in writers[r.buffer] if i < t.index and r.overlap(w)]
        # a shared buffer holds a layer's version: the newest layer that wrote these cells must cover them all (an
        # older layer's write of a cell the newest one missed is a stale value, not coverage)
        newest = max((sch.tasks[i].layer for i, _ in earlier), default=0)
        for w_index, w in earlier:
            cells = r.overlap(w)
            if w not in seen and (r.buffer not in sch.shared or sch.tasks[w_index].layer == newest):
                seen.add(w)
                covered += cells
            if w_index not in before[t.index]:
                problems.append(
                    f"{_name(sch, t.index)} reads {r.buffer} written by {_name(sch, w_index)} without waiting for it"
                )
        if covered < r.cells():
            problems.append(f"{_name(sch, t.index)} reads cells of {r.buffer} that no task writes")
    return problems


def _writes(sch: Schedule, t: Task, before: list[set[int]], writers, readers) -> list[str]:
    problems = []
    for w in t.writes:
        for o_index, prev in writers[w.buffer]:
            if o_index >= t.index or not w.overlap(prev):
                continue
            if o_index not in before[t.index]:
                problems.append(
                    f"{_name(sch, t.index)} writes {w.buffer} over {_name(sch, o_index)}'s write without waiting for it"
                )
        for r_index, r in readers[w.buffer]:  # a reader of the version before this write (or of the input)
            if r_index < t.index and w.overlap(r) and r_index not in before[t.index]:
                problems.append(
                    f"{_name(sch, t.index)} writes {w.buffer} that {_name(sch, r_index)} reads, without waiting for it"
                )
    return problems
