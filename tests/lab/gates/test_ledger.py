"""The lab's ledger writer emits schema 2: each record validates against the toolkit's model, a dirty tree is
refused without the explicit switch and recorded with it, bulky results go beside the record, and the kernel
gate records its comparator self-test. Per-case arrays go to a side file outside the repository. Real temporary git repositories; CPU only."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

import pytest
import torch

from checkers.ledger_schema import SIZE_CAP, LedgerRecord2
from engine.flags import FLAGS, FlagSnapshot
from lab.cli import main
from lab.gates import kernels, neartie, numerics
from lab.gates.ledger import MANIFEST, DirtyTreeError, RecordTooBigError, figure, write_record
from lab.gates.ledger import main as ledger_main
from lab.gates.ledger_details import join_details
from lab.gates.tokens import token_gate, token_selftest
from tests.lab.conftest import git


def _write(root: Path, **kw) -> dict:
    path = write_record(
        root / "ledger", "run", ["ENGINE-BENCH"], "python -m lab bench x", "cpu", "s", {}, root=root, **kw
    )
    data = json.loads(path.read_text())
    LedgerRecord2.model_validate(data)
    return data


def test_a_clean_tree_gives_a_clean_schema_2_record_with_every_flag(checkout: Path):
    data = _write(checkout, kind="bench", figures=[figure("tok_per_s", 12.5, "tok/s")], paths=["kernel.py"])
    head = git(checkout, "rev-parse", "HEAD").strip()
    assert (data["schema"], data["commit"], data["clean"], "diff" in data) == (2, head, True, False)
    assert data["flags"] == dict(FlagSnapshot.from_env().values) and set(data["flags"]) == set(FLAGS)
    assert data["device"] == {"name": "cpu", "driver": None, "cuda": None}
    assert data["versions"]["python"] and "torch" in data["versions"]
    assert data["figures"] == [{"name": "tok_per_s", "value": 12.5, "unit": "tok/s"}]


def test_a_snapshot_given_is_the_one_recorded(checkout: Path):
    snap = FlagSnapshot.defaults().with_(VT_EAGER=True)
    assert _write(checkout, flags=snap)["flags"]["VT_EAGER"] is True


def test_a_dirty_tree_needs_the_switch_and_is_recorded_as_dirty(checkout: Path):
    (checkout / "kernel.py").write_text("x = 2\n")
    with pytest.raises(DirtyTreeError, match="--allow-dirty"):
        _write(checkout)
    assert not (checkout / "ledger").exists()
    data = _write(checkout, allow_dirty=True)
    assert (data["clean"], data["dirty_allowed"], data["diff"]["paths"]) == (False, True, ["kernel.py"])
    assert len(data["diff"]["sha256"]) == 64


CASES = [{"name": f"attn/warp/case{i}", "max_abs": 0.001, "verdict": "pass"} for i in range(200)]


def test_per_case_arrays_go_to_a_side_file_named_by_sha256(checkout: Path, tmp_path: Path):
    results = {"self_test": "ok", "arms": {"warp/float32": {"cases": 200, "failed": 0}}, "cases": CASES}
    out = tmp_path / "out"
    path = write_record(
        checkout / "ledger", "big", ["ENGINE-BENCH"], "c", "cpu", "s", results, root=checkout, details_dir=out
    )
    data = json.loads(path.read_text())
    LedgerRecord2.model_validate(data)
    assert path.stat().st_size <= SIZE_CAP
    assert data["results"] == {"self_test": "ok", "arms": {"warp/float32": {"cases": 200, "failed": 0}}}
    side = out / f"{path.stem}.details.json"
    body = side.read_bytes()
    assert data["details"] == {"path": str(side), "sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body)}
    assert json.loads(body) == {"results.cases": CASES}
    assert sorted(p.name for p in (checkout / "ledger").iterdir()) == [path.name]  # nothing else in the ledger
    assert join_details(data) == results
    side.write_bytes(body.replace(b"0.001", b"0.002"))
    with pytest.raises(ValueError, match="is not the side file this record names"):
        join_details(data)


def test_side_files_default_outside_the_checkout(checkout: Path, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    inside = write_record(checkout / "ledger", "a", ["ENGINE-BENCH"], "c", "cpu", "s", {"cases": CASES}, root=checkout)
    assert json.loads(inside.read_text())["details"]["path"] == str(
        tmp_path / "tmp" / "ledger-details" / f"{inside.stem}.details.json"
    )
    device_out = tmp_path / "device-out"  # a device run writes its records to its output folder, which comes back
    outside = write_record(device_out, "b", ["ENGINE-BENCH"], "c", "cpu", "s", {"cases": CASES}, root=checkout)
    assert json.loads(outside.read_text())["details"]["path"] == str(
        device_out / "details" / f"{outside.stem}.details.json"
    )


def test_a_record_over_the_cap_without_arrays_to_move_is_refused(checkout: Path, tmp_path: Path):
    with pytest.raises(RecordTooBigError, match=r"bytes with its per-case arrays moved out \(cap 8192\)"):
        write_record(
            checkout / "ledger",
            "long",
            ["ENGINE-BENCH"],
            "c",
            "cpu",
            "x" * 9000,
            {"cases": CASES},
            root=checkout,
            details_dir=tmp_path / "out",
        )
    assert list((checkout / "ledger").iterdir()) == [] and not (tmp_path / "out").exists()


def test_the_kernel_gate_records_its_comparator_self_test(tmp_path: Path):
    case = next(c for c in kernels.discover() if c.row)
    rows = [{"name": case.name, "verdict": "pass", "arm": case.arm, "dtype": "float32"}]
    target = tmp_path / "gate.json"
    for problems, caught in ((numerics.self_test(), 9), (["float32: 1-ULP change at the last element ..."], 8)):
        # allow_dirty: the writer measures this checkout, which may be mid-edit while tests run
        path = kernels.write_ledger(target, [case], rows, problems, "1/1", torch.device("cpu"), ["--x"], None, True)
        data = json.loads(path.read_text())
        LedgerRecord2.model_validate(data)
        assert path == target
        assert data["comparator_selftest"] == {"seeded": numerics.SELF_TEST_SEEDED, "caught": caught}


def test_the_token_gate_writes_a_schema_2_record_with_its_self_test(tmp_path: Path, capsys):
    argv = ["gate", "tokens", "--prompt-lens", "3,5", "--max-new-tokens", "3", "--ledger", str(tmp_path)]
    assert main([*argv, "--allow-dirty"]) == 0
    [path] = tmp_path.glob("*.json")
    data = json.loads(path.read_text())
    LedgerRecord2.model_validate(data)
    assert (data["kind"], data["comparator_selftest"]) == ("gate", {"seeded": 2, "caught": 2})


def test_a_gate_record_also_names_the_rows_row_gives(tmp_path: Path, capsys):
    argv = ["gate", "tokens", "--prompt-lens", "3", "--max-new-tokens", "2", "--ledger", str(tmp_path)]
    assert main([*argv, "--row", "ENGINE-LAB", "--row", "ENGINE-GATES", "--row", "ENGINE-LAB", "--allow-dirty"]) == 0
    [path] = tmp_path.glob("*.json")
    assert json.loads(path.read_text())["rows"] == ["ENGINE-GATES", "ENGINE-LAB"]  # its own first, each once


def test_the_token_self_test_catches_every_seed_and_a_blind_comparison_none(monkeypatch):
    oracle = [[5, 6, 7], [8, 9]]
    assert token_selftest([[1], [2]], oracle) == {"seeded": 2, "caught": 2}
    assert token_gate([[1], [2]], oracle, oracle).passed
    blind = lambda prompts, ours, theirs: token_gate(prompts, theirs, theirs)  # noqa: E731 -- sees no change
    monkeypatch.setattr("lab.gates.tokens.token_gate", blind)
    assert token_selftest([[1], [2]], oracle) == {"seeded": 2, "caught": 0}


def test_the_razor_self_test_catches_the_least_likely_token_and_a_blind_classify_none(monkeypatch):
    logprobs = [torch.log_softmax(torch.tensor([[4.0, 1.0, 0.5, -3.0, 2.0, 0.0, -1.0]]), dim=-1)] * 3
    assert neartie.razor_selftest(logprobs, 0.5, 5) == {"seeded": 3, "caught": 3}
    monkeypatch.setattr(neartie, "classify", lambda lp, tok, band, top_k: {"verdict": neartie.EXACT})
    assert neartie.razor_selftest(logprobs, 0.5, 5) == {"seeded": 3, "caught": 0}


def test_a_copy_without_git_proves_its_commit_by_the_manifest(checkout: Path, tmp_path: Path):
    import shutil

    (checkout / "link").symlink_to("kernel.py")
    git(checkout, "add", "link")
    git(checkout, "commit", "-q", "-m", "link")
    assert ledger_main(["manifest", str(checkout)]) == 0
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    head = git(checkout, "rev-parse", "HEAD").strip()
    assert (_write(copy)["commit"], _write(copy)["clean"]) == (head, True)
    (copy / "kernel.py").write_text("x = 3\n")
    with pytest.raises(DirtyTreeError, match="--allow-dirty"):
        _write(copy)
    data = _write(copy, allow_dirty=True)
    assert (data["commit"], data["clean"], data["diff"]["paths"]) == (head, False, ["kernel.py"])
    (copy / MANIFEST).unlink()
    with pytest.raises(DirtyTreeError, match="not in a git checkout and no .tree-manifest.json"):
        _write(copy)


def test_a_copy_with_older_git_metadata_proves_its_commit_by_the_manifest(checkout: Path, tmp_path: Path):
    """A device's copy carries the files of a newer commit over a .git of an older one: git calls it dirty, the
    manifest written at the newer commit proves it clean; a file changed after the manifest still makes it dirty."""
    import shutil

    old = git(checkout, "rev-parse", "HEAD").strip()
    copy = tmp_path / "copy"
    shutil.copytree(checkout, copy, symlinks=True)  # git metadata at `old`
    (checkout / "kernel.py").write_text("x = 4\n")
    git(checkout, "commit", "-q", "-am", "newer")
    new = git(checkout, "rev-parse", "HEAD").strip()
    assert ledger_main(["manifest", str(checkout)]) == 0
    shutil.copy(checkout / "kernel.py", copy / "kernel.py")
    shutil.copy(checkout / MANIFEST, copy / MANIFEST)
    assert new != old and (_write(copy)["commit"], _write(copy)["clean"]) == (new, True)
    (copy / "kernel.py").write_text("x = 5\n")
    with pytest.raises(DirtyTreeError, match=f"the tree differs from {old[:12]}"):
        _write(copy)


def test_the_manifest_is_written_from_a_clean_tree_only(checkout: Path, capsys):
    (checkout / "kernel.py").write_text("x = 9\n")
    assert ledger_main(["manifest", str(checkout)]) == 1
    assert "pass --allow-dirty" in capsys.readouterr().err and not (checkout / MANIFEST).exists()
