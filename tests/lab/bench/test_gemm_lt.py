"""`python -m lab bench gemm_lt`: cuBLASLt's candidates against cuBLAS. The library runs only on a GPU; here the
operand mapping, the library lookup, the typed entry points, and the measuring path with a stand-in handle on the
CPU (a wrong candidate left out, the fastest re-timed against cuBLAS)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lab.bench import cublaslt, gemm_lt
from lab.bench.cublaslt import Algo, Problem, library_path
from tests.lab.ledger_record import read_record


def test_the_row_major_product_is_cublas_column_major_transposed() -> None:
    # y[32, 4096] = x[32, 1024] W[4096, 1024]^T: A = W seen as 1024 x 4096 (then transposed), B = x as 1024 x 32,
    # C = y as 4096 x 32, each with its leading dimension the contiguous one
    assert Problem(32, 4096, 1024).layouts() == ((1024, 4096, 1024), (1024, 32, 1024), (4096, 32, 4096))
    assert (cublaslt.DESC_TRANSA, cublaslt.DESC_TRANSB, cublaslt.CUBLAS_OP_T) == (3, 4, 1)


def test_the_library_is_the_one_mapped_in_the_process() -> None:
    maps = (
        "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 08:01 2 /site/nvidia/cublas/lib/libcublasLt.so.13\n"
        "7f04-7f05 rw-p 00000000 00:00 0\n"
    )
    assert library_path(maps) == "/site/nvidia/cublas/lib/libcublasLt.so.13"
    with pytest.raises(RuntimeError, match="not mapped"):
        library_path("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libcublas.so.13\n")


def test_every_entry_point_called_is_typed() -> None:
    # an untyped size_t or 64-bit argument would go through ctypes as a C int
    called = set(re.findall(r"lib\.(cublasLt\w+)\(", Path(cublaslt.__file__).read_text()))
    assert called and called == set(cublaslt.SIGNATURES)
    assert len(cublaslt.SIGNATURES["cublasLtMatmul"]) == 16
    assert cublaslt.SIGNATURES["cublasLtMatmulAlgoGetHeuristic"][7] is cublaslt.ctypes.c_int


class FakeLt:
    """Three candidates: two compute x W^T (one slower), one returns zeros (a wrong layout's kind of error)."""

    def __init__(self) -> None:
        self.asked: list[tuple[Problem, torch.dtype, int]] = []

    def candidates(self, p: Problem, dtype: torch.dtype, count: int) -> list[Algo]:
        self.asked.append((p, dtype, count))
        config = {"algo": 0, "tile": 0, "splitk": 1, "stages": 0}
        return [Algo(bytes([r]), 0, 0.5, {**config, "tile": r}, r) for r in range(3)]

    def run(self, algo: Algo, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if algo.rank == 2:
            return y.zero_()
        out = F.linear(x, w)
        if algo.rank == 1:
            F.linear(x, w)  # twice the work
        return y.copy_(out)


def args(**kw) -> argparse.Namespace:
    base = {"rows": 4, "algos": 3, "screen": 3, "reps": 3, "dtype": "bfloat16", "allow_dirty": True}
    return argparse.Namespace(**{**base, **kw})


def test_a_wrong_candidate_is_left_out_and_the_fastest_is_timed_again() -> None:
    lt = FakeLt()
    row = gemm_lt.measure(lt, "o", 64, 32, args(), torch.device("cpu"), torch.bfloat16)  # type: ignore[arg-type]
    assert lt.asked == [(Problem(4, 64, 32), torch.bfloat16, 3)]
    assert row["found"] == 3 and row["screened"] == 2
    assert row["wrong"] == ["#2 algo 0 tile 2 splitK 1 stages 0"]
    assert row["best_rank"] in (0, 1) and row["best"].startswith(f"#{row['best_rank']} ")
    assert row["best_algo"] == bytes([row["best_rank"]]).hex()  # the fastest's descriptor, for running it again
    assert row["base_us"] > 0 and row["test_us"] > 0 and row["ratio"] > 0
    assert row["verdict"] in ("win", "loss", "no difference")


def test_no_usable_candidate_is_a_row_without_a_time() -> None:
    class Wrong(FakeLt):
        def run(self, algo, x, w, y):
            return y.fill_(1.0)

    row = gemm_lt.measure(Wrong(), "o", 64, 32, args(), torch.device("cpu"), torch.bfloat16)  # type: ignore[arg-type]
    assert "best" not in row and len(row["wrong"]) == 3
    text = gemm_lt.render([row], 4, "bfloat16", "cpu")
    assert "no usable candidate of 3" in text and "left out" in text


def rows() -> list[dict]:
    win = {"name": "qkv", "n": 4096, "k": 1024, "found": 9, "best": "#3 algo 66 tile 20 splitK 2 stages 8"}
    win.update(base_us=7.0, test_us=5.0, base_tbs=1.2, test_tbs=1.68, ratio=1.4, verdict="win", screened=9)
    same = {**win, "name": "o", "n": 1024, "k": 2048, "base_us": 5.0, "test_us": 4.9, "ratio": 1.02}
    same["verdict"] = "no difference"
    return [win, same, {"name": "down", "n": 1024, "k": 3072, "found": 0, "wrong": []}]


def test_the_table_counts_only_the_wins_toward_the_step() -> None:
    text = gemm_lt.render(rows(), 32, "bfloat16", "NVIDIA H100")
    assert "qkv" in text and "1.400  win" in text and "no usable candidate of 0" in text
    assert text.splitlines()[-1] == "the wins together: 2.0 us a layer, 0.056 ms a step of 28 layers"


def test_the_record_carries_each_timed_shape_ratio(tmp_path: Path) -> None:
    path = gemm_lt.record(tmp_path, rows(), args(rows=32), "python -m lab bench gemm_lt --rows 32")
    rec = read_record(path)
    assert {f["name"]: f["value"] for f in rec["figures"]} == {"qkv_ratio": 1.4, "o_ratio": 1.02}
    assert "qkv 1.40x (win)" in rec["summary"] and rec["results"]["rows"] == 32


def test_usage_errors_and_the_skip_without_a_gpu(capsys, monkeypatch) -> None:
    with pytest.raises(SystemExit) as exc:
        gemm_lt.main(["--reps", "1"])
    assert exc.value.code == 2
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gemm_lt.main([]) == 0
    assert capsys.readouterr().out.startswith("SKIP: no CUDA device")
