"""The reach gate: one flag setting per attention arm, its table, and its verdict on a machine without arms."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from engine import kernels
from lab.data.gate_models import GATE_MODELS
from lab.gates import harness, reach
from lab.gates.reach import Run, Setting, reach_table, settings


def first_enabled(op: kernels.Op, setting: Setting) -> list[str]:
    """The arms enabled under the setting, in precedence order."""
    snap = setting.snapshot()
    return [a.name for a in op.arms if a.enabled(snap)]


@pytest.mark.parametrize("setting", [s for s in settings() if not s.by_name], ids=lambda s: s.name)
def test_each_setting_makes_its_arm_the_first_that_can_take_it(setting: Setting) -> None:
    op = kernels.TABLE[setting.op]
    enabled = first_enabled(op, setting)
    assert setting.arm in enabled
    target = op.arm(setting.arm)
    # an arm enabled before it is one gated by a subset of its flags (it declines by shape)
    for name in enabled[: enabled.index(setting.arm)]:
        assert set(op.arm(name).flags) <= set(target.flags), (name, setting.describe())


def test_a_by_name_setting_names_its_arm_at_the_default_flags_and_is_never_a_default_run() -> None:
    by_name = {s.name: s for s in settings() if s.by_name}
    assert set(by_name) == {"paged_decode_attention/splitkv_swap", "paged_decode_attention/warp_d128"}
    for s in by_name.values():
        snap = s.snapshot()
        assert snap.values == kernels.FlagSnapshot.defaults().values and dict(snap.named) == {s.op: s.arm}
        assert not s.default and s.describe() == "by name"


def test_every_attention_arm_has_a_setting_and_a_gate_model() -> None:
    names = {s.name for s in settings()}
    for op in reach.ATTENTION_OPS:
        assert {f"{op}/{a.name}" for a in (*kernels.TABLE[op].arms, *kernels.TABLE[op].by_name)} <= names
    for s in settings():
        assert any(reach.takes(s, m) for m in GATE_MODELS.values()), s.name
    # the arms the default flags take: the one-pass decode arm since its flip and, since VT_PREFILL_ATTN's flip, the
    # prefill/extend arms
    assert {s.name for s in settings() if s.default} == {
        "paged_decode_attention/tiled_onepass",
        "prefill_attention/mma",
        "extend_attention/mma",
        "extend_attention/decode_rows",
    }


def run(model: str, arm: str, calls: int) -> Run:
    setting = next(s for s in settings() if s.arm == arm)
    return Run(model, setting, "PASS", "PASS", True, Counter({("paged_decode_attention", arm): calls}))


def test_reach_table_names_the_models_and_the_arms_at_zero() -> None:
    wanted = [s for s in settings() if s.arm in ("tiled", "warp_d128")]
    rows, missing = reach_table([run("d128-g4", "tiled", 6), run("long", "tiled", 3)], wanted)
    assert rows[0] == {
        "arm": "paged_decode_attention/tiled",
        "flags": "VT_ATTN_ONEPASS=0 VT_ATTN_PDL=0 VT_ATTN_PV_PIPELINED=0",
        "calls": 9,
        "models": "d128-g4 long",
    }
    assert rows[1] == {"arm": "paged_decode_attention/warp_d128", "flags": "by name", "calls": 0, "models": "-"}
    assert missing == ["paged_decode_attention/warp_d128"]


def test_a_by_name_arm_runs_named_in_the_snapshot_and_fails_where_it_does_not_run(tmp_path, capsys) -> None:
    """On the CPU the named arm runs nowhere: the gate says so; the run line calls it a by-name run, not judged."""
    code = reach.main(
        ["--device", "cpu", "--models", "d128-g4", "--arms", "warp_d128", "--prompts", "1", "--max-new-tokens", "2"]
        + ["--out", str(tmp_path)]
    )
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    run = next(line for line in lines if "paged_decode_attention/warp_d128" in line and "tokens" in line)
    assert " by name " in run and "tokens PASS" in run
    assert lines[-2] == "FAIL: no gate model reached paged_decode_attention/warp_d128 (0 calls)"
    record = json.loads((tmp_path / "reach.json").read_text())
    assert [r["flags"] for r in record["runs"]] == ["by name"]


def test_gate_fails_where_no_arm_runs(tmp_path, capsys) -> None:
    """On the CPU every arm shows 0 calls: the gate fails and says which, the table last but one line."""
    code = reach.main(
        ["--device", "cpu", "--models", "d64-g1", "--arms", "tiled", "--prompts", "1", "--max-new-tokens", "2"]
        + ["--out", str(tmp_path)]
    )
    lines = capsys.readouterr().out.splitlines()
    assert code == 1
    assert lines[-2] == "FAIL: no gate model reached paged_decode_attention/tiled (0 calls)"
    assert lines[-1].startswith("reach: FAIL: ") and "1 arms at 0 calls" in lines[-1]
    assert (tmp_path / "reach.json").is_file() and "tokens PASS" in lines[1]
    assert lines[0].startswith("d64-g1    oracle/generate") and "neartie PASS" in lines[0]  # the oracle against itself
    written = json.loads((tmp_path / "reach.json").read_text())
    assert written["oracle_self"][0]["model"] == "d64-g1"
    assert (written["passed"], written["summary"]) == (False, lines[-1])  # lab ci reads this verdict


def test_an_arm_is_judged_with_its_razor_setting(tmp_path, capsys, monkeypatch) -> None:
    """The one-pass arm keeps fp32 probabilities: its runs are judged by the online oracle at its setting."""
    onepass = next(s for s in reach.settings() if s.arm == "tiled_onepass")
    assert onepass.razor() == kernels.FP32_PROBS_RAZOR
    assert Setting("paged_decode_attention", "tiled", {}).razor() == kernels.EAGER_RAZOR
    assert Setting("extend_attention", "no such arm", {}).razor() == kernels.EAGER_RAZOR
    made: list[tuple] = []  # each oracle the gate loads: (attention,) or () for eager
    real = reach.Oracle
    monkeypatch.setattr(reach, "Oracle", lambda *a, **k: made.append(a[3:]) or real(*a, **k))
    argv = ["--device", "cpu", "--models", "d64-g1", "--arms", "tiled_onepass", "--prompts", "1"]
    assert reach.main([*argv, "--max-new-tokens", "2", "--out", str(tmp_path)]) == 1  # 0 calls on a CPU
    assert "neartie PASS (fp32-probs)" in capsys.readouterr().out.splitlines()[1]
    assert made == [(), ("online",)]  # the eager oracle's generate for the token gate, the online one judges


def test_unknown_model_or_arm_is_a_usage_error(capsys) -> None:
    assert reach.main(["--models", "d999"]) == 2
    assert "no gate model d999" in capsys.readouterr().out
    assert reach.main(["--arms", "nosuch"]) == 2


class FakeCuda:
    """Stands in for a CUDA tensor: the table tries arms only for those."""

    is_cuda = True

    def __init__(self, n: int) -> None:
        self.n = n


def test_a_fall_to_a_notice_arm_is_said_once_per_reason(capsys, monkeypatch) -> None:
    monkeypatch.setattr(kernels.table, "NOTICED", set())  # the set Op reads

    def ref(x: FakeCuda) -> str:
        return "reference"

    op = kernels.Op(
        ref,
        lambda x: None,
        [
            kernels.Arm("fast", (), lambda x: x.n < 4, "n below 4", lambda x: "fast"),
            kernels.Arm("slow", (), lambda x: True, "anything", lambda x: "slow", notice=True),
        ],
    )
    snap = kernels.FlagSnapshot.defaults()
    with kernels.on_device(kernels.Device(0, (9, 0), 227 * 1024, 132)):  # the stand-in's device: an H200's probe
        assert [op(snap, FakeCuda(n)) for n in (1, 9, 9, 2, 9)] == ["fast", "slow", "slow", "fast", "slow"]
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "engine: ref falls to its slow arm: fast needs n below 4 (said once per process; "
        "the selection counters count every call)"
    ]
    assert kernels.COUNTS.fallbacks[("ref", "fast", "n below 4")] >= 3
    assert op(snap, torch.zeros(1)) == "reference"  # a CPU tensor: no arm tried, nothing said
    assert capsys.readouterr().err == ""


def test_an_extend_attention_setting_runs_chunked_prefill(tmp_path) -> None:
    """The gates' one-step prefill of the whole batch never calls extend_attention; a setting of that op generates through engine.LLM in chunks."""
    from lab.data.gate_models import write_gate_models
    from lab.gates.oracle import Oracle
    from lab.gates.tokens import default_prompts

    path = write_gate_models(tmp_path, ["d64-g1"])["d64-g1"]
    prompts = default_prompts(512, 0, (50, 5))
    oracle = Oracle(path, torch.float32)
    theirs = [oracle.greedy(p, 4) for p in prompts]
    setting = Setting("extend_attention", "any", {})
    done = reach.run_model(GATE_MODELS["d64-g1"], path, setting, oracle, theirs, prompts, 4, "cpu", "float32")
    assert done.ran[("extend_attention", "reference")] > 0 and done.tokens.startswith("PASS"), done
    plain = Setting("paged_decode_attention", "any", {})
    done = reach.run_model(GATE_MODELS["d64-g1"], path, plain, oracle, theirs, prompts, 4, "cpu", "float32")
    assert ("extend_attention", "reference") not in done.ran and done.razor_passed


