"""The kernel table's `decode_layer` op: the whole decoder layer as one op. Its `chain` arm runs the layer's ops in
turn (the layer's `chain`), bit for bit its reference on the CPU; its `persistent` arm (VT_PERSISTENT_LAYER, default
OFF) takes only a plain decode step of a dense Qwen3 layer on one GPU and says why otherwise. The arm's GPU run:
tests/engine/cuda/test_persistent.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from engine import kernels
from engine.cuda.device import Device
from engine.flags import FLAGS, FlagSnapshot
from engine.kernels.layer import fit_refusal, persistent_refusal, persistent_step_refusal, persistent_weights
from engine.model.batch import ForwardBatch
from engine.model.config import parse_config
from engine.model.qwen3_moe import Qwen3MoeDecoderLayer
from lab.persistent import case as C


def _decode(case: C.Case, flags: FlagSnapshot) -> tuple[tuple, ForwardBatch]:
    s = case.fresh_step()
    batch = s.batch(flags)
    return (s.x, s.residual, (s.cos, s.sin), batch, case.layer), batch


def test_the_flag_is_declared_off_and_gates_the_persistent_arm_first():
    assert FLAGS["VT_PERSISTENT_LAYER"].default is False
    op = kernels.TABLE["decode_layer"]
    assert [a.name for a in op.arms] == ["persistent", "chain"]
    assert op.arms[0].flags == ("VT_PERSISTENT_LAYER",) and op.arms[1].flags == ()


def test_the_chain_arm_is_the_layers_reference_bits_and_the_model_calls_the_op():
    case = C.make(C.SMALL, [37, 5, 64], seed=1)
    flags = FlagSnapshot.defaults()
    args, batch = _decode(case, flags)
    want_args, _ = _decode(case, flags)
    want = kernels.TABLE["decode_layer"].reference(*want_args)
    kernels.reset_counts()
    got = kernels.TABLE["decode_layer"].run_arm("chain", *args)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    assert torch.equal(batch.kv_caches[0][0], want_args[3].kv_caches[0][0])  # the step's K written alike
    kernels.reset_counts()
    with torch.no_grad():
        out = case.layer(*_decode(case, flags)[0][:4])
    assert all(torch.equal(a, b) for a, b in zip(out, want, strict=True))
    assert kernels.counts().ran[("decode_layer", "reference")] == 1  # on the CPU every op runs its reference


def test_with_the_flag_on_a_cpu_step_runs_the_reference_and_the_arm_says_why_not():
    case = C.make(C.SMALL, [37, 5], seed=2)
    flags = FlagSnapshot.defaults().with_(VT_PERSISTENT_LAYER=True)
    args, _ = _decode(case, flags)
    kernels.reset_counts()
    with torch.no_grad():
        case.layer(*args[:4])
    ran = kernels.counts().ran
    assert ran[("decode_layer", "reference")] == 1 and ("decode_layer", "persistent") not in ran
    assert persistent_refusal(*args) == "x on cpu (CUDA only)"


def test_the_refusals_name_what_the_kernel_does_not_take():
    case = C.make(C.SMALL, [37], seed=3)
    args, batch = _decode(case, FlagSnapshot.defaults())
    prefill = replace(batch, is_prefill=True, seq_lens=[1], block_tables=None, context_lens=None)
    assert persistent_refusal(*args[:3], prefill, args[4]) == "a prefill or serving step (decode rows only)"
    biased = C.make(C.SMALL, [37], seed=3)
    biased.layer.self_attn.qkv_proj.bias = torch.nn.Parameter(torch.zeros(8 * 128 + 2 * 2 * 128))
    assert persistent_refusal(*args[:4], biased.layer) == "a projection bias"
    biased.layer.self_attn.o_proj.all_reduce = lambda y: y
    biased.layer.self_attn.qkv_proj.bias = None
    assert persistent_refusal(*args[:4], biased.layer) == "tensor parallel (its all-reduces)"
    moe_cfg = parse_config(
        {
            "architectures": ["Qwen3MoeForCausalLM"],
            "model_type": "qwen3_moe",
            "num_hidden_layers": 1,
            "vocab_size": 64,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1e6,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 64,
            **C.SMALL,
        }  # fmt: skip
    )
    moe = Qwen3MoeDecoderLayer(moe_cfg, 0, torch.float32)
    assert persistent_refusal(*args[:4], moe) == "not a dense Qwen3 layer (its attention's q/k norms and a gated MLP)"


def test_the_gates_cases_judge_the_arm_against_the_layers_reference():
    from lab.gates.cases import persistent as cases

    layer_cases = [c for c in cases.CASES if c.arm == "persistent"]
    assert len(layer_cases) == 10 and {c.flag for c in layer_cases} == {"VT_PERSISTENT_LAYER"}
    assert {c.arm for c in cases.CASES} == {"persistent", "persistent_step"}
    assert {c.row for c in cases.CASES} == {"ENGINE-PERSISTENT"}
    small = next(c for c in cases.CASES if c.name == "persistent/layer/bf16/b8/mixed")
    inputs = small.make(0, torch.device("cpu"))
    ref = small.reference_output(inputs)
    assert ref.shape == (8, 2 * 1024 + 2 * 8 * 128) and ref.isfinite().all()
    assert torch.equal(ref, small.reference_output(inputs))  # the caches are copied: a second call sees the same
    with pytest.raises(ValueError, match="decode_layer: arm 'persistent' needs a plain decode step"):
        small.kernel(inputs)  # on the CPU the arm declines; on the GPU `lab gate kernels --filter persistent` runs it


def test_a_fault_the_steps_launches_recorded_is_raised_once_its_tokens_are_back(monkeypatch):
    """The decode step reads the persistent launches' error words after its tokens (engine/runner.py `_tokens`): none
    made, nothing read; a recorded fault raises, described, and is cleared. The words here stand in for a device's."""
    from engine.cuda import persistent

    monkeypatch.setattr(persistent, "_CONTROLS", {})
    kernels.raise_persistent_faults()  # no launch made: no read, no raise
    shape = persistent.decode_shape(8, 1024, 16, 8, 128, 3072, False, None)
    control = torch.zeros(persistent.CONTROL_WORDS + 4, dtype=torch.int32)
    persistent._CONTROLS[(shape, 1, 0, torch.device("cpu"))] = control
    kernels.raise_persistent_faults()  # a launch made, no fault
    control[persistent.ERROR] = (2 << 20) + 417
    with pytest.raises(RuntimeError, match=r"persistent layer \(batch 8 on cpu\): a wait that timed out at task 417"):
        kernels.raise_persistent_faults()
    assert int(control[persistent.ERROR]) == 0  # cleared: the next step starts clean
    kernels.raise_persistent_faults()
    assert persistent.describe((4 << 20) + 3) == "a token id outside the vocabulary at row 3"
    # the runner's warm-up makes the words inside inference mode; the step clears them outside it
    monkeypatch.setattr(persistent, "_CONTROLS", {})
    with torch.inference_mode():
        made = persistent.control_words(shape, 1, 0, torch.device("cpu"))
    made[persistent.ERROR] = (1 << 20) + 12
    with pytest.raises(RuntimeError, match="a kind this kernel does not run 12"):
        kernels.raise_persistent_faults()
    assert int(made[persistent.ERROR]) == 0


