"""cuBLASLt through ctypes, to measure its candidate algorithms for a decode GEMM against what cuBLAS picks unasked.

The library is the one torch already loaded (found in this process's memory map), so its version is torch's. One
problem: y[m, n] = x[m, k] W[n, k]^T in row-major torch tensors, which cuBLAS (column-major) sees as
y^T[n, m] = op_T(W as k x n) x^T (k x m): A = W transposed, B = x, C = D = y, fp32 accumulation and scale.
`candidates` asks the heuristic for up to `count` algorithms; `run` launches one on the current stream, with a
workspace held by the handle (so a CUDA graph can capture it).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import torch

LIBRARY = "libcublasLt.so"
# cublasLt.h / library_types.h
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
DESC_TRANSA, DESC_TRANSB = 3, 4  # cublasLtMatmulDescAttributes_t
PREF_MAX_WORKSPACE_BYTES = 1  # cublasLtMatmulPreferenceAttributes_t
CONFIG = {"algo": 0, "tile": 1, "splitk": 2, "stages": 6}  # cublasLtMatmulAlgoConfigAttributes_t, 4-byte values
DTYPES = {torch.bfloat16: CUDA_R_16BF, torch.float16: CUDA_R_16F}
WORKSPACE = 32 << 20  # bytes: what cuBLAS itself reserves on sm_90
_P, _I, _SZ = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
SIGNATURES: dict[str, list] = {  # every entry point used, typed (a size_t passed untyped would be a C int)
    "cublasLtCreate": [_P],
    "cublasLtMatmulDescCreate": [_P, _I, _I],
    "cublasLtMatmulDescSetAttribute": [_P, _I, _P, _SZ],
    "cublasLtMatrixLayoutCreate": [_P, _I, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64],
    "cublasLtMatmulPreferenceCreate": [_P],
    "cublasLtMatmulPreferenceSetAttribute": [_P, _I, _P, _SZ],
    "cublasLtMatmulPreferenceDestroy": [_P],
    "cublasLtMatmulAlgoGetHeuristic": [_P] * 7 + [_I, _P, _P],
    "cublasLtMatmulAlgoConfigGetAttribute": [_P, _I, _P, _SZ, _P],
    "cublasLtMatmul": [_P] * 14 + [_SZ, _P],
}


class _Heuristic(ctypes.Structure):  # cublasLtMatmulHeuristicResult_t
    _fields_ = [
        ("algo", ctypes.c_uint64 * 8),
        ("workspace", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


assert ctypes.sizeof(_Heuristic) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes"


@dataclass(frozen=True)
class Problem:
    """y[m, n] = x[m, k] W[n, k]^T as cuBLAS's column-major operands: (rows, cols, ld) of A, B and C/D."""

    m: int
    n: int
    k: int

    def layouts(self) -> tuple[tuple[int, int, int], tuple[int, int, int], tuple[int, int, int]]:
        return (self.k, self.n, self.k), (self.k, self.m, self.k), (self.n, self.m, self.n)


@dataclass(frozen=True)
class Algo:
    """One heuristic result: its descriptor (opaque), workspace and predicted waves, and what it is."""

    raw: bytes
    workspace: int
    waves: float
    config: dict[str, int]
    rank: int  # its place in the heuristic's order (0: what cuBLASLt would pick)

    def label(self) -> str:
        c = self.config
        return f"#{self.rank} algo {c['algo']} tile {c['tile']} splitK {c['splitk']} stages {c['stages']}"


def library_path(maps: str | None = None) -> str:
    """The cuBLASLt torch loaded, from /proc/self/maps (after a CUDA matmul has loaded it)."""
    text = maps if maps is not None else Path("/proc/self/maps").read_text()
    for line in text.splitlines():
        path = line.split()[-1] if line.split() else ""
        if Path(path).name.startswith(LIBRARY):
            return path
    raise RuntimeError(f"{LIBRARY} is not mapped in this process: run a CUDA matmul through torch first")


