"""`rowgate preflight --baseline`: an upstream repository and a contributor's fork clone built with real git;
the contributor's own failure is new, the upstream's is inherited with the commit that fixed it named."""

from __future__ import annotations

import io
import json
from pathlib import Path

import jsonschema
import pytest

from checkers.baseline import identity
from checkers.results import Finding
from tests.checkers.contrib_fixture import Contrib, build, row_yaml, rowgate
from tests.checkers.test_sarif import SCHEMA, accepted


@pytest.fixture(scope="module")
def contrib(tmp_path_factory: pytest.TempPathFactory) -> Contrib:
    return build(tmp_path_factory.mktemp("contrib"))


def test_the_contributors_new_failure_alone_fails_the_run(contrib: Contrib):
    proc = rowgate("preflight", "--baseline", cwd=contrib.clone.path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    s = contrib.shas
    lines = proc.stdout.splitlines()
    assert lines[0] == (
        f"baseline: base upstream/main (detected upstream) = {s['U4'][:12]}; merge base {s['U1'][:12]}; "
        f"head {s['C1'][:12]}"
    )
    gates = [line for line in lines[2:6]]
    assert gates == [
        "FAIL  agent-record     base passes; this branch fails 1",
        "ok    live-rows        base passes; this branch passes",
        f"ok    env-doc          base fails 1; this branch fails those 1; fixed upstream since {s['U3'][:12]}: "
        "rebase onto it",
        "ok    role-discipline  base: not run (judges the branch's own commits); this branch passes",
    ]
    assert (
        "NEW       .agents/rows/GOV-CORE.yaml:7: AR003 record-dangling-reference: anchor src/missing.py does not "
        "exist in the tree"
    ) in lines
    assert (
        "INHERITED src/new.py:2: ED001 env-undocumented: VT_NEW read at src/new.py:2 is not documented in "
        "docs/ENV.md nor classified in env-allow.txt [file not touched by this branch]"
    ) in lines
    assert f"    upstream: first fixed at {s['U3'][:12]} (3 trees probed); rebase onto it" in lines
    assert lines[-1] == (
        f"NOT green: 1 new (agent-record); inherited from the base (env-doc); fixed upstream: env-doc at "
        f"{s['U3'][:12]} (only new failures count)"
    )


def test_inherited_failures_count_when_asked(contrib: Contrib):
    proc = rowgate("preflight", "--baseline", "--only", "env-doc", "--fail-on-inherited", cwd=contrib.clone.path)
    assert proc.returncode == 1, proc.stdout
    assert proc.stdout.splitlines()[2].startswith("FAIL  env-doc  base fails 1; this branch fails those 1")


def test_json_carries_the_state_of_each_finding(contrib: Contrib):
    proc = rowgate("preflight", "--baseline", "--format", "json", cwd=contrib.clone.path)
    doc = json.loads(proc.stdout)
    assert (doc["schema"], doc["exit_code"], doc["merge_base"]) == ("rowgate.baseline/1", 1, contrib.shas["U1"])
    states = {(g["check"], f["rule"], f["state"], f["file_touched"]) for g in doc["gates"] for f in g["findings"]}
    assert states == {("agent-record", "AR003", "new", True), ("env-doc", "ED001", "inherited", False)}
    env = next(g for g in doc["gates"] if g["check"] == "env-doc")
    assert env["fixed_upstream"]["commit"] == contrib.shas["U3"]
    assert env["counts"] == {"new": 0, "inherited": 1, "fixed": 0}


def test_sarif_validates_and_carries_baseline_state(contrib: Contrib):
    proc = rowgate("preflight", "--baseline", "--format", "sarif", cwd=contrib.clone.path)
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    jsonschema.Draft4Validator(SCHEMA).validate(doc)
    results = accepted(doc)
    assert sorted((r["ruleId"], r["baselineState"], r["properties"]["fileTouched"]) for r in results) == [
        ("AR003", "new", True),
        ("ED001", "unchanged", False),
    ]


def test_the_run_passes_once_the_new_failure_is_fixed_and_reports_what_the_branch_fixed(tmp_path: Path):
    c = build(tmp_path)
    anchored = row_yaml("GOV-CORE", issues="[1]", anchors="[src/ok.py]")
    c.clone.commit("Anchor to code that exists\n\nRefs #1\n", {".agents/rows/GOV-CORE.yaml": anchored})
    proc = rowgate("preflight", "--baseline", cwd=c.clone.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    u3 = c.shas["U3"][:12]
    assert proc.stdout.splitlines()[-1] == (
        f"No new failures: inherited from the base (env-doc); fixed upstream: env-doc at {u3} "
        "(--fail-on-inherited makes them count)"
    )
    documented = (c.clone.path / "docs/ENV.md").read_text() + "| `VT_NEW` | new |\n"
    c.clone.commit("Document VT_NEW here too\n\nRefs #1\n", {"docs/ENV.md": documented})
    proc = rowgate("preflight", "--baseline", cwd=c.clone.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert "ok    env-doc          base fails 1; this branch passes (fixes 1)" in lines
    assert (
        "FIXED     src/new.py:2: ED001 env-undocumented: VT_NEW read at src/new.py:2 is not documented in "
        "docs/ENV.md nor classified in env-allow.txt [file not touched by this branch]"
    ) in lines
    assert lines[-1] == "No new failures: the branch adds none; the branch fixes 1 the base has"
    sarif = json.loads(rowgate("preflight", "--baseline", "--format", "sarif", cwd=c.clone.path).stdout)
    jsonschema.Draft4Validator(SCHEMA).validate(sarif)
    assert [r["baselineState"] for r in sarif["runs"][0]["results"]] == ["absent"]


def test_the_base_tree_is_written_from_the_object_store_without_running_filters(tmp_path: Path):
    c = build(tmp_path)
    c.upstream.commit("Filter\n\nRow: GOV-CORE\n", {".gitattributes": "*.py filter=evil\n"})
    c.clone.git("fetch", "-q", "upstream")
    c.clone.git("rebase", "-q", "upstream/main")
    witness = tmp_path / "filter-ran"  # the clone's config names a program for the filter the base's tree uses
    c.clone.git("config", "filter.evil.smudge", f"touch {witness}; cat")
    c.clone.git("config", "filter.evil.process", f"touch {witness}")
    proc = rowgate("preflight", "--baseline", "--only", "env-doc", cwd=c.clone.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not witness.exists()
    assert c.clone.git("worktree", "list", "--porcelain").count("worktree ") == 1  # the temporary one is gone


def test_identity_ignores_lines_and_shas_but_not_commits_or_paths():
    a = Finding("ED001", "env-undocumented", "VT_X read at src/a.py:2 (commit 0123abcd)", "src/a.py", 2)
    b = Finding("ED001", "env-undocumented", "VT_X read at src/a.py:40 (commit 89abcdef)", "src/a.py", 40)
    assert identity(a) == identity(b)
    assert identity(a) != identity(a._replace(path="src/b.py"))
    assert identity(a) != identity(a._replace(commit="f" * 40))
    assert identity(a) != identity(a._replace(message="VT_Y read at src/a.py:2"))
    assert identity(a._replace(message="a defaced row")) != identity(a._replace(message="a effaced row"))


def test_a_branch_with_no_commits_of_its_own(tmp_path: Path):
    """The commit gates have nothing to judge there: a skip that says so, not an error of the branch's."""
    c = build(tmp_path)
    c.clone.git("reset", "-q", "--hard", "upstream/main")
    proc = rowgate("preflight", "--baseline", cwd=c.clone.path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "SKIP  role-discipline  base: not run (judges the branch's own commits); this branch skips: the branch "
        "has no commits of its own (head is the merge base)"
    ) in proc.stdout.splitlines()
    assert proc.stdout.splitlines()[-1] == "No new failures: the branch adds none and the base has none"


def test_sarif_of_a_new_commit_level_finding_points_at_the_config(tmp_path: Path):
    """A pending commit that names nothing: RD004 on the commit, new, anchored where plain SARIF anchors it."""
    c = build(tmp_path)
    c.clone.git("reset", "-q", "--hard", "upstream/main")
    sha = c.clone.commit("Nothing named\n", {"README.md": "x\n"})
    proc = rowgate("preflight", "--baseline", "--format", "sarif", cwd=c.clone.path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [result] = accepted(json.loads(proc.stdout))
    location = result["locations"][0]
    assert (result["ruleId"], result["baselineState"]) == ("RD004", "new")
    assert location["physicalLocation"]["artifactLocation"]["uri"] == ".agents/config.yaml"
    assert location["logicalLocations"][0]["name"] == sha


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--fail-on-inherited"], "rowgate: --fail-on-inherited needs --baseline\n"),
        (["--baseline", "--format", "junit"], "rowgate: --baseline writes text, json or sarif, not junit\n"),
        (["--baseline", "main", "--base", "main"], "rowgate: give the base once: --baseline REF or --base REF\n"),
    ],
)
def test_usage_errors(contrib: Contrib, args: list[str], message: str):
    proc = rowgate("preflight", *args, cwd=contrib.clone.path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message)


def test_the_fix_search_says_when_its_probe_bound_stopped_it(contrib: Contrib):
    from checkers.baseline import run_baseline
    from checkers.config import load_config
    from checkers.context import Context

    root = contrib.clone.path
    ctx = Context(root=root, config=load_config(root), env={}, notes=io.StringIO())
    report = run_baseline(ctx, None, ["env-doc"], max_probes=2)
    [gate] = report.gates
    s = contrib.shas
    assert (gate.fixed_by, gate.fixed_note) == (
        s["U3"],
        f"fixed by {s['U3'][:12]} or an earlier commit after the merge base (probe bound 2 reached)",
    )
    report = run_baseline(ctx, None, ["env-doc"], max_probes=0)
    assert (report.gates[0].fixed_by, report.gates[0].fixed_note) == (None, None)
