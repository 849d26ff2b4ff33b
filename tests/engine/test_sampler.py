"""The in-step sampler: its draws follow the reference distribution, per-request seeds, exact greedy at T=0."""

from __future__ import annotations

import pytest
import torch

from engine.flags import FlagSnapshot
from engine.ops.sample import _top_k_set, _top_p_set, sample_top_k_top_p
from engine.runner import StepRow, rows_mode
from engine.sampler import NO_EXTRAS, Mode, sample
from engine.staging import StepStaging

SNAP = FlagSnapshot.defaults()  # the default arms (on the CPU: the references)

VOCAB = 8
LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, 0.25])
DRAWS = 40_000
P_FLOOR = 1e-4  # a correct sampler fails a case about once in 10,000 runs


def reference_probs(logits: torch.Tensor, t: float, k: int, p: float) -> torch.Tensor:  # -> [vocab]
    """The distribution engine.ops.sample.sample_top_k_top_p draws from, computed exactly."""
    scaled = logits.float()[None] / t
    keep = _top_p_set(scaled, _top_k_set(scaled, torch.tensor([k])), torch.tensor([p]))
    return torch.softmax(scaled.masked_fill(~keep, float("-inf")), dim=-1)[0]


def chi_square_p(tokens: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of Pearson's chi-square of the token counts against probs; a token of probability 0 drawn is p=0."""
    counts = torch.bincount(tokens, minlength=probs.numel()).double()
    if bool((counts[probs == 0] > 0).any()):
        return 0.0
    support = probs > 0
    expected = probs[support].double() * tokens.numel()
    stat = float(((counts[support] - expected) ** 2 / expected).sum())
    dof = int(support.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2)))


def draw(t: float, k: int, p: float, n: int = DRAWS, logits: torch.Tensor = LOGITS) -> torch.Tensor:
    """n draws: one row per seed, all with the same logits."""
    rows = logits[None].expand(n, VOCAB)
    return sample(
        SNAP,
        rows,
        torch.full((n,), t),
        torch.full((n,), k),
        torch.full((n,), p),
        torch.arange(n, dtype=torch.int64) * 7919 + 11,
        torch.zeros(n, dtype=torch.int64),
        Mode.FILTERED,
    )


@pytest.mark.parametrize("t, k, p", [(1.0, -1, 1.0), (0.7, -1, 1.0), (1.3, 3, 1.0), (1.0, -1, 0.8), (0.9, 5, 0.6)])
def test_draws_follow_the_reference_distribution(t: float, k: int, p: float) -> None:
    probs = reference_probs(LOGITS, t, k, p)
    assert chi_square_p(draw(t, k, p), probs) > P_FLOOR
    # the reference op itself, through its CPU generator, passes the same test (the test has a fair bar)
    ref = sample_top_k_top_p(LOGITS[None].expand(DRAWS, VOCAB), k, p, t, torch.Generator().manual_seed(3))
    assert chi_square_p(ref, probs) > P_FLOOR


@pytest.mark.parametrize(
    "wrong, right, drawn",
    [
        ("temperature ignored", (0.7, 3, 1.0), (1.0, 3, 1.0)),
        ("top-k off by one", (1.0, 3, 1.0), (1.0, 4, 1.0)),
        ("top-p ignored", (1.0, -1, 0.8), (1.0, -1, 1.0)),
        ("temperature 10% off", (1.0, -1, 1.0), (1.1, -1, 1.0)),
    ],
)
def test_the_chi_square_test_catches_a_wrong_distribution(wrong: str, right: tuple, drawn: tuple) -> None:
    assert chi_square_p(draw(*drawn), reference_probs(LOGITS, *right)) < P_FLOOR, wrong


def test_temperature_zero_is_exactly_greedy() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 97, generator=gen)
    logits[4, 10] = logits[4, 3] = logits[4].max() + 1  # a tie: the lowest index wins, as torch.argmax
    n = logits.shape[0]
    temps = torch.where(torch.arange(n) % 2 == 0, 0.0, 1.0)  # greedy rows beside sampling rows
    for k, p in [(5, 0.5), (-1, 1.0)]:  # a greedy row ignores its top-k and top-p
        got = sample(
            SNAP, logits, temps, torch.full((n,), k), torch.full((n,), p), torch.arange(n), torch.zeros(n).long()
        )
        assert torch.equal(got[::2], torch.argmax(logits, dim=-1)[::2])
        assert int(got[4]) == 3
    assert not torch.equal(got[1::2], torch.argmax(logits, dim=-1)[1::2])  # the sampling rows do sample


