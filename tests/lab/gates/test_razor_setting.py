"""The near-tie razor's setting per arm (engine/kernels/table.py `Arm.razor`), as `gate neartie --require-arm` picks it."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from engine import flags, kernels
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
    off = FlagSnapshot.defaults().with_(VT_ATTN_ONEPASS=False)  # the arm under test not enabled
    for args, snapshot in ((options(), ONEPASS_ON), (options("VT_ATTN_ONEPASS"), off)):
        assert pick_razor(args, snapshot).startswith("eager, the default")
        assert (args.oracle_attn, args.max_near_tie_rate, args.max_out_of_band_rate) == (["eager"], 0.01, 0.0)


def test_an_arm_under_test_judged_eager_takes_the_setting_of_the_arms_the_run_took() -> None:
    """A flip of an arm that rounds as the reference does (the small GEMM) runs beside the default one-pass
    attention, which keeps fp32 probabilities: judged eager, the correct attention fails (the first VT_GEMM_SMALL
    flip, 2026-12-06: 13 out of band at bf16 on d128, where the default path's own gate passed)."""
    from lab.gates.cli import razor_of_run

    snapshot = ONEPASS_ON.with_(VT_GEMM_SMALL=True)
    args = options("VT_GEMM_SMALL")
    said = pick_razor(args, snapshot)
    assert said.startswith("eager, the setting of linear/gemm_small, unless the run takes an arm of another")
    assert args.razor_from_arms and args.oracle_attn == ["eager"]
    took = {("paged_decode_attention", "tiled_onepass"): 28, ("linear", "gemm_small"): 56}
    assert razor_of_run(args, took).startswith("fp32-probs, the setting of paged_decode_attention/tiled_onepass")  # type: ignore[arg-type,union-attr]
    assert (args.oracle_attn, args.max_near_tie_rate) == (["online"], 0.04)
    args = options("VT_GEMM_SMALL")
    pick_razor(args, snapshot)
    assert razor_of_run(args, {("linear", "gemm_small"): 56}).startswith("eager, the default")  # type: ignore[arg-type,union-attr]
    given = options("VT_GEMM_SMALL", max_near_tie_rate=0.02)  # an option given: the arms' setting, as before
    assert pick_razor(given, snapshot).startswith("eager, the setting of linear/gemm_small, options given here")
    assert not getattr(given, "razor_from_arms", False)


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


def cpu_arm(monkeypatch: pytest.MonkeyPatch, razor: kernels.Razor, name: str = "cpu_online") -> None:
    """A decode attention arm that runs on the CPU under VT_ATTN_ONEPASS with `razor` (the one-pass arm's stand-in:
    the real one is CUDA only, and the table takes no arm for a CPU tensor); its kernel is the reference."""
    from engine.ops import paged_attn

    op = kernels.paged_decode_attention
    arm = kernels.Arm(name, ("VT_ATTN_ONEPASS",), lambda *_, **__: True, "any", paged_attn.paged_decode_attention)
    arm = dataclasses.replace(arm, razor=razor)
    monkeypatch.setattr(op, "arms", (arm, *op.arms))
    # taken when the environment sets the flag: on the CPU the layer's reference hands its inner ops a snapshot
    # with the kernels off (engine/kernels/layer.py _UNFUSED)
    monkeypatch.setattr(op, "_select", lambda *_, **__: arm if flags.enabled("VT_ATTN_ONEPASS") else None)


def test_a_run_whose_arm_keeps_fp32_probs_is_judged_by_its_setting(monkeypatch, capsys) -> None:
    """No --require-arm and no option given: an engine run that took an arm of another setting (a default ON arm
    that keeps fp32 probabilities) is judged by that setting, and a run that took none by eager."""
    cpu_arm(monkeypatch, kernels.FP32_PROBS_RAZOR)
    argv = ["gate", "neartie", "--dtype", "float32", "--prompt-lens", "3,5", "--max-new-tokens", "3", "--json"]
    monkeypatch.setenv("VT_ATTN_ONEPASS", "1")
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    took = "fp32-probs, the setting of paged_decode_attention/cpu_online, the arm that ran"
    assert f"razor for the float32 run: {took}" in captured.err and out["razor"] == took
    assert "log-prob distance" in out["summary"] and "within the limit 0.00025" in out["summary"]
    assert out["arms"]["paged_decode_attention/cpu_online"] > 0

    from engine.ops import paged_attn
    from tests.lab.gates.test_peer_attention import call_log

    call_log(monkeypatch, "logged", paged_attn.paged_decode_attention)  # a peer after the engine: judged as given
    assert main([*argv, "--attn-peer", "engine", "--attn-peer", "logged"]) == 0
    out = json.loads(capsys.readouterr().out)
    engine, peer = (out["details"][k] for k in ("engine/float32/oracle-online", "logged/float32"))  # the peer: eager
    assert "within the limit 0.00025" in out["summary"].split("; logged/")[0]
    assert "not judged" in out["summary"].split("; logged/")[1] and engine != peer

    monkeypatch.setenv("VT_ATTN_ONEPASS", "0")  # the arm does not run: the eager default, no log-prob rule
    assert main(argv) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert "razor for the" not in captured.err and out["razor"].startswith("eager, the default")
    assert "log-prob distance" not in out["summary"]

    monkeypatch.setenv("VT_ATTN_ONEPASS", "1")  # an option given: the options stand as given
    assert main([*argv, "--oracle-attn", "eager"]) == 0
    captured = capsys.readouterr()
    assert "razor for the" not in captured.err and "log-prob distance" not in json.loads(captured.out)["summary"]


def test_arms_of_two_settings_in_one_run_are_a_usage_error(monkeypatch) -> None:
    other = kernels.Razor("other", "sdpa", 0.02, 0.001)
    cpu_arm(monkeypatch, other)
    ran = {("paged_decode_attention", "cpu_online"): 3, ("rms_norm", "reference"): 5}
    assert kernels.razors_ran(ran) == {"paged_decode_attention/cpu_online": other}
    assert kernels.razors_ran({("paged_decode_attention", "cpu_online"): 0}) == {}  # an arm with no call took nothing
    assert kernels.razors_enabled(ONEPASS_ON)["paged_decode_attention/cpu_online"] == other
    assert "paged_decode_attention/cpu_online" not in kernels.razors_enabled(ONEPASS_ON.with_(VT_ATTN_ONEPASS=False))
    monkeypatch.setattr(kernels.paged_decode_attention, "arms", (kernels.paged_decode_attention.arms[0],))
    cpu_arm(monkeypatch, kernels.FP32_PROBS_RAZOR, "cpu_online_2")
    args = argparse.Namespace(razor_from_arms=True)
    both = {("paged_decode_attention", "cpu_online"): 1, ("paged_decode_attention", "cpu_online_2"): 1}
    with pytest.raises(ValueError, match="different razor settings"):
        from lab.gates.cli import razor_of_run

        razor_of_run(args, both)  # type: ignore[arg-type]
