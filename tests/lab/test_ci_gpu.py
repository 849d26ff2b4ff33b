"""ci/gpu.sh: its syntax, and the flip phase's wiring run with a stand-in python that records each call."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "gpu.sh"
# stands in for python: prints its arguments and the flags it sees; the distributional gate refuses; a gate
# requiring VT_GEMV on a model named in NA_MODELS says the flag is not applicable there
FAKE_PY = """#!/usr/bin/env bash
case " $* " in *"GATE_MODELS as G"*) echo 1537,1542; exit 0 ;; esac  # the long gate model's prompt lengths
echo "argv: $*"
echo "flags: VT_ATTN_SPLITKV=${VT_ATTN_SPLITKV-unset} VT_GEMV=${VT_GEMV-unset} VT_EAGER=${VT_EAGER-unset}"
printf 'arms (calls; a replayed CUDA graph is not counted again):\n  linear/gemv 7 [VT_GEMV]\n'
model=dense
case " $* " in *tiny-qwen3-d128*) model=d128 ;; *tiny-qwen3-moe*) model=moe ;; esac
case " ${NA_MODELS:-} | $* " in
  *" $model "*"|"*" --require-arm VT_GEMV"*) echo "n/a: VT_GEMV: this model never calls its ops (linear)" ;;
esac
case " $* " in *" distributional "*) echo "distributional: REFUSED: the oracle is deterministic"; exit 1 ;; esac
exit 0
"""

pytestmark = pytest.mark.skipif(
    shutil.which("bash") is None or shutil.which("timeout") is None,
    reason="bash and coreutils timeout are needed to run ci/gpu.sh",
)


def run_gpu_sh(tmp_path: Path, phases: list[str], **env: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PY)
    fake.chmod(0o755)
    out = tmp_path / "out"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VT_", "FLIP"))}  # only what the test sets
    full = {**clean, "OUT": str(out), "PYTHON": str(fake), "VT_CUDA_CACHE": str(tmp_path / "cache"), **env}
    return subprocess.run(["bash", str(SCRIPT), *phases], env=full, capture_output=True, text=True, timeout=120)


def log(tmp_path: Path, step: str) -> str:
    return (tmp_path / "out" / "logs" / f"{step}.log").read_text()


def test_script_parses() -> None:
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True).returncode == 0


@pytest.mark.parametrize(
    ("flip", "models", "message"),
    [
        ("", "", "set FLIP to the flag settings under test"),
        ("VT_GEMV=1 gemv", "", "FLIP entry 'gemv' is not VT_NAME=VALUE"),
        ("VT_GEMV=1", "dense llama", "FLIP_MODELS entry 'llama' is not dense, d128, moe, d128-g4 or long"),
    ],
)
def test_flip_refuses_missing_or_malformed_settings(tmp_path: Path, flip: str, models: str, message: str) -> None:
    done = run_gpu_sh(tmp_path, ["gates", "flip"], FLIP=flip, FLIP_MODELS=models)
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "out" / "logs").exists()  # nothing ran, not even the gates phase


def test_flip_runs_every_gate_with_the_flags_set(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["flip"], FLIP="VT_ATTN_SPLITKV=1 VT_GEMV=1", FLIP_FILTER="attn/ kv_store/")
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    models = {
        "dense": "",
        "d128": "--model /tmp/tiny-qwen3-d128 --max-new-tokens 300",
        "moe": "--model /tmp/tiny-qwen3-moe",
    }
    expected = {
        "flip-kernels": f"-m lab gate kernels --filter attn/ --filter kv_store/ --ledger {out}/ledger/"
        "flip-kernels.json",
        "flip-regen-dense": f"-m lab gate regen --device cuda --dtype bfloat16 --golden "
        f"{out}/goldens/tiny-qwen3-bfloat16-cuda.json --ledger-dir {out}/ledger",
    }
    require = " --require-arm VT_ATTN_SPLITKV --require-arm VT_GEMV"  # each flag set on must show its arm
    for m, extra in models.items():
        for gate, step in (
            ("neartie", f"flip-neartie-{m}"),
            ("distributional", f"flip-distributional-{m}"),
            ("tokens", f"flip-tokens-{m}-graph"),
            ("tokens", f"flip-tokens-{m}-eager"),
        ):
            expected[step] = f"-m lab gate {gate} --device cuda --dtype bfloat16 {extra}".rstrip()
            if gate == "neartie" and m == "d128":  # 336-position contexts: the fp32 twin judges again
                expected[step] += " --fp32-arbiter"
            if gate != "distributional":
                expected[step] += require
    for step, args in expected.items():
        text = log(tmp_path, step)
        assert f"argv: {args}\n" in text, (step, text)
        eager = "1" if step.endswith("-eager") else "unset"
        assert f"flags: VT_ATTN_SPLITKV=1 VT_GEMV=1 VT_EAGER={eager}\n" in text, (step, text)
    baseline = log(tmp_path, "flip-tokens-d128-noflags")
    assert f"argv: {expected['flip-tokens-d128-graph'].removesuffix(require)}\n" in baseline
    neartie_baseline = log(tmp_path, "flip-neartie-d128-noflags")
    assert f"argv: {expected['flip-neartie-d128'].removesuffix(require)}\n" in neartie_baseline
    # every step prints the arms its gate ran, after its log's tail
    assert done.stdout.count("\n     linear/gemv 7 [VT_GEMV]\n") == len(expected) + 4  # build, flip-models, 2 noflags
    assert "flags: VT_ATTN_SPLITKV=unset VT_GEMV=unset VT_EAGER=unset\n" in baseline
    assert "flags: VT_ATTN_SPLITKV=unset VT_GEMV=unset VT_EAGER=unset\n" in neartie_baseline
    table = done.stdout[done.stdout.rindex("step ") :]
    assert "flip-distributional-moe" in table and "n/a: oracle deterministic (rc=1" in table
    assert "flip-tokens-d128-eager       rc=0" in table


@pytest.mark.parametrize(
    ("na_models", "verdict"),
    [("dense d128 moe", "rc=1 its arm ran on no model"), ("d128 moe", "rc=0 its arm ran on some model")],
)
def test_flip_fails_a_flag_not_applicable_on_every_model(tmp_path: Path, na_models: str, verdict: str) -> None:
    # the stand-in gate says the flag is not applicable on the models named in NA_MODELS
    done = run_gpu_sh(tmp_path, ["flip"], FLIP="VT_GEMV=1 VT_EAGER=0", NA_MODELS=na_models)
    assert done.returncode == 0, done.stderr
    table = done.stdout[done.stdout.rindex("step ") :]
    assert re.search(rf"^flip-ran-VT_GEMV +{verdict}$", table, re.MULTILINE), table
    assert "flip-ran-VT_EAGER" not in table  # a flag set off owes no arm


def test_a_decode_attention_flip_gates_the_attention_models_with_long_prompts(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["flip"], FLIP="VT_ATTN_ONEPASS=1 VT_ATTN_TILED=1")
    assert done.returncode == 0, done.stderr
    assert "(models: d128 d128-g4 long)" in done.stdout
    logs = {p.stem for p in (tmp_path / "out" / "logs").glob("*.log")}
    assert {"flip-neartie-d128", "flip-neartie-d128-g4", "flip-tokens-long-eager"} <= logs
    assert not any("moe" in n for n in logs)
    require = "--require-arm VT_ATTN_ONEPASS --require-arm VT_ATTN_TILED"
    long = "--model /tmp/flip-gate-models/long --prompt-lens 1537,1542"
    assert f"argv: -m lab gate neartie --device cuda --dtype bfloat16 {long} --fp32-arbiter {require}\n" in log(
        tmp_path, "flip-neartie-long"
    )
    assert f"--model /tmp/flip-gate-models/d128-g4 {require}\n" in log(tmp_path, "flip-tokens-d128-g4-graph")
    assert "write_gate_models(Path('/tmp/flip-gate-models'), ['d128-g4', 'long'])" in log(tmp_path, "flip-models")
    # one flag outside decode attention: the default models
    done = run_gpu_sh(tmp_path, ["flip"], FLIP="VT_ATTN_ONEPASS=1 VT_GEMV=1")
    assert "(models: dense d128 moe)" in done.stdout


def test_flip_prompt_lens_set_the_razors_prompts_but_the_long_models(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["flip"], FLIP="VT_GEMV=1", FLIP_MODELS="dense long", FLIP_PROMPT_LENS="1,6,13")
    assert done.returncode == 0, done.stderr
    assert "argv: -m lab gate neartie --device cuda --dtype bfloat16 --prompt-lens 1,6,13 --require-arm VT_GEMV\n" in (
        log(tmp_path, "flip-neartie-dense")
    )
    assert "--prompt-lens 1537,1542 --fp32-arbiter" in log(tmp_path, "flip-neartie-long")
    assert "1,6,13" not in log(tmp_path, "flip-neartie-long") + log(tmp_path, "flip-tokens-dense-graph")


def test_flip_models_select_the_models(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["flip"], FLIP="VT_GEMV=1", FLIP_MODELS="moe")
    assert done.returncode == 0, done.stderr
    logs = {p.stem for p in (tmp_path / "out" / "logs").glob("*.log")}
    assert "flip-tokens-moe-graph" in logs and not any("dense" in n or "d128" in n for n in logs - {"flip-regen-dense"})


def test_bench_phase_profiles_the_decode_step(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["bench"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert f"argv: -m lab bench decode --profile --no-oracle --ledger {out}/ledger\n" in log(
        tmp_path, "decode-0.6b-profile"
    )


def test_ncu_phase_profiles_the_default_arm_and_the_gemv(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # prints its options, then runs the command it wraps (from the stand-in python on)
    (bindir / "ncu").write_text(
        '#!/usr/bin/env bash\necho "ncu: $*"\nwhile [[ $# -gt 0 && $1 != *fake-python ]]; do shift; done\n"$@"\n'
    )
    (bindir / "ncu").chmod(0o755)
    done = run_gpu_sh(tmp_path, ["ncu"], PATH=f"{bindir}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    b64 = log(tmp_path, "ncu-attn-b64")
    assert "-k regex:tiled_ -s 2 -c 2" in b64
    assert "argv: -m lab bench launch --calls 3 --workload attn-decode --arm tiled" in b64  # the wrapped command ran
    assert "--shape batch=1,ctx=32768" in log(tmp_path, "ncu-attn-b1-32k")
    assert "--arm gemv-kernel --shape n=4096,k=14336" in log(tmp_path, "ncu-gemv")
    assert (tmp_path / "out" / "ncu-summary.txt").exists()


def test_ncu_phase_says_why_it_skips_without_ncu(tmp_path: Path) -> None:
    if shutil.which("ncu"):
        pytest.skip("ncu is installed here: the skip path cannot be shown")
    done = run_gpu_sh(tmp_path, ["ncu"])
    assert done.returncode == 0 and "skip: ncu not found on PATH" in done.stdout


# stands in for ncu: prints its options, runs the command it wraps, says what the launcher ran, then prints a raw
# page (tests/fixtures/ncu) unless NVTX_BROKEN is set and it was asked to filter on an NVTX range
FAKE_NCU = """#!/usr/bin/env bash
echo "ncu: $*"
nvtx=0
[[ " $* " == *" --nvtx "* ]] && nvtx=1
while [[ $# -gt 0 && $1 != *fake-python ]]; do shift; done
"$@"
args=" $* "
w=${args#* --workload }; a=${args#* --arm }; s=${args#* --shape }
echo "launch: ${w%% *} ${a%% *} ${s%% *} x2 on cuda: output (1, 1) torch.bfloat16"
if [[ $nvtx == 1 && -n "${NVTX_BROKEN:-}" ]]; then echo "==WARNING== No kernels were profiled."; exit 0; fi
grep -v '^launch: ' "$FIXTURE"
"""
# stands in for python, except that the limiter table is the real one
TABLE_PY = """#!/usr/bin/env bash
if [[ "$*" == "-m lab bench ncu_table "* ]]; then exec "$REAL_PY" "$@"; fi
echo "argv: $*"
"""
NCU = ROOT / "tests" / "fixtures" / "ncu" / "raw-attn-tiled-b64.log"


def run_ncu2(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("ncu", FAKE_NCU), ("table-python", TABLE_PY)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    fake = tmp_path / "fake-python"
    fake.write_text(TABLE_PY)
    fake.chmod(0o755)
    out = tmp_path / "out"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("VT_", "FLIP", "NCU2"))}
    full = {
        **clean,
        "OUT": str(out),
        "PYTHON": str(fake),
        "REAL_PY": sys.executable,
        "PYTHONPATH": str(ROOT),
        "FIXTURE": str(NCU),
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "VT_CUDA_CACHE": str(tmp_path / "cache"),
        **env,
    }
    return subprocess.run(["bash", str(SCRIPT), "ncu2"], env=full, capture_output=True, text=True, timeout=300)


def test_ncu2_profiles_each_miss_and_prints_the_limiter_table_last(tmp_path: Path) -> None:
    done = run_ncu2(tmp_path)
    assert done.returncode == 0, done.stderr
    sections = "--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats -c 8"
    head = f"ncu: --clock-control none --csv --page raw --print-units base {sections} --nvtx --nvtx-include profile/ "
    launch = "argv: -m lab bench launch --calls 2"
    expected = {
        "ncu2-gemv-stream-pdl-n151936-k1024": "--workload gemv --arm gemv-stream-pdl --shape n=151936,k=1024",
        "ncu2-gemm-m32-n6144-k1024": "--workload gemm --arm defaults --shape rows=32,n=6144,k=1024",
        "ncu2-tiled-fused-b1-c32768-q32-kv8-d128": "--workload attn-decode --arm tiled-fused "
        "--shape batch=1,ctx=32768,hq=32,hkv=8,d=128",
        "ncu2-flashinfer-tc-b64-c4096-q16-kv2-d256": "--workload attn-decode --arm flashinfer-tc "
        "--shape batch=64,ctx=4096,hq=16,hkv=2,d=256",
    }
    for step, args in expected.items():
        text = log(tmp_path, step)
        assert text.startswith(head), (step, text)
        assert f"{launch} {args}\n" in text, (step, text)
    steps = {p.stem for p in (tmp_path / "out" / "logs").glob("ncu2-*.log")}
    assert len(steps) == 24 + 6 + 4  # 4 attention arms x 6 shapes, 3 GEMV arms x 2 shapes, 4 GEMMs
    runs = re.findall(r"^== (ncu2-\S+):", done.stdout, re.MULTILINE)
    assert runs[:5] == [  # each shape's arms together: a budget cut keeps whole comparisons
        "ncu2-tiled-b64-c4096-q32-kv8-d128",
        "ncu2-tiled-pipelined-b64-c4096-q32-kv8-d128",
        "ncu2-tiled-fused-b64-c4096-q32-kv8-d128",
        "ncu2-flashinfer-tc-b64-c4096-q32-kv8-d128",
        "ncu2-tiled-b1-c32768-q32-kv8-d128",
    ]
    # the table comes last: one row per kernel of every run (2 in the fixture), labelled by the launcher's line
    tail = done.stdout[done.stdout.rindex("\n| arm / shape | kernel |") :]
    assert "| attn-decode flashinfer-tc b64 c4096 hq16 hkv2 d256 | tiled_scores_kernel | 156.0 | 74.0 |" in tail
    assert "| gemm defaults m32 n151936 k1024 | 2 | 334.1 | 69.1 |" in tail
    assert tail.rstrip().splitlines()[-2:] == [
        "stalls: cycles per issued instruction; 68 kernels",
        f"ledger: {tmp_path}/out/ledger/{datetime.now(UTC).date().isoformat()}-ncu2-limiters.json",
    ]
    assert (tmp_path / "out" / "ncu2-table.md").read_text() in done.stdout
    (record,) = (tmp_path / "out" / "ledger").glob("*-ncu2-limiters.json")
    assert '"command": "OUT=DIR bash ci/gpu.sh ncu2"' in record.read_text()


def test_ncu2_runs_only_the_parts_and_arms_asked_for(tmp_path: Path) -> None:
    done = run_ncu2(tmp_path, NCU2_PARTS="attn", NCU2_ATTN_ARMS="tiled-pipelined flashinfer-tc")
    assert done.returncode == 0, done.stderr
    steps = {p.stem for p in (tmp_path / "out" / "logs").glob("ncu2-*.log")}
    assert len(steps) == 12 and all(s.startswith(("ncu2-tiled-pipelined-", "ncu2-flashinfer-tc-")) for s in steps)


def test_ncu2_profiles_one_whole_call_where_the_nvtx_filter_takes_nothing(tmp_path: Path) -> None:
    done = run_ncu2(tmp_path, NVTX_BROKEN="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("the NVTX range filter profiled nothing") == 1  # the first run finds out, once
    first = log(tmp_path, "ncu2-tiled-b64-c4096-q32-kv8-d128")  # rerun without the filter
    assert "--nvtx" not in first and "argv: -m lab bench launch --calls 1 --workload attn-decode" in first
    assert "--nvtx" not in log(tmp_path, "ncu2-gemv-kernel-n4096-k1024")
    assert re.search(r"^ncu2-tiled-b64-c4096-q32-kv8-d128 +rc=0", done.stdout, re.MULTILINE)  # listed once
    assert done.stdout.count("\nncu2-tiled-b64-c4096-q32-kv8-d128 ") == 1


def test_ncu2_stays_within_its_budget_and_the_table_names_what_it_skipped(tmp_path: Path) -> None:
    done = run_ncu2(tmp_path, NCU2_BUDGET="0")
    assert re.search(r"^ncu2-tiled-b64-c4096-q32-kv8-d128 +skip: past NCU2_BUDGET=0s$", done.stdout, re.MULTILINE)
    assert "error: no profiled kernel in 34 log(s): nothing to tabulate" in done.stdout  # a table of nothing fails
    assert re.search(r"^table-ncu2 +rc=1 ", done.stdout, re.MULTILINE)


def test_serve_runs_the_gpu_tests_then_the_throughput_benchmark(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["serve"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert (
        "-m pytest tests/engine/test_llm.py tests/engine/test_sampler.py tests/engine/test_llm_qwen3_next.py -m gpu"
        in log(tmp_path, "serve-gpu-tests")
    )
    assert (
        f"argv: -m lab bench throughput --requests 256 --sweep 64,256 --plot {out}/throughput.svg --ledger {out}/ledger"
    ) in log(tmp_path, "serve-throughput")


def test_prefill_phase_gates_the_kernel_then_ab_tests_the_throughput(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["prefill"])
    out = tmp_path / "out"
    assert (
        f"argv: -m lab gate kernels --filter prefill/ --filter sample_rows/ --ledger {out}/ledger/prefill-kernels.json"
    ) in log(tmp_path, "prefill-numerics")
    assert "-m pytest tests/engine/cuda/test_prefill_attn.py tests/engine/cuda/test_sample_rows.py" in log(
        tmp_path, "prefill-gpu-tests"
    )
    assert (
        "argv: -m lab bench throughput --requests 256 --sweep 256 "
        "--ab-flag VT_PREFILL_ATTN,VT_SAMPLE_ROWS_KERNEL,VT_ASYNC_SCHEDULE "
        "--ab-reps 2 --peer-budget-s 30 "
        f"--ledger {out}/ledger"
    ) in log(tmp_path, "prefill-throughput")
    table = done.stdout.split("\nstep ")[-1].splitlines()
    assert [line.split()[0] for line in table[1:7]] == [
        "build",
        "prefill-numerics",
        "prefill-memcheck",
        "prefill-gpu-tests",
        "serve-qwen3next",
        "prefill-throughput",
    ]


def test_throughput_ab_phase_runs_the_qwen3_next_serving_tests_and_the_benchmark_alone(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["throughput-ab"])
    assert done.returncode == 0, done.stderr
    logs = sorted(p.name for p in (tmp_path / "out" / "logs").iterdir())
    assert logs == ["build.log", "prefill-throughput.log", "serve-qwen3next.log"]
    assert "argv: -m pytest tests/engine/test_llm_qwen3_next.py -m gpu" in log(tmp_path, "serve-qwen3next")
    table = done.stdout.split("\nstep ")[-1].splitlines()
    assert [line.split()[0] for line in table[1:4]] == ["build", "serve-qwen3next", "prefill-throughput"]


def test_quant_phase_gates_every_checkpoint_and_ab_tests_the_dequant_gemv(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["quant"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert "argv: -m pytest tests/engine/model/test_quant_gpu.py -m gpu" in log(tmp_path, "quant-gpu-tests")
    for m in ("awq", "gptq", "gptq-act-order", "nvfp4", "nvfp4-ct"):
        assert f"argv: -m lab.data.make_tiny_quant --method {m} --out /tmp/tiny-qwen3-quant/{m}\n" in log(
            tmp_path, f"quant-make-{m}"
        )
        assert (
            f"argv: -m engine generate --device cuda --model /tmp/tiny-qwen3-quant/{m}/quant --max-new-tokens 8\n"
            in log(tmp_path, f"quant-generate-{m}")
        )
    for m in ("awq", "gptq-act-order", "nvfp4"):
        twin = f"--model /tmp/tiny-qwen3-quant/{m}/quant --oracle-model /tmp/tiny-qwen3-quant/{m}/dense"
        assert f"argv: -m lab gate neartie --device cuda --dtype bfloat16 {twin}\n" in log(
            tmp_path, f"quant-neartie-gemv-{m}"
        )
    assert "n/a: oracle deterministic" in done.stdout[done.stdout.rindex("step ") :]
    for m in ("awq", "gptq", "nvfp4"):
        assert (
            f"argv: -m lab bench ab --flag VT_DEQUANT_GEMV --workload decode-step-{m} --ledger {out}/ledger\n"
            in log(tmp_path, f"ab-step-dequant-gemv-{m}")
        )


def test_peers_phase_runs_the_six_shapes_and_both_decode_peers(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["peers"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    attn = log(tmp_path, "peers-attn")
    arms = "default,tiled-onepass,flashinfer-tc,flashinfer,sdpa-cudnn,sdpa-flash"
    assert f"--workload attn-decode --shapes peers --arms {arms}" in attn
    assert f"--plot {out}/attn-peers.png" in attn
    assert not list((out / "logs").glob("ab-fused-*"))
    assert "bench decode --no-oracle --hf-compiled --profile --ledger" in log(tmp_path, "peers-decode-b1")
    assert "--hf-compiled --batch 8 --steps 32" in log(tmp_path, "peers-decode-b8")
    assert "--hf-compiled --batch 32 --steps 32" in log(tmp_path, "peers-decode-b32")
    assert f"argv: -m lab report perf --ledger {out}/ledger\n" in log(tmp_path, "peers-report")


def test_perf_tables_phase_writes_records_then_reports_them_last(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["perf-tables"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    attn = log(tmp_path, "perf-attn")
    arms = "default,flashinfer-tc,flashinfer,sdpa-cudnn,sdpa-flash"
    assert f"argv: -m lab bench bandwidth --workload attn-decode --shapes peers --arms {arms} --reps 6 " in attn
    for b in (1, 8, 32):
        assert (
            f"argv: -m lab bench decode --no-oracle --hf-compiled --batch {b} --steps 32 --ledger {out}/ledger\n"
            in log(tmp_path, f"perf-decode-b{b}")
        )
    # the report's log is printed after the step table: the last block of the output
    last = done.stdout[done.stdout.rindex("perf-report                  rc=0") :].split("\n\n", 1)[1]
    assert last.startswith(f"argv: -m lab report perf --ledger {out}/ledger\n")


def test_reach_phase_builds_runs_the_gate_and_prints_its_table_last(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["reach"])
    assert done.returncode == 0, done.stderr
    assert "argv: -m engine.cuda.build" in log(tmp_path, "build")
    argv = log(tmp_path, "reach").splitlines()[0]
    assert argv.startswith("argv: -m lab gate reach --device cuda --dtype bfloat16 --out ")
    assert "--time-limit 220 --tiled-splits 1 4 26" in argv  # the split count forced, reported only
    table = (
        done.stdout[done.stdout.rindex("\nstep ") + 1 :].split("\n\n")[0].splitlines()
    )  # the fake prints no arm table
    assert [ln.split()[0] for ln in table[1:]] == [
        "build",
        "reach-numerics",
        "reach",
        *(f"reach-long-seed{s}" for s in (1, 2, 3)),
    ]


def test_fuse_phase_runs_numerics_each_arms_ab_the_token_check_and_the_step_off_and_on(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["fuse"])
    assert done.returncode == 0, done.stderr
    assert "gate kernels --filter fused/ --ledger" in log(tmp_path, "fuse-numerics")
    for step, args in (
        ("ab-fuse-qkv", "--flag VT_QKV_ROPE_STORE --workload qkv-rope-store"),
        ("ab-fuse-norm-qkv", "--flag VT_NORM_GEMV --workload norm-gemv --ledger"),
        ("ab-fuse-norm-gateup", "--flag VT_NORM_GEMV --workload norm-gemv --shape n=6144"),
        ("ab-fuse-glu", "--flag VT_GLU_GEMV --workload glu-gemv"),
        ("ab-fuse-norm-glu", "--flag VT_GLU_GEMV --workload norm-glu-gemv"),
        ("ab-step-VT_NORM_GEMV", "--flag VT_NORM_GEMV --workload decode-step"),
        ("ab-fuse-pdl-o", "--flag VT_GEMV_PDL --workload gemv --shape n=1024,k=2048"),
        ("ab-fuse-pdl-prologue", "--flag VT_GEMV_PDL --workload norm-gemv"),
        ("ab-fuse-persistent-head", "--flag VT_GEMV_PERSISTENT --workload gemv --shape n=151936,k=1024"),
    ):
        assert args in log(tmp_path, step), step
    on = "VT_QKV_ROPE_STORE=1,VT_NORM_GEMV=1,VT_GLU_GEMV=1"
    assert f"bench step_arms --flags {on} --steps 16" in log(tmp_path, "fuse-tokens-b1")
    assert f"bench step_arms --flags {on} --batch 32 --steps 8 --require VT_QKV_ROPE_STORE" in log(
        tmp_path, "fuse-tokens-b32"
    )
    assert "flags: VT_ATTN_SPLITKV=unset VT_GEMV=unset" in log(tmp_path, "fuse-decode-b1-off")
    assert "bench decode --no-oracle --steps 32 --profile" in log(tmp_path, "fuse-decode-b1-on")
    assert "--batch 32 --steps 16" in log(tmp_path, "fuse-decode-b32-on")
    assert done.stdout.splitlines()[-1].startswith(("decode-b32-on", "profile-b1-on", "tokens-b32", "fuse:"))
    assert "fuse: VT_QKV_ROPE_STORE=1 VT_NORM_GEMV=1 VT_GLU_GEMV=1" in done.stdout
    assert "--flag VT_GEMV_PDL --workload decode-step" in log(tmp_path, "ab-step-VT_GEMV_PDL")


def test_qwen3next_phase_runs_the_gdn_numerics_tests_and_gates_with_their_arms_required(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["qwen3next"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert f"argv: -m lab gate kernels --filter gdn/ --ledger {out}/ledger/qwen3next-kernels.json\n" in log(
        tmp_path, "qwen3next-kernels"
    )
    assert "argv: -m pytest tests/engine/model/test_qwen3_next_gpu.py -m gpu" in log(tmp_path, "qwen3next-gpu-tests")
    req = "--require-arm VT_GDN_KERNEL --require-arm VT_GDN_CHUNKED_KERNEL"
    model = "--model /tmp/tiny-qwen3-next"
    assert f"-m lab gate tokens --device cuda --dtype float32 {model} --max-new-tokens 40 {req}\n" in log(
        tmp_path, "qwen3next-tokens-fp32"
    )
    assert f"-m lab gate tokens --device cuda --dtype bfloat16 {model} --max-new-tokens 64 {req}\n" in log(
        tmp_path, "qwen3next-tokens-bf16"
    )
    assert "arms (calls" in done.stdout  # the gates' selection counters are shown
    assert done.stdout.rstrip().splitlines()[-1].startswith("qwen3next-tokens-bf16: ")  # the verdicts come last
    assert "qwen3next-gpu-razor" not in done.stdout  # its test runs inside qwen3next-gpu-tests


def test_qwen3next_bf16_phase_runs_only_the_bf16_evidence(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["qwen3next-bf16"])
    assert done.returncode == 0, done.stderr
    assert "-m gpu -q -rA -p no:cacheprovider -k razor" in log(tmp_path, "qwen3next-gpu-razor")
    ran = [line.split()[0] for line in done.stdout[done.stdout.rindex("step ") :].splitlines()[1:] if line.strip()]
    assert ran[:5] == [
        "build",
        "qwen3next-gpu-razor",
        "qwen3next-make",
        "qwen3next-tokens-fp32",
        "qwen3next-tokens-bf16",
    ]


def test_qwen3next_bench_phase_ab_tests_each_gdn_kernel(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["qwen3next-bench"])
    assert done.returncode == 0, done.stderr
    ledger = f"--ledger {tmp_path / 'out'}/ledger\n"
    assert f"argv: -m lab bench ab --flag VT_GDN_KERNEL {ledger}" in log(tmp_path, "ab-gdn-decode-b32")
    assert f"argv: -m lab bench ab --flag VT_GDN_CHUNKED_KERNEL {ledger}" in log(tmp_path, "ab-gdn-chunked-t1024")
    assert "qwen3next-kernels" not in done.stdout  # the gates phase did not run


def test_step2_phase_measures_the_streamed_gemv_and_prints_its_table_last(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["step2"])
    assert done.returncode == 0, done.stderr
    ledger = f"--ledger {tmp_path / 'out'}/ledger"
    assert "argv: -m lab gate kernels --filter _stream/" in log(tmp_path, "step2-numerics")
    for nk in ("n=4096,k=1024", "n=1024,k=2048", "n=6144,k=1024", "n=1024,k=3072", "n=151936,k=1024"):
        name = nk.replace("=", "").replace(",", "")
        want = f"argv: -m lab bench ab --flag VT_GEMV_STREAM --workload gemv --shape {nk} {ledger}\n"
        assert want in log(tmp_path, f"ab-op-stream-{name}") and want in log(tmp_path, f"ab-op-stream-pdl-{name}")
    for name, flag in (("ab-step-stream-pdl", "VT_GEMV_STREAM"), ("ab-step-pdl", "VT_GEMV_PDL")):
        assert f"argv: -m lab bench ab --flag {flag} --workload decode-step {ledger}\n" in log(tmp_path, name)
    want = f"argv: -m lab bench decode --no-oracle --steps 32 --profile {ledger}\n"
    assert want in log(tmp_path, "decode-stream-pdl")
    assert done.stdout.rindex("step2 on top of: VT_QKV_ROPE_STORE=1 VT_NORM_GEMV=1 VT_GLU_GEMV=1") > done.stdout.rindex(
        "== ab-step-pdl"
    )


# stands in for python with verdict lines like the gates' and the A/B's, the gate's missing-arm line where the
# require flag names an arm that this stand-in "did not run" (VT_GDN_CHUNKED_KERNEL)
VERDICT_PY = """#!/usr/bin/env bash
echo "argv: $*"
echo "flags: VT_DEQUANT_KERNEL=${VT_DEQUANT_KERNEL-unset} VT_GDN_KERNEL=${VT_GDN_KERNEL-unset}"
case " $* " in
  *" gate tokens "*) [[ " $* " == *" VT_GDN_CHUNKED_KERNEL "* ]] && { echo "FAIL: no arm gated by \
VT_GDN_CHUNKED_KERNEL ran (0 calls): the gate did not exercise the arm under test"; echo "tokens: PASS: 64 tokens"; \
exit 1; }; echo "tokens: PASS: 64 tokens" ;;
  *" gate neartie "*) echo "neartie: PASS: 1024 positions" ;;
  *" bench ab "*) echo "max |on - off| = 0"; echo "arms gated by VT_X: on 3, off 0 calls (each arm's first call)"; \
