"""The CUDA build: feature-table parsing, arch intersection, gencode flags, real nvcc compiles and the cache."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
from pathlib import Path

import pytest

from engine.cuda import build
from engine.flags import FlagSnapshot
from tests.engine.cuda.nvcc_strict import FatBuild, strict_objects

needs_nvcc = pytest.mark.skipif(shutil.which(build.NVCC) is None, reason=f"nvcc not found ({build.NVCC})")

TINY_CU = """#include "common.cuh"
VT_DEFINE_LAST_ERROR(tiny)
__global__ void add_one(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.f; }
VT_EXPORT int vt_tiny_add(float* x, int n) { add_one<<<(n + 127) / 128, 128>>>(x, n); return vt::launch_status("add_one"); }
"""


def write_tree(tmp: Path, table: str, sources: dict[str, str]) -> build.FeatureTable:
    """A source dir with common.cuh, the given .cu files and a feature table; returns the loaded table."""
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.copy(build.CUDA_DIR / "common.cuh", tmp / "common.cuh")
    for name, text in sources.items():
        (tmp / name).write_text(text)
    (tmp / "arch_features.yaml").write_text(table)
    return build.load_table(tmp / "arch_features.yaml")


TABLE = """features:
  portable: {archs: ["8.0", "9.0"], doc: "x"}
  hopper: {archs: ["9.0a"], doc: "y"}
sources:
  tiny.cu: portable
