"""Parse a Hugging Face Qwen3 / Qwen3-MoE / Qwen3-Next `config.json` into one dataclass."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARCHITECTURES = ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3NextForCausalLM")
MOE_ARCHITECTURES = ("Qwen3MoeForCausalLM", "Qwen3NextForCausalLM")
# config.json's torch_dtype -> the engine's dtype name (`--dtype auto` runs the checkpoint's own dtype)
CHECKPOINT_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
AUTO_DTYPE_FALLBACK = "float32"  # a config.json that names no dtype


class ConfigError(ValueError):
    """A config.json the engine cannot run; the message names the file and field."""


@dataclass(frozen=True)
class QuantConfig:
    """A checkpoint's `quantization_config`, reduced to what dequantizing its linear weights needs."""

    method: str  # "awq" | "gptq" | "nvfp4"
    bits: int = 4
    group_size: int = 0  # input rows per scale; 0: one group over all of K (GPTQ's group_size -1)
    desc_act: bool = False  # GPTQ act order: g_idx is a shuffle, rows are sorted by it at load
    sym: bool = True
    version: int = 1  # GPTQ checkpoint format: 1 stores zero - 1, 2 the zero itself
    layout: str = ""  # NVFP4: "modelopt" (weight, weight_scale_2 multiplies) or "compressed-tensors"
    # (weight_packed, weight_global_scale divides)


@dataclass(frozen=True)
class GDNConfig:
    """Qwen3-Next's gated delta net (linear attention) layers: which layers, and their heads and convolution."""

    layer_types: tuple[str, ...]  # per layer: "linear_attention" (gated delta net) or "full_attention"
    conv_kernel: int  # linear_conv_kernel_dim
    key_head_dim: int
    value_head_dim: int
    num_key_heads: int
    num_value_heads: int

    def is_linear(self, layer: int) -> bool:
        return self.layer_types[layer] == "linear_attention"

    @property
    def conv_dim(self) -> int:  # the convolved channels: q, k and v of every head
        return 2 * self.num_key_heads * self.key_head_dim + self.num_value_heads * self.value_head_dim


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool = False
    # per layer: the sliding window in tokens, or None for full attention
    sliding_windows: tuple[int | None, ...] = ()
    torch_dtype: str | None = None
    # MoE (Qwen3MoeForCausalLM only)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = field(default_factory=tuple)
    quant: QuantConfig | None = None  # None: an unquantized checkpoint
    # Qwen3-Next (Qwen3NextForCausalLM only)
    gdn: GDNConfig | None = None
    partial_rotary_factor: float = 1.0  # RoPE rotates the first head_dim * factor dims of each head
    shared_expert_intermediate_size: int = 0

    @property
    def is_moe(self) -> bool:
        return self.architecture in MOE_ARCHITECTURES

    def has_kv_cache(self, layer: int) -> bool:
        """Whether layer `layer` attends over a KV cache (a gated delta net layer keeps a recurrent state)."""
        return self.gdn is None or not self.gdn.is_linear(layer)

    def layer_is_sparse(self, layer: int) -> bool:
        """Whether decoder layer `layer` uses the sparse MoE block (the HF rule, verbatim in effect)."""
        return (
            self.is_moe
            and self.num_experts > 0
            and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0
        )


def load_config(model_dir: str | Path) -> ModelConfig:
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(f"{path}: no config.json in the model directory")
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
    if "quantization_config" not in raw and (path.parent / "hf_quant_config.json").is_file():
        # ModelOpt exports put their quantization in a side file
        side = path.parent / "hf_quant_config.json"
        try:
            raw = {**raw, "quantization_config": {"quant_method": "modelopt", **json.loads(side.read_text())}}
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{side}: not valid JSON ({exc})") from exc
    return parse_config(raw, source=str(path))


def checkpoint_dtype(config: ModelConfig) -> str:
    """The dtype name `--dtype auto` means for this checkpoint: its torch_dtype, float32 if it names none."""
    name = config.torch_dtype or AUTO_DTYPE_FALLBACK
    if name not in CHECKPOINT_DTYPES:
        raise ConfigError(
            f"config.json: torch_dtype={name!r} is not one the engine runs "
            f"({', '.join(CHECKPOINT_DTYPES)}); pass --dtype"
        )
    return CHECKPOINT_DTYPES[name]


