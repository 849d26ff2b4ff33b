"""Read the GPU code a CUDA object really holds: ELF `.nv_fatbin` lookup and the fatbin container's entry headers.

Pure functions over bytes, no CUDA tools needed. Layout (little-endian):
- a container: u32 magic 0xBA55ED50, u16 version 1, u16 header size (16), u64 size of the entries
  that follow; a section may hold several containers back to back, zero-padded between them;
- an entry: u16 kind (1 PTX, 2 ELF cubin), u16 version, u32 header size (64 and up: larger for
  newer archs), u64 padded payload size, ..., u32 SM number at offset 28, u64 flags at offset 40
  (0x8000 / 0x2000: payload compressed with zstd / lz4; 0x100000: arch-specific "a"; 0x200000:
  family-specific "f"), u64 uncompressed size at offset 56; the payload follows the header.
Only headers are read, so compressed payloads need no decompression.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")  # host objects and libraries; relocatable (-rdc) objects
KIND_PTX, KIND_ELF = 1, 2
FLAG_COMPRESSED = 0x8000 | 0x2000
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY_SPECIFIC = 0x200000
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY_MIN = 64


class FatbinError(ValueError):
    """The bytes are not a well-formed ELF or fatbin; the message says where."""


@dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "sass" (ELF cubin), "ptx" or "other:<n>"
    arch: str  # "80", "90a", "100f"
    compressed: bool
    offset: int  # of the entry header within the fatbin bytes
    size: int  # payload bytes as stored (compressed size when compressed)


def read_object(path: Path) -> list[FatbinEntry]:
    """The fatbin entries of an ELF object/library (.o, .so) or of a raw .fatbin file; [] when it has none."""
    from ...boundedio import BUILD_CAP, read_bytes

    data = read_bytes(Path(path), BUILD_CAP)
    if data[:4] == _CONTAINER.pack(FATBIN_MAGIC, 0, 0, 0)[:4]:
        return parse_fatbin(data)
    blob = fatbin_section(data)
    return [] if blob is None else parse_fatbin(blob)


MAX_SECTION_NAME = 4096  # bytes of a section name read; real names are a few dozen
_NONZERO = re.compile(rb"[^\0]")


def fatbin_section(data: bytes) -> bytes | None:
    """The bytes of the object's fatbin section (`.nv_fatbin` or `__nv_relfatbin`), or None."""
    sections = elf_sections(data, wanted=FATBIN_SECTIONS)
    for name in FATBIN_SECTIONS:
        if name in sections:
            return sections[name]
    return None


def elf_sections(data: bytes, wanted: Sequence[str] | None = None) -> dict[str, bytes]:
    """Section name -> contents of a little-endian ELF64 file (NOBITS sections map to b""); with `wanted`,
    only those sections are copied out (every header is still checked). Linear in the file whatever its
    headers say: a name is read up to MAX_SECTION_NAME bytes, and a malformed file of 65,535 headers that
    all point at one huge section costs one check each, not one copy each."""
    if data[:4] != b"\x7fELF":
        raise FatbinError("not an ELF file (bad magic)")
    if len(data) < 0x40:
        raise FatbinError(f"truncated ELF header ({len(data)} bytes, want 64)")
    if data[4] != 2 or data[5] != 1:
        raise FatbinError(f"unsupported ELF class {data[4]} / data encoding {data[5]} (want ELF64 little-endian)")
    try:
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    except struct.error:
        raise FatbinError("truncated ELF section header table") from None
    if not headers or shstrndx >= len(headers):
        raise FatbinError(f"ELF section-name table index {shstrndx} out of range ({len(headers)} sections)")
    strtab = _slice(data, headers[shstrndx][4], headers[shstrndx][5], "section-name table")
    out: dict[str, bytes] = {}
    for name_off, sh_type, _flags, _addr, offset, size in headers:
        end = strtab.find(b"\0", name_off, name_off + MAX_SECTION_NAME)
        name = strtab[name_off : end if end >= 0 else name_off + MAX_SECTION_NAME].decode("utf-8", "replace")
        if sh_type == 8:  # SHT_NOBITS
            out[name] = b""
        elif offset + size > len(data):
            _slice(data, offset, size, f"section {name!r}")  # raises, naming the section
        elif wanted is None or name in wanted:
            out[name] = data[offset : offset + size]
    return out


def parse_fatbin(blob: bytes) -> list[FatbinEntry]:
    """Every entry header of every container in `blob`."""
    entries: list[FatbinEntry] = []
    pos = 0
    while pos + _CONTAINER.size <= len(blob):
        magic, _version, header_size, body = _CONTAINER.unpack_from(blob, pos)
        if magic != FATBIN_MAGIC:
            raise FatbinError(f"fatbin container at offset {pos}: bad magic {magic:#010x}")
        if header_size < _CONTAINER.size:
            raise FatbinError(f"fatbin container at offset {pos}: header size {header_size} < 16")
        start, end = pos + header_size, pos + header_size + body
        if end > len(blob):
            raise FatbinError(f"fatbin container at offset {pos}: size {body} runs past the end ({len(blob)} bytes)")
        entries += _entries(blob, start, end)
        pos = end
        more = _NONZERO.search(blob, pos)  # padding between containers, skipped in one scan
        pos = more.start() if more else len(blob)
    return entries


def _entries(blob: bytes, pos: int, end: int) -> list[FatbinEntry]:
    out = []
    while pos < end:
        if pos + _ENTRY_MIN > end:
            raise FatbinError(f"fatbin entry at offset {pos}: header truncated by the container end {end}")
        kind, _version, header_size, padded = struct.unpack_from("<HHIQ", blob, pos)
        (sm,) = struct.unpack_from("<I", blob, pos + 28)
        (flags,) = struct.unpack_from("<Q", blob, pos + 40)
        if header_size < _ENTRY_MIN or pos + header_size + padded > end:
            raise FatbinError(
                f"fatbin entry at offset {pos}: header size {header_size} / payload {padded} "
                f"do not fit the container (ends at {end})"
            )
        suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY_SPECIFIC else ""
        name = {KIND_PTX: "ptx", KIND_ELF: "sass"}.get(kind, f"other:{kind}")
        out.append(FatbinEntry(name, f"{sm}{suffix}", bool(flags & FLAG_COMPRESSED), pos, padded))
        pos += header_size + padded
    return out


def arch_lists(entries: list[FatbinEntry]) -> tuple[list[str], list[str]]:
    """(SASS archs, PTX archs), each deduplicated and in arch order: ['80', '90', '90a', '120']."""
    sass = {e.arch for e in entries if e.kind == "sass"}
    ptx = {e.arch for e in entries if e.kind == "ptx"}
    return sorted(sass, key=arch_key), sorted(ptx, key=arch_key)


def arch_key(arch: str) -> tuple[int, str]:
    digits = arch.rstrip("af")
    return (int(digits) if digits.isdigit() else 0, arch[len(digits) :])


def table_arch(spelling: str) -> str:
    """A feature-table spelling in fatbin form: '9.0' -> '90', '12.0a' -> '120a'."""
    major, _, rest = spelling.partition(".")
    return major + rest


def _slice(data: bytes, offset: int, size: int, what: str) -> bytes:
    if offset + size > len(data):
        raise FatbinError(f"{what} (offset {offset}, size {size}) runs past the end of the file ({len(data)} bytes)")
    return data[offset : offset + size]
