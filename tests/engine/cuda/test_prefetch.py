"""The L2 prefetch (engine/cuda/prefetch.cu, VT_L2_PREFETCH): the launcher's and the binding's refusals, the table's
row (a no-op reference, one sm_90 arm behind the flag), the decode layer's one call per decode step (CPU); on an sm_90
GPU a decode step's logits with the flag on bitwise those with it off, eager and replayed in a CUDA graph."""

from __future__ import annotations

import ctypes
from dataclasses import replace

import pytest
import torch

from engine import kernels
from engine.cuda import build
from engine.cuda import prefetch as cuda_prefetch
from engine.flags import FLAGS, FlagSnapshot
from engine.model.batch import ForwardBatch
from engine.model.config import parse_config
from engine.model.qwen3_moe import Qwen3MoeDecoderLayer
from lab.persistent import case as C
from tests.engine.cuda.signatures import exported
from tests.engine.table_standins import H200, OnGpu

FAMILY = "prefetch"  # the conftest's `cuda` and `compiled` fixtures read these
KERNELS = "the L2 prefetch"
FLAG = "VT_L2_PREFETCH"
ON = FlagSnapshot.defaults().with_(VT_L2_PREFETCH=True)
OP = ("l2_prefetch", "cuda")

needs_sm90 = pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (9, 0)),
    reason="no sm_90 GPU: the bulk L2 prefetch needs one",
)


class Weight(OnGpu):
    """A stand-in weight for the arm choice: the binding's `supports` also reads its address."""

    def __init__(self, *shape: int, address: int = 1 << 20) -> None:
        super().__init__(*shape)
        self.address = address

    def data_ptr(self) -> int:
        return self.address


def test_binding_argtypes_match_the_launchers() -> None:
    launchers = exported(build.CUDA_DIR / "prefetch.cu")
    assert set(cuda_prefetch.SIGNATURES) == set(launchers) - {"vt_prefetch_last_error"}
    for name, argtypes in cuda_prefetch.SIGNATURES.items():
        assert argtypes == launchers[name], name


def test_the_source_is_in_the_feature_table() -> None:
    assert build.load_table().sources["prefetch.cu"] == "portable"


def test_the_binding_constants_are_the_kernels(compiled) -> None:
    compiled.vt_prefetch_max_ranges.restype = ctypes.c_int
    assert compiled.vt_prefetch_max_ranges() == cuda_prefetch.MAX_RANGES


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([(1 << 20, 24)], "prefetch: range 0: 24 bytes, not a multiple of 16"),
        ([(1 << 20, 32), (1 << 20, -16)], "prefetch: range 1: -16 bytes, not a multiple of 16"),
        (
            [(1 << 20, 32), (1 << 20, 32), ((1 << 20) + 8, 32)],
            "prefetch: range 2: base 0x100008 is not 16-byte aligned",
        ),
        ([(None, 16)], "prefetch: range 0: base (nil) is not 16-byte aligned"),
    ],
)
def test_launcher_refuses_bad_ranges_before_any_launch(compiled, ranges: list, message: str) -> None:
    """The checks come before the device query, so they answer here without a GPU; no address is ever read."""
    fn = compiled.vt_prefetch_l2
    fn.argtypes = cuda_prefetch.SIGNATURES["vt_prefetch_l2"]
    compiled.vt_prefetch_last_error.restype = ctypes.c_char_p
    flat = [x for r in ranges for x in r] + [None, 0] * (cuda_prefetch.MAX_RANGES - len(ranges))
    assert fn(*flat, None) == 1000
    assert compiled.vt_prefetch_last_error().decode() == message


def test_the_binding_names_what_it_cannot_take() -> None:
    w = torch.ones(64, 8)
    cases = [
        ((), "tensors: 0 given, the launcher takes 1 to 4"),
        ((w,) * 5, "tensors: 5 given, the launcher takes 1 to 4"),
        ((w.t(), w), r"tensors\[0\]: must be contiguous \(strides \(1, 8\)\)"),
        ((w.view(-1)[1:],), r"tensors\[0\]: address 0x[0-9a-f]+ is not 16-byte aligned"),
        ((w, w), r"tensors\[0\]: expected a CUDA tensor, got device cpu"),
    ]
    for tensors, message in cases:
        with pytest.raises(ValueError, match=f"^{message}$"):
            cuda_prefetch.l2_prefetch(*tensors)


