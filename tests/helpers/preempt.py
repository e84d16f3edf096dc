"""A high-priority arrival while a low one streams: the one exchange the sim's and real SGLang's preemption
tests both make (tests/sim/test_priority.py, tests/real_sglang/test_priority_preemption.py)."""

from __future__ import annotations

import json
import threading
from typing import Any

import httpx


def preempt_exchange(
    url: str, low_ids: list[int], low_new: int, high_ids: list[int], timeout: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stream a priority-0 request of `low_new` tokens; once its first token is out, send a priority-100
    one of 4 tokens. Returns (high's meta_info, low's last meta_info)."""
    low_body = {
        "input_ids": low_ids,
        "sampling_params": {"max_new_tokens": low_new, "ignore_eos": True},
        "priority": 0,
        "stream": True,
    }
    events: list[dict[str, Any]] = []
    started = threading.Event()

    def low() -> None:
        with httpx.stream("POST", url + "/generate", json=low_body, timeout=timeout) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    events.append(json.loads(line[6:]))
                    started.set()

    t = threading.Thread(target=low)
    t.start()
    assert started.wait(timeout / 2), "the low request never started"
    high_body = {
        "input_ids": high_ids,
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True},
        "priority": 100,
    }
    high = httpx.post(url + "/generate", json=high_body, timeout=timeout).json()["meta_info"]
    t.join(timeout)
    return high, events[-1]["meta_info"]
