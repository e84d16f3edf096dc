"""A point's cache figures from the server's counters, by whose counters the scrape holds (SGLang's or
vLLM's, told from the names alone), and the mean TTFT from the server's own histogram."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness import metrics
from harness.engines.vllm.counters import VLLM_HITS, VLLM_QUERIES, vllm_figures

# each engine's counter hit rate in words (the report's sources note), SGLang's when no engine is known
COUNTER_NOTES = {
    "sglang": "Δ sglang:cached_tokens_total / Δ sglang:prompt_tokens_total (SGLang)",
    "vllm": "Δ vllm:prefix_cache_hits_total / Δ vllm:prefix_cache_queries_total (vLLM)",
}
UNKNOWN_ENGINE_NOTE = "sglang"
NO_COUNTERS = (
    "no prefix-cache counters in /metrics (sglang:cached_tokens_total, vllm:prefix_cache_hits_total)"
)


def counter_engine(names: Iterable[str]) -> str | None:
    """Which engine's counters a scrape holds ("sglang", "vllm"), from the names alone; None: neither."""
    seen = set(names)
    if VLLM_QUERIES in seen or VLLM_HITS in seen:
        return "vllm"
    if metrics.PROMPT in seen or metrics.CACHED in seen:
        return "sglang"
    return None


def cache_figures(d: metrics.CounterDeltas) -> dict[str, Any]:
    """Prompt and cached token deltas, their ratio, and the device/host/storage split when labelled.

    The engine is told by the counter names: SGLang's cached/prompt tokens, or vLLM's prefix-cache
    hits/queries (with the by-source prompt tokens as the split).
    """
    engine = counter_engine(n for n, _ in d.deltas)
    if engine == "vllm":
        return vllm_figures(d)
    prompt = d.total(metrics.PROMPT)
    cached = d.total(metrics.CACHED)
    if cached is None and prompt is not None and not d.reset:
        cached = 0.0  # the labelled counter appears only after its first increment
    split: dict[str, float | None] = {}
    for src in metrics._label_values(d.deltas, metrics.CACHED, "cache_source"):
        split[src] = d.total(metrics.CACHED, cache_source=src)
    return {
        "engine": engine,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cached_by_source": split,
        "hit_rate": (cached / prompt) if prompt and cached is not None else None,
        "requests": d.total(metrics.REQUESTS),
        "generation_tokens": d.total(metrics.GENERATION),
        "evicted_tokens": d.total(metrics.EVICTED),
        "load_back_tokens": d.total(metrics.LOAD_BACK),
        "hicache_backup_tokens": d.total(metrics.HICACHE_BACKUP_TOKENS),
        "hicache_backup_bytes": d.total(metrics.HICACHE_BACKUP_BYTES),
        "hicache_dropped_tokens": d.total(metrics.HICACHE_DROPPED),
        "reset": d.reset,
    }


TTFT_HISTOGRAMS = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")


def ttft_mean_s(d: metrics.CounterDeltas) -> tuple[float | None, float | None]:
    """(mean TTFT in s, requests) over the point from the server's own TTFT histogram (_sum / _count)."""
    for name in TTFT_HISTOGRAMS:
        total, count = d.total(name + "_sum"), d.total(name + "_count")
        if total is not None and count:
            return total / count, count
    return None, None
