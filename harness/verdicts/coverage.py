"""What a point x seed's health verdicts could not be judged on, and why; and the storm from counters alone.

Why: an empty verdict list reads as health (issue 61). A host tier that never matches, judged without the
token ids sent, or a storm on a server without KV gauges, must say "not judged" and why, never nothing.
When the gauges are missing the storm is judged from the counters over the whole point: a point starts on a
flushed pool, so every token it evicts was first allocated, as an uncached prompt token, a token loaded back
from host or a generated one; eviction far beyond that sum is no healthy pool's (docs/faults.md).
"""

from __future__ import annotations

from typing import Any

from harness.summary.funnel import HealthVerdict, HicacheFunnel, NotJudged

MIN_EVICTED = 256  # as harness.verdicts.health: fewer evicted tokens than this are too few to judge
# counters alone: evicted / (uncached prompt + loaded back + generated) over the point. A cold point's pool
# cannot evict more than it took in (healthy sim and SGLang: at most 1.0, docs/faults.md#evict-storm-thresholds),
# so above 2 the evictions are not the pool's own: a counter that counts each eviction many times over, or
# evictions of what other points left (a warm pool is at most one pool, below the floor of MIN_EVICTED pools)
COUNTER_STORM_RATIO = 2.0
GAUGES = ("kv_available_tokens", "kv_used_tokens+kv_evictable_tokens+pool_tokens")


def _rows(samples: list[dict[str, Any]]) -> list[dict[str, float]]:
    return [s["values"] for s in samples if "values" in s]


def has_gauges(v: dict[str, float]) -> bool:
    """The free space of the pool can be read from this scrape (health._free's inputs)."""
    return "kv_available_tokens" in v or all(
        k in v for k in ("pool_tokens", "kv_used_tokens", "kv_evictable_tokens")
    )


def eviction_gaps(seed: str, samples: list[dict[str, Any]]) -> tuple[list[NotJudged], bool]:
    """(what evict-storm and over-eviction could not be judged on from the timeline, whether the counters
    should judge the storm instead). Nothing is said when nothing was evicted: there was nothing to judge."""
    rows = _rows(samples)
    both = ("evict-storm", "over-eviction")
    if len(rows) < 2:
        why = "no /metrics timeline (the server's /metrics was not scraped during the point)"
        return [NotJudged(verdict=v, seed=seed, why=why) for v in both], True
    counted = [r for r in rows if "evicted_tokens" in r]
    if len(counted) < 2:
        why = "the server's /metrics has no eviction counter (sglang:evicted_tokens_total)"
        return [NotJudged(verdict=v, seed=seed, why=why) for v in both], False
    evicted = counted[-1]["evicted_tokens"] - counted[0]["evicted_tokens"]
    if evicted <= 0:
        return [], False
    if not any(has_gauges(r) for r in counted):
        why = "no KV gauges on /metrics (sglang:kv_available_tokens, or kv_used/kv_evictable/max_total_num_tokens)"
        return [NotJudged(verdict="over-eviction", seed=seed, why=why)], True
    if evicted < MIN_EVICTED:
        why = f"too few evictions ({evicted:.0f} tokens < {MIN_EVICTED})"
        return [NotJudged(verdict=v, seed=seed, why=why) for v in both], False
    loaded, beside = _beside_load_backs(counted)
    if loaded > 0 and beside < MIN_EVICTED:
        why = (
            f"{loaded:.0f} tokens loaded back, but only {beside:.0f} evicted in the same scrape ticks "
            f"(< {MIN_EVICTED}): the server's eviction and load-back counters moved apart"
        )
        return [NotJudged(verdict="evict-storm", seed=seed, why=why)], False
    return [], False


def _beside_load_backs(rows: list[dict[str, float]]) -> tuple[float, float]:
    """(tokens loaded back, tokens evicted in the ticks where load_back_tokens grew)."""
    loaded = beside = 0.0
    for a, b in zip(rows, rows[1:], strict=False):
        lb = b.get("load_back_tokens", 0.0) - a.get("load_back_tokens", 0.0)
        if lb > 0:
            loaded += lb
            beside += max(0.0, b["evicted_tokens"] - a["evicted_tokens"])
    return loaded, beside


def counter_storm(
    seed: str, cf: dict[str, Any] | None, window: list[float]
) -> tuple[HealthVerdict | None, NotJudged | None]:
    """evict-storm from the point's counter deltas (harness.engines.counters.cache_figures), or why not."""
    if not cf or cf.get("evicted_tokens") is None:
        return None, NotJudged(
            verdict="evict-storm", seed=seed, why="no eviction counter in the point's deltas"
        )
    evicted = float(cf["evicted_tokens"])
    prompt, gen = cf.get("prompt_tokens"), cf.get("generation_tokens")
    if prompt is None or gen is None:
        why = "no KV gauges, and no prompt or generation token counter to weigh the evictions against"
        return None, NotJudged(verdict="evict-storm", seed=seed, why=why)
    if evicted < MIN_EVICTED:
        if evicted <= 0:
            return None, None
        why = f"too few evictions ({evicted:.0f} tokens < {MIN_EVICTED})"
        return None, NotJudged(verdict="evict-storm", seed=seed, why=why)
    uncached = max(0.0, float(prompt) - float(cf.get("cached_tokens") or 0.0))
    loaded = float(cf.get("load_back_tokens") or 0.0)
    could_need = uncached + loaded + float(gen)
    ratio = evicted / max(could_need, 1.0)
    if ratio < COUNTER_STORM_RATIO:  # below it, a storm that evicts reusable prefixes looks like health
        why = (
            f"no KV gauges: judged from counters only ({ratio:.2f}x what allocations could need, storm at "
            f"{COUNTER_STORM_RATIO:g}x), which see eviction beyond all allocations, not load-back evicting others"
        )
        return None, NotJudged(verdict="evict-storm", seed=seed, why=why)
    figures = {
        "evicted_tokens": evicted,
        "uncached_prompt_tokens": uncached,
        "loaded_back_tokens": loaded,
        "generated_tokens": float(gen),
        "ratio_to_allocations": round(ratio, 2),
    }
    reason = (
        f"{evicted:.0f} tokens evicted over the point, {ratio:.1f}x all the point's allocations could have needed "
        f"({uncached:.0f} uncached prompt + {loaded:.0f} loaded back + {float(gen):.0f} generated tokens); "
        "judged from counters, the server exports no KV gauges"
    )
    verdict = HealthVerdict(
        verdict="evict-storm", seed=seed, reason=reason, window_s=window, figures=figures, evidence="counters"
    )
    return verdict, None


def inert_gaps(seed: str, f: HicacheFunnel) -> list[NotJudged]:
    """Why host-tier-inert could not be judged on a HiCache point x seed (no token ids, no host-hit counter)."""
    out = []
    if f.host_hit_tokens is None and f.storage_hit_tokens is None:
        why = (
            'no host-hit counter (sglang:cached_tokens_total{cache_source="host"}) on the server\'s /metrics'
        )
        out.append(NotJudged(verdict="host-tier-inert", seed=seed, why=why))
    elif f.returning_off_device_tokens is None:
        detail = f": {f.returning_why_none}" if f.returning_why_none else ""
        why = f"the token ids sent are unknown, so no returning prompt tokens to weigh host hits against{detail}"
        out.append(NotJudged(verdict="host-tier-inert", seed=seed, why=why))
    return out