echo "verdict: win (median ratio off/on 1.500)" ;;
  *" gate kernels "*) echo "36/36 cases within tolerance; self-test ok" ;;
  *" pytest "*) echo "10 passed in 30.00s" ;;
esac
exit 0
"""


def run_with(tmp_path: Path, script: str, phases: list[str]) -> subprocess.CompletedProcess:
    fake = tmp_path / "verdict-python"
    fake.write_text(script)
    fake.chmod(0o755)
    return run_gpu_sh(tmp_path, phases, PYTHON=str(fake))


def phase_limits(phase_test: str) -> int:
    """The sum of the step limits of one `if [[ " $PHASES " == *" NAME "* ]]` block of ci/gpu.sh (and its build)."""
    text = SCRIPT.read_text()
    start = text.index(f'if [[ " $PHASES " == *" {phase_test} "* ]]; then\n')
    block = text[start : text.index("\nfi\n", start)]
    limits = [int(m) for m in re.findall(r"^\s*step \S+ (\d+) ", block, re.M)]
    limits += [int(m) for m in re.findall(r"^\s*build_once (\d+)", block, re.M)]
    qflip = re.search(r"^QFLIP=\((.*?)\)", text, re.M)
    assert qflip is not None
    for words, body in re.findall(r"for m in ([^\n;]*); do(.*?)\n  done", block, re.S):
        runs = len(qflip[1].split() if words == '"${QFLIP[@]}"' else words.split())
        limits += [int(m) for m in re.findall(r"step \S+ (\d+) ", body)] * (runs - 1)  # counted once above
    return sum(limits)


@pytest.mark.parametrize("phase", ["quant-flip", "quant-flip-ab", "quant-flip-baseline", "gdn-flip", "gdn-flip-decode"])
def test_flip_phases_cannot_overrun_six_minutes(phase: str) -> None:
    assert 0 < phase_limits(phase) <= 360, phase


def test_quant_flip_gates_each_checkpoint_with_the_arm_required_then_ab_tests_at_batch_32(tmp_path: Path) -> None:
    done = run_with(tmp_path, VERDICT_PY, ["quant-flip"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    assert "main(['--method', m, '--out', '/tmp/tiny-qwen3-quant/' + m])" in log(tmp_path, "quant-flip-make")
    for m in ("awq", "gptq-act-order", "nvfp4"):
        twin = f"--model /tmp/tiny-qwen3-quant/{m}/quant --oracle-model /tmp/tiny-qwen3-quant/{m}/dense"
        for gate in ("tokens", "neartie"):
            text = log(tmp_path, f"quant-flip-{gate}-{m}")
            assert (
                f"argv: -m lab gate {gate} --device cuda --dtype bfloat16 {twin} --require-arm VT_DEQUANT_KERNEL\n"
            ) in text
            assert "flags: VT_DEQUANT_KERNEL=1 " in text
    ab_log = log(tmp_path, "quant-flip-ab-awq-b32")
    assert (
        f"argv: -m lab bench ab --flag VT_DEQUANT_KERNEL --workload decode-step-awq --shape batch=32 "
        f"--ledger {out}/ledger\n"
    ) in ab_log
    assert "flags: VT_DEQUANT_KERNEL=unset" in ab_log  # the A/B toggles the flag itself
    table = done.stdout[done.stdout.rindex("\nquant-flip: ") :].splitlines()[2:]
    assert [line.split()[0] for line in table] == [
        "quant-flip-make",
        "quant-flip-tokens-awq",
        "quant-flip-neartie-awq",
        "quant-flip-tokens-gptq-act-order",
        "quant-flip-neartie-gptq-act-order",
        "quant-flip-tokens-nvfp4",
        "quant-flip-neartie-nvfp4",
        "quant-flip-ab-awq-b32",
    ]
    assert table[1].endswith("tokens: PASS: 64 tokens") and table[2].endswith("neartie: PASS: 1024 positions")
    assert table[-1].endswith(
        "verdict: win (median ratio off/on 1.500); max |on - off| = 0; arms gated by VT_X: on 3, off 0 calls "
        "(each arm's first call)"
    )


def test_quant_flip_ab_runs_the_gptq_and_nvfp4_steps(tmp_path: Path) -> None:
    done = run_with(tmp_path, VERDICT_PY, ["quant-flip-ab"])
    assert done.returncode == 0, done.stderr
    for m in ("gptq", "nvfp4"):
        assert f"--flag VT_DEQUANT_KERNEL --workload decode-step-{m} --shape batch=32 " in log(
            tmp_path, f"quant-flip-ab-{m}-b32"
        )
    assert "quant-flip-tokens-awq" not in done.stdout


def test_gdn_flip_requires_both_arms_and_its_table_shows_a_missing_arm(tmp_path: Path) -> None:
    done = run_with(tmp_path, VERDICT_PY, ["gdn-flip"])
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    req = "--require-arm VT_GDN_KERNEL --require-arm VT_GDN_CHUNKED_KERNEL"
    for dtype, new in (("float32", 40), ("bfloat16", 64)):
        text = log(tmp_path, f"gdn-flip-tokens-{'fp32' if dtype == 'float32' else 'bf16'}")
        assert f"--device cuda --dtype {dtype} --model /tmp/tiny-qwen3-next --max-new-tokens {new} {req}\n" in text
        assert "flags: VT_DEQUANT_KERNEL=unset VT_GDN_KERNEL=1\n" in text
    assert "-m pytest tests/engine/model/test_qwen3_next_gpu.py -m gpu" in log(tmp_path, "gdn-flip-gpu-tests")
    assert f"--flag VT_GDN_KERNEL --workload decode-step-qwen3next --ledger {out}/ledger\n" in log(
        tmp_path, "gdn-flip-ab-step-b32"
    )
    assert "flags: VT_DEQUANT_KERNEL=unset VT_GDN_KERNEL=unset" in log(tmp_path, "gdn-flip-ab-step-b32")
    assert f"--flag VT_GDN_CHUNKED_KERNEL --ledger {out}/ledger\n" in log(tmp_path, "gdn-flip-ab-chunked-t1024")
    table = done.stdout[done.stdout.rindex("\ngdn-flip: ") :].splitlines()[2:]
    rows = {line.split()[0]: line for line in table}
    assert list(rows) == [
        "gdn-flip-kernels",
        "gdn-flip-gpu-tests",
        "gdn-flip-make",
        "gdn-flip-tokens-fp32",
        "gdn-flip-tokens-bf16",
        "gdn-flip-ab-step-b32",
        "gdn-flip-ab-chunked-t1024",
    ]
    assert rows["gdn-flip-kernels"].endswith("36/36 cases within tolerance; self-test ok")
    # the stand-in ran no chunked arm: the row shows rc=1 and the gate's own line, beside its verdict
    assert " rc=1 " in rows["gdn-flip-tokens-bf16"] and rows["gdn-flip-tokens-bf16"].endswith(
        "tokens: PASS: 64 tokens; FAIL: no arm gated by VT_GDN_CHUNKED_KERNEL ran (0 calls): the gate did not "
        "exercise the arm under test"
    )
    assert rows["gdn-flip-make"].endswith("(no verdict line: logs/gdn-flip-make.log)")
    assert done.stdout.rstrip().splitlines()[-1] == table[-1]  # the verdicts come last


def test_the_baselines_run_each_gate_with_the_flags_off_or_one_arm_alone(tmp_path: Path) -> None:
    done = run_with(tmp_path, VERDICT_PY, ["quant-flip-baseline", "gdn-flip-decode"])
    assert done.returncode == 0, done.stderr
    razor = log(tmp_path, "quant-flip-base-neartie-awq")
    assert "--model /tmp/tiny-qwen3-quant/awq/quant --oracle-model /tmp/tiny-qwen3-quant/awq/dense\n" in razor
    assert "flags: VT_DEQUANT_KERNEL=0 " in razor and "--require-arm" not in razor
    decode = log(tmp_path, "gdn-flip-tokens-bf16-decode")
    assert "--dtype bfloat16 --model /tmp/tiny-qwen3-next --max-new-tokens 64 --require-arm VT_GDN_KERNEL\n" in decode
    assert "flags: VT_DEQUANT_KERNEL=unset VT_GDN_KERNEL=1\n" in decode
    assert "VT_GDN_KERNEL=0\n" in log(tmp_path, "gdn-flip-tokens-bf16-refs")
    tail = done.stdout[done.stdout.rindex("\nquant-flip: ") :]
    assert "quant-flip-base-neartie-awq" in tail and tail.rstrip().splitlines()[-1].startswith(
        "gdn-flip-tokens-bf16-refs"
    )


# a neartie gate with --attn-peer prints one run line per peer; the long model's FlashInfer run fails
CALIB_PY = """#!/usr/bin/env bash
case " $* " in *"GATE_MODELS as G"*) echo 1537,1542; exit 0 ;; esac  # the long gate model's prompt lengths
echo "argv: $*"
set -- "$@"
model=
while [[ $# -gt 0 ]]; do
  case $1 in
    --model) model=$2; shift ;;
    --attn-peer) v=PASS; [[ $model == */long && $2 == flashinfer ]] && v=FAIL
      echo "run $2 bfloat16: $v: 1024 positions over 16 prompts: 1020 exact, 4 near-tie (at most 12), 0 out of band, \
0 outside top-5 (band 0.5 nats) [peer calls 189]"
      echo "run $2 bfloat16 oracle-sdpa: PASS: 1024 positions over 16 prompts: 1024 exact, 0 near-tie (at most 12), \
0 out of band, 0 outside top-5 (band 0.5 nats) [peer calls 189]" ;;
  esac
  shift
