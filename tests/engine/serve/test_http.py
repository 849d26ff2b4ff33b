"""Raw HTTP against the server: OpenAI's error shape with 400 naming the field, /health, /metrics, a client
that disconnects mid-stream, a bounded load of concurrent streaming clients, and `python -m engine serve`."""

from __future__ import annotations

import asyncio
import gc
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from .conftest import Served

ROOT = Path(__file__).resolve().parents[3]


def post(url: str, body: bytes | dict[str, Any]) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


BAD = [
    ({"prompt": "x", "temperature": -1}, "temperature", "must be >= 0"),
    ({"prompt": "x", "top_p": 0}, "top_p", "must be in (0, 1]"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens", "must be at least 1"),
    ({"prompt": "x", "logprobs": 21}, "logprobs", "must be None or in [0, 20]"),
    ({"prompt": "x", "n": 0}, "n", "must be at least 1"),
    ({"prompt": "x", "presence_penalty": 3}, "presence_penalty", "must be in [-2, 2]"),
    ({"prompt": [999999]}, "prompt", "outside the vocabulary"),
    ({"prompt": ""}, "prompt", "prompt is empty"),
    ({"prompt": "x", "max_tokens": "many"}, "max_tokens", "valid integer"),
    ({"max_tokens": 3}, "prompt", "Field required"),
    ({"prompt": "x", "model": "gpt-9"}, "model", "does not exist"),
]


@pytest.mark.parametrize(("body", "param", "says"), BAD, ids=[b[1] + "-" + str(i) for i, b in enumerate(BAD)])
def test_a_bad_completion_request_gets_openais_error_naming_the_field(
    served: Served, body: dict[str, Any], param: str, says: str
) -> None:
    status, out = post(served.url + "/v1/completions", body)
    assert status == (404 if param == "model" else 400), out
    assert set(out) == {"error"} and set(out["error"]) == {"message", "type", "param", "code"}
    assert out["error"]["param"] == param and says in out["error"]["message"], out


def test_bad_chat_requests_and_bodies(served: Served) -> None:
    status, out = post(served.url + "/v1/chat/completions", {"messages": []})
    assert (status, out["error"]["param"]) == (400, "messages")
    status, out = post(served.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                             "logprobs": True, "top_logprobs": 30})  # fmt: skip
    assert (status, out["error"]["param"]) == (400, "top_logprobs"), out
    parts = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    status, out = post(served.url + "/v1/chat/completions", {"messages": parts})
    assert (status, out["error"]["param"]) == (400, "messages"), out
    parts = [{"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}]
    status, out = post(served.url + "/v1/chat/completions", {"messages": parts, "max_tokens": 2})
    assert status == 200 and out["choices"][0]["message"]["role"] == "assistant", out
    status, out = post(served.url + "/v1/completions", b"{not json")
    assert status == 400 and out["error"]["type"] == "invalid_request_error"


def test_health_and_metrics(served: Served) -> None:
    with urllib.request.urlopen(served.url + "/health", timeout=10) as r:
        assert r.status == 200
    post(served.url + "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "temperature": 0})
    with urllib.request.urlopen(served.url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    for name in ("engine_request_success_total", "engine_generation_tokens_total", "engine_kv_cache_usage_perc",
                 "engine_time_to_first_token_seconds_bucket", "engine_time_per_output_token_seconds_count"):  # fmt: skip
        assert re.search(rf"^{name}", text, re.M), name
    assert int(re.search(r"^engine_time_to_first_token_seconds_count (\d+)", text, re.M).group(1)) >= 1  # type: ignore[union-attr]


def test_a_client_that_disconnects_aborts_its_request(served: Served) -> None:
    host, port = served.url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = {"prompt": "Once", "max_tokens": 200, "temperature": 0, "ignore_eos": True, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")
    conn.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
    conn.close()
    served.idle()
    assert not served.llm.has_unfinished_requests()
    with urllib.request.urlopen(served.url + "/metrics", timeout=10) as r:
        assert 'finished_reason="abort"' in r.read().decode()
    served.llm.runner.blocks.check_empty()


def test_a_load_of_concurrent_streaming_clients_all_complete(served: Served) -> None:
    openai = pytest.importorskip("openai")
    clients = 48

    async def one(client: Any, i: int) -> tuple[str, str | None]:
        stream = await client.completions.create(model="tiny-qwen3", prompt=f"Story {i}:", max_tokens=24,
                                                 temperature=0.8, seed=i, stream=True)  # fmt: skip
        text, reason = "", None
        async for part in stream:
            text += part.choices[0].text
            reason = part.choices[0].finish_reason or reason
        return text, reason

    async def main() -> list[tuple[str, str | None]]:
        client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0, timeout=60)
        return await asyncio.wait_for(asyncio.gather(*(one(client, i) for i in range(clients))), timeout=60)

    rss = []
    for _ in range(2):  # memory after a second load is where the first left it (within allocator slack)
        outs = asyncio.run(main())
        assert len(outs) == clients and all(reason in ("stop", "length") for _, reason in outs)
        served.idle()
        served.llm.runner.blocks.check_empty()
        gc.collect()
        rss.append(resident_bytes())
    assert rss[1] - rss[0] < 64 << 20, f"resident memory grew {(rss[1] - rss[0]) >> 20} MiB over a second load"


def resident_bytes() -> int:
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1)) * 1024  # type: ignore[union-attr]


def test_python_m_engine_serve_answers_on_its_port() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--port", str(port)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
                    models = json.loads(r.read())
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None, proc.stderr.read().decode()  # type: ignore[union-attr]
                time.sleep(0.2)
        assert models["data"][0]["id"] == "tiny-qwen3"
        status, out = post(f"http://127.0.0.1:{port}/v1/completions", {"prompt": "Hi", "max_tokens": 3})
        assert status == 200 and len(out["choices"][0]["token_ids"]) <= 3
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert b"KV cache of" in proc.stderr.read()  # type: ignore[union-attr]
