"""lab/ci.py: the phase table, its readers (verdicts from JSON, never from logs), the runner's limits and the
flip protocol's argument checks; one phase run end to end with a stand-in gate that writes its JSON."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest

from lab import ci

ROOT = Path(__file__).resolve().parents[2]


def ctx(tmp_path: Path, flip: ci.Flip | None = None) -> ci.Context:
    return ci.Context(tmp_path / "out", flip)


def steps(phase: str, c: ci.Context) -> dict[str, ci.Step]:
    return {s.name: s for s in ci.PHASES[phase].steps(c)}


def finished(tmp_path: Path, rc: int = 0, before: frozenset[str] = frozenset()) -> ci.Finished:
    return ci.Finished(rc, tmp_path / "step.log", before)


# --- the table -------------------------------------------------------------------------------------------------------


def test_the_table_has_the_six_phases_and_calib() -> None:
    assert list(ci.PHASES) == ["gates", "bench", "serve", "reach", "flip", "ncu", "calib", "perf", "teeth"]


def test_gates_phase_builds_then_gates_each_model_and_memchecks_it(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    s = steps("gates", c)
    assert list(s) == [
        "build", "make-models", "tokens-dense-graph", "tokens-dense-eager", "tokens-moe", "tokens-moe-kernels",
        "neartie-dense-fast", "neartie-moe-fast", "neartie-d128", "memcheck-dense", "memcheck-moe", "runner-gpu-tests",
    ]  # fmt: skip
    out = c.out
    assert s["build"].argv == (sys.executable, "-m", "engine.cuda.build", "--json", f"{out}/results/build.json")
    eager = s["tokens-dense-eager"]
    assert eager.argv == (sys.executable, "-m", "lab", "gate", "tokens", "--device", "cuda", "--dtype", "bfloat16",
                          "--json")  # fmt: skip
    assert eager.env == {"VT_EAGER": "1"} and eager.stdout == out / "results" / "tokens-dense-eager.json"
    assert s["neartie-moe-fast"].env == ci.FAST
    assert s["neartie-moe-fast"].argv[-3:] == ("--model", f"{out}/models/moe", "--json")
    assert s["neartie-d128"].argv[-5:] == (f"{out}/models/d128", "--max-new-tokens", "300", "--fp32-arbiter", "--json")
    memcheck = s["memcheck-moe"]
    assert memcheck.argv[:7] == ("compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "9", "--log-file",
                                 f"{out}/logs/memcheck-moe.sanitizer.log")  # fmt: skip
    assert memcheck.argv[7:] == (sys.executable, "-m", "engine", "generate", "--device", "cuda", "--dtype", "bfloat16",
                                 "--max-new-tokens", "4", "--model", f"{out}/models/moe", "--json")  # fmt: skip
    assert memcheck.env == {"VT_MOE_KERNELS": "1"}
    assert "--junitxml" in s["runner-gpu-tests"].argv and "gpu" in s["runner-gpu-tests"].argv


def test_benchmarks_write_their_ledger_records_into_out(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    for phase in ("bench", "serve"):
        for step in steps(phase, c).values():
            if step.argv[2:4] == ("lab", "bench"):
                assert step.argv[-2:] == ("--ledger", str(c.ledger)), step.name
    ab = steps("bench", c)["ab-splitkv-swap"]  # a by-name arm: no flag to set, named against the default order
    assert ab.env == {} and ab.argv[4:8] == ("ab", "--arm", "paged_decode_attention/splitkv_swap", "--shape")


def test_every_step_fits_its_phase_budget_and_calib_its_eight_minutes(tmp_path: Path) -> None:
    c = ctx(tmp_path, ci.parse_flip("VT_GEMV=1"))
    for name, phase in ci.PHASES.items():
        limits = [s.limit for s in phase.steps(c)]
        assert limits and max(limits) <= phase.budget, name
    assert sum(s.limit for s in ci.PHASES["calib"].steps(c)) <= ci.PHASES["calib"].budget <= 490
    assert ci.PHASES["gates"].budget <= 480  # with the build: well inside the device's 9 minutes


def test_calib_runs_each_model_through_the_razor_once_per_peer(tmp_path: Path) -> None:
    s = steps("calib", ctx(tmp_path))
    assert list(s) == ["build", "calib-make", "calib-jit", "calib-d128-g4", "calib-d128", "calib-long"]
    argv = s["calib-long"].argv
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--attn-peer"] == list(ci.CALIB_PEERS)
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--oracle-attn"] == ["eager", "sdpa"]
    assert argv[argv.index("--prompt-lens") + 1].startswith("15")  # the long model's own 1500+-token prompts
    assert s["calib-long"].env == {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"}


def test_calib_judges_by_a_named_razor_setting_against_its_own_oracle(tmp_path: Path) -> None:
    s = steps("calib", ci.Context(tmp_path / "out", None, "fp32-probs"))
    argv = s["calib-d128"].argv
    assert argv[argv.index("--razor-setting") + 1] == "fp32-probs"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--oracle-attn"] == ["online"]
    # the setting's own arm runs beside the production kernels, its limit from theirs
    assert argv[argv.index("--require-arm") + 1] == "VT_ATTN_ONEPASS"
    assert argv[argv.index("--logprob-limit-from-peers") + 1] == str(ci.CALIB_MARGIN)
    assert s["calib-d128"].env["VT_ATTN_ONEPASS"] == "1"
    assert "--require-arm" not in steps("calib", ctx(tmp_path))["calib-d128"].argv  # the eager calibration: no arm


def test_perf_measures_the_two_tables_then_reports_them_from_the_records(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    s = steps("perf", c)
    assert list(s) == [
        "build",
        "peers-warm",
        "perf-attn",
        "perf-decode-b1",
        "perf-decode-b8",
        "perf-decode-b32",
        "perf-report",
    ]
    # the warm-up fills the transformers peer's compile caches too (a fresh machine's first compile outran a step's
    # limit), beside FlashInfer's modules, and writes no record
    warm = s["peers-warm"].argv[2]
    compile(warm, "peers-warm", "exec")
    assert "'--hf-compiled'" in warm and "--ledger" not in warm
    assert all(s[f"perf-decode-b{b}"].limit >= 120 for b in (1, 8, 32))
    attn = s["perf-attn"].argv
    assert attn[attn.index("--arms") + 1] == "default,flashinfer-tc,flashinfer,sdpa-cudnn,sdpa-flash"
    assert attn[-2:] == ("--ledger", str(c.ledger)) and "peers" in attn
    assert s["perf-decode-b8"].argv[3:] == (
        *"bench decode --no-oracle --hf-compiled --batch 8 --steps 32 --ledger".split(),
        str(c.ledger),
    )
    assert s["perf-report"].argv[3:] == (
        *"report perf --ledger".split(),
        str(c.ledger),
        "--json",
        str(c.result("perf-report")),
    )
    # the report's JSON is its verdict: a row without a clean record fails the step
    report = c.result("perf-report")
    report.parent.mkdir(parents=True)
    report.write_text(json.dumps({"passed": False, "examined": 4, "summary": "INCOMPLETE: report perf: 30 rows"}))
    assert s["perf-report"].reader(finished(tmp_path, rc=1)) == ci.Verdict("fail", "INCOMPLETE: report perf: 30 rows")


def test_teeth_runs_the_seeded_bugs_of_the_setting_four_at_once_on_the_gpu(tmp_path: Path) -> None:
    s = steps("teeth", ctx(tmp_path))
    assert ci.PHASES["teeth"].jobs == 4 and list(s) == ["teeth-0", "teeth-1", "teeth-2", "teeth-3"]
    argv = s["teeth-3"].argv
    assert argv[3:] == (
        *"gate teeth --seeds 10 --device cuda --razor fp32-probs --bugs".split(),
        "good-linear-fp32-accumulate",
        "good-online-split",
        "--json",
        str(ctx(tmp_path).result("teeth-3")),
        "--ledger",
        str(ctx(tmp_path).ledger),  # each step's catch rates as a record
    )
    named = steps("teeth", ci.Context(tmp_path / "out", None, "fp32-probs"))
    assert named["teeth-2"].argv[-6:-4] == ("--bugs", "probs-rounded")
    from lab.gates.teeth import seeded_for

    for razor, sets in ci.TEETH_SETS.items():  # every seeded bug and twin of the setting, once
        assert sorted(" ".join(sets).split()) == sorted(s.name for s in seeded_for(razor))


# --- the flip protocol -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flip", "models", "lens", "message"),
    [
        ("", "", "", "set FLIP (or --flip) to the flag settings under test"),
        ("VT_GEMV=1 gemv", "", "", "FLIP entry 'gemv' is not VT_NAME=VALUE"),
        ("vt_gemv=1", "", "", "FLIP entry 'vt_gemv=1' is not VT_NAME=VALUE"),
        ("VT_GEMV=1", "dense llama", "", "FLIP_MODELS entry 'llama' is not dense, d128, moe, d128-g4 or long"),
        ("VT_GEMV=1", "", "1,x", "FLIP_PROMPT_LENS '1,x' is not comma-separated lengths"),
    ],
)
def test_flip_refuses_missing_or_malformed_settings_before_any_phase_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flip: str, models: str, lens: str, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ci.parse_flip(flip, models, "", lens)
    argv = [
        "gates",
        "flip",
        "--out",
        str(tmp_path),
        "--flip",
        flip,
        "--flip-models",
        models,
        "--flip-prompt-lens",
        lens,
    ]
    assert ci.main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "logs").exists()  # nothing ran, not even the gates phase


def test_flip_runs_every_gate_with_the_flags_set_and_requires_their_arms(tmp_path: Path) -> None:
    c = ctx(tmp_path, ci.parse_flip("VT_ATTN_ONEPASS=1 VT_GEMV=1 VT_EAGER=0", filters="attn/ kv_store/"))
    s = steps("flip", c)
    flags = {"VT_ATTN_ONEPASS": "1", "VT_GEMV": "1", "VT_EAGER": "0"}
    assert s["flip-kernels"].argv[-6:] == ("--filter", "attn/", "--filter", "kv_store/", "--ledger",
                                           f"{c.ledger}/flip-kernels.json")  # fmt: skip
    require = ("--require-arm", "VT_ATTN_ONEPASS", "--require-arm", "VT_GEMV")  # a flag set off owes no arm
    for m in ("dense", "d128", "moe"):
        for name in (f"flip-neartie-{m}", f"flip-tokens-{m}-graph", f"flip-tokens-{m}-eager"):
            assert s[name].argv[-5:-1] == require, name
            want = {**flags, "VT_EAGER": "1"} if name.endswith("eager") else flags
            if m == "d128":  # beside the production peers (the test below)
                want = {**want, "TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"}
            assert s[name].env == want, name
        assert s[f"flip-distributional-{m}"].env == flags and "--require-arm" not in s[f"flip-distributional-{m}"].argv
    assert "--fp32-arbiter" in s["flip-neartie-d128"].argv and "--fp32-arbiter" not in s["flip-neartie-dense"].argv
    assert s["flip-neartie-d128-noflags"].env == {} and "--require-arm" not in s["flip-neartie-d128-noflags"].argv
    assert s["flip-regen-dense"].env == flags


def test_a_decode_attention_flip_gates_the_attention_models_and_prompt_lens_spare_long(tmp_path: Path) -> None:
    flip = ci.parse_flip("VT_ATTN_ONEPASS=1 VT_ATTN_TILED=1", prompt_lens="1,6,13")
    assert flip.models == ("d128", "d128-g4", "long")
    s = steps("flip", ctx(tmp_path, flip))
    assert not any("moe" in n or "dense-" in n for n in s if n != "flip-regen-dense")
    assert s["flip-neartie-d128-g4"].argv[s["flip-neartie-d128-g4"].argv.index("--prompt-lens") + 1] == "1,6,13"
    long = s["flip-neartie-long"].argv
    assert long[long.index("--prompt-lens") + 1].startswith("15") and "--fp32-arbiter" in long
    assert ci.parse_flip("VT_ATTN_ONEPASS=1 VT_GEMV=1").models == ("dense", "d128", "moe")
    assert ci.parse_flip("VT_GEMV=1", models="moe").models == ("moe",)


def test_a_razor_settings_own_arm_flips_beside_the_production_kernels_under_their_limit(tmp_path: Path) -> None:
    c = ctx(tmp_path, ci.parse_flip("VT_ATTN_ONEPASS=1", models="d128 d128-g4 long dense"))
    s = steps("flip", c)
    assert s["flip-jit"].barrier and list(s).index("flip-jit") < list(s).index("flip-neartie-d128")
    for m in ("d128", "d128-g4", "long"):
        argv = s[f"flip-neartie-{m}"].argv
        peers = [argv[i + 1] for i, a in enumerate(argv) if a == "--attn-peer"]
        assert peers == ["engine", "sdpa-cudnn", "flashinfer-tc", "flashinfer"], m
        assert argv[argv.index("--logprob-limit-from-peers") + 1] == str(ci.CALIB_MARGIN)
        assert argv[argv.index("--ledger") + 1] == str(c.ledger) and argv[-3:-1] == ("--require-arm", "VT_ATTN_ONEPASS")
        assert s[f"flip-neartie-{m}"].env["VT_ATTN_ONEPASS"] == "1"
        tokens = s[f"flip-tokens-{m}-graph"].argv
        assert "--divergence-beside-peers" in tokens and "--logprob-limit-from-peers" not in tokens
        assert s[f"flip-tokens-{m}-eager"].env["VT_EAGER"] == "1" and "--attn-peer" in s[f"flip-tokens-{m}-eager"].argv
    # the peers take head_dim 128 only: the dense model's run is the engine's alone, and a flip of another flag has none
    assert "--attn-peer" not in s["flip-neartie-dense"].argv
    # another flag's flip: the default path takes the one-pass arm, so its calibrated models' token gates (the flag
    # off too) measure divergence beside the peers; its near-tie gates keep their own limit
    other = steps("flip", ctx(tmp_path, ci.parse_flip("VT_GEMM_SMALL=1", models="d128 dense")))
    assert other["flip-jit"].barrier and not any("--attn-peer" in other[n].argv for n in other if "neartie" in n)
    for name in ("flip-tokens-d128-graph", "flip-tokens-d128-eager", "flip-tokens-d128-noflags"):
        assert "--divergence-beside-peers" in other[name].argv and "--attn-peer" in other[name].argv, name
        assert other[name].env["TORCH_CUDNN_SDPA_AVOID_RECOMPILE"] == "1", name
    assert "--attn-peer" not in other["flip-tokens-dense-graph"].argv
    off = ctx(tmp_path, ci.parse_flip("VT_GEMM_SMALL=1", models="d128"))
    with mock.patch.object(ci, "default_calibrated", return_value=False):  # the one-pass arm off by default
        plain = steps("flip", off)
    assert "flip-jit" not in plain and not any("--attn-peer" in st.argv for st in plain.values())


def test_a_non_bitwise_flip_holds_the_engines_graphed_ids_to_its_eager_ids(tmp_path: Path) -> None:
    c = ctx(tmp_path, ci.parse_flip("VT_ATTN_ONEPASS=1", models="d128-g4"))

    def tokens(mode: str, digests: list[str]) -> None:
        rows = [{"peer/dtype/oracle": "sdpa-cudnn/bfloat16", "prompt": 0, "ours_digest": "peer"}]
        rows += [{"peer/dtype/oracle": "engine/bfloat16", "prompt": i, "ours_digest": d} for i, d in enumerate(digests)]
        path = c.result(f"flip-tokens-d128-g4-{mode}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"verdict": "PASS", "table": rows}))

    tokens("graph", ["a", "b"])
    tokens("eager", ["a", "b"])
    verdicts = dict(ci.flip_ran(c))
    assert verdicts["flip-tokens-d128-g4-identity"].status == "pass"
    tokens("eager", ["a", "c"])  # the seeded defect: prompt 1's eager ids differ
    v = dict(ci.flip_ran(c))["flip-tokens-d128-g4-identity"]
    assert (v.status, v.detail) == ("fail", "graphed and eager ids differ on prompts [1]")
    c.result("flip-tokens-d128-g4-graph").write_text(json.dumps({"verdict": "FAIL", "table": []}))
    assert dict(ci.flip_ran(c))["flip-tokens-d128-g4-identity"].status == "fail"  # nothing compared: no pass
    assert not any("identity" in n for n, _ in ci.flip_ran(ctx(tmp_path, ci.parse_flip("VT_GEMV=1", models="moe"))))


@pytest.mark.parametrize(("na_on", "verdict"), [(("dense", "moe"), "fail"), (("moe",), "pass")])
def test_flip_fails_a_flag_whose_arm_ran_on_no_model(tmp_path: Path, na_on: tuple[str, ...], verdict: str) -> None:
    c = ctx(tmp_path, ci.parse_flip("VT_GEMV=1 VT_EAGER=0", models="dense moe"))
    for m in ("dense", "moe"):
        path = c.result(f"flip-neartie-{m}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"verdict": "PASS", "arms_not_applicable": ["VT_GEMV"] if m in na_on else []}))
    ((name, v),) = ci.flip_ran(c)  # a flag set off owes no arm
    assert (name, v.status) == ("flip-ran-VT_GEMV", verdict)


# --- readers -----------------------------------------------------------------------------------------------------


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_gate_json_passes_only_a_pass_with_its_arms_and_fails_when_nothing_was_written(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    read = ci.gate_json(path)
    assert read(finished(tmp_path)) == ci.Verdict("fail", "examined nothing: no JSON at g.json (exit 0; step.log)")
    write(path, "a warning line\n" + json.dumps({"gate": "tokens", "verdict": "PASS", "summary": "64/64"}))
    assert read(finished(tmp_path)) == ci.Verdict("pass", "tokens: PASS: 64/64")
    assert read(finished(tmp_path, rc=1)).status == "fail"
    write(path, {"gate": "neartie", "verdict": "PASS", "summary": "s", "arms_missing": ["VT_GEMV"]})
    assert read(finished(tmp_path)) == ci.Verdict("fail", "neartie: PASS: s; no arm gated by VT_GEMV ran")
    write(path, {"gate": "distributional", "verdict": "REFUSED", "summary": "the oracle is deterministic"})
    assert read(finished(tmp_path, rc=1)).status == "fail"
    refused = ci.gate_json(path, refusal_is_na=True)(finished(tmp_path, rc=1))
    assert refused == ci.Verdict("skip", "n/a: distributional: REFUSED: the oracle is deterministic")


def test_gate_json_reads_what_the_gates_report_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine import kernels
    from lab.gates.cli import report  # the real printer of `gate tokens|neartie|distributional|regen --json`
    from lab.gates.result import GateResult

    kernels.reset_counts()  # as a gate does first: an engine run by an earlier test would have called linear ops
    path = tmp_path / "g.json"
    result = GateResult("tokens", "PASS", "4/4 prompts token-exact")
    assert report(result, as_json=True, require=["VT_GEMV"]) == 0  # no linear op called here: n/a, left to others
    path.write_text(capsys.readouterr().out)
    assert ci.gate_json(path)(finished(tmp_path)) == ci.Verdict(
        "pass", "tokens: PASS: 4/4 prompts token-exact; n/a here: VT_GEMV"
    )
    assert report(result, as_json=True, require=["VT_NO_SUCH_FLAG"]) == 1  # gates no arm: none of its arms ran
    path.write_text(capsys.readouterr().out)
    assert ci.gate_json(path)(finished(tmp_path, rc=1)) == ci.Verdict(
        "fail", "tokens: PASS: 4/4 prompts token-exact; no arm gated by VT_NO_SUCH_FLAG ran"
    )


def test_junit_counts_the_tests_that_ran(tmp_path: Path) -> None:
    path = tmp_path / "t.xml"
    read = ci.junit(path)
    assert read(finished(tmp_path)).detail.startswith("examined nothing: no JUnit XML")
    suite = '<testsuites><testsuite tests="{}" failures="{}" errors="0" skipped="{}"/></testsuites>'
    write(path, suite.format(3, 0, 1))
    assert read(finished(tmp_path)) == ci.Verdict("pass", "2 passed, 0 failed, 0 errors, 1 skipped")
    write(path, suite.format(3, 1, 0))
    assert read(finished(tmp_path, rc=1)).status == "fail"
    write(path, suite.format(2, 0, 2))  # every test skipped (no GPU): not a pass
    assert read(finished(tmp_path)) == ci.Verdict("fail", "examined nothing: 0 passed, 0 failed, 0 errors, 2 skipped")


def test_kernel_records_need_every_case_within_tolerance(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    read = ci.kernels_record(path)

    def record(cases: int, within: int) -> dict[str, object]:
        figures = [{"name": "cases", "value": cases}, {"name": "cases_within_tolerance", "value": within}]
        return {"summary": f"{within}/{cases}", "figures": figures, "comparator_selftest": {"seeded": 3, "caught": 3}}

    write(path, record(5, 5))
    assert read(finished(tmp_path)) == ci.Verdict("pass", "5/5")
    write(path, record(5, 4))
    assert read(finished(tmp_path, rc=1)).status == "fail"
    write(path, record(0, 0))
    assert read(finished(tmp_path)) == ci.Verdict("fail", "examined nothing: 0/0")


def test_ledger_records_count_only_the_new_ones(tmp_path: Path) -> None:
    read = ci.ledger_records(tmp_path)
    write(tmp_path / "old.json", {"summary": "an earlier run"})
    before = frozenset({"old.json"})
    assert read(finished(tmp_path, before=before)).detail.startswith("examined nothing: no new ledger record")
    write(tmp_path / "new.json", {"summary": "ab: 1.20x"})
    assert read(finished(tmp_path, before=before)) == ci.Verdict("pass", "1 record(s), new.json: ab: 1.20x")


def test_report_and_memcheck_readers(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write(path, {"passed": True, "examined": 0, "summary": "0 sources"})
    assert ci.report_json(path)(finished(tmp_path)) == ci.Verdict("fail", "examined nothing: 0 sources")
    write(path, {"passed": True, "examined": 11, "summary": "11 sources"})
    assert ci.report_json(path)(finished(tmp_path)) == ci.Verdict("pass", "11 sources")
    memcheck = ci.generated(path, tmp_path / "m.sanitizer.log")
    assert memcheck(finished(tmp_path, rc=9)) == ci.Verdict("fail", "memcheck reported errors (m.sanitizer.log)")
    write(path, {"tokens": [[1, 2, 3, 4]]})
    assert memcheck(finished(tmp_path)) == ci.Verdict("pass", "4 tokens, memcheck exit 0")


# --- running -----------------------------------------------------------------------------------------------------

# stands in for a gate: writes its JSON object to stdout (the step's result file), a line to stderr (its log)
STAND_IN = """import json, sys
verdict = sys.argv[1]
print('stand-in gate ran', file=sys.stderr)
if verdict != 'none':
    print(json.dumps({'gate': 'tokens', 'verdict': verdict, 'summary': 'stand-in'}))
