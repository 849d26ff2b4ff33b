"""Tensor parallelism's processes: one rank per process, a torch.distributed group, and rank 0 driving the rest.

`start(size, ...)` checks the sizes, opens a store, spawns ranks 1..size-1 (torch.multiprocessing, spawn) and
builds rank 0's runner in the caller's process. Each step, rank 0 (the scheduler and the sampler's owner)
sends the step's rows to every rank once, over a pipe; every rank then runs the same step, and the sharded
layers meet in the group's collectives (gloo on the CPU, NCCL on CUDA devices). Every collective has a
timeout; a rank that raises reports its error before it exits, one that dies is seen by its exit code, and
rank 0 stops the others and raises one line naming the rank and its error.
"""

from __future__ import annotations

import datetime
import pickle
import signal
import time
import traceback
import weakref
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from engine.flags import FlagSnapshot
from engine.model import parallel
from engine.model.config import load_config
from engine.runner import PreparedDecode, Runner, StepRow

DEFAULT_TIMEOUT_S = 300.0  # a collective that takes longer is an error, not a hang
START_TIMEOUT_S = 600.0  # at least this long for a rank to start (import torch) and to load its shard
REPORT_WAIT_S = 5.0  # how long rank 0 waits, after a failed collective, for the failed rank's own report


class RankError(RuntimeError):
    """A tensor-parallel rank failed; the message names the rank and its error in one line."""


def check_devices(size: int, device: str, visible: int | None = None) -> None:
    """One CUDA device per rank; on the CPU every rank is a process (gloo), however many cores there are."""
    if torch.device(device).type != "cuda":
        return
    if torch.device(device).index not in (None, 0):
        raise ValueError(f"tensor_parallel_size={size}: device {device!r}: pass device='cuda' (rank r runs on cuda:r)")
    count = torch.cuda.device_count() if visible is None else visible
    if size > count:
        raise ValueError(f"tensor_parallel_size={size} needs {size} CUDA devices; {count} visible")


class Group:
    """A rank's collectives: on the model's tensors (gloo or NCCL), each with the group's timeout."""

    def __init__(self, rank: int, size: int, store: Any, device: torch.device, timeout_s: float) -> None:
        """Join the group: every rank builds one, and each returns once all have (or the timeout passes)."""
        self.rank, self.size = rank, size
        timeout = datetime.timedelta(seconds=timeout_s)
        prefixed = dist.PrefixStore("tp", store)  # type: ignore[attr-defined]
        self.pg: Any
        if device.type == "cuda":
            opts = dist.ProcessGroupNCCL.Options()
            opts._timeout = timeout
            self.pg = dist.ProcessGroupNCCL(prefixed, rank, size, opts)
        else:
            self.pg = dist.ProcessGroupGloo(prefixed, rank, size, timeout)

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:  # summed over the ranks, in place
        self.pg.allreduce([t]).wait()
        return t

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:  # [..., n] per rank -> [..., size * n]
        t = t.contiguous()
        outs = [torch.empty_like(t) for _ in range(self.size)]
        self.pg.allgather([outs], [t]).wait()
        return torch.cat(outs, dim=-1)


@dataclass
class Spec:
    """What every rank builds its runner from (picklable: it crosses to the spawned processes)."""

    model_dir: str
    dtype: torch.dtype
    device: str
    runner_kw: dict[str, Any]
    flags: dict[str, bool | str]
    size: int
    port: int
    timeout_s: float
    named: dict[str, str]  # the snapshot's by-name arms (op -> arm), so every rank chooses as rank 0 does

    def runner(self, rank: int, group: Group) -> Runner:
        device = f"cuda:{rank}" if torch.device(self.device).type == "cuda" else "cpu"
        shard = parallel.Shard(rank, self.size, group)
        flags = FlagSnapshot(self.flags, self.named)
        cls = ShardedRunner if rank == 0 else Runner
        return cls(self.model_dir, self.dtype, device, flags=flags, shard=shard, **self.runner_kw)


