"""Token-exact gate: our greedy ids equal the oracle's, prompt by prompt (lowest index wins a tie in both)."""

from __future__ import annotations

import hashlib
import random

from lab.gates.result import FAIL, PASS, GateResult

DEFAULT_PROMPT_LENS = (1, 6, 13, 31)  # different lengths, straddling a 16-token KV block
# the near-tie razor's: 16 prompts x 64 new tokens (1024 positions), enough to see a near-tie rate
RAZOR_PROMPT_LENS = (1, 6, 13, 31, 2, 9, 17, 33, 4, 15, 24, 47, 8, 20, 40, 63)
RAZOR_NEW_TOKENS = 64


def default_prompts(vocab: int, seed: int = 0, lens: tuple[int, ...] = DEFAULT_PROMPT_LENS) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lens]


def token_gate(prompts: list[list[int]], ours: list[list[int]], oracle: list[list[int]]) -> GateResult:
    """Pass only when every prompt's ids match exactly; the table shows the first divergence of each."""
    if not prompts:
        return GateResult("tokens", FAIL, "no prompts: nothing was compared")
    table = []
    for i, (p, a, b) in enumerate(zip(prompts, ours, oracle, strict=True)):
        first = next((j for j, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if first is None and len(a) != len(b):
            first = min(len(a), len(b))
        table.append(
            {
                "prompt": i,
                "prompt_len": len(p),
                "new_tokens": len(a),
                "first_divergence": first,
                "ours": None if first is None else a[first : first + 4],
                "oracle": None if first is None else b[first : first + 4],
                "ours_digest": ids_digest(a),  # two runs' ids held equal (graphed against eager) without storing them
            }
        )
    bad = [r for r in table if r["first_divergence"] is not None]
    total = sum(len(a) for a in ours)
    if bad:
        return GateResult(
            "tokens",
            FAIL,
            f"{len(bad)} of {len(prompts)} prompts diverge from the oracle "
            f"(first at prompt {bad[0]['prompt']}, token {bad[0]['first_divergence']})",
            table,
        )
    return GateResult("tokens", PASS, f"{total} tokens over {len(prompts)} prompts equal the oracle's", table)


def diverged(result: GateResult) -> int:
    """The prompts of a token gate's result whose ids left the oracle's."""
    return sum(r["first_divergence"] is not None for r in result.table)


def ids_digest(ids: list[int]) -> str:
    """A short digest of one prompt's new ids: equal digests, equal ids (sha256, its first 16 hex digits)."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


def token_selftest(prompts: list[list[int]], oracle: list[list[int]]) -> dict[str, int]:
    """The comparison shown able to fail in the same run: per prompt, the oracle's own ids with the last one
    changed must fail at exactly that prompt and position. `seeded`, and how many the gate `caught`."""
    seeded = caught = 0
    for i, theirs in enumerate(oracle):
        if not theirs:
            continue
        bad = [list(t) for t in oracle]
        bad[i][-1] = theirs[-1] + 1
        seeded += 1
        table = token_gate(prompts, bad, oracle).table
        caught += [r["first_divergence"] for r in table] == [
            len(theirs) - 1 if j == i else None for j in range(len(oracle))
        ]
    return {"seeded": seeded, "caught": caught}