sys.exit(0 if verdict == 'PASS' else 1)
"""


def stand_in(c: ci.Context, name: str, verdict: str) -> ci.Step:
    out = c.result(name)
    return ci.Step(name, 30, (sys.executable, "-c", STAND_IN, verdict), ci.gate_json(out), {}, stdout=out)


def test_a_phase_runs_end_to_end_and_its_table_comes_last(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c = ctx(tmp_path)

    def table(c: ci.Context) -> list[ci.Step]:
        return [stand_in(c, "gate-pass", "PASS"), stand_in(c, "gate-fail", "FAIL"), stand_in(c, "gate-silent", "none")]

    assert ci.run([ci.Phase("stand-in", 120, "three stand-in gates", table)], c) == 1
    verdicts = json.loads((c.out / "ci-verdicts.json").read_text())
    assert verdicts["passed"] is False
    got = {s["step"]: (s["status"], s["detail"], s["rc"]) for s in verdicts["steps"]}
    assert got == {
        "gate-pass": ("pass", "tokens: PASS: stand-in", 0),
        "gate-fail": ("fail", "tokens: FAIL: stand-in", 1),
        "gate-silent": ("fail", "examined nothing: no JSON at gate-silent.json (exit 1; gate-silent.log)", 1),
    }
    assert (c.out / "logs" / "gate-pass.log").read_text() == "stand-in gate ran\n"
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1] == "ci: FAIL: 3 steps, 2 failed"
    assert printed[-4].startswith("gate-pass    pass")
    assert (c.out / "ledger.tgz").is_file()


def test_a_step_past_its_limit_is_ended_with_its_children(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    step = ci.Step("sleeper", 60, (sys.executable, "-c", code), ci.gate_json(c.result("sleeper")))
    verdict, rc, _ = ci.run_step(step, 2, c)
    assert verdict == ci.Verdict("fail", "timed out after 2s (sleeper.log)") and rc is None
    # the child went with its process group: the signal is sent, its death is the kernel's to finish
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def alive(pid: int) -> bool:
    """Running, not a zombie left for a reaper that is not ours (its parent, the step, was killed)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_phase_starts_no_step_past_its_budget_and_runs_the_build_once(tmp_path: Path) -> None:
    c = ctx(tmp_path)
    done: dict[str, ci.Outcome] = {}
    tight = ci.Phase("tight", ci.MIN_LEFT - 1, "no time", lambda c: [stand_in(c, "gate-pass", "PASS")])
    (outcome,) = ci.run_phase(tight, c, done)
    assert outcome.verdict == ci.Verdict("fail", f"not run: past the {ci.MIN_LEFT - 1}s budget")
    roomy = ci.Phase("roomy", 60, "a build", lambda c: [stand_in(c, "build", "PASS")])
    assert [o.step for o in ci.run_phase(roomy, c, done)] == ["build"]
    assert ci.run_phase(roomy, c, done) == []  # a step already run in this invocation is not run again


