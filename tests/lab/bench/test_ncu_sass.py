"""lab/bench/ncu_sass.py on a real SASS page: ncu 2025.3's `--page source --csv --print-source sass` of the one-pass
attention kernel on an H100 (b1, context 32768), trimmed to 16 of its 3592 instruction rows
(tests/fixtures/ncu/sass-onepass-h100.csv)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.bench import ncu_sass

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "ncu" / "sass-onepass-h100.csv"


def kernel() -> ncu_sass.Kernel:
    with FIXTURE.open(newline="") as f:
        (k,) = ncu_sass.parse(f)
    return k


def test_the_page_parses_to_one_kernel_and_its_instructions() -> None:
    k = kernel()
    assert k.name.startswith("void vt_onepass::onepass_kernel<__nv_bfloat16, (int)128>")
    assert len(k.instructions) == 16
    assert k.total("samples") == 1701
    assert abs(sum(k.stall_mix().values()) - 1.0) < 1e-9
    assert next(iter(k.stall_mix())) == "long_sb"  # the tile's data, waited on at the first P.V MMA
    assert k.top("samples", 1)[0].source.startswith("HMMA.16816.F32.BF16")


def test_the_copies_excess_sectors_are_summed_and_named() -> None:
    k = kernel()
    assert (k.total("sectors"), k.total("sectors_excess")) == (1376256, 458752)
    worst = k.top("sectors_excess", 4)
    assert len(worst) == 4 and all(i.source.startswith("LDGSTS.E.BYPASS.128") for i in worst)
    assert all((i.sectors, i.sectors_ideal) == (344064, 229376) for i in worst)


def test_the_report_prints_the_mix_the_hot_spots_and_the_sectors(tmp_path: Path, capsys) -> None:
    out = tmp_path / "s.json"
    assert ncu_sass.main([str(FIXTURE), "--top", "2", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stalls: long_sb 82.5%" in text
    assert "global sectors: 1376256, 458752 excessive (33.3%)" in text
    (summary,) = json.loads(out.read_text())
    assert summary["instructions"] == 16 and len(summary["top_excess"]) == 2


def test_a_page_without_instruction_rows_has_not_been_measured(tmp_path: Path, capsys) -> None:
    header_only = tmp_path / "h.csv"
    header_only.write_text("\n".join(FIXTURE.read_text().splitlines()[:2]) + "\n")
    assert ncu_sass.main([str(header_only)]) == 1
    assert "not measured" in capsys.readouterr().out


def test_another_page_is_refused_with_its_reason(tmp_path: Path, capsys) -> None:
    raw = tmp_path / "raw.csv"
    raw.write_text('"Kernel Name","k"\n"ID","Process ID","Metric"\n"0","1","2"\n')
    assert ncu_sass.main([str(raw)]) == 2
    assert "not a SASS page header" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        ncu_sass.main([str(tmp_path / "missing.csv")])
    assert e.value.code == 2
