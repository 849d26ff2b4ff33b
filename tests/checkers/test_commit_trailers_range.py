"""commit-trailers over a range of real commits: base resolution, cutover, exceptions, merges, squashes."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

from checkers.config import load_config
from checkers.context import Context
from checkers.preflight import check_parser, run_check
from tests.checkers.test_commit_trailers import FIXTURES, SPEC, check, findings
from tests.conftest import MINIMAL_CONFIG, ROOT, GitRepo

ROW = "\n\nRow: GOV-CORE\n"


def config(repo: GitRepo, trailers: str, top: str = "") -> None:
    repo.write({".agents/config.yaml": MINIMAL_CONFIG + top + "trailers:\n" + trailers})


def test_clean_range_passes_with_counts(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    rowgate_repo.commit("Add a" + ROW, {"a": "1"})
    head = rowgate_repo.commit("Add b" + ROW, {"b": "1"})
    config(rowgate_repo, "  presets: [row]\n")
    result = check(rowgate_repo, "--range", f"{base}..HEAD")
    assert (result.status.value, result.examined, result.summary) == (
        "pass",
        2,
        f"OK: 2 commits in {base[:12]}..{head[:12]} carry the trailer contract (row)",
    )


def test_a_failure_names_the_commit_the_rule_and_the_fix(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    bad = rowgate_repo.commit("Add a\n\nNo trailer here.\n", {"a": "1"})
    rowgate_repo.commit("Add b" + ROW, {"b": "1"})
    config(rowgate_repo, "  presets: [row]\n")
    result = check(rowgate_repo, "--range", f"{base}..HEAD")
    assert findings(result) == [("TR001", f"{bad[:12]}: no Row trailer (need at least 1)")]
    assert result.findings[0].hint == (
        "end the message with a blank line and `Row: <ROW-ID>` naming a row in .agents/rows/"
    )


def test_a_moved_base_judges_only_the_branch(rowgate_repo: GitRepo):
    fork = rowgate_repo.head()
    rowgate_repo.git("checkout", "-q", "-b", "feature")
    head = rowgate_repo.commit("Feature work" + ROW, {"f": "1"})
    rowgate_repo.git("checkout", "-q", "main")
    rowgate_repo.commit("Main moved on without a row\n", {"m": "1"})
    rowgate_repo.git("checkout", "-q", "feature")
    config(rowgate_repo, "  presets: [row]\n")
    result = check(rowgate_repo, "--base", "main")
    assert (result.status.value, result.summary) == (
        "pass",
        f"OK: 1 commits in {fork[:12]}..{head[:12]} carry the trailer contract (row)",
    )
    assert check(rowgate_repo, "--range", "main..feature").summary == result.summary


def test_unrelated_histories_missing_refs_and_bad_ranges_are_errors(rowgate_repo: GitRepo):
    rowgate_repo.git("checkout", "-q", "--orphan", "other")
    rowgate_repo.commit("Other root" + ROW, {"o": "1"})
    config(rowgate_repo, "  presets: [row]\n")
    result = check(rowgate_repo, "--range", "main..other")
    assert result.status.value == "error" and result.summary.endswith("have unrelated histories (no merge base)")
    assert result.hint == "pass a --base that shares history with HEAD"
    result = check(rowgate_repo, "--range", "nope..HEAD")
    assert (result.status.value, result.summary) == ("error", "base 'nope' does not resolve to a commit")
    result = check(rowgate_repo, "--range", "main")
    assert (result.status.value, result.summary, result.hint) == (
        "error",
        "--range 'main' is not BASE..HEAD",
        "write --range origin/main..HEAD",
    )


def test_a_shallow_clone_is_an_error_with_the_fix(rowgate_repo: GitRepo, tmp_path: Path):
    for i in range(3):
        rowgate_repo.commit(f"Change {i}" + ROW, {"c": str(i)})
    config(rowgate_repo, "  presets: [row]\n")
    rowgate_repo.commit("Configure" + ROW)
    clone = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{rowgate_repo.path}", str(clone)],
        check=True,
        capture_output=True,
        env=rowgate_repo.env,
        timeout=60,
    )
    result = check(GitRepo(clone), "--range", "HEAD~2..HEAD")
    assert (result.status.value, result.hint) == (
        "error",
        "this is a shallow clone: run git fetch --unshallow (CI: fetch-depth: 0)",
    )


def _cutover_repo(repo: GitRepo) -> tuple[str, str, str, str]:
    """Two old-style commits, then the cutover (the first commit that carries the contract), then one more."""
    base = repo.head()
    old = repo.commit("Old style\n", {"a": "1"})
    last = repo.commit("Last old style commit\n", {"b": "1"})
    cut = repo.commit("First new style commit" + ROW, {"c": "1"})
    assert last
    return base, old, cut, repo.commit("New style" + ROW, {"d": "1"})


def test_cutover_applies_the_legacy_rule_to_its_ancestors(rowgate_repo: GitRepo):
    base, old, cut, new = _cutover_repo(rowgate_repo)
    last = rowgate_repo.head(f"{cut}~1")
    config(rowgate_repo, "  presets: [row]\n")
    assert [f.message for f in check(rowgate_repo, "--range", f"{base}..HEAD").findings] == [
        f"{old[:12]}: no Row trailer (need at least 1)",
        f"{last[:12]}: no Row trailer (need at least 1)",
    ]
    result = check(rowgate_repo, "--range", f"{base}..HEAD", "--cutover", cut)
    assert (result.status.value, result.summary) == (
        "pass",
        f"OK: 4 commits in {base[:12]}..{new[:12]} carry the trailer contract (row); 2 before the cutover",
    )
    config(rowgate_repo, "  presets: [row]\n  legacy:\n    presets: [dco]\n", top=f"cutover: {cut}\n")
    assert findings(check(rowgate_repo, "--range", f"{base}..HEAD")) == [
        ("TR001", f"{old[:12]}: no Signed-off-by trailer (need at least 1)"),
        ("TR001", f"{last[:12]}: no Signed-off-by trailer (need at least 1)"),
    ]


def test_the_cutover_commit_itself_is_judged_by_the_contract(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    cut = rowgate_repo.commit("A cutover without its trailer\n", {"a": "1"})
    config(rowgate_repo, "  presets: [row]\n")
    assert findings(check(rowgate_repo, "--range", f"{base}..HEAD", "--cutover", cut)) == [
        ("TR001", f"{cut[:12]}: no Row trailer (need at least 1)")
    ]


def test_the_legacy_rule_can_require_the_marker_paragraph(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    unmarked = rowgate_repo.commit(
        "Legacy without the marker\n\nAssisted-by: Claude Code:claude-opus-4-8 [ClaudeCode]\n", {"a": "1"}
    )
    rowgate_repo.commit(
        "Legacy with the marker\n\nFOLLOWING_AGENTS_PROTOCOL\n\nAssisted-by: Claude "
        "Code:claude-opus-4-8 [ClaudeCode]\n",
        {"b": "1"},
    )
    cut = rowgate_repo.commit(
        "The cutover\n\nFOLLOWING_AGENTS_PROTOCOL\n\nFollowing-Agents-Protocol: true\nAI-Assisted: false\n", {"c": "1"}
    )
    legacy = "  legacy:\n    paragraphs: [{pattern: FOLLOWING_AGENTS_PROTOCOL, whole: true}]\n"
    config(rowgate_repo, "  presets: [agents-protocol]\n" + legacy, top=f"cutover: {cut}\n")
    assert findings(check(rowgate_repo, "--range", f"{base}..HEAD")) == [
        ("TR005", f"{unmarked[:12]}: no FOLLOWING_AGENTS_PROTOCOL paragraph before the trailer block (need exactly 1)")
    ]


def test_range_mode_compares_identities_on_the_raw_bytes(rowgate_repo: GitRepo):
    """An author and a sign-off that differ only in bytes that are not UTF-8 are two people: decoding with
    replacement characters would make them one."""
    base = rowgate_repo.head()
    tree = rowgate_repo.git("write-tree").strip()
    message = b"Signed in Latin-1\n\nRow: GOV-CORE\nSigned-off-by: Ren\xe9 <rene@example.com>\n"
    env = {k.encode(): v.encode() for k, v in rowgate_repo.env.items()}
    env.update({b"GIT_AUTHOR_NAME": b"Ren\xea", b"GIT_AUTHOR_EMAIL": b"rene@example.com"})
    sha = (
        subprocess.run(
            ["git", "commit-tree", tree, "-p", base],
            cwd=rowgate_repo.path,
            env=env,
            input=message,
            capture_output=True,
            check=True,
            timeout=60,
        )
        .stdout.decode()
        .strip()
    )
    rowgate_repo.git("update-ref", "refs/heads/main", sha)
    config(rowgate_repo, "  presets: [row, dco]\n")
    [(rule, text)] = findings(check(rowgate_repo, "--range", f"{base}..{sha}"))
    assert rule == "TR009" and text.startswith(f"{sha[:12]}: no Signed-off-by matches the author Ren")
    env[b"GIT_AUTHOR_NAME"] = b"Ren\xe9"
    same = (
        subprocess.run(
            ["git", "commit-tree", tree, "-p", base],
            cwd=rowgate_repo.path,
            env=env,
            input=message,
            capture_output=True,
            check=True,
            timeout=60,
        )
        .stdout.decode()
        .strip()
    )
    assert check(rowgate_repo, "--range", f"{base}..{same}").status.value == "pass"


def test_cutover_outside_the_range_still_marks_its_ancestors(rowgate_repo: GitRepo):
    base, old, cut, _ = _cutover_repo(rowgate_repo)
    config(rowgate_repo, "  presets: [row]\n")
    result = check(rowgate_repo, "--range", f"{base}..{old}", "--cutover", cut)
    # the one commit is legacy and no legacy rule applies: nothing was judged, which is not a pass
    assert (result.status.value, result.summary) == (
        "error",
        f"examined 0 commits: 1 of the 1 commits in {base[:12]}..{old[:12]} lie before the cutover "
        "(trailers.legacy sets no rule): nothing was verified",
    )


def test_default_range_cutover_starts_after_the_configured_cutover(rowgate_repo: GitRepo):
    _, _, cut, new = _cutover_repo(rowgate_repo)
    config(rowgate_repo, "  presets: [row]\n  default_range: cutover\n", top=f"cutover: {cut}\n")
    result = check(rowgate_repo)
    assert (result.status.value, result.summary) == (
        "pass",
        f"OK: 1 commits in {cut[:12]}..{new[:12]} carry the trailer contract (row)",
    )
    config(rowgate_repo, "  presets: [row]\n  default_range: cutover\n")
    result = check(rowgate_repo)
    assert (result.status.value, result.summary) == (
        "error",
        "trailers.default_range is cutover but no cutover is configured",
    )


def test_exceptions_are_keyed_on_sha_and_exact_error_and_printed_as_debt(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    bad = rowgate_repo.commit("Landed without a row\n", {"a": "1"})
    good = rowgate_repo.commit("Add b" + ROW, {"b": "1"})
    error = "no Row trailer (need at least 1)"
    entry = '    - sha: {}\n      error: "{}"\n      reason: landed before the gate\n'
    config(rowgate_repo, "  presets: [row]\n  exceptions:\n" + entry.format(bad, error))
    result = check(rowgate_repo, "--range", f"{base}..HEAD")
    assert result.status.value == "pass" and result.summary.endswith("; 1 exceptions are debt")
    assert result.details == [f"debt: {bad[:12]} {error} (landed before the gate) [applied]"]
    # The error text must match exactly, and an exception that matches nothing any more fails.
    config(
        rowgate_repo,
        "  presets: [row]\n  exceptions:\n" + entry.format(bad, "no Row trailer") + entry.format(good, error),
    )
    assert findings(check(rowgate_repo, "--range", f"{base}..HEAD")) == [
        ("TR001", f"{bad[:12]}: {error}"),
        ("TR011", f"{bad[:12]}: exception no longer matches an error: 'no Row trailer'"),
        ("TR011", f"{good[:12]}: exception no longer matches an error: '{error}'"),
    ]


def _merge_repo(repo: GitRepo, merge_message: str) -> tuple[str, str]:
    base = repo.head()
    repo.git("checkout", "-q", "-b", "side")
    repo.commit("Side work" + ROW, {"s": "1"})
    repo.git("checkout", "-q", "main")
    repo.commit("Main work" + ROW, {"m": "1"})
    repo.git("merge", "-q", "--no-ff", "-m", merge_message, "side")
    return base, repo.head()


def test_merge_commits_follow_the_configured_policy(rowgate_repo: GitRepo):
    base, merge = _merge_repo(rowgate_repo, "Merge branch side")
    rng = f"{base}..HEAD"
    config(rowgate_repo, "  presets: [row]\n  merges: contract\n")
    assert findings(check(rowgate_repo, "--range", rng)) == [
        ("TR001", f"{merge[:12]}: no Row trailer (need at least 1)")
    ]
    config(rowgate_repo, "  presets: [row]\n  merges: skip\n")
    result = check(rowgate_repo, "--range", rng)
    # a skipped merge is not examined: 2 of the 3 commits were judged
    assert (result.status.value, result.examined, result.summary.split("; ")[1]) == ("pass", 2, "1 merges skipped")
    config(rowgate_repo, "  presets: [row]\n  merges: forbid\n")
    assert findings(check(rowgate_repo, "--range", rng)) == [
        ("TR010", f"{merge[:12]}: merge commit with 2 parents (trailers.merges: forbid)")
    ]


def test_a_merge_commit_with_its_row_passes(rowgate_repo: GitRepo):
    base, _ = _merge_repo(rowgate_repo, "Merge branch side" + ROW)
    config(rowgate_repo, "  presets: [row]\n  merges: contract\n")
    assert check(rowgate_repo, "--range", f"{base}..HEAD").status.value == "pass"


def test_github_squash_shapes(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    rowgate_repo.commit((FIXTURES / "github-squash.txt").read_text(), {"a": "1"})
    config(rowgate_repo, "  presets: [row]\n")
    assert check(rowgate_repo, "--range", f"{base}..HEAD").status.value == "pass"
    bad = rowgate_repo.commit((FIXTURES / "github-squash-missing-row.txt").read_text(), {"b": "1"})
    assert findings(check(rowgate_repo, "--range", f"{base}..HEAD")) == [
        ("TR001", f"{bad[:12]}: no Row trailer (need at least 1)")
    ]


def test_range_mode_reads_past_a_divider_and_still_reports_it(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    text = (FIXTURES / "good-agents-protocol.txt").read_text().replace("one thing.", "one thing.\n---\nMore.")
    sha = rowgate_repo.commit(text, {"a": "1"})
    config(rowgate_repo, "  presets: [agents-protocol]\n")
    assert findings(check(rowgate_repo, "--range", f"{base}..HEAD")) == [
        (
            "TR007",
            f"{sha[:12]}: line 4 starts with `---`, git's patch divider: git am and git interpret-trailers "
            "drop everything after it",
        )
    ]


def test_dco_over_a_range_honours_the_mailmap(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    rowgate_repo.commit(
        "Add a\n\nSigned-off-by: Ada Tester <ada@example.com>\n", {"a": "1"}, author=("Ada T", "ada@old.example.com")
    )
    config(rowgate_repo, "  presets: [dco]\n")
    [(rule, message)] = findings(check(rowgate_repo, "--range", f"{base}..HEAD"))
    assert message.endswith(
        "no Signed-off-by matches the author Ada T <ada@old.example.com> (found: Ada Tester <ada@example.com>)"
    )
    rowgate_repo.write({".mailmap": "Ada Tester <ada@example.com> <ada@old.example.com>\n"})
    rowgate_repo.commit("Add the mailmap\n\nSigned-off-by: Ada Tester <ada@example.com>\n")
    # the branch's own .mailmap does not map its own identities: the base's does (none here)
    assert check(rowgate_repo, "--range", f"{base}..HEAD").status.value == "fail"
    result = check(rowgate_repo, "--range", f"{base}..HEAD")
    assert findings(result) == [(rule, message)]
    assert result.details[-1] == (
        f"this range changes .mailmap: identities were mapped through the base's .mailmap ({base[:12]}); "
        "the change applies once it is on the base"
    )
    # once the .mailmap is on the base, it maps
    with_map = rowgate_repo.head()
    rowgate_repo.commit(
        "Add b\n\nSigned-off-by: Ada Tester <ada@example.com>\n", {"b": "1"}, author=("Ada T", "ada@old.example.com")
    )
    assert check(rowgate_repo, "--range", f"{with_map}..HEAD").status.value == "pass"


def test_the_repository_own_history_passes():
    ctx = Context(root=ROOT, config=load_config(ROOT), env={}, notes=io.StringIO())
    result = run_check(SPEC, ctx, check_parser(SPEC).parse_args([]))
    assert result.status.value == "pass", result
    assert result.examined >= 6


def test_check_mailmap_maps_contacts_in_batches(rowgate_repo: GitRepo):
    from checkers.gitio import Git

    rowgate_repo.write({".mailmap": "Ada Tester <ada@example.com> <ada@old.example.com>\n"})
    contacts = [f"P{i} <p{i}@example.com>" for i in range(7)] + ["Ada <ada@old.example.com>", "no email"]
    mapped = Git(rowgate_repo.path).check_mailmap(contacts, batch=3)
    assert mapped["Ada <ada@old.example.com>"] == "Ada Tester <ada@example.com>"
    assert mapped["P6 <p6@example.com>"] == "P6 <p6@example.com>" and "no email" not in mapped
    assert len(mapped) == 8