# stands in for a gate that passes only when its twin runs at the same time and the barrier step ran before both;
# alone, it waits for its twin until its step's limit ends it
MEET = """import json, os, sys, time
mine, theirs, barrier = sys.argv[1:4]
open(mine, 'w').close()
while not os.path.exists(theirs):
    time.sleep(0.1)
met = os.path.exists(barrier)
print(json.dumps({'gate': 'meet', 'verdict': 'PASS' if met else 'FAIL', 'summary': 'met after the barrier'}))
"""


def meeting(limit: int) -> Callable[[ci.Context], list[ci.Step]]:
    def table(c: ci.Context) -> list[ci.Step]:
        c.out.mkdir(parents=True, exist_ok=True)
        a, b, barrier = (str(c.out / n) for n in ("a", "b", "barrier"))
        code = f"import time; time.sleep(1); open({barrier!r}, 'w').close()"
        first = ci.Step("models", 30, (sys.executable, "-c", code), ci.wrote(Path(barrier)), barrier=True)
        argv = [
            (n, (sys.executable, "-c", MEET, mine, theirs, barrier))
            for n, mine, theirs in (("meet-a", a, b), ("meet-b", b, a))
        ]
        return [first, *(ci.Step(n, limit, cmd, ci.gate_json(c.result(n)), stdout=c.result(n)) for n, cmd in argv)]

    return table


