"""Committed goldens (sha256-checked) and `gate regen`, which rewrites them only under the near-tie bar."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import torch

import engine.ops.rope as rope_ops
from checkers.ledger_schema import LedgerRecord2
from engine.flags import FlagSnapshot
from lab.gates import goldens as gold
from lab.gates import harness
from lab.gates.harness import Setup
from lab.gates.ledger import write_record
from lab.gates.result import FAIL, PASS

COMMITTED = sorted(gold.GOLDENS_DIR.glob("*.json"))


def test_goldens_are_committed() -> None:
    assert [p.name for p in COMMITTED] == [
        "tiny-qwen3-bfloat16-cpu.json",
        "tiny-qwen3-bfloat16-cuda.json",
        "tiny-qwen3-float32-cpu.json",
    ]


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.name)
def test_engine_reproduces_committed_goldens(path: Path) -> None:
    if json.loads(path.read_text())["device"] == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"no CUDA device: {path.name} was recorded on one")
    result = harness.check_golden(path)
    assert result.verdict == PASS, result.render()


def test_a_hand_edited_golden_fails_its_sha256(tmp_path) -> None:
    case = json.loads(COMMITTED[-1].read_text())
    case["tokens"][1][3] += 1
    bad = tmp_path / "edited.json"
    bad.write_text(json.dumps(case))
    with pytest.raises(ValueError, match=r"edited.json: sha256 .* does not match its contents"):
        gold.read_golden(bad)


def test_golden_gate_fails_on_different_ids(tmp_path) -> None:
    case = json.loads(COMMITTED[-1].read_text())
    case["tokens"][2][5] = (case["tokens"][2][5] + 1) % 512
    path = tmp_path / "other.json"
    gold.write_golden(
        path, gold.make_golden(*(case[k] for k in ("model", "dtype", "device", "max_new_tokens", "prompts", "tokens")))
    )
    result = harness.check_golden(path)
    assert result.verdict == FAIL
    assert result.table[2]["first_divergence"] == 5


def test_regen_writes_the_golden_and_a_ledger_record(tiny_model_dir, tmp_path) -> None:
    setup = Setup(tiny_model_dir, [[3, 1, 4], [1, 5, 9, 2, 6]], 5)
    path = tmp_path / "goldens" / "t.json"
    command = "python -m lab gate regen"
    result, record = harness.regen(path, setup, "tiny-qwen3", 0.5, 5, tmp_path / "ledger", command, allow_dirty=True)
    assert result.verdict == PASS and record is not None
    case = gold.read_golden(path)
    assert case["tokens"] == setup.ours() and case["prompts"] == setup.prompts
    entry = json.loads(record.read_text())
    valid = LedgerRecord2.model_validate(entry)  # the toolkit's schema 2
    assert (valid.kind, valid.rows, valid.device.name, valid.flags == dict(FlagSnapshot.from_env().values)) == (
        "gate",
        ["ENGINE-GATES"],
        "cpu",
        True,
    )
    assert entry["results"]["sha256"] == case["sha256"]
    assert record.name == f"{entry['date']}-regen-t.json"


def test_regen_refuses_when_the_near_tie_gate_fails(tiny_model_dir, tmp_path, monkeypatch) -> None:
    setup = Setup(tiny_model_dir, [[3, 1, 4], [1, 5, 9, 2, 6]], 5)
    path = tmp_path / "t.json"
    monkeypatch.setattr(rope_ops, "apply_rope_neox", lambda x, cos, sin: x)  # RoPE dropped
    result, record = harness.regen(path, setup, "tiny-qwen3", 0.5, 5, tmp_path / "ledger", "regen")
    assert result.verdict == FAIL and record is None
    assert not path.exists() and not (tmp_path / "ledger").exists()


def test_ledger_never_overwrites(tmp_path) -> None:
    day = dt.date(2026, 1, 2)
    a = write_record(tmp_path, "x", ["ENGINE-GATES"], "c", "cpu", "s", {}, day, allow_dirty=True)
    b = write_record(tmp_path, "x", ["ENGINE-GATES"], "c", "cpu", "s", {}, day, allow_dirty=True)
    assert (a.name, b.name) == ("2026-01-02-x.json", "2026-01-02-x-2.json")


def test_oracle_decodes_plain_greedy_whatever_generation_config_says(tiny_model_dir, tmp_path) -> None:
    import shutil

    from lab.gates.oracle import Oracle

    d = shutil.copytree(tiny_model_dir, tmp_path / "m")
    prompt = [1, 2, 3]
    plain = Oracle(d).greedy(prompt, 12)
    gen_config = json.loads((d / "generation_config.json").read_text())
    gen_config.update(eos_token_id=plain[3], repetition_penalty=3.0, do_sample=True, top_k=3)
    (d / "generation_config.json").write_text(json.dumps(gen_config))
    assert Oracle(d).greedy(prompt, 12) == plain


def test_head_sha_marks_a_tree_that_differs_from_head(tmp_path) -> None:
    import subprocess

    from lab.gates.ledger import head_sha

    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "first")
    clean = head_sha(tmp_path)
    assert clean is not None and len(clean) == 40
    (tmp_path / "untracked.txt").write_text("x\n")  # untracked files do not make a record's tree differ
    assert head_sha(tmp_path) == clean
    (tmp_path / "a.txt").write_text("two\n")
    assert head_sha(tmp_path) == clean + "-dirty"
    assert head_sha(None) is None
