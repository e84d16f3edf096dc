"""Modelled TTFT, throughput and goodput of one replayed configuration, from the card x model physics.

Per request at concurrency 1: TTFT = prefill overhead + prefill of the uncached part after the cached
part + the host part's load-back (harness.sim.timing.CardProfile, as `harness whatif`'s sequential
replay costs it); each output token one batch-1 decode step over the growing context. A request's host
share of its hit is the configuration's overall host share (the replay counts host hits in total only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.advise.slo import Slo
from harness.sim.timing import CardProfile
from harness.whatif.replay import Result
from harness.whatif.trace import Trace, TraceRequest


@dataclass(frozen=True)
class Modelled:
    ttft_ms: dict[str, float]  # mean, p50, p99
    throughput_rps: float  # requests per second of modelled service time (one at a time)
    output_tps: float
    goodput_rps: float | None  # requests meeting the SLO per second; None without --slo
    slo_attained: float | None

    def to_dict(self) -> dict:
        return {
            "ttft_ms": {k: round(v, 3) for k, v in self.ttft_ms.items()},
            "throughput_rps": round(self.throughput_rps, 4),
            "output_tokens_per_s": round(self.output_tps, 2),
            "goodput_rps": None if self.goodput_rps is None else round(self.goodput_rps, 4),
            "slo_attained": None if self.slo_attained is None else round(self.slo_attained, 6),
        }


@dataclass(frozen=True)
class _Fixed:
    """What `model` needs of a trace that no replay changes, worked out once per trace and process."""

    tokens: np.ndarray  # int64: each prompt in tokens
    out: np.ndarray  # int64: each answer, at least 1 token
    tpot: np.ndarray  # each request's batch-1 decode step over its mean context
    out_tokens: int


_FIXED: tuple[tuple[TraceRequest, ...], CardProfile, _Fixed] | None = None


def _fixed(trace: Trace, profile: CardProfile) -> _Fixed:
    """The trace's fixed part, kept for the next configuration (the grid models ~30 over one trace)."""
    global _FIXED
    reqs = tuple(trace.requests)
    last = _FIXED
    if last is not None and last[1] is profile and last[0] == reqs:
        return last[2]
    tokens = np.fromiter((r.tokens for r in reqs), dtype=np.int64, count=len(reqs))
    out = np.fromiter((max(r.output_tokens, 1) for r in reqs), dtype=np.int64, count=len(reqs))
    tpot = np.fromiter(
        (profile.decode_time(1, t + o // 2) for t, o in zip(tokens.tolist(), out.tolist(), strict=True)),
        dtype=np.float64,
        count=len(reqs),
    )  # the mean context over the answer
    fixed = _Fixed(tokens, out, tpot, sum(out.tolist()))
    _FIXED = (reqs, profile, fixed)
    return fixed


def model(trace: Trace, res: Result, profile: CardProfile, slo: Slo | None = None) -> Modelled:
    host_share = res.host_hit_tokens / res.hit_tokens if res.hit_tokens else 0.0
    n = len(trace.requests)
    f = _fixed(trace, profile)
    # per request, as arrays: the same float operations in the same order as one request at a time
    cached = np.minimum(np.asarray(res.cached_per_request, dtype=np.int64).reshape(n), f.tokens)
    ttft = profile.prefill_overhead_s + profile.prefill_times(f.tokens - cached, cached)
    ttft = ttft + profile.load_back_times((cached * host_share).astype(np.int64))
    tpot = f.tpot
    busy = 0.0
    for x in (ttft + tpot * (f.out - 1)).tolist():  # summed in request order, as before
        busy += x
    out_tokens = f.out_tokens
    p50, p99 = np.percentile(ttft * 1e3, [50, 99]) if n else (0.0, 0.0)
    mean = float(ttft.mean() * 1e3) if n else 0.0
    rps = n / busy if busy else 0.0
    goodput = attained = None
    if slo is not None and (slo.ttft_ms is not None or slo.tpot_ms is not None):
        ok = np.ones(n, dtype=bool)
        if slo.ttft_ms is not None:
            ok &= ttft * 1e3 <= slo.ttft_ms
        if slo.tpot_ms is not None:
            ok &= tpot * 1e3 <= slo.tpot_ms
        attained = float(ok.mean()) if n else 0.0
        goodput = rps * attained
    return Modelled(
        {"mean": mean, "p50": float(p50), "p99": float(p99)},
        rps,
        out_tokens / busy if busy else 0.0,
        goodput,
        attained,
    )


def service_times(trace: Trace, profile: CardProfile) -> list[float]:
    """Each request's modelled service with nothing cached: the clock of an input without timestamps."""
    return [
        profile.prefill_overhead_s
        + profile.prefill_time(r.tokens, 0)
        + profile.decode_time(1, r.tokens) * max(r.output_tokens, 1)
        for r in trace.requests
    ]
