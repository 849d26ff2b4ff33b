"""Binding for the quantised-weight kernels (quant.cu): AWQ, GPTQ and NVFP4 dequant and M=1 dequant-GEMV.

Signatures follow the references in engine/ops/quant.py; the dequants are bit-exact to them,
the GEMVs (`*_linear`, one row of x) agree with dequant-then-linear within the output dtype's tolerance.
Every call is CUDA-graph capturable: no host-to-device copy and no host sync (a float global scale is
passed by value; out-of-range g_idx values give NaN instead of a host-side check).
"""

from __future__ import annotations

import ctypes
from functools import cache

import torch

from engine.cuda import build, ffi

_P = ctypes.c_void_p
_I = ctypes.c_int
_F = ctypes.c_float
PACK = 8  # int4 values per int32 word
NVFP4_BLOCK = 16  # values per fp8 block scale
GPTQ_ZERO_OFFSET = {1: 1, 2: 0}  # format version -> added to the stored zero


# The launchers' C signatures (argument kinds in order), checked against quant.cu by the tests.
SIGNATURES: dict[str, list] = {
    "vt_quant_awq_dequant": [_P] * 4 + [_I] * 5 + [_P],
    "vt_quant_gptq_dequant": [_P] * 5 + [_I] * 6 + [_P],
    "vt_quant_nvfp4_dequant": [_P] * 3 + [_F, _P] + [_I] * 3 + [_P],
    "vt_quant_awq_gemv": [_P] * 8 + [_I] * 6 + [_P],
    "vt_quant_gptq_gemv": [_P] * 9 + [_I] * 7 + [_P],
    "vt_quant_nvfp4_gemv": [_P] * 4 + [_F] + [_P] * 2 + [_I] * 4 + [_P],
    "vt_quant_gemv_max_splits": [],
    "vt_quant_gemv_max_tiles": [],
}
# per device: the int4 GEMVs' split-K arrival counters, shared by every stream, so two int4 GEMVs must not
# run at once on different streams of one device
_COUNTERS: dict[torch.device, torch.Tensor] = {}


@cache
def _lib() -> ctypes.CDLL:
    lib = build.load("quant.cu")
    for name, argtypes in SIGNATURES.items():
        ffi.bind(lib, name, argtypes)
    return lib


