"""Confidence intervals over seeds: how sure a point's median figures are, beside their min–max.

Student t, two-sided 95%, of the mean over the seeds' values: mean ± t(0.975, n−1) · s / √n, from a
small table (no scipy). Each seed is one independent run of the same point, so the seeds are the
sample; with one seed there is no interval. Used for TTFT p50/p99, TPOT p50, throughput, hit rate and
goodput; the report shows it, compare and findings state a difference only when two do not overlap.
The interval is clipped to what the figure can be (>= 0; <= 1 for hit rates and goodput).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

LEVEL = 0.95
# t(0.975, df) for df = 1..30; beyond 30 the normal 1.96 is within 2%
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
HIT_RATE_SOURCES = ("hit_rate_usage", "hit_rate_log", "hit_rate_counters", "hit_rate_timings")
# the interval's key -> where its seed value sits in a seed's figures
FIGURES: dict[str, tuple[str, ...]] = {
    "latency.ttft_s.p50": ("latency", "ttft_s", "p50"),
    "latency.ttft_s.p99": ("latency", "ttft_s", "p99"),
    "latency.tpot_s.p50": ("latency", "tpot_s", "p50"),
    "throughput.requests_per_s": ("throughput", "requests_per_s"),
    "output_tok_s": ("output_tok_s",),
    "goodput.fraction": ("goodput", "fraction"),
    # a sim point's modelled card time (harness.summarize.modelled), what its report columns show
    "modelled.ttft_ms.p50": ("modelled", "ttft_ms", "p50"),
    "modelled.output_tok_s": ("modelled", "output_tok_s"),
    "modelled.goodput.fraction": ("modelled", "goodput", "fraction"),
}


FRACTIONS = ("goodput.fraction", "modelled.goodput.fraction")


def t_quantile(df: int) -> float:
    """t(0.975, df): the table, 1.96 past it."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_interval(values: Sequence[float]) -> tuple[float, float] | None:
    """The 95% Student-t interval of the mean of `values`; None with fewer than two."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) < 2:
        return None
    half = t_quantile(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    m = float(x.mean())
    return m - half, m + half


def _at(fig: dict[str, Any], path: tuple[str, ...]) -> float | None:
    v: Any = fig
    for k in path:
        v = v.get(k) if isinstance(v, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def seed_intervals(figs: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """`{figure: [low, high]}` over the seeds' figures, for the figures every seed has (2+ seeds)."""
    out: dict[str, list[float]] = {}
    paths = dict(FIGURES)
    hit = next((s for s in HIT_RATE_SOURCES if all(_at(f, (s,)) is not None for f in figs)), None)
    if hit is not None:  # the first hit-rate source every seed has, under its own name
        paths[hit] = (hit,)
    for key, path in paths.items():
        vals = [_at(f, path) for f in figs]
        if any(v is None for v in vals):
            continue
        ci = mean_interval([v for v in vals if v is not None])
        if ci is not None:  # every figure here is >= 0, and hit rates and goodput are fractions
            top = 1.0 if key in FRACTIONS or key in HIT_RATE_SOURCES else math.inf
            out[key] = [max(ci[0], 0.0), min(ci[1], top)]
    return out


def overlap(a: Any, b: Any) -> bool | None:
    """Do two `[low, high]` intervals (as a summary holds them) overlap; None when either is missing."""

    def pair(x: Any) -> tuple[float, float] | None:
        ok = isinstance(x, list | tuple) and len(x) == 2
        return (float(x[0]), float(x[1])) if ok and all(isinstance(v, int | float) for v in x) else None

    pa, pb = pair(a), pair(b)
    if pa is None or pb is None:
        return None
    return pa[0] <= pb[1] and pb[0] <= pa[1]
