"""A model's shape from its Hugging Face config.json: what the sim's timing model needs to know of it.

`load_model(model_path)` reads the same `--model-path` a user gives SGLang: a local folder holding a
config.json, or one of the configs shipped with the package (Qwen3-0.6B, Qwen3-8B, Qwen3-30B-A3B,
Llama-3.1-8B-Instruct; matched by the last path component, case-insensitive, so "Qwen/Qwen3-8B" works
without the weights). Parameter counts, KV bytes and FLOPs follow from the shape alone.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

BUILTIN_DIR = Path(__file__).resolve().parent / "model_configs"
BUILTIN = {
    "qwen3-0.6b": "qwen3-0.6b.json",
    "qwen3-8b": "qwen3-8b.json",
    "qwen3-30b-a3b": "qwen3-30b-a3b.json",
    "llama-3.1-8b-instruct": "llama-3.1-8b-instruct.json",
    "meta-llama-3.1-8b-instruct": "llama-3.1-8b-instruct.json",
}
DEFAULT_MODEL = "Llama-3.1-8B-Instruct"
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "bf16": 2, "fp16": 2}


class ModelConfigError(ValueError):
    """A config.json that cannot describe a decoder-only transformer (file and key named)."""


@dataclass(frozen=True)
class ModelShape:
    """The architecture fields of a decoder-only transformer (dense or MoE) and what follows from them.

    What follows is cached (cached_property): the timing model asks for it on every prefill and decode
    step of a replay, millions of times on a large trace, and the shape never changes."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    experts: int = 0  # 0: dense
    active_experts: int = 0
    moe_intermediate: int = 0
    tied_embeddings: bool = False
    dtype_bytes: int = 2
    context_length: int = 131_072

    # --- parameter counts -------------------------------------------------------------------------
    @cached_property
    def attn_params_per_layer(self) -> int:
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        return q + kv + o

    @cached_property
    def expert_params(self) -> int:
        """One expert's gate, up and down projections (SwiGLU)."""
        return 3 * self.hidden * self.moe_intermediate

    @cached_property
    def mlp_params_per_layer(self) -> int:
        """All MLP weights of a layer: every expert plus the router for MoE, the dense SwiGLU otherwise."""
        if self.experts:
            return self.experts * self.expert_params + self.hidden * self.experts
        return 3 * self.hidden * self.intermediate

    @cached_property
    def active_mlp_params_per_layer(self) -> int:
        if self.experts:
            return self.active_experts * self.expert_params + self.hidden * self.experts
        return self.mlp_params_per_layer

    @cached_property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @cached_property
    def lm_head_params(self) -> int:
        return self.vocab * self.hidden  # tied or not, the logits matmul reads a vocab x hidden matrix

    @cached_property
    def body_params(self) -> int:
        """Attention + MLP weights of all layers (norms are negligible)."""
        return self.layers * (self.attn_params_per_layer + self.mlp_params_per_layer)

    @cached_property
    def total_params(self) -> int:
        head = 0 if self.tied_embeddings else self.lm_head_params
        return self.body_params + self.embedding_params + head

    @cached_property
    def active_params(self) -> int:
        """Parameters one token's forward multiplies through (MoE: the routed experts only)."""
        return (
            self.layers * (self.attn_params_per_layer + self.active_mlp_params_per_layer)
            + self.lm_head_params
        )

    @cached_property
    def weight_bytes(self) -> int:
        return self.total_params * self.dtype_bytes

    # --- KV cache and FLOPs -----------------------------------------------------------------------
    @cached_property
    def kv_bytes_per_token(self) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @cached_property
    def linear_flops_per_token(self) -> float:
        """Matmul FLOPs of one token through the layers (2 per active weight), without the LM head."""
        return 2.0 * self.layers * (self.attn_params_per_layer + self.active_mlp_params_per_layer)

    @cached_property
    def lm_head_flops(self) -> float:
        """The logits of one position (prefill computes them for each sequence's last token only)."""
        return 2.0 * self.lm_head_params

    @cached_property
    def attn_flops_per_ctx_token(self) -> float:
        """QK^T and PV for one query against one context token, all layers and heads."""
        return 4.0 * self.layers * self.heads * self.head_dim

    @cached_property
    def _dense_step_bytes(self) -> int:
        """A dense model's step reads every weight whatever its tokens (step_weight_bytes, asked per step)."""
        dense = self.layers * self.attn_params_per_layer + self.lm_head_params
        return (dense + self.layers * self.mlp_params_per_layer) * self.dtype_bytes

    def step_weight_bytes(self, tokens: int) -> float:
        """Weight bytes a forward over `tokens` tokens reads: attention, the LM head and, for MoE, the
        experts those tokens route to (expected distinct experts under uniform routing)."""
        if not self.experts:
            return self._dense_step_bytes
        dense = self.layers * self.attn_params_per_layer + self.lm_head_params
        e, k = self.experts, self.active_experts
        touched = e * (1.0 - (1.0 - k / e) ** max(1, tokens))
        mlp = self.layers * (touched * self.expert_params + self.hidden * self.experts)
        return (dense + mlp) * self.dtype_bytes

    def describe(self) -> str:
        moe = f", {self.experts} experts ({self.active_experts} active)" if self.experts else ""
        return (
            f"{self.name}: {self.total_params / 1e9:.2f} B params ({self.active_params / 1e9:.2f} B active){moe}, "
            f"{self.layers} layers, KV {self.kv_bytes_per_token / 1024:.0f} KiB/token"
        )


