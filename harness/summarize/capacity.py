"""A capacity search's logic: what a probe's requests mean against the SLO, which value to probe next, the result.

Pure and deterministic, so the live search (harness.sweep.search) and the summary read the same probes
the same way: the search replays this over the probes already ok in the capture (resume), the summary
over every probe it finds. Expanding then bisecting: lo, then doubling up to hi until a probe does not
pass, then halving the bracket between the last pass and the first non-pass down to adjacent integers
(concurrency, sessions) or 5% (request_rate). A probe is `pass`, `over` (ok, but short of the target),
`saturated` (throughput stopped rising while TTFT climbed, or the queue grew through the run) or
`failed` (its point was not ok: the reason is kept); any of the last three ends the search upward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from harness.spec.search import SearchSpec
from harness.summarize.latency import SLO_FIELDS
from harness.summarize.modelled import on_card_time
from harness.summary.search import SearchResult

RATE_RESOLUTION = 0.05  # request_rate: the bracket closes when hi - lo <= 5% of lo
SATURATION_GAIN = 0.05  # throughput rising less than 5% ...
SATURATION_CLIMB = 0.2  # ... while TTFT p50 climbs more than 20% is saturation
QUEUE_GROWTH = 3.0  # open loop: the last quarter's TTFT p50 3x the first quarter's: the queue never drained
MIN_QUEUE_ROWS = 8


@dataclass
class SeedRun:
    """One seed of a probe, as its point folder has it."""

    status: str
    failure: str | None
    rows: list[dict[str, Any]]
    scheduled: int | None  # the requests goodput is a fraction of (None: the rows)


@dataclass
class Probe:
    """One probed knob value: its figures (median over seeds) and what they mean."""

    value: float
    status: str = "pass"  # pass | over | saturated | failed
    goodput: float | None = None
    requests_per_s: float | None = None
    ttft_p50_s: float | None = None
    met: dict[str, float] = field(default_factory=dict)  # SLO term -> fraction of scheduled within it
    at_percentile: dict[str, float] = field(default_factory=dict)  # term -> its percentile, ms
    limiting: str | None = None  # the SLO term met by the fewest requests
    queue_growth: float | None = None  # last quarter's TTFT p50 / first quarter's (open loop)
    reason: str | None = None  # why not pass, in words

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "status": self.status,
            "goodput": self.goodput,
            "requests_per_s": self.requests_per_s,
            "ttft_p50_s": self.ttft_p50_s,
            "met": self.met,
            "at_percentile": self.at_percentile,
            "limiting": self.limiting,
            "queue_growth": self.queue_growth,
            "reason": self.reason,
        }


def _median(vals: Sequence[float | None]) -> float | None:
    xs = [v for v in vals if v is not None and np.isfinite(v)]
    return float(np.median(xs)) if xs else None


def _seed_figures(s: SeedRun, search: SearchSpec) -> dict[str, Any]:
    """Goodput, each term's met fraction and percentile, throughput, TTFT p50 and queue growth of one seed."""
    df = pd.DataFrame(on_card_time(s.rows))
    base = s.scheduled if s.scheduled else len(df)
    if df.empty or not base:
        return {}
    ok = df["ok"].fillna(False).astype(bool) if "ok" in df else pd.Series(False, index=df.index)
    good = ok.copy()
    met: dict[str, float] = {}
    pct: dict[str, float] = {}
    for term, bound in search.slo.items():
        col = SLO_FIELDS[term]
        vals = pd.to_numeric(df[col], errors="coerce") if col in df else pd.Series(np.nan, index=df.index)
        within = vals.le(bound / 1000.0)
        if term == "tpot_ms" and "completion_tokens" in df:  # a one-token answer meets a TPOT bound
            within |= pd.to_numeric(df["completion_tokens"], errors="coerce").le(1)
        met[term] = float((ok & within).sum()) / base
        good &= within
        if search.percentile is not None and ok.any():
            okvals = vals[ok].dropna()
            if len(okvals):
                pct[term] = float(okvals.quantile(search.percentile / 100.0)) * 1000.0
    span = None
    if "scheduled_mono" in df and "done_mono" in df:
        start = pd.to_numeric(df["scheduled_mono"], errors="coerce").min()
        end = pd.to_numeric(df["done_mono"], errors="coerce").max()
        span = float(end - start) if pd.notna(start) and pd.notna(end) and end > start else None
    ttft = pd.to_numeric(df.loc[ok, "ttft_s"], errors="coerce").dropna() if "ttft_s" in df else pd.Series()
    growth = None
    if len(ttft) >= MIN_QUEUE_ROWS:
        order = df.loc[ttft.index, "scheduled_mono"] if "scheduled_mono" in df else None
        seq = ttft.loc[order.sort_values().index] if order is not None else ttft
        quarter = max(len(seq) // 4, 1)
        first, last = float(seq.iloc[:quarter].median()), float(seq.iloc[-quarter:].median())
        growth = last / first if first > 0 else None
    return {
        "goodput": float(good.sum()) / base,
        "met": met,
        "pct": pct,
        "rps": float(ok.sum()) / span if span else None,
        "ttft": float(ttft.median()) if len(ttft) else None,
        "growth": growth,
    }


def measure_probe(value: float, seeds: Sequence[SeedRun], search: SearchSpec) -> Probe:
    """A probe's figures, median over its seeds; a seed not ok makes the probe failed with its reason."""
    probe = Probe(value=value)
    bad = next((s for s in seeds if s.status != "ok"), None)
    if not seeds or bad is not None:
        probe.status = "failed"
        probe.reason = (
            f"point {bad.status}: {bad.failure or 'no reason given'}" if bad else "no seed was recorded"
        )
        return probe
    figs = [f for s in seeds if (f := _seed_figures(s, search))]
    if not figs:
        probe.status, probe.reason = "failed", "no request was recorded"
        return probe
    probe.goodput = _median([f["goodput"] for f in figs])
    probe.requests_per_s = _median([f["rps"] for f in figs])
    probe.ttft_p50_s = _median([f["ttft"] for f in figs])
    probe.queue_growth = _median([f["growth"] for f in figs])
    for term in search.slo:
        m = _median([f["met"].get(term) for f in figs])
        if m is not None:
            probe.met[term] = m
        p = _median([f["pct"].get(term) for f in figs])
        if p is not None:
            probe.at_percentile[term] = p
    if probe.met:
        probe.limiting = min(probe.met, key=lambda t: (probe.met[t], list(search.slo).index(t)))
    return probe


def judge(probe: Probe, below: Probe | None, search: SearchSpec) -> Probe:
    """pass, over, or saturated against the nearest lower passing probe (`below`); failed stays failed."""
    if probe.status == "failed":
        return probe
    if (
        search.knob in ("request_rate", "speedup")  # an open loop
        and probe.queue_growth is not None
        and probe.queue_growth >= QUEUE_GROWTH
    ):
        probe.status = "saturated"
        probe.reason = (
            f"the queue never drained: TTFT p50 of the last quarter of requests was "
            f"{probe.queue_growth:.1f}x the first quarter's"
        )
        return probe
    # agents think between requests and replay a fixed set of draws: their throughput follows the trace's
    # gaps, not the server, so the agents ramp is judged by its SLO alone
    if below is not None and search.knob != "agents" and _plateau(probe, below):
        assert probe.requests_per_s is not None and below.requests_per_s is not None
        probe.status = "saturated"
        probe.reason = (
            f"throughput stopped rising ({below.requests_per_s:.3g} -> {probe.requests_per_s:.3g} req/s "
            f"from {below.value:g} to {probe.value:g}) while TTFT p50 climbed "
            f"({_ms(below.ttft_p50_s)} -> {_ms(probe.ttft_p50_s)})"
        )
        return probe
    short = []
    if probe.goodput is None or probe.goodput < search.goodput:
        short.append(f"goodput {_frac(probe.goodput)} < {search.goodput:g}")
    for term, at in probe.at_percentile.items():
        if at > search.slo[term]:
            short.append(f"p{search.percentile:g} {term} {at:.0f} > {search.slo[term]:g}")
            if probe.met.get(term, 1.0) >= search.goodput:
                probe.limiting = term
    if short:
        probe.status = "over"
        probe.reason = "; ".join(short) + (f" (limiting: {probe.limiting})" if probe.limiting else "")
    return probe


def _plateau(probe: Probe, below: Probe) -> bool:
    a, b = below.requests_per_s, probe.requests_per_s
    ta, tb = below.ttft_p50_s, probe.ttft_p50_s
    if a is None or b is None or ta is None or tb is None or a <= 0 or ta <= 0:
        return False
    return b < a * (1 + SATURATION_GAIN) and tb > ta * (1 + SATURATION_CLIMB)


def _ms(s: float | None) -> str:
    return "?" if s is None else f"{s * 1000:.0f} ms"


def _frac(x: float | None) -> str:
    return "none" if x is None else f"{x:.3g}"


def replay(search: SearchSpec, measured: dict[float, Probe]) -> tuple[dict[float, Probe], float | None]:
    """The search walked over the probes measured so far: each judged, in the order the search asked for
    it; while expanding, saturation against the last pass (bisecting, the ceiling is already known);
    (judged, the next value to probe or None)."""
    judged: dict[float, Probe] = {}
    while (v := next_value(search, judged)) is not None:
        m = measured.get(v)
        if m is None:
            return judged, v
        lower = [p for p in judged.values() if p.status == "pass" and p.value < v]
        below = max(lower, key=lambda p: p.value, default=None)
        expanding = below is None or v == _grow(below.value, search)  # bisecting: the ceiling is known
        judged[v] = judge(dataclasses.replace(m), below if expanding else None, search)
    return judged, None


def _grow(v: float, search: SearchSpec) -> float:
    return min(max(v * 2, v + 1) if search.integer else v * 2, search.hi)


def _between(a: float, b: float, search: SearchSpec) -> float | None:
    """The bracket's midpoint, or None when it is closed (adjacent integers, or within 5% for a rate)."""
    if search.integer:
        return float((int(a) + int(b)) // 2) if int(b) - int(a) > 1 else None
    if b - a <= RATE_RESOLUTION * a:
        return None
    return float(f"{(a + b) / 2:.3g}")  # names a point folder: three significant digits


def next_value(search: SearchSpec, judged: dict[float, Probe]) -> float | None:
    """The next value to probe given those judged so far; None when the search is over."""
    v, last_pass = search.lo, None
    while True:
        p = judged.get(v)
        if p is None:
            return v
        if p.status != "pass":
            ceiling = v
            break
        last_pass = v
        if v >= search.hi:
            return None
        v = _grow(v, search)
    if last_pass is None:
        return None
    lo, hi = last_pass, ceiling
    while (mid := _between(lo, hi, search)) is not None:
        p = judged.get(mid)
        if p is None:
            return mid
        lo, hi = (mid, hi) if p.status == "pass" else (lo, mid)
    return None


def _expansion_end(search: SearchSpec, judged: dict[float, Probe]) -> Probe | None:
    """The probe that ended the doubling (the first of lo, 2 lo, ... that did not pass), if any."""
    v = search.lo
    while (p := judged.get(v)) is not None:
        if p.status != "pass":
            return p
        if v >= search.hi:
            return None
        v = _grow(v, search)
    return None


def search_result(search: SearchSpec, judged: dict[float, Probe]) -> dict[str, Any]:
    """{knob, best, above, probes, limiting, stopped, complete, target}: best is the largest passing value
    below every probe that did not pass (None when lo itself did not); above, that lowest non-passing
    probe: the answer lies between the two."""
    probes = [judged[v] for v in sorted(judged)]
    ceiling = next((p for p in probes if p.status != "pass"), None)
    passed = [p for p in probes if p.status == "pass" and (ceiling is None or p.value < ceiling.value)]
    best = passed[-1].value if passed else None
    complete = next_value(search, judged) is None
    if ceiling is None:
        stopped = f"hi ({search.hi:g}) met the target" if best == search.hi else "not finished"
    elif ceiling.status == "over":
        stopped = f"over the SLO at {ceiling.value:g}: {ceiling.reason}"
    else:
        stopped = f"{ceiling.status} at {ceiling.value:g}: {ceiling.reason}"
    if best is None and ceiling is not None and ceiling.value == search.lo:
        stopped = f"lo ({search.lo:g}) already did not pass: {ceiling.status}: {ceiling.reason}"
    up = _expansion_end(search, judged)
    if up is not None and ceiling is not None and up is not ceiling:  # what ended the climb, too
        stopped += f"; the climb ended at {up.value:g}: {up.status}: {up.reason}"
    return {
        "knob": search.knob,
        "best": None if best is None else search.label(best),
        "above": None if ceiling is None else search.label(ceiling.value),
        "probes": [p.to_dict() for p in probes],
        "limiting": ceiling.limiting if ceiling is not None else None,
        "stopped": stopped if complete else f"not finished; so far: {stopped}",
        "complete": complete,
        "target": {
            "slo": dict(search.slo),
            "goodput": search.goodput,
            **({"percentile": search.percentile} if search.percentile is not None else {}),
        },
    }


def seed_run(point: dict[str, Any] | None, rows: list[dict[str, Any]]) -> SeedRun:
    """A seed as its point.json and measured request rows have it (missing point.json: status missing)."""
    p = point or {}
    n = p.get("requests_scheduled")
    base = int(n) - int(p.get("requests_not_sent") or 0) if isinstance(n, int) else None
    failure = p.get("failure")
    return SeedRun(str(p.get("status", "missing")), str(failure) if failure else None, rows, base)


def server_search(search: SearchSpec, seeds: Iterable[Any]) -> SearchResult:
    """The search's result from one server's point folders (harness.summarize.read's SeedCapture)."""
    by_value: dict[float, list[Any]] = {}
    for sc in seeds:
        v = sc.sweep.get(search.knob) if isinstance(sc.sweep, dict) and len(sc.sweep) == 1 else None
        if isinstance(v, int | float) and not isinstance(v, bool):
            by_value.setdefault(float(v), []).append(sc)
    measured = {
        v: measure_probe(v, [seed_run(sc.point, sc.requests) for sc in scs], search)
        for v, scs in by_value.items()
    }
    return SearchResult.model_validate(search_result(search, replay(search, measured)[0]))
