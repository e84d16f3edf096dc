"""Which setting reaches a configuration, in the user's units: the device pool from SGLang 0.5.23's memory
chain (the card's default pool, a `--mem-fraction-static`, FP8 KV), the host memory a host tier takes, and
what write_back's eviction-time copies cost on the host link.

Pools past FP8 KV at the largest memory fraction (`harness.sim.gpu_memory.max_mem_fraction`) are not
offered. A profile without a card and model (the legacy `tiny-test`) has no chain: every pool is offered,
named by its size alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.sim import gpu_memory
from harness.sim.cards import Card
from harness.sim.models import ModelShape
from harness.sim.timing import CardProfile

FP8_FLAG = "--kv-cache-dtype fp8_e4m3"
HOST_RATIOS = (
    2.0,
    4.0,
)  # the host ratios the grid tries (harness.advise.grid); any other is a --hicache-size
# said wherever an FP8 lever is advised: the KV cache is stored at lower precision (docs/advise.md)
FP8_CAVEAT = "FP8 KV stores the cache at lower precision: check the model's accuracy on your evals first"


@dataclass(frozen=True)
class PoolLever:
    kind: str  # default | fraction | fp8
    fraction: float | None  # the --mem-fraction-static to set; None: the card's default
    text: str

    def to_dict(self) -> dict:
        return {"kind": self.kind, "mem_fraction_static": self.fraction, "text": self.text}


@dataclass(frozen=True)
class Levers:
    profile: CardProfile
    unit_tokens: int  # tokens per pool unit (a block trace's block size, else 1)
    unit_name: str = "tokens"
    tp: int = 1  # --tp: the pool across this many of the node's GPUs (advise.serveable, when one card cannot)

    def _chain(self) -> tuple[Card, ModelShape] | None:
        hw, shape = getattr(self.profile, "hw", None), getattr(self.profile, "shape", None)
        return (hw, shape) if hw is not None and shape is not None else None

    def tokens(self, units: int) -> int:
        return units * self.unit_tokens

    def size(self, units: int) -> str:
        """A pool in the input's unit, and in tokens when those are blocks."""
        if self.unit_tokens == 1:
            return f"{units:,} {self.unit_name}"
        return f"{units:,} {self.unit_name} ({self.tokens(units):,} tokens)"

    def largest_pool_tokens(self) -> int | None:
        """FP8 KV at the largest memory fraction: the biggest pool any lever reaches (None: no chain)."""
        chain = self._chain()
        if chain is None:
            return None
        if self.tp > 1:  # on --tp N the advice offers SGLang's defaults alone
            return tp_pool_tokens(self.profile, self.tp)
        hw, shape = chain
        top = gpu_memory.max_mem_fraction(hw)
        return gpu_memory.pool_tokens(hw, shape, top, kv_bytes=shape.kv_bytes_per_token // 2)

    def reachable(self, units: int) -> bool:
        top = self.largest_pool_tokens()
        return top is None or self.tokens(units) <= top

    def pool_lever(self, units: int) -> PoolLever | None:
        """The first lever, in the order an operator reaches for them, that gives a pool of `units`; None
        when none does (past FP8 KV at the largest fraction)."""
        chain = self._chain()
        want = self.tokens(units)
        if self.tp > 1:
            most = tp_pool_tokens(self.profile, self.tp)
            text = f"--tp {self.tp}: the pool across {self.tp} GPUs, {most:,} tokens at SGLang's defaults"
            return PoolLever("tp", None, text) if want <= most else None
        default = self.profile.default_pool_tokens
        if want <= default:
            return PoolLever(
                "default",
                None,
                f"the card's default pool ({default:,} tokens) holds it: no --mem-fraction-static",
            )
        if chain is None:
            return PoolLever(
                "fraction", None, f"a device pool of {want:,} tokens (--max-total-tokens {want})"
            )
        hw, shape = chain
        base, top = gpu_memory.mem_fraction_static(hw), gpu_memory.max_mem_fraction(hw)
        frac = _fraction_for(hw, shape, shape.kv_bytes_per_token, want)
        if frac <= top:
            return PoolLever(
                "fraction",
                frac,
                f"--mem-fraction-static {frac:.3f} (the card's default {base:.3f} gives {default:,} tokens)",
            )
        half = shape.kv_bytes_per_token // 2
        frac = max(_fraction_for(hw, shape, half, want), base)
        if frac > top:
            return None
        if frac == base:
            return PoolLever(
                "fp8",
                None,
                f"FP8 KV ({FP8_FLAG}) at the card's default memory fraction ({base:.3f}): half the bytes a "
                f"token, {gpu_memory.pool_tokens(hw, shape, base, kv_bytes=half):,} tokens ({FP8_CAVEAT})",
            )
        return PoolLever(
            "fp8",
            frac,
            f"FP8 KV ({FP8_FLAG}) with --mem-fraction-static {frac:.3f} (the default {base:.3f} and bf16 KV give "
            f"{default:,} tokens; {FP8_CAVEAT})",
        )

    def kv_bytes(self, units: int) -> int:
        """Bytes a token takes in a pool of `units`: half where only FP8 KV reaches it, since SGLang 0.5.23's
        host pool takes the device buffers' dtype (mem_cache/pool_host/mha.py), so its host tier halves too."""
        lever = self.pool_lever(units) if self._chain() is not None else None
        full = self.profile.kv_bytes_per_token
        return full // 2 if lever is not None and lever.kind == "fp8" else full

    def host_gb(self, units: int, ratio: float) -> float:
        """The host memory (GB) a host tier of `ratio` x a device pool of `units` takes (in its KV dtype)."""
        return ratio * self.tokens(units) * self.kv_bytes(units) / 1e9

    def size_gb(self, units: int, ratio: float) -> float | None:
        """The `--hicache-size` (GB, to 0.1) a ratio outside HOST_RATIOS stands for; None for a ratio."""
        return None if ratio in HOST_RATIOS else round(self.host_gb(units, ratio), 1)

    def host_flag(self, units: int, ratio: float) -> str:
        """The flag that sizes this host tier: `--hicache-ratio R`, or `--hicache-size GB` for the share."""
        gb = self.size_gb(units, ratio)
        return f"--hicache-ratio {ratio:g}" if gb is None else f"--hicache-size {gb:g} ({ratio:.2f}x)"

    def host_lever(self, units: int, ratio: float, host_memory_gb: float | None) -> str:
        have = "" if host_memory_gb is None else f" of the {host_memory_gb:g} GB host memory"
        return f"{self.host_flag(units, ratio)}: {self.host_gb(units, ratio):,.1f} GB{have}"

    def copy_ms(self, tokens: int) -> float:
        """Milliseconds the card's host link takes to copy `tokens` of KV one way."""
        gbps = self.profile.h2d_gb_per_s
        return tokens * self.profile.kv_bytes_per_token / (gbps * 1e9) * 1e3 if gbps > 0 else 0.0


def _fraction_for(hw: Card, shape: ModelShape, kv_bytes: int, tokens: int) -> float:
    """The smallest mem_fraction_static (3 places, as SGLang rounds its own) whose pool holds `tokens`."""
    need = (tokens * kv_bytes + shape.weight_bytes) / (hw.visible_gib * gpu_memory.GIB)
    frac = math.ceil(need * 1000 - 1e-9) / 1000
    while gpu_memory.pool_tokens(hw, shape, frac, kv_bytes=kv_bytes) < tokens:
        frac = round(frac + 0.001, 3)
    return frac


def tp_pool_tokens(profile: CardProfile, n: int) -> int:
    """The pool (tokens) SGLang's defaults leave on `--tp n` of this card, bf16 KV; 0 where the model's heads
    do not split n ways. The sim has no tensor-parallel memory model: this is n cards' room at the default
    mem_fraction_static (SGLang's reserve grows by 1 GiB x n / 8) less the weights once, over the KV bytes a
    token takes on all n cards (the KV heads split; past the KV head count they replicate)."""
    hw, shape = getattr(profile, "hw", None), getattr(profile, "shape", None)
    if hw is None or shape is None or shape.heads % n or (shape.kv_heads % n and n % shape.kv_heads):
        return 0
    room = n * hw.visible_gib * gpu_memory.GIB * gpu_memory.mem_fraction_static(hw, tp=n) - shape.weight_bytes
    per_token = shape.kv_bytes_per_token * max(1.0, n / shape.kv_heads)
    return max(0, int(room // per_token))
