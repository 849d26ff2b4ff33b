"""Engine matmul/GEMV call sites keep the caller's output dtype and take tuning from named constants declared once."""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from ...checks.gemv_invocation import cuda_sites as cu
from ...config import CublasLtRules
from ...context import Context
from ...results import CheckError, Finding, Result, Rule

if TYPE_CHECKING:
    from ...contentcache import ContentCache

ID = "gemv-invocation"
RULES = (
    Rule("GV001", "gemv-float32-output", "a matmul/GEMV call site hardcodes a float32 output, not the caller's"),
    Rule("GV002", "gemv-literal-tuning", "a launch or heuristic site takes a tuning parameter as a bare literal"),
    Rule("GV003", "gemv-constant-redeclared", "a tuning constant used at a launch or heuristic site is declared twice"),
    Rule("GV004", "gemv-too-few-sites", "fewer matmul/GEMV call sites were found than the configured minimum"),
    Rule("GV005", "cublaslt-output-dtype", "a cuBLASLt C/D layout's dtype is not the caller's out-dtype variable"),
    Rule("GV006", "cublaslt-algo-count", "a requestedAlgoCount is not a named constant behind its marker"),
)
R_F32, R_LITERAL, R_TWICE, R_FEW, R_LT_DTYPE, R_LT_ALGO = RULES

# Python call sites: torch's matmul family, F.linear, `@`, and the engine's own linear/GEMV ops.
TORCH_SITES = frozenset({"torch.matmul", "torch.mm", "torch.bmm", "torch.addmm", "torch.nn.functional.linear"})
TENSOR_METHODS = frozenset({"matmul", "mm", "bmm", "addmm"})
ENGINE_OP = re.compile(r"engine(\.\w+)*\.(linear|gemv|\w+_gemv|gemv_\w+)")
F32 = frozenset({"torch.float32", "torch.float"})
DTYPE_KEYWORDS = frozenset({"dtype", "out_dtype"})
TUNING_KEYWORD = re.compile(
    r"(num_)?splits?(_k)?|algos?|algo_count|num_algos|block_[a-z]+|threads|(num_)?warps|"
    r"tile_\w+|rows_per_\w+"
)
# CUDA: GEMV/GEMM kernels (A1 at their launches), and cuBLAS or heuristic calls (A2 on every argument).
GEMV_KERNEL = re.compile(r".*(gemv|gemm).*", re.I)
LIBRARY_CALL = re.compile(r"cublas\w+|\w*[Hh]euristic\w*")
# cuBLAS Ex calls: (A type, C type) argument positions; C = CUDA_R_32F over a narrower A is a float32 output.
CUBLAS_TYPES = {"cublasGemmEx": (8, 15), "cublasGemmBatchedEx": (8, 15), "cublasGemmStridedBatchedEx": (8, 17)}
STRUCTURAL = frozenset({"0", "1"})  # none and one are never tuning choices (empty shared memory, a single block)
LAUNCH_SLOTS = ("grid", "block", "shared memory")  # the stream slot holds no tuning
A1_HINT = "take the output dtype from the caller (x.dtype or an out_dtype argument), never float32"
A2_HINT = (
    "declare it once as a named constant (constexpr in the .cuh/.cu, a module constant in Python) and use the name"
)


@dataclass(frozen=True)
class Source:
    path: str  # relative to the repository root
    text: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--min-sites",
        type=int,
        default=None,
        help="fail below this many call sites (default: gemv.min_sites in .agents/config.yaml)",
    )


def run(ctx: Context, args: argparse.Namespace) -> Result:
    cfg = ctx.config.gemv
    py = _read(ctx, cfg.python)
    cuda = _read(ctx, cfg.cuda)
    minimum = getattr(args, "min_sites", None)
    cache = _python_cache(ctx)
    findings, sites = check_sources(
        py,
        cuda,
        cfg.min_sites if minimum is None else minimum,
        rule_sets=tuple(cfg.rule_sets),
        cublaslt=cfg.cublaslt,
        cache=cache,
    )
    cache.save()
    return Result.judge(
        ID,
        findings,
        sites,
        "call and launch sites",
        f"OK: {sites} matmul/GEMV call and kernel launch sites keep the caller's dtype and named tuning constants",
    )


