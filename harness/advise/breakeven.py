"""Break-even per tier: on this card and model, is loading a prefix of N tokens cheaper than recomputing it?

Every figure comes from harness.sim.tier_time, the functions the sim itself times hits with (no second
copy of the numbers): `recompute_s` (one prefill forward of N new tokens), `host_hit_s` (host pool ->
device over the card's host link) and `storage_hit_s` (the L3 backend's read into the host pool, then the
host link), for each `--hicache-storage-backend` the sim models (harness.sim.storage.BACKENDS).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.sim.storage import BACKENDS
from harness.sim.tier_time import host_hit_s, recompute_s, storage_hit_s
from harness.sim.timing import CardProfile

SIZES = (256, 1024, 4096, 16384, 65536)


@dataclass(frozen=True)
class TierCost:
    tier: str  # host | storage
    tokens: int
    recompute_ms: float
    load_ms: float
    backend: str | None = None  # the storage backend; None for the host tier

    @property
    def pays(self) -> bool:
        return self.load_ms < self.recompute_ms

    @property
    def name(self) -> str:
        return f"{self.tier} ({self.backend})" if self.backend else self.tier

    def to_dict(self) -> dict:
        return {
            "tier": self.tier,
            "backend": self.backend,
            "tokens": self.tokens,
            "recompute_ms": round(self.recompute_ms, 4),
            "load_ms": round(self.load_ms, 4),
            "load_pays": self.pays,
        }


def host_tier(profile: CardProfile, sizes: tuple[int, ...] = SIZES) -> list[TierCost]:
    """Host memory (HiCache L2): the copy over the host link, as the sim's load-back costs it."""
    return [TierCost("host", n, recompute_s(n, profile) * 1e3, host_hit_s(n, profile) * 1e3) for n in sizes]


def storage_tier(profile: CardProfile, sizes: tuple[int, ...] = SIZES, page_size: int = 1) -> list[TierCost]:
    """Storage (HiCache L3), every backend: its read into host memory, then the host link."""
    return [
        TierCost(
            "storage",
            n,
            recompute_s(n, profile) * 1e3,
            storage_hit_s(n, profile, name, page_size) * 1e3,
            backend=name,
        )
        for name in BACKENDS
        for n in sizes
    ]


def all_tiers(profile: CardProfile) -> dict[str, list[TierCost]]:
    return {"host": host_tier(profile), "storage": storage_tier(profile)}


def slower_than_recompute(tiers: dict[str, list[TierCost]]) -> list[str]:
    """One line per tier (backend) that loses to recomputing at some of the sizes: named as such."""
    out = []
    rows_by: dict[str, list[TierCost]] = {}
    for rows in tiers.values():
        for r in rows:
            rows_by.setdefault(r.name, []).append(r)
    for name, rows in rows_by.items():
        lose = [r.tokens for r in rows if not r.pays]
        if not lose:
            continue
        which = (
            "at every size" if len(lose) == len(rows) else f"at {', '.join(f'{n:,}' for n in lose)} tokens"
        )
        out.append(f"{name} is slower than recomputing {which}: loading from it does not pay there")
    return out


def storage_split(profile: CardProfile, tokens: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(backends that load `tokens` faster than recomputing them, those slower): only the first are worth
    a grid candidate."""
    rows = storage_tier(profile, (tokens,))
    return tuple(r.backend or "" for r in rows if r.pays), tuple(r.backend or "" for r in rows if not r.pays)


def table(tiers: dict[str, list[TierCost]]) -> tuple[list[str], list[list[str]]]:
    """One row per prefix length: recompute ms, then each tier's load ms ("slower" where it loses)."""
    names = list(dict.fromkeys(r.name for rows in tiers.values() for r in rows))
    by = {(r.name, r.tokens): r for rows in tiers.values() for r in rows}
    sizes = sorted({r.tokens for rows in tiers.values() for r in rows})
    out = []
    for n in sizes:
        first = next(by[(name, n)] for name in names if (name, n) in by)
        cells = [f"{n:,}", f"{first.recompute_ms:.2f}"]
        for name in names:
            r = by.get((name, n))
            cells.append("" if r is None else f"{r.load_ms:.2f}" + ("" if r.pays else " (slower)"))
        out.append(cells)
    return ["tokens", "recompute ms", *[f"{name} ms" for name in names]], out
