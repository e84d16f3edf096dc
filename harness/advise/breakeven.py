"""Break-even per tier: on this card and model, is loading a prefix of N tokens cheaper than recomputing it?

One function per tier, each from the sim's own physics (harness.sim.timing.CardProfile), so a tier added
to the sim (storage, issue 26) adds one function here. Recomputing N tokens is a prefill of N tokens from
an empty context; loading them is the tier's copy time (host: PCIe, `load_back_time`).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.sim.timing import CardProfile

SIZES = (256, 1024, 4096, 16384, 65536)


@dataclass(frozen=True)
class TierCost:
    tier: str
    tokens: int
    recompute_ms: float
    load_ms: float

    @property
    def pays(self) -> bool:
        return self.load_ms < self.recompute_ms

    def to_dict(self) -> dict:
        return {
            "tier": self.tier,
            "tokens": self.tokens,
            "recompute_ms": round(self.recompute_ms, 4),
            "load_ms": round(self.load_ms, 4),
            "load_pays": self.pays,
        }


def recompute_s(profile: CardProfile, tokens: int) -> float:
    """A prefill of `tokens` with nothing cached (the cost a hit saves)."""
    return profile.prefill_time(tokens, 0)


def host_tier(profile: CardProfile, sizes: tuple[int, ...] = SIZES) -> list[TierCost]:
    """Host memory (HiCache L2): the copy over the host link, as the sim's load-back costs it."""
    return [
        TierCost("host", n, recompute_s(profile, n) * 1e3, profile.load_back_time(n) * 1e3) for n in sizes
    ]


def storage_tier(profile: CardProfile, sizes: tuple[int, ...] = SIZES) -> list[TierCost]:
    """Storage (HiCache L3): not modelled by the sim yet, so no rows (wire the sim's storage timing here)."""
    return []


def all_tiers(profile: CardProfile) -> dict[str, list[TierCost]]:
    return {"host": host_tier(profile), "storage": storage_tier(profile)}
