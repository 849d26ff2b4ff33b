"""gencode: each rule's seeded violation on real nvcc objects with its full message, and a clean twin."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from checkers import registry
from checkers.checks import gencode
from checkers.config import Config, GencodeConfig
from checkers.context import Context
from checkers.preflight import run_check, run_preflight
from tests.checkers.test_fatbin import FIXTURES, compile_set, compile_tiny, needs_nvcc
from tests.conftest import stage

TABLE = 'features:\n  portable: {archs: [%s], doc: "x"}\n  hopper: {archs: ["9.0a"], doc: "y"}\nsources:\n%s'


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return compile_set(tmp_path_factory.mktemp("objs"))


def make_repo(root: Path, archs: str, sources: dict[str, str], files: list[str], built: dict[str, Path]) -> Path:
    """root/engine/cuda holds the table and the sources; root/build the objects under build.py's names."""
    cuda = root / "engine" / "cuda"
    cuda.mkdir(parents=True)
    (cuda / "arch_features.yaml").write_text(TABLE % (archs, "".join(f"  {k}: {v}\n" for k, v in sources.items())))
    for name in files:
        (cuda / name).write_text("// source\n")
    build = root / "build"
    build.mkdir()
    for i, (name, obj) in enumerate(built.items()):
        shutil.copy(obj, build / f"{Path(name).stem}-{i:016x}.so")
    return build


def run(root: Path, **kw: object) -> gencode.Result:
    args = argparse.Namespace(build_dir=kw.pop("build_dir", root / "build"), compile_commands=None, archs=None)
    for k, v in kw.items():
        setattr(args, k, v)
    stage(root)
    ctx = Context(root=root, config=Config(gencode=GencodeConfig()), env={})
    return gencode.run(ctx, args)


def pairs(result: gencode.Result) -> list[tuple[str, str]]:
    return [(f.rule, f.message) for f in result.findings]


# --- the check: a clean twin and each rule's seeded violation --------------------------------------------


@needs_nvcc
def test_clean_build_passes(tmp_path: Path, objects: dict[str, Path]) -> None:
    make_repo(
        tmp_path, '"8.0", "9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {"paged_attn.cu": objects["80,90"]}
    )
    result = run(tmp_path)
    assert (result.status.value, result.summary, result.examined) == (
        "pass",
        "OK: 1 sources match engine/cuda/arch_features.yaml for ['80','90','90a']",
        1,
    )


@needs_nvcc
def test_gc001_table_cell_edited_without_rebuilding(tmp_path: Path, objects: dict[str, Path]) -> None:
    make_repo(
        tmp_path, '"8.0", "9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {"paged_attn.cu": objects["90"]}
    )
    result = run(tmp_path)
    assert result.status.value == "fail"
    assert pairs(result) == [
        ("GC001", "engine/cuda/paged_attn.cu: gencode ['90'] != expected ['80','90']"),
        ("GC002", "engine/cuda/paged_attn.cu: ptx ['90'] != expected ['80','90']"),
    ]
    assert (result.findings[0].path, result.findings[0].line) == ("engine/cuda/arch_features.yaml", 5)


