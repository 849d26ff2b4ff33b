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
import sys
import time
from collections.abc import Iterator
from collections.abc import Sequence as Seq
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from engine.flags import FlagSnapshot
from engine.model import parallel
from engine.model.config import load_config
from engine.penalties import RowProcessors
from engine.requests import CompletionOutput, Request, RequestMetrics, RequestOutput
from engine.runner import DTYPES, PreparedDecode, Runner, StepRow, resolve_dtype
from engine.sampling_params import SamplingParams, sample_seed
from engine.scheduler import ScheduledStep, Scheduler
from engine.sequence import Sequence, Status

__all__ = ["LLM", "CompletionOutput", "RequestMetrics", "RequestOutput"]

TINY_MODEL = Path(__file__).resolve().parent / "data" / "tiny-qwen3"
DEFAULT_MAX_MODEL_LEN = 4096
GPU_MEMORY_UTILIZATION = 0.9  # the fraction of free device memory the weights and the KV cache may take
ACTIVATION_RESERVE = 2 << 30  # bytes kept free for activations besides the per-row logits
DEFAULT_TP_TIMEOUT_S = 300.0  # a tensor-parallel collective that takes longer is an error, not a hang
CPU_KV_CACHE_MEMORY = 4 << 30  # the KV cache's budget on the CPU (vLLM's VLLM_CPU_KVCACHE_SPACE default)


