"""One serving step at a time over a paged KV cache (`run_step`); the only owner of device tensors.

There is one decode program: `sample_step`, captured per padded batch size and sampling mode on CUDA. Greedy
is that program at temperature 0 (its own captured mode, `Mode.GREEDY`), so what a gate proves through
`engine.LLM` is what a user runs."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from engine import kernels
from engine.block_manager import BlockManager
from engine.flags import FlagSnapshot
from engine.logprobs import PositionLogprobs, device_logprobs, host_rows
from engine.model import parallel
from engine.model.batch import ForwardBatch
from engine.model.config import ModelConfig, checkpoint_dtype, load_config
from engine.model.loader import load_model
from engine.model.qwen3_next import make_recurrent_state
from engine.sampler import NO_EXTRAS, Mode, StepExtras, sample_with_extras
from engine.staging import StepRow, StepStaging

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE  # the handle type CUDAGraph.pool() returns

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# decode batches are padded up to one of these sizes on CUDA, so one captured graph serves each bucket
GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_MAX_MODEL_LEN = 512  # when none is given: this, or the model's max_position_embeddings if smaller


@dataclass
class PreparedDecode:
    """A decode step's filled host staging, not yet uploaded (Runner.prepare_decode)."""

    padded: int
    mode: Mode
    staging: StepStaging
    extras: StepExtras

    def device_inputs(self) -> dict[str, torch.Tensor]:
        """Upload the staging; the device tensors, by the name of Runner.sample_step's argument each one is
        (the state slots the step zeroes first, `reset_slots`, are the runner's: Runner.reset_states)."""
        return {k: t for k, t in self.staging.upload().items() if k != "reset_slots"}


