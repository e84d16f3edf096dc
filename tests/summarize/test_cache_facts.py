"""A server's cache facts (block size, pool) as the summary declares them, from vLLM's gauge or SGLang's info."""

from __future__ import annotations

from pathlib import Path

from harness import metrics
from harness.engines.facts import server_cache_facts
from harness.summarize.read import SeedCapture, ServerCapture
from harness.summary.model import CacheFacts, Server

DATA = Path(__file__).parents[1] / "data" / "vllm"


def _server(info: dict | None, prom: str | None) -> ServerCapture:
    scrape = metrics.parse_prometheus((DATA / prom).read_text()) if prom else None
    seed = SeedCapture(Path("p"), "s", 0, {}, None, [], None, scrape, scrape)
    return ServerCapture("s", Path("s"), info, None, seeds={"p": seed})


def test_vllm_cache_config_validates_as_cache_facts() -> None:
    """Every key vLLM's `vllm:cache_config_info` gives is declared (was: undeclared key 'num_blocks')."""
    facts = CacheFacts.model_validate(server_cache_facts(_server({"data": []}, "m0.prom")))
    assert list(facts.to_json().items()) == list(
        {
            "block_size": 32,
            "num_blocks": 8192,
            "pool_tokens": 262144,
            "kv_cache_memory_bytes": 1 << 30,
            "enable_prefix_caching": True,
            "kv_offloading_backend": "native",
            "kv_offloading_size": None,
            "cache_dtype": "auto",
            "source": "vllm:cache_config_info",
        }.items()
    )  # as written, in vLLM's order
    Server(cache=facts)  # and it sits in a server's record


def test_sglang_server_info_gives_page_and_pool() -> None:
    facts = CacheFacts.model_validate(
        server_cache_facts(_server({"page_size": 16, "max_total_num_tokens": 4096}, None))
    )
    assert facts.to_json() == {"block_size": 16, "pool_tokens": 4096, "source": "server_info"}
