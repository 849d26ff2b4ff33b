"""commit-trailers over one message: every preset rule and general rule has a seeded violation that fails
with exactly its id and message, and a clean twin that passes. Range mode is in test_commit_trailers_range.py."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from checkers import registry
from checkers.config import load_config
from checkers.context import Context
from checkers.preflight import check_parser, run_check
from checkers.results import RecordError, Result
from checkers.trailers.presets import DCO_FIX
from tests.conftest import MINIMAL_CONFIG, ROOT, GitRepo

SPEC = registry.get("commit-trailers")
FIXTURES = ROOT / "tests" / "fixtures" / "trailers"
AUTHOR = "Ada Tester <ada@example.com>"


def check(repo: GitRepo, *argv: str, env: dict[str, str] | None = None) -> Result:
    ctx = Context(root=repo.path, config=load_config(repo.path), env=env or {}, notes=io.StringIO())
    return run_check(SPEC, ctx, check_parser(SPEC).parse_args(list(argv)))


def check_file(repo: GitRepo, name: str, *argv: str) -> Result:
    return check(repo, "--filled", "--author", AUTHOR, *argv, "--message-file", str(FIXTURES / name))


def findings(result: Result) -> list[tuple[str, str]]:
    assert result.status.value == "fail", result
    return [(f.rule, f.message) for f in result.findings]


# --- row --------------------------------------------------------------------------------------------


def test_row_clean_message_passes(rowgate_repo: GitRepo):
    result = check_file(rowgate_repo, "good-row.txt", "--preset", "row")
    assert (result.status.value, result.examined, result.summary) == (
        "pass",
        1,
        f"OK: {FIXTURES / 'good-row.txt'} carries the trailer contract (row)",
    )


@pytest.mark.parametrize(
    "name,expected",
    [
        ("missing-row.txt", [("TR001", "no Row trailer (need at least 1)")]),
        ("row-outside-block.txt", [("TR001", "no Row trailer (need at least 1)")]),
        ("bad-row-value.txt", [("TR003", "Row: 'gov-core' does not match '[A-Z][A-Z0-9]*(-[A-Z0-9]+)+'")]),
        ("unknown-row.txt", [("TR008", "Row: GOV-NOPE names nothing (.agents/rows/GOV-NOPE.yaml does not exist)")]),
        ("placeholder-row.txt", [("TR012", "Row: <ROW-ID> is the template placeholder")]),
    ],
)
def test_row_rules(rowgate_repo: GitRepo, name: str, expected: list[tuple[str, str]]):
    assert findings(check_file(rowgate_repo, name, "--preset", "row")) == expected


def test_a_row_file_that_is_a_symlink_out_of_the_repository_names_nothing(rowgate_repo: GitRepo, tmp_path: Path):
    outside = tmp_path / "GOV-OUT.yaml"
    outside.write_text("id: GOV-OUT\n")
    (rowgate_repo.path / ".agents/rows/GOV-OUT.yaml").symlink_to(outside)
    (tmp_path / "MSG").write_text("Work\n\nRow: GOV-OUT\n")
    result = check(rowgate_repo, "--preset", "row", "--message-file", str(tmp_path / "MSG"))
    assert findings(result) == [("TR008", "Row: GOV-OUT names nothing (.agents/rows/GOV-OUT.yaml does not exist)")]


def test_a_row_line_outside_the_block_gets_a_hint_with_its_line(rowgate_repo: GitRepo):
    [f] = check_file(rowgate_repo, "row-outside-block.txt", "--preset", "row").findings
    assert f.hint.startswith("line 3 `Row:` is not in the trailer block (git reads only the last paragraph")
    assert f.path == str(FIXTURES / "row-outside-block.txt")


def test_template_placeholder_passes_without_filled(rowgate_repo: GitRepo):
    result = check(rowgate_repo, "--preset", "row", "--message-file", str(FIXTURES / "placeholder-row.txt"))
    assert result.status.value == "pass"


# --- dco --------------------------------------------------------------------------------------------


def test_dco_clean_message_passes(rowgate_repo: GitRepo):
    assert check_file(rowgate_repo, "good-signoff.txt", "--preset", "dco").status.value == "pass"


@pytest.mark.parametrize(
    "name,expected",
    [
        ("missing-signoff.txt", [("TR001", "no Signed-off-by trailer (need at least 1)")]),
        (
            "signoff-not-author.txt",
            [
                (
                    "TR009",
                    "no Signed-off-by matches the author Ada Tester <ada@example.com> "
                    "(found: Bob Other <bob@example.com>)",
                )
            ],
        ),
        (
            "signoff-old-email.txt",
            [
                (
                    "TR009",
                    "no Signed-off-by matches the author Ada Tester <ada@example.com> "
                    "(found: Ada Tester <ada@old.example.com>)",
                )
            ],
        ),
    ],
)
def test_dco_rules(rowgate_repo: GitRepo, name: str, expected: list[tuple[str, str]]):
    assert findings(check_file(rowgate_repo, name, "--preset", "dco")) == expected


def test_dco_honours_the_mailmap(rowgate_repo: GitRepo):
    rowgate_repo.write({".mailmap": "Ada Tester <ada@example.com> <ada@old.example.com>\n"})
    assert check_file(rowgate_repo, "signoff-old-email.txt", "--preset", "dco").status.value == "pass"


def test_dco_asks_the_mailmap_once_for_each_distinct_identity(rowgate_repo: GitRepo, monkeypatch):
    """A range repeats the same sign-offs: the check maps each distinct value once, in one call, and a
    message file maps its author beside its values."""
    from checkers.gitio import Git

    asked: list[list[str]] = []
    real = Git.check_mailmap
    monkeypatch.setattr(Git, "check_mailmap", lambda self, contacts: asked.append(contacts) or real(self, contacts))
    base = rowgate_repo.head()
    for i in range(5):
        rowgate_repo.commit(f"Change {i}\n\nWhy.\n\nRow: GOV-CORE\nSigned-off-by: {AUTHOR}\n", {"c": str(i)})
    assert check(rowgate_repo, "--preset", "dco", "--range", f"{base}..HEAD").status.value == "pass"
    assert len(asked) == 1 and sorted(asked[0]) == sorted(["GOV-CORE", AUTHOR])
    asked.clear()
    assert check_file(rowgate_repo, "good-signoff.txt", "--preset", "dco").status.value == "pass"
    assert len(asked) == 1 and asked[0][0] == AUTHOR and AUTHOR in asked[0][1:]


def test_dco_author_comes_from_the_hook_environment(rowgate_repo: GitRepo):
    env = {"GIT_AUTHOR_NAME": "Bob Other", "GIT_AUTHOR_EMAIL": "bob@example.com"}
    msg = str(FIXTURES / "signoff-not-author.txt")
    assert check(rowgate_repo, "--preset", "dco", "--message-file", msg, env=env).status.value == "pass"
    assert findings(check(rowgate_repo, "--preset", "dco", "--message-file", msg)) == [
        ("TR009", "cannot tell who the author is, so no Signed-off-by can be matched")
    ]


# --- agents-protocol ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["good-agents-protocol.txt", "good-agents-protocol-unassisted.txt", "agents-coauthor-noreply-exempt.txt"]
)
def test_agents_protocol_clean_messages_pass(rowgate_repo: GitRepo, name: str):
    assert check_file(rowgate_repo, name, "--preset", "agents-protocol").status.value == "pass"


NO_PARAGRAPH = ("TR005", "no FOLLOWING_AGENTS_PROTOCOL paragraph before the trailer block (need exactly 1)")


@pytest.mark.parametrize(
    "name,expected",
    [
        ("agents-missing-paragraph.txt", [NO_PARAGRAPH]),
        ("agents-paragraph-twice.txt", [("TR005", "2 FOLLOWING_AGENTS_PROTOCOL paragraphs (need exactly 1)")]),
        (
            "agents-paragraph-in-block.txt",
            [NO_PARAGRAPH, ("TR006", "FOLLOWING_AGENTS_PROTOCOL is inside the trailer block")],
        ),
        ("agents-protocol-twice.txt", [("TR002", "2 Following-Agents-Protocol trailers (at most 1)")]),
        ("agents-protocol-false.txt", [("TR003", "Following-Agents-Protocol: 'false' does not match 'true'")]),
        ("agents-ai-assisted-missing.txt", [("TR001", "no AI-Assisted trailer (need at least 1)")]),
        (
            "agents-assisted-true-without-assisted-by.txt",
            [("TR001", "no Assisted-by trailer with AI-Assisted: true (need at least 1)")],
        ),
        (
            "agents-assisted-false-with-assisted-by.txt",
            [("TR002", "1 Assisted-by trailer with AI-Assisted: false (at most 0)")],
        ),
        (
            "agents-assisted-by-malformed.txt",
            [
                (
                    "TR003",
                    "Assisted-by: 'Helper' does not match '[^\\\\s:\\\\[\\\\]]+:[^\\\\s\\\\[\\\\]]+( \\\\[[^\\\\[\\\\]]+\\\\])+'",
                )
            ],
        ),
        ("agents-signoff-ai.txt", [("TR004", "Signed-off-by: Claude <noreply@anthropic.com> names an AI (Claude)")]),
        (
            "agents-coauthor-declared.txt",
            [("TR004", "Co-authored-by: Helper <helper@example.com> names Helper, declared in Assisted-by")],
        ),
        (
            "agents-signoff-noreply-not-exempt.txt",
            [("TR004", "Signed-off-by: Copilot <175728472+Copilot@users.noreply.github.com> names an AI (Copilot)")],
        ),
        ("agents-placeholder.txt", [("TR012", "Assisted-by: AGENT:MODEL [TOOL] is the template placeholder")]),
        # In a hook the divider cuts the message, trailers and all: every lost rule is reported with it.
        (
            "agents-divider-in-body.txt",
            [
                ("TR001", "no Following-Agents-Protocol trailer (need at least 1)"),
                ("TR001", "no AI-Assisted trailer (need at least 1)"),
                NO_PARAGRAPH,
                (
                    "TR007",
                    "line 4 starts with `---`, git's patch divider: git am and git interpret-trailers drop "
                    "everything after it",
                ),
            ],
        ),
    ],
)
def test_agents_protocol_rules(rowgate_repo: GitRepo, name: str, expected: list[tuple[str, str]]):
    assert findings(check_file(rowgate_repo, name, "--preset", "agents-protocol")) == expected


def test_divider_finding_names_its_line_and_the_fix(rowgate_repo: GitRepo):
    f = check_file(rowgate_repo, "agents-divider-in-body.txt", "--preset", "agents-protocol").findings[-1]
    assert (f.rule, f.line, f.hint) == ("TR007", 4, "use `***` for a separator line (or indent it)")


# --- general rules from the config ------------------------------------------------------------------

GENERAL = """\
version: 1
rows:
  areas: [GOV]
