"""The retire rule's by-name arms: outside every op's precedence chain, so no flag setting chooses one, yet a gate or
an A/B reaches each by naming it in a snapshot (`kernels.naming`) or by `Op.run_arm` (CPU)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from engine import kernels
from engine.flags import FLAGS, REFERENCE, FlagSnapshot
from engine.kernels.table import PORTABLE, Arm, Op, gated_by, supports_any
from tests.engine.table_standins import OnGpu, decode_args, on_an_h200


@pytest.fixture(autouse=True)
def _counts_on_an_h200() -> Iterator[None]:
    with on_an_h200():  # fresh counters; the stand-ins (OnGpu) on an H200 as the table's device probe sees it
        yield


def flag_settings() -> list[FlagSnapshot]:
    """The defaults, every boolean flag on, every one off but VT_KERNELS, and each one flipped alone."""
    bools = [n for n, f in FLAGS.items() if f.is_bool]
    out = [FlagSnapshot.defaults(), FlagSnapshot(dict.fromkeys(bools, True))]
    out.append(FlagSnapshot({**dict.fromkeys(bools, False), "VT_KERNELS": True}))
    out += [FlagSnapshot.defaults().with_(**{n: not FLAGS[n].default}) for n in bools]
    return out


def attention_inputs() -> list[tuple[object, ...]]:
    """paged_decode_attention's arguments over head dims, groups and dtypes, the by-name arms' shapes among them."""
    shapes = []
    for d in (64, 128, 256):
        for group in (1, 2, 3, 4, 8, 16):
            for dtype in (torch.bfloat16, torch.float16, torch.float32):
                shapes.append(decode_args(OnGpu(2, 2 * group, d, dtype=dtype), OnGpu(9, 16, 2, d)))
    return shapes


def by_name_chosen(op: Op, inputs: list[tuple[object, ...]]) -> set[str]:
    """The by-name arms of `op` (and any arm called "kept") that some flag setting's default order chooses."""
    outside = {a.name for a in op.by_name} | {"kept"}
    return {op.choose(snap, *args) for snap in flag_settings() for args in inputs} & outside


@pytest.fixture
def every_tiled_variant_supports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each tiled variant takes its shapes (no device to ask): the chain's arms are as eager as they can be."""
    from engine.cuda import paged_attn_onepass, paged_attn_tiled

    for name in ("supports_fused", "supports_pipelined", "supports_pdl"):
        monkeypatch.setattr(paged_attn_tiled, name, lambda q, k_cache, block_tables: True)
    monkeypatch.setattr(paged_attn_onepass, "supports_inputs", lambda q, k_cache, block_tables: True)


def test_the_kept_attention_arms_are_by_name_only(every_tiled_variant_supports: None) -> None:
    op = kernels.paged_decode_attention
    assert [a.name for a in op.by_name] == ["splitkv_swap", "warp_d128"]  # vllm.cpp's #48 and #383
    assert [a.name for a in op.arms] == [
        "tiled_onepass",
        "tiled_fused",
        "tiled_pipelined_pdl",
        "tiled_pipelined",
        "tiled",
        "generic",
    ]
    assert all(a.flags == () for a in op.by_name)
    assert by_name_chosen(op, attention_inputs()) == set()  # under no flag setting, at no shape
    for ops in kernels.TABLE.values():  # nor does any other op's order reach a by-name arm
        assert not {a.name for a in ops.by_name} & {a.name for a in ops.arms}, ops.name


def test_the_check_catches_a_kept_arm_left_in_the_chain() -> None:
    """The same check over an op that left its kept arm in the chain (as the retired arms were, behind flags): it
    names the arm, so the check above can fail."""
    kept = Arm("kept", gated_by("VT_ATTN_TILED"), lambda q, *_, **__: q.shape[2] == 128, "head_dim 128", supports_any)
    generic = Arm("generic", gated_by(), supports_any, "anything", supports_any)

    def paged_decode_attention(*_: object, **__: object) -> None:
        return None

    wrong = Op(paged_decode_attention, lambda *_, **__: None, [kept, generic])
    right = Op(paged_decode_attention, lambda *_, **__: None, [generic], by_name=[Arm(**{**vars(kept), "flags": ()})])
    assert by_name_chosen(wrong, attention_inputs()) == {"kept"}
    assert by_name_chosen(right, attention_inputs()) == set()