def test_forced_split_runs_are_reported_not_judged(monkeypatch) -> None:
    """`--tiled-splits`: the default setting again per split count, where the tiled arm takes the model; the
    count is forced for the run only."""
    wanted = settings()
    forced = reach.forced_split_settings(wanted, GATE_MODELS["long"], [1, 26])
    assert [s.name for s in forced] == [
        "paged_decode_attention/tiled_pipelined_pdl@s1",
        "paged_decode_attention/tiled_pipelined_pdl@s26",
    ]
    assert not any(s.default for s in forced) and all(s.snapshot() == forced[0].snapshot() for s in forced)
    assert reach.forced_split_settings(wanted, GATE_MODELS["d128-g16"], [1]) == []  # group 16: not the tiled arm's
    before = reach.cuda_tiled.num_splits
    with reach.forced_tiled_splits(5):
        assert reach.cuda_tiled.num_splits(32, 1664, 128, torch.bfloat16, 0) == 5
    assert reach.cuda_tiled.num_splits is before


class FakeArbiter:
    """Teacher-forced log-probs where token 2 leads token 1 by 0.1 and token 0 trails far behind."""

    def teacher_forced_logprobs(self, prompt: list[int], continuation: list[int]) -> torch.Tensor:
        return torch.log_softmax(torch.tensor([[-30.0, 1.0, 1.1]] * len(continuation)), -1)


