"""The working set of an input, in the terms a pool is sized in: how much reused prefix must stay live.

`within[W]` is the most pages live at one moment when every reuse that comes back within W seconds is
kept from its previous touch to the reuse (a pool that size serves all of them under LRU at concurrency
1); `overall` counts every page ever reused. The rule serving engineers use: a host tier pays when the
5-minute working set exceeds the device pool and fits device + host; below the device pool it adds
nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harness.advise.curve import StackDistances
from harness.whatif.trace import Trace

WINDOWS_S = {"1m": 60.0, "5m": 300.0, "15m": 900.0}


@dataclass(frozen=True)
class WorkingSet:
    unit: int  # tokens per pool unit (block size for block traces)
    within: dict[str, int]  # window -> pool units live at the peak
    overall: int  # distinct pages reused at least once (pool units)
    distinct: int  # distinct pages ever cached
    reuse_distance: dict[str, int]  # token-weighted percentiles of the stack rank of every hit
    one_time_share: float  # requests that share no page with any other request
    one_time_token_share: float
    later_turns: int  # requests with an earlier turn of the same session
    unstable_turns: int  # of those, prompts that do not extend the previous prompt and answer
    unstable_examples: list[str] = field(default_factory=list)

    @property
    def unstable_share(self) -> float:
        return self.unstable_turns / self.later_turns if self.later_turns else 0.0

    def to_dict(self) -> dict:
        return {
            "unit_tokens": self.unit,
            "within": {k: {"pool_units": v, "tokens": v * self.unit} for k, v in self.within.items()},
            "overall": {"pool_units": self.overall, "tokens": self.overall * self.unit},
            "distinct_pages": self.distinct,
            "reuse_distance": self.reuse_distance,
            "one_time_share": round(self.one_time_share, 6),
            "one_time_token_share": round(self.one_time_token_share, 6),
            "prefix_stability": {
                "later_turns": self.later_turns,
                "unstable_turns": self.unstable_turns,
                "unstable_share": round(self.unstable_share, 6),
                "examples": self.unstable_examples,
            },
        }


def _peak_live(starts: np.ndarray, ends: np.ndarray) -> int:
    """Most intervals open at one request (request indices); a page's interval ending at the request where
    its next one starts counts once."""
    if not starts.size:
        return 0
    times = np.concatenate([starts, ends])
    delta = np.concatenate([np.ones(starts.size, np.int64), -np.ones(ends.size, np.int64)])
    order = np.lexsort((delta, times))  # ends (-1) before starts (+1) at one time
    return int(np.cumsum(delta[order]).max())


def clock(trace: Trace, service_s: list[float]) -> np.ndarray:
    """Each request's time: its arrival, or for an input without timestamps (specs, captures replayed
    closed-loop) the modelled service times summed at the input's concurrency."""
    arrivals = np.asarray([r.arrival for r in trace.requests], dtype=float)
    if arrivals.size and arrivals.max() > arrivals.min():
        return arrivals
    return np.cumsum(np.asarray(service_s, dtype=float)) / max(trace.concurrency or 1, 1)


def working_set(trace: Trace, sd: StackDistances, times: np.ndarray) -> WorkingSet:
    distinct = sd.distinct_pages
    last_time = [-1.0] * distinct
    last_req = [-1] * distinct
    reused_page = [False] * distinct
    gaps_start: list[int] = []  # request indices: the previous touch and the reuse
    gaps_end: list[int] = []
    gap_s: list[float] = []
    reused_req = np.zeros(len(trace.requests), dtype=bool)
    pages, start = sd.pages, 0
    clock_s = [float(t) for t in times.tolist()]
    # each request's pages as the curve's pass walked them (page_path over its cached key)
    for n, end in enumerate(sd.page_ends):
        t = clock_s[n]
        path = pages[start:end]
        start = end
        for pid in path:
            prev = last_req[pid]
            if prev >= 0 and prev != n:
                reused_req[prev] = reused_req[n] = True
                reused_page[pid] = True
                gaps_start.append(prev)
                gaps_end.append(n)
                gap_s.append(t - last_time[pid])
            last_time[pid] = t
            last_req[pid] = n
    starts = np.asarray(gaps_start, dtype=np.int64)
    ends = np.asarray(gaps_end, dtype=np.int64)
    gaps = np.asarray(gap_s, dtype=float)
    within = {}
    for name, w in WINDOWS_S.items():
        keep = gaps <= w
        within[name] = _peak_live(starts[keep], ends[keep])
    tokens = np.asarray([r.tokens for r in trace.requests], dtype=np.int64)
    later, unstable, examples = _stability(trace)
    return WorkingSet(
        unit=trace.unit,
        within=within,
        overall=int(sum(reused_page)),
        distinct=distinct,
        reuse_distance=_rank_percentiles(sd),
        one_time_share=float((~reused_req).mean()) if reused_req.size else 0.0,
        one_time_token_share=float(tokens[~reused_req].sum() / max(int(tokens.sum()), 1)),
        later_turns=later,
        unstable_turns=unstable,
        unstable_examples=examples,
    )


def _rank_percentiles(sd: StackDistances) -> dict[str, int]:
    """Token-weighted percentiles of the hits' stack ranks: the pool that serves that share of the hits."""
    from harness.advise.curve import INF

    finite = sd.rank < INF
    if not finite.any():
        return {}
    cum = sd.cum_tokens[finite]
    rank = sd.rank[finite]
    out = {}
    for q in (50, 90, 99):
        i = int(np.searchsorted(cum, cum[-1] * q / 100, side="left"))
        out[f"p{q}"] = int(rank[min(i, rank.size - 1)])
    out["max"] = int(rank[-1])
    return out


def _stability(trace: Trace) -> tuple[int, int, list[str]]:
    """Later turns of a session whose prompt does not start with the previous turn's prompt and answer."""
    prev: dict[int, tuple[tuple[int, ...], int | None]] = {}
    later = unstable = 0
    examples: list[str] = []
    for r in trace.requests:
        if r.session is None:
            continue
        before = prev.get(r.session)
        prev[r.session] = (r.key + r.output_key, r.turn)
        if before is None:
            continue
        later += 1
        full, turn = before
        if r.key[: len(full)] != full:
            unstable += 1
            if len(examples) < 3:
                same = next(
                    (i for i, (a, b) in enumerate(zip(r.key, full, strict=False)) if a != b), len(r.key)
                )
                examples.append(
                    f"session {r.session} turn {r.turn}: matches {same} of the previous turn's {len(full)} units"
                )
    return later, unstable, examples
