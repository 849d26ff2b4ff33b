"""The HTTP surface: OpenAI's /v1/completions and /v1/chat/completions (streamed as server-sent events),
/v1/models, /health and /metrics. Errors take OpenAI's shape, {"error": {"message", "type", "param", "code"}},
with 400 and the offending field for a bad request; never a traceback."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from engine.chat import ChatTemplateError, load_chat_template, render_chat
from engine.llm import LLM
from engine.logprobs import PositionLogprobs
from engine.requests import RequestOutput
from engine.sampling_params import SamplingParams
from engine.serve.loop import EngineError, EngineLoop
from engine.serve.protocol import ChatRequest, CompletionRequest

FIELD = re.compile(r"SamplingParams\.(\w+)")


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.status, self.kind = message, param, status, kind


def error(status: int, message: str, param: str | None, kind: str = "invalid_request_error") -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": param, "code": None}}
    return JSONResponse(body, status_code=status)


@dataclass
class Sample:
    """One choice as its increments arrive."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[PositionLogprobs | None] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None


def build_app(llm: LLM, model_name: str) -> FastAPI:
    engine = EngineLoop(llm)
    template, special = load_chat_template(llm.model_dir)
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        engine.close()

    app = FastAPI(title="rowgate engine", lifespan=lifespan)
    app.state.engine = engine

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        param = loc[0] if loc else None
        return error(400, f"{'.'.join(loc) or 'body'}: {first.get('msg', 'invalid request')}", param)

    @app.exception_handler(BadRequest)
    async def bad(_: Request, exc: BadRequest) -> JSONResponse:
        return error(exc.status, exc.message, exc.param, exc.kind)

    @app.exception_handler(HTTPException)
    async def http(_: Request, exc: HTTPException) -> JSONResponse:
        return error(exc.status_code, str(exc.detail), None, "not_found_error" if exc.status_code == 404 else "error")

    @app.exception_handler(Exception)
    async def internal(_: Request, exc: Exception) -> JSONResponse:
        return error(500, f"internal error: {type(exc).__name__}", None, "internal_error")

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": model_name, "object": "model", "created": created, "owned_by": "rowgate",
                "max_model_len": llm.max_model_len}  # fmt: skip
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(engine.metrics.render(), media_type="text/plain; version=0.0.4")

    def check_model(name: str | None) -> None:
        if name is not None and name != model_name:
            raise BadRequest(f"The model `{name}` does not exist.", "model", 404, "not_found_error")

    def sampling(body: Any, max_tokens: int, logprobs: int | None, names: dict[str, str]) -> SamplingParams:
        try:
            params = body.params(max_tokens, logprobs)
            params.check(0)
        except (ValueError, TypeError) as exc:
            raise bad_field(exc, names) from exc
        return params

    def bad_field(exc: Exception, names: dict[str, str]) -> BadRequest:
        found = FIELD.search(str(exc))
        name = found.group(1) if found else "prompt"
        message = str(exc).removeprefix("request 0: ")
        return BadRequest(message, names.get(name, name))

    def prompt_ids(prompt: str | list[int], params: SamplingParams, names: dict[str, str]) -> list[int]:
        try:
            ids = llm.check_request(prompt, params)
        except (ValueError, TypeError) as exc:
            raise bad_field(exc, names) from exc
        return ids

    async def run(
        prompts: list[list[int]], params: SamplingParams, stream: bool
    ) -> AsyncIterator[tuple[int, RequestOutput]]:
        """Each prompt's outputs (deltas) as the engine makes them; an unfinished request is aborted when the
        caller stops listening (a client that disconnects)."""
        base = uuid.uuid4().hex
        queues = [engine.submit(f"{base}-{i}", ids, params, stream) for i, ids in enumerate(prompts)]
        done = [False] * len(queues)
        merged: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

        async def pump(i: int, q: asyncio.Queue[Any]) -> None:
            while True:
                item = await q.get()
                await merged.put((i, item))
                if isinstance(item, Exception) or item.finished:
                    return

        tasks = [asyncio.create_task(pump(i, q)) for i, q in enumerate(queues)]
        try:
            while not all(done):
                i, item = await merged.get()
                if isinstance(item, EngineError):
                    raise BadRequest(str(item), None, 500, "internal_error")
                done[i] = item.finished
                yield i, item
        finally:
            for t in tasks:
                t.cancel()
            for i, finished in enumerate(done):
                if not finished:
                    engine.abort(f"{base}-{i}")

    def token_str(tid: int, lp: Any, as_ids: bool) -> str:
        return f"token_id:{tid}" if as_ids else (lp.decoded_token or "")

    def completion_logprobs(pos_list: list[PositionLogprobs | None], tokens: list[int], k: int, as_ids: bool,
                            offset: int) -> dict[str, Any]:  # fmt: skip
        out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for tid, pos in zip(tokens, pos_list):
            if pos is None:
                continue
            chosen = pos[tid]
            out["tokens"].append(token_str(tid, chosen, as_ids))
            out["token_logprobs"].append(chosen.logprob)
            top = sorted(pos.items(), key=lambda kv: kv[1].rank)
            out["top_logprobs"].append({token_str(t, lp, as_ids): lp.logprob for t, lp in top if lp.rank <= max(k, 1)
                                        or t == tid})  # fmt: skip
            out["text_offset"].append(offset)
            offset += len(chosen.decoded_token or "")
        return out

    def echo_logprobs(prompt: list[int], pos_list: list[PositionLogprobs | None] | None, k: int, as_ids: bool
                      ) -> dict[str, Any]:  # fmt: skip
        """The prompt's tokens in a completion's logprobs block (echo): the first, and any position without
        logprobs, with null logprob and top_logprobs, as OpenAI's."""
        out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        offset = 0
        for j, tid in enumerate(prompt):
            pos = pos_list[j] if pos_list is not None and j < len(pos_list) else None
            chosen = pos.get(tid) if pos is not None else None
            text = (chosen.decoded_token if chosen is not None else None) or llm.tokenizer.decode(
                [tid], skip_special_tokens=False
            )
            out["tokens"].append(f"token_id:{tid}" if as_ids else text)
            out["text_offset"].append(offset)
            offset += len(text)
            if pos is None or chosen is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
                continue
            out["token_logprobs"].append(chosen.logprob)
            top = sorted(pos.items(), key=lambda kv: kv[1].rank)
            out["top_logprobs"].append({token_str(t, lp, as_ids): lp.logprob for t, lp in top if lp.rank <= max(k, 1)
                                        or t == tid})  # fmt: skip
        return out

    def chat_logprobs(pos_list: list[PositionLogprobs | None], tokens: list[int], k: int, as_ids: bool
                      ) -> dict[str, Any]:  # fmt: skip
        content = []
        for tid, pos in zip(tokens, pos_list):
            if pos is None:
                continue
            chosen = pos[tid]
            s = token_str(tid, chosen, as_ids)
            top = sorted(((t, lp) for t, lp in pos.items() if lp.rank <= k), key=lambda kv: kv[1].rank)
            content.append({"token": s, "logprob": chosen.logprob, "bytes": list(s.encode()),
                            "top_logprobs": [{"token": token_str(t, lp, as_ids), "logprob": lp.logprob,
                                              "bytes": list(token_str(t, lp, as_ids).encode())} for t, lp in top]})  # fmt: skip
        return {"content": content}

    def usage(prompts: list[list[int]], generated: int) -> dict[str, int]:
        p = sum(map(len, prompts))
        return {"prompt_tokens": p, "completion_tokens": generated, "total_tokens": p + generated}

    async def respond(
        kind: str, body: Any, prompts: list[list[int]], params: SamplingParams, k: int | None,
        echo: list[str] | None = None,  # completions' echo: each prompt's text, put before its choices' text
    ) -> Any:  # fmt: skip
        rid = ("cmpl-" if kind == "text_completion" else "chatcmpl-") + uuid.uuid4().hex
        n = params.n
        as_ids = body.return_tokens_as_token_ids
        prompt_lps: dict[int, list[PositionLogprobs | None] | None] = {}  # echo with logprobs: per prompt

        def lp_block(pos: list[PositionLogprobs | None], tokens: list[int], offset: int) -> Any:
            if k is None:
                return None
            if kind == "text_completion":
                return completion_logprobs(pos, tokens, k, as_ids, offset)
            return chat_logprobs(pos, tokens, k, as_ids)

        def echoed(i: int, text: str, lps: Any) -> tuple[str, Any]:
            """A choice's first text and logprobs with prompt i's echo before them."""
            if echo is None:
                return text, lps
            if lps is not None:
                head = echo_logprobs(prompts[i], prompt_lps.get(i), k or 0, as_ids)
                lps = {key: head[key] + lps[key] for key in head}
            return echo[i] + text, lps

        if not body.stream:
            samples = [[Sample() for _ in range(n)] for _ in prompts]
            async for i, out in run(prompts, params, False):
                if out.prompt_logprobs is not None:
                    prompt_lps[i] = out.prompt_logprobs
                for c in out.outputs:
                    s = samples[i][c.index]
                    s.text += c.text or ""
                    s.tokens += c.token_ids
                    s.logprobs += c.logprobs or []
                    s.finish_reason, s.stop_reason = c.finish_reason, c.stop_reason
            choices = []
            for i, row in enumerate(samples):
                for j, s in enumerate(row):
                    start = len(echo[i]) if echo is not None else 0
                    text, lps = echoed(i, s.text, lp_block(s.logprobs, s.tokens, start))
                    choice: dict[str, Any] = {"index": i * n + j, "finish_reason": s.finish_reason,
                                              "stop_reason": s.stop_reason, "logprobs": lps,
                                              "token_ids": s.tokens}  # fmt: skip
                    if kind == "text_completion":
                        choice["text"] = text
                    else:
                        choice["message"] = {"role": "assistant", "content": s.text}
                    choices.append(choice)
            generated = sum(len(s.tokens) for row in samples for s in row)
            obj = "text_completion" if kind == "text_completion" else "chat.completion"
            return {"id": rid, "object": obj, "created": int(time.time()), "model": model_name, "choices": choices,
                    "usage": usage(prompts, generated)}  # fmt: skip

        include_usage = bool((body.stream_options or {}).get("include_usage"))
        obj = "text_completion" if kind == "text_completion" else "chat.completion.chunk"

        def chunk(choices: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> str:
            payload = {"id": rid, "object": obj, "created": int(time.time()), "model": model_name, "choices": choices}
            return f"data: {json.dumps({**payload, **(extra or {})})}\n\n"

        async def events() -> AsyncIterator[str]:
            generated = 0
            offsets = [[len(echo[i]) if echo is not None else 0] * n for i in range(len(prompts))]
            started = [[False] * n for _ in prompts]  # a choice's first chunk carries the echo
            if kind != "text_completion":
                first = [{"index": i * n + j, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                          "finish_reason": None} for i in range(len(prompts)) for j in range(n)]  # fmt: skip
                yield chunk(first)
            try:
                async for i, out in run(prompts, params, True):
                    if out.prompt_logprobs is not None:
                        prompt_lps[i] = out.prompt_logprobs
                    choices = []
                    for c in out.outputs:
                        if not c.token_ids and not c.text and c.finish_reason is None:
                            continue
                        generated += len(c.token_ids)
                        lps = lp_block(c.logprobs or [], c.token_ids, offsets[i][c.index])
                        offsets[i][c.index] += len(c.text or "")
                        text = c.text or ""
                        if not started[i][c.index]:
                            started[i][c.index] = True
                            text, lps = echoed(i, text, lps)
                        choice: dict[str, Any] = {"index": i * n + c.index, "logprobs": lps,
                                                  "finish_reason": c.finish_reason, "token_ids": c.token_ids}  # fmt: skip
                        if kind == "text_completion":
                            choice["text"] = text
                        else:
                            choice["delta"] = {"content": text}
                        choices.append(choice)
                    if choices:
                        yield chunk(choices)
            except BadRequest as exc:
                yield f"data: {json.dumps({'error': {'message': exc.message, 'type': exc.kind, 'param': None}})}\n\n"
            if include_usage:
                yield chunk([], {"usage": usage(prompts, generated)})
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> Any:
        check_model(body.model)
        names = {"logprobs": "logprobs"}
        params = sampling(body, body.max_tokens if body.max_tokens is not None else 16, body.logprobs, names)
        raw = body.prompt
        many = isinstance(raw, list) and len(raw) > 0 and not isinstance(raw[0], int)
        plist: list[Any] = list(raw) if many else [raw]
        prompts = [prompt_ids(p, params, names) for p in plist]
        if not body.echo:
            return await respond("text_completion", body, prompts, params, body.logprobs)
        # echo, as OpenAI's: each prompt's text before its completions; with logprobs, the prompt's tokens
        # (their logprobs computed as prompt_logprobs) before the generated ones
        if body.logprobs is not None:
            params = replace(params, prompt_logprobs=body.logprobs)
        texts = [p if isinstance(p, str) else llm.tokenizer.decode(ids, skip_special_tokens=False)
                 for p, ids in zip(plist, prompts)]  # fmt: skip
        return await respond("text_completion", body, prompts, params, body.logprobs, texts)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> Any:
        check_model(body.model)
        if template is None:
            raise BadRequest(f"{llm.model_dir} has no chat template in tokenizer_config.json", "messages")
        k = (body.top_logprobs or 0) if body.logprobs else None
        if body.top_logprobs is not None and not body.logprobs:
            raise BadRequest("top_logprobs needs logprobs: true", "top_logprobs")
        names = {"logprobs": "top_logprobs", "max_tokens": "max_tokens"}
        limit = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
        messages = [m.model_dump(exclude_none=True) for m in body.messages]
        try:
            text = render_chat(template, messages, special, body.add_generation_prompt)
        except ChatTemplateError as exc:
            raise BadRequest(str(exc), "messages") from exc
        if limit is None:  # OpenAI's default: up to the context's end
            limit = max(1, llm.max_model_len - len(llm.tokenizer.encode(text).ids) - 1)
        params = sampling(body, limit, k, names)
        return await respond("chat", body, [prompt_ids(text, params, names)], params, k)

    return app
