"""vLLM's Prometheus counters: their names, the point's cache figures from them, and the block size and pool
its `vllm:cache_config_info` gauge carries (the summary's CacheFacts)."""

from __future__ import annotations

from typing import Any

from harness import metrics
from harness.telemetry.timeline import Watch

# vLLM's (V1, seen on 0.32.0): prefix-cache queries and hits in tokens, prompt tokens by where they came
# from, and cache_config_info, a gauge whose labels carry the block size and the pool.
VLLM_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_HITS = "vllm:prefix_cache_hits_total"
VLLM_EXTERNAL_HITS = "vllm:external_prefix_cache_hits_total"  # a KV connector (offloading, LMCache)
VLLM_PROMPT = "vllm:prompt_tokens_total"
VLLM_BY_SOURCE = (
    "vllm:prompt_tokens_by_source_total"  # source = local_cache_hit | local_compute | external_kv_transfer
)
VLLM_GENERATION = "vllm:generation_tokens_total"
VLLM_REQUESTS = "vllm:request_success_total"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_CACHE_CONFIG = "vllm:cache_config_info"

# canonical counter -> vLLM's metric name (its adapter's `metric_names`)
VLLM_NAMES = {
    "prompt_tokens": VLLM_QUERIES,
    "cached_tokens": VLLM_HITS,
    "generation_tokens": VLLM_GENERATION,
    "requests": VLLM_REQUESTS,
    "external_cached_tokens": VLLM_EXTERNAL_HITS,
    "preemptions": VLLM_PREEMPTIONS,
}
# sample name -> the per-point timeline's field (harness.telemetry.timeline), the fields SGLang's names share
VLLM_TIMELINE = Watch(
    counters={
        VLLM_PROMPT: "prompt_tokens",
        VLLM_GENERATION: "generation_tokens",
        VLLM_REQUESTS: "requests",
        VLLM_PREEMPTIONS: "preemptions",
    },
    gauges={
        "vllm:num_requests_running": "running",
        "vllm:num_requests_waiting": "queued",
        "vllm:kv_cache_usage_perc": "token_usage",
    },
)


def vllm_figures(d: metrics.CounterDeltas) -> dict[str, Any]:
    """vLLM: hit rate = Δ prefix_cache_hits / Δ prefix_cache_queries (+ a connector's hits when present)."""
    queries, hits = d.total(VLLM_QUERIES), d.total(VLLM_HITS)
    external = d.total(VLLM_EXTERNAL_HITS)
    cached = None if hits is None else hits + (external or 0.0)
    split: dict[str, float | None] = {
        src: d.total(VLLM_BY_SOURCE, source=src)
        for src in metrics._label_values(d.deltas, VLLM_BY_SOURCE, "source")
        if src != "local_compute"  # the tokens that were not cached
    }
    return {
        "engine": "vllm",
        "prompt_tokens": queries,
        "cached_tokens": cached,
        "cached_by_source": split,
        "hit_rate": (cached / queries) if queries and cached is not None else None,
        "requests": d.total(VLLM_REQUESTS),
        "generation_tokens": d.total(VLLM_GENERATION),
        "evicted_tokens": None,  # vLLM counts no evictions
        "load_back_tokens": external,
        "preemptions": d.total(VLLM_PREEMPTIONS),
        "reset": d.reset,
    }


def vllm_cache_config(scrape: metrics.Scrape) -> dict[str, Any]:
    """Block size and pool from `vllm:cache_config_info` (labels of a gauge); {} when absent."""
    labels = next((dict(ls) for (n, ls) in scrape.values if n == VLLM_CACHE_CONFIG), None)
    if labels is None:
        return {}

    def num(key: str) -> int | float | None:
        v = labels.get(key)
        if v is None:
            return None
        try:
            f = float(v)
        except ValueError:
            return None
        return int(f) if f.is_integer() else f

    blocks = num("num_gpu_blocks")
    block_size = num("block_size")
    tokens = num("kv_cache_size_tokens")
    if tokens is None and isinstance(blocks, int) and isinstance(block_size, int):
        tokens = blocks * block_size
    return {
        "block_size": block_size,
        "num_blocks": blocks,
        "pool_tokens": tokens,
        "kv_cache_memory_bytes": num("kv_cache_memory_bytes"),
        "enable_prefix_caching": labels.get("enable_prefix_caching") == "True",
        "kv_offloading_backend": labels.get("kv_offloading_backend"),
        "kv_offloading_size": num("kv_offloading_size"),
        "cache_dtype": labels.get("cache_dtype"),
    }