def test_a_named_attention_arm_is_chosen_where_it_takes_the_shape(every_tiled_variant_supports: None) -> None:
    op = kernels.paged_decode_attention
    defaults = FlagSnapshot.defaults().with_(VT_ATTN_ONEPASS=False)  # the chain below the one-pass arm (its own test)
    bf16_d128 = decode_args(OnGpu(2, 8, 128), OnGpu(9, 16, 2, 128))
    d256 = decode_args(OnGpu(2, 8, 256), OnGpu(9, 16, 2, 256))
    for name in ("splitkv_swap", "warp_d128"):
        named = kernels.naming(defaults, op.name, name)
        assert op.choose(named, *bf16_d128) == name
        assert op.choose(REFERENCE.with_arm(op.name, name), *bf16_d128) == "reference"  # VT_KERNELS off: none runs
    assert op.choose(defaults, *bf16_d128) == "tiled_pipelined_pdl"  # unnamed: the default order, as before
    assert op.choose(kernels.naming(defaults, op.name, "warp_d128"), *d256) == "tiled_pipelined_pdl"  # declines


def _toy(calls: list[str]) -> Op:
    """An op with one flagged chain arm and one by-name arm, kernels that record their calls."""

    def toy(x: object, n: int) -> str:
        calls.append("reference")
        return "reference"

    def kernel(name: str) -> object:
        def run(x: object, n: int) -> str:
            calls.append(name)
            return name

        return run

    fast = Arm("fast", gated_by("VT_GEMV"), supports_any, "anything", kernel("fast"))
    kept = Arm("kept", gated_by(), lambda x, n: n % 2 == 0, "an even n", kernel("kept"))
    return Op(toy, lambda x, n: None, [fast], by_name=[kept])


def test_a_named_arm_runs_first_and_its_decline_is_counted_then_the_chain_runs() -> None:
    calls: list[str] = []
    op, gpu, defaults = _toy(calls), OnGpu(1), FlagSnapshot.defaults()
    named = defaults.with_arm("toy", "kept")
    assert op(defaults, gpu, 2) == "fast"  # not named: never taken
    assert op(named, gpu, 2) == "kept"  # named: first, whatever the flags
    assert op(named.with_(VT_GEMV=False), gpu, 2) == "kept"
    assert op(named, gpu, 3) == "fast"  # it declines an odd n: counted, then the chain
    assert op(named.with_(VT_GEMV=False), gpu, 3) == "reference"
    assert op(named, torch.zeros(1), 2) == "reference"  # arms run only on CUDA tensors
    assert calls == ["fast", "kept", "kept", "fast", "reference", "reference"]
    seen = kernels.counts()
    assert seen.ran == {("toy", "fast"): 2, ("toy", "kept"): 2, ("toy", "reference"): 2}
    assert seen.fallbacks == {("toy", "kept", "an even n"): 2}
    assert op.run_arm("kept", gpu, 4) == "kept"  # and by name alone
    with pytest.raises(ValueError, match="toy: arm 'kept' needs an even n"):
        op.run_arm("kept", gpu, 5)


def test_a_named_arm_the_device_lacks_is_counted_as_a_device_decline_then_the_chain_runs() -> None:
    def toy(x: object) -> str:
        return "reference"

    fast = Arm("fast", gated_by("VT_GEMV"), supports_any, "anything", lambda x: "fast")
    kept = Arm("kept", gated_by(), supports_any, "anything", lambda x: "kept", capability=(10, 0))
    op = Op(toy, lambda x: None, [fast], by_name=[kept])
    named = FlagSnapshot.defaults().with_arm("toy", "kept")
    assert op(named, OnGpu(1)) == "fast"
    seen = kernels.counts()
    assert seen.declines == {("toy", "kept", "sm_100 (cuda:0 is sm_90)"): 1} and not seen.fallbacks
    with pytest.raises(ValueError, match=r"toy: arm 'kept' needs sm_100 \(cuda:0 is sm_90\)"):
        op.run_arm("kept", OnGpu(1))


