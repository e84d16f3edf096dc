"""A second eviction policy against real SGLang 0.5.23: lfu on multi-turn sessions that outgrow a 900-token
pool, prefilled in chunks of 64 tokens. The sim must cache what SGLang cached request by request at
concurrency 1, and lie within SGLang's own run-to-run spread at concurrency 4.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.real_sglang.agreement import MULTI_8X4, agree_at_c1, agree_within_spread
from tests.real_sglang.conftest import RunningSglang, start_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(1200)]
ARGS = [
    "--radix-eviction-policy",
    "lfu",
    "--max-total-tokens",
    "900",
    "--enable-cache-report",
    "--enable-metrics",
    "--sleep-on-idle",  # an idle scheduler wakes on a burst's first request (agreement.py, FORWARD_SLEEP_S)
    # prompts of 104-248 tokens in 2-4 chunks: each chunk's checkpoint counts lfu's hits as SGLang counts
    # them (InsertParams.inserted_len), which moves what lfu evicts
    "--chunked-prefill-size",
    "64",
]


@pytest.fixture(scope="module")
def server(sglang_setup, tmp_path_factory):
    yield from start_sglang("lfu-900", ARGS, sglang_setup, tmp_path_factory.mktemp("sglang-lfu"))


def test_the_sim_caches_what_sglang_cached_request_by_request_at_c1(
    server: RunningSglang, tmp_path: Path
) -> None:
    agree_at_c1(server, ARGS, tmp_path, {"lfu": MULTI_8X4})


def test_the_sim_lies_within_sglangs_spread_at_c4(server: RunningSglang, tmp_path: Path) -> None:
    agree_within_spread(server, ARGS, tmp_path, {"lfu": (MULTI_8X4, [4])})
