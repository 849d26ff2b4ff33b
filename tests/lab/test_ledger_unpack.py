"""lab/gates/ledger_unpack.py: a device call's records into the ledger, each distinct record once, under a free name,
nothing but records read from the archive and nothing written where the archive's names say."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from lab.gates import ledger_unpack


def _record(summary: str, commit: str = "a" * 40) -> bytes:
    return (json.dumps({"schema": 2, "commit": commit, "clean": True, "summary": summary}, indent=1) + "\n").encode()


def _archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return path


def test_each_distinct_record_lands_once_under_a_free_name(tmp_path: Path, capsys) -> None:
    into = tmp_path / "ledger"
    into.mkdir()
    (into / "2026-12-06-decode-step.json").write_bytes(_record("an earlier call"))
    (into / "2026-12-06-kept-renamed.json").write_bytes(_record("already here"))  # an earlier unpack renamed it
    new, same = _record("b8 step 1.9 ms"), _record("already here")
    archive = _archive(
        tmp_path / "records.tgz",
        {
            "./ledger/2026-12-06-decode-step.json": new,
            "./perf/ledger/2026-12-06-decode-step.json": new,  # the phase's copy of the same record
            "./ledger/2026-12-06-kept.json": same,
            "./ledger/details/2026-12-06-decode-step.details.json": b"[1, 2, 3]",  # a side file, not a record
            "./ledger/notes.json": b'{"schema": 1}',  # JSON, not a schema-2 record
            "./logs/2026-12-06-x.json": _record("outside a ledger folder"),
            "../../ledger/escape.json": _record("a name that climbs out"),
            "./ledger/../../x.json": _record("not directly in a ledger folder"),
        },
    )
    assert ledger_unpack.main([str(archive), "--into", str(into)]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in into.iterdir()) == [
        "2026-12-06-decode-step-2.json",
        "2026-12-06-decode-step.json",
        "2026-12-06-kept-renamed.json",
        "escape.json",  # its record lands inside the ledger, under its base name only
    ]
    assert (into / "2026-12-06-decode-step-2.json").read_bytes() == new
    assert (into / "2026-12-06-decode-step.json").read_bytes() == _record("an earlier call")  # never overwritten
    assert "already in the ledger: 2026-12-06-kept.json (as 2026-12-06-kept-renamed.json)" in out
    assert not (tmp_path.parent / "escape.json").exists()


def test_a_dry_run_writes_nothing_and_an_archive_without_records_fails(tmp_path: Path, capsys) -> None:
    into = tmp_path / "ledger"
    archive = _archive(tmp_path / "r.tgz", {"./ledger/2026-12-06-a.json": _record("one")})
    assert ledger_unpack.main([str(archive), "--into", str(into), "--dry-run"]) == 0
    assert "would add 2026-12-06-a.json" in capsys.readouterr().out and not list(into.iterdir())
    empty = _archive(tmp_path / "e.tgz", {"./logs.txt": b"no records"})
    assert ledger_unpack.main([str(empty), "--into", str(into)]) == 1
    (tmp_path / "bad.tgz").write_bytes(b"not gzip")
    assert ledger_unpack.main([str(tmp_path / "bad.tgz"), "--into", str(into)]) == 2
    assert "not a readable archive" in capsys.readouterr().err
