"""Every gate shown able to fail: seeded engine bugs must fail the token and near-tie gates on the tiny model."""

from __future__ import annotations

import contextlib
import functools
import json

import pytest
import torch

import engine.ops.paged_attn as paged_attn
import engine.ops.rope as rope_ops
from engine import kernels
from engine.staging import StepStaging
from lab.gates import harness, ledger, teeth
from lab.gates.harness import Setup
from lab.gates.neartie import EXACT
from lab.gates.result import FAIL, PASS, REFUSED
from lab.gates.tokens import default_prompts

NEW = 10


@pytest.fixture(scope="module")
def setup(tiny_model_dir) -> Setup:
    return Setup(tiny_model_dir, default_prompts(512, seed=5), NEW)


@pytest.fixture(scope="module")
def oracle(setup: Setup):
    return setup.oracle()


def swapped_rope_halves(monkeypatch: pytest.MonkeyPatch) -> None:
    """RoPE applied to the head with its two halves swapped (and swapped back): a rotation the wrong way."""
    real = rope_ops.apply_rope_neox

    def wrong(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        y = real(torch.cat([x[..., half:], x[..., :half]], dim=-1), cos, sin)
        return torch.cat([y[..., half:], y[..., :half]], dim=-1)

    monkeypatch.setattr(rope_ops, "apply_rope_neox", wrong)  # the reference path of the model's qk_norm_rope


def block_table_off_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Attention reads every sequence's K/V one block over from where it was stored (the staged block tables
    rotated by one, the KV slots not: a sequence of one block is untouched, the longer ones are not)."""
    real = StepStaging.write_tables

    def wrong(self: StepStaging, tables: list[list[int]]) -> None:
        return real(self, [t[1:] + t[:1] for t in tables])

    monkeypatch.setattr(StepStaging, "write_tables", wrong)


BUGS = {"swapped-rope-halves": swapped_rope_halves, "block-table-off-by-one": block_table_off_by_one}


def test_unperturbed_engine_passes_both_gates(setup: Setup, oracle) -> None:
    assert harness.tokens(setup, oracle).verdict == PASS
    result = harness.neartie(setup, oracle=oracle)
    assert result.verdict == PASS
    assert result.details["counts"][EXACT] == len(setup.prompts) * NEW


@pytest.mark.parametrize("bug", list(BUGS))
def test_seeded_bug_fails_token_and_near_tie_gates(setup: Setup, oracle, monkeypatch, bug: str) -> None:
    BUGS[bug](monkeypatch)
    tokens = harness.tokens(setup, oracle)
    assert tokens.verdict == FAIL, tokens.render()
    neartie = harness.neartie(setup, oracle=oracle)
    assert neartie.verdict == FAIL, neartie.render()
    assert neartie.details["max_gap"] > 0.5


def test_distributional_gate_refuses_on_cpu(setup: Setup, oracle) -> None:
    small = Setup(setup.model_dir, setup.prompts[:2], 6)
    result = harness.distributional(small, runs=3, oracle=oracle)
    assert result.verdict == REFUSED, result.render()
    assert all(row["deterministic"] for row in result.table)


# --- the seeded bf16 bugs of lab/gates/teeth.py: each must fail the near-tie razor at its defaults -------
@pytest.fixture(scope="module")
def oracles() -> teeth.Oracles:
    return teeth.Oracles()


@pytest.fixture(scope="module")
def window_dir(tmp_path_factory: pytest.TempPathFactory):
    return teeth.window_model_dir(tmp_path_factory.mktemp("window"))


@pytest.mark.parametrize("name", ["none", "good-linear-fp32-accumulate"])
def test_razor_at_defaults_passes_the_engine_and_a_reordering(oracles, window_dir, name: str) -> None:
    seeded = teeth.Seeded("none", "no change", contextlib.nullcontext) if name == "none" else teeth.SEEDED[name]
    models = [harness.TINY_MODEL, window_dir] if name == "none" else [harness.TINY_MODEL]
    for model in models:
        assert not teeth.razor_caught(seeded, model, 0, oracles), (name, model)


@pytest.mark.parametrize("bug", [b.name for b in teeth.BUGS])
def test_seeded_bf16_bug_fails_the_razor_at_defaults(oracles, window_dir, bug: str) -> None:
    seeded = teeth.SEEDED[bug]
    assert teeth.razor_caught(seeded, teeth.model_for(seeded, window_dir), 0, oracles), bug


def test_seeded_bugs_leave_the_references_as_they_were() -> None:
    before = {name: op.reference for name, op in kernels.TABLE.items()}
    for seeded in teeth.SEEDED.values():
        with seeded.patch():
            pass
    assert {name: op.reference for name, op in kernels.TABLE.items()} == before


# --- the razor's fp32-probs setting (kernels.FP32_PROBS_RAZOR), on an engine whose attention is an online
# softmax (teeth.BASES): the bugs it is known to separate must fail it (eps-x10 and the correct twins are measured by
# `python -m lab gate teeth --razor fp32-probs`; see the ENGINE-PERF spec)
@pytest.mark.parametrize("bug", ["probs-rounded", "rmsnorm-round-after-weight", "window-off-by-one"])
def test_seeded_bug_fails_the_razor_at_its_fp32_probs_setting(oracles, window_dir, bug: str) -> None:
    seeded = teeth.SEEDED[bug]
    model = teeth.model_for(seeded, window_dir)
    assert teeth.razor_caught(seeded, model, 0, oracles, kernels.FP32_PROBS_RAZOR), bug


def test_the_fp32_probs_bugs_and_twins_stay_out_of_the_eager_teeth() -> None:
    eager = {s.name for s in teeth.seeded_for("eager")}
    assert "probs-rounded" not in eager and "good-online-split" not in eager
    assert {b.name for b in teeth.BUGS} <= eager
    assert teeth.main(["--razor", "fp32-probs", "--former"]) == 2
    assert teeth.main(["--razor", "eager", "--bugs", "probs-rounded"]) == 2
    assert teeth.main(["--prompt-sets", "0"]) == 2
    with teeth.BASES["fp32-probs"]():  # the setting's engine is the online softmax, not the reference
        assert paged_attn._attend is teeth._attend_online
    assert paged_attn._attend is teeth._EAGER_ATTEND


def test_teeth_on_a_missing_gpu_is_a_usage_error(capsys) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: --device cuda runs")
    assert teeth.main(["--device", "cuda", "--seeds", "1"]) == 2
    assert "no CUDA device here" in capsys.readouterr().out


def test_teeth_writes_its_verdict_as_json_for_lab_ci(tmp_path, capsys):
    out = tmp_path / "teeth.json"
    assert teeth.main(["--seeds", "1", "--bugs", "eps-x10", "--json", str(out)]) == 0
    assert "teeth: PASS" in capsys.readouterr().out
    assert json.loads(out.read_text()) == {"passed": True, "examined": 1, "summary": "eager on cpu: eps-x10 1/1 (PASS)"}


def test_teeth_writes_its_catch_rates_as_a_ledger_record(tmp_path, checkout, monkeypatch, capsys):
    """`--ledger DIR`: one record of the run's catch rates (what `lab ci teeth` leaves for the GPU runs), naming the
    checkout that ran (here a clean one-commit repository)."""
    monkeypatch.setattr(teeth, "write_record", functools.partial(ledger.write_record, root=checkout))
    assert teeth.main(["--seeds", "1", "--bugs", "eps-x10", "--ledger", str(tmp_path / "ledger")]) == 0
    (record,) = (tmp_path / "ledger").glob("*.json")
    data = json.loads(record.read_text())
    assert record.name.endswith("-teeth-eager-cpu.json") and data["clean"] is True and data["kind"] == "gate"
    assert data["summary"] == "teeth: eager on cpu: eps-x10 1/1 (PASS)"
    assert data["results"]["bugs"] == {"eps-x10": {"caught": 1, "seeds": 1, "good_twin": False}}
    assert f"ledger: {record}" in capsys.readouterr().out


def test_a_teeth_record_is_a_gate_with_its_bugs_as_the_self_test() -> None:
    """The evidence check wants a gate record's comparator shown able to fail (EV008): the seeded bugs are that
    self-test; a run of correct twins alone seeds nothing and records a note."""
    bug = {"caught": 10, "seeds": 10, "good_twin": False}
    twin = {"caught": 1, "seeds": 10, "good_twin": True}
    # 9 of 10 meets the catch rate; 8 of 10 does not: caught < seeded, which the evidence check reports
    assert teeth.record_kind({"eps-x10": bug, "probs-rounded": {**bug, "caught": 9}, "good": twin}) == ("gate", (2, 2))
    assert teeth.record_kind({"eps-x10": bug, "rope-fp32": {**bug, "caught": 8}}) == ("gate", (2, 1))
    assert teeth.record_kind({"good-online-split": twin}) == ("note", None)
