"""`python -m lab bench step_arms`: its settings parser, and on the CPU a run that fails because no arm ran."""

from __future__ import annotations

import pytest

from lab.bench import step_arms


def test_settings_parse_as_flag_values_and_a_bad_one_names_itself():
    assert step_arms.parse_settings("VT_NORM_GEMV=1,VT_GEMV_PDL=0") == {"VT_NORM_GEMV": True, "VT_GEMV_PDL": False}
    with pytest.raises(ValueError, match=r"--flags 'VT_NOPE=1': expected VT_NAME=VALUE"):
        step_arms.parse_settings("VT_NOPE=1")
    with pytest.raises(ValueError, match=r"VT_NORM_GEMV='maybe'"):
        step_arms.parse_settings("VT_NORM_GEMV=maybe")


def test_a_flag_whose_arm_never_ran_fails_even_with_equal_tokens(capsys):
    # on the CPU every op runs its reference: the tokens agree, and the fused arm provably did not run
    rc = step_arms.main(["--tiny", "--flags", "VT_QKV_ROPE_STORE=1", "--context", "6", "--steps", "2"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "tokens equal: 1 of 1 sequences" in out
    assert "arms of VT_QKV_ROPE_STORE: 0 calls" in out
    assert out.splitlines()[-1] == "step-arms: FAIL (no arm ran: VT_QKV_ROPE_STORE)"


def test_require_names_flags_set_on_and_exempts_the_others(capsys):
    assert step_arms.main(["--tiny", "--flags", "VT_NORM_GEMV=1", "--require", "VT_GEMV_PDL"]) == 2
    assert "--require VT_GEMV_PDL: not set on by --flags" in capsys.readouterr().err
    rc = step_arms.main(
        [
            "--tiny",
            "--flags",
            "VT_QKV_ROPE_STORE=1,VT_NORM_GEMV=1",
            "--require",
            "VT_NORM_GEMV",
            "--steps",
            "2",
            "--context",
            "6",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1 and "arms of VT_QKV_ROPE_STORE: 0 calls (not required)" in out
    assert out.splitlines()[-1] == "step-arms: FAIL (no arm ran: VT_NORM_GEMV)"


@pytest.mark.parametrize("name", ["norm-gemv", "glu-gemv", "norm-glu-gemv", "qkv-rope-store"])
def test_each_fused_launch_workload_is_registered_and_runs_its_reference_on_the_cpu(name):
    import torch

    from engine.flags import FlagSnapshot
    from lab.bench.workloads import WORKLOADS

    work = WORKLOADS[name]  # `bench ab --workload NAME` finds it
    shape = {k: (min(v, 64) if k in ("n", "k") else v) for k, v in work.defaults.items()}
    out = work.run(FlagSnapshot.defaults(), *work.make(shape, torch.device("cpu"), torch.float32, 0))
    assert out.dtype == torch.float32 and out.numel() > 0
    assert work.bytes_moved(shape, torch.float32) > 0
