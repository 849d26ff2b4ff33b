"""The runner's one decode program: batched steps equal one-at-a-time runs, a step driven by hand through
run_step equals LLM.generate, padding and graph capture per padded batch size."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.flags import FlagSnapshot
from engine.llm import LLM
from engine.model.config import load_config
from engine.penalties import RowProcessors
from engine.runner import Runner, StepRow, resolve_dtype
from engine.sampler import Mode
from lab.drive import Session, greedy, greedy_tokens
from lab.gates.tokens import default_prompts

LENS = (3, 16, 1, 21, 9)  # unsorted, one exactly a block, one crossing it


def test_a_batch_equals_each_prompt_alone(tiny_model_dir) -> None:
    prompts = default_prompts(512, 11, LENS)
    batched = greedy_tokens(tiny_model_dir, prompts, 14)
    alone = [greedy_tokens(tiny_model_dir, [p], 14)[0] for p in prompts]
    assert batched == alone


def test_block_size_does_not_change_the_tokens(tiny_model_dir) -> None:
    prompts = default_prompts(512, 16, LENS)
    assert greedy_tokens(tiny_model_dir, prompts, 9, block_size=3) == greedy_tokens(tiny_model_dir, prompts, 9)


def test_steps_driven_by_hand_through_run_step_equal_llm_generate(tiny_model_dir) -> None:
    prompts = default_prompts(512, 12, (4, 7))
    expected = greedy_tokens(tiny_model_dir, prompts, 3)
    runner = Runner(tiny_model_dir, max_batch=2, max_model_len=48)
    session = Session(runner, [0, 1], prompts)
    steps = [session.prefill(), session.decode(), session.decode()]
    assert [list(t) for t in zip(*steps)] == expected
    # the next step's staged inputs: each row's fourth new token, at position len(p) + 2 of len(p) + 3 cached
    buf = session.prepare().device_inputs()
    assert buf["context_lens"].tolist() == [len(p) + 3 for p in prompts]
    assert buf["positions"].tolist() == [len(p) + 2 for p in prompts]
    assert buf["input_ids"].tolist() == steps[-1]
    session.close()
    assert runner.blocks.num_free == runner.blocks.num_blocks  # every block handed back


def test_cpu_runs_eagerly_without_padding(tiny_model_dir) -> None:
    runner = Runner(tiny_model_dir, max_batch=3, max_model_len=48)
    assert runner.use_graph is False
    assert runner.padded_batch(3) == 3
    session = Session(runner, [0, 1, 2], default_prompts(512, 3, (2, 3, 4)))
    session.prefill()
    assert session.prepare().padded == 3
    assert runner.captured == []  # nothing captured on a CPU


def test_cuda_pads_decode_batches_to_graph_buckets(tiny_model_dir) -> None:
    r = Runner(tiny_model_dir, max_batch=1, max_model_len=8)
    r.device = torch.device("cuda")  # only the bucket arithmetic is exercised: nothing runs
    assert [r.padded_batch(n) for n in (1, 3, 5, 8, 9, 256, 300)] == [1, 4, 8, 8, 16, 256, 300]


def cuda_llms(model_dir) -> tuple[LLM, LLM]:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the decode-step graph needs one")
    base = FlagSnapshot.from_env()
    eager, graph = (
        LLM(model_dir, "float32", "cuda", max_num_seqs=8, max_model_len=48, num_blocks=64, flags=base.with_(VT_EAGER=e))
        for e in (True, False)
    )
    assert (eager.runner.use_graph, graph.runner.use_graph) == (False, True)
    return eager, graph


@pytest.mark.gpu
def test_cuda_graph_or_fallback_equals_eager_and_cpu(tiny_model_dir) -> None:
    prompts = default_prompts(512, 13, LENS)
    eager, graph = cuda_llms(tiny_model_dir)
    got = greedy(graph, prompts, 12)
    assert got == greedy(eager, prompts, 12)
    assert got == greedy_tokens(tiny_model_dir, prompts, 12)


@pytest.mark.gpu
def test_decode_step_is_captured_once_per_padded_batch(tiny_model_dir) -> None:
    _, graph = cuda_llms(tiny_model_dir)
    greedy(graph, default_prompts(512, 14, LENS), 4)
    greedy(graph, default_prompts(512, 15, (2, 3)), 4)
    # fails while an op inside the step syncs with the host (the torch references check values on the host)
    assert graph.runner.use_graph, "the decode step fell back to eager: an op in it is not capturable"
    assert set(graph.runner.captured) == {(8, Mode.GREEDY), (2, Mode.GREEDY)}


@pytest.mark.parametrize(
    "name, checkpoint, device, want",
    [
        ("auto", "float32", None, "float32"),  # the gates: the checkpoint's own dtype wherever they run
        ("auto", "float32", "cpu", "float32"),
        ("auto", "float32", "cuda", "bfloat16"),  # vLLM's auto: half precision on a GPU
        ("auto", None, "cuda:1", "bfloat16"),
        ("auto", "float16", "cuda", "float16"),
        ("auto", "bfloat16", "cpu", "bfloat16"),
        ("float16", "float32", "cuda", "float16"),  # a named dtype is taken as it is
    ],
)
def test_resolve_dtype_is_one_contract_for_the_engine_and_the_lab(
    tiny_model_dir, name: str, checkpoint: str | None, device: str | None, want: str
) -> None:
    config = dataclasses.replace(load_config(tiny_model_dir), torch_dtype=checkpoint)
    assert resolve_dtype(name, config, device) == want


def test_resolve_dtype_names_a_dtype_it_does_not_run(tiny_model_dir) -> None:
    with pytest.raises(ValueError, match="dtype 'int8': expected auto or one of float32, bfloat16, float16"):
        resolve_dtype("int8", load_config(tiny_model_dir), "cpu")


def test_a_decode_shape_is_staged_into_the_same_device_tensors_every_step(tiny_model_dir) -> None:
    # what a captured graph relies on (checked here on the CPU, where nothing is captured): a decode step of one
    # padded size and one processors' width reads the tensors the last one of that shape read; another width
    # is another staging, and a mixed step between them moves neither
    runner = Runner(tiny_model_dir, max_batch=2, max_model_len=48)
    session = Session(runner, [0, 1], default_prompts(512, 5, (3, 6)))
    session.prefill()

    def staged(processors: RowProcessors | None = None) -> dict[str, int]:
        rows = session.decode_rows()
        rows[0].processors = processors
        return {k: t.data_ptr() for k, t in runner.prepare_decode(rows).device_inputs().items()}

    plain = staged()
    penalized = staged(RowProcessors(presence=0.5, output=[1, 2]))
    assert "proc_tokens" in penalized and "proc_tokens" not in plain
    assert set(plain.values()).isdisjoint(penalized.values())
    session.last = session.decode()  # a decode step through run_step
    runner.run_step([StepRow([7, 8], 0, runner.blocks.allocate(5, 2))], decode=False)  # a mixed step
    assert staged() == plain
    assert staged(RowProcessors(presence=0.5, output=[3, 4])) == penalized  # the same width: the same staging
    session.close()


class TableWidths(Runner):
    """A runner that records the block-table width each decode step (sample_step) and each mixed step reads."""

    def __init__(self, *a: object, **kw: object) -> None:
        super().__init__(*a, **kw)  # type: ignore[arg-type]
        self.decode_widths: list[int] = []

    def sample_step(self, *a: object, **kw: object) -> torch.Tensor:  # type: ignore[override]
        self.decode_widths.append(kw["block_tables"].shape[1])  # type: ignore[union-attr]
        return super().sample_step(*a, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("eager", [True, False])
def test_every_decode_step_stages_the_full_block_table_capacity(tiny_checkpoint, eager) -> None:
    # the width sizes split-KV's split count (engine.cuda.splitkv.capacity): one width per LLM keeps every decode
    # step, eager or replayed, on one summation order; a mixed step (eager in either mode) stages its longest table
    model = tiny_checkpoint("dense", seed=3, head_dim=64, max_position_embeddings=2048)
    flags = FlagSnapshot.from_env().with_(VT_EAGER=eager)
    llm = LLM(model, "float32", "cpu", max_num_seqs=4, max_model_len=1100, flags=flags, runner_class=TableWidths)
    greedy(llm, default_prompts(211, 17, (1, 13, 300)), 10)
    runner = llm.runner
    assert isinstance(runner, TableWidths)
    assert runner.max_blocks_per_seq == 69  # ceil(1100 / 16)
    assert len(runner.decode_widths) >= 9 and set(runner.decode_widths) == {69}