class Lt:
    """A cuBLASLt handle on `device` with its workspace; descriptors per problem and dtype, kept for the process."""

    def __init__(self, device: torch.device) -> None:
        w = torch.zeros(8, 8, dtype=torch.bfloat16, device=device)
        torch.nn.functional.linear(w, w)  # loads cuBLAS and cuBLASLt
        torch.cuda.synchronize(device)
        self.lib = ctypes.CDLL(library_path())
        for name, argtypes in SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
        self.device = device
        self.handle = ctypes.c_void_p()
        self._check(self.lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")
        self.workspace = torch.empty(WORKSPACE, dtype=torch.uint8, device=device)
        self._plans: dict[tuple[Problem, torch.dtype], tuple[ctypes.c_void_p, ...]] = {}
        self._alpha, self._beta = ctypes.c_float(1.0), ctypes.c_float(0.0)

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed: cublasStatus_t {status}")

    def _plan(self, p: Problem, dtype: torch.dtype) -> tuple[ctypes.c_void_p, ...]:
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype}: cuBLASLt is measured for {', '.join(map(str, DTYPES))}")
        key = (p, dtype)
        if key not in self._plans:
            lib, dt = self.lib, DTYPES[dtype]
            desc = ctypes.c_void_p()
            self._check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F), "DescCreate")
            for attr, op in ((DESC_TRANSA, CUBLAS_OP_T), (DESC_TRANSB, CUBLAS_OP_N)):
                value = ctypes.c_int32(op)
                status = lib.cublasLtMatmulDescSetAttribute(desc, attr, ctypes.byref(value), ctypes.sizeof(value))
                self._check(status, "DescSetAttribute")
            layouts = []
            for rows, cols, ld in p.layouts():
                layout = ctypes.c_void_p()
                status = lib.cublasLtMatrixLayoutCreate(
                    ctypes.byref(layout), dt, ctypes.c_uint64(rows), ctypes.c_uint64(cols), ctypes.c_int64(ld)
                )
                self._check(status, "MatrixLayoutCreate")
                layouts.append(layout)
            self._plans[key] = (desc, *layouts)
        return self._plans[key]

    def candidates(self, p: Problem, dtype: torch.dtype, count: int = 16) -> list[Algo]:
        """The heuristic's algorithms for the problem (those it marks usable), in its order."""
        lib = self.lib
        desc, a, b, c = self._plan(p, dtype)
        pref = ctypes.c_void_p()
        self._check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "PreferenceCreate")
        limit = ctypes.c_uint64(WORKSPACE)
        status = lib.cublasLtMatmulPreferenceSetAttribute(
            pref, PREF_MAX_WORKSPACE_BYTES, ctypes.byref(limit), ctypes.sizeof(limit)
        )
        self._check(status, "PreferenceSetAttribute")
        results = (_Heuristic * count)()
        got = ctypes.c_int(0)
        status = lib.cublasLtMatmulAlgoGetHeuristic(
            self.handle, desc, a, b, c, c, pref, count, results, ctypes.byref(got)
        )
        lib.cublasLtMatmulPreferenceDestroy(pref)
        self._check(status, "AlgoGetHeuristic")
        out = []
        for rank in range(got.value):
            r = results[rank]
            if r.state == 0:
                out.append(Algo(bytes(r.algo), int(r.workspace), float(r.waves), self._config(r.algo), rank))
        return out

    def _config(self, algo: ctypes.Array) -> dict[str, int]:
        out = {}
        for name, attr in CONFIG.items():
            value, written = ctypes.c_uint32(0), ctypes.c_size_t(0)
            status = self.lib.cublasLtMatmulAlgoConfigGetAttribute(
                ctypes.byref(algo), attr, ctypes.byref(value), ctypes.sizeof(value), ctypes.byref(written)
            )
            out[name] = int(value.value) if status == 0 else -1
        return out

    def run(self, algo: Algo, x: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y = x W^T with `algo`, on the current stream; x [m, k], W [n, k], y [m, n], contiguous, one dtype."""
        p = Problem(x.shape[0], w.shape[0], x.shape[1])
        desc, a, b, c = self._plan(p, x.dtype)
        raw = (ctypes.c_uint64 * 8).from_buffer_copy(algo.raw)
        status = self.lib.cublasLtMatmul(
            self.handle,
            desc,
            ctypes.byref(self._alpha),
            ctypes.c_void_p(w.data_ptr()),
            a,
            ctypes.c_void_p(x.data_ptr()),
            b,
            ctypes.byref(self._beta),
            ctypes.c_void_p(y.data_ptr()),
            c,
            ctypes.c_void_p(y.data_ptr()),
            c,
            ctypes.byref(raw),
            ctypes.c_void_p(self.workspace.data_ptr()),
            ctypes.c_size_t(WORKSPACE),
            ctypes.c_void_p(torch.cuda.current_stream(self.device).cuda_stream),
        )
        self._check(status, "cublasLtMatmul")
        return y
