"""The card x model timing model: a decode step, a prefill forward and a load-back from first principles.

    decode step   = weight bytes read / (eta_bw x BW) + KV bytes read / (eta_bw x BW) + per-sequence cost,
                    or the step's FLOPs / effective peak when a large batch makes it compute-bound
    prefill       = max(weight bytes / (eta_bw x BW), FLOPs / (eta_c x peak x f_SM / f_max)) + launch cost
    load-back     = KV bytes / host link bandwidth (overlapped with the forward layer by layer)

FLOPs are 2 per active weight per token plus 4 x layers x heads x head_dim per (query, context token)
pair; the LM head runs once per sequence in a prefill. An MoE step reads the experts its tokens route to.
The default device pool follows SGLang 0.5.23's own chain (harness.sim.gpu_memory): mem_fraction_static
= (memory - reserved_mem) / memory, rounded to 3 places, and the pool = memory x mem_fraction_static -
weights (mem_cache/kv_cache_configurator.py `_profile_available_bytes`).

A CardProfile says how long one prefill forward, one decode step and one host->device load-back take on
a card running a model; `resolve_profile` gives the one a card name (or an alias such as l4-8b) and a
model path resolve to. `tiny-test` stays a hand-set profile for tests.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from harness.errors import HarnessError
from harness.sim.cards import (
    ALIASES,
    CARDS,
    DECODE_PER_SEQ_S,
    ETA_BW,
    ETA_C,
    PREFILL_PER_LAYER_S,
    Card,
)
from harness.sim.gpu_memory import pool_tokens, sglang_defaults
from harness.sim.models import ModelConfigError, ModelShape, builtin_names, default_model, load_model

if TYPE_CHECKING:  # numpy is imported where the array forms run (the live sim never asks for them)
    from numpy.typing import NDArray

MIB = 1024**2
GIB = 1024**3
OS_RESERVE_GIB = 8.0  # what the OS and runtime keep of a unified memory (GB10)


@dataclass(frozen=True)
class CardProfile:
    """Timing model of one GPU + model pair; all times in (unscaled) seconds."""

    name: str
    gpu: str
    model: str
    prefill_tokens_per_s: float
    prefill_overhead_s: float
    attn_per_ctx_token: float
    decode_base_s: float
    decode_per_req_s: float
    decode_per_ctx_token_s: float
    h2d_gb_per_s: float
    kv_bytes_per_token: int
    default_pool_tokens: int
    chunked_prefill_size: int
    max_running_requests: int
    context_length: int
    gpu_mem_gb: float
    num_layers: int = 32

    def prefill_time(self, new_tokens: int, cached_before: int) -> float:
        """One sequence's prefill of `new_tokens` after `cached_before` tokens already in KV."""
        if new_tokens <= 0:
            return 0.0
        # each new token attends to everything before it: sum of contexts = n*c + n(n-1)/2
        ctx_sum = new_tokens * cached_before + new_tokens * (new_tokens - 1) / 2
        return (new_tokens + self.attn_per_ctx_token * ctx_sum) / self.prefill_tokens_per_s

    def prefill_times(self, new_tokens: NDArray, cached_before: NDArray) -> NDArray:
        """prefill_time over int64 arrays, the same float operations in the same order (so the same
        floats): advise's physics costs every request of a large trace once per grid configuration."""
        import numpy as np

        n, c = new_tokens, cached_before
        ctx_sum = n * c + n * (n - 1) / 2
        return np.where(n > 0, (n + self.attn_per_ctx_token * ctx_sum) / self.prefill_tokens_per_s, 0.0)

    def batch_prefill_time(self, parts: list[tuple[int, int]]) -> float:
        """A prefill forward over (new_tokens, cached_before) per sequence."""
        if not parts:
            return 0.0
        return self.prefill_overhead_s + sum(self.prefill_time(n, c) for n, c in parts)

    def decode_time(self, batch_size: int, context_tokens: int) -> float:
        """One decode step for `batch_size` sequences holding `context_tokens` tokens in total."""
        if batch_size <= 0:
            return 0.0
        return (
            self.decode_base_s
            + self.decode_per_req_s * batch_size
            + self.decode_per_ctx_token_s * context_tokens
        )

    def decode_times(self, batch_size: int, context_tokens: NDArray) -> NDArray:
        """decode_time over an int64 array of contexts, the same float operations in the same order (so
        the same floats): the engine's decode runs time hundreds of steps at once (sim/decode_run.py)."""
        return (
            self.decode_base_s
            + self.decode_per_req_s * batch_size
            + self.decode_per_ctx_token_s * context_tokens
        )

    def prefill_with_load_back(
        self,
        parts: list[tuple[int, int]],
        load_tokens: int,
        kv_bytes_per_token: int | None = None,
        overlap: bool = True,
    ) -> float:
        """A prefill forward whose host->device load-back overlaps it layer by layer, as HiCache's
        layer-wise loading does: layer i computes once its KV has landed, so the batch takes the longer of
        the two streams plus one layer of the other (the pipeline's fill or drain). Without `overlap` the
        forward waits for the whole load."""
        fwd = self.batch_prefill_time(parts)
        load = self.load_back_time(load_tokens, kv_bytes_per_token)
        if load <= 0.0:
            return fwd
        if not overlap:
            return fwd + load
        layers = max(1, self.num_layers)
        return max(fwd + load / layers, load + fwd / layers)

    def load_back_time(self, tokens: int, kv_bytes_per_token: int | None = None) -> float:
        """Copying `tokens` of KV from the host pool into device slots over PCIe."""
        if tokens <= 0:
            return 0.0
        per = kv_bytes_per_token or self.kv_bytes_per_token
        return tokens * per / (self.h2d_gb_per_s * 1e9)

    def load_back_times(self, tokens: NDArray) -> NDArray:
        """load_back_time over an int64 array (this profile's KV bytes), the same floats element by element."""
        import numpy as np

        return np.where(tokens > 0, tokens * self.kv_bytes_per_token / (self.h2d_gb_per_s * 1e9), 0.0)

    def host_memory_bytes(self, pool_tokens: int) -> float | None:
        """Host memory HiCache may size its pool against (None: unknown, the ratio is used as given)."""
        return None

    def describe(self) -> str:
        return f"{self.name}: {self.gpu}, {self.model}"

    def to_dict(self) -> dict:
        return asdict(self)


