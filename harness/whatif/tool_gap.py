"""The tool-gap table (the summary's record is harness.summary.tool_gap, the same fields): returning requests bucketed by the gap since their
conversation's previous answer, with their cached tokens by tier. One builder for the live summary
(harness.summarize.tool_gap, from the records) and an offline replay (`offline_tool_gap`: the engine's
per-request hits and the trace's gaps), so both say the same thing in the same units."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from harness.whatif.serve import Served
from harness.whatif.trace import Trace

FLOOR_S = 1.0  # the lowest bucket edge above 0 (a tool call takes seconds), lower only for short gaps


@dataclass(frozen=True)
class GapRow:
    """One gap bucket [gap_lo_s, gap_hi_s) (hi None: open) and its returning requests' prompt tokens by
    tier (device/host/storage None where the server gave no split)."""

    gap_lo_s: float
    gap_hi_s: float | None
    requests: int
    prompt_tokens: int
    cached_tokens: int
    device_tokens: int | None
    host_tokens: int | None
    storage_tokens: int | None
    recomputed_tokens: int


@dataclass(frozen=True)
class ToolGapTable:
    """Returning requests by gap (the trace's seconds: the run's x speedup), log buckets to the p99 gap."""

    requests: int
    speedup: float
    gap_p50_s: float
    gap_p95_s: float
    gap_p99_s: float
    split: bool  # every cached request gave its tiers
    source: str  # usage (live) | replay (offline)
    rows: list[GapRow]


@dataclass(frozen=True)
class GapSample:
    """One returning request: its gap (trace seconds) and prompt tokens, cached in all and by tier."""

    gap_s: float
    prompt: int
    cached: int
    device: int | None  # None: no tier split given
    host: int | None
    storage: int | None


def edges(p99: float) -> list[float]:
    """Bucket edges: 0, then powers of two from min(1 s, top / 8) up to `top`, the first power of two
    at or above the p99 gap; above it one open bucket."""
    if p99 <= 0:
        return [0.0]
    top = 2.0 ** math.ceil(math.log2(p99))
    lo = min(FLOOR_S, top / 8)
    return [0.0] + [top / 2**k for k in range(round(math.log2(top / lo)), -1, -1)]


def gap_table(
    samples: Iterable[GapSample], speedup: float = 1.0, source: str = "usage"
) -> ToolGapTable | None:
    """The table over the samples; None without a returning request. Empty buckets are left out."""
    rows = list(samples)
    if not rows:
        return None
    gaps = np.array([s.gap_s for s in rows], dtype=float)
    p50, p95, p99 = (float(v) for v in np.percentile(gaps, [50, 95, 99]))
    cuts = edges(p99)
    split = all(s.device is not None for s in rows if s.cached > 0)
    which = np.searchsorted(np.array(cuts), gaps, side="right") - 1
    out: list[GapRow] = []
    for b, lo in enumerate(cuts):
        inside = [s for s, w in zip(rows, which, strict=True) if w == b]
        if not inside:
            continue
        tiers = {
            t: sum(getattr(s, t) or 0 for s in inside) if split else None
            for t in ("device", "host", "storage")
        }
        prompt, cached = sum(s.prompt for s in inside), sum(s.cached for s in inside)
        out.append(
            GapRow(
                gap_lo_s=lo,
                gap_hi_s=cuts[b + 1] if b + 1 < len(cuts) else None,
                requests=len(inside),
                prompt_tokens=prompt,
                cached_tokens=cached,
                device_tokens=tiers["device"],
                host_tokens=tiers["host"],
                storage_tokens=tiers["storage"],
                recomputed_tokens=max(0, prompt - cached),
            )
        )
    return ToolGapTable(
        requests=len(rows),
        speedup=speedup,
        gap_p50_s=p50,
        gap_p95_s=p95,
        gap_p99_s=p99,
        split=split,
        source=source,
        rows=out,
    )


def offline_tool_gap(trace: Trace, served: Served) -> ToolGapTable | None:
    """The table for an offline replay: each returning request's gap as the trace gives it (its think
    time after the previous answer) and the tiers its prefix was found in by the replay."""
    samples = [
        GapSample(r.gap, r.tokens, d + h + s, d, h, s)
        for r, (d, h, s) in zip(trace.requests, served.hits, strict=True)
        if r.turn is not None and r.turn > 0
    ]
    return gap_table(samples, source="replay")