def test_the_kept_attention_arms_declare_the_portable_device_needs() -> None:
    """They run on CUDA like the chain's arms: the table checks their declared needs (static shared memory only)."""
    kept = {a.name: a for a in kernels.paged_decode_attention.by_name}
    assert set(kept) == {"splitkv_swap", "warp_d128"}
    for arm in kept.values():
        assert (arm.capability, arm.smem_optin) == (PORTABLE, 0)
    sm75 = kernels.Device(0, (7, 5), 64 * 1024, 40)
    bf16_d128 = decode_args(OnGpu(2, 8, 128), OnGpu(9, 16, 2, 128))
    with kernels.on_device(sm75):  # below every arm's sm_80: the named arm declines like the rest
        named = kernels.naming(FlagSnapshot.defaults(), "paged_decode_attention", "warp_d128")
        assert kernels.paged_decode_attention.choose(named, *bf16_d128) == "reference"


def test_a_by_name_arm_has_no_flag_and_a_unique_name() -> None:
    calls: list[str] = []
    toy = _toy(calls)
    flagged = Arm("kept", gated_by("VT_GEMV"), supports_any, "anything", supports_any)
    with pytest.raises(ValueError, match="toy: a by-name arm has no flag"):
        Op(toy.reference, toy.check, [], by_name=[flagged])
    with pytest.raises(ValueError, match="arm names must be unique"):
        Op(toy.reference, toy.check, toy.arms, by_name=[Arm("fast", (), supports_any, "anything", supports_any)])
    assert repr(toy) == "Op(toy: fast; by name: kept)"


def test_naming_refuses_what_the_table_does_not_have() -> None:
    defaults = FlagSnapshot.defaults()
    with pytest.raises(KeyError, match="paged_decode_attention: no arm 'gqa' .*splitkv_swap, warp_d128, reference"):
        kernels.naming(defaults, "paged_decode_attention", "gqa")  # retired outright
    with pytest.raises(KeyError, match="no op 'nope' in the kernel table"):
        kernels.naming(defaults, "nope", "warp_d128")


def test_a_named_arm_is_part_of_the_snapshot_and_never_of_the_environment() -> None:
    defaults = FlagSnapshot.defaults()
    named = kernels.naming(defaults, "paged_decode_attention", "warp_d128")
    assert named != defaults and hash(named) != hash(defaults) and named.values == defaults.values
    assert named.with_(VT_GEMV=False).named == {"paged_decode_attention": "warp_d128"}  # kept by with_
    assert repr(named) == "FlagSnapshot(paged_decode_attention/warp_d128 by name)"
    assert FlagSnapshot.from_env({"paged_decode_attention": "warp_d128"}).named == {}
    retired = ("VT_ATTN_SPLITKV", "VT_ATTN_SPLITKV_GQA_SWAP", "VT_ATTN_DECODE_OPT", "VT_ATTN_DECODE_D128")
    retired += ("VT_ATTN_DECODE_GQA", "VT_GEMV_PERSISTENT", "VT_ACT_GEMV", "VT_GDN_CHUNKED_KERNEL")
    assert not set(retired) & set(FLAGS)  # the flags that only selected retired arms are gone


def test_the_counters_mark_a_by_name_arm() -> None:
    kernels.COUNTS.ran[("paged_decode_attention", "warp_d128")] += 3
    kernels.COUNTS.ran[("paged_decode_attention", "tiled")] += 1
    assert kernels.render_counts().splitlines()[1:] == [
        "  paged_decode_attention/tiled 1 [VT_ATTN_TILED]",
        "  paged_decode_attention/warp_d128 3 [by name]",
    ]


def test_a_runner_holds_the_named_snapshot_it_was_given(tiny_model_dir) -> None:
    """LLM -> Runner keep the snapshot whole, named arms included (eager steps, capture and replay read it); on the
    CPU no arm runs, so the tokens are the defaults'."""
    from engine.llm import LLM
    from lab.drive import greedy

    named = kernels.naming(FlagSnapshot.defaults(), "paged_decode_attention", "warp_d128")
    runs = {}
    for name, flags in (("named", named), ("defaults", FlagSnapshot.defaults())):
        llm = LLM(tiny_model_dir, max_num_seqs=1, max_model_len=16, flags=flags)
        runs[name] = greedy(llm, [[1, 2, 3]], 3)
        assert llm.runner.flags == flags and llm.runner.flags.named == flags.named
    assert runs["named"] == runs["defaults"]