_KV_8B = 32 * 2 * 8 * 128 * 2  # 131,072 bytes per token in bf16

# `tiny-test` keeps the hand-set profile: a fast, exaggerated card for tests.
LEGACY: dict[str, CardProfile] = {
    "tiny-test": CardProfile(
        name="tiny-test",
        gpu="simulated",
        model="sim-tiny",
        prefill_tokens_per_s=20_000.0,
        prefill_overhead_s=0.001,
        attn_per_ctx_token=0.0,
        decode_base_s=0.002,
        decode_per_req_s=0.0,
        decode_per_ctx_token_s=0.0,
        h2d_gb_per_s=10.0,
        kv_bytes_per_token=_KV_8B,
        default_pool_tokens=20_000,
        chunked_prefill_size=2048,
        max_running_requests=64,
        context_length=32_768,
        gpu_mem_gb=24.0,
    ),
}


@dataclass(frozen=True)
class PhysicsProfile(CardProfile):
    """A CardProfile computed from a card's datasheet and a model's config (see the module docstring)."""

    hw: Card | None = None
    shape: ModelShape | None = None
    sm_clock_mhz: float = 0.0  # the prefill forward's SM clock
    decode_sm_clock_mhz: float = 0.0  # the decode step's; 0: the same as the prefill's
    eta_bw: float = ETA_BW
    eta_c: float = ETA_C

    # --- the three rates (cached: asked on every forward of a replay, fixed for the profile) -----------
    @cached_property
    def bw(self) -> float:
        assert self.hw is not None
        return self.eta_bw * self.hw.bw_gb_s * 1e9

    @cached_property
    def flops(self) -> float:
        """Effective FLOP/s at the modelled SM clock."""
        assert self.hw is not None
        return self.eta_c * self.hw.bf16_tflops * 1e12 * self.sm_clock_mhz / self.hw.sm_max_mhz

    @cached_property
    def decode_flops(self) -> float:
        """Effective FLOP/s of a decode step: a card may run decode at another clock than its prefills
        (the prefill-window clock vs the busy-median, docs/telemetry.md)."""
        assert self.hw is not None
        mhz = self.decode_sm_clock_mhz or self.sm_clock_mhz
        return self.eta_c * self.hw.bf16_tflops * 1e12 * mhz / self.hw.sm_max_mhz

    # --- CardProfile's interface -------------------------------------------------------------------
    def prefill_time(self, new_tokens: int, cached_before: int) -> float:
        """Compute time of one sequence's prefill (no overhead, no weight floor)."""
        if new_tokens <= 0:
            return 0.0
        s = self.shape
        assert s is not None
        ctx_sum = new_tokens * cached_before + new_tokens * (new_tokens + 1) / 2
        work = new_tokens * s.linear_flops_per_token + s.lm_head_flops + s.attn_flops_per_ctx_token * ctx_sum
        return work / self.flops

    def prefill_times(self, new_tokens: NDArray, cached_before: NDArray) -> NDArray:
        """prefill_time over int64 arrays: the same operations in the same order, so the same floats."""
        import numpy as np

        s = self.shape
        assert s is not None
        n, c = new_tokens, cached_before
        ctx_sum = n * c + n * (n + 1) / 2
        work = n * s.linear_flops_per_token + s.lm_head_flops + s.attn_flops_per_ctx_token * ctx_sum
        return np.where(n > 0, work / self.flops, 0.0)

    def batch_prefill_time(self, parts: list[tuple[int, int]]) -> float:
        if not parts:
            return 0.0
        assert self.shape is not None
        tokens = 0
        for n, _ in parts:
            tokens += n
        prefill_time = self.prefill_time
        compute = sum([prefill_time(n, c) for n, c in parts])  # sum() as before: the same float
        floor = self.shape.step_weight_bytes(tokens) / self.bw
        return self.prefill_overhead_s + max(compute, floor)

    def decode_time(self, batch_size: int, context_tokens: int) -> float:
        if batch_size <= 0:
            return 0.0
        s = self.shape
        assert s is not None
        memory = (s.step_weight_bytes(batch_size) + context_tokens * s.kv_bytes_per_token) / self.bw
        compute = (
            batch_size * (s.linear_flops_per_token + s.lm_head_flops)
            + s.attn_flops_per_ctx_token * context_tokens
        ) / self.decode_flops
        return max(memory, compute) + DECODE_PER_SEQ_S * batch_size

    def decode_times(self, batch_size: int, context_tokens: NDArray) -> NDArray:
        """decode_time over an int64 array of contexts, the same float operations (so the same floats)."""
        import numpy as np

        s = self.shape
        assert s is not None and batch_size > 0
        memory = (s.step_weight_bytes(batch_size) + context_tokens * s.kv_bytes_per_token) / self.bw
        compute = (
            batch_size * (s.linear_flops_per_token + s.lm_head_flops)
            + s.attn_flops_per_ctx_token * context_tokens
        ) / self.decode_flops
        return np.maximum(memory, compute) + DECODE_PER_SEQ_S * batch_size

    def host_memory_bytes(self, pool_tokens: int) -> float | None:
        """Host RAM HiCache may use: the server's, or on a unified-memory card what the weights, the device
        pool and the OS leave of the one memory."""
        hw, s = self.hw, self.shape
        assert hw is not None and s is not None
        if hw.unified:
            return (
                hw.visible_gib * GIB
                - s.weight_bytes
                - pool_tokens * s.kv_bytes_per_token
                - OS_RESERVE_GIB * GIB
            )
        return hw.host_mem_gb * 1e9

    def describe(self) -> str:
        assert self.hw is not None and self.shape is not None
        return (
            f"{self.name}: {self.hw.gpu} ({self.hw.bw_gb_s:g} GB/s x eta_bw {self.eta_bw:.2f}, "
            f"{self.hw.bf16_tflops:g} TFLOPS bf16 x eta_c {self.eta_c:.2f} at {self.sm_clock_mhz:.0f}/"
            f"{self.hw.sm_max_mhz:.0f} MHz{self._decode_clock()}), {self.shape.describe()}; "
            f"pool {self.default_pool_tokens:,} tokens"
        )

    def _decode_clock(self) -> str:
        d = self.decode_sm_clock_mhz
        return f", decode at {d:.0f} MHz" if d and d != self.sm_clock_mhz else ""