done
exit 0
"""


def test_calib_phase_runs_each_model_through_the_razor_once_per_peer_and_prints_the_table_last(tmp_path: Path) -> None:
    done = run_with(tmp_path, CALIB_PY, ["calib"])
    assert done.returncode == 0, done.stderr
    peers = "--attn-peer engine --attn-peer sdpa-cudnn --attn-peer flashinfer-tc --attn-peer flashinfer"
    for m in ("d128-g4", "d128", "long"):
        argv = log(tmp_path, f"calib-{m}").splitlines()[0]
        lens = " --prompt-lens 1537,1542" if m == "long" else ""  # the long model's own prompts
        assert argv == (
            f"argv: -m lab gate neartie --model /tmp/calib-models/{m}{lens} --device cuda --dtype bfloat16 {peers} "
            f"--oracle-attn eager --oracle-attn sdpa --ledger {tmp_path}/out/ledger"
        )
    # four warm-ups run at once and share the log, so their lines interleave: judge the lines as a multiset
    jit = log(tmp_path, "calib-jit").splitlines()
    assert jit.count("argv: -c import torch") == 4
    assert jit.count("from lab.bench.attn_peers import FlashInferDecode") == 4
    assert sorted(ln for ln in jit if ln.startswith("warm(")) == [
        "warm(False, 40)",
        "warm(False, None)",
        "warm(True, 40)",
        "warm(True, None)",
    ]
    table = done.stdout[done.stdout.index("\ncalib: the bf16 near-tie razor") + 1 :].splitlines()
    assert table[2].split()[:3] == ["model", "peer", "oracle"]
    assert table[3].startswith("calib-d128-g4: rc=0 ")
    assert table[4] == "d128-g4   engine         eager  PASS: 1024: 1020 exact, 4 near-tie (at most 12), 0 out of " + (
        "band, 0 outside top-5 [peer calls 189]"
    )
    assert table[5].startswith("d128-g4   engine         sdpa   PASS: 1024: 1024 exact, ")
    long = [ln for ln in table if ln.startswith("long ")]
    assert [ln.split()[1:4] for ln in long[::2]] == [
        ["engine", "eager", "PASS:"],
        ["sdpa-cudnn", "eager", "PASS:"],
        ["flashinfer-tc", "eager", "PASS:"],
        ["flashinfer", "eager", "FAIL:"],
    ]
    assert len(table) == 3 + 3 * 9  # title, header, then per model its step line and two lines per peer


def test_calib_phase_cannot_overrun_six_minutes() -> None:
    assert 0 < phase_limits("calib") <= 360


def test_teeth_gpu_phase_runs_the_seeded_bugs_in_four_processes_on_the_gpu(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["teeth-gpu"])
    assert done.returncode == 0, done.stderr
    runs = sorted(log(tmp_path, f"teeth-gpu-{i}").splitlines()[0] for i in range(4))
    base = "argv: -m lab gate teeth --seeds 10 --razor fp32-probs --device cuda --bugs "
    assert runs == [
        base + "good-linear-fp32-accumulate good-online-split",
        base + "probs-rounded",
        base + "rmsnorm-round-after-weight eps-x10",
        base + "rope-fp32 window-off-by-one",
    ]
    assert done.stdout.rstrip().splitlines()[-1] == "teeth-gpu: 0 of 4 processes finished, 0 failed"
    eager = run_gpu_sh(tmp_path, ["teeth-gpu"], TEETH_RAZOR="eager", TEETH_SEEDS="3")
    assert "--seeds 3 --razor eager --device cuda --bugs probs-fp32" in log(tmp_path, "teeth-gpu-2")
    assert eager.returncode == 0


def test_calib_judges_by_the_fp32_probs_setting_when_asked(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["calib"], CALIB_RAZOR="fp32-probs")
    assert done.returncode == 0, done.stderr
    assert "--attn-peer flashinfer --razor-setting fp32-probs --oracle-attn online --ledger" in log(
        tmp_path, "calib-d128"
    )
    assert "peer, judged against the online oracle (the setting's)" in done.stdout
    assert "d128      flashinfer     online no run line (logs/calib-d128.log)" in done.stdout


def test_perf_jit_phase_builds_and_warms_flashinfer_for_both_head_dims(tmp_path: Path) -> None:
    done = run_gpu_sh(tmp_path, ["perf-jit"])
    assert done.returncode == 0, done.stderr
    assert "argv: -m engine.cuda.build" in log(tmp_path, "build")
    warm = log(tmp_path, "perf-jit")
    assert warm.count("from lab.bench.attn_peers import FlashInferDecode") == 4
    for v in ("tc 128", "decode 128", "tc 256", "decode 256"):
        assert f"print('flashinfer ready:', sys.argv[1], 'head_dim', d) {v}\n" in warm
