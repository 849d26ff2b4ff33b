"""engine.LLM(tensor_parallel_size=N) on the CPU over gloo: greedy tokens equal to one process (fp32) through
continuous batching, chunked prefill and preemption, on the tiny dense, MoE, Qwen3-Next and quantized models;
one-line errors for sizes the model cannot split and for a rank that dies.

Each LLM here spawns N-1 processes (a few seconds each on a loaded 2-core machine), so every case is one
small batch; N=4 runs once, on the dense model, where it also replicates the 2 KV heads over 4 ranks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import LLM, SamplingParams
from engine.distributed import RankError, check_devices
from engine.flags import FlagSnapshot
from engine.llm import TINY_MODEL
from engine.logprobs import Logprob
from engine.model import parallel
from engine.model.config import QuantConfig, parse_config
from engine.requests import RequestOutput
from tests.engine.conftest import TINY
from tests.engine.model.qwen3_next_tiny import next_checkpoint

__all__ = ["next_checkpoint"]  # the fixture, imported

GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
# 4 prompts through 2 sequences; 16-token steps chunk the 24- and 30-token prompts; 6 blocks of 8 are short
# of two long sequences at once, so one is preempted and recomputed
SERVE = dict(max_num_seqs=2, max_model_len=64, block_size=8, max_num_batched_tokens=16, num_blocks=6)
# the model tests' quantized shape (an intermediate size NVFP4's blocks of 16 divide)
QUANT_TINY = dict(intermediate_size=96)


def prompts(seed: int = 1, lens: tuple[int, ...] = (8, 24, 15, 30)) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(211) for _ in range(n)] for n in lens]


def run(path: Path, size: int, device: str = "cpu", **kw: object) -> tuple[list[list[int]], dict[str, int]]:
    llm = LLM(path, "float32", device, tensor_parallel_size=size, **{**SERVE, **kw})  # type: ignore[arg-type]
    try:
        outs = llm.generate(prompts(), GREEDY)
        llm.scheduler.check_empty()
        return [o.token_ids for o in outs], llm.stats
    finally:
        llm.shutdown()


def assert_same_as_one(path: Path, *sizes: int, **kw: object) -> None:
    one, stats = run(path, 1, **kw)
    assert stats["preemptions"] > 0 and stats["steps"] > stats["decode_steps"] > 0, stats
    assert all(len(set(t)) > 2 for t in one), one  # teeth: not a constant token
    for size in sizes:
        assert run(path, size, **kw) == (one, stats), f"tensor_parallel_size={size}"


def test_dense_two_and_four_ranks_give_the_tokens_of_one(tiny_checkpoint: Callable[..., Path]) -> None:
    # 4 query heads and 2 KV heads: 2 ranks split both, 4 ranks hold one KV head per pair of ranks
    assert_same_as_one(tiny_checkpoint("dense", seed=3), 2, 4)


def test_moe_two_ranks_split_every_expert(tiny_checkpoint: Callable[..., Path]) -> None:
    assert_same_as_one(tiny_checkpoint("moe", seed=4), 2)


def test_qwen3_next_two_ranks_split_the_delta_net_heads(next_checkpoint: Callable[[str], Path]) -> None:
    # gated delta net layers (2 key heads, 4 value heads, a recurrent state per rank) and gated attention
    assert_same_as_one(next_checkpoint("moe-shared-expert"), 2)


@pytest.mark.parametrize("method", ["awq", "gptq", "gptq-act-order", "gptq-8bit", "nvfp4"])
def test_quantized_two_ranks_cut_along_the_packing(method: str, tmp_path: Path) -> None:
    from lab.data.make_tiny import build
    from lab.data.make_tiny_quant import write_pair

    quantized, _ = write_pair(build(5, **{**TINY, **QUANT_TINY}), method, tmp_path)
    assert_same_as_one(quantized, 2)


def test_synchronous_scheduling_drives_the_ranks_alike(tiny_checkpoint: Callable[..., Path]) -> None:
    """VT_ASYNC_SCHEDULE off: every decode step is one run_step message (the other tests run the default,
    where rank 0 prepares a decode step before it reads the last and sends it at launch)."""
    flags = FlagSnapshot.defaults().with_(VT_ASYNC_SCHEDULE=False)
    assert_same_as_one(tiny_checkpoint("dense", seed=3), 2, flags=flags)


def test_a_head_count_the_ranks_cannot_split_is_one_line(tiny_checkpoint: Callable[..., Path]) -> None:
    with pytest.raises(ValueError) as err:
        LLM(tiny_checkpoint("dense", seed=3), "float32", "cpu", tensor_parallel_size=3, **SERVE)  # type: ignore[arg-type]
    assert str(err.value) == "tensor_parallel_size=3: num_attention_heads=4 is not divisible by 3"


def test_kv_heads_split_replicate_or_refuse() -> None:
    assert [parallel.Shard(r, 2).kv_heads(4) for r in range(2)] == [range(0, 2), range(2, 4)]
    assert [parallel.Shard(r, 4).kv_heads(2) for r in range(4)] == [range(0, 1)] * 2 + [range(1, 2)] * 2
    with pytest.raises(ValueError) as err:
        parallel.Shard(0, 4).kv_heads(3)
    assert str(err.value) == (
        "tensor_parallel_size=4: num_key_value_heads=3 neither divides by nor divides 4, so the KV heads "
        "can be neither split nor replicated"
    )


def test_more_ranks_than_devices_is_one_line() -> None:
    check_devices(2, "cuda", visible=2)
    check_devices(8, "cpu", visible=0)  # CPU ranks are processes
    with pytest.raises(ValueError) as err:
        check_devices(4, "cuda", visible=2)
    assert str(err.value) == "tensor_parallel_size=4 needs 4 CUDA devices; 2 visible"


def test_a_killed_rank_ends_the_run_with_its_error(tiny_checkpoint: Callable[..., Path]) -> None:
    # a short collective timeout: were the death not seen, the step would fail on the timeout, not hang
    llm = LLM(tiny_checkpoint("dense", seed=3), "float32", "cpu", tensor_parallel_size=2, tp_timeout_s=20, **SERVE)  # type: ignore[arg-type]
    workers = llm.runner.workers  # type: ignore[attr-defined]
    llm.add_request(prompts()[1], GREEDY)
    llm.step()  # the ranks run a step together
    os.kill(workers.procs[0].pid, signal.SIGKILL)
    with pytest.raises(RankError) as err:
        while llm.has_unfinished_requests():
            llm.step()
    assert str(err.value) == "tensor parallel: rank 1 died (killed by SIGKILL); every rank was stopped"
    assert all(not p.is_alive() for p in workers.procs)


def test_a_hung_rank_ends_the_run_on_the_collective_timeout(tiny_checkpoint: Callable[..., Path]) -> None:
    # a stopped process keeps its connections open: only the timeout on the collective ends the wait
    llm = LLM(tiny_checkpoint("dense", seed=3), "float32", "cpu", tensor_parallel_size=2, tp_timeout_s=2, **SERVE)  # type: ignore[arg-type]
    workers = llm.runner.workers  # type: ignore[attr-defined]
    llm.add_request(prompts()[1], GREEDY)
    llm.step()
    os.kill(workers.procs[0].pid, signal.SIGSTOP)
    with pytest.raises(RankError) as err:
        while llm.has_unfinished_requests():
            llm.step()
    assert str(err.value) == (
        "tensor parallel: a collective timed out after 2 s (tp_timeout_s) during a step; every rank was stopped"
    )
    assert all(not p.is_alive() for p in workers.procs)


def test_serve_over_two_ranks_answers_with_the_tokens_of_one() -> None:
    """`python -m engine serve --tensor-parallel-size 2`: a greedy completion as LLM on one process gives it."""
    ids = prompts()[1]
    one = LLM(TINY_MODEL, "float32", "cpu", max_num_seqs=1).generate([ids], GREEDY)[0].token_ids
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    root = Path(__file__).resolve().parents[2]
    argv = [sys.executable, "-m", "engine", "serve", "--device", "cpu", "--dtype", "float32", "--port", str(port)]
    proc = subprocess.Popen([*argv, "--tensor-parallel-size", "2"], cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    body = {"prompt": ids, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        end = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(request, timeout=60) as r:
                    out = json.loads(r.read())
                break
            except (urllib.error.URLError, ConnectionError):
                assert proc.poll() is None and time.monotonic() < end, proc.stderr.read().decode()  # type: ignore[union-attr]
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert out["choices"][0]["token_ids"] == one


def test_seeded_sampling_logprobs_and_penalties_match_one_rank(tiny_checkpoint: Callable[..., Path]) -> None:
    """Every rank samples from the gathered logits with the request's seed: the same tokens and logprobs."""
    path = tiny_checkpoint("dense", seed=3)
    params = [
        SamplingParams(max_tokens=5, temperature=0.9, top_p=0.9, seed=7, logprobs=2, prompt_logprobs=1),
        SamplingParams(max_tokens=5, temperature=0.7, top_k=20, seed=8, repetition_penalty=1.3, ignore_eos=True),
    ]
    outs = {}
    for size in (1, 2):
        llm = LLM(path, "float32", "cpu", tensor_parallel_size=size, **SERVE)  # type: ignore[arg-type]
        try:
            outs[size] = llm.generate(prompts()[:2], params)
        finally:
            llm.shutdown()
    assert [o.token_ids for o in outs[2]] == [o.token_ids for o in outs[1]]
    one, two = outs[1][0], outs[2][0]
    # the same tokens and ranks at every position; the values up to fp32 summation order (row-parallel sums)
    for mine, theirs in zip(flat(one), flat(two), strict=True):
        assert {t: lp.rank for t, lp in mine.items()} == {t: lp.rank for t, lp in theirs.items()}
        assert [lp.logprob for lp in mine.values()] == pytest.approx([lp.logprob for lp in theirs.values()], abs=1e-4)


def flat(out: RequestOutput) -> list[dict[int, Logprob]]:
    positions = [*(out.prompt_logprobs or []), *(out.outputs[0].logprobs or [])]
    assert len(positions) == len(prompts()[0]) + 5  # a None for the first prompt token, then every one
    return [p for p in positions if p is not None]


def test_a_quantized_slice_off_its_groups_is_one_line_before_any_rank_starts() -> None:
    # the quantized tiny shape: 4 ranks leave down_proj 24 input features each, off AWQ's groups of 16
    config = dataclasses.replace(
        parse_config(
            {"architectures": ["Qwen3ForCausalLM"], **TINY, **QUANT_TINY, "rms_norm_eps": 1e-6, "rope_theta": 1e4}
        ),
        quant=QuantConfig("awq", bits=4, group_size=16),
    )
    parallel.check(config, 2)
    with pytest.raises(ValueError) as err:
        parallel.check(config, 4)
    assert str(err.value) == (
        "tensor_parallel_size=4: down_proj would hold 24 input features per rank, not a multiple of AWQ "
        "qzeros's 16; use fewer ranks"
    )
    parallel.check(dataclasses.replace(config, quant=QuantConfig("gptq", group_size=16, desc_act=True)), 4)
