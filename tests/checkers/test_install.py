"""The install: the wheel built from this work tree holds the toolkit as the import package `rowgate` (the
folder `checkers/`, mapped by pyproject's package-dir) with its console script, and the engine as `engine`
with its kernels and the embedded tiny model (its dependencies only through the `engine` extra). Installed
with `pip install --target`, it runs a real check, and `import engine` generates, with this checkout off
sys.path."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import GIT_ENV, ROOT, init_repo

SIGNED = "\n\nSigned-off-by: Ada Tester <ada@example.com>\n"


def test_every_package_under_checkers_and_engine_is_installed():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"rowgate": "checkers", "engine": "engine"}
    folders = sorted(
        ".".join([name, *p.parent.relative_to(ROOT / folder).parts])
        for name, folder in (("rowgate", "checkers"), ("engine", "engine"))
        for p in (ROOT / folder).rglob("__init__.py")
    )
    missing = sorted(set(folders) - set(setuptools["packages"]))
    assert not missing, f"add {missing} to [tool.setuptools] packages in pyproject.toml"
    assert sorted(setuptools["packages"]) == folders


def test_no_module_inside_checkers_imports_the_checkout_name():
    """Installed, the package is `rowgate`: an absolute `checkers` import (or module path) would break."""
    found = []
    for path in sorted((ROOT / "checkers").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names = [node.value] if node.value.startswith("checkers.") and " " not in node.value else []
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] == "checkers"]
    assert not found, "make these relative (`from .x import y`, import_module('.x', __package__)):\n" + "\n".join(found)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this work tree's files as a clone would have them (tracked, and untracked but not
    ignored: uncommitted edits count), built without network or build isolation."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, **GIT_ENV}
    clone = tmp / "src"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=60,
        env=env,
    ).stdout
    for rel in filter(None, listed.decode().split("\0")):
        if (ROOT / rel).is_file():  # a tracked file deleted in the work tree is not in the clone either
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, clone / rel)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["-w", str(tmp / "dist"), str(clone)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [built] = (tmp / "dist").glob("rowgate-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_is_the_toolkit_and_the_engine_with_its_kernels_and_tiny_model(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert tops == {"rowgate", "engine"}, tops
    assert {"rowgate/commands/init.py", "rowgate/config.py", "rowgate/checks/records/__init__.py"} <= set(names)
    tracked = {p.relative_to(ROOT).as_posix() for p in (ROOT / "engine" / "cuda").glob("*.cu*")}
    assert tracked and tracked <= set(names)  # every kernel source, for a JIT or fat build from the install
    assert {"engine/data/tiny-qwen3/model.safetensors", "engine/cuda/arch_features.yaml"} <= set(names)
    assert not [n for n in names if n.startswith(("lab/", "tests/")) or n.endswith((".pt", ".bin"))]
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    torch_req = [line for line in meta.splitlines() if line.startswith("Requires-Dist: torch")]
    assert torch_req and all('extra == "engine"' in line for line in torch_req)  # only through the extra
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "rowgate = rowgate.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()


@pytest.mark.slow
def test_the_installed_package_runs_a_check_with_the_checkout_off_sys_path(wheel: Path, tmp_path: Path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info")) == ["bin", "engine", "rowgate"]

    repo = init_repo(tmp_path / "plain")
    for i in range(3):
        repo.commit(f"Change {i}{SIGNED}", {f"m{i}.py": f"x = {i}\n"})
    # -S: no site-packages .pth files (the development venv's editable finder maps `checkers` to a checkout);
    # the dependencies come from the environment's site-packages on PYTHONPATH, the toolkit from the target
    deps = sysconfig.get_paths()["purelib"]
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", **GIT_ENV, "PYTHONPATH": f"{target}{os.pathsep}{deps}"}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-S", *args], cwd=repo.path, env=env, capture_output=True, text=True, timeout=120
        )

    where = run("-c", "import importlib.util as u, rowgate; print(u.find_spec('checkers'), rowgate.__file__)")
    assert where.stdout == f"None {target / 'rowgate' / '__init__.py'}\n", where.stderr
    help_ = run("-m", "rowgate", "--help")
    assert help_.returncode == 0 and help_.stdout.startswith("usage: rowgate "), help_.stderr
    for entry in (["-m", "rowgate"], [str(target / "bin" / "rowgate")]):  # the module and the console script
        check = run(*entry, "check", "commit-trailers", "--preset", "dco", "--range", "HEAD~2..HEAD")
        ok = f"OK: 2 commits in {repo.head('HEAD~2')[:12]}..{repo.head()[:12]} carry the trailer contract (dco)\n"
        assert (check.returncode, check.stdout) == (0, ok), check.stderr
    repo.commit("Unsigned change\n")
    bad = run("-m", "rowgate", "check", "commit-trailers", "--preset", "dco", "--range", "HEAD~1..HEAD")
    assert bad.returncode == 1 and bad.stdout.startswith(f"TR001 trailer-missing: {repo.head()[:12]}: "), bad.stdout


@pytest.mark.slow
def test_the_installed_engine_generates_from_anywhere(wheel: Path, tmp_path: Path):
    """`pip install ".[engine]"`: `import engine` from a directory outside the checkout finds the installed
    package and its embedded model (the dependencies come from this environment, as the extra installs them)."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    deps = sysconfig.get_paths()["purelib"]
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": f"{target}{os.pathsep}{deps}"}
    code = (
        "import engine; from engine import LLM, SamplingParams; print(engine.__file__); "
        "out = LLM().generate([[1, 2, 3]], SamplingParams(max_tokens=2)); print(len(out[0].token_ids))"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [str(target / "engine" / "__init__.py"), "2"]