def default_pool_tokens(hw: Card, shape: ModelShape) -> int:
    """SGLang 0.5.23's max_total_num_tokens for this card and model (harness.sim.gpu_memory)."""
    return pool_tokens(hw, shape)


def physics_profile(
    hw: Card, shape: ModelShape, sm_clock_mhz: float, decode_sm_clock_mhz: float = 0.0
) -> PhysicsProfile:
    chunk, max_bs = sglang_defaults(hw)
    kv = shape.kv_bytes_per_token
    probe = PhysicsProfile(
        name=f"{hw.name}/{shape.name}",
        gpu=hw.gpu,
        model=shape.name,
        prefill_tokens_per_s=0.0,
        prefill_overhead_s=PREFILL_PER_LAYER_S * shape.layers,
        attn_per_ctx_token=shape.attn_flops_per_ctx_token / shape.linear_flops_per_token,
        decode_base_s=0.0,
        decode_per_req_s=DECODE_PER_SEQ_S,
        decode_per_ctx_token_s=0.0,
        h2d_gb_per_s=hw.host_link_gb_s,
        kv_bytes_per_token=kv,
        default_pool_tokens=default_pool_tokens(hw, shape),
        chunked_prefill_size=chunk,
        max_running_requests=256 if hw.visible_gib < 60 else 1024,  # the sim's earlier profiles
        context_length=shape.context_length,
        gpu_mem_gb=hw.mem_gb,
        num_layers=shape.layers,
        hw=hw,
        shape=shape,
        sm_clock_mhz=sm_clock_mhz,
        decode_sm_clock_mhz=decode_sm_clock_mhz,
    )
    # the summary figures a reader of to_dict() wants: linear prefill rate, batch-1 decode step, KV read
    return replace(
        probe,
        prefill_tokens_per_s=probe.flops / shape.linear_flops_per_token,
        decode_base_s=shape.step_weight_bytes(1) / probe.bw,
        decode_per_ctx_token_s=kv / probe.bw,
    )


