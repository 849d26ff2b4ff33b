"""A real server on 127.0.0.1 (a free port the OS picks) in this process: uvicorn in a thread, the engine's
loop in its own thread, as `python -m engine serve` runs them."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

pytest.importorskip("fastapi", reason="the server needs fastapi (the engine extra)")
uvicorn = pytest.importorskip("uvicorn", reason="the server needs uvicorn (the engine extra)")

from engine.llm import LLM  # noqa: E402
from engine.serve.app import build_app  # noqa: E402


@dataclass
class Served:
    url: str
    llm: LLM

    def idle(self, timeout: float = 20.0) -> None:
        """Wait for the engine thread to finish everything (a bound, not a timed assertion)."""
        end = time.monotonic() + timeout
        while self.llm.has_unfinished_requests() and time.monotonic() < end:
            time.sleep(0.02)
        time.sleep(0.1)  # the loop's last take_updates after the final step


def serve(llm: LLM, name: str = "tiny-qwen3") -> Iterator[Served]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = build_app(llm, name)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    end = time.monotonic() + 30
    while not server.started and time.monotonic() < end:
        time.sleep(0.02)
    assert server.started, "the server did not start"
    try:
        yield Served(f"http://127.0.0.1:{port}", llm)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    yield from serve(LLM(max_model_len=256, max_num_seqs=64))