class Runner:
    """Loads a model onto a device, owns its KV cache, and runs the serving steps `engine.LLM` schedules.

    `flags` (default: the environment, read once here) is the one snapshot every step of this runner
    passes down to the kernel table, so eager steps, CUDA-graph capture and replay pick the same arms. It may
    be replaced between steps (a benchmark's A/B arms): graphs are captured and replayed per snapshot.
    """

    def __init__(
        self,
        model_dir: str | Path,
        dtype: torch.dtype | None = torch.float32,  # None: the checkpoint's torch_dtype (`--dtype auto`)
        device: str = "cpu",
        max_batch: int = 8,
        max_model_len: int | None = None,
        block_size: int = 16,
        num_blocks: int | None = None,
        flags: FlagSnapshot | None = None,
        shard: parallel.Shard | None = None,  # this rank's place under tensor parallelism (engine.distributed)
    ) -> None:
        self.flags = FlagSnapshot.from_env() if flags is None else flags
        self.shard = shard or parallel.ONE
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: no CUDA device is available to torch")
        self.config = load_config(model_dir)
        if dtype is None:
            dtype = DTYPES[resolve_dtype("auto", self.config)]
        limit = self.config.max_position_embeddings
        if max_model_len is None:
            max_model_len = min(DEFAULT_MAX_MODEL_LEN, limit)
        if max_model_len > limit:
            raise ValueError(
                f"max_model_len={max_model_len} exceeds the model's max_position_embeddings={limit} "
                f"({Path(model_dir) / 'config.json'}): shorten the prompt or max new tokens"
            )
        if self.device.type == "cpu":
            set_cpu_threads(self.config.hidden_size)
        self.dtype = dtype
        with parallel.building(self.shard):
            self.model = load_model(model_dir, dtype, self.device)
        self.max_batch = max_batch
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.max_blocks_per_seq = -(-max_model_len // block_size)
        num_blocks = num_blocks or max_batch * self.max_blocks_per_seq
        self.blocks = BlockManager(num_blocks, block_size)
        cfg = parallel.local_config(self.config, self.shard)  # this rank's KV heads and delta net heads
        shape = (num_blocks, block_size, cfg.num_key_value_heads, cfg.head_dim)
        # zero-filled so padded decode rows read finite values; a gated delta net layer (Qwen3-Next) has no KV
        # cache (an empty one) but a recurrent state per sequence slot, held beside it
        self.kv_caches = [
            (torch.zeros(s, dtype=dtype, device=self.device), torch.zeros(s, dtype=dtype, device=self.device))
            for s in (shape if cfg.has_kv_cache(i) else (0, *shape[1:]) for i in range(cfg.num_hidden_layers))
        ]
        self.recurrent = make_recurrent_state(cfg, max_batch, dtype, self.device)
        self.use_graph = self.device.type == "cuda" and not self.flags.enabled("VT_EAGER")
        self._graph_pool: _POOL_HANDLE | None = None  # shared by every captured step
        # a decode step's staging per (padded batch size, the processors' token columns): its device views are
        # what that shape's captured graphs read; a mixed step's staging is laid out anew for each step
        self._decode_staging: dict[tuple[int, int], StepStaging] = {}
        self._mixed_staging = StepStaging(self.device)
        # the captured decode program per (padded batch size, sampling mode, the step's extras, flag snapshot):
        # `flags` may be replaced between steps (a benchmark's A/B arms on one runner), each snapshot replaying
        # its own graphs
        self._sample_graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        # the last synchronous step's logprobs per row (None: the row asked for none), and its prompt logprobs
        self.last_logprobs: list[PositionLogprobs | None] = []
        self.last_prompt_logprobs: list[list[PositionLogprobs] | None] = []

    @property
    def captured(self) -> list[tuple[int, Mode]]:
        """The (padded batch size, sampling mode) of every decode step captured under the current flags."""
        return list(dict.fromkeys((key[0], key[1]) for key in self._sample_graphs if key[-1] == self.flags))

    # --- serving steps (engine.llm) ---------------------------------------------
    @torch.inference_mode()
    def run_step(self, rows: list[StepRow], decode: bool) -> list[int]:
        """One scheduled step: each row's tokens through the model, then one token sampled per row.

        A decode step (every row one token after its cached ones) runs the captured graph of its padded
        batch size and sampling mode on CUDA; any other step (prefill chunks, with or without decode
        rows beside them) runs eagerly, attention reading each row's cached prefix. With recurrent layers
        every row names its state slot; a row starting at token 0 starts from a zero state.
        """
        self.last_prompt_logprobs = []
        if decode:
            out = self._launch_decode(self.prepare_decode(rows))
            tokens = _tokens(out, len(rows))
            self.last_logprobs = self.read_logprobs(out, [r.logprobs for r in rows], tokens)
            return tokens
        if self.recurrent is not None:
            self._check_state_slots(rows)
        return self._mixed_step(rows, rows_mode(rows, self.config.vocab_size))

    def _mixed_step(self, rows: list[StepRow], mode: Mode) -> list[int]:
        """Prefill chunks, with or without decode rows beside them, eagerly: the one-token rows first (the
        decode kernel reads them), then the others (one varlen attention call per layer). Every input goes
        up in one host-to-device copy (engine.staging); the sampled tokens are the one host read."""
        order = sorted(range(len(rows)), key=lambda i: len(rows[i].token_ids) != 1)  # stable: decode rows first
        ordered = [rows[i] for i in order]
        nd = sum(len(r.token_ids) == 1 for r in rows)
        extend = ordered[nd:]
        recurrent = self.recurrent is not None
        extras = StepExtras.of(ordered)
        staging = self._mixed_staging
        scratch = None if self.recurrent is None else self.recurrent.scratch
        staging.stage_mixed(ordered, nd, self.block_size, extras, self.config.vocab_size, scratch)
        v = staging.upload()
        if staging.resets:
            self.reset_states(v["reset_slots"])
        lens = [len(r.token_ids) for r in ordered]
        batch = ForwardBatch(
            is_prefill=True,
            slot_mapping=v["slot_mapping"],
            kv_caches=self.kv_caches,
            seq_lens=lens[nd:],
            prefix_lens=[r.start for r in extend],
            block_tables=v["block_tables"],
            context_lens=v["context_lens"],
            num_decode=nd,
            device_lens=v["device_lens"],
            flags=self.flags,
            recurrent=self.recurrent,
            state_slots=[r.state_slot for r in extend] if recurrent else None,
            state_index=v["state_index"] if recurrent else None,
        )
        hidden = self.model(v["input_ids"], v["positions"], batch)
        n = len(rows)
        logits = self.model.compute_logits(hidden[v["last"]], self.flags)
        result = sample_with_extras(self.flags, logits, mode, v, extras)
        sampled = _tokens(result, n)
        lps = self.read_logprobs(result, [r.logprobs for r in ordered], sampled)
        prompt_lps = self._prompt_logprobs(hidden, ordered, lens)
        out = [0] * n
        self.last_logprobs = [None] * n
        self.last_prompt_logprobs = [None] * n
        for j, i in enumerate(order):
            out[i], self.last_logprobs[i], self.last_prompt_logprobs[i] = sampled[j], lps[j], prompt_lps[j]
        return out

    def _prompt_logprobs(
        self, hidden: torch.Tensor, rows: list[StepRow], lens: list[int]
    ) -> list[list[PositionLogprobs] | None]:
        """Each asking row's prompt logprobs: its first len(prompt_targets) positions' logits judged against
        the prompt tokens that follow them (one log_softmax and one topk over the asking rows' positions)."""
        out: list[list[PositionLogprobs] | None] = [None] * len(rows)
        at, index, targets, ks = 0, list[int](), list[int](), list[int]()
        for r, n in zip(rows, lens):
            if r.prompt_logprobs >= 0 and r.prompt_targets:
                m = len(r.prompt_targets)
                index += range(at, at + m)
                targets += r.prompt_targets
                ks += [r.prompt_logprobs] * m
            at += n
        if not index:
            return out
        dev = self.device
        logits = self.model.compute_logits(hidden[torch.tensor(index, device=dev)], self.flags)
        chosen = torch.tensor(targets, dtype=torch.int64, device=dev)
        flat = host_rows(device_logprobs(logits, chosen, max(ks)), targets, ks)
        pos = 0
        for i, r in enumerate(rows):
            if r.prompt_logprobs >= 0 and r.prompt_targets:
                m = len(r.prompt_targets)
                out[i] = [p for p in flat[pos : pos + m] if p is not None]
                pos += m
        return out

    # a decode step in two halves, so the host can prepare it while the previous step runs (engine.LLM with
    # VT_ASYNC_SCHEDULE): prepare_decode fills the host staging (the rows' tokens may still be placeholders),
    # launch_decode writes the final tokens, uploads and runs or replays the step; read_tokens is its host read
    @torch.inference_mode()
    def prepare_decode(self, rows: list[StepRow]) -> PreparedDecode:
        if self.recurrent is not None:
            self._check_state_slots(rows)
        return self._prepare_decode(rows, rows_mode(rows, self.config.vocab_size))

    @torch.inference_mode()
    def launch_decode(self, prepared: PreparedDecode, tokens: list[int]) -> torch.Tensor:  # -> [padded] int64
        """Run a prepared decode step with these tokens as its rows' inputs; the result is read by read_tokens."""
        prepared.staging.set_tokens(tokens)
        return self._launch_decode(prepared)

    def read_tokens(self, out: torch.Tensor | tuple[torch.Tensor, ...], n: int) -> list[int]:
        return _tokens(out, n)

    def read_logprobs(
        self, out: torch.Tensor | tuple[torch.Tensor, ...], ks: list[int], tokens: list[int]
    ) -> list[PositionLogprobs | None]:
        """A step's logprobs per row (its own k, -1: None), read back after its tokens."""
        if not isinstance(out, tuple):
            return [None] * len(ks)
        return host_rows((out[1], out[2], out[3], out[4]), tokens, ks)

    def _prepare_decode(self, rows: list[StepRow], mode: Mode) -> PreparedDecode:
        padded = self.padded_batch(len(rows))
        extras = StepExtras.of(rows)
        key = (padded, extras.proc_width)
        if key not in self._decode_staging:  # one per shape: its device views are what that shape's graphs read
            self._decode_staging[key] = StepStaging(self.device)
        staging = self._decode_staging[key]
        scratch = None if self.recurrent is None else self.recurrent.scratch
        vocab = self.config.vocab_size
        staging.stage_decode(rows, padded, self.block_size, self.max_blocks_per_seq, extras, vocab, scratch)
        return PreparedDecode(padded, mode, staging, extras)

    def _launch_decode(self, prepared: PreparedDecode) -> torch.Tensor:  # -> [padded] int64
        padded, mode, extras, flags = prepared.padded, prepared.mode, prepared.extras, self.flags
        buf = prepared.device_inputs()
        if prepared.staging.resets:
            self.reset_states(prepared.staging.views["reset_slots"])

        def step(**kw: torch.Tensor) -> torch.Tensor:
            return self.sample_step(mode, extras=extras, flags=flags, **kw)

        if not self.use_graph:
            return step(**buf)
        key = (padded, mode, *extras.key, flags)
        if key not in self._sample_graphs:
            captured = self._capture_fn(step, buf)
            if captured is None:
                return step(**buf)
            self._sample_graphs[key] = captured
        graph, out = self._sample_graphs[key]
        graph.replay()
        return out

    def sample_step(
        self,
        mode: Mode,
        input_ids: torch.Tensor,  # [batch] int64
        positions: torch.Tensor,  # [batch] int64
        slot_mapping: torch.Tensor,  # [batch] int64
        block_tables: torch.Tensor,  # [batch, max_blocks_per_seq] int32
        context_lens: torch.Tensor,  # [batch] int32
        temperature: torch.Tensor,  # [batch] float32
        top_k: torch.Tensor,  # [batch] int64
        top_p: torch.Tensor,  # [batch] float32
        seeds: torch.Tensor,  # [batch] int64
        steps: torch.Tensor,  # [batch] int64
        state_index: torch.Tensor | None = None,  # [batch] int64: each row's recurrent state slot (Qwen3-Next)
        extras: StepExtras | None = None,  # logprobs and logits processors (their device tensors in **procs)
        flags: FlagSnapshot | None = None,  # default: the runner's; a benchmark's A/B passes one arm's
        **procs: torch.Tensor,
    ) -> torch.Tensor:  # [batch] int64, or with extras' logprobs a tuple (engine.sampler.sample_with_extras)
        """The decode program: the model's step over every row, then one token sampled per row (the argmax at
        temperature 0). Device tensors only, so it can be captured; a prepared step's `device_inputs()` are its
        tensor arguments."""
        flags = self.flags if flags is None else flags
        batch = ForwardBatch(
            is_prefill=False,
            slot_mapping=slot_mapping,
            kv_caches=self.kv_caches,
            block_tables=block_tables,
            context_lens=context_lens,
            flags=flags,
            recurrent=self.recurrent,
            state_index=state_index,
        )
        logits = self.model.compute_logits(self.model(input_ids, positions, batch), flags)
        sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "seeds": seeds, "steps": steps}
        return sample_with_extras(flags, logits, mode, sampling | procs, extras or NO_EXTRAS)

    def padded_batch(self, n: int) -> int:
        """The batch size a decode step of n rows runs at: on CUDA the graph bucket at or above n (eager too)."""
        if self.device.type != "cuda":
            return n
        # eager and graph runs pad alike on CUDA, so both see the same GEMM shapes and give the same tokens
        return next((b for b in GRAPH_BATCH_SIZES if b >= n), n)  # past the largest bucket: its own size

    # --- recurrent state (gated delta net layers) -------------------------------
    def _check_state_slots(self, rows: list[StepRow]) -> None:
        assert self.recurrent is not None
        limit = self.recurrent.scratch
        bad = next((r.state_slot for r in rows if not 0 <= r.state_slot < limit), None)
        if bad is not None:
            raise ValueError(f"{self.config.architecture}: a serving row has state slot {bad}, not in 0..{limit - 1}")

    def reset_states(self, slots: torch.Tensor) -> None:
        """Zero these state slots (a staged step's `reset_slots`: its rows that start at token 0, then the
        scratch slot) before the step runs."""
        assert self.recurrent is not None
        for t in (*self.recurrent.conv.values(), *self.recurrent.ssm.values()):
            t.index_fill_(0, slots, 0)

    def _capture_fn(
        self, fn: Callable[..., torch.Tensor], buf: dict[str, torch.Tensor]
    ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor] | None:
        # the warm-up really runs this step (its K/V stores are the step's own); the capture only records. A
        # recurrent state is not idempotent: it is put back after the warm-up, so the replay (or the eager step
        # that follows a failed capture) advances it once
        state = self.recurrent
        saved = None if state is None else state.copy()
        try:
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                fn(**buf)  # warm-up outside the graph (lazy inits, workspaces)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            if state is not None and saved is not None:
                state.load(saved)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._graph_pool):
                out = fn(**buf)
            self._graph_pool = graph.pool()
        except RuntimeError as exc:
            if state is not None and saved is not None:
                state.load(saved)
            print(
                f"engine: decode step not capturable ({exc.__class__.__name__}: {str(exc)[:200]}); running it eagerly",
                file=sys.stderr,
            )
            self.use_graph = False
            return None
        return graph, out


