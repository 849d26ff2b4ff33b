"""The suite's compile check of the CUDA sources: host and device code with every warning an error, SASS and PTX
for sm_90 (build.py's `-Werror all-warnings` and the host compiler's `-Wall -Werror`).

A fat `--werror` build (ci/fat-build.sh) compiles each source with the same flags for every arch of the feature
table, sm_90 among them, in one nvcc run: its object passes a stricter form of this check, so the check takes it
instead of compiling the source again. The object is found by its name, the hash of the source and headers as they
are now, the flags and nvcc (`build.object_path`): a stale object of an edited source is never found, and a source
the fat build failed on has none, so this check compiles it here and fails with nvcc's message.

Where the fat build is, from the environment (scripts/test.sh exports the first two while its fat build runs beside
pytest):
  FAT_BUILD_DIR     its output directory (default: build/cuda-fat, ci/fat-build.sh's, when it exists)
  FAT_BUILD_PID     the process running it: a source it has not compiled yet is waited for while that process runs
                    (unset: the directory is only looked in), and the tests that take these objects run last
  FAT_BUILD_WAIT_S  how long one source is waited for before its test fails (default 1800)
A source with no fat object is compiled here, for sm_90 alone, into the session's `sm90_werror_dir`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from checkers.checks.gencode import fatbin
from engine.cuda import build
from engine.flags import FlagSnapshot

needs_nvcc = pytest.mark.skipif(
    shutil.which(build.NVCC) is None, reason=f"nvcc not found ({build.NVCC}): the CUDA sources cannot be compiled here"
)

DEFAULT_FAT_DIR = build.REPO_ROOT / "build" / "cuda-fat"
DEFAULT_WAIT_S = 1800.0
POLL_S = 2.0
STRICT_FIXTURES = frozenset({"compiled", "sm90_werror_dir"})  # the tests that take these objects (run last)


def archs_env(text: str) -> FlagSnapshot:
    return FlagSnapshot.from_env({"VT_CUDA_ARCHS": text})


class FatBuildWaitTimeout(AssertionError):
    """The fat build still runs and has not written a source's object within FAT_BUILD_WAIT_S."""


def _running(pid: int) -> bool:
    """The process exists and has not exited: scripts/test.sh reaps its fat build only after pytest, so an ended
    one is a zombie until then."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        if Path("/proc/self/stat").exists():  # procfs: no such process
            return False
        try:  # no procfs: ask the kernel (a zombie counts as running there)
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    return state not in ("Z", "X")


@dataclass(frozen=True)
class FatBuild:
    out_dir: Path
    pid: int | None  # None: a finished build, looked in but never waited for
    wait_s: float = DEFAULT_WAIT_S
    settings: FlagSnapshot = field(default_factory=FlagSnapshot.from_env)  # its VT_CUDA_ARCHS: pytest's environment
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False, repr=False)  # between looks

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> FatBuild | None:
        env = os.environ if env is None else env
        out = env.get("FAT_BUILD_DIR", "").strip()
        pid_text = env.get("FAT_BUILD_PID", "").strip()
        wait_text = env.get("FAT_BUILD_WAIT_S", "").strip()
        try:
            pid = int(pid_text) if pid_text else None
            wait_s = float(wait_text) if wait_text else DEFAULT_WAIT_S
        except ValueError:
            raise ValueError(
                f"FAT_BUILD_PID={pid_text!r} / FAT_BUILD_WAIT_S={wait_text!r}: expected a process id and seconds"
            ) from None
        settings = FlagSnapshot.from_env(env)
        if out:
            return cls(Path(out), pid, wait_s, settings)
        if pid is not None:
            raise ValueError(f"FAT_BUILD_PID={pid} names a running fat build but FAT_BUILD_DIR does not say where")
        return cls(DEFAULT_FAT_DIR, None, wait_s, settings) if DEFAULT_FAT_DIR.is_dir() else None

    def running(self) -> bool:
        return self.pid is not None and _running(self.pid)

    def objects(self, source: Path, table: build.FeatureTable) -> dict[tuple[str, ...], Path]:
        """archs -> the name the fat build gives the object of the source as it is now, for each arch list it may
        have compiled that has sm_90: VT_CUDA_ARCHS of its environment (the running build's, pytest's), and the
        table's union (a fat build made without it, looked in by a run that sets it)."""
        lists: list[tuple[str, ...]] = []
        for requested in (self.settings.value("VT_CUDA_ARCHS"), ""):
            try:
                lists.append(
                    build.archs_for(table, source.name, build.requested_archs(table, True, archs_env(requested)))
                )
            except build.BuildError:  # an arch list this source is not compiled for: no object of it
                pass
        return {a: build.object_path(source, a, self.out_dir, werror=True) for a in dict.fromkeys(lists) if "9.0" in a}

    def find(self, source: Path, table: build.FeatureTable) -> build.BuildResult | None:
        """The fat build's object of the source as it is now, waited for while the build runs; None where the fat
        build does not compile sm_90 for it or ended without it (it failed there, or the source changed since)."""
        objs = self.objects(source, table)
        t0 = time.monotonic()
        while objs:
            hits = [(a, obj) for a, obj in objs.items() if obj.exists()]
            if hits:
                archs, obj = hits[0]
                sass, _ = fatbin.arch_lists(fatbin.read_object(obj))
                if "90" not in sass:
                    raise AssertionError(f"{obj}: the fat build's object holds SASS for {sass}, none for sm_90")
                return build.BuildResult(source, obj, archs, True, time.monotonic() - t0)
            if not self.running():
                if any(obj.exists() for obj in objs.values()):  # written just before it ended
                    continue
                return None  # it ended without one: it failed there, or the source changed since
            waited = time.monotonic() - t0
            if waited >= self.wait_s:
                raise FatBuildWaitTimeout(
                    f"{build.source_label(source)}: the fat build (pid {self.pid}, writing {self.out_dir}) still runs "
                    f"and has not written {next(iter(objs.values())).name} after {waited:.0f} s "
                    f"(FAT_BUILD_WAIT_S={self.wait_s:g}); its log is build/fat-build.log under scripts/test.sh. "
                    "Unset FAT_BUILD_PID to compile here."
                )
            self.sleep(min(POLL_S, self.wait_s - waited))
        return None


def strict_objects(
    names: list[str],
    out_dir: Path,
    fat: FatBuild | None,
    *,
    src_dir: Path = build.CUDA_DIR,
    table: build.FeatureTable | None = None,
) -> dict[str, build.BuildResult]:
    """name -> the object that proves it compiles warning-free for sm_90: the fat build's where it has one of the
    source as it is now, else compiled here into out_dir (the sources concurrently). Raises nvcc's BuildError."""
    table = table or build.load_table()
    found: dict[str, build.BuildResult] = {}
    for name in names:
        hit = fat.find(src_dir / name, table) if fat is not None else None
        if hit is not None:
            found[name] = hit
    missing = [n for n in names if n not in found]
    if missing:
        for r in build.build(
            missing, out_dir=out_dir, table=table, src_dir=src_dir, werror=True, settings=archs_env("9.0")
        ):
            found[r.source.name] = r
    return {n: found[n] for n in names}


def strict_last(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items that take these objects last, every other in its order (a stable sort)."""
    return sorted(items, key=lambda item: not STRICT_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())))


def compile_strict(name: str, out_dir: Path) -> Path:
    """The object of engine/cuda/<name> that passed the check (out_dir: the session's `sm90_werror_dir`, where a
    source another test compiled the same way is a cache hit). Fails with nvcc's message."""
    return strict_objects([name], out_dir, FatBuild.from_env())[name].obj
