"""What a real server holds the harness to: client vs server timing, cached-token agreement, cache behaviour.

Input is the request records of a run (rows of requests.jsonl); llama.cpp's per-request `timings`
sit in `server_timings`. Every figure is recomputed from those rows, nothing is taken on trust.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

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


def _ratio(cached: float, prompt: float) -> float | None:
    return cached / prompt if prompt > 0 else None


def check_records(rows: Iterable[dict[str, Any]]) -> RealChecks:
    """All checks over one run's records (ok requests only; failures are counted, not judged)."""
    rows = list(rows)
    ok = [r for r in rows if r.get("ok")]
    res = RealChecks(requests=len(rows), ok=len(ok), with_timings=0)
    gaps: list[float] = []
    ttfts: list[float] = []
    prompt_mss: list[float] = []
    tot = {"usage_cached": 0.0, "usage_prompt": 0.0, "t_cached": 0.0, "t_prompt": 0.0}
    by_pos: dict[int, list[float]] = {}
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
        tot["usage_cached"] += cached or 0.0
        tot["usage_prompt"] += prompt or 0.0
        tot["t_cached"] += cache_n
        tot["t_prompt"] += cache_n + prompt_n
        pos = r.get("position")
        if isinstance(pos, int) and prompt:
            acc = by_pos.setdefault(pos, [0.0, 0.0])
            acc[0] += cached or 0.0
            acc[1] += prompt
    if gaps:
        arr = np.asarray(gaps)
        res.gap_ms_median = float(np.median(arr))
        res.gap_ms_p90 = float(np.quantile(arr, 0.9))
        res.gap_ms_min = float(arr.min())
        res.ttft_sent_ms_median = float(np.median(ttfts))
    if prompt_mss:
        res.prompt_ms_median = float(np.median(prompt_mss))
    res.hit_rate_usage = _ratio(tot["usage_cached"], tot["usage_prompt"])
    res.hit_rate_timings = _ratio(tot["t_cached"], tot["t_prompt"])
    res.hit_rate_by_position = {str(p): _ratio(c, n) for p, (c, n) in sorted(by_pos.items())}
    first = by_pos.get(0)
    later = [v for p, v in by_pos.items() if p >= 1]
    res.hit_rate_usage_first = _ratio(*first) if first else None
    if later:
        res.hit_rate_usage_later = _ratio(sum(c for c, _ in later), sum(n for _, n in later))
    return res
