"""What a real server holds the harness to: client vs server timing, cached-token agreement, cache behaviour.

Input is the request records of a run (rows of requests.jsonl); llama.cpp's per-request `timings`
sit in `server_timings`. The per-request checks are made here; hit rates come from the summarizer's own
figures (harness.summarize.figures.request_figures), so they are computed in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from harness.summarize.figures import request_figures

ROUNDING_MS = 1.0  # llama.cpp reports ms; allow for that much rounding between clocks


@dataclass
class RealChecks:
    requests: int
    ok: int
    with_timings: int
    # indexes of requests whose client TTFT (from send) is below the server's prompt_ms
    ttft_below_prompt_ms: list[int] = field(default_factory=list)
    ttft_sent_ms_median: float | None = None  # client TTFT from send
    prompt_ms_median: float | None = None  # the server's own prompt time
    gap_ms_median: float | None = (
        None  # client TTFT (from send) - server prompt_ms: queueing + transport + client
    )
    gap_ms_p90: float | None = None
    gap_ms_min: float | None = None
    cached_mismatch: list[int] = field(default_factory=list)  # usage cached_tokens != timings.cache_n
    prompt_mismatch: list[int] = field(default_factory=list)  # usage prompt_tokens != cache_n + prompt_n
    # from harness.summarize.figures.request_figures over the same records
    hit_rate_usage: float | None = None
    hit_rate_timings: float | None = None
    hit_rate_usage_first: float | None = None  # position 0: a group's first prompt / a session's first turn
    hit_rate_usage_later: float | None = None  # positions >= 1
    hit_rate_by_position: dict[str, float | None] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.problems()

    def problems(self) -> list[str]:
        """One line per broken promise; empty when the run holds up."""
        out = []
        if self.ok == 0 or self.with_timings < self.ok:
            out.append(f"{self.ok - self.with_timings} of {self.ok} ok requests lack server timings")
        if self.ttft_below_prompt_ms:
            out.append(f"client TTFT below server prompt_ms for requests {self.ttft_below_prompt_ms[:10]}")
        if self.cached_mismatch:
            out.append(f"usage cached_tokens != timings.cache_n for requests {self.cached_mismatch[:10]}")
        if self.prompt_mismatch:
            out.append(f"usage prompt_tokens != cache_n + prompt_n for requests {self.prompt_mismatch[:10]}")
        hu, ht = self.hit_rate_usage, self.hit_rate_timings
        if hu is not None and ht is not None and abs(hu - ht) > 1e-9:
            out.append(
                f"hit rate from usage {self.hit_rate_usage:.4f} != from timings {self.hit_rate_timings:.4f}"
            )
        return out

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["passed"] = self.passed
        d["problems"] = self.problems()
        return d


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def check_records(rows: Iterable[dict[str, Any]]) -> RealChecks:
    """All checks over one run's records (ok requests only; failures are counted, not judged)."""
    rows = list(rows)
    ok = [r for r in rows if r.get("ok")]
    res = RealChecks(requests=len(rows), ok=len(ok), with_timings=0)
    gaps: list[float] = []
    ttfts: list[float] = []
    prompt_mss: list[float] = []
    for r in ok:
        t = r.get("server_timings") or {}
        idx = int(r.get("index", -1))
        cache_n, prompt_n, prompt_ms = (
            _num(t.get("cache_n")),
            _num(t.get("prompt_n")),
            _num(t.get("prompt_ms")),
        )
        if cache_n is None or prompt_n is None or prompt_ms is None:
            continue
        res.with_timings += 1
        ttft = _num(r.get("ttft_sent_s"))
        prompt_mss.append(prompt_ms)
        if ttft is not None:
            ttfts.append(ttft * 1000.0)
            gap = ttft * 1000.0 - prompt_ms
            gaps.append(gap)
            if gap < -ROUNDING_MS:
                res.ttft_below_prompt_ms.append(idx)
        cached, prompt = _num(r.get("cached_tokens")), _num(r.get("prompt_tokens"))
        if cached != cache_n:
            res.cached_mismatch.append(idx)
        if prompt != cache_n + prompt_n:
            res.prompt_mismatch.append(idx)
    if gaps:
        arr = np.asarray(gaps)
        res.gap_ms_median = float(np.median(arr))
        res.gap_ms_p90 = float(np.quantile(arr, 0.9))
        res.gap_ms_min = float(arr.min())
        res.ttft_sent_ms_median = float(np.median(ttfts))
    if prompt_mss:
        res.prompt_ms_median = float(np.median(prompt_mss))
    figs = request_figures(ok)
    res.hit_rate_usage = figs.get("hit_rate_usage")
    res.hit_rate_timings = figs.get("hit_rate_timings")
    res.hit_rate_by_position = dict(figs.get("hit_rate_usage_by_position") or {})
    res.hit_rate_usage_first = res.hit_rate_by_position.get("0")
    later = [r for r in ok if isinstance(r.get("position"), int) and r["position"] >= 1]
    res.hit_rate_usage_later = request_figures(later).get("hit_rate_usage") if later else None
    return res
