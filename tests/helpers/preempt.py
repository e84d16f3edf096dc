"""A high-priority arrival while a low one streams: the one exchange the sim's and real SGLang's preemption
tests both make (tests/sim/test_priority.py, tests/real_sglang/test_priority_preemption.py)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass(frozen=True)
class Exchange:
    """One try: both requests' meta_info, and whether the high one reached the server while the low one ran."""

    high: dict[str, Any]
    low: dict[str, Any]
    overlapped: bool


def preempt_exchange(
    url: str, low_ids: list[int], low_new: int, high_ids: list[int], timeout: float, tries: int = 4
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Stream a priority-0 request of `low_new` tokens; once its first token is out, send a priority-100
    one of 4 tokens. Returns (high's meta_info, low's last meta_info) from the first try whose high request
    reached the server before the low one had finished; a preemption test means nothing otherwise.

    Why tries: on two busy cores the client can read the low one's first token, or the server accept the
    high one, after a small model has generated the whole low answer (CI saw a high request reach
    SGLang's tokenizer manager 0.1-1.8 s after it was sent). That is the host's race, not the engine's
    decision, so such a try is run again rather than judged."""
    seen: list[str] = []
    for _ in range(tries):
        ex = _exchange_once(url, low_ids, low_new, high_ids, timeout)
        if ex.overlapped:
            return ex.high, ex.low
        seen.append(f"low e2e {ex.low['e2e_latency']:.2f} s, high e2e {ex.high['e2e_latency']:.2f} s")
    raise AssertionError(
        f"in {tries} tries the high request never reached {url} while the low one ran: {seen}"
    )


def _exchange_once(
    url: str, low_ids: list[int], low_new: int, high_ids: list[int], timeout: float
) -> Exchange:
    """One exchange. The high request goes out on a connection opened beforehand (a fresh client's TLS
    context and connect cost a loaded host whole seconds). Overlap is judged from the server's own
    e2e_latency of each request (SGLang and the sim both report it, from the request's arrival): the
    high one arrived no later than its answer came back less its e2e, and the low one ended no earlier
    than it was sent plus its e2e, so a try only counts when the first is before the second."""
    low_body = {
        "input_ids": low_ids,
        "sampling_params": {"max_new_tokens": low_new, "ignore_eos": True},
        "priority": 0,
        "stream": True,
    }
    high_body = {
        "input_ids": high_ids,
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True},
        "priority": 100,
    }
    lines: list[str] = []  # parsed after the exchange: the streaming thread only reads
    started = threading.Event()
    low_sent: list[float] = []

    def low() -> None:
        low_sent.append(time.time())
        with httpx.stream("POST", url + "/generate", json=low_body, timeout=timeout) as resp:
            for line in resp.iter_lines():
                if line.startswith("data: {"):
                    lines.append(line)
                    started.set()

    with httpx.Client(timeout=timeout) as high_client:
        high_client.get(url + "/get_model_info").raise_for_status()  # the connection the high one reuses
        t = threading.Thread(target=low)
        t.start()
        assert started.wait(timeout / 2), "the low request never started"
        high = high_client.post(url + "/generate", json=high_body).json()["meta_info"]
        high_back = time.time()
    t.join(timeout)
    assert not t.is_alive(), f"the low request was still streaming after {timeout} s"
    low_meta = json.loads(lines[-1][6:])["meta_info"]
    high_arrived_by = high_back - high["e2e_latency"]
    low_ended_after = low_sent[0] + low_meta["e2e_latency"]
    return Exchange(high, low_meta, high_arrived_by < low_ended_after)