def _tokens(out: torch.Tensor | tuple[torch.Tensor, ...], n: int) -> list[int]:
    """A step's first n tokens read back (a step with logprobs returns them first in a tuple), then any fault a
    persistent launch of the step recorded raised (its tokens would be wrong)."""
    tokens = (out[0] if isinstance(out, tuple) else out)[:n].tolist()
    kernels.raise_persistent_faults()
    return tokens


def rows_mode(rows: list[StepRow], vocab: int) -> Mode:
    """The cheapest sampling mode that serves every row: GREEDY when no row samples, FILTERED when a sampled
    row restricts top-k (below the vocabulary) or top-p, else RANDOM."""
    sampled = False
    for r in rows:
        if r.temperature > 0:
            if 0 < r.top_k < vocab or r.top_p < 1:
                return Mode.FILTERED
            sampled = True
    return Mode.RANDOM if sampled else Mode.GREEDY


TINY_HIDDEN = 256  # at or below this width a matmul is too small to split across threads


def set_cpu_threads(hidden_size: int, environ: Mapping[str, str] | None = None) -> int:
    """The CPU thread count, unless OMP_NUM_THREADS sets it (in `environ`, default this process's environment):
    one thread for a tiny model (threads spinning against each other cost more than its matmuls), else the
    cores this process may run on, up to 16."""
    if (os.environ if environ is None else environ).get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = 1 if hidden_size <= TINY_HIDDEN else max(1, min(cores, 16))
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads


def resolve_dtype(name: str, config: ModelConfig, device: str | None = None) -> str:
    """A `--dtype` value as a dtype name (a key of DTYPES). `auto`: the checkpoint's torch_dtype (float32 if it
    names none); on a CUDA `device` a float32 checkpoint runs in bfloat16, as vLLM's `auto` runs it in half
    precision. device None: the checkpoint's own dtype wherever it runs (what the gates hold to the oracle)."""
    if name != "auto":
        if name not in DTYPES:
            raise ValueError(f"dtype {name!r}: expected auto or one of {', '.join(DTYPES)}")
        return name
    checkpoint = checkpoint_dtype(config)
    if device is None or not device.startswith("cuda") or checkpoint != "float32":
        return checkpoint
    return "bfloat16"