def test_fp32_rows_judge_each_position_that_is_not_exact_against_the_twin() -> None:
    rows = [
        {
            "prompt": 0,
            "pos": 1,
            "ours": 1,
            "oracle_top1": 2,
            "gap": 0.75,
            "oracle_margin": 0.75,
            "verdict": "out-of-band",
        },
        {
            "prompt": 0,
            "pos": 0,
            "ours": 0,
            "oracle_top1": 2,
            "gap": 9.0,
            "oracle_margin": 1.0,
            "verdict": "out-of-band",
        },
    ]
    got = reach.fp32_rows(rows, [[5]], [[2, 1]], FakeArbiter())  # type: ignore[arg-type]
    assert got[0]["fp32_verdict"] == "near-tie" and abs(got[0]["fp32_margin"] - 0.1) < 1e-5
    assert got[1]["fp32_verdict"] == "out-of-band" and got[1]["fp32_gap"] > 30
    assert {k: got[0][k] for k in rows[0]} == rows[0]  # the bf16 verdict is kept as it was


class FakeOracle:
    """Teacher-forced log-probs from a fixed table; counts the prompts it was asked about."""

    def __init__(self, rows: list[dict[int, float]]) -> None:
        self.lp = torch.log_softmax(torch.tensor([[r.get(i, -10.0) for i in range(8)] for r in rows]), -1)
        self.asked: list[list[int]] = []

    def teacher_forced_logprobs(self, prompt: list[int], continuation: list[int]) -> torch.Tensor:
        self.asked.append(prompt)
        return self.lp[: len(continuation)]


def test_the_twin_is_asked_only_where_a_position_is_out_of_band() -> None:
    from lab.gates.neartie import near_tie_gate

    oracle = FakeOracle([{3: 2.0, 4: 1.25}, {1: 3.0}])  # ours 4 at pos 0: 0.75 behind the oracle's pick
    twin = FakeOracle([{3: 1.9, 4: 2.0}, {1: 3.0}])  # the twin ranks ours first
    prompts, ours = [[0], [5]], [[4, 1], [3, 1]]
    alone = near_tie_gate(prompts, ours, [oracle.lp, oracle.lp])
    assert alone.verdict == "FAIL"
    setup = harness.Setup(Path("unused"), prompts, 2)
    got = harness.neartie(setup, ours=ours, oracle=oracle, arbiter=twin)  # type: ignore[arg-type]
    assert got.verdict == "PASS" and got.details["absolved_by_arbiter"] == 1
    assert twin.asked == [[0]]  # prompt 1 is exact everywhere: not teacher-forced through the twin
