"""The offline serving API, with vLLM's meanings: `LLM(model).generate(prompts, SamplingParams(...))`.

    from engine import LLM, SamplingParams
    llm = LLM()                                   # the embedded tiny Qwen3 on the CPU
    out = llm.generate(["Hello"], SamplingParams(temperature=0.8, seed=1, max_tokens=8))

Requests go through the scheduler (continuous batching, chunked prefill, preemption by recompute,
prefix caching) and the runner (a captured decode graph per padded batch size and sampling mode on CUDA).
A model with recurrent layers (Qwen3-Next's gated delta nets) holds a state slot per running sequence
beside its KV blocks, and serves without the prefix cache: a cached KV prefix has no state snapshot.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence as Seq
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from engine.flags import FlagSnapshot
from engine.model.config import checkpoint_dtype, load_config
from engine.runner import DTYPES, PreparedDecode, Runner, StepRow
from engine.sampling_params import SamplingParams
from engine.scheduler import ScheduledStep, Scheduler
from engine.sequence import Sequence, Status

TINY_MODEL = Path(__file__).resolve().parent / "data" / "tiny-qwen3"
DEFAULT_MAX_MODEL_LEN = 4096
GPU_MEMORY_UTILIZATION = 0.9  # the fraction of free device memory the weights and the KV cache may take
ACTIVATION_RESERVE = 2 << 30  # bytes kept free for activations besides the per-row logits


@dataclass
class RequestOutput:
    index: int  # the request's place in the prompt list (generate) or its id (add_request)
    prompt_token_ids: list[int]
    token_ids: list[int]  # generated tokens; a stop token or EOS that ended the request is included
    text: str | None  # the generated tokens decoded (special tokens skipped); None without a tokenizer
    finish_reason: str  # "stop" (EOS or a stop token) or "length" (max_tokens or max_model_len)
    num_cached_tokens: int  # prompt tokens the prefix cache supplied at the last admission


class LLM:
    """A model, its KV cache and a scheduler; `generate` runs requests to completion.

    model: a Hugging Face model directory (None: the embedded tiny Qwen3). dtype: "auto" takes the
    checkpoint's dtype on CUDA and float32 on the CPU. device: None picks CUDA when available.
    num_blocks: KV-cache blocks (None: on the CPU every sequence's worst case, on CUDA what fits in
    GPU_MEMORY_UTILIZATION of the free memory). max_num_batched_tokens: the token budget of one step
    (prompts longer than it are prefilled in chunks). enable_prefix_caching: share the KV blocks of equal
    prompt prefixes; always off for a model with recurrent layers (Qwen3-Next), whose state after a prefix
    is not cached with its blocks. seed: the generator of requests without a seed.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        dtype: str = "auto",
        device: str | None = None,
        max_num_seqs: int = 64,
        max_model_len: int | None = None,
        block_size: int = 16,
        num_blocks: int | None = None,
        max_num_batched_tokens: int = 2048,
        enable_prefix_caching: bool = True,
        seed: int = 0,
        flags: FlagSnapshot | None = None,  # the kernel arms' flags (default: the environment, read once)
        runner_class: type[Runner] = Runner,  # a Runner subclass: a benchmark's, timing its public step methods
    ) -> None:
        self.model_dir = Path(model) if model is not None else TINY_MODEL
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        config = load_config(self.model_dir)
        torch_dtype = resolve_dtype(dtype, config, device)
        self.max_model_len = max_model_len or min(config.max_position_embeddings, DEFAULT_MAX_MODEL_LEN)
        if self.max_model_len > config.max_position_embeddings:
            raise ValueError(
                f"max_model_len={self.max_model_len} exceeds the model's max_position_embeddings="
                f"{config.max_position_embeddings}"
            )
        if num_blocks is None and device.startswith("cuda"):
            num_blocks = cuda_num_blocks(self.model_dir, config, torch_dtype, block_size, max_num_seqs, device)
        max_blocks = -(-self.max_model_len // block_size)
        self.runner = runner_class(
            self.model_dir,
            torch_dtype,
            device,
            max_batch=max_num_seqs,
            max_model_len=self.max_model_len,
            block_size=block_size,
            num_blocks=num_blocks or max_num_seqs * max_blocks,
            flags=flags,
        )
        self.config = self.runner.config
        self.tokenizer = load_tokenizer(self.model_dir)
        self.eos_token_ids = frozenset(eos_token_ids(self.model_dir))
        recurrent = self.runner.recurrent is not None
        self.prefix_caching = enable_prefix_caching and not recurrent
        self.runner.blocks.prefix_caching = self.prefix_caching
        self.scheduler = Scheduler(
            self.runner.blocks,
            max_num_seqs,
            max_num_batched_tokens,
            self.eos_token_ids,
            self.max_model_len,
            num_state_slots=max_num_seqs if recurrent else 0,
        )
        self._rng = random.Random(seed)
        self._next_id = 0
        self._inflight: tuple[ScheduledStep, torch.Tensor] | None = None  # a decode step launched, not read

    @property
    def in_flight(self) -> bool:
        """Whether a decode step is launched and not yet read back (VT_ASYNC_SCHEDULE)."""
        return self._inflight is not None

    @property
    def stats(self) -> dict[str, int]:
        """Counters since construction: steps, decode_steps, computed_tokens, prefix_cached_tokens, preemptions."""
        return self.scheduler.stats

    def generate(
        self,
        prompts: str | Seq[int] | Seq[str | Seq[int]],
        params: SamplingParams | Seq[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run every prompt (text or token ids) to completion; outputs in prompt order.

        Every request is checked before any runs: a bad one raises a ValueError naming it and its field,
        and nothing is queued."""
        single = isinstance(prompts, str) or (len(prompts) > 0 and isinstance(prompts[0], int))
        plist: list[Any] = [prompts] if single else list(prompts)
        if not plist:
            raise ValueError("generate: no prompts given")
        if params is None or isinstance(params, SamplingParams):
            per = [params or SamplingParams()] * len(plist)
        else:
            per = list(params)
            if len(per) != len(plist):
                raise ValueError(f"generate: {len(per)} SamplingParams for {len(plist)} prompts")
        checked = [self._check(i, p, sp) for i, (p, sp) in enumerate(zip(plist, per))]
        seqs = [self._enqueue(i, ids, sp) for i, (ids, sp) in enumerate(checked)]
        done: dict[int, RequestOutput] = {}
        try:
            while len(done) < len(seqs):
                for out in self.step():
                    done[out.index] = out
        except BaseException:
            self._inflight = None
            self.scheduler.abort_all()
            raise
        return [done[s.index] for s in seqs]

    def add_request(self, prompt: str | Seq[int], params: SamplingParams | None = None) -> int:
        """Queue one request; returns its id. A bad request raises here and queues nothing."""
        rid = self._next_id
        ids, sp = self._check(rid, prompt, params or SamplingParams())
        self._enqueue(rid, ids, sp)
        return rid

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[RequestOutput]:
        """One scheduled step; returns the requests it finished. With VT_ASYNC_SCHEDULE a decode step is
        launched and read back by the next call, which schedules and stages its own step first."""
        if self._inflight is not None or self.runner.flags.enabled("VT_ASYNC_SCHEDULE"):
            return self._step_overlapped()
        return self._run(self._schedule())

    def _schedule(self) -> ScheduledStep:
        plan = self.scheduler.schedule()
        if not plan.rows:
            raise RuntimeError(
                f"scheduler: no step possible with {len(self.scheduler.waiting)} waiting, "
                f"{self.runner.blocks.num_free} of {self.runner.blocks.num_blocks} blocks free"
            )
        return plan

    def _run(self, plan: ScheduledStep) -> list[RequestOutput]:
        """A scheduled step synchronously: its rows through the runner, its tokens read and postprocessed."""
        sampled = self.runner.run_step(self._rows(plan), plan.decode)
        return [self._output(s) for s in self.scheduler.postprocess(plan, sampled)]

    def _step_overlapped(self) -> list[RequestOutput]:
        """Read back the decode step in flight only once the next step is scheduled and its inputs staged, so
        that host work overlaps the device's. Token counts are all the scheduler needs (advance gives the
        rows placeholder tokens); a row whose token turns out to stop it is dropped from the staged step,
        which is then staged again. Mixed steps run synchronously."""
        runner = self.runner
        done: list[RequestOutput] = []
        if self._inflight is None:
            plan = self._schedule()
            if not plan.decode:
                return self._run(plan)
            prepared: PreparedDecode | None = runner.prepare_decode(self._rows(plan))
        else:
            last, out = self._inflight
            self._inflight = None
            ended = self.scheduler.advance(last)
            plan = self.scheduler.schedule()
            prepared = runner.prepare_decode(self._rows(plan)) if plan.decode and plan.rows else None
            sampled = runner.read_tokens(out, len(last.rows))  # waits for the device
            stopped = self.scheduler.settle(last, sampled)
            done = [self._output(s) for s in ended + stopped]
            if stopped:  # those rows leave the next step: stage it again without them
                plan.rows = [(s, n) for s, n in plan.rows if s.status is Status.RUNNING]
                prepared = None
            if plan.rows and not plan.decode:
                return done + self._run(plan)
            if plan.rows and prepared is None:
                prepared = runner.prepare_decode(self._rows(plan))
        if plan.rows:
            assert prepared is not None
            tokens = [seq.token_ids[-1] for seq, _ in plan.rows]  # a decode row computes its last token
            self._inflight = (plan, runner.launch_decode(prepared, tokens))
        return done

    def _rows(self, plan: ScheduledStep) -> list[StepRow]:
        tables = self.runner.blocks.tables
        rows = []
        for seq, n in plan.rows:
            c, ids = seq.num_computed, seq.token_ids
            p = seq.params
            rows.append(
                StepRow(
                    ids[c : c + n],
                    c,
                    tables[seq.seq_id],
                    p.temperature,
                    p.top_k,
                    p.top_p,
                    seq.seed,
                    len(ids) - seq.num_prompt_tokens,
                    seq.state_slot,
                )
            )
        return rows

    # --- requests -------------------------------------------------------------
    def _check(self, index: int, prompt: Any, params: SamplingParams) -> tuple[list[int], SamplingParams]:
        if not isinstance(params, SamplingParams):
            raise TypeError(f"request {index}: params must be a SamplingParams, got {type(params).__name__}")
        params.check(index)
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError(
                    f"request {index}: prompt is text, but {self.model_dir} has no tokenizer.json; pass token ids"
                )
            ids = self.tokenizer.encode(prompt).ids
        elif isinstance(prompt, (list, tuple)) and all(isinstance(t, int) for t in prompt):
            ids = list(prompt)
        else:
            raise TypeError(f"request {index}: prompt must be a str or a list of token ids")
        if not ids:
            raise ValueError(f"request {index}: prompt is empty")
        vocab = self.config.vocab_size
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"request {index}: prompt token id {bad[0]} outside the vocabulary [0, {vocab})")
        if len(ids) >= self.max_model_len:
            raise ValueError(
                f"request {index}: prompt of {len(ids)} tokens leaves no room in max_model_len={self.max_model_len}"
            )
        blocks = self.runner.blocks
        need = blocks.blocks_needed(min(len(ids) + params.max_tokens, self.max_model_len))
        if need > blocks.num_blocks:
            raise ValueError(
                f"request {index}: prompt + max_tokens need {need} KV blocks, the cache has "
                f"num_blocks={blocks.num_blocks}"
            )
        bad_stop = [t for t in params.stop_token_ids if not 0 <= t < vocab]
        if bad_stop:
            raise ValueError(f"request {index}: SamplingParams.stop_token_ids has {bad_stop[0]}, outside [0, {vocab})")
        return ids, params

    def _enqueue(self, index: int, ids: list[int], params: SamplingParams) -> Sequence:
        seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
        seq = Sequence(self._next_id, index, list(ids), len(ids), params, seed)
        self._next_id += 1
        self.scheduler.add(seq)
        return seq

    def _output(self, seq: Sequence) -> RequestOutput:
        out = seq.output_ids
        text = self.tokenizer.decode(out, skip_special_tokens=True) if self.tokenizer is not None else None
        return RequestOutput(
            seq.index, seq.token_ids[: seq.num_prompt_tokens], out, text, seq.finish_reason or "length", seq.num_cached
        )


def resolve_dtype(name: str, config: Any, device: str) -> torch.dtype:
    """`auto`: the checkpoint's torch_dtype (float32 if it names none); on CUDA a float32 checkpoint runs in
    bfloat16, as vLLM's `auto` runs it in half precision."""
    checkpoint = config.torch_dtype
    if name != "auto":
        if name not in DTYPES:
            raise ValueError(f"dtype {name!r}: expected auto or one of {', '.join(DTYPES)}")
        return DTYPES[name]
    if not device.startswith("cuda"):
        return DTYPES[checkpoint_dtype(config)]
    return DTYPES[checkpoint] if checkpoint in ("bfloat16", "float16") else torch.bfloat16


def cuda_num_blocks(
    model_dir: Path, config: Any, dtype: torch.dtype, block_size: int, max_num_seqs: int, device: str
) -> int:
    """KV blocks that fit beside the weights and the step's activations in the free device memory."""
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    elem = torch.empty((), dtype=dtype).element_size()
    weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
    logits = max_num_seqs * config.vocab_size * 48  # fp32 logits and the sampler's temporaries per row
    kv_layers = sum(1 for i in range(config.num_hidden_layers) if config.has_kv_cache(i))
    per_block = 2 * kv_layers * block_size * config.num_key_value_heads * config.head_dim * elem
    budget = int(free * GPU_MEMORY_UTILIZATION) - weights - logits - ACTIVATION_RESERVE
    budget -= recurrent_state_bytes(config, max_num_seqs + 1, elem)
    if budget < per_block:
        raise ValueError(
            f"no device memory left for the KV cache ({free / 2**30:.1f} GiB free, "
            f"weights {weights / 2**30:.1f} GiB); pass num_blocks"
        )
    return int(budget // per_block)


def recurrent_state_bytes(config: Any, slots: int, elem: int) -> int:
    """Bytes of the gated delta net layers' state for `slots` sequences (conv inputs in the model dtype, the
    state in fp32); 0 for a model without recurrent layers."""
    g = config.gdn
    if g is None:
        return 0
    layers = sum(1 for i in range(config.num_hidden_layers) if g.is_linear(i))
    per_slot = g.conv_dim * g.conv_kernel * elem + g.num_value_heads * g.key_head_dim * g.value_head_dim * 4
    return layers * slots * per_slot


def load_tokenizer(model_dir: Path) -> Any:
    """The model directory's tokenizer.json through the `tokenizers` library, or None without one."""
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import (
        Tokenizer,  # why: only a model directory with a tokenizer.json needs the package
    )

    return Tokenizer.from_file(str(path))


def eos_token_ids(model_dir: Path) -> list[int]:
    """EOS ids from generation_config.json, else config.json (an int or a list in either)."""
    for name in ("generation_config.json", "config.json"):
        path = model_dir / name
        if path.is_file():
            value = json.loads(path.read_text()).get("eos_token_id")
            if value is not None:
                return [value] if isinstance(value, int) else [int(v) for v in value]
    return []
