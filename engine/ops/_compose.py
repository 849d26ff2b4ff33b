"""Composite references written once over the ops they run, so that the kernel table's arms that run a composite op
by its parts (engine/kernels/) run the reference's own glue over the table's ops."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class Composite(Generic[P, R]):
    """A composite op's reference: its `glue(parts, *args)` over the reference ops (`REFERENCES`), which the glue
    calls by name (`parts.linear`, `parts.rms_norm`); the kernel table runs `glue` over its ops under one snapshot."""

    def __init__(self, glue: Callable[Concatenate[Any, P], R]) -> None:
        self.glue = glue
        self.__name__ = glue.__name__
        self.__qualname__ = glue.__qualname__
        self.__module__ = glue.__module__
        self.__doc__ = glue.__doc__

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.glue(REFERENCES, *args, **kwargs)

    def __repr__(self) -> str:
        return f"<composite reference {self.__module__}.{self.__qualname__}>"


def composite(glue: Callable[Concatenate[Any, P], R]) -> Composite[P, R]:
    """Decorate a glue function `(parts, *args)` into its op's reference `(*args)` (see `Composite`)."""
    return Composite(glue)


# The reference ops a composite's glue runs (`parts.<name>`), each with the module that defines it (engine/ops/)
HOMES = {
    "linear": "gemv",
    "add_rms_norm_linear": "gemv",
    "linear_silu_mul": "gemv",
    "rms_norm": "norm",
    "fused_add_rms_norm": "norm",
    "qk_norm": "norm",
    "silu_and_mul": "act",
    "apply_rope_neox": "rope",
    "qk_norm_rope": "rope",
    "store_kv": "kv_store",
    "dequant_awq": "quant",
    "dequant_gptq": "quant",
    "dequant_nvfp4": "quant",
}


class _References:
    """The reference ops by name, each looked up in its module when the glue calls it, as a function's globals are
    (a test that patches `engine.ops.rope.apply_rope_neox` patches what the composites run)."""

    def __getattr__(self, name: str) -> Any:
        if name not in HOMES:
            raise AttributeError(f"{name!r}: not a reference op a composite runs (add it to HOMES in {__name__})")
        module = f"engine.ops.{HOMES[name]}"
        return getattr(sys.modules.get(module) or importlib.import_module(module), name)


REFERENCES = _References()