def _need(cfg: dict, key: str, where: str) -> int:
    v = cfg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ModelConfigError(f"{where}: key {key!r} must be a positive integer, got {v!r}")
    return v


def shape_from_config(cfg: dict, name: str, where: str = "config.json") -> ModelShape:
    """A ModelShape from a config.json dict (text-only decoder models; a `text_config` is used if present)."""
    if not isinstance(cfg, dict):
        raise ModelConfigError(f"{where}: expected a JSON object")
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    hidden = _need(cfg, "hidden_size", where)
    heads = _need(cfg, "num_attention_heads", where)
    kv = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim") or hidden // heads
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0
    moe = int(experts) > 0
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return ModelShape(
        name=name,
        layers=_need(cfg, "num_hidden_layers", where),
        hidden=hidden,
        heads=heads,
        kv_heads=_need({"num_key_value_heads": kv}, "num_key_value_heads", where),
        head_dim=_need({"head_dim": head_dim}, "head_dim", where),
        intermediate=_need(cfg, "intermediate_size", where),
        vocab=_need(cfg, "vocab_size", where),
        experts=int(experts),
        active_experts=_need(cfg, "num_experts_per_tok", where) if moe else 0,
        moe_intermediate=_need(cfg, "moe_intermediate_size", where) if moe else 0,
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype_bytes=DTYPE_BYTES.get(dtype, 2),
        context_length=int(cfg.get("max_position_embeddings") or 131_072),
    )


def builtin_names() -> list[str]:
    return sorted({Path(f).stem for f in BUILTIN.values()})


def _read(path: Path, name: str) -> ModelShape:
    try:
        cfg = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ModelConfigError(f"{path}: cannot read: {e}") from None
    except json.JSONDecodeError as e:
        raise ModelConfigError(f"{path}: invalid JSON: {e.msg} (line {e.lineno})") from None
    return shape_from_config(cfg, name, str(path))


def load_model(model_path: str | None) -> ModelShape | None:
    """The shape `--model-path` names: a local folder's config.json (or a config.json file), else a
    built-in config by name; None when it is neither (the caller decides on a default)."""
    if not model_path:
        return None
    p = Path(model_path).expanduser()
    if p.is_dir() and (p / "config.json").is_file():
        return _read(p / "config.json", p.name)
    if p.is_file() and p.suffix == ".json":
        return _read(p, p.parent.name or p.stem)
    key = model_path.rstrip("/").rsplit("/", 1)[-1].lower()
    if key in BUILTIN:
        shape = _read(BUILTIN_DIR / BUILTIN[key], model_path.rstrip("/").rsplit("/", 1)[-1])
        return shape
    return None


def default_model() -> ModelShape:
    shape = load_model(DEFAULT_MODEL)
    assert shape is not None
    return shape


def expected_experts_touched(experts: int, active: int, tokens: int) -> float:
    """Distinct experts `tokens` tokens route to when each picks `active` of `experts` uniformly."""
    if experts <= 0:
        return 0.0
    return experts * (1.0 - math.pow(1.0 - active / experts, max(1, tokens)))