def _read(ctx: Context, globs: list[str]) -> list[Source]:
    from ...boundedio import SOURCE_CAP, read_text

    try:
        return [Source(p, read_text(ctx.root / p, SOURCE_CAP, ctx.root, p)) for p in sorted(ctx.files(globs))]
    except OSError as exc:
        raise CheckError(f"cannot read an engine source: {exc}") from None


def check_sources(
    py: list[Source],
    cuda: list[Source],
    min_sites: int,
    rule_sets: tuple[str, ...] = ("engine",),
    cublaslt: CublasLtRules | None = None,
    cache: ContentCache | None = None,
) -> tuple[list[Finding], int]:
    """All findings over the Python and CUDA sources under the selected rule sets, and the number of call
    sites examined. With a `cache`, a Python file's findings and sites are remembered by its text (a CUDA
    file's depend on the other files: it is read each run)."""
    findings: list[Finding] = []
    sites = 0
    raw = {s.path: s.text for s in cuda}
    blanked = {s.path: cu.blank_comments(s.text) for s in cuda}
    if "engine" in rule_sets:
        for src in py:
            f, n = check_python(src) if cache is None else _check_python_cached(src, cache)
            findings += f
            sites += n
        for src in cuda:
            f, n = check_cuda(src, raw, blanked)
            findings += f
            sites += n
    if "cublaslt" in rule_sets:
        rules = cublaslt if cublaslt is not None else CublasLtRules.model_validate({})
        for src in cuda:
            f, n = check_cublaslt(src, raw, blanked, rules)
            findings += f
            sites += n
    if sites < min_sites:
        findings.append(
            R_FEW.finding(
                f"examined {sites} call and launch sites, fewer than the configured minimum {min_sites}",
                hint="check gemv.python/gemv.cuda in .agents/config.yaml point at the engine's sources",
            )
        )
    return findings, sites


# --- Python -------------------------------------------------------------------------------------------


def _python_cache(ctx: Context) -> ContentCache:
    from ...contentcache import ContentCache, source_stamp
    from ...gitio import git_dir_of

    return ContentCache(git_dir_of(ctx.root), ID, source_stamp("checks/gemv_invocation/__init__.py"), 65536)


def _check_python_cached(src: Source, cache: ContentCache) -> tuple[list[Finding], int]:
    """check_python's answer for this path and text, from the cache when it has it (a file that does not
    parse raises as before, and is never cached)."""
    key = cache.key(src.path, src.text)
    value = cache.get(key)
    if isinstance(value, list) and len(value) == 2 and type(value[0]) is int and isinstance(value[1], list):
        try:
            return [_finding(f) for f in value[1]], value[0]
        except (TypeError, ValueError):
            pass  # not a shape this function writes: derive it again
    found, n = check_python(src)
    cache.put(key, [n, [list(f) for f in found]])
    return found, n


def _finding(value: object) -> Finding:
    if not (isinstance(value, list) and len(value) == len(Finding._fields)):
        raise ValueError("not a finding")
    if not all(v is None or isinstance(v, str) for i, v in enumerate(value) if i != 4):
        raise ValueError("not a finding")
    if not (value[4] is None or type(value[4]) is int):
        raise ValueError("not a finding")
    return Finding(*value)


def check_python(src: Source) -> tuple[list[Finding], int]:
    try:
        tree = ast.parse(src.text, filename=src.path)
    except SyntaxError as exc:
        raise CheckError(f"{src.path}:{exc.lineno}: cannot parse: {exc.msg}") from None
    nodes = list(ast.walk(tree))
    aliases = _aliases(nodes)
    assigned = _module_assignments(tree)
    findings: list[Finding] = []
    sites = 0
    site: str | None
    for node in nodes:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            site, operands, keywords = "`@`", [node.left, node.right], []
        elif isinstance(node, ast.Call) and (site := _site_name(node.func, aliases)):
            operands, keywords = list(node.args), node.keywords
        else:
            continue
        sites += 1
        for i, op in enumerate(operands, 1):
            if form := _upcast(op, aliases):
                findings.append(
                    R_F32.finding(
                        f"{site} operand {i} is upcast with {form}: the output dtype must come "
                        f"from the caller's out dtype",
                        src.path,
                        node.lineno,
                        A1_HINT,
                    )
                )
        for kw in keywords:
            if kw.arg in DTYPE_KEYWORDS and _qualified(kw.value, aliases) in F32:
                findings.append(
                    R_F32.finding(
                        f"{site} is called with {kw.arg}={ast.unparse(kw.value)}: the output "
                        f"dtype must come from the caller's out dtype",
                        src.path,
                        node.lineno,
                        A1_HINT,
                    )
                )
            elif kw.arg and TUNING_KEYWORD.fullmatch(kw.arg):
                findings += _python_tuning(site, kw, assigned, src.path, node.lineno)
    return findings, sites


