"""The fatbin parser on objects compiled by nvcc here, the nvcc flag reader, and a cross-check with cuobjdump (GPU machine)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from checkers.checks.gencode import fatbin, nvcc_flags

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gencode"
NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
needs_nvcc = pytest.mark.skipif(not Path(NVCC).exists(), reason="nvcc not found: the parsed objects are compiled")


def gencode_flags(archs: list[str], ptx: bool = True) -> list[str]:
    return [f for a in archs for f in ("-gencode", f"arch=compute_{a},code=[sm_{a}{f',compute_{a}' if ptx else ''}]")]


def compile_tiny(out: Path, archs: list[str], *extra: str, ptx: bool = True) -> Path:
    cmd = [
        NVCC,
        "-shared",
        "-Xcompiler",
        "-fPIC",
        *gencode_flags(archs, ptx),
        *extra,
        "-o",
        str(out),
        str(FIXTURES / "tiny.cu"),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return out


def compile_set(d: Path) -> dict[str, Path]:
    """tiny.cu compiled once per arch list the tests need."""
    return {
        "90": compile_tiny(d / "t90.so", ["90"]),
        "80,90": compile_tiny(d / "t8090.so", ["80", "90"]),
        "90a": compile_tiny(d / "t90a.so", ["90a"]),
        "80z": compile_tiny(d / "t80z.so", ["80"], "-Xfatbin", "-compress-all"),
    }


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return compile_set(tmp_path_factory.mktemp("objs"))


@needs_nvcc
def test_parser_reads_sass_and_ptx_archs(objects: dict[str, Path]) -> None:
    assert fatbin.arch_lists(fatbin.read_object(objects["80,90"])) == (["80", "90"], ["80", "90"])
    assert fatbin.arch_lists(fatbin.read_object(objects["90a"])) == (["90a"], ["90a"])


@needs_nvcc
def test_parser_reads_compressed_entries_from_headers(objects: dict[str, Path]) -> None:
    entries = fatbin.read_object(objects["80z"])
    assert {(e.kind, e.arch, e.compressed) for e in entries} == {("sass", "80", True), ("ptx", "80", True)}


@needs_nvcc
def test_parser_errors_name_the_offset(objects: dict[str, Path]) -> None:
    blob = fatbin.fatbin_section(objects["90"].read_bytes())
    assert blob is not None and fatbin.parse_fatbin(blob)
    with pytest.raises(fatbin.FatbinError, match=r"^fatbin container at offset 0: size \d+ runs past the end"):
        fatbin.parse_fatbin(blob[:100])
    with pytest.raises(fatbin.FatbinError, match=r"^fatbin container at offset 0: bad magic 0x00000000"):
        fatbin.parse_fatbin(bytes(4) + blob[4:])
    with pytest.raises(fatbin.FatbinError, match="not an ELF file"):
        fatbin.elf_sections(b"MZ" + bytes(100))


def test_object_without_gpu_code_has_no_entries(tmp_path: Path) -> None:
    host = tmp_path / "host.o"
    subprocess.run(["cc", "-c", "-x", "c", "-", "-o", str(host)], input=b"int f(void){return 1;}", check=True)
    assert fatbin.read_object(host) == []


def test_nvcc_flag_forms() -> None:
    def lists(args: str) -> tuple[list[str], list[str]]:
        a = nvcc_flags.archs_of(args.split())
        return sorted(a.sass, key=fatbin.arch_key), sorted(a.ptx, key=fatbin.arch_key)

    assert lists("-gencode arch=compute_90a,code=sm_90a") == (["90a"], [])
    assert lists("-gencode=arch=compute_80,code=[sm_80,compute_80] -arch=sm_120") == (["80", "120"], ["80", "120"])
    assert lists("--gpu-architecture=compute_90 --gpu-code=sm_90,compute_90") == (["90"], ["90"])
    assert lists("-arch compute_100") == ([], ["100"])
    with pytest.raises(nvcc_flags.FlagError, match="-arch=native: not resolvable without a GPU"):
        lists("-arch=native")


@pytest.mark.gpu
@needs_nvcc
def test_parser_agrees_with_cuobjdump(tmp_path: Path, objects: dict[str, Path]) -> None:
    tool = shutil.which("cuobjdump")
    if tool is None:
        pytest.skip("cuobjdump not found: the cross-check runs where the CUDA toolkit's tools are installed")
    objs = [*objects.values(), compile_tiny(tmp_path / "wide.so", ["80", "90", "100", "120"])]
    for obj in objs:
        listed = []
        for flag, kind in (("--list-elf", "sass"), ("--list-ptx", "ptx")):
            out = subprocess.run([tool, flag, str(obj)], capture_output=True, text=True, timeout=120).stdout
            listed += [(kind, m) for m in re.findall(r"\.sm_(\d+[af]?)\.(?:cubin|ptx)", out)]
        ours = [(e.kind, e.arch) for e in fatbin.read_object(obj)]
        assert sorted(ours) == sorted(listed), obj.name


def test_a_malformed_elf_of_many_headers_over_one_huge_section_is_read_once():
    """65,535 section headers that all point at one 8 MB section named by an unterminated string: the reader
    copied the section once per header and searched the whole name table for each name (a 32 MB file ran
    past 120 s). Now each header is one bounds check; only the fatbin sections are copied out."""
    import struct

    shnum, body = 0xFFFF, 8 << 20
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    shoff = 64 + body
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, shnum, 0)
    section = struct.pack("<IIQQQQ", 0, 1, 0, 0, 64, body) + bytes(24)  # name at 0 of a table without a NUL
    data = bytes(header) + b"A" * body + section * shnum
    assert fatbin.fatbin_section(data) is None
    assert fatbin.elf_sections(data, wanted=()) == {}
    few = bytearray(data[:shoff] + section * 2)
    struct.pack_into("<H", few, 0x3C, 2)
    everything = fatbin.elf_sections(bytes(few))
    assert list(everything) == ["A" * fatbin.MAX_SECTION_NAME] and len(everything["A" * 4096]) == body
