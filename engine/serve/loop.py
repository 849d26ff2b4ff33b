"""The engine's one thread: it owns the LLM, takes requests and aborts from the HTTP handlers, steps the
engine while any request runs, and hands each request's increments to its handler's asyncio queue."""

from __future__ import annotations

import asyncio
import threading
import traceback
from typing import Any

from engine.llm import LLM
from engine.requests import RequestOutput
from engine.sampling_params import SamplingParams
from engine.serve.metrics import Metrics

IDLE_WAIT_S = 0.05  # how long the thread sleeps with nothing to do before it looks again


class EngineError(RuntimeError):
    """The engine failed a step; the request it was running ends with this."""


class EngineLoop:
    def __init__(self, llm: LLM) -> None:
        self.llm = llm
        self.metrics = Metrics()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._commands: list[tuple[str, Any]] = []
        self._queues: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]] = {}
        self._stop = False
        self._tokens: dict[str, int] = {}  # generated tokens so far per request (the engine thread's)
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    def submit(
        self, request_id: str, prompt: list[int], params: SamplingParams, stream: bool = True
    ) -> asyncio.Queue[Any]:
        """Queue a request (already checked: LLM.check_request); its outputs, deltas then a finished one, arrive
        on the returned queue (an EngineError instead if the engine fails)."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        with self._lock:
            self._queues[request_id] = (asyncio.get_running_loop(), queue)
            self._commands.append(("add", (request_id, prompt, params, stream)))
        self._wake.set()
        return queue

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._queues.pop(request_id, None)
            self._commands.append(("abort", request_id))
        self._wake.set()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=10)

    def _deliver(self, request_id: str, item: Any) -> None:
        with self._lock:
            target = self._queues.get(request_id)
            if target is not None and (isinstance(item, Exception) or item.finished):
                del self._queues[request_id]
        if target is not None:
            loop, queue = target
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the handler's event loop is closed: nobody is waiting
                pass

    def _run(self) -> None:
        llm = self.llm
        while not self._stop:
            with self._lock:
                commands, self._commands = self._commands, []
            for kind, arg in commands:
                if kind == "add":
                    rid, prompt, params, stream = arg
                    try:
                        llm.add_request(prompt, params, request_id=rid, stream=stream)
                    except ValueError as exc:
                        self._deliver(rid, EngineError(str(exc)))
                else:
                    llm.abort(arg)
            if not llm.has_unfinished_requests():
                llm.step()  # a step still in flight (VT_ASYNC_SCHEDULE) is read back
                self._publish()  # aborted requests' last outputs: counted, though nobody waits for them
                self._gauges()
                self._wake.wait(IDLE_WAIT_S)
                self._wake.clear()
                continue
            try:
                llm.step()
            except Exception as exc:  # the engine freed every block (LLM._fail); every request ends
                traceback.print_exc()
                for out in llm.take_updates():
                    self._deliver(out.request_id, EngineError(f"engine step failed: {exc}"))
                with self._lock:
                    waiting = list(self._queues)
                for rid in waiting:
                    self._deliver(rid, EngineError(f"engine step failed: {exc}"))
                continue
            self._publish()
            self._gauges()

    def _publish(self) -> None:
        """Every request's increment to its handler; a finished one into the metrics."""
        for out in self.llm.take_updates():
            n = self._tokens.get(out.request_id, 0) + sum(len(c.token_ids) for c in out.outputs)
            self._tokens[out.request_id] = n
            if out.finished:
                self._record(out, n)
            self._deliver(out.request_id, out)

    def _record(self, out: RequestOutput, tokens: int) -> None:
        """A finished request into the counters and histograms (TPOT from its samples' mean length)."""
        del self._tokens[out.request_id]
        m = self.metrics
        with m.lock:
            for c in out.outputs:
                m.finished[c.finish_reason or "abort"] += 1
            m.prompt_tokens += len(out.prompt_token_ids)
            m.generation_tokens += tokens
            if out.metrics is not None and out.metrics.ttft is not None:
                m.ttft.observe(out.metrics.ttft)
                tpot = out.metrics.tpot(tokens // max(1, len(out.outputs)))
                if tpot is not None:
                    m.tpot.observe(tpot)

    def _gauges(self) -> None:
        s, blocks, m = self.llm.scheduler, self.llm.runner.blocks, self.metrics
        with m.lock:
            m.running, m.waiting = len(s.running), len(s.waiting)
            m.kv_usage = 1 - blocks.num_free / blocks.num_blocks
