"""A server's cache facts (block size, pool) from what its engine reports: vLLM's cache_config_info gauge in
/metrics, else SGLang's server info (the summary's CacheFacts declares every key)."""

from __future__ import annotations

from typing import Any

from harness.engines.vllm.counters import VLLM_CACHE_CONFIG, vllm_cache_config


def server_cache_facts(srv: Any) -> dict[str, Any]:
    """Block (page) size and pool of a server: vLLM's cache_config_info gauge, else SGLang's server info."""
    for sc in srv.seeds.values():
        for scrape in (sc.before, sc.after):
            cfg = vllm_cache_config(scrape) if scrape is not None else {}
            if cfg:
                return {**cfg, "source": VLLM_CACHE_CONFIG}
    info = srv.info if isinstance(srv.info, dict) else {}
    page = info.get("page_size")
    if isinstance(page, int) and not isinstance(page, bool):
        return {"block_size": page, "pool_tokens": info.get("max_total_num_tokens"), "source": "server_info"}
    return {"block_size": None, "pool_tokens": None, "source": None}
