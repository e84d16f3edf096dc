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
                f"token, {gpu_memory.pool_tokens(hw, shape, base, kv_bytes=half):,} tokens",
            )
        return PoolLever(
            "fp8",
            frac,
            f"FP8 KV ({FP8_FLAG}) with --mem-fraction-static {frac:.3f} (the default {base:.3f} and bf16 KV give "
            f"{default:,} tokens)",
        )

    def host_gb(self, units: int, ratio: float) -> float:
        """The host memory (GB) a host tier of `ratio` x a device pool of `units` takes (bf16 KV)."""
        return ratio * self.tokens(units) * self.profile.kv_bytes_per_token / 1e9

    def host_lever(self, units: int, ratio: float, host_memory_gb: float | None) -> str:
        have = "" if host_memory_gb is None else f" of the {host_memory_gb:g} GB host memory"
        return f"--hicache-ratio {ratio:g}: {self.host_gb(units, ratio):,.1f} GB{have}"

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
