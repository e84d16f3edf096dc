"""Two summaries side by side: the figures of the points both hold, as B / A ratios (hit rates as A → B).

`harness compare` prints these; the figure names are checked here so a typo is one line and exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError
from harness.report.common import sweep_order
from harness.summarize.intervals import overlap
from harness.summary import Point, Summary

FIGURES = (
    "ttft_median_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "itl_median_s",
    "e2e_median_s",
    "output_tok_s",
    "input_tok_s",
    "hit_rate_usage",
    "hit_rate_log",
    "hit_rate_counters",
)
DEFAULT_FIGURES = ("ttft_median_s", "ttft_p99_s", "itl_median_s", "output_tok_s", "hit_rate_usage")
LABELS = {
    "ttft_median_s": "TTFT p50",
    "ttft_p90_s": "TTFT p90",
    "ttft_p99_s": "TTFT p99",
    "itl_median_s": "ITL p50",
    "e2e_median_s": "e2e p50",
    "output_tok_s": "out tok/s",
    "input_tok_s": "in tok/s",
    "hit_rate_usage": "hit rate",
    "hit_rate_log": "hit (log)",
    "hit_rate_counters": "hit (ctr)",
}


# a compared figure -> the point's seed interval of the same figure (harness.summarize.intervals)
INTERVAL_OF = {
    "ttft_median_s": "latency.ttft_s.p50",
    "ttft_p99_s": "latency.ttft_s.p99",
    "output_tok_s": "output_tok_s",
    "hit_rate_usage": "hit_rate_usage",
    "hit_rate_log": "hit_rate_log",
    "hit_rate_counters": "hit_rate_counters",
}


def is_rate(figure: str) -> bool:
    """Hit rates are compared as A → B in %, not as a ratio (a ratio of two rates reads badly)."""
    return figure.startswith("hit_rate")


def check_figures(text: str, summaries: list[Summary]) -> list[str]:
    """The comma-separated names, each a known figure or a number some point's median holds."""
    names = [f.strip() for f in text.split(",") if f.strip()]
    if not names:
        raise HarnessError("--figures: no figure named")
    numeric = {k for s in summaries for p in s.points for k in p.median.numbers()}
    for name in names:
        if name not in FIGURES and name not in numeric:
            raise HarnessError(f"--figures: unknown figure {name!r} (known: {', '.join(FIGURES)})")
    return names


def _key(p: Point) -> tuple[str, str, str]:
    return (p.experiment, p.server, p.point_key)


@dataclass
class Row:
    """One point both summaries hold: (experiment, server, point key), both statuses, per figure (A, B, B / A)."""

    key: tuple[str, str, str]
    status: tuple[str, str]
    figures: dict[str, tuple[float | None, float | None, float | None]] = field(default_factory=dict)
    # per figure: do A's and B's 95% seed intervals overlap (None: either has none)
    overlap: dict[str, bool | None] = field(default_factory=dict)


def compare(a: Summary, b: Summary, figures: list[str]) -> list[Row]:
    """One row per point present in both, sweep values in numeric order: A and B medians and B / A."""
    bmap = {_key(p): p for p in b.points}
    rows = []
    for pa in sorted(a.points, key=lambda p: (p.experiment, p.server, sweep_order(p.sweep))):
        pb = bmap.get(_key(pa))
        if pb is None:
            continue
        row = Row(_key(pa), (pa.status or "?", pb.status or "?"))
        for f in figures:
            va, vb = pa.median.number(f), pb.median.number(f)
            row.figures[f] = (va, vb, vb / va if va is not None and vb is not None and va else None)
            iv = INTERVAL_OF.get(f)
            row.overlap[f] = overlap(pa.interval.get(iv), pb.interval.get(iv)) if iv else None
        rows.append(row)
    return rows


def cell(figure: str, values: tuple[Any, Any, float | None], overlaps: bool | None = None) -> str:
    """`2.00×` for a ratio, `36.6→40.1%` for a hit rate, `n/a` where either side has no figure; ` ≈`
    after it when the two seed intervals overlap (no difference the seeds support)."""
    va, vb, ratio = values
    mark = " ≈" if overlaps else ""
    if is_rate(figure):
        ok = all(isinstance(v, int | float) for v in (va, vb))
        return f"{va * 100:.1f}→{vb * 100:.1f}%{mark}" if ok else "n/a"
    return f"{ratio:.2f}×{mark}" if ratio is not None else "n/a"
