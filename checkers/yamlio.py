"""Load YAML with ruamel.yaml (round-trip, so edits keep comments) and validate it with pydantic,
turning every problem into an error that names the file, the line and the field."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from .linear import Meter
from .results import RecordError  # re-exported: loaders and callers catch it from here

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails
    from ruamel.yaml import YAML

# ruamel.yaml is imported where a document is parsed or written, not with this module: a run whose records
# and config all come from their parse caches (checkers.recordcache) never loads it.

__all__ = [
    "RecordError",
    "dump_yaml",
    "line_of",
    "load_model",
    "parse_yaml",
    "read_yaml",
    "to_plain",
    "validate",
    "yaml_rt",
]
M = TypeVar("M", bound=BaseModel)

MAX_YAML_BYTES = 1 << 20  # a record or config file over 1 MiB is refused, not parsed
MAX_YAML_DEPTH = 64  # nesting deeper than this is refused (the parser recurses)


def yaml_rt() -> YAML:
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    return y


def read_yaml(path: Path, display: str | None = None, root: Path | None = None) -> Any:
    """Parse one YAML file, read bounded (MAX_YAML_BYTES, from its size before reading) and, with `root`,
    only when it resolves inside `root` and is a regular file (checkers.boundedio)."""
    from .boundedio import Unreadable, read_bytes

    display = display or str(path)
    try:
        raw = read_bytes(path, MAX_YAML_BYTES, root, display)
    except FileNotFoundError:
        raise RecordError(display, [(None, "", "file not found")]) from None
    except Unreadable as exc:
        raise RecordError(display, [(None, "", exc.why)]) from None
    return parse_yaml(raw, display)


def parse_yaml(raw: bytes, display: str) -> Any:
    """Parse a file's bytes (so a caller can validate exactly the bytes it read once). Bounded: over
    MAX_YAML_BYTES, nesting past MAX_YAML_DEPTH, anchors, aliases and merge keys (`<<`) are refused, so
    a small file cannot expand into a huge document (billion laughs)."""
    if len(raw) > MAX_YAML_BYTES:
        raise RecordError(display, [(None, "", f"file is {len(raw)} bytes (limit {MAX_YAML_BYTES})")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordError(display, [(None, "", f"not UTF-8 text ({exc.reason})")]) from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # as a text-mode read would
    return load_text(text, display)


def load_text(text: str, display: str, line_offset: int = 0) -> Any:
    """Parse YAML text with the bounds of parse_yaml(); errors name `display` and the line."""
    from ruamel.yaml.error import YAMLError

    try:
        _check_tokens(text, display, line_offset)
        return yaml_rt().load(text)
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 + line_offset if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise RecordError(display, [(line, "", f"invalid YAML: {problem}")]) from None
    except RecursionError:
        raise RecordError(display, [(None, "", f"invalid YAML: nested deeper than {MAX_YAML_DEPTH}")]) from None


def _check_tokens(text: str, display: str, line_offset: int, meter: Meter | None = None) -> None:
    """Refuse anchors, aliases, merge keys and deep nesting from the token stream, before anything is
    built; `meter` counts the tokens and the characters the scanner advanced over for each."""
    from ruamel.yaml import tokens as t

    depth, after_key, seen = 0, False, 0
    for tok in yaml_rt().scan(text):
        if meter:
            meter.add(seen, tok.end_mark.index)
            seen = max(seen, tok.end_mark.index)
        line = tok.start_mark.line + 1 + line_offset
        if isinstance(tok, (t.AnchorToken, t.AliasToken)):
            kind = "anchor" if isinstance(tok, t.AnchorToken) else "alias"
            sigil = "&" if kind == "anchor" else "*"
            message = f"YAML {kind} {sigil}{tok.value} is not allowed in records and config (write the value out)"
            raise RecordError(display, [(line, "", message)])
        if after_key and isinstance(tok, t.ScalarToken) and tok.value == "<<" and tok.plain:
            raise RecordError(display, [(line, "", "YAML merge key << is not allowed in records and config")])
        if isinstance(
            tok,
            (t.BlockMappingStartToken, t.BlockSequenceStartToken, t.FlowMappingStartToken, t.FlowSequenceStartToken),
        ):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise RecordError(display, [(line, "", f"YAML nested deeper than {MAX_YAML_DEPTH}")])
        elif isinstance(tok, (t.BlockEndToken, t.FlowMappingEndToken, t.FlowSequenceEndToken)):
            depth -= 1
        after_key = isinstance(tok, t.KeyToken)


def dump_yaml(data: Any) -> str:
    buf = StringIO()
    yaml_rt().dump(data, buf)
    return buf.getvalue()


def validate(model: type[M], data: Any, display: str, plain: bool = False) -> M:
    """Validate `data` (as loaded by ruamel, or `plain` JSON data) against `model`; errors carry YAML line
    numbers."""
    if data is None:
        data = {}
    try:
        return model.model_validate(data if plain else to_plain(data))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            field = ".".join(str(p) for p in loc) or "(top level)"
            message = _message(err)
            if err["type"] == "extra_forbidden" and loc:
                message += _nearest_field(model, loc)
            problems.append((line_of(data, loc), field, message))
        raise RecordError(display, problems) from None


def load_model(model: type[M], path: Path, display: str | None = None, root: Path | None = None) -> tuple[M, Any]:
    """Read and validate one YAML file (read_yaml's bounds); returns the model and the round-trip document."""
    display = display or str(path)
    doc = read_yaml(path, display, root)
    return validate(model, doc, display), doc


def to_plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    return node


def line_of(doc: Any, loc: tuple[int | str, ...]) -> int | None:
    """The 1-based line of the deepest node on `loc` that the document has."""
    from ruamel.yaml.comments import CommentedMap, CommentedSeq

    line = None
    node = doc
    for part in loc:
        if isinstance(node, CommentedMap) and part in node:
            line = node.lc.key(part)[0] + 1
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
            line = node.lc.item(part)[0] + 1
            node = node[part]
        else:
            if line is None and isinstance(node, (CommentedMap, CommentedSeq)):
                line = node.lc.line + 1
            break
    if line is None and isinstance(doc, (CommentedMap, CommentedSeq)):
        line = doc.lc.line + 1
    return line


def _nearest_field(model: type[BaseModel], loc: tuple[int | str, ...]) -> str:
    """` (did you mean 'presets'?)` for a mistyped key: the closest field of the model the key sits in,
    found by walking `loc` through the models' annotations (lists and dicts of models included)."""
    import difflib
    import typing

    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue  # a list index, or a dict key under a dict field: the element model is already current
        field = current.model_fields.get(str(part))
        if field is None:
            return ""
        current = field.annotation
        for _ in range(3):  # list[M], dict[str, M], M | None: down to the model
            args = [a for a in typing.get_args(current) if isinstance(a, type) and issubclass(a, BaseModel)]
            if isinstance(current, type) and issubclass(current, BaseModel):
                break
            current = args[0] if args else current
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return ""
    names = list(current.model_fields) + [f.alias for f in current.model_fields.values() if f.alias]
    near = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _message(err: ErrorDetails) -> str:
    if err["type"] == "extra_forbidden":
        return "unknown key"
    if err["type"] == "missing":
        return "required key is missing"
    return err["msg"]
