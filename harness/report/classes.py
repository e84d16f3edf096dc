"""The traffic tables of a report: hit rate and TTFT per priority class (the spec's `priorities:`) and per
prompt-length bucket (tlru's question: does a policy cut the tail TTFT of long conversations?); for an
agent workload, per step depth, and the length buckets are named for what they are there: context length.

One row per point x key, medians over seeds, so policies (servers) sit beside each other per key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.report.common import as_points, point_order
from harness.report.tables import Cell, Table
from harness.summary import Point

HEADER = ["requests", "hit rate %", "TTFT p50 ms", "TTFT p99 ms"]


def _fmt(v: Any, scale: float, fmt: str) -> str:
    return format(v * scale, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "n/a"


def _bucket(key: str) -> str:
    lo = int(key)
    return f"{lo}–{2 * lo - 1}" if lo > 0 else "0"


def _split(points: list[Point], name: str, kind: str, title: str, first: str) -> Table | None:
    """One row per key of the `*_by_{name}` figures x point, keys in order, then point, then server."""
    rows: list[list[Cell]] = []
    keys: list[str] = []
    by_key: list[tuple[Any, Point, str]] = []
    for p in points:
        m = p.median
        hits = getattr(m, f"hit_rate_usage_by_{name}") or {}
        for k in hits:
            by_key.append((int(k) if name in ("length", "step_depth") else k, p, k))
    if not by_key:
        return None
    by_key.sort(key=lambda t: (t[0], t[1].point_key, point_order(t[1])))
    for _, p, k in by_key:
        m = p.median
        label = _bucket(k) if name == "length" else k
        n = (getattr(m, f"requests_by_{name}") or {}).get(k)
        rows.append(
            [
                Cell(label),
                Cell(p.server),
                Cell(p.point_key),
                Cell(_fmt(n, 1.0, ".0f")),
                Cell(_fmt((getattr(m, f"hit_rate_usage_by_{name}") or {}).get(k), 100.0, ".1f")),
                Cell(_fmt((getattr(m, f"ttft_median_s_by_{name}") or {}).get(k), 1000.0, ".1f")),
                Cell(_fmt((getattr(m, f"ttft_p99_s_by_{name}") or {}).get(k), 1000.0, ".1f")),
            ]
        )
        keys.append(p.point_key)
    head = HEADER
    if all(p.modelled for p in points):  # a sim's per-bucket TTFT is its wall clock: named so, not the card's
        head = [f"wall {h}" if h.startswith("TTFT") else h for h in HEADER]
    return Table(kind=kind, header=[first, "server", "point", *head], rows=rows, row_keys=keys, title=title)


def traffic_tables(points: Iterable[Point | Mapping[str, Any]]) -> list[Table]:
    """The per-class table (points whose records carried a class) and the per-length-bucket table."""
    pts = as_points(points)
    agent = bool(pts) and all(p.workload_kind == "agent" for p in pts)
    out = [
        _split(pts, "class", "classes", "By priority class", "class"),
        _split(pts, "step_depth", "depths", "By step depth (earlier exchanges in the context)", "step depth"),
        _split(pts, "length", "lengths", "By context length (tokens)", "context tokens")
        if agent
        else _split(pts, "length", "lengths", "By prompt length (tokens)", "prompt tokens"),
    ]
    return [t for t in out if t is not None]
