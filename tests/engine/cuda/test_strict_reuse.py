"""The compile check's reuse of the fat build's objects (nvcc_strict): taken only when it is the object of the source
as it is now, waited for while the fat build runs, and a source with a warning fails with nvcc's message whether
the fat build ran, failed, or runs still. Real nvcc on a one-kernel source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.cuda import build
from engine.flags import FlagSnapshot
from tests.engine.cuda import nvcc_strict
from tests.engine.cuda.nvcc_strict import (
    FatBuild,
    FatBuildWaitTimeout,
    archs_env,
    needs_nvcc,
    strict_last,
    strict_objects,
)

CLEAN = (
    "__global__ void add_one(float* x) { x[threadIdx.x] += 1.f; }\n"
    'extern "C" int vt_tiny_launch(float* x) { add_one<<<1, 32>>>(x); return 0; }\n'
)
WARNS = CLEAN.replace("x[threadIdx.x] += 1.f;", "int unused; x[threadIdx.x] += 1.f;")  # nvcc warning 177
WARNING = 'variable "unused" was declared but never referenced'
TABLE = 'features:\n  portable: {archs: ["8.0", "9.0"], doc: "x"}\nsources:\n  tiny.cu: portable\n'
UNION = FlagSnapshot.from_env({})  # the fat build's archs: the table's union, 8.0 and 9.0


def tree(d: Path, text: str) -> build.FeatureTable:
    d.mkdir(parents=True, exist_ok=True)
    (d / "tiny.cu").write_text(text)
    (d / "arch_features.yaml").write_text(TABLE)
    return build.load_table(d / "arch_features.yaml")


@pytest.fixture(scope="module")
def warm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished fat --werror build of the clean source (both archs in one object)."""
    root = tmp_path_factory.mktemp("warm")
    table = tree(root / "src", CLEAN)
    (r,) = build.build(fat=True, werror=True, out_dir=root / "fat", table=table, src_dir=root / "src", settings=UNION)
    assert r.archs == ("8.0", "9.0") and not r.cached
    return r.obj


def no_nvcc(*args: object, **kwargs: object) -> build.BuildResult:
    raise AssertionError("nvcc ran although the fat build's object was there")


@needs_nvcc
def test_the_fat_object_of_the_source_as_it_is_is_taken_without_nvcc(tmp_path: Path, warm: Path, monkeypatch) -> None:
    table = tree(tmp_path / "src", CLEAN)  # another path, the same content: the same object
    monkeypatch.setattr(build, "compile_source", no_nvcc)
    (r,) = strict_objects(
        ["tiny.cu"],
        tmp_path / "out",
        FatBuild(warm.parent, None, settings=UNION),
        src_dir=tmp_path / "src",
        table=table,
    ).values()
    assert r.obj == warm and r.archs == ("8.0", "9.0") and r.cached
    assert not (tmp_path / "out").exists()
    for env_archs in ("9.0", "8.0"):  # a run that sets VT_CUDA_ARCHS still finds the build made without it
        hit = FatBuild(warm.parent, None, settings=archs_env(env_archs)).find(tmp_path / "src" / "tiny.cu", table)
        assert hit is not None and hit.obj == warm


@needs_nvcc
def test_an_object_without_sm90_code_under_the_name_is_refused(tmp_path: Path) -> None:
    """Seeded: a file with no sm_90 SASS where the fat object of the source should be (here a host-only ELF)."""
    table = tree(tmp_path / "src", CLEAN)
    fat = FatBuild(tmp_path / "fat", None, settings=UNION)
    ((archs, obj),) = fat.objects(tmp_path / "src" / "tiny.cu", table).items()
    assert archs == ("8.0", "9.0")
    obj.parent.mkdir()
    shutil.copy(sys.executable, obj)
    with pytest.raises(AssertionError, match=r"the fat build's object holds SASS for \[\], none for sm_90"):
        fat.find(tmp_path / "src" / "tiny.cu", table)


@needs_nvcc
def test_a_warning_added_since_the_fat_build_fails_the_check(tmp_path: Path, warm: Path) -> None:
    """Seeded: the warm fat directory holds the clean source's object; the edited source is compiled and fails."""
    table = tree(tmp_path / "src", WARNS)
    with pytest.raises(build.BuildError, match=WARNING) as e:
        strict_objects(
            ["tiny.cu"],
            tmp_path / "out",
            FatBuild(warm.parent, None, settings=UNION),
            src_dir=tmp_path / "src",
            table=table,
        )
    assert "arch=compute_90,code=[sm_90,compute_90]" in str(e.value)  # compiled here, for sm_90
    assert list((tmp_path / "out").glob("*.so")) == []