def _python_tuning(site: str, kw: ast.keyword, assigned: dict[str, list[int]], path: str, line: int) -> list[Finding]:
    value = kw.value
    if isinstance(value, ast.Constant) and type(value.value) is int and str(value.value) not in STRUCTURAL:
        return [
            R_LITERAL.finding(
                f"{site} is called with {kw.arg}={value.value}: a tuning parameter must be a named constant",
                path,
                line,
                A2_HINT,
            )
        ]
    if isinstance(value, ast.Name) and len(assigned.get(value.id, [])) > 1:
        lines = ", ".join(f"{path}:{n}" for n in assigned[value.id])
        return [
            R_TWICE.finding(
                f"tuning constant {value.id} passed as {kw.arg} to {site} is declared "
                f"{len(assigned[value.id])} times ({lines}): declare it once",
                path,
                line,
                A2_HINT,
            )
        ]
    return []


def _aliases(nodes: list[ast.AST]) -> dict[str, str]:
    """Local name -> qualified name, from the module's imports."""
    out: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _module_assignments(tree: ast.Module) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        else:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name):
                out.setdefault(t.id, []).append(node.lineno)
    return out


def _qualified(node: ast.expr, aliases: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([aliases.get(node.id, node.id), *reversed(parts)])


def _site_name(func: ast.expr, aliases: dict[str, str]) -> str | None:
    name = _qualified(func, aliases)
    if name in TORCH_SITES or (name and ENGINE_OP.fullmatch(name)):
        return name
    if isinstance(func, ast.Attribute) and func.attr in TENSOR_METHODS and not (name or "").startswith("torch."):
        return f".{func.attr}()"
    return None


def _upcast(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """`.float()`, `.to(torch.float32)` or `.type(torch.float32)` applied to an operand, as written."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    method = node.func.attr
    if method == "float" and not node.args:
        return ".float()"
    targets = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "dtype")]
    if method in ("to", "type") and any(_qualified(t, aliases) in F32 for t in targets):
        return f".{method}({', '.join(ast.unparse(t) for t in targets)})"
    return None


# --- CUDA ---------------------------------------------------------------------------------------------


def check_cuda(src: Source, raw: dict[str, str], blanked: dict[str, str] | None = None) -> tuple[list[Finding], int]:
    """Findings and site count of one CUDA source; `raw` holds every source by path (for its includes)."""
    blanked = blanked if blanked is not None else {p: cu.blank_comments(t) for p, t in raw.items()}
    code = blanked[src.path] if src.path in blanked else cu.blank_comments(src.text)
    unit = {p: blanked[p] for p in cu.translation_unit(src.path, raw)}
    findings: list[Finding] = []
    launches = cu.launches(code)
    for site in launches:
        if (
            GEMV_KERNEL.fullmatch(site.kernel)
            and (pos := _output_position(site, unit)) is not None
            and site.template_args[pos] == "float"
        ):
            findings.append(
                R_F32.finding(
                    f"GEMV launch {site.kernel} takes float as its output template argument: the output type must "
                    f"be a template parameter chosen from the caller's out dtype",
                    src.path,
                    site.line,
                    A1_HINT,
                )
            )
        for slot, expr in zip(LAUNCH_SLOTS, site.config):
            findings += _cuda_tuning(f"launch of {site.kernel}", f"{slot} ({expr})", expr, unit, src.path, site.line)
    calls = cu.library_calls(code, LIBRARY_CALL)
    for call in calls:
        if call.name in CUBLAS_TYPES:
            a, c = CUBLAS_TYPES[call.name]
            if len(call.args) > c and call.args[c] == "CUDA_R_32F" and call.args[a] != "CUDA_R_32F":
                findings.append(
                    R_F32.finding(
                        f"{call.name} writes a CUDA_R_32F output from {call.args[a]} operands: the output type must come "
                        f"from the caller's out dtype",
                        src.path,
                        call.line,
                        A1_HINT,
                    )
                )
        for i, expr in enumerate(call.args, 1):
            findings += _cuda_tuning(f"call of {call.name}", f"argument {i} ({expr})", expr, unit, src.path, call.line)
    return findings, len(launches) + len(calls)


def _cuda_tuning(where: str, what: str, expr: str, unit: dict[str, str], path: str, line: int) -> list[Finding]:
    findings = [
        R_LITERAL.finding(
            f"{where} has the bare literal {lit} in its {what}: a tuning parameter must be a named constant",
            path,
            line,
            A2_HINT,
        )
        for lit in cu.int_literals(expr)
        if lit not in STRUCTURAL
    ]
    for name in dict.fromkeys(cu.names_in(expr)):
        decls = [f"{p}:{n}" for p, text in unit.items() for n in cu.constant_declarations(text, name)]
        if len(decls) > 1:
            findings.append(
                R_TWICE.finding(
                    f"tuning constant {name} used by the {where} is declared {len(decls)} "
                    f"times ({', '.join(decls)}): declare it once",
                    path,
                    line,
                    A2_HINT,
                )
            )
    return findings


# `__launch_bounds__(...)` may stand between `void` and the name (one level of parentheses inside). The
# declaration is found from `__global__` forward and its `template <...>` looked for just before it, so a
# source full of unclosed `template <` costs one pass, not one pass per `template`.
_KERNEL_DECL = (
    r"__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*+\))*+\)\s*)?{name}\s*"
    r"\(([^)]*+)\)"
)
_TEMPLATE_HEAD = re.compile(r"template\s*<([^{};]*)>\s*$")
_TEMPLATE_LOOKBACK = 2048


@lru_cache(maxsize=256)
def _kernel_decl(name: str, text: str) -> tuple[re.Match[str], re.Match[str]] | None:
    """The template head and the declaration of kernel `name` in `text` (searched once per kernel name)."""
    m = re.search(_KERNEL_DECL.replace("{name}", re.escape(name)), text, re.S)
    before = text[max(0, m.start() - _TEMPLATE_LOOKBACK) : m.start()] if m else ""
    head = _TEMPLATE_HEAD.search(before, max(0, before.rfind("template")))
    return (head, m) if m and head else None


def _output_position(site: cu.Launch, unit: dict[str, str]) -> int | None:
    """Index of the template argument that types the kernel's output: the element type of its first
    non-const pointer parameter, read from the kernel's declaration in the translation unit."""
    name = site.kernel.split("::")[-1]
    for text in unit.values():
        found = _kernel_decl(name, text)
        if found is None:
            continue
        head, m = found
        params = [p.split()[-1] if p.split() else "" for p in cu.split_top_level(head.group(1))]
        for arg in cu.split_top_level(m.group(1)):
            ptr = re.match(r"(?!const\b)([A-Za-z_]\w*)\s*\*", arg.strip())
            if ptr and ptr.group(1) in params:
                pos = params.index(ptr.group(1))
                return pos if pos < len(site.template_args) else None
            if ptr:
                return None
    return None


# --- cuBLASLt -----------------------------------------------------------------------------------------

LT_DTYPE_HINT = (
    "pass the variable that holds the caller's out dtype (an f32 output stays legal when the "
    "caller asked for f32); gemv.cublaslt.out_dtype_vars names it"
)
LT_ALGO_HINT = (
    "declare `constexpr int kName = 1;` once and pass `/*{marker}=*/kName` (gemv.cublaslt.algo_constants "
    "lists the allowed names)"
)
_CUDA_TYPE = re.compile(r"CUDA_[A-Z0-9_]+")
_NAME = re.compile(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)*")


def check_cublaslt(
    src: Source, raw: dict[str, str], blanked: dict[str, str], rules: CublasLtRules
) -> tuple[list[Finding], int]:
    """The cuBLASLt rule set on one source: every C/D layout takes its dtype from an out-dtype variable, and
    every requestedAlgoCount is a named compile-time constant behind the `/*requestedAlgoCount=*/` marker."""
    code = blanked[src.path]
    text = raw[src.path]
    lines = cu.LineIndex(code)
    unit = {p: blanked[p] for p in cu.translation_unit(src.path, raw)}
    findings: list[Finding] = []
    layouts = [
        c
        for c in cu.call_spans(code, frozenset(rules.layout_calls))
        if len(c.args) >= 2 and _layout_var(c.args[0].text) in rules.output_layouts
    ]
    for call in layouts:
        target, dtype = call.args[0], call.args[1]
        if dtype.text in rules.out_dtype_vars:
            continue
        what = "the literal" if _CUDA_TYPE.fullmatch(dtype.text) else "the expression"
        findings.append(
            R_LT_DTYPE.finding(
                f"{call.name} creates the C/D layout {target.text} with {what} {dtype.text}, not the caller's out "
                f"dtype ({' or '.join(rules.out_dtype_vars)})",
                src.path,
                lines.line(dtype.start),
                LT_DTYPE_HINT,
            )
        )
    heuristics = cu.call_spans(code, frozenset(rules.heuristic_calls))
    marker = re.compile(rf"/\*\s*{re.escape(rules.marker)}\s*=\s*\*/\s*$")
    hint = LT_ALGO_HINT.replace("{marker}", rules.marker)
    for call in heuristics:
        where = f"{call.name}'s {rules.marker}"
        if len(call.args) < rules.algo_count_arg:
            findings.append(
                R_LT_ALGO.finding(
                    f"{call.name} has {len(call.args)} arguments, no {rules.marker} (argument {rules.algo_count_arg})",
                    src.path,
                    lines.line(call.start),
                    hint,
                )
            )
            continue
        arg = call.args[rules.algo_count_arg - 1]
        line = lines.line(arg.start)
        prev = call.args[rules.algo_count_arg - 2].end if rules.algo_count_arg > 1 else call.start
        before = text[prev : arg.start]  # raw text: the marker comment is blanked in `code`
        value = arg.text
        if not marker.search(before):
            findings.append(
                R_LT_ALGO.finding(
                    f"{where} argument ({value}) lacks the /*{rules.marker}=*/ marker", src.path, line, hint
                )
            )
            continue
        if not _NAME.fullmatch(value):
            kind = "the bare literal" if cu.int_literals(value) == [value] else "the expression"
            findings.append(R_LT_ALGO.finding(f"{where} is {kind} {value}, not a named constant", src.path, line, hint))
            continue
        name = value.split("::")[-1]
        decls = [f"{p}:{n}" for p, t in unit.items() for n in cu.constant_declarations(t, name)]
        if rules.algo_constants and name not in rules.algo_constants:
            findings.append(
                R_LT_ALGO.finding(
                    f"{where} is {value}, which is not one of the policy constants ({', '.join(rules.algo_constants)})",
                    src.path,
                    line,
                    hint,
                )
            )
        elif not decls:
            findings.append(
                R_LT_ALGO.finding(
                    f"{where} is {value}, a runtime value: no constexpr or #define of "
                    f"{name} in {src.path} or its includes",
                    src.path,
                    line,
                    hint,
                )
            )
        elif len(decls) > 1:
            findings.append(
                R_TWICE.finding(
                    f"tuning constant {name} used by {call.name} is declared {len(decls)} "
                    f"times ({', '.join(decls)}): declare it once",
                    src.path,
                    line,
                    A2_HINT,
                )
            )
    return findings, len(layouts) + len(heuristics)


def _layout_var(target: str) -> str:
    """`&lc.v`, `p.lc`, `ctx->lc` and `lc` all name the layout variable `lc`."""
    t = target.lstrip("&* ").replace("->", ".")
    t = t.removesuffix(".v")
    return t.rsplit(".", 1)[-1].strip()
