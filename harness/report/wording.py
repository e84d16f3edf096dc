"""The wording findings share: a figure's spread over seeds, when two spreads differ, and how a number is
written (ms, %, ×), so every experiment's sentences state differences by one rule."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from harness.summarize.intervals import mean_interval
from harness.summary import Figures, Point

HIT_MARGIN = 0.01  # hit rates closer than 1 point are not called different, whatever the seeds say
TTFT_FACTOR = 1.05  # nor TTFTs within 5 %


@dataclass(frozen=True)
class Spread:
    """A figure's median over ok seeds and the per-seed min and max."""

    median: float
    lo: float
    hi: float
    n: int
    ci: tuple[float, float] | None = None  # the 95% Student-t interval of the mean (2+ seeds)

    def above(self, other: Spread, margin: float = 0.0, factor: float = 1.0) -> bool:
        """True when every seed here is above every seed of `other`, and this mean's 95% interval above
        the other's, by more than `margin` (absolute) and `factor` (relative): a difference the seeds
        support and large enough to matter."""
        if not (self.n > 1 and other.n > 1 and self.lo > other.hi * factor + margin):
            return False
        return self.ci is None or other.ci is None or self.ci[0] > other.ci[1] * factor + margin


def spread_of(values: Sequence[float | None]) -> Spread | None:
    vals = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not vals:
        return None
    floats = [float(v) for v in vals]
    return Spread(float(statistics.median(vals)), min(floats), max(floats), len(vals), mean_interval(floats))


def ok_seeds(p: Point) -> list[Figures]:
    return [s.figures for _, s in sorted(p.seeds.items()) if s.status == "ok"]


def ttft_ms_of(fig: Figures, modelled: bool) -> float | None:
    if modelled:
        return fig.modelled.ttft_ms.p50 if fig.modelled and fig.modelled.ttft_ms else None
    v = fig.ttft_median_s
    return v * 1000 if isinstance(v, int | float) else None


def fmt_ms(v: float) -> str:
    return f"{v:,.0f} ms" if v >= 10 else f"{v:.1f} ms"


def fmt_ms_range(s: Spread) -> str:
    return f"{s.lo:,.0f}–{s.hi:,.0f} ms" if s.lo >= 10 else f"{s.lo:.1f}–{s.hi:.1f} ms"


def fmt_x(v: float) -> str:
    return f"{v:.1f}×"


def fmt_pct(v: float) -> str:
    return f"{v * 100:.1f} %"


def fmt_pct_range(s: Spread) -> str:
    if s.n < 2:
        return "one seed"
    same = f"{s.lo:.4f}" == f"{s.hi:.4f}"
    return "every seed alike" if same else f"seeds {s.lo * 100:.1f}–{s.hi * 100:.1f}"


def fmt_pct_seeds(pol: str, s: Spread) -> str:
    """`lru 24.8 % (seeds 23.3–26.6)`."""
    return f"{pol} {fmt_pct(s.median)} ({fmt_pct_range(s)})"


def join_words(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
