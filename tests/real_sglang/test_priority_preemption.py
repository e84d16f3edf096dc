"""One real SGLang 0.5.23 server with --enable-priority-scheduling and --max-running-requests 1: a
high-priority arrival preempts the running low one, which SGLang reports as `num_retractions: 1` in its
meta_info and still finishes; the sim does the same (tests/sim/test_priority.py)."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx
import pytest

from tests.real_sglang.conftest import RunningSglang, start_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(900)]
ARGS = ["--enable-priority-scheduling", "--max-running-requests", "1", "--max-total-tokens", "4000"]


@pytest.fixture(scope="module")
def server(sglang_setup, tmp_path_factory):
    yield from start_sglang("priority-preempt", ARGS, sglang_setup, tmp_path_factory.mktemp("sglang-preempt"))


def test_a_high_arrival_preempts_the_running_low_one(server: RunningSglang) -> None:
    low_body = {
        "input_ids": list(range(1000, 1100)),
        "sampling_params": {"max_new_tokens": 600, "ignore_eos": True},
        "priority": 0,
        "stream": True,
    }
    events: list[dict[str, Any]] = []
    started = threading.Event()

    def low() -> None:
        with httpx.stream("POST", server.url + "/generate", json=low_body, timeout=300) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
                    started.set()

    t = threading.Thread(target=low)
    t.start()
    assert started.wait(120)  # the low request is running
    high = server.generate(list(range(2000, 2050)), max_new_tokens=4, priority=100)["meta_info"]
    t.join(300)
    last = events[-1]["meta_info"]
    print(
        "high:", high.get("num_retractions"), "low:", last.get("num_retractions"), last["completion_tokens"]
    )
    assert high["num_retractions"] == 0 and high["completion_tokens"] == 4
    assert last["completion_tokens"] == 600 and last["finish_reason"]["type"] == "length"
    assert last["num_retractions"] == 1  # preempted once, then run again to its end