trailers:
  paragraphs:
    - pattern: "Why: .+"
      min: 1
      max: 1
  keys:
    - key: Reviewed-by
      min: 1
      max: 2
      pattern: ".+ <[^@ ]+@[^@ ]+>"
  forbid:
    - keys: [Reviewed-by]
      pattern: "@bots\\\\.example"
      exempt:
        - key: Reviewed-by
          pattern: "^Trusted Bot "
"""


@pytest.mark.parametrize(
    "message,expected",
    [
        ("T\n\nWhy: it helps.\n\nReviewed-by: A <a@x.org>\n", []),
        ("T\n\nWhy: it helps.\n\nReviewed-by: Trusted Bot <t@bots.example>\n", []),
        (
            "T\n\nBecause.\n\nReviewed-by: A <a@x.org>\n",
            [("TR005", "no Why: .+ paragraph before the trailer block (need exactly 1)")],
        ),
        ("T\n\nWhy: a\n\nWhy: b\n\nReviewed-by: A <a@x.org>\n", [("TR005", "2 Why: .+ paragraphs (need exactly 1)")]),
        ("T\n\nWhy: it helps.\n\nAcked-by: A <a@x.org>\n", [("TR001", "no Reviewed-by trailer (need at least 1)")]),
        (
            "T\n\nWhy: x\n\nReviewed-by: A <a@x.org>\nReviewed-by: B <b@x.org>\nreviewed-by: C <c@x.org>\n",
            [("TR002", "3 Reviewed-by trailers (at most 2)")],
        ),
        ("T\n\nWhy: x\n\nReviewed-by: A\n", [("TR003", "Reviewed-by: 'A' does not match '.+ <[^@ ]+@[^@ ]+>'")]),
        (
            "T\n\nWhy: x\n\nReviewed-by: R2 <r2@bots.example>\n",
            [("TR004", "Reviewed-by: R2 <r2@bots.example> names a forbidden identity (@bots.example)")],
        ),
    ],
)
def test_general_rules_from_the_config(
    rowgate_repo: GitRepo, tmp_path: Path, message: str, expected: list[tuple[str, str]]
):
    rowgate_repo.write({".agents/config.yaml": GENERAL})
    path = tmp_path / "MSG"
    path.write_text(message)
    result = check(rowgate_repo, "--message-file", str(path))
    if expected:
        assert findings(result) == expected
    else:
        assert (result.status.value, result.summary) == (
            "pass",
            f"OK: {path} carries the trailer contract (configured rules)",
        )


def test_bad_input_is_an_error_with_the_fix(rowgate_repo: GitRepo, tmp_path: Path):
    result = check(rowgate_repo, "--preset", "row", "--message-file", str(tmp_path / "nope"))
    assert (result.status.value, result.summary, result.hint) == (
        "error",
        f"--message-file {tmp_path / 'nope'}: No such file or directory",
        "pass the path of a commit message file, or - for stdin",
    )
    rowgate_repo.write({".agents/config.yaml": "version: 1\n"})
    result = check(rowgate_repo, "--message-file", str(FIXTURES / "good-row.txt"))
    assert (result.status.value, result.summary) == ("error", "the trailer contract is empty: nothing would be checked")
    rowgate_repo.write({".agents/config.yaml": "version: 1\ntrailers:\n  keys:\n    - key: A\n      pattern: '('\n"})
    with pytest.raises(RecordError) as exc:  # a bad pattern is a config error, found when the config loads
        check(rowgate_repo, "--message-file", str(FIXTURES / "good-row.txt"))
    assert exc.value.lines() == [
        ".agents/config.yaml:5: trailers.keys.0.pattern: Value error, invalid regex '(': missing ) at position 1"
    ]


def test_a_verbose_commit_file_is_judged_above_the_scissors(rowgate_repo: GitRepo, tmp_path: Path):
    """`git commit -v` hands the hook comments and a diff below the scissors line: neither counts."""
    text = (FIXTURES / "good-agents-protocol.txt").read_text() + (
        "# Please enter the commit message for your changes.\n"
        "# ------------------------ >8 ------------------------\n"
        "# Do not modify or remove the line above.\n"
        "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-Signed-off-by: Claude <c@x>\n"
    )
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(text)
    result = check(rowgate_repo, "--filled", "--preset", "agents-protocol", "--message-file", str(path))
    assert result.status.value == "pass", result.findings


def test_message_from_stdin(rowgate_repo: GitRepo, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"Add the widget\n\nRow: GOV-NOPE\n")))
    [f] = check(rowgate_repo, "--preset", "row", "--message-file", "-").findings
    assert (f.rule, f.path, f.message) == (
        "TR008",
        "<stdin>",
        "Row: GOV-NOPE names nothing (.agents/rows/GOV-NOPE.yaml does not exist)",
    )


def test_cli_help_and_rules(capsys: pytest.CaptureFixture[str]):
    from checkers.cli import main

    assert main(["check", "commit-trailers", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--range BASE..HEAD" in out and "--message-file PATH|-" in out and "--filled" in out
    assert main(["rules", "TR004"]) == 0
    assert capsys.readouterr().out == (
        "TR004 trailer-forbidden-identity (commit-trailers): a Signed-off-by/"
        "Co-authored-by names an AI or a declared assistant\n"
    )
    with pytest.raises(SystemExit) as exc:
        main(["trailers", "--help"])
    assert exc.value.code == 0 and "--no-divider" in capsys.readouterr().out


# --- the pure functions, without a repository -------------------------------------------------------


def test_judge_is_a_pure_function_of_message_contract_and_facts():
    from checkers.config import TrailerContract
    from checkers.trailers.contract import Facts, R, compile_contract, judge
    from checkers.trailers.message import read_message

    contract = compile_contract(TrailerContract(presets=["row", "dco"]))
    msg = read_message("Add x\n\nRow: GOV-A\nRow: GOV-B\nSigned-off-by: B <b@x.org>\n", "range")
    facts = Facts(author="A <a@x.org>", exists={".agents/rows/GOV-A.yaml"}.__contains__)
    assert judge(msg, contract, facts) == [
        R["TR008"].finding(
            "Row: GOV-B names nothing (.agents/rows/GOV-B.yaml does not exist)",
            hint="end the message with a blank line and `Row: <ROW-ID>` naming a row in .agents/rows/",
        ),
        R["TR009"].finding(
            "no Signed-off-by matches the author A <a@x.org> (found: B <b@x.org>)", hint=DCO_FIX["range"]
        ),
    ]
    facts = Facts(author="B <b@x.org>", exists=lambda path: True)
    assert judge(msg, contract, facts) == []


def test_a_squash_message_reads_both_blocks():
    from checkers.trailers.message import read_message

    msg = read_message((FIXTURES / "github-squash.txt").read_text(), "range")
    assert [(t.key, t.value) for t in msg.block.trailers] == [
        ("Co-authored-by", "Bob Other <1+bob@users.noreply.github.com>")
    ]
    assert [(t.key, t.value) for t in msg.trailers] == [
        ("Row", "GOV-CORE"),
        ("Co-authored-by", "Bob Other <1+bob@users.noreply.github.com>"),
    ]


def test_bad_templates_in_the_config_are_refused():
    from checkers.config import TrailerContract, TrailerKeyRule
    from checkers.trailers.contract import compile_contract

    with pytest.raises(ValueError, match="exists template 'rows/{id}.yaml' must hold `{}` exactly once"):
        compile_contract(TrailerContract(keys=[TrailerKeyRule(key="Row", exists="rows/{id}.yaml")]))


def test_a_block_found_clean_under_one_contract_is_still_judged_under_another():
    from checkers.config import TrailerContract, TrailerKeyRule
    from checkers.trailers.contract import Facts, R, compile_contract, judge
    from checkers.trailers.message import read_message

    row = compile_contract(TrailerContract(presets=["row"]))
    fixes = compile_contract(TrailerContract(keys=[TrailerKeyRule(key="Fixes", min=1)]))
    assert row.trailers_only and fixes.trailers_only
    msg = read_message("Add x\n\nRow: GOV-A\n", "range")
    facts = Facts(exists=lambda path: True)
    assert judge(msg, row, facts) == [] and judge(msg, row, facts) == []  # the second from the clean set
    assert judge(msg, fixes, facts) == [
        R["TR001"].finding("no Fixes trailer (need at least 1)", hint="add a `Fixes:` trailer to the trailer block")
    ]
    assert facts.clean == {(id(row), msg.trailers, None)}


def test_a_sign_off_found_clean_for_one_author_is_still_judged_for_another():
    from checkers.config import TrailerContract
    from checkers.trailers.contract import Facts, R, compile_contract, judge
    from checkers.trailers.message import read_message

    dco = compile_contract(TrailerContract(presets=["dco"]))
    assert dco.trailers_only and dco.needs_author
    msg = read_message("Add x\n\nSigned-off-by: Ada Tester <ada@example.com>\n", "range")
    facts = Facts(author="Ada Tester <ada@example.com>")
    assert judge(msg, dco, facts) == [] and judge(msg, dco, facts) == []  # the second from the clean set
    facts.author = "Bob Other <bob@example.com>"
    assert judge(msg, dco, facts) == [
        R["TR009"].finding(
            "no Signed-off-by matches the author Bob Other <bob@example.com> (found: Ada Tester <ada@example.com>)",
            hint=dco.keys[0].fix,
        )
    ]
    assert facts.clean == {(id(dco), msg.trailers, "Ada Tester <ada@example.com>")}


# --- the presets and the start-up path ----------------------------------------------------------------


def test_presets_are_valid_contracts_built_with_the_models_defaults():
    import inspect

    from checkers import config
    from checkers.configcache import Section
    from checkers.trailers import presets

    def plain(value):
        if isinstance(value, Section):
            return {k: plain(v) for k, v in vars(value).items()}
        return [plain(v) for v in value] if isinstance(value, list) else value

    for name, preset in presets.PRESETS.items():
        data = plain(preset)
        assert config.TrailerContract.model_validate(data).model_dump(mode="json") == data, name
    builders = {
        presets.contract: config.TrailerContract,
        presets.key_rule: config.TrailerKeyRule,
        presets.condition: config.TrailerCondition,
        presets.paragraph_rule: config.TrailerParagraphRule,
        presets.forbid_rule: config.TrailerForbidRule,
        presets.exemption: config.TrailerExemption,
    }
    for build, model in builders.items():
        params = inspect.signature(build).parameters
        assert set(params) | ({"presets"} if model is config.TrailerContract else set()) == set(model.model_fields)
        for pname, p in params.items():
            field = model.model_fields[pname]
            if p.default is inspect.Parameter.empty:
                assert field.is_required(), (model.__name__, pname)
            else:
                default = field.get_default(call_default_factory=True)
                assert list(p.default) == default if isinstance(default, list) else p.default == default, pname


def test_the_presets_patterns_run_on_re_and_agree_with_the_time_limited_regex():
    import regex

    from checkers.safe_regex import compile_pattern
    from checkers.trailers.presets import BUILTIN_PATTERNS

    values = [
        "true",
        "false",
        "True",
        "GOV-CORE",
        "GOV-",
        "gov-core",
        "A-B-C",
        "claude:opus-4 [cli]",
        "x:y [a] [b]",
        "x:y",
        "Ada <1+ada@users.noreply.github.com>",
        "Ada <ada@users.noreply.github.com.evil>",
        "GPT-4o",
        "Alice",
        "Abbott",
        "an AI agent",
        "amazon q",
        "FOLLOWING_AGENTS_PROTOCOL",
        "",
        "é\u00e9 ü",
    ]
    assert len(BUILTIN_PATTERNS) >= 8
    for pattern in BUILTIN_PATTERNS:
        trusted = compile_pattern(pattern, 0, True)
        assert trusted._limit == {}  # re, no time limit
        limited = regex.compile(pattern)
        for value in values:
            for method in ("fullmatch", "search"):
                ours, theirs = getattr(trusted, method)(value), getattr(limited, method)(value)
                assert (ours and ours.group(0)) == (theirs and theirs.group(0)), (pattern, method, value)
    assert compile_pattern("(a+)+$")._limit == {"timeout": 1.0}  # a configured pattern keeps its limit


def test_a_contract_of_presets_starts_without_the_regex_package(rowgate_repo: GitRepo):
    import subprocess
    import sys

    base = rowgate_repo.head()
    rowgate_repo.commit("Add a\n\nRow: GOV-CORE\n", {"a": "1"})
    probe = (
        "import sys\nfrom checkers.cli import main\ncode = main(sys.argv[1:])\nprint('regex' in sys.modules, code)\n"
    )

    def run(config: str) -> str:
        rowgate_repo.write({".agents/config.yaml": config})
        argv = [sys.executable, "-c", probe, "check", "commit-trailers", "--range", f"{base}..HEAD"]
        env = {**rowgate_repo.env, "PYTHONPATH": str(ROOT)}
        proc = subprocess.run(argv, cwd=rowgate_repo.path, capture_output=True, text=True, timeout=60, env=env)
        return proc.stdout.splitlines()[-1]

    presets = "version: 1\ntrailers:\n  presets: [row]\n"
    assert run(presets) == run(presets) == "False 0"
    own = presets + "  keys: [{key: Row, pattern: 'GOV-[A-Z]+'}]\n"  # a configured pattern: regex, time-limited
    assert run(own) == run(own) == "True 0"


def test_the_cli_judges_a_range_without_pydantic_once_the_config_is_cached(rowgate_repo: GitRepo):
    import subprocess
    import sys

    base = rowgate_repo.head()
    rowgate_repo.commit("Add a\n\nRow: GOV-CORE\n", {"a": "1"})
    rowgate_repo.write({".agents/config.yaml": "version: 1\ntrailers:\n  presets: [row]\n"})
    probe = (
        "import sys\nfrom checkers.cli import main\ncode = main(sys.argv[1:])\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'git', 'dataclasses', 'yaml'}),"
        " 'ruamel.yaml' in sys.modules, code)\n"
    )
    argv = [sys.executable, "-c", probe, "check", "commit-trailers", "--range", f"{base}..HEAD"]

    def run() -> list[str]:
        proc = subprocess.run(
            argv,
            cwd=rowgate_repo.path,
            capture_output=True,
            text=True,
            timeout=60,
            env={**rowgate_repo.env, "PYTHONPATH": str(ROOT)},
        )
        return proc.stdout.splitlines()

    ok = f"OK: 1 commits in {base[:12]}..{rowgate_repo.head()[:12]} carry the trailer contract (row)"
    assert run() == [ok, "['dataclasses', 'pydantic'] True 0"]  # the first run validates the config, and caches it
    assert run() == [ok, "[] False 0"]
    rowgate_repo.write({".agents/config.yaml": "version: 1\ntrailers:\n  presets: [row]\n  merges: maybe\n"})
    assert run() == ["['dataclasses', 'pydantic'] True 3"]  # an edited config is validated again


# --- the command line: a range and a message together, an ambiguous name -----------------------------------------------------------------------------


def run_cli(repo: GitRepo, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(repo.path)}
    return subprocess.run(
        [sys.executable, "-m", "checkers", "check", "commit-trailers", *argv],
        cwd=repo.path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_range_and_message_file_together_is_a_usage_error(rowgate_repo: GitRepo):
    (rowgate_repo.path / "msg.txt").write_text("Title\n\nRow: GOV-CORE\n")
    proc = run_cli(rowgate_repo, "--range", "HEAD~1..HEAD", "--message-file", "msg.txt")
    assert proc.returncode == 2
    assert "argument --message-file: not allowed with argument --range" in proc.stderr


def test_a_name_that_is_both_a_branch_and_a_tag_is_an_error_naming_both(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    rowgate_repo.commit("Add a\n\nRow: GOV-CORE\n", {"a": "1"})
    rowgate_repo.git("branch", "release", base)
    rowgate_repo.git("tag", "release", "HEAD")
    rowgate_repo.write({".agents/config.yaml": MINIMAL_CONFIG + "trailers:\n  presets: [row]\n"})
    proc = run_cli(rowgate_repo, "--range", "release..HEAD")
    assert proc.returncode == 3
    assert "base 'release' is ambiguous: it names refs/heads/release and refs/tags/release" in proc.stdout
    assert run_cli(rowgate_repo, "--range", "refs/heads/release..HEAD").returncode == 0


# --- range: exempt authors and an empty range ----------------------------------------------------------


def test_an_exempt_author_is_skipped_and_a_person_is_not(rowgate_repo: GitRepo):
    base = rowgate_repo.head()
    bot = ("dependabot[bot]", "49699333+dependabot[bot]@users.noreply.github.com")
    rowgate_repo.commit("Bump x\n\nSigned-off-by: dependabot[bot] <support@github.com>\n", {"x": "1"}, author=bot)
    exempt = "  exempt_authors: ['\\[bot\\]@users\\.noreply\\.github\\.com>$']\n"
    rowgate_repo.write({".agents/config.yaml": MINIMAL_CONFIG + "trailers:\n  presets: [dco]\n" + exempt})
    result = check(rowgate_repo, "--range", f"{base}..HEAD")
    span = f"{base[:12]}..{rowgate_repo.head()[:12]}"
    assert (result.status.value, result.summary) == (
        "pass",
        f"OK: none of the 1 commits in {span} is under the contract: 1 by exempt authors (bots) skipped",
    )
    # the seeded twin: the same commit by a person who signed off as someone else fails
    person = rowgate_repo.commit("Bump y\n\nSigned-off-by: x <support@github.com>\n", {"y": "1"})
    assert findings(check(rowgate_repo, "--range", f"{base}..HEAD")) == [
        (
            "TR009",
            f"{person[:12]}: no Signed-off-by matches the author Ada Tester <ada@example.com> "
            "(found: x <support@github.com>)",
        )
    ]


def test_a_branch_cannot_exempt_its_own_author_through_its_mailmap(rowgate_repo: GitRepo):
    """exempt_authors is searched in the author after .mailmap: a branch that maps itself to a bot in its
    own .mailmap was exempt. The base's .mailmap maps now, so the commit is judged."""
    exempt = "  exempt_authors: ['\\[bot\\]@users\\.noreply\\.github\\.com>$']\n"
    rowgate_repo.commit(
        "Config\n\nSigned-off-by: Ada Tester <ada@example.com>\n",
        {".agents/config.yaml": MINIMAL_CONFIG + "trailers:\n  presets: [dco]\n" + exempt},
    )
    base = rowgate_repo.head()
    sha = rowgate_repo.commit(
        "Unsigned work\n",
        {".mailmap": "x[bot] <1+x[bot]@users.noreply.github.com> Ada Tester <ada@example.com>\n", "w": "1"},
    )
    result = check(rowgate_repo, "--range", f"{base}..HEAD")
    assert findings(result) == [("TR001", f"{sha[:12]}: no Signed-off-by trailer (need at least 1)")]
    assert result.details[-1].startswith("this range changes .mailmap: identities were mapped through the base's")


def test_an_invalid_exempt_author_pattern_is_an_error(rowgate_repo: GitRepo):
    rowgate_repo.write({".agents/config.yaml": MINIMAL_CONFIG + "trailers:\n  presets: [dco]\n"})
    rowgate_repo.commit("x\n\nSigned-off-by: Ada Tester <ada@example.com>\n")
    rowgate_repo.write(
        {".agents/config.yaml": MINIMAL_CONFIG + "trailers:\n  presets: [dco]\n  exempt_authors: ['(']\n"}
    )
    with pytest.raises(RecordError, match="exempt_authors"):
        check(rowgate_repo, "--range", "HEAD~1..HEAD")


def test_an_empty_range_passes_and_names_its_base(rowgate_repo: GitRepo):
    rowgate_repo.git("branch", "upstream")
    rowgate_repo.write({".agents/config.yaml": MINIMAL_CONFIG + "trailers:\n  presets: [dco]\n"})
    result = check(rowgate_repo, "--range", "upstream..HEAD")
    assert (result.status.value, result.examined, result.summary) == (
        "pass",
        0,
        f"OK: upstream is the base: nothing new since {rowgate_repo.head()[:12]} (0 commits to judge)",
    )
