"""How far the card physics is from published measurements, and the range that puts on a capacity.

GPUs needed rests on the modelled prefill and decode rates, so a capacity is only as good as they are.
Each public measurement the timing model is fitted to (harness.sim.cards), and each one held out of the
fit, is costed again with the fitted efficiencies; its ratio modelled rate / measured rate says how optimistic (> 1) or pessimistic (< 1) the
model is on that card. A profile takes the rows of its own card, per step kind, and the nearest card's
(by datasheet bandwidth and peak) where its own has none. The error is the card's, whatever the model:
the model's shape enters the modelled figure exactly, the efficiencies are what a card gets wrong.
`low`/`high` multiply a capacity in requests/s: the true rate is modelled / ratio, so the range runs
from the most optimistic row to the most pessimistic one, always holding the point itself (1.0). Under
~10 % worst error (`is_large` false) a caller may print the point alone. docs/physics.md has the rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from harness.sim.cards import (
    CARDS,
    DECODE_PER_SEQ_S,
    ETA_BW,
    ETA_C,
    FIT_POINTS,
    PREFILL_PER_LAYER_S,
    Card,
    Measurement,
    held_out,
)
from harness.sim.timing import CardProfile, PhysicsProfile

LARGE = 0.10  # a worst error at or above this is worth a range, not a point
_KINDS = ("prefill", "decode")


@dataclass(frozen=True)
class Check:
    """One measurement beside what the fitted model says of it."""

    measurement: Measurement
    modelled_s: float  # seconds per step or forward, by the fitted efficiencies

    @property
    def ratio(self) -> float:
        """Modelled rate / measured rate: above 1 the model is optimistic (too fast)."""
        return self.measurement.measured_s / self.modelled_s


@dataclass(frozen=True)
class Band:
    """One step kind's error on one card: the worst and the typical (geometric-mean) ratio."""

    kind: str  # "prefill" or "decode"
    card: str  # the card whose measurements gave it (the profile's own, or the nearest with some)
    rows: int
    gmean_ratio: float  # modelled / measured rate, geometric mean over the rows
    worst_ratio: float  # the row furthest from 1 (either side)

    @property
    def worst_error(self) -> float:
        """Relative error of the worst row, as a factor either way: 1.6x slow and 1.6x fast are both 0.6."""
        return max(self.worst_ratio, 1 / self.worst_ratio) - 1


@dataclass(frozen=True)
class PhysicsError:
    """The card physics' error for one profile, and the range it puts on a modelled capacity."""

    profile: str
    prefill: Band | None
    decode: Band | None
    low: float  # capacity_rps x low .. capacity_rps x high holds every applicable measurement
    high: float
    is_large: bool  # worst error >= 10 %: report the range, not the point

    @property
    def worst_error(self) -> float:
        return max((b.worst_error for b in (self.prefill, self.decode) if b is not None), default=0.0)

    def capacity_range(self, capacity_rps: float) -> tuple[float, float]:
        return capacity_rps * self.low, capacity_rps * self.high

    def summary(self) -> str:
        """One line for a report: where the range comes from, so a reader can weigh it."""
        parts = [
            f"{b.kind} {b.worst_ratio:.2f}x on {b.card} ({b.rows} row{'s' if b.rows > 1 else ''})"
            for b in (self.prefill, self.decode)
            if b is not None
        ]
        if not parts:
            return f"{self.profile}: no published measurement applies (a hand-set profile)"
        return (
            f"{self.profile}: modelled/measured rate, worst {'; '.join(parts)}: "
            f"capacity x [{self.low:.2f}, {self.high:.2f}]"
        )

    def to_dict(self) -> dict:
        def band(b: Band | None) -> dict | None:
            if b is None:
                return None
            return {
                "card": b.card,
                "rows": b.rows,
                "gmean_ratio": round(b.gmean_ratio, 4),
                "worst_ratio": round(b.worst_ratio, 4),
                "worst_error": round(b.worst_error, 4),
            }

        return {
            "profile": self.profile,
            "prefill": band(self.prefill),
            "decode": band(self.decode),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "is_large": self.is_large,
        }


def modelled_s(m: Measurement) -> float:
    """The fitted model's time for a measurement's work: the same terms a PhysicsProfile adds up (weights +
    KV over eta_bw x bandwidth + 15 us a sequence; FLOPs over eta_c x peak at the sustained clock + 80 us a
    layer), on the measurement's own bytes and FLOPs (so an FP8 or foreign-model row is costed too)."""
    card = CARDS[m.card]
    if m.kind == "decode":
        return m.work / (ETA_BW * card.bw_gb_s * 1e9) + m.batch * DECODE_PER_SEQ_S
    peak = ETA_C * card.bf16_tflops * 1e12 * card.sm_typical_mhz / card.sm_max_mhz
    return m.work / peak + m.layers * PREFILL_PER_LAYER_S


@lru_cache(maxsize=1)
def checks() -> tuple[Check, ...]:
    """Every measurement with its modelled figure, the fitted ones first, then those held out of the fit
    (fixed for the process: the fit is)."""
    return tuple(Check(m, modelled_s(m)) for m in [*(m for m, _ in FIT_POINTS), *held_out()])


def _distance(a: Card, b: Card) -> float:
    """How unlike two cards are, by the two datasheet figures the model runs on (log scale)."""
    return abs(math.log(a.bw_gb_s / b.bw_gb_s)) + abs(math.log(a.bf16_tflops / b.bf16_tflops))


def _band(card: Card, kind: str) -> Band | None:
    """The kind's rows on `card`, else on the nearest card that has some."""
    rows = [c for c in checks() if c.measurement.kind == kind]
    if not rows:
        return None
    basis = min({c.measurement.card for c in rows}, key=lambda n: (_distance(card, CARDS[n]), n))
    ratios = [c.ratio for c in rows if c.measurement.card == basis]
    gmean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    worst = max(ratios, key=lambda r: abs(math.log(r)))
    return Band(kind, basis, len(ratios), gmean, worst)


@lru_cache(maxsize=64)
def _for_card(name: str, card: Card) -> PhysicsError:
    prefill, decode = _band(card, "prefill"), _band(card, "decode")
    bands = [b for b in (prefill, decode) if b is not None]
    rows = [
        c
        for c in checks()
        if any(c.measurement.kind == b.kind and c.measurement.card == b.card for b in bands)
    ]
    truth = [1 / c.ratio for c in rows]  # true rate / modelled rate per row
    low, high = min([1.0, *truth]), max([1.0, *truth])
    worst = max((b.worst_error for b in bands), default=0.0)
    return PhysicsError(name, prefill, decode, low, high, worst >= LARGE)


def physics_error(profile: CardProfile) -> PhysicsError:
    """The error band of `profile`'s card physics. A hand-set profile (tiny-test) has no card, so no
    measurement applies: its range is the point (1, 1), not large."""
    hw = profile.hw if isinstance(profile, PhysicsProfile) else None
    if hw is None:
        return PhysicsError(profile.name, None, None, 1.0, 1.0, False)
    return _for_card(profile.name, hw)
