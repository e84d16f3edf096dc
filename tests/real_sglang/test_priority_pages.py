"""One real SGLang 0.5.23 server with the `priority` eviction policy, --enable-priority-scheduling and page
size 16: requests carry SGLang's `priority` field, hits come in whole pages, and the summary's facts
(page size, policy) come from its server_info and log.
"""

from __future__ import annotations

import json

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
    from harness.serverlog.parse import parse_file
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