def test_a_seed_gives_the_same_token_whatever_is_beside_it() -> None:
    gen = torch.Generator().manual_seed(1)
    row = torch.randn(VOCAB * 8, generator=gen)
    alone = [
        int(
            sample(
                SNAP,
                row[None],
                torch.tensor([1.0]),
                torch.tensor([-1]),
                torch.tensor([1.0]),
                torch.tensor([seed]),
                torch.tensor([step]),
                Mode.RANDOM,
            )
        )
        for seed, step in [(42, 0), (42, 1), (43, 0)]
    ]
    others = torch.randn(5, VOCAB * 8, generator=gen)
    batch = torch.cat([others[:2], row[None], others[2:]])  # the same request at row 2 of 6
    temps = torch.tensor([0.0, 0.5, 1.0, 1.5, 1.0, 1.0])
    for (seed, step), want in zip([(42, 0), (42, 1), (43, 0)], alone):
        seeds = torch.tensor([1, 2, seed, 4, 5, 6])
        steps = torch.tensor([9, 9, step, 9, 9, 9])
        got = sample(
            SNAP,
            batch,
            temps,
            torch.tensor([-1, 3, -1, -1, 2, -1]),
            torch.tensor([1.0, 1, 1, 0.5, 1, 1]),
            seeds,
            steps,
            Mode.FILTERED,
        )
        assert int(got[2]) == want
    # another seed, or the next token of the same request, draws from a fresh stream
    many = [
        int(
            sample(
                SNAP,
                row[None],
                torch.tensor([1.0]),
                torch.tensor([-1]),
                torch.tensor([1.0]),
                torch.tensor([s]),
                torch.tensor([0]),
                Mode.RANDOM,
            )
        )
        for s in range(40)
    ]
    assert len(set(many)) > 10


def mode_of(*rows: tuple[float, int, float]) -> Mode:
    """rows_mode of rows with these (temperature, top_k, top_p), in a vocabulary of 100."""
    return rows_mode([StepRow([1], 0, [0], t, k, p) for t, k, p in rows], 100)


def test_rows_mode_picks_the_cheapest_step_that_serves_every_row() -> None:
    assert mode_of((0.0, 5, 0.5), (0.0, -1, 1.0)) is Mode.GREEDY  # greedy rows ignore k and p
    assert mode_of((0.0, -1, 1.0), (0.8, 0, 1.0)) is Mode.RANDOM
    assert mode_of((0.8, 100, 1.0)) is Mode.RANDOM  # k >= vocab keeps everything
    assert mode_of((0.0, -1, 1.0), (0.8, 40, 1.0)) is Mode.FILTERED
    assert mode_of((0.8, -1, 0.9)) is Mode.FILTERED


def test_random_mode_equals_filtered_mode_without_filters() -> None:
    logits = torch.randn(16, 50, generator=torch.Generator().manual_seed(2))
    args = (torch.full((16,), 0.9), torch.full((16,), -1), torch.ones(16), torch.arange(16), torch.arange(16))
    assert torch.equal(sample(SNAP, logits, *args, Mode.RANDOM), sample(SNAP, logits, *args, Mode.FILTERED))


@pytest.mark.gpu
def test_sampling_replays_in_a_cuda_graph_with_the_eager_tokens() -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: graph capture needs one")
    dev = torch.device("cuda")
    n, vocab = 8, 4096
    logits = torch.randn(n, vocab, device=dev, dtype=torch.bfloat16)
    staging = StepStaging(dev)

    def stage(temperature: list[float], top_k: list[int], top_p: list[float], seeds: list[int], steps: list[int]):
        rows = [StepRow([0], 0, [0], *args) for args in zip(temperature, top_k, top_p, seeds, steps)]
        staging.stage_decode(rows, n, 16, 1, NO_EXTRAS, vocab)
        views = staging.upload()
        return {k: views[k] for k in ("temperature", "top_k", "top_p", "seeds", "steps")}

    buf = stage(
        [0.0, 0.7, 1.0, 1.2, 0.9, 1.0, 0.5, 1.0],
        [-1, 5, -1, 50, -1, 2, -1, -1],
        [1.0, 1.0, 0.9, 0.8, 1.0, 1.0, 0.3, 1.0],
        list(range(n)),
        [0] * n,
    )
    eager = sample(SNAP, logits, mode=Mode.FILTERED, **buf).clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        sample(SNAP, logits, mode=Mode.FILTERED, **buf)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sample(SNAP, logits, mode=Mode.FILTERED, **buf)
    graph.replay()
    assert torch.equal(out, eager)
    # new seeds through the same graph: what eager gives for them
    stage([1.0] * n, [-1] * n, [1.0] * n, [100 + i for i in range(n)], [3] * n)
    graph.replay()
    assert torch.equal(out, sample(SNAP, logits, mode=Mode.FILTERED, **buf))
