"""The near-tie razor's setting per arm (engine/kernels/table.py `Arm.razor`), as `gate neartie --require-arm` picks it."""

from __future__ import annotations

import argparse
import json

import pytest

from engine import kernels
from engine.flags import FlagSnapshot
from lab.cli import main
from lab.gates import neartie
from lab.gates.cli import pick_razor
from tests.lab.ledger_record import read_record

ONEPASS_ON = FlagSnapshot.defaults().with_(VT_ATTN_ONEPASS=True)


def options(*require: str, **given: object) -> argparse.Namespace:
    values = {"oracle_attn": [], "max_near_tie_rate": None, "max_out_of_band_rate": None, **given}
    return argparse.Namespace(require_arm=list(require), **values)


def test_the_eager_setting_is_the_gate_defaults() -> None:
    assert kernels.EAGER_RAZOR.oracle_attn == "eager"
    assert kernels.EAGER_RAZOR.max_near_tie_rate == neartie.DEFAULT_MAX_NEAR_TIE_RATE
    assert kernels.EAGER_RAZOR.max_out_of_band_rate == neartie.DEFAULT_MAX_OUT_OF_BAND_RATE


def test_the_razors_of_a_flag_are_those_of_its_enabled_arms() -> None:
    op = kernels.paged_decode_attention.name
    assert kernels.razors_gated_by("VT_ATTN_ONEPASS", ONEPASS_ON) == {f"{op}/tiled_onepass": kernels.FP32_PROBS_RAZOR}
    assert kernels.razors_gated_by("VT_ATTN_ONEPASS", ONEPASS_ON.with_(VT_ATTN_ONEPASS=False)) == {}
    norm = kernels.razors_gated_by("VT_NORM_KERNEL", FlagSnapshot.defaults().with_(VT_NORM_KERNEL=True))
    assert norm and set(norm.values()) == {kernels.EAGER_RAZOR}


def test_the_arm_under_test_names_the_setting() -> None:
    args = options("VT_ATTN_ONEPASS")
    said = pick_razor(args, ONEPASS_ON)
    assert (args.oracle_attn, args.max_near_tie_rate, args.max_out_of_band_rate) == (["online"], 0.04, 0.004)
    assert said.startswith("fp32-probs, the setting of paged_decode_attention/tiled_onepass:")


def test_without_an_arm_under_test_the_setting_is_eager() -> None:
    for args, snapshot in ((options(), ONEPASS_ON), (options("VT_ATTN_ONEPASS"), FlagSnapshot.defaults())):
        assert pick_razor(args, snapshot).startswith("eager, the default")
        assert (args.oracle_attn, args.max_near_tie_rate, args.max_out_of_band_rate) == (["eager"], 0.01, 0.0)


def test_an_option_given_wins_over_the_arms_setting() -> None:
    args = options("VT_ATTN_ONEPASS", max_out_of_band_rate=0.0)
    assert "options given here winning" in pick_razor(args, ONEPASS_ON)
    assert (args.oracle_attn, args.max_near_tie_rate, args.max_out_of_band_rate) == (["online"], 0.04, 0.0)


def test_a_setting_asked_for_by_name_judges_production_kernels_and_must_agree_with_the_arms() -> None:
    args = options(razor_name="fp32-probs")
    assert pick_razor(args, FlagSnapshot.defaults()).startswith("fp32-probs, asked for by --razor-setting: oracle")
    assert (args.oracle_attn, args.max_near_tie_rate, args.max_out_of_band_rate) == (["online"], 0.04, 0.004)
    assert args.razor_setting is kernels.FP32_PROBS_RAZOR
    assert pick_razor(options("VT_ATTN_ONEPASS", razor_name="fp32-probs"), ONEPASS_ON).startswith("fp32-probs, asked")
    with pytest.raises(ValueError, match="--razor-setting eager: the arms under test are judged otherwise "):
        pick_razor(options("VT_ATTN_ONEPASS", razor_name="eager"), ONEPASS_ON)
    with pytest.raises(SystemExit) as exit_:  # argparse: not a setting's name
        main(["gate", "neartie", "--razor-setting", "fp32"])
    assert exit_.value.code == 2


def test_arms_of_different_settings_are_a_usage_error_unless_every_option_is_given() -> None:
    with pytest.raises(ValueError, match="tiled_onepass: fp32-probs.*tiled_pipelined: eager"):
        pick_razor(options("VT_ATTN_TILED", oracle_attn=["sdpa"]), ONEPASS_ON)
    args = options("VT_ATTN_TILED", oracle_attn=["sdpa"], max_near_tie_rate=0.05, max_out_of_band_rate=0.0)
    assert pick_razor(args, ONEPASS_ON).startswith("the options given: oracle attention sdpa, near-ties at most 0.05")
    assert (args.oracle_attn, args.max_near_tie_rate, args.max_out_of_band_rate) == (["sdpa"], 0.05, 0.0)


def test_the_gate_judges_with_the_arms_setting_and_records_it(monkeypatch, capsys, tmp_path) -> None:
    """On the CPU the one-pass arm cannot run: the gate fails for that, after judging with the online oracle and
    the setting's log-prob rule."""
    monkeypatch.setenv("VT_ATTN_ONEPASS", "1")
    argv = ["gate", "neartie", "--require-arm", "VT_ATTN_ONEPASS", "--dtype", "float32", "--prompt-lens", "3,5"]
    assert main([*argv, "--max-new-tokens", "3", "--json", "--ledger", str(tmp_path), "--allow-dirty"]) == 1
    captured = capsys.readouterr()
    out = json.loads(captured.out)  # stdout is the JSON object alone
    assert out["arms_missing"] == ["VT_ATTN_ONEPASS"] and out["razor"].startswith("fp32-probs")
    assert out["summary"].startswith("6 positions over 2 prompts")  # --prompt-lens 3,5, 3 new tokens each
    assert "razor: fp32-probs" in captured.err and "run engine float32 oracle-online: PASS" in captured.err
    [record] = [read_record(p) for p in tmp_path.glob("*.json")]
    assert "log-prob distance" in out["summary"] and "within the limit 0.00025" in out["summary"]
    assert record["results"]["details"]["logprob_dist"]["positions"] == 6
    assert record["results"]["oracle_attn"] == "online" and record["results"]["razor"].startswith("fp32-probs")
    assert record["flags"]["VT_ATTN_ONEPASS"] is True  # the run's snapshot, recorded
    assert record["comparator_selftest"] == {"seeded": 2, "caught": 2}


def test_against_another_oracle_the_logprob_rule_says_it_was_not_applied(monkeypatch, capsys) -> None:
    monkeypatch.setenv("VT_ATTN_ONEPASS", "1")
    argv = ["gate", "neartie", "--require-arm", "VT_ATTN_ONEPASS", "--dtype", "float32", "--prompt-lens", "3"]
    assert main([*argv, "--oracle-attn", "sdpa", "--max-new-tokens", "2", "--json"]) == 1  # the arm did not run
    out = json.loads(capsys.readouterr().out)
    assert "log-prob rule not applied: its limit is measured against the online oracle" in out["summary"]


def test_prompt_lens_must_be_positive_lengths(capsys) -> None:
    for bad in ("0,3", "a", ""):
        with pytest.raises(SystemExit):
            main(["gate", "neartie", "--prompt-lens", bad])
        assert "--prompt-lens" in capsys.readouterr().err
    assert main(["gate", "tokens", "--prompt-lens", "3", "--prompt-ids", "1,2"]) == 2
    assert "with --prompt-ids there are none" in capsys.readouterr().err
