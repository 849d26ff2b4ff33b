"""Parse the exported launcher signatures of a .cu source into ctypes kinds, to hold a binding's argtypes to them."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

_EXPORT = re.compile(r"VT_EXPORT\s+(?:int|long long)\s+(vt_\w+)\s*\(([^)]*)\)", re.S)


def c_kind(param: str) -> type:
    """The ctypes type a binding passes for one C parameter declaration."""
    p = " ".join(param.split())
    if "*" in p:
        return ctypes.c_void_p
    kinds = {"int": ctypes.c_int, "float": ctypes.c_float, "long long": ctypes.c_longlong}
    base = p.rsplit(" ", 1)[0].removeprefix("const ")
    if base not in kinds:
        raise ValueError(f"unexpected C parameter type in {param!r}")
    return kinds[base]


def exported(source: Path) -> dict[str, list[type]]:
    """{launcher name: [ctypes kind of each parameter]} for every VT_EXPORT function of the source."""
    text = source.read_text()
    out = {}
    for name, params in _EXPORT.findall(text):
        params = params.strip()
        out[name] = [] if params in ("", "void") else [c_kind(p) for p in params.split(",")]
    return out