def start(
    size: int, model_dir: str, dtype: torch.dtype, device: str, timeout_s: float, **runner_kw: Any
) -> ShardedRunner:
    """Rank 0's runner, with ranks 1..size-1 started and ready; a size or a rank that fails raises one line."""
    parallel.check(load_config(model_dir), size)
    check_devices(size, device)
    flags = runner_kw.pop("flags", None) or FlagSnapshot.from_env()
    timeout = datetime.timedelta(seconds=max(timeout_s, START_TIMEOUT_S))
    store = dist.TCPStore(  # type: ignore[attr-defined]
        "127.0.0.1", 0, size, is_master=True, timeout=timeout, wait_for_workers=False
    )
    spec = Spec(
        str(model_dir), dtype, device, runner_kw, dict(flags.values), size, store.port, timeout_s, dict(flags.named)
    )
    ctx = mp.get_context("spawn")
    workers = Workers(ctx, spec)
    try:
        # every other rank is joining when rank 0 does: the group's connect, timed by the collectives'
        # timeout, does not wait for a process to start
        workers.wait_for("joining")
        try:
            group = Group(0, size, store, torch.device(device), timeout_s)
        except Exception as exc:
            workers.fail(exc, "start-up")
        try:
            runner = spec.runner(0, group)
        except Exception:
            workers.stop()
            raise
        assert isinstance(runner, ShardedRunner)
        workers.wait_for("ready")
    except BaseException:
        workers.kill()
        raise
    runner.workers, runner.store = workers, store
    weakref.finalize(runner, workers.stop)
    return runner


