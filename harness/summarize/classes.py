"""Figures of one point x seed split by what the traffic says about each request: its priority class
(the spec's `priorities:`) and its prompt length in power-of-two buckets (a conversation's length, which
tlru's claim is about). Each split gives the usage hit rate and TTFT p50 / p99 per key."""

from __future__ import annotations

from typing import Any

import pandas as pd


def length_bucket(tokens: float) -> int:
    """The largest power of two <= tokens (0 for none): a bucket's lower bound, `1024` = 1024..2047."""
    n = int(tokens)
    return 0 if n <= 0 else 1 << (n.bit_length() - 1)


def _q(s: pd.Series, q: float) -> float | None:
    s = pd.to_numeric(s, errors="coerce").dropna()
    return float(s.quantile(q)) if len(s) else None


def _split(
    ok: pd.DataFrame, keys: pd.Series, cached: pd.Series | None, names: tuple[str, ...]
) -> dict[str, Any]:
    """hit_rate_usage, ttft p50 and p99 and the request count per key (dicts keyed by str(key)), under
    `names`: the four figures' names, in that order."""
    hits: dict[str, float | None] = {}
    p50: dict[str, float | None] = {}
    p99: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for key, g in ok.groupby(keys, sort=True):
        k = str(key)
        prompt = float(pd.to_numeric(g["prompt_tokens"], errors="coerce").fillna(0).sum())
        if cached is not None and prompt > 0:
            hits[k] = float(cached.loc[g.index].sum()) / prompt
        else:
            hits[k] = None
        p50[k] = _q(g["ttft_s"], 0.5)
        p99[k] = _q(g["ttft_s"], 0.99)
        counts[k] = len(g)
    return dict(zip(names, (hits, p50, p99, counts), strict=True))


BY_STEP_DEPTH = (
    "hit_rate_usage_by_step_depth",
    "ttft_median_s_by_step_depth",
    "ttft_p99_s_by_step_depth",
    "requests_by_step_depth",
)
BY_CLASS = ("hit_rate_usage_by_class", "ttft_median_s_by_class", "ttft_p99_s_by_class", "requests_by_class")
BY_LENGTH = (
    "hit_rate_usage_by_length",
    "ttft_median_s_by_length",
    "ttft_p99_s_by_length",
    "requests_by_length",
)


def class_figures(ok: pd.DataFrame, cached: pd.Series | None, agent: bool = False) -> dict[str, Any]:
    """By priority class (records that carry one, even a single class) and by prompt-length bucket
    (requests that report their prompt tokens; left out with a single bucket: the totals say it).
    agent: an agent workload's requests by step depth too (`turn`: the exchanges its context holds),
    named `*_by_step_depth` so a reader does not take them for a chat's turns."""
    out: dict[str, Any] = {}
    if agent and "turn" in ok:
        deep = ok[ok["turn"].notna()]
        if not deep.empty:
            out.update(_split(deep, deep["turn"].astype(int), cached, BY_STEP_DEPTH))
    if "priority_class" in ok:
        classed = ok[ok["priority_class"].notna()]
        if not classed.empty:
            out.update(_split(classed, classed["priority_class"].astype(str), cached, BY_CLASS))
    prompt = pd.to_numeric(ok.get("prompt_tokens", pd.Series(dtype=float)), errors="coerce")
    sized = ok[prompt.notna() & (prompt > 0)]
    if not sized.empty:
        buckets = prompt[sized.index].map(length_bucket)
        if buckets.nunique() >= 2:
            out.update(_split(sized, buckets, cached, BY_LENGTH))
    return out
