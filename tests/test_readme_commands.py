"""Every command in the README's and docs/checks' shell blocks runs as written, or is named below with why it
is not run here (a GPU, minutes of CPU, a tool that installs into the user's git). The runnable ones run in
order, as a reader would type them: this repository's commands in a shared clone of it, the adoption
recipe in a scratch repository with an upstream, the engine's on the embedded tiny model. A new command in
a block fails the classification test until it is run or named."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import GIT_ENV, ROOT, init_repo

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs" / "checks").glob("*.md"))]
BLOCK = re.compile(r"^```(?:sh|bash|console)\n(.*?)^```", re.M | re.S)
SIGNED = "\n\nSigned-off-by: Ada Tester <ada@example.com>\n"

# Not run here, each with its reason (a prefix of the command as written).
NOT_RUN = {
    "bash scripts/run.sh": "the setup and the whole preflight: scripts/run.sh is CI's job",
    "bash scripts/test.sh": "the whole suite, CI's job (and this test is in it)",
    "pre-commit install": "installs hooks into the reader's own git directory",
    "python -m lab": "the lab's gates, benchmarks and model makers: a GPU, or minutes of CPU (tests/lab has them)",
    "python -m engine.cuda.build": "needs nvcc (the fat-build CI job runs it)",
    "python -m engine generate --model DIR": "DIR is made by the lab's quantizer in the line before",
    "git add .agents/config.yaml": "run as part of the adoption recipe (test_the_adoption_recipe)",
    "pip install": "installs into the reader's environment",
    "python -m engine serve": "a server that runs until stopped: tests/engine/serve/test_http.py starts it on a free "
    "port and drives it",
    "rowgate records import": "this repository keeps its records as files, with no table source to import; "
    "tests/checkers/test_records_import.py runs it on an excerpt of vllm.cpp's tables",
    "rowgate render --tables": "writes back imported tables, which this repository has none of; "
    "tests/checkers/test_records_import.py runs it after the import",
    "curl -s localhost:8000": "needs the server of the line before; tests/engine/serve/test_http.py sends the same "
    "requests",
}
# What a placeholder stands for when the command runs.
MESSAGE = "Add the widget\n\nRow: GOV-X\n"


def commands(text: str) -> list[str]:
    out = []
    for block in BLOCK.findall(text):
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line:
                out.append(line)
    return out


def all_commands() -> list[tuple[str, str]]:
    return [(doc.relative_to(ROOT).as_posix(), cmd) for doc in DOCS for cmd in commands(doc.read_text())]


def reason(cmd: str) -> str | None:
    return next((why for prefix, why in NOT_RUN.items() if cmd.startswith(prefix)), None)


RUNNERS = ("rowgate ", "scripts/audit-live-rows.py", "python -m engine generate", "git ")


def test_every_command_is_run_or_named_with_its_reason():
    unclassified = [f"{doc}: {cmd}" for doc, cmd in all_commands() if not reason(cmd) and not cmd.startswith(RUNNERS)]
    assert not unclassified, "run these in tests/test_readme_commands.py or name why not in NOT_RUN:\n" + "\n".join(
        unclassified
    )
    assert len([c for _, c in all_commands() if not reason(c)]) >= 20  # the extraction found the blocks


def run(cmd: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """`cmd` as a shell runs it, with `rowgate` this checkout's CLI (`python -P`: a clone's own copy of
    the toolkit is not imported) and scripts/ this checkout's."""
    argv = shlex.split(cmd)
    if argv[0] == "rowgate":
        argv = [sys.executable, "-P", "-m", "checkers", *argv[1:]]
    elif argv[0].startswith("scripts/"):
        argv = [sys.executable, str(ROOT / argv[0]), *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **GIT_ENV}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=300)


def expand(cmd: str, tmp: Path) -> tuple[str, str | None]:
    """The placeholders of a command line, filled: a message file F, `< MSG` on stdin, `[--flag]` left out."""
    stdin = None
    if cmd.endswith("< MSG"):
        cmd, stdin = cmd[: -len("< MSG")].strip(), MESSAGE
    cmd = re.sub(r"\s*\[--[a-z-]+\]", "", cmd)
    if cmd.endswith("--message-file F"):
        (tmp / "msg.txt").write_text(MESSAGE)
        cmd = cmd[: -len("F")] + str(tmp / "msg.txt")
    return cmd, stdin


# A command that exits non-zero by design, as its own comment in the README says: (exit code, why). None now.
EXPECTED: dict[str, tuple[int, str]] = {}


@pytest.mark.slow
def test_the_readme_commands_on_this_repository(tmp_path: Path):
    clone = tmp_path / "rowgate"
    subprocess.run(["git", "clone", "-q", "--shared", str(ROOT), str(clone)], check=True, env={**os.environ, **GIT_ENV})
    subprocess.run(["git", "checkout", "-q", "-B", "main", "HEAD"], cwd=clone, check=True)  # base.ref main
    (clone / "pr-body.md").write_text("The widget.\n\nRow: GOV-X\n")
    readme = commands((ROOT / "README.md").read_text())
    start = readme.index("rowgate preflight")
    ran, failed = 0, []
    for cmd in readme[start : readme.index("rowgate check commit-trailers --preset dco --range origin/main..HEAD")]:
        if reason(cmd):
            continue
        line, stdin = expand(cmd, tmp_path)
        proc = run(line, clone, stdin)
        want = EXPECTED.get(cmd, (0, ""))[0]
        ran += 1
        if proc.returncode != want:
            failed.append(f"{cmd}: exit {proc.returncode} (want {want})\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    assert not failed, "\n\n".join(failed)
    assert ran >= 15


@pytest.mark.slow
def test_the_adoption_recipe(tmp_path: Path):
    """The README's "Use it in your repository" block, in a signed-off project with an upstream."""
    upstream = init_repo(tmp_path / "upstream")
    for i in range(3):
        upstream.commit(f"Change {i}{SIGNED}", {f"src/m{i}.py": f"x = {i}\n"})
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(upstream.path), str(work)], check=True, env={**os.environ, **GIT_ENV})
    readme = commands((ROOT / "README.md").read_text())
    start = readme.index("rowgate check commit-trailers --preset dco --range origin/main..HEAD")
    for cmd in readme[start : start + 5]:
        if cmd.startswith("pre-commit install"):
            continue
        if cmd.startswith("git add"):
            for part in cmd.split(" && "):
                proc = subprocess.run(shlex.split(part), cwd=work, env={**os.environ, **GIT_ENV}, capture_output=True)
                assert proc.returncode == 0, proc.stderr
            continue
        proc = run(cmd, work)
        assert proc.returncode == 0, f"{cmd}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert (work / ".agents" / "config.yaml").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    "cmd", [c for c in commands((ROOT / "README.md").read_text()) if c.startswith("python -m engine generate")]
)
def test_the_engine_commands_on_the_tiny_model(cmd: str):
    if reason(cmd):
        pytest.skip(reason(cmd))
    proc = run(cmd, ROOT)
    assert proc.returncode == 0, proc.stderr
