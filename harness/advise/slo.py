"""The service-level objective advise sizes for: per-request bounds (goodput) and percentile bounds (capacity).

`--slo ttft_ms=N,tpot_ms=M` bounds each request (a request meets it or not: goodput, attainment);
`ttft_p90_ms=N`, `tpot_p99_ms=M` bound a percentile of a replay (capacity, GPUs needed). A capacity
question with no percentile bound reads a per-request TTFT bound as its p90 (the share the default
allows to miss), and with no TTFT bound at all takes the default, TTFT p90 <= 2 s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.errors import HarnessError

METRICS = ("ttft", "tpot")
DEFAULT_PERCENTILE = 90.0
DEFAULT_TTFT_MS = 2000.0
_FORM = re.compile(r"^(ttft|tpot)(?:_p(\d+(?:\.\d+)?))?_ms$")


@dataclass(frozen=True)
class Bound:
    """One percentile bound: `metric`'s p`percentile` at most `ms`."""

    metric: str  # ttft | tpot
    percentile: float
    ms: float

    def describe(self) -> str:
        return f"{self.metric.upper()} p{self.percentile:g} <= {_ms(self.ms)}"


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None  # per request: goodput and attainment
    tpot_ms: float | None = None
    bounds: tuple[Bound, ...] = field(default=())  # percentile forms: capacity

    def capacity_bounds(self) -> tuple[Bound, ...]:
        """What a replay must meet to count as serving its load (see the module docstring)."""
        out = list(self.bounds)
        if not any(b.metric == "ttft" for b in out):
            out.insert(0, Bound("ttft", DEFAULT_PERCENTILE, self.ttft_ms or DEFAULT_TTFT_MS))
        if self.tpot_ms is not None and not any(b.metric == "tpot" for b in out):
            out.append(Bound("tpot", DEFAULT_PERCENTILE, self.tpot_ms))
        return tuple(out)

    def ttft_bound(self) -> Bound:
        """The TTFT percentile bound capacity is judged by (there is always one)."""
        return next(b for b in self.capacity_bounds() if b.metric == "ttft")

    def describe(self) -> str:
        """The capacity SLO in words, as every output states it."""
        return ", ".join(b.describe() for b in self.capacity_bounds())

    def per_request(self) -> dict[str, float]:
        """Each request's own bounds in ms (the percentile bounds' thresholds where none is given)."""
        out = {b.metric: b.ms for b in self.capacity_bounds()}
        if self.ttft_ms is not None:
            out["ttft"] = self.ttft_ms
        if self.tpot_ms is not None:
            out["tpot"] = self.tpot_ms
        return out

    def figures(self, ttft_s: Sequence[float], tpot_s: Sequence[float] | None = None) -> dict[str, float]:
        """Each bound's percentile of a replay, ms (nan: a request with no answer counts as infinite)."""
        import numpy as np

        out: dict[str, float] = {}
        for b in self.capacity_bounds():
            xs = ttft_s if b.metric == "ttft" else tpot_s
            if not xs:
                continue
            arr = np.asarray([x if x == x else math.inf for x in xs], dtype=float) * 1e3
            out[b.describe()] = float(np.percentile(arr, b.percentile, method="inverted_cdf"))
        return out

    def meets(self, ttft_s: Sequence[float], tpot_s: Sequence[float] | None = None) -> bool:
        """Every capacity bound holds on this replay (a bound with no figures, e.g. TPOT of no decode, holds)."""
        got = self.figures(ttft_s, tpot_s)
        return all(got.get(b.describe(), 0.0) <= b.ms for b in self.capacity_bounds())

    def attainment(self, ttft_s: Sequence[float], tpot_s: Sequence[float] | None = None) -> float:
        """The share of requests within every per-request bound (no answer: missed)."""
        lim = self.per_request()
        n = len(ttft_s)
        if not n:
            return 0.0
        ok = 0
        for i, t in enumerate(ttft_s):
            good = t == t and t * 1e3 <= lim.get("ttft", math.inf)
            if good and tpot_s is not None and "tpot" in lim and i < len(tpot_s):
                p = tpot_s[i]
                good = p != p or p * 1e3 <= lim["tpot"]  # no decode step: no TPOT to miss
            ok += good
        return ok / n

    def to_dict(self) -> dict[str, Any]:
        return {
            "ttft_ms": self.ttft_ms,
            "tpot_ms": self.tpot_ms,
            "bounds": [
                {"metric": b.metric, "percentile": b.percentile, "ms": b.ms} for b in self.capacity_bounds()
            ],
            "describe": self.describe(),
        }


DEFAULT_SLO = Slo()
AGENTS_SLO = Slo(bounds=(Bound("ttft", 95.0, DEFAULT_TTFT_MS),))  # kv-cache-tester's ramp: TTFT p95 <= 2 s


def parse_slo(text: str | None, flag: str = "--slo") -> Slo | None:
    """`ttft_ms=N,tpot_ms=M,ttft_p90_ms=N,...` -> Slo; one line naming the part that is wrong."""
    if not text:
        return None
    per: dict[str, float] = {}
    bounds: dict[str, Bound] = {}
    for part in text.split(","):
        key, eq, val = part.partition("=")
        key = key.strip()
        m = _FORM.match(key)
        if m is None or not eq:
            raise HarnessError(
                f"{flag}: {part!r}: expected ttft_ms=N, tpot_ms=N or a percentile form (ttft_p90_ms=N, tpot_p99_ms=N)"
            )
        try:
            v = float(val)
        except ValueError:
            raise HarnessError(f"{flag}: {key}: bad value {val!r}") from None
        if not v > 0 or math.isinf(v):
            raise HarnessError(f"{flag}: {key}: {val} must be a positive number of ms")
        metric, pct = m.group(1), m.group(2)
        if pct is None:
            per[metric] = v
            continue
        p = float(pct)
        if not 0 < p <= 100:
            raise HarnessError(f"{flag}: {key}: percentile {pct} must be in (0, 100]")
        if metric in bounds:
            raise HarnessError(f"{flag}: {key}: a second percentile bound on {metric} (one a metric)")
        bounds[metric] = Bound(metric, p, v)
    return Slo(per.get("ttft"), per.get("tpot"), tuple(bounds[k] for k in METRICS if k in bounds))


def _ms(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 and ms % 100 == 0 else f"{ms:g} ms"
