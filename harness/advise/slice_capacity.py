"""The predicted capacity of one configuration on the confirm's slice, for `--confirm-capacity` to compare
with bench's measured search: engine replays (harness.whatif.serve.engine) of the slice as sent, the load's
knob doubled or halved from the load's own value until the SLO flips, then bisected to 5 %.

A probe is judged as bench's search judges a live one (harness.summarize.capacity): the SLO's TTFT bound
as a goodput at its percentile and that percentile (as_bench_judges), and for an open loop a queue that
never drained (the last quarter's TTFT p50 3x the first quarter's) fails it. Kept apart so advise's own
capacity search can take its place.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from harness.advise.capacity import Tried
from harness.advise.confirm_load import loaded
from harness.advise.load import Load
from harness.advise.slo import Slo
from harness.sim.timing import CardProfile
from harness.summarize.capacity import MIN_QUEUE_ROWS, QUEUE_GROWTH, RATE_RESOLUTION
from harness.whatif.grid import Config
from harness.whatif.trace import Trace

MAX_STEPS = 12  # doublings or halvings before the search gives up on a side


@dataclass(frozen=True)
class Knob:
    """The load's knob as bench's `search:` names it, and how a value of it is an offered req/s."""

    name: str  # speedup | request_rate | concurrency
    base: float  # the load's own value: where the search starts
    requests: int
    span_s: float  # the slice's first to last arrival at speedup 1 (a trace)

    @property
    def integer(self) -> bool:
        return self.name == "concurrency"

    def load(self, v: float) -> Load:
        if self.name == "speedup":
            return Load("trace", speedup=v, offered_rps=self.rps(v), span_s=self.span_s / v)
        if self.name == "request_rate":
            return Load("rate", rate=v)
        return Load("concurrency", concurrency=int(v))

    def rps(self, v: float, makespan_s: float | None = None) -> float:
        """Offered req/s at `v` (closed loop: the requests over the makespan)."""
        if self.name == "speedup":
            return self.requests * v / self.span_s
        if self.name == "request_rate":
            return v
        return self.requests / makespan_s if makespan_s else 0.0


def knob_of(load: Load, trace: Trace) -> Knob:
    """The knob that moves `load`: a trace's speedup, a Poisson rate, or requests in flight."""
    arrivals = [r.arrival for r in trace.requests]
    span = max(arrivals) - min(arrivals) if arrivals else 0.0
    if load.kind == "trace" and span > 0:
        return Knob("speedup", load.speedup, len(arrivals), span)
    if load.kind == "rate" and load.rate:
        return Knob("request_rate", load.rate, len(arrivals), span)
    return Knob("concurrency", float(load.concurrency or 1), len(arrivals), span)


def queue_growth(ttft_s: list[float]) -> float | None:
    """The last quarter's TTFT p50 over the first quarter's, in send order (bench's saturation rule)."""
    ok = [t for t in ttft_s if t == t]
    if len(ok) < MIN_QUEUE_ROWS:
        return None
    q = max(len(ok) // 4, 1)
    first, last = statistics.median(ok[:q]), statistics.median(ok[-q:])
    return last / first if first > 0 else None


def probe(trace: Trace, cfg: Config, knob: Knob, v: float, profile: CardProfile, slo: Slo) -> Tried:
    """One engine replay of the slice at knob value `v`, judged."""
    from harness.whatif.replay import ideal_hits
    from harness.whatif.serve import engine

    t = loaded(trace, knob.load(v))
    got = engine(t, cfg, ideal_hits(t, cfg.page_size), profile)
    growth = queue_growth(got.ttft_s) if knob.name != "concurrency" else None
    overloaded = growth is not None and growth >= QUEUE_GROWTH
    meets = as_bench_judges(slo, got.ttft_s) and not overloaded
    return Tried(
        knob.rps(v, got.makespan_s),
        v,
        1,
        meets,
        overloaded,
        slo.attainment(got.ttft_s),
        slo.figures(got.ttft_s),
        got.result.hit_rate,
    )


def as_bench_judges(slo: Slo, ttft_s: list[float]) -> bool:
    """The TTFT bound as bench's search judges a probe (harness.summarize.capacity): the share of requests
    within it (no answer: missed) at least the bound's percentile, and that percentile of the answered
    ones (linear, as pandas takes it) within it."""
    import numpy as np

    b = next(x for x in slo.capacity_bounds() if x.metric == "ttft")
    xs = np.asarray(ttft_s, dtype=float)
    ok = xs[~np.isnan(xs)]
    if not len(xs) or not len(ok):
        return False
    within = float((ok * 1000.0 <= b.ms).sum()) / len(xs)
    return within >= b.percentile / 100.0 and float(np.percentile(ok, b.percentile)) * 1000.0 <= b.ms


def _mid(a: float, b: float, integer: bool) -> float | None:
    if integer:
        return float((int(a) + int(b)) // 2) if int(b) - int(a) > 1 else None
    return None if b - a <= RATE_RESOLUTION * a else (a + b) / 2


def predicted_capacity(
    trace: Trace, cfg: Config, load: Load, profile: CardProfile, slo: Slo
) -> tuple[Knob, Tried | None, list[Tried]]:
    """(the knob, the highest probe that met the SLO or None, every probe in the order tried)."""
    knob = knob_of(load, trace)
    tried: list[Tried] = []

    def run(v: float) -> Tried:
        tried.append(probe(trace, cfg, knob, v, profile, slo))
        return tried[-1]

    v = knob.base
    first = run(v)
    good: Tried | None = first if first.meets else None
    bad: Tried | None = None if first.meets else first
    for _ in range(MAX_STEPS):
        if good is not None and bad is not None:
            break
        v = v * 2 if bad is None else (math.floor(v / 2) if knob.integer else v / 2)
        if v < 1 and knob.integer:
            break
        got = run(v)
        good, bad = (got, bad) if got.meets else (good, got)
    if good is None:
        return knob, None, tried
    while bad is not None and (m := _mid(good.scale, bad.scale, knob.integer)) is not None:
        got = run(m)
        good, bad = (got, bad) if got.meets else (good, got)
    return knob, good, tried
