"""One real SGLang 0.5.23 server with --enable-priority-scheduling and --max-running-requests 1: a
high-priority arrival preempts the running low one, which SGLang reports as `num_retractions: 1` in its
meta_info and still finishes; the sim does the same (tests/sim/test_priority.py)."""

from __future__ import annotations

import pytest

from tests.helpers.preempt import preempt_exchange
from tests.real_sglang.conftest import RunningSglang, start_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]
ARGS = ["--enable-priority-scheduling", "--max-running-requests", "1", "--max-total-tokens", "4000"]


@pytest.fixture(scope="module")
def server(sglang_setup, tmp_path_factory):
    yield from start_sglang("priority-preempt", ARGS, sglang_setup, tmp_path_factory.mktemp("sglang-preempt"))


def test_a_high_arrival_preempts_the_running_low_one(server: RunningSglang) -> None:
    high, last = preempt_exchange(server.url, list(range(1000, 1100)), 600, list(range(2000, 2050)), 300)
    print(
        "high:", high.get("num_retractions"), "low:", last.get("num_retractions"), last["completion_tokens"]
    )
    assert high["num_retractions"] == 0 and high["completion_tokens"] == 4
    assert last["completion_tokens"] == 600 and last["finish_reason"]["type"] == "length"
    assert last["num_retractions"] == 1  # preempted once, then run again to its end
