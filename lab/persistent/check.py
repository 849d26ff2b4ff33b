"""The persistent schedule's static proof (engine/cuda/persistent_schedule.py): `check` finds, without running
anything, what would make a table wrong on some interleaving of the blocks that take its tasks. The simulation
(lab/persistent/sim.py) runs the table; this proves it for every interleaving from the regions and counters alone."""

from __future__ import annotations

from collections import defaultdict

from engine.cuda.persistent_schedule import Region, Schedule


def check(sch: Schedule) -> list[str]:
    """Problems that would make the table wrong on some interleaving, found without running it: a wait on more
    signals than its counter gets; a producer queued after its consumer (blocks taking tasks in order could all
    wait on it); two writes of one cell; a read of a cell no task writes, or whose writer is not ordered before the
    reader by the counters (a race some interleaving loses)."""
    problems: list[str] = []
    signallers: dict[int, list[int]] = defaultdict(list)
    for t in sch.tasks:
        signallers[t.signal].append(t.index)
    writers: dict[str, list[tuple[int, Region]]] = defaultdict(list)
    for t in sch.tasks:
        for w in t.writes:
            for other, prev in writers[w.buffer]:
                if w.overlap(prev):
                    problems.append(f"task {t.index} ({t.kind.name}) writes {w} that task {other} writes too")
            writers[w.buffer].append((t.index, w))
    before: list[set[int]] = []  # tasks done before each one starts, by its waits (transitively)
    external = sch.inputs()
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
        for r in t.reads:
            if r.buffer in external:
                continue
            covered = 0
            for w_index, w in writers[r.buffer]:
                cells = r.overlap(w)
                covered += cells
                if cells and w_index not in done:
                    problems.append(
                        f"task {t.index} ({t.kind.name}) reads {r.buffer} written by task {w_index} "
                        f"({sch.tasks[w_index].kind.name}) without waiting for it"
                    )
            if covered < r.cells():
                problems.append(f"task {t.index} ({t.kind.name}) reads cells of {r.buffer} that no task writes")
    return problems
