"""`lab bench splits` on the CPU: its usage errors, its SKIP without a GPU, the grid (the six peer shapes in it), the
candidate counts, a point's summary from hand-made samples (the A/B rule decides what the table keeps), and the two
writers: the JSON table (read back by the engine's reader) and the ledger record (valid against the toolkit's
schema). The timing itself needs a GPU."""

from __future__ import annotations

import json

import pytest
import torch

from engine.cuda import split_table
from lab.bench import splits as S
from lab.bench.figures import PEER_SHAPES, attn_shape_id
from lab.cli import main as lab_main
from tests.lab.ledger_record import read_record


def test_the_defaults() -> None:
    args = S.build_parser().parse_args([])
    assert (args.arm, args.rows, args.contexts, args.head_dims) == ("tiled", list(S.ROWS), list(S.CONTEXTS), [128, 256])
    assert (args.reps, args.dtype, args.ledger, args.out) == (8, "bfloat16", None, None)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--rows", "8,x"], "'8,x': expected comma-separated positive integers"),
        (["--contexts", "0"], "'0': every value must be at least 1"),
        (["--reps", "1"], "--reps 1: need at least 2 (rep 0 is dropped)"),
        (["--contexts", "1000"], "--contexts 1000: must be a multiple of 32"),
        (["--head-dims", "96"], "--head-dims 96: expected one of 64, 128, 256"),
        (["--rows", "4", "--head-dims", "128"], "--rows 4: head_dim 128 runs at 8 KV heads"),
        (["--arm", "fused"], "invalid choice: 'fused'"),
    ],
)
def test_usage_errors_exit_2_with_the_reason(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        S.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the SKIP path is the CPU's")
def test_without_a_gpu_it_skips_with_the_reason(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    out = tmp_path / "table.json"
    assert lab_main(["bench", "splits", "--out", str(out), "--ledger", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("SKIP: no CUDA device")
    assert not out.exists() and list(tmp_path.iterdir()) == []  # nothing measured, nothing written


def test_the_grid_holds_the_six_peer_shapes_at_their_own_heads() -> None:
    points = S.grid(list(S.ROWS), list(S.CONTEXTS), [128, 256])
    peers = {p["peer"]: p for p in points if p["peer"]}
    assert set(peers) == {attn_shape_id(s) for s in PEER_SHAPES}
    for s in PEER_SHAPES:
        assert {k: peers[attn_shape_id(s)][k] for k in ("batch", "hq", "hkv", "ctx", "d")} == s
    keys = [(p["batch"] * p["hkv"], p["ctx"], p["d"]) for p in points]
    assert len(keys) == len(set(keys)) == 7 * 5 * 2  # a peer takes its grid point's place: no point twice
    assert peers["b64.ctx4096.h32x8.d128"]["hq"] == 32  # not the grid's 16/8
    # a grid without head_dim 256: its peer shape is not measured
    assert all(p["d"] == 128 for p in S.grid([8], [1024], [128]))
    # the five d128 peer shapes, always; (8, 1024, 128) is one of them, at its own heads (the same 16/8)
    assert [p["peer"] is not None for p in S.grid([8], [1024], [128])] == [True] * 5


def test_the_candidates_stop_at_the_tiles_and_past_the_blocks() -> None:
    assert S.candidates(8, 1024, 8, 132) == [1, 2, 3, 4, 6, 8, 12, 16]  # 1024 tokens: 16 tiles
    assert S.candidates(1, 4096, 512, 132) == [1, 2, 3, 4]  # 512 rows: 16 blocks per SM at 4 splits
    assert S.candidates(6, 4096, 512, 132) == [1, 2, 3, 4, 6]  # the rule's own count past that
    assert S.candidates(1, 64, 8, 132) == [1]


def samples(us: float, spread: float = 0.01) -> list[float]:
    """Rep 0 (a cold start, dropped), then three kept reps with median `us` microseconds and the given spread."""
    return [us * 3e-6, us * 1e-6 * (1 - spread), us * 1e-6, us * 1e-6 * (1 + spread)]


POINT = {"batch": 1, "hq": 16, "hkv": 8, "ctx": 1024, "d": 128, "peer": "b1.ctx1024.h16x8.d128"}


def test_a_point_keeps_the_fastest_count_only_where_it_wins() -> None:
    won = S.summarise(POINT, 8, {4: samples(20.0), 8: samples(15.0), 16: samples(12.0)}, "graph")
    assert (won["rule"], won["best"], won["splits"], won["verdict"]) == (8, 16, 16, "win")
    assert won["rule_us"] == 15.0 and won["best_us"] == 12.0 and won["ratio"] == 1.25 and won["rows"] == 8
    # bands that overlap: no win, the table keeps the rule's count
    close = S.summarise(POINT, 8, {8: samples(15.0, 0.1), 16: samples(14.5, 0.1)}, "graph")
    assert (close["best"], close["splits"], close["verdict"]) == (16, 8, "no difference")
    same = S.summarise(POINT, 8, {8: samples(10.0), 16: samples(12.0)}, "graph")
    assert (same["best"], same["splits"], same["verdict"]) == (8, 8, "same")


def rows() -> list[dict]:
    grid = S.grid([8, 64], [1024, 4096], [128])
    out = []
    for i, p in enumerate(grid):
        rule = 8
        best = (12.0, 10.0, 10.0) if i % 2 == 0 else (10.0, 12.0, 11.0)  # the rule's, 16's, 4's medians
        out.append(S.summarise(p, rule, {8: samples(best[0]), 16: samples(best[1]), 4: samples(best[2])}, "graph"))
    return out


def test_the_table_file_is_what_the_engine_reads(tmp_path) -> None:
    table = rows()
    doc = S.table_doc(table, "tiled", "bfloat16", "NVIDIA H200", "python -m lab bench splits --out X")
    path = tmp_path / "h200.json"
    path.write_text(json.dumps(doc))
    read = split_table.load(path)[("NVIDIA H200", "bfloat16", "tiled")]
    assert [(p.rows, p.context, p.head_dim, p.splits) for p in read.points] == [
        (r["rows"], r["ctx"], r["d"], r["splits"]) for r in table
    ]
    assert {r["splits"] for r in table} == {4, 8}  # 4 where it won, the rule's 8 where the rule was fastest
    kept = doc["tables"][0]["points"][0]
    assert {"rule", "best", "ratio", "verdict", "peer"} <= kept.keys() and doc["tables"][0]["command"].endswith("X")


def test_the_record_holds_every_point_and_the_peer_ratios(tmp_path) -> None:
    table = rows()
    command = "python -m lab bench splits --ledger X"
    path = S.record(tmp_path, table, "tiled", "bfloat16", "NVIDIA H200", command, True)
    data = read_record(path)
    assert len(path.read_bytes()) <= 8192 and "details" not in data  # the points stay in the record
    figures = {f["name"]: (f["value"], f["unit"]) for f in data["figures"]}
    won = sum(r["splits"] != r["rule"] for r in table)
    assert figures["points"] == (len(table), "count") and figures["points_not_rule"] == (won, "count")
    assert figures["max_rule_over_table"] == (1.2, "x")
    peers = {n for n in figures if n.startswith("splits/")}
    assert peers == {f"splits/{r['peer']}/rule_over_table" for r in table if r["peer"]}
    assert data["results"]["format"] == S.POINT_FORMAT and len(data["results"]["points"]) == len(table)
    assert data["results"]["points"][0] == "8x1024x128 8:12.00 4:10.00 1.200 win 4"
    assert data["rows"] == ["ENGINE-PERSISTENT"] and data["command"] == command
    assert f"at {won} (" in data["summary"]


def test_a_full_grid_record_fits_the_cap(tmp_path) -> None:
    grid = S.grid(list(S.ROWS), list(S.CONTEXTS), [128, 256])
    table = [S.summarise(p, 8, {8: samples(100.0), 16: samples(80.0)}, "graph") for p in grid]
    path = S.record(tmp_path, table, "tiled", "bfloat16", "NVIDIA H200", "python -m lab bench splits", True)
    data = read_record(path)
    assert len(data["results"]["points"]) == len(grid) == 70 and "details" not in data  # no side file to keep


def test_a_point_that_fails_is_named_and_the_grid_goes_on(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    points = S.grid([8, 64], [1024], [128], peers=False)
    assert [p["peer"] for p in points] == [None, None]

    def measure_one(point: dict) -> dict:
        if point["batch"] == 8:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return S.summarise(point, 8, {8: samples(12.0), 16: samples(10.0)}, "graph")

    seen: list[tuple[int, int]] = []  # (rows, misses) each time a point was done: what the bench's table keeps
    rows, missed = S.measure_all(points, measure_one, lambda p: None, lambda r, m: seen.append((len(r), len(m))))
    assert [r["rows"] for r in rows] == [8] and missed == [
        "64x1024x128: failed: OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB"
    ]
    assert seen == [(1, 0)]  # after the point measured (a failed point writes no new table)
    rows2, refused = S.measure_all(points, measure_one, lambda p: "not this arm's" if p["batch"] == 1 else None)
    assert rows2 == [] and refused[0] == "8x1024x128: not this arm's" and refused[1].startswith("64x1024x128: failed")
    out = capsys.readouterr().out
    assert (
        "  8x1024x128: rule 8 12.00 us, best 16 10.00 us, kept 16 (win)" in out
        and "  64x1024x128: not measured (failed: " in out
    )
    data = read_record(
        S.record(tmp_path, rows, "tiled", "bfloat16", "NVIDIA H200", "python -m lab bench splits", True, missed)
    )
    assert data["results"]["not_measured"] == missed and data["summary"].endswith("; 1 points not measured")
    doc = S.table_doc(rows, "tiled", "bfloat16", "NVIDIA H200", "python -m lab bench splits", missed)
    assert doc["tables"][0]["not_measured"] == missed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the attention kernels run on a GPU")
@pytest.mark.gpu
def test_on_the_gpu_one_point_writes_a_table_the_engine_reads(tmp_path) -> None:
    """One grid point end to end: the launches, the timers, the table file (the record's writer is the CPU tests';
    on a copy of the tree it needs the manifest)."""
    out = tmp_path / "table.json"
    argv = ["--rows", "8", "--contexts", "1024", "--head-dims", "128", "--no-peers", "--reps", "3"]
    assert S.main([*argv, "--out", str(out)]) == 0
    name = torch.cuda.get_device_name()
    (table,) = split_table.load(out).values()
    (point,) = table.points
    assert (table.device, table.dtype, table.arm) == (name, "bfloat16", "tiled")
    assert (point.rows, point.context, point.head_dim) == (8, 1024, 128) and 1 <= point.splits <= 16
