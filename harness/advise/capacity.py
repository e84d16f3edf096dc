"""Capacity at an SLO: the highest load one replica of a candidate serves, and the replicas a load needs.

Both are found by replays at load through the sim's scheduler (harness.whatif.serve.engine), never by
dividing: a host tier changes the hit rate with the load, and the queue is not linear in it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Tried:
    """One replay of the search: the offered load, whether it met the SLO, and what it measured."""

    rps: float  # offered requests/s
    scale: float  # the load knob: a trace's speedup, or requests in flight, or a Poisson rate
    replicas: int
    meets: bool
    overloaded: bool
    attainment: float  # share of requests within every per-request bound
    figures: dict[str, float]  # each SLO bound's percentile, ms
    hit_rate: float
    stopped: bool = False  # given up once the SLO had failed: figures and hit rate over what finished

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Capacity:
    """The highest offered load one replica meets the SLO at (None: not even the lowest tried)."""

    rps: float | None
    input_tokens_per_s: float | None
    hit_rate: float | None
    tried: tuple[Tried, ...] = field(default=())
    scale: float | None = None  # the load knob there: agents or requests in flight for a closed loop
    low_rps: float | None = None  # the card physics' error band around rps (docs/advise.md#physics)
    high_rps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rps": self.rps,
            "input_tokens_per_s": self.input_tokens_per_s,
            "hit_rate": self.hit_rate,
            "range_rps": None if self.low_rps is None else [self.low_rps, self.high_rps],
            "scale": self.scale,
            "tried": [t.to_dict() for t in self.tried],
        }


# the search's bounds: the load factor moves within [1/MAX_FACTOR, MAX_FACTOR] x the input's, by doubling,
# then BISECT geometric steps between the last load that met the SLO and the first that did not
MAX_FACTOR = 64.0
BISECT = 4


def search(
    probe: Callable[[float], Tried], max_factor: float = MAX_FACTOR, steps: int = BISECT
) -> list[Tried]:
    """Probes of the load factor f (x the input's load) until the highest f that serves is bracketed to
    2^(1/2^steps): doubling from f = 1 while it serves, halving while it does not, then bisection in log
    space. Every probe is returned; `highest` reads the answer."""
    tried: list[Tried] = []

    def ok(f: float) -> bool:
        t = probe(f)
        tried.append(t)
        return serves(t)

    lo: float | None
    hi: float | None
    if ok(1.0):
        lo, hi = 1.0, None
        while hi is None and lo < max_factor:
            up = min(lo * 2, max_factor)  # the cap itself is the last load tried
            if ok(up):
                lo = up
            else:
                hi = up
    else:
        lo, hi = None, 1.0
        while lo is None and hi / 2 >= 1 / MAX_FACTOR:
            if ok(hi / 2):
                lo = hi / 2
            else:
                hi /= 2
    if lo is None or hi is None:
        return tried  # nothing served, or everything up to the cap did
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return tried


def serves(t: Tried) -> bool:
    """A probe serves its load when it meets the SLO and its queue does not grow."""
    return t.meets and not t.overloaded


def highest(tried: Sequence[Tried], tokens_per_request: float) -> Capacity:
    """The capacity the probes found: the highest serving load (None when none served)."""
    ok = [t for t in tried if serves(t)]
    if not ok:
        return Capacity(None, None, None, tuple(tried))
    best = max(ok, key=lambda t: t.scale)  # the knob moves the load: speedup, rate or agents
    ordered = tuple(sorted(tried, key=lambda t: t.scale))
    return Capacity(best.rps, best.rps * tokens_per_request, best.hit_rate, ordered, best.scale)


def fewest_replicas(probe: Callable[[int], Tried], guess: int, most: int) -> tuple[int | None, list[Tried]]:
    """The fewest replicas (1..most) that serve the load: from `guess` down while it serves, else up."""
    tried: list[Tried] = []
    seen: dict[int, bool] = {}

    def ok(n: int) -> bool:
        if n not in seen:
            t = probe(n)
            tried.append(t)
            seen[n] = serves(t)
        return seen[n]

    n = min(max(guess, 1), most)
    if ok(n):
        while n > 1 and ok(n - 1):
            n -= 1
        return n, tried
    while n < most:
        n += 1
        if ok(n):
            return n, tried
    return None, tried


def overloaded(arrivals: Sequence[float], ttft_s: Sequence[float]) -> bool:
    """The queue grew over the replay: more than max(5 %, 5) of the requests get their first token only
    after the last request arrived (a load the replica keeps up with leaves a handful in flight there)."""
    if not arrivals:
        return False
    last = max(arrivals)
    late = sum(1 for a, t in zip(arrivals, ttft_s, strict=True) if t != t or a + t > last)
    return late > max(0.05 * len(arrivals), 5)