@needs_nvcc
def test_a_running_fat_build_is_waited_for(tmp_path: Path, warm: Path) -> None:
    table = tree(tmp_path / "src", CLEAN)
    fat_dir = tmp_path / "fat"
    fat_dir.mkdir()
    looks: list[float] = []

    def sleep(s: float) -> None:  # the fat build writes the object while the check waits
        looks.append(s)
        shutil.copy(warm, fat_dir / warm.name)

    fat = FatBuild(fat_dir, os.getpid(), settings=UNION, sleep=sleep)  # this process: running
    r = fat.find(tmp_path / "src" / "tiny.cu", table)
    assert r is not None and r.obj == fat_dir / warm.name and looks == [nvcc_strict.POLL_S]


@needs_nvcc
def test_a_fat_build_that_fails_on_a_warning_ends_and_the_check_fails_with_it(tmp_path: Path) -> None:
    """Seeded: the fat build runs while the check waits, fails on the warning and exits (a zombie, as under
    scripts/test.sh); the check then compiles the source itself and fails with nvcc's message."""
    table = tree(tmp_path / "src", WARNS)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    fat_errors: list[str] = []

    def sleep(s: float) -> None:
        if fat_errors:
            raise AssertionError("waited on after the fat build ended")
        with pytest.raises(build.BuildError, match=WARNING) as e:
            build.build(
                fat=True, werror=True, out_dir=tmp_path / "fat", table=table, src_dir=tmp_path / "src", settings=UNION
            )
        fat_errors.append(str(e.value))
        assert proc.stdin is not None
        proc.stdin.close()
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: a zombie

    try:
        fat = FatBuild(tmp_path / "fat", proc.pid, settings=UNION, sleep=sleep)
        with pytest.raises(build.BuildError, match=WARNING) as e:
            strict_objects(["tiny.cu"], tmp_path / "out", fat, src_dir=tmp_path / "src", table=table)
    finally:
        proc.kill()
        proc.wait()
    assert len(fat_errors) == 1 and "arch=compute_80" in fat_errors[0]  # the fat build's run: both archs
    assert "arch=compute_80" not in str(e.value)  # the check's own run: sm_90 alone


@needs_nvcc
def test_waiting_past_the_limit_fails_and_says_why(tmp_path: Path) -> None:
    table = tree(tmp_path / "src", CLEAN)
    fat = FatBuild(tmp_path / "fat", os.getpid(), wait_s=0, settings=UNION)
    with pytest.raises(FatBuildWaitTimeout) as e:
        fat.find(tmp_path / "src" / "tiny.cu", table)
    assert str(e.value).startswith(
        f"{tmp_path / 'src' / 'tiny.cu'}: the fat build (pid {os.getpid()}, writing {tmp_path / 'fat'}) still runs "
        "and has not written tiny-"
    )
    assert str(e.value).endswith(
        ".so after 0 s (FAT_BUILD_WAIT_S=0); its log is build/fat-build.log under scripts/test.sh. "
        "Unset FAT_BUILD_PID to compile here."
    )


def test_the_environment_names_the_fat_build(tmp_path: Path, monkeypatch) -> None:
    fat = FatBuild.from_env({"FAT_BUILD_DIR": str(tmp_path), "FAT_BUILD_PID": "12", "FAT_BUILD_WAIT_S": "5"})
    assert fat is not None and (fat.out_dir, fat.pid, fat.wait_s) == (tmp_path, 12, 5.0)
    arched = FatBuild.from_env({"FAT_BUILD_DIR": str(tmp_path), "VT_CUDA_ARCHS": "9.0"})  # its archs: this env's
    assert arched is not None and arched.settings.value("VT_CUDA_ARCHS") == "9.0"
    with pytest.raises(ValueError, match="FAT_BUILD_PID='x'"):
        FatBuild.from_env({"FAT_BUILD_DIR": str(tmp_path), "FAT_BUILD_PID": "x"})
    with pytest.raises(ValueError, match="FAT_BUILD_DIR does not say where"):
        FatBuild.from_env({"FAT_BUILD_PID": "12"})
    monkeypatch.setattr(nvcc_strict, "DEFAULT_FAT_DIR", tmp_path / "absent")
    assert FatBuild.from_env({}) is None
    monkeypatch.setattr(nvcc_strict, "DEFAULT_FAT_DIR", tmp_path)
    assert FatBuild.from_env({}) == FatBuild(tmp_path, None, settings=UNION)  # looked in, never waited for


def test_an_ended_unreaped_process_is_not_running() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        assert not FatBuild(Path("x"), proc.pid).running()
    finally:
        proc.wait()
    assert FatBuild(Path("x"), os.getpid()).running() and not FatBuild(Path("x"), None).running()


def test_the_tests_that_take_the_objects_run_last_in_their_order() -> None:
    items = [
        SimpleNamespace(name=n, fixturenames=f)
        for n, f in [
            ("a", ["compiled"]),
            ("b", []),
            ("c", ["sm90_werror_dir", "tmp_path"]),
            ("d", ["tmp_path"]),
        ]
    ]
    assert [i.name for i in strict_last(items)] == ["b", "d", "a", "c"]  # type: ignore[arg-type]