class LLM:
    """A model, its KV cache and a scheduler; `generate` runs requests to completion.

    model: a Hugging Face model directory (None: the embedded tiny Qwen3). dtype: "auto" takes the
    checkpoint's dtype on CUDA and float32 on the CPU. device: None picks CUDA when available.
    num_blocks: KV-cache blocks (None: what fits in kv_cache_memory bytes, by default on the CPU
    CPU_KV_CACHE_MEMORY and on CUDA what fits in gpu_memory_utilization of the free memory beside the weights
    and activations; never more than every sequence's worst case). The engine prints how many tokens fit. max_num_batched_tokens: the token budget of one step
    (prompts longer than it are prefilled in chunks). enable_prefix_caching: share the KV blocks of equal
    prompt prefixes; always off for a model with recurrent layers (Qwen3-Next), whose state after a prefix
    is not cached with its blocks. seed: the generator of requests without a seed.
    tensor_parallel_size: ranks the model is split over (one process each, rank 0 this one; gloo on the CPU,
    NCCL with one CUDA device per rank; the KV budget is each rank's); tp_timeout_s bounds every collective
    (engine.distributed). `shutdown()` stops the other ranks (they stop with this process in any case).
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
        kv_cache_memory: int | None = None,  # bytes for the KV cache (overrides the defaults below)
        gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
        tensor_parallel_size: int = 1,
        tp_timeout_s: float = DEFAULT_TP_TIMEOUT_S,
        runner_class: type[
            Runner
        ] = Runner,  # a Runner subclass: a benchmark's, timing its public step methods (one device)
    ) -> None:
        self.model_dir = Path(model) if model is not None else TINY_MODEL
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        config = load_config(self.model_dir)
        torch_dtype = DTYPES[resolve_dtype(dtype, config, device)]
        self.max_model_len = max_model_len or min(config.max_position_embeddings, DEFAULT_MAX_MODEL_LEN)
        if self.max_model_len > config.max_position_embeddings:
            raise ValueError(
                f"max_model_len={self.max_model_len} exceeds the model's max_position_embeddings="
                f"{config.max_position_embeddings}"
            )
        max_blocks = -(-self.max_model_len // block_size)
        tp = tensor_parallel_size
        if tp != 1:
            parallel.check(config, tp)  # a count the ranks cannot split: one line, before any rank starts
        local = parallel.local_config(config, parallel.Shard(0, tp))  # a rank's KV heads and state: its budget
        if num_blocks is None:
            per_block = kv_block_bytes(local, torch_dtype, block_size)
            if kv_cache_memory is not None:
                budget = kv_cache_memory
            elif device.startswith("cuda"):
                budget = cuda_kv_budget(
                    self.model_dir, local, torch_dtype, max_num_seqs, device, gpu_memory_utilization, tp
                )
            else:
                budget = CPU_KV_CACHE_MEMORY // tp  # the ranks' caches share the host's memory
            if budget < per_block:
                raise ValueError(f"kv_cache_memory={budget} bytes holds no KV block ({per_block} bytes)")
            num_blocks = min(budget // per_block, max_num_seqs * max_blocks)
            print(
                f"engine: KV cache of {num_blocks} blocks x {block_size} = {num_blocks * block_size} tokens "
                f"({num_blocks * per_block / 2**30:.2f} GiB)",
                file=sys.stderr,
            )
        runner_kw: dict[str, Any] = dict(
            max_batch=max_num_seqs,
            max_model_len=self.max_model_len,
            block_size=block_size,
            num_blocks=num_blocks,
            flags=flags,
        )
        if tp != 1:
            from engine import distributed  # why: spawning ranks is only for tensor parallelism

            self.runner: Runner = distributed.start(
                tp, str(self.model_dir), torch_dtype, device, tp_timeout_s, **runner_kw
            )
        else:
            self.runner = runner_class(self.model_dir, torch_dtype, device, **runner_kw)
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
        self._inflight: tuple[ScheduledStep, Any] | None = None  # a decode step launched, not read
        self._requests: dict[str, Request] = {}  # unfinished requests by id
        self._of_seq: dict[int, Request] = {}  # seq_id -> its request
        self._unclaimed: list[RequestOutput] = []  # finished requests of add_request, for the next step()
        self._touched: dict[str, Request] = {}  # requests with a new token or finished since the last look

    def shutdown(self) -> None:
        """Stop the other tensor-parallel ranks (nothing to do on one device)."""
        stop = getattr(self.runner, "shutdown", None)
        if stop is not None:
            stop()

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
        owner = object()  # the requests belong to this call: step() never hands them to anyone else
        reqs = self._enqueue_all("generate", prompts, params, owner)
        try:
            while not all(r.finished for r in reqs):
                self._advance()
        except BaseException:
            self._fail()
            raise
        for r in reqs:
            self._touched.pop(r.request_id, None)
        return [self._output(r) for r in reqs]

    def chat(
        self,
        messages: Seq[dict[str, Any]] | Seq[Seq[dict[str, Any]]],
        params: SamplingParams | Seq[SamplingParams] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[RequestOutput]:
        """generate() on one conversation (a list of {"role", "content"} messages) or several, each rendered by
        the checkpoint's chat template (tokenizer_config.json), as vLLM's LLM.chat."""
        from engine.chat import (  # why: jinja2 loads only for chat
            load_chat_template,
            render_chat,
        )

        template, special = load_chat_template(self.model_dir)
        if template is None:
            raise ValueError(f"{self.model_dir} has no chat_template in tokenizer_config.json")
        convs: list[Any] = [messages] if messages and isinstance(messages[0], dict) else list(messages)
        return self.generate([render_chat(template, list(c), special, add_generation_prompt) for c in convs], params)

    def stream(
        self,
        prompts: str | Seq[int] | Seq[str | Seq[int]],
        params: SamplingParams | Seq[SamplingParams] | None = None,
    ) -> Iterator[RequestOutput]:
        """generate(), yielding each request's increments as they come: every output holds only the tokens,
        logprobs and text not yet yielded (text is held back while it could begin a stop string), and the
        last one of a request has finished=True. Closing the generator early aborts its unfinished requests."""
        reqs = self._enqueue_all("stream", prompts, params, object(), stream=True)
        try:
            while any(not r.finished for r in reqs):
                self._advance()
                for r in reqs:
                    if self._touched.pop(r.request_id, None) is not None:
                        yield self._output(r, delta=True)
        except GeneratorExit:
            for r in reqs:
                self.abort(r.request_id)
            raise
        except BaseException:
            self._fail()
            raise

    def add_request(
        self,
        prompt: str | Seq[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        stream: bool = False,
    ) -> int:
        """Queue one request; returns its index (its request_id is str(index) unless given). A bad request
        raises here and queues nothing. Its output comes from step() (the call that finishes it, or the
        next one) or from take_updates() (every step's increment with stream=True, else once finished),
        never from another caller's generate()."""
        rid = self._next_id
        if request_id is not None and request_id in self._requests:
            raise ValueError(f"request_id {request_id!r} is already running")
        ids, sp = self._check(rid, prompt, params or SamplingParams())
        self._enqueue(rid, ids, sp, None, request_id, stream)
        return rid

    def abort(self, request_id: str | int) -> bool:
        """End a request now (finish_reason "abort"), its KV blocks freed at once; False if it is not running."""
        req = self._requests.pop(str(request_id), None)
        if req is None:
            return False
        req.aborted = True
        for seq in req.seqs:
            if seq.status is not Status.FINISHED:
                self.scheduler.finish(seq, "abort")
        self._close(req)
        return True

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_work()

    def step(self) -> list[RequestOutput]:
        """One scheduled step (if any work is queued); returns the add_request requests finished by it or by
        an earlier generate() call. With VT_ASYNC_SCHEDULE a decode step is launched and read back by the next
        call, which schedules and stages its own step first."""
        if self.scheduler.has_work() or self._inflight is not None:
            self._advance()
        out, self._unclaimed = self._unclaimed, []
        return out

    def take_updates(self, delta: bool = True) -> list[RequestOutput]:
        """Every add_request request with a new token (stream=True) or finished since the last call (a server's
        loop): with delta, only what is new in each."""
        outs = []
        for rid in list(self._touched):
            req = self._touched.pop(rid)
            if req.owner is None:
                outs.append(self._output(req, delta=delta))
        self._unclaimed = [o for o in self._unclaimed if o.request_id not in {x.request_id for x in outs}]
        return outs

    def _advance(self) -> None:
        if self._inflight is not None or self.runner.flags.enabled("VT_ASYNC_SCHEDULE"):
            self._step_overlapped()
        else:
            self._run(self._schedule())

    def _fail(self) -> None:
        """An error mid-run: every queued request ends and frees its blocks (the cache must not leak)."""
        self._inflight = None
        self.scheduler.abort_all()
        for req in list(self._requests.values()):
            req.aborted = True
            self._close(req)

    def _schedule(self) -> ScheduledStep:
        plan = self.scheduler.schedule()
        if not plan.rows:
            raise RuntimeError(
                f"scheduler: no step possible with {len(self.scheduler.waiting)} waiting, "
                f"{self.runner.blocks.num_free} of {self.runner.blocks.num_blocks} blocks free"
            )
        return plan

    def _run(self, plan: ScheduledStep) -> None:
        """A scheduled step synchronously: its rows through the runner, its tokens read and postprocessed."""
        sampled = self.runner.run_step(self._rows(plan), plan.decode)
        # a row takes a token when its step reaches the end of its known tokens (not a chunk short of it)
        took = [seq.num_computed + n == len(seq.token_ids) for seq, n in plan.rows]
        done = self.scheduler.postprocess(plan, sampled)
        self._took(plan, took, self.runner.last_logprobs, self.runner.last_prompt_logprobs, done)

    def _step_overlapped(self) -> None:
        """Read back the decode step in flight only once the next step is scheduled and its inputs staged, so
        that host work overlaps the device's. Token counts are all the scheduler needs (advance gives the
        rows placeholder tokens); a row whose token turns out to stop it is dropped from the staged step,
        which is then staged again. Mixed steps run synchronously."""
        runner = self.runner
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
            # a row whose logits processors read its output tokens is staged once its token is read
            early = plan.decode and plan.rows and not any(_reads_output(s.params) for s, _ in plan.rows)
            prepared = runner.prepare_decode(self._rows(plan)) if early else None
            sampled = runner.read_tokens(out, len(last.rows))  # waits for the device
            ks = [-1 if s.params.logprobs is None else s.params.logprobs for s, _ in last.rows]
            lps = runner.read_logprobs(out, ks, sampled)
            stopped = self.scheduler.settle(last, sampled)
            stopped += self._took(last, [True] * len(last.rows), lps, [], ended + stopped)
            if stopped:  # those rows leave the next step: stage it again without them
                plan.rows = [(s, n) for s, n in plan.rows if s.status is Status.RUNNING]
                prepared = None
            if plan.rows and not plan.decode:
                return self._run(plan)
            if plan.rows and prepared is None:
                prepared = runner.prepare_decode(self._rows(plan))
        if plan.rows:
            assert prepared is not None
            tokens = [seq.token_ids[-1] for seq, _ in plan.rows]  # a decode row computes its last token
            self._inflight = (plan, runner.launch_decode(prepared, tokens))

    def _took(
        self,
        plan: ScheduledStep,
        took: list[bool],  # per row: whether it took a token (its step reached the end of its known tokens)
        logprobs: list[Any],
        prompt_logprobs: list[Any],
        finished: list[Sequence],
    ) -> list[Sequence]:
        """After a step's tokens are in its sequences: their logprobs, text and stop strings, metrics, and the
        requests they finished. Returns the sequences a stop string ended here (the scheduler's are in
        `finished`)."""
        now = time.time()
        stopped: list[Sequence] = []
        for i, (seq, n) in enumerate(plan.rows):
            req = self._of_seq.get(seq.seq_id)
            if req is None:
                continue  # aborted while its step ran
            if i < len(prompt_logprobs) and prompt_logprobs[i]:
                start = seq.num_computed - n + 1
                for j, entry in enumerate(prompt_logprobs[i]):
                    req.prompt_logprobs[start + j] = entry
            if not took[i]:
                continue  # a prefill chunk short of the prompt's end
            if seq.params.logprobs is not None and i < len(logprobs):
                seq.logprobs.append(logprobs[i])
            if req.metrics.first_token_time is None:
                req.metrics.first_token_time = now
            if seq.params.stop_strings or req.stream:
                k = req.seqs.index(seq)
                hit = req.update_text(k, self.tokenizer)
                if hit is not None and seq.status is not Status.FINISHED:
                    self.scheduler.finish(seq, "stop")
                    stopped.append(seq)
                if hit is not None:
                    seq.finish_reason, req.stop_reason[k] = "stop", hit
            if req.stream:
                self._touched[req.request_id] = req
        for seq in finished + stopped:
            req = self._of_seq.get(seq.seq_id)
            if req is None:
                continue
            k = req.seqs.index(seq)
            if req.stop_reason[k] is None and seq.finish_reason == "stop" and seq.token_ids[-1] in seq.stop_ids:
                if seq.token_ids[-1] not in self.eos_token_ids or seq.params.ignore_eos:
                    req.stop_reason[k] = seq.token_ids[-1]
            if req.finished:
                self._close(req)
        return stopped

    def _close(self, req: Request) -> None:
        """A finished (or aborted) request: its final text, its metrics, and its output to whoever owns it."""
        req.metrics.finished_time = time.time()
        self._requests.pop(req.request_id, None)
        for k, seq in enumerate(req.seqs):
            self._of_seq.pop(seq.seq_id, None)
            if req.stop_reason[k] is None or not isinstance(req.stop_reason[k], str):
                req.update_text(k, self.tokenizer)
        self._touched[req.request_id] = req
        if req.owner is None:
            self._unclaimed.append(self._output(req))

    def _rows(self, plan: ScheduledStep) -> list[StepRow]:
        tables = self.runner.blocks.tables
        rows = []
        for seq, n in plan.rows:
            c, ids = seq.num_computed, seq.token_ids
            p = seq.params
            row = StepRow(
                ids[c : c + n],
                c,
                tables[seq.seq_id],
                p.effective_temperature,
                p.top_k,
                p.top_p,
                seq.seed,
                len(ids) - seq.num_prompt_tokens,
                seq.state_slot,
            )
            if p.logprobs is not None:
                row.logprobs = p.logprobs
            if p.prompt_logprobs is not None and c + 1 < seq.num_prompt_tokens:
                row.prompt_logprobs = p.prompt_logprobs
                row.prompt_targets = ids[c + 1 : min(c + n + 1, seq.num_prompt_tokens)]
            if _processed(p):
                out = len(ids) - seq.num_prompt_tokens
                row.processors = RowProcessors(
                    p.presence_penalty,
                    p.frequency_penalty,
                    p.repetition_penalty,
                    p.min_p,
                    ids[: seq.num_prompt_tokens],
                    ids[seq.num_prompt_tokens :],
                    seq.stop_ids if out < p.min_tokens else (),
                )
            rows.append(row)
        return rows

    # --- requests -------------------------------------------------------------
    def check_request(self, prompt: str | Seq[int], params: SamplingParams) -> list[int]:
        """The prompt's token ids if the request is valid; else the ValueError or TypeError add_request would
        raise (naming the field). Reads nothing the engine's steps change: a server's handlers call it."""
        return self._check(0, prompt, params)[0]

    def _enqueue_all(
        self, caller: str, prompts: Any, params: Any, owner: object, stream: bool = False
    ) -> list[Request]:
        """Every prompt checked before any is queued: a bad one raises naming it and its field."""
        single = isinstance(prompts, str) or (len(prompts) > 0 and isinstance(prompts[0], int))
        plist: list[Any] = [prompts] if single else list(prompts)
        if not plist:
            raise ValueError(f"{caller}: no prompts given")
        if params is None or isinstance(params, SamplingParams):
            per = [params or SamplingParams()] * len(plist)
        else:
            per = list(params)
            if len(per) != len(plist):
                raise ValueError(f"{caller}: {len(per)} SamplingParams for {len(plist)} prompts")
        checked = [self._check(i, p, sp) for i, (p, sp) in enumerate(zip(plist, per))]
        return [self._enqueue(i, ids, sp, owner, stream=stream) for i, (ids, sp) in enumerate(checked)]

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

    def _enqueue(
        self,
        index: int,
        ids: list[int],
        params: SamplingParams,
        owner: object | None,
        request_id: str | None = None,
        stream: bool = False,
    ) -> Request:
        """A request of params.n sequences (sample i draws from sample_seed(seed, i)) into the scheduler."""
        seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
        rid = request_id if request_id is not None else str(self._next_id)
        req = Request(rid, index, params, owner, stream)
        for i in range(params.n):
            seq = Sequence(self._next_id, index, list(ids), len(ids), params, sample_seed(seed, i))
            self._next_id += 1
            req.seqs.append(seq)
            self._of_seq[seq.seq_id] = req
            self.scheduler.add(seq)
        self._requests[rid] = req
        return req

    def _output(self, req: Request, delta: bool = False) -> RequestOutput:
        out = req.output(self.tokenizer, req.seqs[0].num_cached, delta)
        if req.params.logprobs is not None or req.params.prompt_logprobs is not None:
            self._decode_logprobs(out)
        return out

    def _decode_logprobs(self, out: RequestOutput) -> None:
        """Fill each Logprob's decoded_token (the token alone, decoded), as vLLM does."""
        if self.tokenizer is None:
            return
        positions = [p for c in out.outputs for p in (c.logprobs or [])] + list(out.prompt_logprobs or [])
        for pos in positions:
            if pos is None:
                continue
            for tid, lp in list(pos.items()):
                if lp.decoded_token is None:
                    pos[tid] = replace(lp, decoded_token=self.tokenizer.decode([tid], skip_special_tokens=False))


def _processed(p: SamplingParams) -> bool:
    """Whether a request's step needs the logits processors (engine.penalties)."""
    return (
        p.presence_penalty != 0
        or p.frequency_penalty != 0
        or p.repetition_penalty != 1
        or p.min_p > 0
        or p.min_tokens > 0
    )


def _reads_output(p: SamplingParams) -> bool:
    """Whether a request's logits processors read its output tokens (a step cannot be staged before them)."""
    return p.presence_penalty != 0 or p.frequency_penalty != 0 or p.repetition_penalty != 1 or p.min_tokens > 0


def kv_block_bytes(config: Any, dtype: torch.dtype, block_size: int) -> int:
    """Bytes of one KV block over every layer with a KV cache (keys and values)."""
    elem = torch.empty((), dtype=dtype).element_size()
    kv_layers = sum(1 for i in range(config.num_hidden_layers) if config.has_kv_cache(i))
    return 2 * kv_layers * block_size * config.num_key_value_heads * config.head_dim * elem


def cuda_kv_budget(
    model_dir: Path, config: Any, dtype: torch.dtype, max_num_seqs: int, device: str, utilization: float, tp: int = 1
) -> int:
    """Bytes the KV cache may take: `utilization` of the free device memory less the weights, the step's
    logits and activations and the recurrent state (`config` a rank's, holding about 1/tp of the weights)."""
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    elem = torch.empty((), dtype=dtype).element_size()
    weights = sum(f.stat().st_size for f in model_dir.glob("*.safetensors")) // tp
    logits = max_num_seqs * config.vocab_size * 48  # fp32 logits and the sampler's temporaries per row
    budget = int(free * utilization) - weights - logits - ACTIVATION_RESERVE
    budget -= recurrent_state_bytes(config, max_num_seqs + 1, elem)
    if budget < kv_block_bytes(config, dtype, 1):
        raise ValueError(
            f"no device memory left for the KV cache ({free / 2**30:.1f} GiB free, "
            f"weights {weights / 2**30:.1f} GiB); pass num_blocks or kv_cache_memory"
        )
    return budget


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