@needs_nvcc
def test_gc001_source_compiled_with_an_extra_arch(tmp_path: Path, objects: dict[str, Path]) -> None:
    make_repo(tmp_path, '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {"paged_attn.cu": objects["80,90"]})
    assert pairs(run(tmp_path, archs="9.0")) == [
        ("GC001", "engine/cuda/paged_attn.cu: gencode ['80','90'] != expected ['90']"),
        ("GC002", "engine/cuda/paged_attn.cu: ptx ['80','90'] != expected ['90']"),
    ]


@needs_nvcc
def test_gc002_ptx_missing_is_judged_by_policy(tmp_path: Path, objects: dict[str, Path]) -> None:
    sass_only = compile_tiny(tmp_path / "s.so", ["90"], ptx=False)
    make_repo(tmp_path / "r", '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {"paged_attn.cu": sass_only})
    assert pairs(run(tmp_path / "r", archs="9.0")) == [
        ("GC002", "engine/cuda/paged_attn.cu: ptx [] != expected ['90']")
    ]


@needs_nvcc
def test_gc003_source_missing_from_the_table(tmp_path: Path, objects: dict[str, Path]) -> None:
    make_repo(
        tmp_path,
        '"9.0"',
        {"paged_attn.cu": "portable"},
        ["paged_attn.cu", "kv_store.cu"],
        {"paged_attn.cu": objects["90"], "kv_store.cu": objects["90"]},
    )
    result = run(tmp_path, archs="9.0")
    assert pairs(result) == [
        ("GC003", "engine/cuda/kv_store.cu: not in the feature table engine/cuda/arch_features.yaml")
    ]
    assert result.findings[0].hint == "add `kv_store.cu: <feature>` under sources"


@needs_nvcc
def test_an_object_whose_source_is_not_in_this_tree_is_another_checkouts(
    tmp_path: Path, objects: dict[str, Path]
) -> None:
    """The build cache is per user: a source built from another checkout (a branch with a new .cu) leaves an object
    this tree has no source for. It is not this tree's finding; the same object with its source here is GC003."""
    built = {"paged_attn.cu": objects["90"], "prefetch.cu": objects["90"]}
    make_repo(tmp_path / "a", '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], built)
    result = run(tmp_path / "a", archs="9.0")
    assert (result.status.value, pairs(result)) == ("pass", [])
    make_repo(tmp_path / "b", '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu", "prefetch.cu"], built)
    assert [rule for rule, _ in pairs(run(tmp_path / "b", archs="9.0"))] == ["GC003"]


@needs_nvcc
def test_gc004_feature_with_no_requested_arch_is_reported(tmp_path: Path, objects: dict[str, Path]) -> None:
    make_repo(
        tmp_path,
        '"9.0"',
        {"paged_attn.cu": "portable", "wgmma.cu": "hopper"},
        ["paged_attn.cu", "wgmma.cu"],
        {"paged_attn.cu": objects["90"]},
    )
    assert pairs(run(tmp_path, archs="9.0")) == [
        ("GC004", "engine/cuda/wgmma.cu: feature 'hopper' archs ['9.0a'] share no arch with the requested ['9.0']")
    ]


@needs_nvcc
def test_gc005_table_names_a_missing_source_and_gc006_a_missing_object(
    tmp_path: Path, objects: dict[str, Path]
) -> None:
    make_repo(
        tmp_path,
        '"9.0"',
        {"paged_attn.cu": "portable", "gone.cu": "portable", "splitkv.cu": "portable"},
        ["paged_attn.cu", "splitkv.cu"],
        {"paged_attn.cu": objects["90"]},
    )
    assert pairs(run(tmp_path, archs="9.0")) == [
        ("GC005", "engine/cuda/gone.cu: listed under sources but does not exist"),
        ("GC006", "engine/cuda/splitkv.cu: no compiled object found"),
    ]


@needs_nvcc
def test_manifest_supplies_what_each_build_requested(tmp_path: Path, objects: dict[str, Path]) -> None:
    """A JIT build for 9.0 only passes against a 8.0+9.0 table; the same object recorded as a fat build fails."""
    build = make_repo(tmp_path, '"8.0", "9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {})
    shutil.copy(objects["90"], build / "paged_attn-0123456789abcdef.so")
    entry = {"object": "paged_attn-0123456789abcdef.so", "archs": ["9.0"], "requested": ["9.0", "9.0a"]}
    (build / "manifest.json").write_text(json.dumps({"engine/cuda/paged_attn.cu": entry}))
    result = run(tmp_path)
    assert (result.status.value, result.summary) == (
        "pass",
        "OK: 1 sources match engine/cuda/arch_features.yaml for ['90','90a']",
    )
    entry["requested"] = ["8.0", "9.0"]
    (build / "manifest.json").write_text(json.dumps({"engine/cuda/paged_attn.cu": entry}))
    assert pairs(run(tmp_path))[0] == ("GC001", "engine/cuda/paged_attn.cu: gencode ['90'] != expected ['80','90']")
    assert pairs(run(tmp_path, archs="9.0")) == []  # an explicit list wins over the manifest


def test_gc007_bad_spelling_and_unknown_feature(tmp_path: Path) -> None:
    make_repo(tmp_path, '"9.0", "sm_80"', {"paged_attn.cu": "nope"}, ["paged_attn.cu"], {})
    (tmp_path / "build" / "x.so").write_bytes(b"\x7fELF")  # something to examine; unreadable
    result = run(tmp_path, archs="9.0")
    assert [r for r, _ in pairs(result)] == ["GC007", "GC007", "GC008"]
    assert pairs(result)[:2] == [
        ("GC007", "feature 'portable': arch 'sm_80' is not a spelling like 9.0, 9.0a, 12.0a"),
        ("GC007", "engine/cuda/paged_attn.cu: feature 'nope' is not under features"),
    ]


def test_no_objects_is_an_error_not_a_pass(tmp_path: Path) -> None:
    make_repo(tmp_path, '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {})
    args = argparse.Namespace(build_dir=tmp_path / "build", compile_commands=None, archs=None)
    stage(tmp_path)
    ctx = Context(root=tmp_path, config=Config(gencode=GencodeConfig()), env={})
    result = run_check(registry.get("gencode"), ctx, args)
    assert (result.status.value, result.exit_code) == ("error", 3)
    assert result.summary == "no CUDA objects found to audit"


def test_missing_build_dir_is_an_error(tmp_path: Path) -> None:
    make_repo(tmp_path, '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {})
    with pytest.raises(gencode.CheckError, match="does not exist"):
        run(tmp_path, build_dir=tmp_path / "nope")


def test_nothing_built_here_is_a_skip_with_its_reason(tmp_path: Path) -> None:
    make_repo(tmp_path, '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {})
    cache = tmp_path / "no-cache"
    stage(tmp_path)
    ctx = Context(root=tmp_path, config=Config(gencode=GencodeConfig()), env={"VT_CUDA_CACHE": str(cache)})
    args = argparse.Namespace(build_dir=None, compile_commands=None, archs=None)
    result = gencode.run(ctx, args)
    assert (result.status.value, result.exit_code) == ("skip", 0)
    assert result.summary == (
        f"no CUDA build to audit ({cache} does not exist); "
        "ci/fat-build.sh builds every source and runs this check on the result"
    )
    cache.mkdir()  # a cache directory that a failed or interrupted build left empty: still nothing built
    result = gencode.run(ctx, args)
    assert (result.status.value, result.summary.split(";")[0]) == (
        "skip",
        f"no CUDA build to audit ({cache} holds no objects)",
    )


@needs_nvcc
def test_arch_specific_suffix_is_kept(tmp_path: Path, objects: dict[str, Path]) -> None:
    make_repo(tmp_path, '"9.0"', {"wgmma.cu": "hopper"}, ["wgmma.cu"], {"wgmma.cu": objects["90a"]})
    assert run(tmp_path, archs="9.0a").status.value == "pass"
    shutil.copy(objects["90"], next((tmp_path / "build").glob("*.so")))
    assert pairs(run(tmp_path, archs="9.0a"))[0] == (
        "GC001",
        "engine/cuda/wgmma.cu: gencode ['90'] != expected ['90a']",
    )


def test_compile_commands(tmp_path: Path) -> None:
    make_repo(
        tmp_path,
        '"8.0", "9.0"',
        {"paged_attn.cu": "portable", "kv_store.cu": "portable", "splitkv.cu": "portable"},
        ["paged_attn.cu", "kv_store.cu", "splitkv.cu"],
        {},
    )
    cc = tmp_path / "compile_commands.json"
    cc.write_text((FIXTURES / "compile_commands.json").read_text().replace("@ROOT@", str(tmp_path)))
    result = run(tmp_path, compile_commands=cc, archs="8.0,9.0")
    assert (result.examined, result.unit) == (3, "compile commands")
    assert pairs(result) == [
        ("GC001", "engine/cuda/kv_store.cu: gencode ['80'] != expected ['80','90']"),
        ("GC002", "engine/cuda/kv_store.cu: ptx ['80'] != expected ['80','90']"),
        ("GC001", "engine/cuda/paged_attn.cu: gencode ['90'] != expected ['80','90']"),
        ("GC002", "engine/cuda/paged_attn.cu: ptx ['90'] != expected ['80','90']"),
    ]


def test_the_fat_build_in_the_work_tree_is_the_default_build_dir(tmp_path: Path) -> None:
    ctx = Context(root=tmp_path, config=Config(), env={})
    assert gencode._default_build_dir(ctx, None) == Path.home() / ".cache" / "rowgate" / "cuda"
    fat = tmp_path / gencode.FAT_BUILD_DIR
    fat.mkdir(parents=True)
    assert gencode._default_build_dir(ctx, None) != fat  # empty: nothing built there
    (fat / "kv_store-0123456789abcdef.so").write_bytes(b"")
    assert gencode._default_build_dir(ctx, None) == fat
    ctx = Context(root=tmp_path, config=Config(), env={"VT_CUDA_CACHE": str(tmp_path / "cache")})
    assert gencode._default_build_dir(ctx, None) == tmp_path / "cache"
    assert gencode._default_build_dir(ctx, "objs") == tmp_path / "objs"


@pytest.mark.parametrize("field", ["table", "compile_commands", "build_dir", "source_dir"])
def test_a_configured_path_through_a_symlink_out_of_the_repository_is_an_error(tmp_path: Path, field: str):
    root = tmp_path / "repo"
    (root / "engine" / "cuda").mkdir(parents=True)
    (root / "engine" / "cuda" / "arch_features.yaml").write_text(TABLE % ('"9.0"', "  a.cu: portable\n"))
    (root / "engine" / "cuda" / "a.cu").write_text("// a\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text("[]")
    (root / "link").symlink_to(outside)
    stage(root)
    cfg = GencodeConfig(**{field: "link/x"})
    ctx = Context(root=root, config=Config(gencode=cfg), env={})
    args = argparse.Namespace(build_dir=None, compile_commands=None, archs=None)
    result = run_check(registry.get("gencode"), ctx, args)
    assert (result.status.value, result.summary, result.hint) == (
        "error",
        f"config gencode.{field}: link/x leads out of the repository through a symlink (to {outside / 'x'})",
        f"set gencode.{field} to a path inside the repository, relative to its root",
    )


def test_a_half_written_temporary_object_is_not_audited(tmp_path: Path) -> None:
    """A build in progress leaves mkstemp's tmpXXXXXXXX.so beside the objects: never audited, never GC008;
    the seeded twin, the same bytes under an object's name, is GC008."""
    make_repo(tmp_path, '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {})
    (tmp_path / "build" / "tmpa1b2c3d4.so").write_bytes(b"\x7fELF half")
    args = argparse.Namespace(build_dir=tmp_path / "build", compile_commands=None, archs=None)
    stage(tmp_path)
    ctx = Context(root=tmp_path, config=Config(gencode=GencodeConfig()), env={})
    result = run_check(registry.get("gencode"), ctx, args)
    assert (result.status.value, result.summary) == ("error", "no CUDA objects found to audit")
    (tmp_path / "build" / "paged_attn-0123456789abcdef.so").write_bytes(b"\x7fELF half")
    assert [r for r, _ in pairs(run(tmp_path, archs="9.0"))] == ["GC008", "GC006"]  # unreadable, so no object
    assert not gencode._built(tmp_path / "nothing") and gencode._TEMPORARY.match("tmpa1b2c3d4.so")


def test_the_preflight_lists_gencode_as_not_run_where_nothing_was_built(tmp_path: Path) -> None:
    make_repo(tmp_path, '"9.0"', {"paged_attn.cu": "portable"}, ["paged_attn.cu"], {})
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "tmpa1b2c3d4.so").write_bytes(b"\x7fELF half")  # a build in progress has built nothing yet
    stage(tmp_path)
    ctx = Context(root=tmp_path, config=Config(gencode=GencodeConfig()), env={"VT_CUDA_CACHE": str(cache)})
    not_run: list[tuple[str, str]] = []
    assert run_preflight(ctx, ["gencode"], not_run=not_run) == []
    assert not_run == [
        (
            "gencode",
            f"no build: no CUDA build to audit ({cache} holds no objects); "
            "ci/fat-build.sh builds every source and runs this check on the result",
        )
    ]
    (cache / "kv_store-0123456789abcdef.so").write_bytes(b"\x7fELF")  # built: the preflight runs it
    not_run.clear()
    [result] = run_preflight(ctx, ["gencode"], not_run=not_run)
    assert not_run == [] and "GC008" in [f.rule for f in result.findings]


# --- a CMake feature table (vllm.cpp's cmake/CudaArchFeatures.cmake form) --------------------------------

CMAKE_TABLE = """\
# CUDA architecture -> capability FEATURE TABLE (an excerpt of vllm.cpp's, d85906ae).
set(VT_CUDA_FEATURE_TABLE
  # native block-scaled fp4xfp4 mma.sync (cuda_matmul_nvfp4.cu). "not|a|cell" in a comment
  "fp4-mma|12.0a,12.1a|native block-scaled fp4xfp4 MMA (VT_FP4_MMA_SM120A)"
  "marlin-nvfp4|8.0+PTX,12.1a|vendored Marlin NVFP4 W4A16 MoE GEMM (VT_MARLIN_NVFP4)")
"""


def _cmake_repo(root: Path, marlin_code: str) -> Path:
    (root / "cmake").mkdir(parents=True)
    (root / "cmake" / "CudaArchFeatures.cmake").write_text(CMAKE_TABLE)
    cuda = root / "src" / "vt" / "cuda"
    cuda.mkdir(parents=True)
    for name in ("cuda_matmul_nvfp4.cu", "marlin.cu"):
        (cuda / name).write_text("// source\n")
    gencode_fp4 = (
        "-gencode arch=compute_120a,code=[sm_120a,compute_120a] -gencode arch=compute_121a,code=[sm_121a,compute_121a]"
    )
    commands = [
        {"directory": str(root), "file": str(cuda / "cuda_matmul_nvfp4.cu"), "command": f"nvcc {gencode_fp4} -c x.cu"},
        {"directory": str(root), "file": str(cuda / "marlin.cu"), "command": f"nvcc {marlin_code} -c y.cu"},
    ]
    cc = root / "compile_commands.json"
    cc.write_text(json.dumps(commands))
    return cc


def _cmake_run(root: Path, cc: Path) -> gencode.Result:
    stage(root)
    cfg = GencodeConfig(
        table="cmake/CudaArchFeatures.cmake",
        source_dir="src/vt/cuda",
        sources={"cuda_matmul_nvfp4.cu": "fp4-mma", "marlin.cu": "marlin-nvfp4"},
    )
    ctx = Context(root=root, config=Config(gencode=cfg), env={})
    return gencode.run(ctx, argparse.Namespace(build_dir=None, compile_commands=cc, archs="12.0a,12.1a"))


def test_a_cmake_feature_table_is_read_and_judged(tmp_path: Path) -> None:
    cc = _cmake_repo(tmp_path, "-gencode arch=compute_121a,code=[sm_121a,compute_121a]")
    result = _cmake_run(tmp_path, cc)
    assert (result.status.value, result.examined) == ("pass", 2), pairs(result)
    assert result.summary == "OK: 2 sources match cmake/CudaArchFeatures.cmake for ['120a','121a']"


def test_a_cmake_feature_source_built_for_an_arch_its_cell_lacks_fails(tmp_path: Path) -> None:
    both = (
        "-gencode arch=compute_120a,code=[sm_120a,compute_120a] -gencode arch=compute_121a,code=[sm_121a,compute_121a]"
    )
    result = _cmake_run(tmp_path, _cmake_repo(tmp_path, both))
    assert pairs(result)[0] == ("GC001", "src/vt/cuda/marlin.cu: gencode ['120a','121a'] != expected ['121a']")


def test_a_binary_compile_commands_file_is_a_one_line_error_not_a_decode_crash(tmp_path: Path) -> None:
    from checkers.checks.gencode.nvcc_flags import FlagError, load_compile_commands

    blob = tmp_path / "compile_commands.json"
    blob.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe" * 10)
    with pytest.raises(FlagError) as err:
        load_compile_commands(blob)
    assert str(err.value) == f"cannot read compile commands: {blob} is not UTF-8 text (byte 8: invalid start byte)"


def test_a_fifo_or_an_oversized_object_is_refused_before_reading(tmp_path: Path, monkeypatch) -> None:
    import os

    from checkers import boundedio
    from checkers.checks.gencode.fatbin import read_object
    from checkers.results import CheckError

    fifo = tmp_path / "kernel.o"
    os.mkfifo(fifo)
    with pytest.raises(CheckError, match="is a FIFO, not a file; not read"):
        read_object(fifo)  # opened without blocking, never read
    big = tmp_path / "big.o"
    with open(big, "wb") as f:
        f.truncate(boundedio.BUILD_CAP + 1)  # sparse: a size without the bytes
    with pytest.raises(CheckError, match=f"is {boundedio.BUILD_CAP + 1:,} bytes"):
        read_object(big)