def test_steps_run_side_by_side_after_their_barrier(tmp_path: Path) -> None:
    side_by_side = ci.Phase("meet", 300, "two gates that meet", meeting(limit=120), jobs=2)
    outcomes = ci.run_phase(side_by_side, ctx(tmp_path), {})
    assert [o.verdict for o in outcomes] == [
        ci.Verdict("pass", "wrote 1 file(s), exit 0"),
        ci.Verdict("pass", "meet: PASS: met after the barrier"),
        ci.Verdict("pass", "meet: PASS: met after the barrier"),
    ]
    # --step picks steps; the barrier step they load after runs too
    picked = ci.run_phase(side_by_side, ctx(tmp_path / "picked"), {}, ["meet-*"])
    assert [(o.step, o.verdict.status) for o in picked] == [("models", "pass"), ("meet-a", "pass"), ("meet-b", "pass")]
    assert ci.run_phase(side_by_side, ctx(tmp_path / "none"), {}, ["no-such-step"])[0].step == "models"


def test_one_at_a_time_the_first_gate_waits_alone(tmp_path: Path) -> None:
    one = ci.Phase("meet", 300, "two gates that meet", meeting(limit=ci.MIN_LEFT), jobs=1)
    outcomes = ci.run_phase(one, ctx(tmp_path), {})
    assert [(o.step, o.verdict.status) for o in outcomes] == [
        ("models", "pass"),
        ("meet-a", "fail"),
        ("meet-b", "pass"),
    ]
    assert outcomes[1].verdict.detail == f"timed out after {ci.MIN_LEFT}s (meet-a.log)"


