"""The serving-benchmark table of a report: latency percentiles, throughput, goodput beside the hit rate.

Every cell is the median over seeds, with the seeds' min-max in brackets when there are several.
Goodput shows only where the spec set an `slo` (n/a otherwise: never a made-up bound); on a sim, also
judged on the modelled clock ("modelled goodput"), the figure its capacity search judges by.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.report.common import as_points, point_order, status_note
from harness.summary import Point, Record


def _get(d: Any, path: tuple[str, ...]) -> Any:
    """A figure by its column's path (`latency.ttft_s.p50`): the columns are data, so is the walk."""
    for k in path:
        d = d.get(k) if isinstance(d, Mapping | Record) else None
    return d


def _cell(p: Point, path: tuple[str, ...], scale: float, fmt: str) -> str:
    v = _get(p.median, path)
    if not isinstance(v, int | float) or isinstance(v, bool):
        return "n/a"
    text = format(v * scale, fmt)
    lo_hi = _get(p.spread, path)
    if len(p.seeds) > 1 and isinstance(lo_hi, list) and len(lo_hi) == 2 and lo_hi[0] != lo_hi[1]:
        text += f" ({format(lo_hi[0] * scale, fmt)}–{format(lo_hi[1] * scale, fmt)})"
    return text


def slo_text(points: Iterable[Point | Mapping[str, Any]]) -> str | None:
    goodputs = [p.median.goodput for p in as_points(points)]
    slos = {repr(g.slo): g.slo for g in goodputs if g is not None and "slo" in g}
    if not slos:
        return None
    return "; ".join(", ".join(f"{k} ≤ {v:g}" for k, v in s.items()) for s in slos.values())


MODELLED_GOODPUT = ("modelled", "goodput", "fraction")


def modelled_goodput_note(points: Iterable[Point | Mapping[str, Any]]) -> str:
    """What the `modelled goodput` column is, when the table has it ("" otherwise)."""
    if not any(_get(p.median, MODELLED_GOODPUT) is not None for p in as_points(points)):
        return ""
    return (
        " `modelled goodput`: the same judged on the sim's modelled clock, as a capacity search judges a"
        " probe (the wall clock runs at --time-scale, so its goodput says little about the card)."
    )


def latency_table(points: Iterable[Point | Mapping[str, Any]]) -> list[str]:
    header = ["server", "point"]
    cols: list[tuple[str, tuple[str, ...], float, str]] = []
    for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("ITL", "itl_s"), ("E2E", "e2e_s")):
        for pct in ("p50", "p90", "p99"):
            cols.append((f"{name} {pct} ms", ("latency", key, pct), 1000.0, ".1f"))
    cols += [
        ("req/s", ("throughput", "requests_per_s"), 1.0, ".2f"),
        ("output tok/s", ("throughput", "output_tokens_per_s"), 1.0, ".0f"),
        ("goodput", ("goodput", "fraction"), 100.0, ".1f"),
        ("goodput req/s", ("goodput", "requests_per_s"), 1.0, ".2f"),
        ("hit rate %", ("hit_rate_usage",), 100.0, ".1f"),
        ("client late p99 ms", ("client_late_s", "p99"), 1000.0, ".2f"),
    ]
    pts = sorted(as_points(points), key=point_order)
    if any(_get(p.median, ("modelled", "ttft_ms", "p50")) is not None for p in pts):
        # a sim: the card's modelled latency leads; the wall clock only paced the run (--time-scale)
        cols[:0] = [
            (f"modelled {name} {pct} ms", ("modelled", key, pct), 1.0, ".1f")
            for name, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"))
            for pct in ("p50", "p90", "p99")
        ]
        wall = [(f"wall {c[0]}", c[1], c[2], c[3]) for c in cols if c[1][0] == "latency"]
        cols = [c for c in cols if c[1][0] != "latency"]  # not beside the modelled ones as if comparable
    else:
        wall = []
    if modelled_goodput_note(pts):  # a sim with an slo: its goodput on the card's clock too
        at = [c[0] for c in cols].index("goodput req/s") + 1
        cols.insert(at, ("modelled goodput", MODELLED_GOODPUT, 100.0, ".1f"))
    out = _rows(pts, header, cols)
    if wall:  # kept for whoever checks the pacing: in a collapsed block, under its own name
        out += [
            "",
            "<details><summary>The sim's wall clock (paced by --time-scale; not the card's time)</summary>",
            "",
            *_rows(pts, header, wall),
            "",
            "</details>",
        ]
    return out


def _rows(
    pts: list[Point], header: list[str], cols: list[tuple[str, tuple[str, ...], float, str]]
) -> list[str]:
    head = header + [c[0] for c in cols]
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for p in pts:
        row = [p.server, p.point_key + status_note(p)]
        row += [_cell(p, path, scale, fmt) for _, path, scale, fmt in cols]
        out.append("| " + " | ".join(row) + " |")
    return out