"""


def test_table_union_and_intersection(tmp_path: Path) -> None:
    table = write_tree(tmp_path, TABLE, {})
    assert table.union() == ["8.0", "9.0", "9.0a"]
    assert build.archs_for(table, "tiny.cu", ["9.0", "12.0"]) == ("9.0",)
    assert build.archs_for(table, "tiny.cu", ["9.0", "8.0"]) == ("8.0", "9.0")  # table order


def test_empty_intersection_is_an_error(tmp_path: Path) -> None:
    table = write_tree(tmp_path, TABLE, {})
    with pytest.raises(build.BuildError) as e:
        build.archs_for(table, "tiny.cu", ["12.0"])
    assert str(e.value) == "tiny.cu: feature 'portable' archs ['8.0', '9.0'] share no arch with the requested ['12.0']"


def test_source_missing_from_table(tmp_path: Path) -> None:
    table = write_tree(tmp_path, TABLE, {})
    with pytest.raises(build.BuildError, match=r"^other.cu: not listed under 'sources'"):
        build.archs_for(table, "other.cu", ["9.0"])


@pytest.mark.parametrize("bad", ["9", "sm_90", "9.0b", "90"])
def test_bad_arch_spelling_names_the_field(tmp_path: Path, bad: str) -> None:
    with pytest.raises(build.BuildError, match=r"features\.portable\.archs: arch '" + bad):
        write_tree(tmp_path, TABLE.replace('"8.0"', f'"{bad}"'), {})


def test_table_source_with_unknown_feature(tmp_path: Path) -> None:
    with pytest.raises(build.BuildError, match="sources.tiny.cu names feature 'nope'"):
        write_tree(tmp_path, TABLE.replace("tiny.cu: portable", "tiny.cu: nope"), {})


def test_gencode_flags_keep_the_a_suffix() -> None:
    assert build.gencode_flags(["8.0", "9.0a", "12.0a"]) == [
        "-gencode",
        "arch=compute_80,code=[sm_80,compute_80]",
        "-gencode",
        "arch=compute_90a,code=[sm_90a,compute_90a]",
        "-gencode",
        "arch=compute_120a,code=[sm_120a,compute_120a]",
    ]


def archs(text: str) -> FlagSnapshot:
    """VT_CUDA_ARCHS as the environment would set it, in a snapshot (the build never reads it then)."""
    return FlagSnapshot.from_env({"VT_CUDA_ARCHS": text})


def test_requested_archs_from_env(tmp_path: Path) -> None:
    table = write_tree(tmp_path, TABLE, {})
    assert build.requested_archs(table, True, archs(" 9.0a, 12.0 ")) == ["9.0a", "12.0"]
    with pytest.raises(build.BuildError, match="VT_CUDA_ARCHS: arch 'sm_100'"):
        build.requested_archs(table, True, archs("9.0,sm_100"))
    assert build.requested_archs(table, True, FlagSnapshot.from_env({})) == ["8.0", "9.0", "9.0a"]


def test_hash_changes_with_flags_included_headers_and_compiler(tmp_path: Path) -> None:
    write_tree(tmp_path, TABLE, {"tiny.cu": TINY_CU})
    src = tmp_path / "tiny.cu"
    base = build.content_hash(src, ["-O3", "-gencode", "arch=compute_90,code=sm_90"], "nvcc 13.0")
    assert base == build.content_hash(src, ["-O3", "-gencode", "arch=compute_90,code=sm_90"], "nvcc 13.0")
    assert base != build.content_hash(src, ["-O2", "-gencode", "arch=compute_90,code=sm_90"], "nvcc 13.0")
    assert base != build.content_hash(src, ["-O3", "-gencode", "arch=compute_80,code=sm_80"], "nvcc 13.0")
    assert base != build.content_hash(src, ["-O3", "-gencode", "arch=compute_90,code=sm_90"], "nvcc 13.1")
    (tmp_path / "other.cuh").write_text("// a header tiny.cu does not include\n")
    assert base == build.content_hash(src, ["-O3", "-gencode", "arch=compute_90,code=sm_90"], "nvcc 13.0")
    (tmp_path / "common.cuh").write_text((tmp_path / "common.cuh").read_text() + '\n#include "inner.cuh"\n')
    edited = build.content_hash(src, ["-O3", "-gencode", "arch=compute_90,code=sm_90"], "nvcc 13.0")
    assert edited != base  # an included header changed
    (tmp_path / "inner.cuh").write_text("// included through common.cuh\n")
    assert edited != build.content_hash(src, ["-O3", "-gencode", "arch=compute_90,code=sm_90"], "nvcc 13.0")


@needs_nvcc
def test_compile_cache_hit_and_flag_change(tmp_path: Path) -> None:
    table = write_tree(tmp_path / "src", TABLE, {"tiny.cu": TINY_CU})
    out = tmp_path / "out"
    (first,) = build.build(["tiny.cu"], out_dir=out, table=table, src_dir=tmp_path / "src", settings=archs("8.0"))
    assert not first.cached and first.obj.exists() and first.archs == ("8.0",)
    stamp = first.obj.stat().st_mtime_ns
    (second,) = build.build(["tiny.cu"], out_dir=out, table=table, src_dir=tmp_path / "src", settings=archs("8.0"))
    assert second.cached and second.obj == first.obj and second.obj.stat().st_mtime_ns == stamp
    (strict,) = build.build(
        ["tiny.cu"], out_dir=out, table=table, src_dir=tmp_path / "src", werror=True, settings=archs("8.0")
    )
    assert not strict.cached and strict.obj != first.obj  # a changed flag is a new hash
    lib = ctypes.CDLL(str(first.obj))  # loads without a GPU; the symbols are exported
    assert lib.vt_tiny_add and lib.vt_tiny_last_error
    manifest = (out / build.MANIFEST).read_text()
    assert strict.obj.name in manifest and first.obj.name not in manifest


@needs_nvcc
def test_compile_error_shows_nvcc_message_and_source(tmp_path: Path) -> None:
    bad = TINY_CU.replace("x[i] += 1.f;", "x[i] += undeclared_thing;")
    table = write_tree(tmp_path / "src", TABLE, {"tiny.cu": bad})
    with pytest.raises(build.BuildError) as e:
        build.build(["tiny.cu"], out_dir=tmp_path / "out", table=table, src_dir=tmp_path / "src", settings=archs("8.0"))
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'src' / 'tiny.cu'}: nvcc failed (exit ")
    assert 'error: identifier "undeclared_thing" is undefined' in msg
    assert "command: " in msg and "arch=compute_80,code=[sm_80,compute_80]" in msg
    assert list((tmp_path / "out").glob("*.so")) == []  # no half-written object left behind


@needs_nvcc
@pytest.mark.slow  # nvcc for every source on sm_90, less those compiled before (this session, the fat build)
def test_every_table_source_compiles(sm90_werror_dir: Path) -> None:
    """The real sources, sm_90 at least, warnings as errors: the fat build's objects where it compiled the sources
    as they are now (every arch, ci/fat-build.sh), else compiled here for sm_90 (nvcc_strict)."""
    table = build.load_table()
    results = strict_objects(list(table.sources), sm90_werror_dir, FatBuild.from_env(), table=table)
    assert sorted(results) == sorted(table.sources)
    for r in results.values():
        assert r.obj.exists() and "9.0" in r.archs
        family = r.source.stem
        lib = ctypes.CDLL(str(r.obj))
        assert getattr(lib, f"vt_{family}_last_error")


def test_the_largest_sources_start_first_and_results_keep_the_table_order(tmp_path: Path, monkeypatch) -> None:
    """Largest first by the bytes each source includes (transitively): the longest compiles do not start last."""
    big_h = '#include "common.cuh"\n// ' + "y" * 2000 + "\n"
    sources = {
        "small.cu": '#include "common.cuh"\n',
        "big.cu": '#include "big.cuh"\n',  # common.cuh through big.cuh
        "mid.cu": '#include "common.cuh"\n// ' + "x" * 1000 + "\n",
        "big.cuh": big_h,
    }
    table = write_tree(
        tmp_path / "src",
        'features:\n  portable: {archs: ["8.0"], doc: "x"}\nsources:\n  small.cu: portable\n  big.cu: portable\n'
        "  mid.cu: portable\n",
        sources,
    )
    sizes = {n: build.include_bytes(tmp_path / "src" / n) for n in ("small.cu", "big.cu", "mid.cu")}
    common = (tmp_path / "src" / "common.cuh").stat().st_size
    own = {n: len(sources[n]) for n in sizes}
    assert sizes == {n: common + own[n] for n in ("small.cu", "mid.cu")} | {
        "big.cu": common + own["big.cu"] + len(big_h)
    }
    started: list[str] = []

    def fake_compile(source: Path, archs: tuple[str, ...], out_dir: Path, *, werror: bool = False):
        started.append(source.name)
        out_dir.mkdir(parents=True, exist_ok=True)
        return build.BuildResult(source, out_dir / f"{source.stem}.so", archs, False, 0.0)

    monkeypatch.setattr(build, "compile_source", fake_compile)
    monkeypatch.setattr(build.os, "cpu_count", lambda: 1)  # one worker: the start order is the submit order
    results = build.build(out_dir=tmp_path / "out", table=table, src_dir=tmp_path / "src", settings=archs("8.0"))
    assert started == ["big.cu", "mid.cu", "small.cu"]
    assert [r.source.name for r in results] == ["small.cu", "big.cu", "mid.cu"]


@needs_nvcc
def test_cli_builds_into_out_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert build.main(["--out", str(tmp_path), "kv_store.cu"], archs("8.0")) == 0
    out = capsys.readouterr().out.splitlines()
    workers = os.cpu_count() or 1
    assert out[0] == f"building 1 source(s) with {workers} workers; each line below is one finished source"
    assert (
        out[1].startswith("[1/1] engine/cuda/kv_store.cu: compiled for ['8.0'] in ")
        and out[1].endswith(", all done")
        and out[2].startswith("done in ")
    )
    assert build.main(["--out", str(tmp_path), "kv_store.cu"], archs("8.0")) == 0
    assert "[1/1] engine/cuda/kv_store.cu: cached for ['8.0']" in capsys.readouterr().out
    assert build.main(["--out", str(tmp_path), "nope.cu"], archs("8.0")) == 1
    assert "nope.cu: not listed under 'sources'" in capsys.readouterr().err


def test_cli_json_report_says_what_it_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--json PATH`: the verdict `python -m lab ci` reads; a failed build examined nothing."""
    report = tmp_path / "build.json"
    assert build.main(["--out", str(tmp_path), "nope.cu", "--json", str(report)], archs("8.0")) == 1
    failed = json.loads(report.read_text())
    assert (failed["passed"], failed["examined"]) == (False, 0) and "nope.cu" in failed["summary"]

    def fake_compile(source: Path, archs: tuple[str, ...], out_dir: Path, *, werror: bool = False):
        return build.BuildResult(source, out_dir / f"{source.stem}.so", archs, False, 0.0)

    monkeypatch.setattr(build, "compile_source", fake_compile)
    assert build.main(["--out", str(tmp_path), "kv_store.cu", "--json", str(report)], archs("8.0")) == 0
    built = json.loads(report.read_text())
    assert (built["passed"], built["examined"]) == (True, 1)
    assert built["sources"] == [{"source": "kv_store.cu", "archs": ["8.0"], "cached": False}]


