"""The SASS and PTX archs an nvcc command line asks for (-gencode, --generate-code, -arch, -code), for compile_commands.json."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_VIRTUAL = re.compile(r"^compute_(\d+[af]?)$")
_REAL = re.compile(r"^(?:sm|lto)_(\d+[af]?)$")


class FlagError(ValueError):
    """An arch flag that cannot be resolved statically (`-arch=native`, a malformed -gencode)."""


@dataclass
class Archs:
    sass: set[str] = field(default_factory=set)
    ptx: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class CompileCommand:
    file: Path  # absolute
    args: list[str]


def load_compile_commands(path: Path) -> list[CompileCommand]:
    """The CUDA (.cu) entries of a CMake compile_commands.json; raises FlagError naming the file."""
    from ...boundedio import BUILD_CAP, read_text
    from ...results import CheckError

    try:
        data = json.loads(read_text(Path(path), BUILD_CAP))
    except CheckError as exc:  # too big, not a file, not UTF-8 (a binary file)
        raise FlagError(f"cannot read compile commands: {exc}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise FlagError(f"{path}: cannot read compile commands ({exc})") from None
    if not isinstance(data, list):
        raise FlagError(f"{path}: expected a JSON list of compile commands")
    out = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or "file" not in entry or "directory" not in entry:
            raise FlagError(f"{path}: entry {i} lacks 'file' or 'directory'")
        args = entry.get("arguments") or shlex.split(entry.get("command", ""))
        file = Path(entry["directory"]) / entry["file"]
        if file.suffix == ".cu":
            out.append(CompileCommand(file.resolve(), [str(a) for a in args]))
    return out


def archs_of(args: list[str]) -> Archs:
    """What nvcc embeds for these arguments: -gencode pairs, or -arch/-code (`-arch=sm_90` means SASS and PTX 90)."""
    out = Archs()
    arch: str | None = None
    codes: list[str] | None = None
    i = 0
    while i < len(args):
        name, value, i = _option(args, i)
        if name in ("-gencode", "--generate-code"):
            _gencode(value, out)
        elif name in ("-arch", "--gpu-architecture"):
            arch = value
        elif name in ("-code", "--gpu-code"):
            codes = _split(value)
    if arch is not None:
        _arch_code(arch, codes, out)
    return out


def _option(args: list[str], i: int) -> tuple[str, str, int]:
    """(name, value, next index) for `-opt=value`, `-opt value` and plain arguments."""
    a = args[i]
    for name in ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code"):
        if a == name:
            if i + 1 >= len(args):
                raise FlagError(f"{name} without a value")
            return name, args[i + 1], i + 2
        if a.startswith(name + "="):
            return name, a[len(name) + 1 :], i + 1
    return a, "", i + 1


def _split(value: str) -> list[str]:
    return [v for v in value.strip("\"'[]").replace("[", "").replace("]", "").split(",") if v]


def _gencode(value: str, out: Archs) -> None:
    parts = dict(p.split("=", 1) for p in re.split(r",(?=\s*(?:arch|code)=)", value.strip("\"'")) if "=" in p)
    if "arch" not in parts or "code" not in parts:
        raise FlagError(f"-gencode {value!r}: expected arch=compute_XX,code=...")
    _arch_code(parts["arch"], _split(parts["code"]), out)


def _arch_code(arch: str, codes: list[str] | None, out: Archs) -> None:
    virt, real = _VIRTUAL.match(arch), _REAL.match(arch)
    if codes is None:
        if real:  # -arch=sm_XX: SASS for XX and PTX for compute_XX
            out.sass.add(real.group(1))
            out.ptx.add(real.group(1))
            return
        if virt:
            out.ptx.add(virt.group(1))
            return
        raise FlagError(f"-arch={arch}: not resolvable without a GPU (use sm_XX or compute_XX)")
    if not virt:
        raise FlagError(f"arch={arch}: expected compute_XX with an explicit code list")
    for code in codes:
        if m := _REAL.match(code):
            out.sass.add(m.group(1))
        elif m := _VIRTUAL.match(code):
            out.ptx.add(m.group(1))
        else:
            raise FlagError(f"code={code}: expected sm_XX or compute_XX")