# --- decode_model: the embedding, every layer and the final norm as one op -----------------------------------------
def _model_call(case: C.ModelCase, flags: FlagSnapshot) -> tuple:
    s = case.fresh_step(True)
    assert case.lm is not None and s.ids is not None
    return (s.ids, (s.context_lens - 1).long(), s.batch(flags), case.lm.model)


def test_the_model_op_runs_its_parts_in_turn_and_the_persistent_step_is_off_first():
    assert FLAGS["VT_PERSISTENT_STEP"].default is False
    op = kernels.TABLE["decode_model"]
    assert [a.name for a in op.arms] == ["persistent_step", "chain"]
    assert op.arms[0].flags == ("VT_PERSISTENT_STEP",) and list(kernels.TABLE)[:2] == ["decode_model", "decode_layer"]
    case = C.make_model(C.SMALL, [37, 5], seed=4, layers=2, vocab=64)
    flags = FlagSnapshot.defaults()
    want = op.reference(*_model_call(case, flags))
    kernels.reset_counts()
    with torch.no_grad():
        got = op.run_arm("chain", *_model_call(case, flags))
        assert torch.equal(got, want)
        assert torch.equal(case.lm.model(*_model_call(case, flags)[:3]), want)  # the model's forward is the op
    ran = kernels.counts().ran
    assert ran[("decode_model", "chain")] == 1 and ran[("decode_model", "reference")] == 1  # the CPU: the reference
    assert ran[("decode_layer", "reference")] == 4  # two calls, each its two layers through their own op


