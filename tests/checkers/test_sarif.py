"""SARIF that every consumer accepts: valid against the SARIF 2.1.0 schema, and within GitHub code
scanning's upload requirements (every result has a physical location with a repository-relative URI,
rules carry descriptions and help, the documented size limits), for failing range, hook and tree checks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.conftest import GIT_ENV, ROOT, GitRepo, init_repo

SCHEMA = json.loads((ROOT / "tests/fixtures/sarif/sarif-schema-2.1.0.json").read_text())
SIGNED = "\n\nSigned-off-by: Ada Tester <ada@example.com>\n"
# GitHub code scanning's documented limits on an uploaded file
MAX_RUNS, MAX_RESULTS, MAX_RULES, MAX_LOCATIONS = 20, 25_000, 25_000, 1_000


def sarif(*args: str, cwd: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "checkers", *args, "--format", "sarif"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_ENV},
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # every case below fails
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def accepted(doc: dict[str, Any], root: Path | None = None) -> list[dict[str, Any]]:
    """Validate against the schema and code scanning's requirements; return the results. With `root`, every
    location must name a file that exists there, and every result carry a fingerprint."""
    jsonschema.Draft4Validator(SCHEMA).validate(doc)
    assert doc["version"] == "2.1.0" and 1 <= len(doc["runs"]) <= MAX_RUNS
    results = []
    for run in doc["runs"]:
        rules = run["tool"]["driver"]["rules"]
        assert len(rules) <= MAX_RULES and len(run["results"]) <= MAX_RESULTS
        ids = [r["id"] for r in rules]
        for rule in rules:
            assert rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["text"]
        for result in run["results"]:
            assert result["ruleId"] in ids and ids[result["ruleIndex"]] == result["ruleId"]
            assert result["message"]["text"]
            assert 1 <= len(result["locations"]) <= MAX_LOCATIONS, result
            for loc in result["locations"]:
                uri = loc["physicalLocation"]["artifactLocation"]["uri"]
                assert uri and not uri.startswith("/") and not re.match(r"^[a-z][a-z0-9+.-]*:", uri), uri
                if root is not None:
                    assert (root / uri).is_file(), uri
                    assert result["partialFingerprints"]["rowgate/v1"]
                if "region" in loc["physicalLocation"]:
                    assert loc["physicalLocation"]["region"]["startLine"] >= 1
            results.append(result)
    assert results, "a failing check must report results"
    return results


@pytest.fixture
def unsigned(tmp_path: Path) -> GitRepo:
    repo = init_repo(tmp_path / "repo")
    repo.commit("Start" + SIGNED, {"README.md": "x\n"})
    repo.commit("Unsigned one\n", {"a.txt": "a\n"})
    repo.commit("Unsigned two\n", {"b.txt": "b\n"})
    return repo


def test_without_a_config_a_commit_finding_points_at_a_file_its_commit_changes(unsigned: GitRepo):
    unsigned.commit("Unsigned and empty\n")  # changes no file: the first tracked file instead
    doc = sarif("check", "commit-trailers", "--preset", "dco", "--range", "HEAD~3..HEAD", cwd=unsigned.path)
    results = accepted(doc, unsigned.path)
    assert [r["ruleId"] for r in results] == ["TR001", "TR001", "TR001"]
    shas = [unsigned.head("HEAD~2"), unsigned.head("HEAD~1"), unsigned.head()]
    for result, sha, uri in zip(results, shas, ["a.txt", "b.txt", "README.md"]):
        [loc] = result["locations"]
        assert loc["physicalLocation"] == {"artifactLocation": {"uri": uri, "uriBaseId": "%SRCROOT%"}}
        assert loc["logicalLocations"] == [{"name": sha, "fullyQualifiedName": f"commit/{sha}", "kind": "resource"}]
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert {r["helpUri"].rsplit("/", 1)[1] for r in rules} == {"commit-trailers.md"}  # every rule of the check
    [rule] = [r for r in rules if r["id"] == "TR001"]
    assert "[docs/checks/commit-trailers.md](" in rule["help"]["markdown"]


def test_fingerprints_are_unique_per_rule_and_commit_and_stable(unsigned: GitRepo):
    unsigned.write({".agents/config.yaml": "version: 1\ntrailers:\n  presets: [dco]\n"})
    unsigned.commit("Two bad keys\n\nRow: x\nSigned-off-by: nobody\nSigned-off-by: also nobody\n")
    args = ("check", "commit-trailers", "--range", "HEAD~3..HEAD")
    first = accepted(sarif(*args, cwd=unsigned.path), unsigned.path)
    prints = [r["partialFingerprints"]["rowgate/v1"] for r in first]
    assert len(set(prints)) == len(prints) == len(first)
    pairs = [(r["ruleId"], r["locations"][0]["logicalLocations"][0]["name"]) for r in first]
    repeated = [p for p in prints if ":" in p]  # a second finding of one rule on one commit
    assert len(repeated) == len(pairs) - len(set(pairs))
    again = accepted(sarif(*args, cwd=unsigned.path), unsigned.path)
    assert [r["partialFingerprints"] for r in again] == [r["partialFingerprints"] for r in first]


def test_a_failing_range_check_points_at_the_config_line_of_its_rule(unsigned: GitRepo):
    unsigned.write({".agents/config.yaml": "version: 1\n# the contract\ntrailers:\n  merges: skip\n  presets: [dco]\n"})
    results = accepted(sarif("check", "commit-trailers", "--range", "HEAD~2..HEAD", cwd=unsigned.path))
    for result in results:
        assert result["locations"][0]["physicalLocation"] == {
            "artifactLocation": {"uri": ".agents/config.yaml", "uriBaseId": "%SRCROOT%"},
            "region": {"startLine": 5},
        }
    unsigned.write(
        {".agents/config.yaml": "version: 1\npr_size:\n  classes:\n    - {name: all, paths: ['**'], budget: 1}\n"}
    )
    budget = accepted(sarif("check", "pr-size", "--base", "HEAD~2", cwd=unsigned.path))
    assert [r["ruleId"] for r in budget] == ["PS002"]  # a class-level finding, no file of its own
    assert budget[0]["locations"][0]["physicalLocation"]["region"] == {"startLine": 3}


def test_a_pyproject_config_anchors_at_its_table(unsigned: GitRepo):
    unsigned.write({"pyproject.toml": "[project]\nname = 'x'\n\n[tool.rowgate.trailers]\npresets = ['dco']\n"})
    results = accepted(sarif("preflight", "--only", "commit-trailers", "--base", "HEAD~2", cwd=unsigned.path))
    assert {json.dumps(r["locations"][0]["physicalLocation"]) for r in results} == {
        json.dumps(
            {"artifactLocation": {"uri": "pyproject.toml", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 4}}
        )
    }


def test_a_hook_finding_points_at_the_message_file(unsigned: GitRepo):
    (unsigned.path / ".git" / "COMMIT_EDITMSG").write_text("Add x\n\nRow: nope\n")
    results = accepted(
        sarif("check", "commit-trailers", "--preset", "dco", "--message-file", ".git/COMMIT_EDITMSG", cwd=unsigned.path)
    )
    assert [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results] == [
        ".git/COMMIT_EDITMSG"
    ]
    assert "logicalLocations" not in results[0]["locations"][0]


def test_the_schema_oracle_can_fail():
    doc = {"version": "2.1.0", "runs": [{"tool": {"driver": {"name": "x"}}, "results": [{"message": {}}]}]}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(SCHEMA).validate(doc)
    doc = {
        "version": "2.1.0",
        "runs": [
            {"tool": {"driver": {"name": "x", "rules": []}}, "results": [{"ruleId": "X1", "message": {"text": "m"}}]}
        ],
    }
    with pytest.raises((AssertionError, KeyError)):
        accepted(doc)  # schema-valid, but code scanning rejects a result without a location