def test_progress_line_names_the_source_its_time_and_an_eta(tmp_path: Path) -> None:
    r = build.BuildResult(build.CUDA_DIR / "quant.cu", tmp_path / "quant-x.so", ("8.0", "9.0"), False, 62.14)
    assert build.progress_line(r, 3, 11, 70.0) == (
        f"[3/11] engine/cuda/quant.cu: compiled for ['8.0', '9.0'] in 62.1s -> {tmp_path / 'quant-x.so'}; "
        "70s elapsed, ETA 187s"
    )


def test_a_lost_temporary_file_in_the_device_link_is_rebuilt_serially(tmp_path, monkeypatch) -> None:
    """nvcc --threads can lose its own temporary file in the device link; the build reruns it on one thread."""
    calls = tmp_path / "calls"
    fake = tmp_path / "nvcc"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in *"--threads 1 "*) out=""; for a; do [ "$prev" = "-o" ] && out=$a; prev=$a; done;'
        ' : > "$out"; exit 0;; esac\n'
        "echo \"nvlink fatal   : Could not read file '/tmp/tmpxft_1_dlink.reg.c' (target: sm_100)\" >&2\n"
        "exit 255\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(build, "NVCC", str(fake))
    monkeypatch.setattr(build, "compiler_version", lambda: "fake")
    monkeypatch.setattr(build.os, "cpu_count", lambda: 2)  # the first run is multi-threaded
    source = tmp_path / "k.cu"
    source.write_text("// a source\n")
    result = build.compile_source(source, ("9.0",), tmp_path / "out")
    runs = calls.read_text().splitlines()
    assert len(runs) == 2 and "--threads 1 " in runs[1] and "--threads 1 " not in runs[0]
    assert result.obj.exists() and not result.cached


def _write_entries(out: str, first: int, count: int) -> None:
    for i in range(first, first + count):
        result = build.BuildResult(Path(f"/elsewhere/s{i}.cu"), Path(f"s{i}.o"), ("9.0",), False, 0.0)
        build.write_manifest(Path(out), [result], ["9.0"])


def test_processes_sharing_a_cache_lose_no_manifest_entry(tmp_path: Path) -> None:
    """Gates run side by side build into one cache: each writer's read-modify-write of the manifest is its own, so
    none fails on another's temporary file and every source's entry is kept."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_entries, args=(str(tmp_path), p * 30, 30)) for p in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 6
    data = json.loads((tmp_path / build.MANIFEST).read_text())
    assert sorted(data) == sorted(f"/elsewhere/s{i}.cu" for i in range(180))
    assert not list(tmp_path.glob("*.tmp"))