def test_the_op_is_a_no_op_reference_and_one_sm90_arm_behind_its_flag() -> None:
    assert FLAGS[FLAG].default is False and FLAGS[FLAG].gates == "ENGINE-PERSISTENT"
    op = kernels.TABLE["l2_prefetch"]
    assert [(a.name, a.flags, a.capability) for a in op.arms] == [("cuda", (FLAG,), (9, 0))]
    weights = (Weight(1024, 2048), Weight(6144, 1024), Weight(1024, 3072))
    a100 = kernels.Device(0, (8, 0), 163 * 1024, 108)
    kernels.reset_counts()
    with kernels.on_device(H200):
        assert op.choose(ON, *weights) == "cuda"
        assert op.choose(FlagSnapshot.defaults(), *weights) == "reference"
        assert op.choose(ON, *weights, Weight(8, address=(1 << 20) + 2)) == "reference"  # misaligned: declined
    with kernels.on_device(a100):
        assert op.choose(ON, *weights) == "reference"
    assert not kernels.counts().ran  # choosing counts nothing
    kernels.l2_prefetch(ON, torch.ones(4))  # a CPU tensor: the reference, which does nothing
    assert kernels.counts().ran == {("l2_prefetch", "reference"): 1}
    with pytest.raises(TypeError, match="tensors\\[1\\]: expected a torch.Tensor, got list"):
        kernels.l2_prefetch(ON, torch.ones(4), [1])


def _decode_step(case: C.Case, flags: FlagSnapshot) -> tuple:
    s = case.fresh_step()
    return s.x, s.residual, (s.cos, s.sin), s.batch(flags)


def test_a_decode_layer_prefetches_its_weights_after_the_attention_once_a_decode_step() -> None:
    case = C.make(C.SMALL, [37, 5], seed=4)
    layer = case.layer
    mlp = layer.mlp
    want = [layer.self_attn.o_proj.weight, mlp.gate_up_proj.weight, mlp.down_proj.weight]
    assert [w is v for w, v in zip(layer.weights_after_attention(), want, strict=True)] == [True] * 3
    calls = []
    for flags, prefill in ((FlagSnapshot.defaults(), False), (ON, False), (ON, True)):
        x, residual, cos_sin, batch = _decode_step(case, flags)
        if prefill:  # each sequence's one token as a prompt of one
            batch = replace(batch, is_prefill=True, seq_lens=[1, 1], block_tables=None, context_lens=None)
        kernels.reset_counts()
        with torch.no_grad():
            layer.chain(x, residual, cos_sin, batch)
        calls.append(kernels.op_calls({"l2_prefetch"}))
    assert calls == [0, 1, 0]  # flag off: nothing; a decode step: once; a prefill: never


def test_an_moe_layer_prefetches_only_its_o_proj() -> None:
    cfg = parse_config(
        {
            "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_hidden_layers": 1,
            "vocab_size": 64, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 64, **C.SMALL,
        }
    )  # fmt: skip
    moe = Qwen3MoeDecoderLayer(cfg, 0, torch.float32)
    assert [w is moe.self_attn.o_proj.weight for w in moe.weights_after_attention()] == [True]


@needs_sm90
def test_the_binding_launches_and_a_graph_captures_it(cuda) -> None:
    w = [torch.randn(n, 1024, dtype=torch.bfloat16, device=cuda) for n in (2048, 6144, 3)]
    cuda_prefetch.l2_prefetch(*w)  # 3 rows of 1024: a tail shorter than a chunk
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cuda_prefetch.l2_prefetch(*w)
    graph.replay()
    torch.cuda.synchronize()


@needs_sm90
@pytest.mark.parametrize("lens", [(100,), (37, 5, 64, 100, 1, 17, 33, 80)], ids=["b1", "b8"])
def test_a_decode_steps_logits_are_bitwise_those_without_it_and_the_arm_ran(cuda, lens) -> None:
    """A prefetch changes no value: the model's decode step (every layer's chain) with the flag on gives the logits
    and cache slots of the step with it off, bit for bit, eager and replayed in a CUDA graph; the arm ran once a
    layer."""
    layers = 3
    case = C.make_model(C.SMALL, list(lens), seed=5, layers=layers, vocab=400, device=cuda, dtype=torch.bfloat16)
    assert case.lm is not None
    base = C.on(case.fresh_step(True), cuda, torch.bfloat16)
    pos = (base.context_lens - 1).long()

    def step(flags: FlagSnapshot) -> tuple[ForwardBatch, torch.Tensor]:
        kv = [(k.clone(), v.clone()) for k, v in base.caches()]
        batch = ForwardBatch(
            is_prefill=False, slot_mapping=base.slot_mapping, kv_caches=kv, block_tables=base.block_tables,
            context_lens=base.context_lens, flags=flags,
        )  # fmt: skip
        assert case.lm is not None
        with torch.no_grad():
            return batch, case.lm.compute_logits(case.lm(base.ids, pos, batch), flags)

    kernels.reset_counts()
    off_batch, off = step(FlagSnapshot.defaults())
    assert kernels.counts().ran[OP] == 0
    on_batch, on = step(ON)
    assert kernels.counts().ran[OP] == layers
    assert torch.equal(on, off)
    for (k, v), (rk, rv) in zip(on_batch.kv_caches, off_batch.kv_caches, strict=True):
        assert torch.equal(k, rk) and torch.equal(v, rv)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        replayed = case.lm.compute_logits(case.lm(base.ids, pos, on_batch), ON)
    for (k, v), (bk, bv) in zip(on_batch.kv_caches, base.caches(), strict=True):
        k.copy_(bk)
        v.copy_(bv)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(replayed, off)