DEFAULT_PROFILE = "l4-8b"


def known_names() -> list[str]:
    return [*CARDS, *ALIASES, *LEGACY]


def resolve_profile(
    card: str,
    model_path: str | None = None,
    sm_clock_mhz: float | None = None,
    *,
    warn=None,
    prefill_sm_clock_mhz: float | None = None,
    decode_sm_clock_mhz: float | None = None,
) -> CardProfile:
    """The timing profile of `card` (a card name, an alias such as l4-8b, or tiny-test) running the model
    `model_path` names (a local folder's config.json or a built-in; else Llama-3.1-8B-Instruct, with a
    `warn` line when a path was given but not found). Bad input raises HarnessError.

    `sm_clock_mhz` is the SM clock of both prefill and decode (default: the card's typical sustained
    clock); `prefill_sm_clock_mhz` / `decode_sm_clock_mhz` set one of them apart."""
    card = card.lower()  # card names are case-insensitive: --card H100
    if card in LEGACY:
        return LEGACY[card]
    name = ALIASES.get(card, card)
    if name not in CARDS:
        raise HarnessError(f"--card: unknown card {card!r} (known: {', '.join(known_names())})")
    try:
        shape = load_model(model_path)
    except ModelConfigError as e:
        raise HarnessError(f"--model-path: {e}") from None
    if shape is None:
        if model_path and model_path not in ("sim-model", "default") and warn is not None:
            warn(
                f"--model-path {model_path}: no config.json there and not a built-in model "
                f"({', '.join(builtin_names())}); timing modelled with Llama-3.1-8B-Instruct's shape"
            )
        shape = default_model()
    hw = CARDS[name]
    if shape.weight_bytes > hw.visible_gib * 1024**3:
        raise HarnessError(
            f"--model-path {model_path}: {shape.name}'s {shape.weight_bytes / 1e9:.1f} GB of bf16 weights do not"
            f" fit {hw.gpu}'s {hw.mem_gb:g} GB"
        )
    for flag, mhz in (
        ("--sim-sm-clock-mhz", sm_clock_mhz),
        ("--sim-prefill-sm-clock-mhz", prefill_sm_clock_mhz),
        ("--sim-decode-sm-clock-mhz", decode_sm_clock_mhz),
    ):
        if mhz is not None and not 0 < mhz <= hw.sm_max_mhz * 1.2:
            raise HarnessError(f"{flag}: {mhz:g} is outside (0, {hw.sm_max_mhz * 1.2:.0f}] for {hw.gpu}")
    both = sm_clock_mhz or hw.sm_typical_mhz
    return physics_profile(hw, shape, prefill_sm_clock_mhz or both, decode_sm_clock_mhz or both)


def get_profile(name: str) -> CardProfile:
    """The named profile (a card, an alias or tiny-test) with the default model, or a HarnessError."""
    return resolve_profile(name)
