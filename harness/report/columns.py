"""The point tables' figure columns, declared once: header, the figure it reads, how it is written.

harness.report.tables builds the points table from POINT_COLUMNS (Markdown and the HTML page both
render those tables); the CSV (harness.report.csv_files) writes every figure of harness.summary.figures
under its own name, so a figure declared there is in the CSV without a line here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.report.common import clock
from harness.summary import Point


def ms(v: Any) -> str:
    return f"{v * 1000:.0f}" if isinstance(v, int | float) else "n/a"


def num(v: Any, fmt: str = ".1f") -> str:
    return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "n/a"


def ms1(v: Any) -> str:
    return f"{v * 1000:.1f}" if isinstance(v, int | float) else "n/a"


def pct(v: Any) -> str:
    return f"{v * 100:.1f}%" if isinstance(v, int | float) else "n/a"


def whole(v: Any) -> str:
    return num(v, ".0f")


def _always(points: Sequence[Point]) -> bool:
    return True


def _sim(points: Sequence[Point]) -> bool:
    """Sim points carry the modelled card's figures, from the sim's virtual clock."""
    return any(p.modelled for p in points)


def _wall(points: Sequence[Point]) -> bool:
    """Wall-clock timings, unless every point is a sim's: there they only measure the pacing, and beside
    the modelled card's they read as comparable (they stay in the JSON and the latency details)."""
    return not points or not all(p.modelled for p in points)


@dataclass(frozen=True)
class Column:
    """One table column: its header, the value it shows of a point, how that value is written, and
    whether the table shows it for these points."""

    header: str
    get: Callable[[Point], Any]
    fmt: Callable[[Any], str] = num
    shown: Callable[[Sequence[Point]], bool] = _always

    def text(self, p: Point) -> str:
        return self.fmt(self.get(p))


def modelled_ttft_p50_ms(p: Point) -> float | None:
    """A point's modelled median TTFT (ms); None without a modelled block."""
    return p.modelled.ttft_ms.p50 if p.modelled and p.modelled.ttft_ms else None


def modelled_tok_s(p: Point) -> float | None:
    return p.modelled.output_tok_s if p.modelled else None


# the points table, between the point's name and its verdict and status
POINT_COLUMNS: tuple[Column, ...] = (
    Column("requests", lambda p: p.median.requests, whole),
    Column("failures", lambda p: p.median.failures, whole),
    Column("modelled median TTFT ms", modelled_ttft_p50_ms, whole, _sim),
    Column("modelled output tok/s", modelled_tok_s, num, _sim),
    Column("TTFT median ms", lambda p: p.median.ttft_median_s, ms, _wall),
    Column("TTFT p99 ms", lambda p: p.median.ttft_p99_s, ms, _wall),
    Column("output tok/s", lambda p: p.median.output_tok_s, num, _wall),
    Column("hit rate", lambda p: p.median.hit_rate_usage, pct),
    Column("median SM clock MHz", clock, whole),
)


def shown(columns: Sequence[Column], points: Sequence[Point]) -> list[Column]:
    """The columns these points get."""
    return [c for c in columns if c.shown(points)]