def dequant_awq(
    qweight: torch.Tensor,  # qweight: [K, N/8] int32, packed along N, nibble order 0,4,1,5,2,6,3,7
    qzeros: torch.Tensor,  # qzeros: [K/group, N/8] int32
    scales: torch.Tensor,  # scales: [K/group, N]
    group_size: int,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    """`launch_dequant_awq` after the checks that name the bad argument: the entry for a direct call."""
    k, _ = _int4(qweight, qzeros, scales, along_n=True)
    _group(k, group_size, scales)
    return launch_dequant_awq(qweight, qzeros, scales, group_size, dtype)


def supports_dequant_awq(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int, dtype: torch.dtype | None = None
) -> bool:
    """What the AWQ dequant needs past the op's check (engine/ops/quant.py: ranks, dtypes, shapes, the group):
    the three tensors contiguous on qweight's device and an output dtype it writes. The table's arm asks this,
    then launches unchecked (`launch_dequant_awq`)."""
    dev = qweight.device
    dense = all(t.is_contiguous() for t in (qweight, qzeros, scales))
    return dense and qzeros.device == dev and scales.device == dev and (dtype is None or dtype in ffi.DTYPE_CODES)


def launch_dequant_awq(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, group_size: int, dtype: torch.dtype | None = None
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    """The AWQ dequant launch, its inputs already checked (by `dequant_awq`, or by the table's check and
    `supports_dequant_awq`)."""
    k, n = qweight.shape[0], qweight.shape[1] * PACK
    out = torch.empty(k, n, dtype=dtype or scales.dtype, device=qweight.device)
    lib = _lib()
    rc = lib.vt_quant_awq_dequant(
        *ffi.ptrs(qweight, qzeros, scales, out),
        k,
        n,
        group_size,
        ffi.dtype_code(scales, "scales"),
        ffi.dtype_code(out, "dtype"),
        ffi.stream(qweight.device),
    )
    ffi.check(rc, "vt_quant_awq_dequant", lib, "quant")
    return out


def dequant_gptq(
    qweight: torch.Tensor,  # qweight: [K/8, N] int32, packed along K
    qzeros: torch.Tensor,  # qzeros: [groups, N/8] int32, packed along N
    scales: torch.Tensor,  # scales: [groups, N]
    g_idx: torch.Tensor,  # g_idx: [K] int in [0, groups), the group of each input row (act order)
    bits: int = 4,
    version: int = 1,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    """`launch_dequant_gptq` after the checks that name the bad argument: the entry for a direct call."""
    k, _ = _int4(qweight, qzeros, scales, along_n=False)
    _g_idx(g_idx, k, bits, version, qweight.device)
    return launch_dequant_gptq(qweight, qzeros, scales, g_idx, bits, version, dtype)


def supports_dequant_gptq(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    dtype: torch.dtype | None = None,
) -> bool:
    """What the GPTQ dequant needs past the op's check (engine/ops/quant.py: ranks, dtypes, shapes, bits in
    (2, 4, 8), the format version): 4-bit weights, qweight, qzeros and scales contiguous on qweight's device, g_idx
    there too (any stride: the launch hands it over as contiguous int32), an output dtype it writes. The table's
    arm asks this, then launches unchecked (`launch_dequant_gptq`)."""
    dev = qweight.device
    dense = all(t.is_contiguous() for t in (qweight, qzeros, scales))
    same = all(t.device == dev for t in (qzeros, scales, g_idx))
    return bits == 4 and dense and same and (dtype is None or dtype in ffi.DTYPE_CODES)


def launch_dequant_gptq(
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:  # [K, N], dtype (default scales.dtype)
    """The GPTQ dequant launch, its inputs already checked (by `dequant_gptq`, or by the table's check and
    `supports_dequant_gptq`)."""
    k, n = qweight.shape[0] * PACK, qweight.shape[1]
    g32 = g_idx.to(torch.int32).contiguous()
    out = torch.empty(k, n, dtype=dtype or scales.dtype, device=qweight.device)
    lib = _lib()
    rc = lib.vt_quant_gptq_dequant(
        *ffi.ptrs(qweight, qzeros, scales, g32, out),
        k,
        n,
        scales.shape[0],
        GPTQ_ZERO_OFFSET[version],
        ffi.dtype_code(scales, "scales"),
        ffi.dtype_code(out, "dtype"),
        ffi.stream(qweight.device),
    )
    ffi.check(rc, "vt_quant_gptq_dequant", lib, "quant")
    return out


def dequant_nvfp4(
    packed: torch.Tensor,  # packed: [N, K/2] uint8, value 2i in the low nibble
    block_scales: torch.Tensor,  # block_scales: [N, K/16] float8_e4m3fn
    global_scale: torch.Tensor | float,  # [] or [1] fp32, or a float
    dtype: torch.dtype,
) -> torch.Tensor:  # [N, K], dtype
    """`launch_dequant_nvfp4` after the checks that name the bad argument: the entry for a direct call."""
    _nvfp4(packed, block_scales)
    return launch_dequant_nvfp4(packed, block_scales, global_scale, dtype)


def supports_dequant_nvfp4(
    packed: torch.Tensor, block_scales: torch.Tensor, global_scale: torch.Tensor | float, dtype: torch.dtype
) -> bool:
    """What the NVFP4 dequant needs past the op's check (engine/ops/quant.py: ranks, dtypes, shapes, the output
    dtype, one fp32 global scale): packed and the block scales contiguous on one device. The table's arm asks
    this, then launches unchecked (`launch_dequant_nvfp4`)."""
    same = block_scales.device == packed.device
    return same and packed.is_contiguous() and block_scales.is_contiguous()


def launch_dequant_nvfp4(
    packed: torch.Tensor, block_scales: torch.Tensor, global_scale: torch.Tensor | float, dtype: torch.dtype
) -> torch.Tensor:  # [N, K], dtype
    """The NVFP4 dequant launch, its tensors already checked (by `dequant_nvfp4`, or by the table's check and
    `supports_dequant_nvfp4`); the global scale goes by pointer or by value (`global_scale_arg`)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    gs_ptr, gs_value = global_scale_arg(global_scale, packed.device)
    out = torch.empty(n, k, dtype=dtype, device=packed.device)
    lib = _lib()
    rc = lib.vt_quant_nvfp4_dequant(
        *ffi.ptrs(packed, block_scales, gs_ptr),
        gs_value,
        ffi.ptr(out),
        n,
        k,
        ffi.dtype_code(out, "dtype"),
        ffi.stream(packed.device),
    )
    ffi.check(rc, "vt_quant_nvfp4_dequant", lib, "quant")
    return out


def awq_linear(
    x: torch.Tensor,  # x: [..., K], one row in all (M = 1)
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
) -> torch.Tensor:  # [..., N], x.dtype
    """`launch_awq_linear` after the checks that name the bad argument: the entry for a direct call."""
    k, n = _int4(qweight, qzeros, scales, along_n=True)
    _group(k, group_size, scales)
    _check_gemv_io(x, k, n, bias, qweight.device)
    return launch_awq_linear(x, qweight, qzeros, scales, group_size, bias)


def supports_awq_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
) -> bool:
    """What the fused AWQ GEMV needs past the op's check (engine/ops/quant.py: ranks, dtypes, shapes, the group, x's
    K): `supports_gemv`. The table's arm asks this, then launches unchecked (`launch_awq_linear`)."""
    return supports_gemv(x, qweight.shape[1] * PACK, bias, qweight, qzeros, scales)


def launch_awq_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:  # [..., N], x.dtype
    """The fused AWQ GEMV launch, its inputs already checked (by `awq_linear`, or by the table's check and
    `supports_awq_linear`)."""
    k, n = qweight.shape[0], qweight.shape[1] * PACK
    xv, out, b = _gemv_io(x, k, n, bias)
    lib = _lib()
    partial, counters = _workspace(lib, n, x.device)
    rc = lib.vt_quant_awq_gemv(
        *ffi.ptrs(xv, qweight, qzeros, scales, b, partial, counters, out),
        k,
        n,
        group_size,
        *_gemv_dtype_codes(x, scales, out),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_quant_awq_gemv", lib, "quant")
    return out


def gptq_linear(
    x: torch.Tensor,  # x: [..., K], one row in all (M = 1)
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
) -> torch.Tensor:  # [..., N], x.dtype
    """`launch_gptq_linear` after the checks that name the bad argument: the entry for a direct call."""
    k, n = _int4(qweight, qzeros, scales, along_n=False)
    _g_idx(g_idx, k, bits, version, qweight.device)
    _check_gemv_io(x, k, n, bias, qweight.device)
    return launch_gptq_linear(x, qweight, qzeros, scales, g_idx, bits, version, bias)


def supports_gptq_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    bias: torch.Tensor | None = None,
) -> bool:
    """What the fused GPTQ GEMV needs past the op's check (engine/ops/quant.py: ranks, dtypes, shapes, the format
    version, x's K): 4-bit weights, `supports_gemv`, g_idx on x's device (any stride: the launch hands it over as
    contiguous int32). The table's arm asks this, then launches unchecked (`launch_gptq_linear`)."""
    gemv_ok = supports_gemv(x, qweight.shape[1], bias, qweight, qzeros, scales)
    return bits == 4 and gemv_ok and g_idx.device == x.device


def launch_gptq_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    qzeros: torch.Tensor,
    scales: torch.Tensor,
    g_idx: torch.Tensor,
    bits: int = 4,
    version: int = 1,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:  # [..., N], x.dtype
    """The fused GPTQ GEMV launch, its inputs already checked (by `gptq_linear`, or by the table's check and
    `supports_gptq_linear`)."""
    k, n = qweight.shape[0] * PACK, qweight.shape[1]
    g32 = g_idx.to(torch.int32).contiguous()
    xv, out, b = _gemv_io(x, k, n, bias)
    lib = _lib()
    partial, counters = _workspace(lib, n, x.device)
    rc = lib.vt_quant_gptq_gemv(
        *ffi.ptrs(xv, qweight, qzeros, scales, g32, b, partial, counters, out),
        k,
        n,
        scales.shape[0],
        GPTQ_ZERO_OFFSET[version],
        *_gemv_dtype_codes(x, scales, out),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_quant_gptq_gemv", lib, "quant")
    return out


def nvfp4_linear(
    x: torch.Tensor,  # x: [..., K], one row in all (M = 1)
    packed: torch.Tensor,
    block_scales: torch.Tensor,
    global_scale: torch.Tensor | float,
    bias: torch.Tensor | None = None,  # bias: [N], x.dtype
) -> torch.Tensor:  # [..., N], x.dtype
    """`launch_nvfp4_linear` after the checks that name the bad argument: the entry for a direct call."""
    n, k = _nvfp4(packed, block_scales)
    global_scale_arg(global_scale, packed.device)
    _check_gemv_io(x, k, n, bias, packed.device)
    return launch_nvfp4_linear(x, packed, block_scales, global_scale, bias)


def supports_nvfp4_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    block_scales: torch.Tensor,
    global_scale: torch.Tensor | float,
    bias: torch.Tensor | None = None,
) -> bool:
    """What the fused NVFP4 GEMV needs past the op's check (engine/ops/quant.py: ranks, dtypes, shapes, one fp32
    global scale, x's K): `supports_gemv`, and a global scale the launch passes without a copy (a float, or a tensor
    on x's device or the host). The table's arm asks this, then launches unchecked (`launch_nvfp4_linear`)."""
    dev = x.device
    scale_ok = not isinstance(global_scale, torch.Tensor) or global_scale.device in (dev, torch.device("cpu"))
    return scale_ok and supports_gemv(x, packed.shape[0], bias, packed, block_scales)


def launch_nvfp4_linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    block_scales: torch.Tensor,
    global_scale: torch.Tensor | float,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:  # [..., N], x.dtype
    """The fused NVFP4 GEMV launch, its inputs already checked (by `nvfp4_linear`, or by the table's check and
    `supports_nvfp4_linear`); the global scale goes by pointer or by value (`global_scale_arg`)."""
    n, k = packed.shape[0], packed.shape[1] * 2
    gs_ptr, gs_value = global_scale_arg(global_scale, packed.device)
    xv, out, b = _gemv_io(x, k, n, bias)
    lib = _lib()
    rc = lib.vt_quant_nvfp4_gemv(
        *ffi.ptrs(xv, packed, block_scales, gs_ptr),
        gs_value,
        *ffi.ptrs(b, out),
        n,
        k,
        ffi.dtype_code(x, "x"),
        ffi.dtype_code(out, "out"),
        ffi.stream(x.device),
    )
    ffi.check(rc, "vt_quant_nvfp4_gemv", lib, "quant")
    return out


def supports_gemv(x: torch.Tensor, n: int, bias: torch.Tensor | None, *weights: torch.Tensor) -> bool:
    """What every fused dequant-GEMV needs past its op's check: one row of x (M = 1), the checkpoint's `weights`
    contiguous on x's device, and a bias [N] of x's dtype there (any stride: the launch hands it over contiguous)."""
    dev = x.device
    one_row = x.numel() == x.shape[-1]
    dense = all(t.device == dev and t.is_contiguous() for t in weights)
    bias_ok = bias is None or (bias.dim() == 1 and bias.shape[0] == n and bias.dtype == x.dtype and bias.device == dev)
    return one_row and dense and bias_ok


def _workspace(lib: ctypes.CDLL, n: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """An int4 GEMV's split-K workspace: fp32 partial sums [max splits, N] (per call, from the caching
    allocator) and the device's int32 arrival counters (zeroed once, left zero by every launch)."""
    partial = torch.empty(lib.vt_quant_gemv_max_splits(), n, dtype=torch.float32, device=dev)
    return partial, split_counters(lib.vt_quant_gemv_max_tiles(), dev)


def split_counters(count: int, dev: torch.device) -> torch.Tensor:
    """The device's zeroed split-K counters, made on first use; a zeroing memset captured into a CUDA graph
    would not run until replay, so the first use must come before any capture."""
    counters = _COUNTERS.get(dev)
    if counters is None or counters.numel() < count:
        if dev.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "quant GEMV: call it once outside CUDA graph capture first (its split-K counters "
                "are zeroed on first use)"
            )
        counters = _COUNTERS[dev] = torch.zeros(count, dtype=torch.int32, device=dev)
    return counters


def _int4(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, along_n: bool) -> tuple[int, int]:
    """(K, N) of an int4 checkpoint, after checking every tensor's rank, dtype, device and shape."""
    dev = qweight.device
    ffi.require(qweight, "qweight", dim=2, dtype=torch.int32)
    ffi.require(qzeros, "qzeros", dim=2, dtype=torch.int32, device=dev)
    ffi.require(scales, "scales", dim=2, device=dev)
    ffi.dtype_code(scales, "scales")
    k, n = (qweight.shape[0], qweight.shape[1] * PACK) if along_n else (qweight.shape[0] * PACK, qweight.shape[1])
    if scales.shape[1] != n or n % PACK:
        raise ValueError(f"scales: shape {tuple(scales.shape)} is not [groups, N={n}] with N a multiple of 8")
    if qzeros.shape != (scales.shape[0], n // PACK):
        raise ValueError(f"qzeros: shape {tuple(qzeros.shape)} != [groups={scales.shape[0]}, N/8={n // PACK}]")
    return k, n


def _group(k: int, group_size: int, scales: torch.Tensor) -> None:
    if group_size < 1 or k % group_size or scales.shape[0] != k // group_size:
        raise ValueError(f"group_size: {group_size} must divide K={k} into scales' {scales.shape[0]} groups")


def _g_idx(g_idx: torch.Tensor, k: int, bits: int, version: int, dev: torch.device) -> None:
    """The bits, the format version and g_idx (the launch hands it over as contiguous int32). Its values are not
    read here (that would sync): the kernels turn the rows of a value outside [0, groups) into NaN."""
    if bits != 4:
        raise ValueError(f"bits: the GPTQ kernels take 4-bit checkpoints, got {bits}")
    if version not in GPTQ_ZERO_OFFSET:
        raise ValueError(f"version: {version} is not a GPTQ format version (1 or 2)")
    ffi.require(g_idx, "g_idx", dim=1, device=dev, contiguous=False)
    if g_idx.shape[0] != k or g_idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"g_idx: {g_idx.dtype} shape {tuple(g_idx.shape)} is not int32/int64 [K={k}]")


def global_scale_arg(global_scale: torch.Tensor | float, dev: torch.device) -> tuple[torch.Tensor | None, float]:
    """The launcher's (gs_ptr, gs_value) for an NVFP4 global scale, with no host-to-device copy: a tensor on
    `dev` is passed by pointer (None, 0.0 otherwise); a float or a CPU tensor is passed by value."""
    if not isinstance(global_scale, torch.Tensor):
        return None, float(global_scale)
    if global_scale.dtype != torch.float32 or global_scale.numel() != 1:
        raise ValueError(
            f"global_scale: expected one fp32 value, got {global_scale.dtype} shape {tuple(global_scale.shape)}"
        )
    if global_scale.device == dev:
        return global_scale, 0.0
    if global_scale.device.type == "cpu":
        return None, float(global_scale.reshape(()))  # a host value: no copy, no sync
    raise ValueError(f"global_scale: expected device {dev} or cpu, got {global_scale.device}")


def _nvfp4(packed: torch.Tensor, block_scales: torch.Tensor) -> tuple[int, int]:
    """(N, K) after the shape and dtype checks."""
    dev = packed.device
    ffi.require(packed, "packed", dim=2, dtype=torch.uint8)
    ffi.require(block_scales, "block_scales", dim=2, dtype=torch.float8_e4m3fn, device=dev)
    n, k = packed.shape[0], packed.shape[1] * 2
    if k % NVFP4_BLOCK or block_scales.shape != (n, k // NVFP4_BLOCK):
        raise ValueError(
            f"block_scales: shape {tuple(block_scales.shape)} != [N={n}, K/16] for K={k} (K must be a multiple of 16)"
        )
    return n, k


def _check_gemv_io(x: torch.Tensor, k: int, n: int, bias: torch.Tensor | None, dev: torch.device) -> None:
    """The fused GEMVs' checks of x (one row of K on `dev`) and the bias ([N] of x's dtype), naming the tensor."""
    if x.dim() < 1 or x.shape[-1] != k or x.numel() != k:
        raise ValueError(f"x: expected one row [..., K={k}] (M = 1), got shape {tuple(x.shape)}")
    if x.device != dev:
        raise ValueError(f"x: expected device {dev}, got {x.device}")
    ffi.dtype_code(x, "x")
    if bias is not None:
        ffi.require(bias, "bias", dim=1, dtype=x.dtype, device=dev, contiguous=False)
        if bias.shape[0] != n:
            raise ValueError(f"bias: shape {tuple(bias.shape)} != [N={n}]")


def _gemv_io(
    x: torch.Tensor, k: int, n: int, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """x as a contiguous [K] row, the [..., N] output, and the contiguous bias (the caller keeps them alive
    until the launch, so the allocator cannot hand their memory to the workspace)."""
    out = torch.empty(*x.shape[:-1], n, dtype=x.dtype, device=x.device)  # the fused GEMVs write x's dtype only
    return x.reshape(k).contiguous(), out, None if bias is None else bias.contiguous()


def _gemv_dtype_codes(x: torch.Tensor, scales: torch.Tensor, out: torch.Tensor) -> list[int]:
    """An int4 GEMV's dtype codes: x's, the scales', the output's."""
    return [ffi.dtype_code(x, "x"), ffi.dtype_code(scales, "scales"), ffi.dtype_code(out, "out")]