def test_the_persistent_step_says_why_it_declines():
    case = C.make_model(C.SMALL, [37], seed=5, layers=2, vocab=64)
    args = _model_call(case, FlagSnapshot.defaults().with_(VT_PERSISTENT_STEP=True))
    assert persistent_step_refusal(*args) == "x on cpu (CUDA only)"
    prefill = replace(args[2], is_prefill=True, seq_lens=[1], block_tables=None, context_lens=None)
    assert persistent_step_refusal(args[0], args[1], prefill, args[3]) == (
        "layer 0: a prefill or serving step (decode rows only)"
    )
    model = args[3]
    model.layers[1].self_attn.sliding_window = 16
    assert persistent_step_refusal(*args) == "layers with different sliding windows (one window a launch)"
    model.layers[1].self_attn.sliding_window = None
    model.layers[1].mlp.down_proj.all_reduce = lambda y: y
    assert persistent_step_refusal(*args) == "layer 1: tensor parallel (its all-reduces)"
    model.embed_tokens.comm = object()
    assert persistent_step_refusal(*args) == "tensor parallel (a vocabulary-parallel embedding)"


def test_the_model_steps_cases_judge_the_arm_against_the_models_reference():
    from lab.gates.cases import persistent as cases

    model_cases = [c for c in cases.CASES if c.arm == "persistent_step"]
    assert [c.name for c in model_cases] == [
        f"persistent/model/{dt}/{b}" for dt in ("bf16", "fp16") for b in ("b1", "b8")
    ]
    assert {c.flag for c in model_cases} == {"VT_PERSISTENT_STEP"}
    b8 = model_cases[1]
    inputs = b8.make(0, torch.device("cpu"))
    ref = b8.reference_output(inputs)
    assert ref.shape == (8, 256 + 3 * 2 * 2 * 128) and ref.isfinite().all()
    assert torch.equal(ref, b8.reference_output(inputs))  # the caches are copied: a second call sees the same
    with pytest.raises(ValueError, match="decode_model: arm 'persistent_step' needs a plain decode step"):
        b8.kernel(inputs)


H200 = Device(0, (9, 0), 232448, 132)


def test_what_does_not_fit_the_kernel_or_the_device_is_declined_not_raised():
    layer = C.make(C.QWEN3_0_6B, [4] * 8, seed=1).layer
    assert fit_refusal(layer, 8, False, H200, torch.bfloat16) is None
    wide = C.make(dict(C.SMALL, intermediate_size=17408), [4], seed=1).layer  # 8 staged rows of K 17408: 278528 B
    assert fit_refusal(wide, 8, False, H200, torch.bfloat16) == (
        "the device: 278528 bytes of opt-in shared memory (cuda:0 allows 232448)"
    )
    assert fit_refusal(wide, 1, False, H200, torch.bfloat16) is None  # one row of it fits
    odd = C.make(dict(C.SMALL, head_dim=80), [4], seed=1).layer
    assert (
        fit_refusal(odd, 1, False, H200, torch.bfloat16) == "head_dim 80 not a multiple of the q/k/v tile's 32 columns"
    )
    assert fit_refusal(layer, 1, False, H200, torch.float32) == "dtype torch.float32 (bf16 and fp16 only)"


def test_the_launches_take_the_kinds_their_tables_hold(monkeypatch):
    """`launch` (a layer, no model) and `launch_model` (no head) pass every built kind: the tensors' rules must go by
    the kinds the table holds. `check_layer` is stubbed (it needs CUDA tensors); the model's tensors then fail on theirs."""
    from engine.cuda import persistent

    monkeypatch.setattr(persistent, "check_layer", lambda *_: None)
    case = C.make(C.SMALL, [4], seed=1)
    t = persistent.tensors(
        case.step.x, case.step.residual, persistent_weights(case.layer), case.step.caches()[0], case.step.slot_mapping,
        (case.step.cos, case.step.sin), case.step.block_tables, case.step.context_lens, 8, 4,
    )  # fmt: skip
    layer_shape = persistent.decode_shape(1, 256, 8, 2, 128, 640, False, None)
    persistent.check_step(persistent.schedule_for(layer_shape, 1, 0), persistent.BUILT, [t], None)  # no raise
    model_shape = persistent.decode_shape(1, 256, 8, 2, 128, 640, True, None)
    no_head = persistent.schedule_for(model_shape, 1, 64)
    first = replace(t, residual=None)
    ends = persistent.ModelTensors(torch.zeros(1, dtype=torch.int64), torch.zeros(64, 256), torch.zeros(256), None,
                                   torch.zeros(1, 256), None)  # fmt: skip
    with pytest.raises(ValueError, match=r"^ids: expected a contiguous CUDA"):  # past the head rule, on to the tensors
        persistent.check_step(no_head, persistent.BUILT, [first], ends)
    with pytest.raises(ValueError, match="head and logits are given exactly when the table's HEAD tasks run"):
        persistent.check_step(no_head, persistent.BUILT, [first], replace(ends, head=ends.embed))
    with pytest.raises(ValueError, match="model tensors: missing"):
        persistent.check_step(no_head, persistent.BUILT, [first], None)
