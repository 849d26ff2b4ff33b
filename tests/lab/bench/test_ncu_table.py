"""lab/bench/ncu_table.py on hand-written logs in ncu's `--csv --page raw` format (tests/fixtures/ncu)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkers.ledger_schema import LedgerRecord2
from lab.bench import ncu_table
from lab.bench.ncu_table import Kernel, NcuError, number, parse_log, short_name, short_shape, top_stalls

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ncu"
TILED = FIXTURES / "raw-attn-tiled-b64.log"
LABEL = "attn-decode tiled b64 c4096 hq32 hkv8 d128 blk32"


def test_one_row_per_kernel_labelled_by_the_launch_line() -> None:
    scores, pv = parse_log(TILED.read_text(), str(TILED))
    assert scores == Kernel(
        label=LABEL,
        kernel="tiled_scores_kernel",
        grid="(8, 1, 64)",
        block="(128, 1, 1)",
        duration_us=155.968,  # 155,968 nsecond
        dram_pct=73.95,
        sm_pct=53.78,
        achieved_occupancy_pct=23.02,
        theoretical_occupancy_pct=25.0,
        limiter="shared memory",  # 4 blocks per SM, against 8 by registers, 16 by warps, 32 by the block limit
        blocks_per_sm=4,
        waves_per_sm=0.97,
        registers_per_thread=64,
        smem_per_block_bytes=34816,
        stalls=[("long_scoreboard", 12.73), ("short_scoreboard", 2.05)],  # `selected` is issuing, not a stall
        stall_unit="cycles per issued instruction",
        device="NVIDIA H200",
    )
    assert (pv.kernel, pv.limiter, pv.blocks_per_sm, pv.smem_per_block_bytes) == (
        "tiled_pv_kernel",
        "registers/shared memory",  # a tie names both
        4,
        36864 + 1024,  # dynamic + static
    )
    assert pv.stalls == [("short_scoreboard", 10.44), ("long_scoreboard", 9.8)]


def test_dram_throughput_under_either_name() -> None:
    renamed = TILED.read_text().replace('"dram__throughput.avg.', '"gpu__dram_throughput.avg.')
    assert '"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"' in renamed  # the H200's ncu names it so
    assert [k.dram_pct for k in parse_log(renamed, "x.log")] == [73.95, 64.9]
    dropped = TILED.read_text().replace('"dram__throughput.avg.', '"other.avg.')
    assert [k.dram_pct for k in parse_log(dropped, "x.log")] == [None, None]  # shown "-", never a wrong column


def test_a_log_without_a_launch_line_is_labelled_by_its_file_name() -> None:
    text = "\n".join(line for line in TILED.read_text().splitlines() if not line.startswith("launch: "))
    assert {k.label for k in parse_log(text, "/out/logs/ncu2-attn-tiled-b64.log")} == {"ncu2-attn-tiled-b64"}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("empty.log", 'empty.log: no ncu raw page (a header starting "ID","Process ID")'),
        (
            "no-kernels.log",
            'no-kernels.log: no ncu raw page (a header starting "ID","Process ID"): ==WARNING== No kernels were profiled.',
        ),
        ("raw-truncated-row.log", "raw-truncated-row.log: kernel row 2 has 20 fields, the header 32"),
        (
            "raw-no-duration.log",
            "raw-no-duration.log: the raw page has no gpu__time_duration.sum column (profile with --section SpeedOfLight)",
        ),
    ],
)
def test_malformed_or_empty_logs_fail_naming_the_log(name: str, message: str) -> None:
    with pytest.raises(NcuError) as err:
        parse_log((FIXTURES / name).read_text(), name)
    assert str(err.value) == message


def test_a_header_without_kernel_rows_fails() -> None:
    header_and_units = "\n".join(TILED.read_text().splitlines()[5:7])
    with pytest.raises(NcuError, match=r"^x\.log: the raw page has a header but no kernel row$"):
        parse_log(header_and_units, "x.log")


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        ("155,968", "nsecond", 155.968),
        ("1.5", "msecond", 1500.0),
        ("34.82", "Kbyte/block", 34820.0),
        ("2", "Kibyte", 2048.0),
        ("73.95", "%", 73.95),
        ("n/a", "%", None),
        ("", "", None),
    ],
)
def test_cells_in_base_units(value: str, unit: str, expected: float | None) -> None:
    assert number(value, unit) == expected


def test_stalls_from_the_first_family_present_without_non_stalls() -> None:
    sampled = {
        "smsp__pcsamp_warps_issue_stalled_long_scoreboard": 900.0,
        "smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued": 5000.0,  # not a reason of its own
        "smsp__pcsamp_warps_issue_stalled_selected": 4000.0,
        "smsp__pcsamp_warps_issue_stalled_barrier": 300.0,
        "smsp__pcsamp_warps_issue_stalled_wait": 300.0,
    }
    assert top_stalls(sampled) == ([("long_scoreboard", 900.0), ("barrier", 300.0)], "samples")  # ties by name
    both = {**sampled, "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio": 4.0}
    assert top_stalls(both) == ([("wait", 4.0)], "cycles per issued instruction")
    assert top_stalls({"gpu__time_duration.sum": 3.0}) == ([], "")


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("void vt::tiled_pv_kernel<__nv_bfloat16, (int)128>(vt::PagedArgs, int)", "tiled_pv_kernel"),
        ("nvjet_tst_128x64_64x8_1x1_v_bz_coopA_NNT", "nvjet_tst_128x64_64x8_1x1_v_bz_coopA_NNT"),
        (
            "void at::native::(anonymous namespace)::fill_kernel<float>(float *, float)",
            "fill_kernel",
        ),
        ("gemv_stream_kernel", "gemv_stream_kernel"),
    ],
)
def test_kernel_names_shortened(name: str, short: str) -> None:
    assert short_name(name) == short


def test_long_kernel_names_clipped_in_the_table_kept_in_the_record() -> None:
    name = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
    kernel = parse_log(TILED.read_text().replace("void vt::tiled_pv_kernel", name), "x.log")[1]
    assert kernel.kernel == name
    assert f"| {name[:45]}... | 178.2 |" in ncu_table.markdown([kernel], [])  # 48 characters


def test_shape_labels_shortened() -> None:
    assert short_shape("batch=1,ctx=32768,hq=32,hkv=8,d=128,block=32") == "b1 c32768 hq32 hkv8 d128 blk32"
    assert short_shape("rows=32,n=151936,k=1024") == "m32 n151936 k1024"


def test_cli_prints_the_table_and_writes_markdown_and_a_valid_ledger_record(tmp_path: Path, capsys) -> None:
    md, ledger = tmp_path / "table.md", tmp_path / "ledger"
    argv = [str(TILED), "--markdown", str(md), "--ledger", str(ledger), "--slug", "ncu2", "--command", "OUT=D bash x"]
    argv += ["--sha", "17944c8a5c57cb6df195d7df7195b72f9cafe830", "--allow-dirty"]  # the tree the logs came from
    assert ncu_table.main(argv) == 0
    out = capsys.readouterr().out
    row = (
        f"| {LABEL} | tiled_scores_kernel | 156.0 | 74.0 | 53.8 | 23.0 / 25.0 | shared memory (4) | 0.97 | 64 | 34816 "
        "| long_scoreboard 12.7, short_scoreboard 2.0 |"
    )
    assert row in out.splitlines()
    assert f"| {LABEL} | 2 | 334.1 | 69.1 |" in out.splitlines()  # (155.968 * 73.95 + 178.176 * 64.90) / 334.144
    assert md.read_text() == out[: out.index("ledger: ")]
    (record,) = ledger.glob("*-ncu2.json")
    data = json.loads(record.read_text())
    entry = LedgerRecord2.model_validate(data)  # the toolkit's schema 2: unknown keys are refused
    assert (entry.kind, entry.rows, entry.command, entry.device.name) == (
        "bench",
        ["ENGINE-PERF"],
        "OUT=D bash x",
        "NVIDIA H200",
    )
    assert entry.summary == "ncu limiter table: 2 kernels of 1 arm/shape runs"
    assert data["results"]["logs_commit"] == "17944c8a5c57cb6df195d7df7195b72f9cafe830"  # the record names HERE
    assert [k["kernel"] for k in data["results"]["kernels"]] == ["tiled_scores_kernel", "tiled_pv_kernel"]
    assert data["results"]["per_run"] == [{"label": LABEL, "kernels": 2, "total_us": 334.144, "dram_pct": 69.12}]


def test_cli_fails_when_a_log_holds_no_kernel_and_when_none_does(tmp_path: Path, capsys) -> None:
    ledger = tmp_path / "ledger"
    assert ncu_table.main([str(TILED), str(FIXTURES / "no-kernels.log"), "--ledger", str(ledger), "--allow-dirty"]) == 1
    captured = capsys.readouterr()
    assert (
        "\nnot measured: " in captured.out and "no-kernels.log: no ncu raw page" in captured.out
    )  # named in the table
    (record,) = ledger.glob("*.json")
    assert json.loads(record.read_text())["results"]["not_measured"][0]["log"].endswith("no-kernels.log")
    assert ncu_table.main([str(TILED), str(tmp_path / "skipped.log")]) == 1  # a run that never happened
    assert (
        f"not measured: {tmp_path / 'skipped.log'}: unreadable (No such file or directory)" in capsys.readouterr().out
    )
    assert ncu_table.main([str(FIXTURES / "empty.log"), str(FIXTURES / "no-kernels.log")]) == 1
    assert "error: no profiled kernel in 2 log(s): nothing to tabulate" in capsys.readouterr().err