class Workers:
    """Ranks 1..size-1: their processes and pipes; the one place that turns a failure into a RankError."""

    def __init__(self, ctx: Any, spec: Spec) -> None:
        self.procs: list[Any] = []
        self.pipes: list[Connection] = []
        self.timeout_s = spec.timeout_s
        self.start_timeout_s = max(spec.timeout_s, START_TIMEOUT_S)
        for rank in range(1, spec.size):
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=worker_main, args=(rank, spec, theirs), name=f"engine-tp-rank{rank}", daemon=True)
            proc.start()
            theirs.close()
            self.procs.append(proc)
            self.pipes.append(mine)
        self.closed = False

    def wait_for(self, state: str) -> None:
        """Every rank's report that it is `state` ("joining" the group, "ready" to serve), or a RankError."""
        deadline = time.monotonic() + self.start_timeout_s
        for rank, pipe in enumerate(self.pipes, 1):
            if not pipe.poll(max(0.0, deadline - time.monotonic())):
                raise self._error(f"rank {rank} not {state} after {self.start_timeout_s:.0f} s (timeout)")
            msg = self._recv(rank, pipe)
            if msg[0] != state:
                raise self._error(f"rank {rank} failed at start-up: {msg[1]}")

    def send(self, message: tuple[Any, ...]) -> None:
        """The step's inputs to every rank: pickled once, written to each rank's pipe."""
        payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        for pipe in self.pipes:
            try:
                pipe.send_bytes(payload)
            except (BrokenPipeError, ConnectionResetError, OSError) as exc:
                self.fail(exc, "a step")

    def fail(self, exc: BaseException, during: str) -> None:
        """Raise the RankError of a failed collective or pipe: the failed rank's own report where there is one."""
        deadline = time.monotonic() + REPORT_WAIT_S
        while True:
            cause = self._cause()
            if cause is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if cause is not None:
            message = cause
        elif "timed out" in str(exc).lower():  # a rank that hangs keeps its connections open: only this ends it
            message = f"a collective timed out after {self.timeout_s:g} s (tp_timeout_s) during {during}"
        else:
            message = f"a collective failed during {during}: {first_line(exc)}"
        self.kill()
        raise RankError(f"tensor parallel: {message}; every rank was stopped") from exc

    def _cause(self) -> str | None:
        """The first rank that reported an error of its own, else the first that died; None if none has yet."""
        died = None
        for rank, (proc, pipe) in enumerate(zip(self.procs, self.pipes), 1):
            if pipe.poll():
                try:
                    kind, text = pipe.recv()
                except (EOFError, OSError):
                    kind, text = "eof", ""
                if kind == "error" and not text.startswith("collective"):
                    return f"rank {rank} raised {text}"
            if died is None and proc.exitcode is not None:
                died = f"rank {rank} died ({exit_reason(proc.exitcode)})"
        return died

    def _recv(self, rank: int, pipe: Connection) -> tuple[str, str]:
        try:
            msg: tuple[str, str] = pipe.recv()
        except (EOFError, OSError):
            proc = self.procs[rank - 1]
            proc.join(REPORT_WAIT_S)
            return ("error", f"it exited ({exit_reason(proc.exitcode)})")
        return msg

    def _error(self, message: str) -> RankError:
        self.kill()
        return RankError(f"tensor parallel: {message}; every rank was stopped")

    def stop(self) -> None:
        """Ask every rank to exit, then make sure it has."""
        if self.closed:
            return
        for pipe in self.pipes:
            try:
                pipe.send_bytes(pickle.dumps(("stop",)))
            except OSError:
                pass
        for proc in self.procs:
            proc.join(REPORT_WAIT_S)
        self.kill()

    def kill(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
            proc.join(REPORT_WAIT_S)
        for pipe in self.pipes:
            pipe.close()
        self.closed = True


def exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


class ShardedRunner(Runner):
    """Rank 0's runner: each step's rows go to every rank before it runs its own share of the step."""

    workers: Workers
    store: Any

    @torch.inference_mode()
    def run_step(self, rows: list[StepRow], decode: bool) -> list[int]:
        self.workers.send(("step", rows, decode))
        try:
            return super().run_step(rows, decode)
        except RuntimeError as exc:  # gloo and NCCL raise RuntimeError (or a subclass) for a failed collective
            self.workers.fail(exc, "a step")
            raise  # not reached: fail raises
        except BaseException:  # any other error leaves the ranks mid-step: none can go on
            self.workers.kill()
            raise

    @torch.inference_mode()
    def prepare_decode(self, rows: list[StepRow]) -> PreparedDecode:
        self._rows = rows
        return super().prepare_decode(rows)

    @torch.inference_mode()
    def launch_decode(self, prepared: PreparedDecode, tokens: list[int]) -> torch.Tensor:
        self.workers.send(("launch", self._rows, tokens))
        try:
            return super().launch_decode(prepared, tokens)
        except RuntimeError as exc:
            self.workers.fail(exc, "a step")
            raise
        except BaseException:
            self.workers.kill()
            raise

    def read_tokens(self, out: torch.Tensor | tuple[torch.Tensor, ...], n: int) -> list[int]:
        try:
            return super().read_tokens(out, n)
        except RuntimeError as exc:
            self.workers.fail(exc, "a step")
            raise

    def shutdown(self) -> None:
        self.workers.stop()


def worker_main(rank: int, spec: Spec, pipe: Connection) -> None:
    """Rank `rank`: join the group, build its shard of the model, then run every step rank 0 sends."""
    try:
        timeout = datetime.timedelta(seconds=max(spec.timeout_s, START_TIMEOUT_S))
        store = dist.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1", spec.port, spec.size, is_master=False, timeout=timeout
        )
        device = torch.device(f"cuda:{rank}" if torch.device(spec.device).type == "cuda" else "cpu")
        if device.type == "cuda":
            torch.cuda.set_device(device)
        pipe.send(("joining", ""))
        group = Group(rank, spec.size, store, device, spec.timeout_s)
        runner = spec.runner(rank, group)
        pipe.send(("ready", ""))
        serve(runner, pipe)
    except (EOFError, KeyboardInterrupt):
        pass  # rank 0 is gone: nothing to report to
    except Exception as exc:
        lowered = str(exc).lower()
        collective = isinstance(exc, dist.DistError) or any(w in lowered for w in ("gloo", "nccl", "timed out"))
        text = ("collective failed: " if collective else "") + first_line(exc)
        traceback.print_exc()  # the whole story on this rank's stderr; rank 0 raises the one line
        try:
            pipe.send(("error", text))
        except OSError:
            pass
        raise SystemExit(1) from None


@torch.inference_mode()
def serve(runner: Runner, pipe: Connection) -> None:
    while True:
        message = pickle.loads(pipe.recv_bytes())
        if message[0] == "stop":
            return
        if message[0] == "step":
            runner.run_step(message[1], message[2])
        else:  # "launch": a decode step prepared and launched in one go (rank 0 overlaps the two)
            runner.launch_decode(runner.prepare_decode(message[1]), message[2])
