"""The spec's `search:` mapping: which knob a capacity search moves, its range, the SLO and goodput target.

Parsed here so a bad search is one SpecError line (file, key, value) before any server is touched; the
search itself (which value to probe next, what a probe means) is harness.summarize.capacity, driven
through ordinary points by harness.sweep.search.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.errors import SpecError
from harness.spec.checks import no_unknown, pos_float, pos_int, tname
from harness.spec.load import SLO_KEYS

# speedup: a trace at its own times / s; agents: an agentic trace's agents at once (the agents ramp)
KNOBS = ("concurrency", "request_rate", "sessions", "speedup", "agents")
# the agents ramp's SLO when the spec names none: TTFT p95 <= 2 s (issue 59, advise's SLO forms)
AGENTS_SLO = {"ttft_ms": 2000.0, "percentile": 95.0}
SEARCH_KEYS = {"knob", "lo", "hi", "slo", "goodput"}


@dataclass(frozen=True)
class SearchSpec:
    """A capacity search: the largest `knob` in [lo, hi] whose probe meets the SLO at the goodput target."""

    knob: str
    lo: float
    hi: float
    slo: dict[str, float]  # subset of SLO_KEYS -> bound in ms
    goodput: float = 0.9  # the fraction of scheduled requests that must finish ok within every bound
    percentile: float | None = None  # with it, each term's percentile must also be within its bound

    @property
    def integer(self) -> bool:
        """Concurrency and sessions are counts: the search ends on adjacent integers."""
        return self.knob not in ("request_rate", "speedup")

    def label(self, value: float) -> int | float:
        """The value as a point's sweep names it: an int for counts, the rate as given."""
        return int(value) if self.integer else float(value)


def parse_search(
    v: Any, f: str, workload_kind: str, sweep: dict[str, Any], fmt: str | None = None
) -> SearchSpec | None:
    """`search:` checked: the knob the workload has, lo <= hi, an SLO with at least one term (the agents
    knob's default: AGENTS_SLO). fmt: a trace workload's format (agents need agentic)."""
    if v is None:
        return None
    if not isinstance(v, dict):
        raise SpecError(f, "search", f"expected a mapping with knob, lo, hi, slo, got {tname(v)}")
    no_unknown(v, SEARCH_KEYS, f, "search")
    if v.get("knob") == "agents" and "slo" not in v:
        v = {**v, "slo": AGENTS_SLO}
    for k in ("knob", "lo", "hi", "slo"):
        if k not in v:
            raise SpecError(f, f"search.{k}", "missing (required)")
    knob = v["knob"]
    if knob not in KNOBS:
        raise SpecError(f, "search.knob", f"expected one of {', '.join(KNOBS)}, got {knob!r}")
    if knob == "sessions" and workload_kind != "multi-turn":
        raise SpecError(
            f,
            "search.knob",
            f"sessions: the workload has none (it is {workload_kind}; sessions need multi-turn)",
        )
    if knob == "speedup" and workload_kind != "trace":
        raise SpecError(
            f,
            "search.knob",
            f"speedup: the workload has no arrival times (it is {workload_kind}; needs trace)",
        )
    if knob == "agents" and fmt != "agentic":
        raise SpecError(
            f,
            "search.knob",
            f"agents: the workload has none (needs kind trace, format agentic; got {fmt or workload_kind})",
        )
    if sweep:
        raise SpecError(
            f, "search", f"a search moves one knob; remove sweep ({', '.join(sweep)}) or the search"
        )
    if knob in ("request_rate", "speedup"):
        lo, hi = pos_float(v["lo"], f, "search.lo"), pos_float(v["hi"], f, "search.hi")
    else:
        lo, hi = float(pos_int(v["lo"], f, "search.lo")), float(pos_int(v["hi"], f, "search.hi"))
    if lo > hi:
        raise SpecError(f, "search.lo", f"expected lo <= hi, got lo {v['lo']!r} > hi {v['hi']!r}")
    slo, percentile = _slo(v["slo"], f)
    goodput = v.get("goodput", 0.9)
    if not isinstance(goodput, int | float) or isinstance(goodput, bool) or not 0 < goodput <= 1:
        raise SpecError(f, "search.goodput", f"expected a fraction in (0, 1], got {goodput!r}")
    return SearchSpec(knob, lo, hi, slo, float(goodput), percentile)


def _slo(v: Any, f: str) -> tuple[dict[str, float], float | None]:
    if not isinstance(v, dict):
        raise SpecError(
            f, "search.slo", f"expected a mapping of {', '.join(SLO_KEYS)}, percentile, got {v!r}"
        )
    no_unknown(v, {*SLO_KEYS, "percentile"}, f, "search.slo")
    terms = {k: pos_float(b, f, f"search.slo.{k}") for k, b in v.items() if k in SLO_KEYS}
    if not terms:
        raise SpecError(f, "search.slo", f"expected at least one of {', '.join(SLO_KEYS)}, got {v!r}")
    pct = v.get("percentile")
    if pct is not None and (not isinstance(pct, int | float) or isinstance(pct, bool) or not 0 < pct <= 100):
        raise SpecError(f, "search.slo.percentile", f"expected a percentile in (0, 100], got {pct!r}")
    return terms, None if pct is None else float(pct)