def test_a_phase_needing_a_missing_program_is_skipped_with_the_reason(tmp_path: Path) -> None:
    phase = ci.Phase("ncu-like", 60, "profiles", lambda c: [], needs="no-such-program-here")
    (outcome,) = ci.run_phase(phase, ctx(tmp_path), {})
    assert outcome.verdict == ci.Verdict("skip", "no-such-program-here not found on PATH")


# --- the command line ------------------------------------------------------------------------------------------


def test_list_prints_the_steps_and_unknown_phases_name_the_docs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ci.main(["--list", "gates", "--out", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert (
        "gates (budget 480s, 4 at once)" in listed
        and "  memcheck-moe 150s VT_MOE_KERNELS=1 compute-sanitizer" in listed
    )
    assert ci.main(["quant-flip", "--out", str(tmp_path)]) == 2
    assert "unknown phase quant-flip" in capsys.readouterr().err and "docs/CI.md" in ci.__doc__


def test_ci_gpu_sh_hands_its_arguments_to_lab_ci(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(ROOT / "ci" / "gpu.sh"), "--list", "serve"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "serve (budget 900s, 1 at once)" in done.stdout and f"--plot {tmp_path}/throughput.svg" in done.stdout


def test_the_ncu_phase_profiles_arms_its_workloads_have() -> None:
    """Each ncu run names an arm or peer of its workload and a shape it parses (a renamed arm fails here, not on the
    device), and the attention runs take the default arm of today (the one-pass arm since a9628ab)."""
    from lab.bench.workloads import WORKLOADS, parse_shape

    for name, workload, arm, shape in ci.NCU_RUNS:
        work = WORKLOADS[workload]
        assert arm in {*work.arm_names, *work.peers}, f"{name}: {arm} is not an arm of {workload}"
        parse_shape(shape, work.defaults)
    engine_attn = {
        arm for _, workload, arm, _ in ci.NCU_RUNS if workload == "attn-decode" and arm in WORKLOADS[workload].arm_names
    }
    assert engine_attn == {"tiled-onepass"}
