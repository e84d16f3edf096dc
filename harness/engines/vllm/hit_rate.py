"""A point's prefix-cache hit rate from vLLM's cumulative stats lines, and how far the log's rounding lets
it be trusted."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from harness.serverlog.records import LogRecord

ROUNDING_RATE = 0.0005  # vLLM prints the hit rate with one decimal of a percent
ROUNDING_THROUGHPUT = 0.05  # ... and throughput with one decimal of tokens/s
COARSE_ABOVE = 0.02  # a log figure less certain than 2 points is flagged, not compared


@dataclass
class LogHitRate:
    """A point's hit rate read from vLLM's periodic stats lines, and how far it can be trusted."""

    hit_rate: float | None
    method: str  # "since-reset": the first line after the point, its reset restarted the figure
    #             "edge-delta": (hits, queries) rebuilt at the lines on the point's edges, differenced
    uncertainty: float | None = None  # ± on hit_rate from the log's rounding
    coarse: bool = False
    why: str | None = None
    start_line: int | None = None  # line numbers of the edge lines used
    end_line: int | None = None
    queries: float | None = None  # tokens the figure covers (edge-delta: estimated)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def vllm_stats_lines(records: Iterable[LogRecord]) -> list[LogRecord]:
    """Stats records carrying a hit rate, in file order; V0's separate hit-rate line is merged into its stats."""
    out: list[LogRecord] = []
    for r in records:
        if r.kind != "vllm_stats":
            continue
        if "prompt_throughput" not in r.fields and out and "prefix_cache_hit_rate" not in out[-1].fields:
            out[-1] = LogRecord(
                r.kind, out[-1].wall, {**out[-1].fields, **r.fields}, out[-1].line, out[-1].lineno
            )
            continue
        out.append(r)
    return [r for r in out if isinstance(r.fields.get("prefix_cache_hit_rate"), float)]


def vllm_throughput_counts(version: str | None) -> str:
    """What vLLM's `Avg prompt throughput` counts: computed tokens only (0.32 and later), else whole prompts."""
    try:
        major, minor = (int(x) for x in (version or "").split(".")[:2])
    except ValueError:
        return "computed"  # unknown: assume the newest behaviour
    return "computed" if (major, minor) >= (0, 32) else "prompt"


def vllm_point_hit_rate(
    records: Iterable[LogRecord],
    start_wall: float,
    end_wall: float,
    *,
    reset_lineno: int | None = None,
    next_reset_lineno: int | None = None,
    interval_s: float = 10.0,
    throughput_counts: str = "computed",
) -> LogHitRate:
    """The point's hit rate from vLLM's cumulative `Prefix cache hit rate: X%` lines.

    vLLM prints the hit rate over the requests since its last prefix-cache reset (the most recent 1000 at
    most) every `interval_s` (VLLM_LOG_STATS_INTERVAL), and stays silent while idle, except for the first
    idle line, which comes at least one interval after the load's end (the runner waits for it). When the point
    reset the cache (`reset_lineno`, the line of its own reset), the first stats line stamped after the
    point's end (its last request's completion) and before the next reset is the point's own figure. Otherwise the figure is rebuilt at
    the last line before the point and the first line after it: queries Q and hits H since the last reset
    from the printed rate r and the integrated prompt throughput C (Q = C / (1 - r) when throughput counts
    computed tokens, Q = C when it counts whole prompts), then (H_end - H_start) / (Q_end - Q_start).
    Flagged coarse when no line lies after the point, the edges straddle a reset, or rounding alone moves
    the figure by more than 2 points.
    """
    records = list(records)
    lines = vllm_stats_lines(records)
    stop = next_reset_lineno if next_reset_lineno is not None else float("inf")
    # stamped S means printed in [S, S + 1): only a line stamped at or after the end surely follows it.
    # `Running: 0 reqs` proves nothing: between a batch's completions and the client's next sends a
    # busy engine shows 0 running too (seen on 0.32: a line mid-load at 22.9 % of a 76.3 % point).
    after = [r for r in lines if r.wall is not None and r.wall >= end_wall and r.lineno < stop]
    if reset_lineno is not None:
        after = [r for r in after if r.lineno > reset_lineno]
    if not after:
        return LogHitRate(
            None,
            "since-reset" if reset_lineno is not None else "edge-delta",
            coarse=True,
            why=f"no stats line between the point's end and the next reset (vLLM logs every {interval_s:g} s)",
        )
    end = after[0]
    if reset_lineno is not None:
        return LogHitRate(
            end.fields["prefix_cache_hit_rate"] / 100.0,
            "since-reset",
            ROUNDING_RATE,
            False,
            None,
            reset_lineno,
            end.lineno,
        )
    return _edge_delta(lines, records, end, start_wall, interval_s, throughput_counts)


def _edge_delta(
    lines: list[LogRecord],
    records: list[LogRecord],
    end: LogRecord,
    start_wall: float,
    interval_s: float,
    counts: str,
) -> LogHitRate:
    resets = [r.lineno for r in records if r.kind == "flush"]

    def epoch(lineno: int) -> int:  # the line of the last reset before `lineno` (0: server start)
        return max((x for x in resets if x < lineno), default=0)

    # a line stamped S was printed in [S, S + 1): before the point only if S + 1 <= start
    before = [r for r in lines if r.wall is not None and r.wall + 1.0 <= start_wall and r.lineno < end.lineno]
    start = before[-1] if before else None
    if start is not None and epoch(start.lineno) != epoch(end.lineno):
        start = None  # a reset between the edges: the figure restarted, count from that reset
    first = epoch(end.lineno)

    def state(upto: LogRecord | None, dr: float, dc: float) -> tuple[float, float]:
        if upto is None:
            return 0.0, 0.0
        span = [r for r in lines if first < r.lineno <= upto.lineno]
        c = sum(float(r.fields.get("prompt_throughput") or 0.0) for r in span) * interval_s
        c = max(0.0, c + dc * len(span) * ROUNDING_THROUGHPUT * interval_s)
        rate = min(1.0, max(0.0, upto.fields["prefix_cache_hit_rate"] / 100.0 + dr))
        if counts == "prompt":
            return c, rate * c
        if rate >= 1.0:
            return float("inf"), float("inf")
        q = c / (1.0 - rate)
        return q, q - c

    def figure(dr_s: float, dr_e: float, dc_s: float, dc_e: float) -> tuple[float | None, float]:
        qs, hs = state(start, dr_s, dc_s)
        qe, he = state(end, dr_e, dc_e)
        dq = qe - qs
        if not dq > 0 or dq == float("inf"):
            return None, dq
        return (he - hs) / dq, dq

    base, dq = figure(0.0, 0.0, 0.0, 0.0)
    res = LogHitRate(None, "edge-delta", start_line=start.lineno if start else None, end_line=end.lineno)
    if base is None:
        res.coarse, res.why = True, "no prompt tokens between the edge lines (or a 100% rate hides them)"
        return res
    spread = 0.0
    for signs in itertools.product((-1.0, 1.0), repeat=4):
        v, _ = figure(*(s * ROUNDING_RATE if i < 2 else s for i, s in enumerate(signs)))
        spread = max(spread, abs(v - base) if v is not None else 1.0)
    res.hit_rate, res.uncertainty, res.queries = min(1.0, max(0.0, base)), spread, round(dq, 1)
    if spread > COARSE_ABOVE:
        res.coarse = True
        res.why = f"the log's rounding moves this figure by up to {100 * spread:.1f} points"
    return res
