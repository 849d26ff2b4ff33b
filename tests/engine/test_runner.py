"""The runner: batched prefill and decode equal one-at-a-time runs, a separable decode step, request checks, graphs."""

from __future__ import annotations

import pytest
import torch

from engine.flags import FlagSnapshot
from engine.runner import Runner
from lab.gates.tokens import default_prompts

LENS = (3, 16, 1, 21, 9)  # unsorted, one exactly a block, one crossing it


@pytest.fixture(scope="module")
def runner(tiny_model_dir) -> Runner:
    return Runner(tiny_model_dir, max_batch=5, max_model_len=48)


def test_a_batch_equals_each_prompt_alone(runner: Runner) -> None:
    prompts = default_prompts(512, 11, LENS)
    batched = runner.generate(prompts, 14).tokens
    alone = [runner.generate([p], 14).tokens[0] for p in prompts]
    assert batched == alone
    assert runner.blocks.num_free == runner.blocks.num_blocks  # every block handed back


def test_block_size_does_not_change_the_tokens(runner: Runner, tiny_model_dir) -> None:
    prompts = default_prompts(512, 16, LENS)
    small_blocks = Runner(tiny_model_dir, max_batch=5, max_model_len=48, block_size=3)
    assert small_blocks.generate(prompts, 9).tokens == runner.generate(prompts, 9).tokens


def test_decode_step_is_separable_from_the_loop(runner: Runner) -> None:
    prompts = default_prompts(512, 12, (4, 7))
    expected = runner.generate(prompts, 3).tokens
    # drive prefill and two decode steps by hand through the static buffers
    for sid, p in enumerate(prompts):
        runner.blocks.allocate(sid, len(p))
    try:
        with torch.inference_mode():
            first = runner.prefill([0, 1], prompts).tolist()
            steps = [first]
            for _ in range(2):
                steps.append(runner.decode([0, 1], steps[-1]).tolist())
            buf = runner._step_inputs(2).device_views
            assert buf["context_lens"].tolist() == [len(p) + 2 for p in prompts]
            assert buf["positions"].tolist() == [len(p) + 1 for p in prompts]
    finally:
        runner.blocks.free(0)
        runner.blocks.free(1)
    assert [list(t) for t in zip(*steps)] == expected


@pytest.mark.parametrize(
    "prompts, new, message",
    [
        ([], 4, "no prompts given"),
        ([[1]] * 6, 4, "6 prompts exceed max_batch=5"),
        ([[1], []], 4, "prompt 1 is empty"),
        ([[1, 512]], 4, "prompt 0: token id 512 outside the vocabulary [0, 512)"),
        ([[1] * 40], 9, "prompt 0: 40 tokens + 9 new exceed max_model_len=48"),
        ([[1]], 0, "max_new_tokens=0 must be at least 1"),
    ],
)
def test_bad_requests_are_named(runner: Runner, prompts, new: int, message: str) -> None:
    with pytest.raises(ValueError) as err:
        runner.generate(prompts, new)
    assert str(err.value) == message


def test_cpu_runs_eagerly_without_padding(runner: Runner) -> None:
    assert runner.use_graph is False
    assert runner._padded_batch(3) == 3


def test_cuda_pads_decode_batches_to_graph_buckets(tiny_model_dir) -> None:
    r = Runner(tiny_model_dir, max_batch=1, max_model_len=8)
    r.device = torch.device("cuda")  # only the bucket arithmetic is exercised: nothing runs
    assert [r._padded_batch(n) for n in (1, 3, 5, 8, 9, 256, 300)] == [1, 4, 8, 8, 16, 256, 300]


def cuda_runners(model_dir, monkeypatch) -> tuple[Runner, Runner]:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the decode-step graph needs one")
    base = FlagSnapshot.from_env()
    eager = Runner(model_dir, device="cuda", max_batch=8, max_model_len=48, flags=base.with_(VT_EAGER=True))
    graph = Runner(model_dir, device="cuda", max_batch=8, max_model_len=48, flags=base.with_(VT_EAGER=False))
    assert (eager.use_graph, graph.use_graph) == (False, True)
    return eager, graph


@pytest.mark.gpu
def test_cuda_graph_or_fallback_equals_eager_and_cpu(tiny_model_dir, monkeypatch) -> None:
    eager, graph = cuda_runners(tiny_model_dir, monkeypatch)
    prompts = default_prompts(512, 13, LENS)
    got = graph.generate(prompts, 12).tokens
    assert got == eager.generate(prompts, 12).tokens
    assert got == Runner(tiny_model_dir, max_batch=8, max_model_len=48).generate(prompts, 12).tokens


@pytest.mark.gpu
def test_decode_step_is_captured_once_per_padded_batch(tiny_model_dir, monkeypatch) -> None:
    _, graph = cuda_runners(tiny_model_dir, monkeypatch)
    graph.generate(default_prompts(512, 14, LENS), 4)
    graph.generate(default_prompts(512, 15, (2, 3)), 4)
    # fails while an op inside the step syncs with the host (the torch references check values on the host)
    assert graph.use_graph, "the decode step fell back to eager: an op in it is not capturable"
    assert set(graph._graphs) == {8, 2}


def test_running_out_of_blocks_in_allocation_leaks_nothing(tiny_model_dir) -> None:
    from engine.block_manager import OutOfBlocksError

    small = Runner(tiny_model_dir, max_batch=3, max_model_len=48, num_blocks=3)
    prompts = default_prompts(512, 17, (20, 20, 20))  # 2 blocks each: the second prompt's allocation fails
    with pytest.raises(OutOfBlocksError, match="sequence 1 needs 2 blocks for 20 tokens, 1 of 3 free"):
        small.generate(prompts, 4)
    assert small.blocks.num_free == 3 and not small.blocks.tables  # the first prompt's blocks came back
    assert (
        small.generate(prompts[:1], 4).tokens
        == Runner(tiny_model_dir, max_batch=1, max_model_len=48).generate(prompts[:1], 4).tokens
    )
