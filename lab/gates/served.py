"""The near-tie razor run from a server's outputs: `gate neartie --served URL` or `--outputs FILE`.

The oracle (fp32, or --dtype's) is teacher-forced on the tokens the server returned, and each position is
judged twice:
- the tokens, by the razor (lab/gates/neartie.py): the server's token is the oracle's best, or a near-tie
  where the oracle's own top two are within the band;
- the server's own distribution, by its top_logprobs: every token it lists has its logprob within
  `logprob_tol` of the oracle's for that token, and the token it returned is its own top-1 (a greedy request).
  A logits bug that keeps every argmax (a wrong scale, a wrong softmax) passes the first judgement and fails
  this one.
A server that returns no top_logprobs (vllm.cpp's case) leaves the second judgement undone, and the result
says so: only its tokens were judged. A server whose tokens come back as text without ids cannot be judged
at all (text does not map back to ids one to one): the gate fails, saying why.

Requests ask for vLLM's `return_tokens_as_token_ids` (logprob tokens as "token_id:<id>") and greedy
decoding (temperature 0, ignore_eos); the engine's own server (`python -m engine serve`) and vLLM honour both.
The --outputs file holds one JSON object per line: {"prompt": [ids], "tokens": [ids], "top_logprobs":
[{"<id>": logprob, ...} per position] or null}, as `--save-outputs` writes it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from lab.gates.neartie import near_tie_gate
from lab.gates.result import FAIL, PASS, GateResult

DEFAULT_LOGPROB_TOL = 0.05  # nats: an fp32 server differs from the fp32 oracle by ~1e-4, a bf16 one by ~1e-2
DEFAULT_SERVED_TOP_K = 5
REQUEST_TIMEOUT_S = 120


@dataclass
class ServedRun:
    prompt: list[int]
    tokens: list[int]
    top_logprobs: list[dict[int, float]] | None  # per position: token id -> the server's logprob; None: none


def token_id(text: str) -> int | None:
    return int(text.removeprefix("token_id:")) if text.startswith("token_id:") else None


def parse_choice(prompt: list[int], choice: dict[str, Any]) -> ServedRun:
    """A /v1/completions choice as ids and top-k; ValueError when its tokens cannot be read as ids."""
    lp = choice.get("logprobs") or {}
    names = lp.get("tokens") or []
    ids = [token_id(t) for t in names]
    if names and all(i is not None for i in ids):
        tokens = [int(i) for i in ids if i is not None]
    elif isinstance(choice.get("token_ids"), list):
        tokens = [int(t) for t in choice["token_ids"]]
    else:
        raise ValueError(
            "the server returned its tokens as text without ids (no return_tokens_as_token_ids, no token_ids): "
            "text does not map back to token ids one to one, so no position can be judged"
        )
    tops = lp.get("top_logprobs")
    if not tops or any(t is None for t in tops):
        return ServedRun(prompt, tokens, None)
    parsed = []
    for top in tops:
        row = {token_id(k): float(v) for k, v in top.items()}
        if None in row:
            return ServedRun(prompt, tokens, None)  # top-k keyed by text: not judgeable by id
        parsed.append({int(k): v for k, v in row.items() if k is not None})
    return ServedRun(prompt, tokens, parsed)


def fetch(url: str, prompts: list[list[int]], max_tokens: int, top_k: int, model: str | None = None) -> list[ServedRun]:
    """Each prompt once through the server's /v1/completions, greedy, with top_logprobs by id."""
    base = url.rstrip("/")
    base = base if base.endswith("/v1") else base + "/v1"
    if model is None:
        with urllib.request.urlopen(base + "/models", timeout=REQUEST_TIMEOUT_S) as r:
            model = json.loads(r.read())["data"][0]["id"]
    runs = []
    for prompt in prompts:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "logprobs": top_k,
            "ignore_eos": True,
            "return_tokens_as_token_ids": True,
        }
        req = urllib.request.Request(
            base + "/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as r:
                choice = json.loads(r.read())["choices"][0]
        except urllib.error.HTTPError as exc:
            raise ValueError(f"{base}/completions answered {exc.code}: {exc.read()[:300]!r}") from exc
        runs.append(parse_choice(prompt, choice))
    return runs


def load_outputs(path: Path) -> list[ServedRun]:
    runs = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        try:
            tops = obj.get("top_logprobs")
            runs.append(
                ServedRun(
                    [int(t) for t in obj["prompt"]],
                    [int(t) for t in obj["tokens"]],
                    None if tops is None else [{int(k): float(v) for k, v in t.items()} for t in tops],
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: expected prompt, tokens and top_logprobs ({exc})") from exc
    return runs


def save_outputs(path: Path, runs: list[ServedRun]) -> None:
    lines = [
        json.dumps(
            {
                "prompt": r.prompt,
                "tokens": r.tokens,
                "top_logprobs": None
                if r.top_logprobs is None
                else [{str(k): v for k, v in t.items()} for t in r.top_logprobs],
            }
        )
        for r in runs
    ]
    path.write_text("\n".join(lines) + "\n")


def served_gate(
    runs: list[ServedRun],
    oracle_logprobs: list[torch.Tensor],  # per run: [len(tokens), vocab] fp32, teacher-forced on its tokens
    band: float,
    top_k: int,
    max_near_tie_rate: float,
    logprob_tol: float = DEFAULT_LOGPROB_TOL,
) -> GateResult:
    """The razor on the served tokens, then the served top-k against the oracle; says what it could not judge."""
    runs_judged = [r for r in runs if r.tokens]
    if not runs_judged:
        return GateResult("neartie", FAIL, "the server returned no tokens: nothing was judged")
    razor = near_tie_gate([r.prompt for r in runs], [r.tokens for r in runs], oracle_logprobs, band, top_k,
                          max_near_tie_rate)  # fmt: skip
    with_top = [(r, lp) for r, lp in zip(runs, oracle_logprobs) if r.top_logprobs is not None]
    if not with_top:
        summary = (
            f"{razor.summary}; the server returned no top_logprobs: only its tokens were judged. Not judged: its "
            "own distribution (its logprobs against the oracle's, whether its token was its own top-1, its own "
            "margins), so a logits bug that keeps every argmax cannot be seen from its outputs"
        )
        details = {**razor.details, "unjudged": "served top_logprobs (none returned)"}
        return GateResult("neartie", razor.verdict, summary, razor.table, details)
    worst, far, not_top1, checked = 0.0, [], 0, 0
    for i, (r, lp) in enumerate(with_top):
        assert r.top_logprobs is not None
        for pos, (tok, top) in enumerate(zip(r.tokens, r.top_logprobs)):
            for tid, value in top.items():
                diff = abs(value - lp[pos, tid].item())
                checked += 1
                worst = max(worst, diff)
                if diff > logprob_tol:
                    far.append({"run": i, "pos": pos, "token": tid, "served": value, "oracle": lp[pos, tid].item()})
            if top and tok in top and top[tok] < max(top.values()):
                not_top1 += 1
    positions = sum(len(r.tokens) for r, _ in with_top)
    summary = (
        f"{razor.summary}; served top_logprobs: {checked} logprobs at {positions} positions, max |served - "
        f"oracle| {worst:.2e} nats (at most {logprob_tol}), {len(far)} beyond, {not_top1} positions where the "
        "returned token is not the server's own top-1"
    )
    if len(with_top) < len(runs):
        summary += f"; {len(runs) - len(with_top)} runs came without top_logprobs (their tokens judged only)"
    details = {**razor.details, "served_logprob_max_diff": worst, "served_logprob_far": far[:32],
               "served_not_top1": not_top1}  # fmt: skip
    verdict = PASS if razor.passed and not far and not not_top1 else FAIL
    return GateResult("neartie", verdict, summary, razor.table, details)