def parse_config(raw: dict[str, Any], source: str = "config.json") -> ModelConfig:
    archs = raw.get("architectures") or []
    known = [a for a in archs if a in ARCHITECTURES]
    if not known:
        raise ConfigError(f"{source}: architectures={archs!r} is not supported (supported: {', '.join(ARCHITECTURES)})")
    arch = known[0]

    def need(key: str) -> Any:
        if key not in raw or raw[key] is None:
            raise ConfigError(f"{source}: required field {key!r} is missing")
        return raw[key]

    hidden = int(need("hidden_size"))
    heads = int(need("num_attention_heads"))
    layers = int(need("num_hidden_layers"))
    kv_heads = int(raw.get("num_key_value_heads") or heads)
    head_dim = int(raw.get("head_dim") or hidden // heads)
    if heads % kv_heads:
        raise ConfigError(f"{source}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
    if raw.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act={raw['hidden_act']!r} is not supported (only 'silu')")
    kw: dict[str, Any] = {}
    if arch == "Qwen3NextForCausalLM":
        kw.update(_qwen3_next(raw, layers, source))
    if arch in MOE_ARCHITECTURES:
        # transformers 5 writes `num_local_experts`; older checkpoints `num_experts`
        experts = raw.get("num_experts", raw.get("num_local_experts"))
        if experts is None:
            raise ConfigError(f"{source}: required field 'num_experts' (or 'num_local_experts') is missing")
        kw.update(
            num_experts=int(experts),
            num_experts_per_tok=int(need("num_experts_per_tok")),
            moe_intermediate_size=int(need("moe_intermediate_size")),
            norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
            decoder_sparse_step=int(raw.get("decoder_sparse_step") or 1),
            mlp_only_layers=tuple(int(i) for i in raw.get("mlp_only_layers") or ()),
        )
    return ModelConfig(
        architecture=arch,
        vocab_size=int(need("vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(need("intermediate_size")),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(raw, source),
        max_position_embeddings=int(raw.get("max_position_embeddings") or 32768),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=bool(raw.get("attention_bias", False)),
        # Qwen3-Next has no sliding window (Hugging Face ignores one)
        sliding_windows=(None,) * layers if arch == "Qwen3NextForCausalLM" else _sliding_windows(raw, layers, source),
        torch_dtype=raw.get("dtype") or raw.get("torch_dtype"),
        quant=parse_quant(raw.get("quantization_config"), source),
        **kw,
    )


def _qwen3_next(raw: dict[str, Any], layers: int, source: str) -> dict[str, Any]:
    """Qwen3-Next's own fields: the layer types (`layer_types`, else every `full_attention_interval`-th layer is
    full attention), the gated delta net shapes, partial RoPE and the shared expert."""
    layer_types = raw.get("layer_types")
    if layer_types is None:
        every = int(raw.get("full_attention_interval", 4))
        layer_types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]
    if len(layer_types) != layers:
        raise ConfigError(f"{source}: layer_types has {len(layer_types)} entries for num_hidden_layers={layers}")
    unknown = sorted(set(layer_types) - {"linear_attention", "full_attention"})
    if unknown:
        raise ConfigError(f"{source}: layer_types {unknown} not supported (linear_attention, full_attention)")
    gdn = GDNConfig(
        layer_types=tuple(layer_types),
        conv_kernel=int(raw.get("linear_conv_kernel_dim", 4)),
        key_head_dim=int(raw.get("linear_key_head_dim", 128)),
        value_head_dim=int(raw.get("linear_value_head_dim", 128)),
        num_key_heads=int(raw.get("linear_num_key_heads", 16)),
        num_value_heads=int(raw.get("linear_num_value_heads", 32)),
    )
    if gdn.num_value_heads % gdn.num_key_heads:
        raise ConfigError(
            f"{source}: linear_num_value_heads={gdn.num_value_heads} is not a multiple of "
            f"linear_num_key_heads={gdn.num_key_heads}"
        )
    params = raw.get("rope_parameters") or {}
    factor = float(params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0)))
    head_dim = int(raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"])
    rotary = int(head_dim * factor)
    if rotary < 2 or rotary % 2:
        raise ConfigError(f"{source}: partial_rotary_factor={factor} gives {rotary} rotary dims of {head_dim}")
    return dict(
        gdn=gdn,
        partial_rotary_factor=factor,
        shared_expert_intermediate_size=int(raw.get("shared_expert_intermediate_size") or 0),
    )


def _rope_theta(raw: dict[str, Any], source: str) -> float:
    # transformers 5 nests it: rope_parameters = {rope_type, rope_theta}; 4.x has a top-level rope_theta
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type != "default":
        raise ConfigError(f"{source}: rope_type={rope_type!r} is not supported (only 'default')")
    theta = params.get("rope_theta", raw.get("rope_theta"))
    if theta is None:
        raise ConfigError(f"{source}: required field 'rope_theta' (or rope_parameters.rope_theta) is missing")
    return float(theta)


def _sliding_windows(raw: dict[str, Any], layers: int, source: str) -> tuple[int | None, ...]:
    # HF drops the window unless use_sliding_window is set, whatever layer_types says
    window = raw.get("sliding_window") if raw.get("use_sliding_window", False) else None
    if window is None:
        return (None,) * layers
    window = int(window)
    layer_types = raw.get("layer_types")
    if layer_types is not None:
        if len(layer_types) != layers:
            raise ConfigError(f"{source}: layer_types has {len(layer_types)} entries for num_hidden_layers={layers}")
        return tuple(window if t == "sliding_attention" else None for t in layer_types)
    if "Qwen3MoeForCausalLM" in (raw.get("architectures") or []):
        return (window,) * layers  # Qwen3-MoE applies the window to every layer
    # dense Qwen3: layers from max_window_layers on use the window
    first = int(raw.get("max_window_layers", layers))
    return tuple(window if i >= first else None for i in range(layers))


QUANT_METHODS = ("awq", "gptq", "modelopt", "compressed-tensors")


def parse_quant(raw: dict[str, Any] | None, source: str = "config.json") -> QuantConfig | None:
    """`quantization_config` as transformers and vLLM read it; anything the engine cannot run is an error."""
    if raw is None:
        return None
    where = f"{source}: quantization_config"
    method = str(raw.get("quant_method", "")).lower()
    if method == "awq":
        return _parse_awq(raw, where)
    if method == "gptq":
        return _parse_gptq(raw, where)
    if method == "modelopt":
        algo = raw.get("quant_algo", (raw.get("quantization") or {}).get("quant_algo"))
        if str(algo).upper() != "NVFP4":
            raise ConfigError(f"{where}.quant_algo={algo!r} is not supported (only 'NVFP4')")
        kv = raw.get("kv_cache_quant_algo", (raw.get("quantization") or {}).get("kv_cache_quant_algo"))
        if kv is not None:
            raise ConfigError(f"{where}.kv_cache_quant_algo={kv!r} is not supported (the KV cache is unquantized)")
        _check_nvfp4_group(raw.get("group_size", (raw.get("quantization") or {}).get("group_size", 16)), where)
        return QuantConfig("nvfp4", layout="modelopt", group_size=16)
    if method == "compressed-tensors":
        fmt = raw.get("format")
        if fmt != "nvfp4-pack-quantized":
            raise ConfigError(f"{where}.format={fmt!r} is not supported (only 'nvfp4-pack-quantized')")
        for name, group in (raw.get("config_groups") or {}).items():
            weights = group.get("weights") or {}
            if weights.get("num_bits", 4) != 4 or weights.get("type", "float") != "float":
                raise ConfigError(
                    f"{where}.config_groups.{name}.weights: num_bits={weights.get('num_bits')!r} "
                    f"type={weights.get('type')!r} is not NVFP4 (4-bit float)"
                )
            _check_nvfp4_group(weights.get("group_size", 16), f"{where}.config_groups.{name}.weights")
        return QuantConfig("nvfp4", layout="compressed-tensors", group_size=16)
    raise ConfigError(
        f"{where}.quant_method={raw.get('quant_method')!r} is not supported (supported: {', '.join(QUANT_METHODS)})"
    )


def _parse_awq(raw: dict[str, Any], where: str) -> QuantConfig:
    bits = int(raw.get("bits", raw.get("w_bit", 4)))
    if bits != 4:
        raise ConfigError(f"{where}.bits={bits} is not supported for awq (only 4)")
    version = str(raw.get("version", "gemm")).lower()
    if version != "gemm":
        raise ConfigError(f"{where}.version={raw.get('version')!r} is not supported (only the 'gemm' layout)")
    if not raw.get("zero_point", True):
        raise ConfigError(f"{where}.zero_point=false is not supported (the GEMM layout stores qzeros)")
    group = int(raw.get("group_size", raw.get("q_group_size", 128)))
    if group < 1:
        raise ConfigError(f"{where}.group_size={group} must be at least 1")
    return QuantConfig("awq", bits=4, group_size=group, sym=False)


GPTQ_FORMATS = {"gptq": 1, "gptq_v1": 1, "v1": 1, "gptq_v2": 2, "v2": 2}


def _parse_gptq(raw: dict[str, Any], where: str) -> QuantConfig:
    bits = int(raw.get("bits", 4))
    if bits not in (2, 4, 8):
        raise ConfigError(f"{where}.bits={bits} is not supported for gptq (2, 4 or 8)")
    group = int(raw.get("group_size", 128))
    if group == 0 or group < -1:
        raise ConfigError(f"{where}.group_size={group} must be -1 (one group) or at least 1")
    fmt = str(raw.get("checkpoint_format", raw.get("format", "gptq"))).lower()  # GPTQModel also writes `format`
    if fmt not in GPTQ_FORMATS:
        raise ConfigError(
            f"{where}.checkpoint_format={raw.get('checkpoint_format')!r} is not supported "
            f"(one of {', '.join(GPTQ_FORMATS)})"
        )
    return QuantConfig(
        "gptq",
        bits=bits,
        group_size=max(group, 0),
        desc_act=bool(raw.get("desc_act", False)),
        sym=bool(raw.get("sym", True)),
        version=GPTQ_FORMATS[fmt],
    )


def _check_nvfp4_group(group: Any, where: str) -> None:
    if group != 16:
        raise ConfigError(f"{where}.group_size={group!r} is not NVFP4's 16")
