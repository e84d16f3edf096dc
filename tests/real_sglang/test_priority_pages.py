"""One real SGLang 0.5.23 server with the `priority` eviction policy, --enable-priority-scheduling and page
size 16: requests carry SGLang's `priority` field, hits come in whole pages, and the summary's facts
(page size, policy) come from its server_info and log.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.real_sglang.conftest import RunningSglang, start_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]
ARGS = [
    "--radix-eviction-policy",
    "priority",
    "--enable-priority-scheduling",
    "--page-size",
    "16",
    "--max-total-tokens",
    "1200",
    "--enable-cache-report",
    "--enable-metrics",
]


@pytest.fixture(scope="module")
def server(sglang_setup, tmp_path_factory):
    yield from start_sglang("priority-p16", ARGS, sglang_setup, tmp_path_factory.mktemp("sglang-priority"))


def test_hits_come_in_whole_pages(server: RunningSglang) -> None:
    ids = list(range(1000, 1300))  # 300 tokens: 18 whole pages (288), the tail page never enters the tree
    server.generate(ids, priority=1)
    again = server.generate(ids, priority=1)["meta_info"]
    assert again["cached_tokens"] == 288, again
    longer = server.generate(ids + list(range(1300, 1340)), priority=1)["meta_info"]
    assert longer["cached_tokens"] == 288, longer


def test_the_priority_field_is_accepted_on_generate_and_chat(server: RunningSglang) -> None:
    low = server.generate(list(range(4000, 4040)), priority=0)
    high = server.generate(list(range(4000, 4040)), priority=10)
    assert low["meta_info"]["finish_reason"]["type"] == high["meta_info"]["finish_reason"]["type"] == "length"
    chat = {
        "model": "default",
        "messages": [{"role": "user", "content": "hi " * 40}],
        "max_tokens": 2,
        "priority": 5,
    }
    r = httpx.post(server.url + "/v1/chat/completions", json=chat, timeout=120)
    assert r.status_code == 200, r.text[:300]


def test_server_info_and_log_give_page_size_and_policy(server: RunningSglang) -> None:
    from harness.engines.logs import parse_file
    from harness.summarize.prediction import engine_from_info

    info = json.loads((server.proc.server_dir / "server_info.json").read_text())
    assert info["page_size"] == 16 and info["radix_eviction_policy"] == "priority"
    assert info["enable_priority_scheduling"] is True
    cfg = engine_from_info(info)
    assert not isinstance(cfg, str) and cfg.page_size == 16, cfg
    prefills = parse_file(server.log).of("prefill")
    # hits come in whole pages; #new-token is the exact count computed, not rounded up to pages
    assert prefills and all(r.fields["cached_token"] % 16 == 0 for r in prefills)
    assert {(r.fields["new_token"], r.fields["cached_token"]) for r in prefills} >= {
        (300, 0),
        (12, 288),
        (52, 288),
    }


def _evict_by_priority(generate: Any, flush: Any) -> list[int]:
    """A (priority 10) and L (priority 0) cached, then three fillers (priority 5) push the 1,200-token pool
    over: `priority` evicts L before the fillers and A last (lru would drop A first). The cached tokens of
    every request, A and L resent at the end."""
    flush()
    prompts = [
        (list(range(b, b + 320)), p) for b, p in ((2000, 10), (2400, 0), (3000, 5), (3400, 5), (3800, 5))
    ]
    got = [generate(ids, priority=p)["meta_info"]["cached_tokens"] for ids, p in prompts]
    got += [generate(prompts[0][0], priority=10)["meta_info"]["cached_tokens"]]
    got += [generate(prompts[1][0], priority=0)["meta_info"]["cached_tokens"]]
    return got


def test_priority_eviction_matches_the_sim(server: RunningSglang, tmp_path) -> None:
    """SGLang's own eviction order under `priority` (mem_cache/evict_policy.py PriorityStrategy: the lowest
    value first), and the sim's, with the same flags and requests."""
    from tests.helpers.procs import SimProc

    real = _evict_by_priority(server.generate, lambda: httpx.post(server.url + "/flush_cache", timeout=60))
    assert real[:5] == [0, 0, 0, 0, 0] and real[5] >= 288 and real[6] == 0, real
    sim = SimProc(tmp_path, "--card-profile", "tiny-test", *ARGS)
    try:

        def sim_generate(ids: list[int], priority: int) -> dict:
            body = {
                "input_ids": ids,
                "sampling_params": {"max_new_tokens": 2, "ignore_eos": True},
                "priority": priority,
            }
            return httpx.post(sim.url + "/generate", json=body, timeout=60).json()

        got = _evict_by_priority(sim_generate, lambda: httpx.post(sim.url + "/flush_cache", timeout=60))
    finally:
        sim.stop()
    print(f"cached tokens, SGLang: {real}; sim: {got}")
    assert got == real


def test_priority_classes_through_the_harness_match_the_sim(server: RunningSglang, tmp_path) -> None:
    """A spec's `priorities:` through `harness run` on SGLang and on its sim twin (same flags), at
    concurrency 1: every request carries its class's `priority`, and the sim caches exactly what SGLang
    cached, request by request; the high class keeps its sessions (8 x 4 turns through 1,200 tokens)."""
    from tests.helpers import specs
    from tests.real_sglang.agreement import MULTI_8X4, cached_per_request, real_run, sim_run

    classes = [{"name": "high", "share": 1, "value": 10}, {"name": "low", "share": 1, "value": 0}]
    spec = specs.write_spec(
        tmp_path, "prio-c1", MULTI_8X4, api="sglang-generate", tokenizer="server", concurrency=1, seeds=[0],
        priorities=classes, timeouts={"connect": 10, "first_token": 120, "total": 300},
        servers=[{"name": "srv", "launch": "sglang", "args": ARGS}],
        suite={"sim": {"card_profile": "l4-8b", "time_scale": 0.005}},
    )  # fmt: skip
    by_class = {}
    for who, summary in (("real", real_run(server, spec, tmp_path / "real", "real")),
                         ("sim", sim_run(spec, tmp_path / "sim", "sim"))):  # fmt: skip
        (p,) = summary["points"]
        by_class[who] = p["median"]["hit_rate_usage_by_class"]
    real = cached_per_request(tmp_path / "real" / "capture", "real", "prio-c1", "seed=0")
    sim = cached_per_request(tmp_path / "sim" / "capture", "sim", "prio-c1", "seed=0")
    print(f"hit rate by class, SGLang: {by_class['real']}; sim: {by_class['sim']}")
    assert sim == real and sum(real) > 0, (real, sim)
    assert by_class["real"]["high"] > by_class["real"]["low"] + 0.25  # the sim: 71.1 % against 21.7 %
