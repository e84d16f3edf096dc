"""The sim's priority scheduling as SGLang 0.5.23's: queue order, the default for an unset priority."""

from __future__ import annotations

import random
import sys
from collections import deque
from pathlib import Path
from typing import Any

import pytest

from harness.sim.engine import EngineConfig, SimRequest
from harness.sim.priority import DISPLACED, QUEUE_FULL, by_priority, unset_priority
from harness.sim.simulate import simulate
from harness.tokenizer import WordTokenizer
from tests.helpers.preempt import preempt_exchange
from tests.helpers.procs import SimProc


def req(rid: str, priority: int | None, at: float, n: int = 200) -> SimRequest:
    ids = [hash((rid, i)) % 4000 for i in range(n)]
    return SimRequest(rid=rid, input_ids=ids, output_ids=list(range(4)), arrival=at, priority=priority)


def test_queue_order_larger_values_first_unless_low_values_first() -> None:
    q = deque([req("a", 1, 0.0), req("b", 5, 1.0), req("c", 5, 0.5), req("d", -2, 0.2)])
    assert [r.rid for r in by_priority(q, low_values_first=False)] == ["c", "b", "a", "d"]
    assert [r.rid for r in by_priority(q, low_values_first=True)] == ["d", "a", "c", "b"]


def test_unset_priority_is_the_least_preferred() -> None:
    assert unset_priority(False) == -sys.maxsize - 1 and unset_priority(True) == sys.maxsize


def first_tokens(priority_scheduling: bool, low_first: bool = False) -> list[str]:
    """One request at a time (max_running_requests 1), all queued at once: who is served in which order."""
    cfg = EngineConfig(
        pool_tokens=20_000,
        card="tiny-test",
        max_running_requests=1,
        priority_scheduling=priority_scheduling,
        low_priority_values_first=low_first,
    )
    reqs = [req("first", 0, 0.0), req("low", 1, 0.001), req("none", None, 0.002), req("high", 9, 0.003)]
    done = simulate(reqs, cfg)
    return [r.rid for r in sorted(done, key=lambda r: r.first_token_time)]


def test_the_engine_serves_the_queue_by_priority_only_when_enabled() -> None:
    assert first_tokens(False) == ["first", "low", "none", "high"]  # fcfs
    assert first_tokens(True) == ["first", "high", "low", "none"]
    assert first_tokens(True, low_first=True) == ["first", "low", "high", "none"]


def preempting(**over: Any) -> dict[str, SimRequest]:
    """A low request running alone (max_running_requests 1) when a high one arrives: who ran when."""
    kw: dict[str, Any] = {"pool_tokens": 20_000, "card": "tiny-test", "max_running_requests": 1}
    cfg = EngineConfig(**{**kw, "priority_scheduling": True, **over})
    low = SimRequest(
        rid="low", input_ids=list(range(200)), output_ids=list(range(64)), arrival=0.0, priority=0
    )
    high = req("high", -100 if cfg.low_priority_values_first else 100, 0.01)
    return {r.rid: r for r in simulate([low, high], cfg)}


def test_a_high_arrival_preempts_the_running_low_one() -> None:
    got = preempting()
    low, high = got["low"], got["high"]
    assert low.retractions == 1 and high.retractions == 0
    assert low.first_token_time is not None and high.first_token_time is not None
    assert low.first_token_time < high.first_token_time < low.finish_time  # low was running, then waited
    assert high.finish_time is not None and high.finish_time < low.finish_time
    assert low.generated == 64 and low.finish_reason == "length"  # run again to the end after the preemption
    assert low.cached_device == 0  # hits are counted on the first admission only


def test_no_preemption_without_a_large_enough_gap_or_when_disabled() -> None:
    for over in ({"preemption_threshold": 100}, {"priority_preemption": False}):
        got = preempting(**over)
        assert got["low"].retractions == 0, over
        assert got["low"].finish_time < got["high"].first_token_time  # the high one waited its turn
    assert preempting(preemption_threshold=99)["low"].retractions == 1  # 100 - 0 > 99: strictly more
    assert preempting(low_priority_values_first=True)["low"].retractions == 1  # -100 beats 0 there


def test_no_preemption_without_priority_scheduling() -> None:
    assert preempting(priority_scheduling=False)["low"].retractions == 0


def queue_limited(priority_scheduling: bool) -> dict[str, SimRequest]:
    """--max-queued-requests 1 behind one running request: a queued low one, then a high and a worse one."""
    cfg = EngineConfig(
        pool_tokens=20_000,
        card="tiny-test",
        max_running_requests=1,
        priority_scheduling=priority_scheduling,
        max_queued_requests=1,
    )
    run = SimRequest(
        rid="run", input_ids=list(range(200)), output_ids=list(range(64)), arrival=0.0, priority=0
    )
    reqs = [run, req("low", 1, 0.001), req("high", 5, 0.002), req("worse", 0, 0.003)]
    return {r.rid: r for r in simulate(reqs, cfg)}


def test_a_full_queue_aborts_the_least_preferred_request() -> None:
    got = queue_limited(True)  # the high arrival displaces the queued low one; a worse one is refused
    assert got["low"].finish_reason == "abort" and got["low"].abort_message == DISPLACED
    assert got["worse"].finish_reason == "abort" and got["worse"].abort_message == QUEUE_FULL
    assert got["high"].finish_reason == "length" and got["run"].finish_reason == "length"
    fcfs = queue_limited(False)  # without priority scheduling every arrival at a full queue is refused
    assert fcfs["high"].abort_message == QUEUE_FULL == fcfs["worse"].abort_message
    assert fcfs["low"].finish_reason == "length" and fcfs["low"].abort_message is None


@pytest.mark.slow
def test_a_live_sim_reports_the_preempted_request_as_retracted(tmp_path: Path) -> None:
    """Over HTTP, as SGLang reports it: the low request's meta_info says `num_retractions: 1`, the high
    one's 0, and the low one still returns every token it was asked for."""
    args = ("--card-profile", "tiny-test", "--time-scale", "0.3", "--max-running-requests", "1",
            "--enable-priority-scheduling", "--max-total-tokens", "8000")  # fmt: skip
    sim = SimProc(tmp_path, *args)
    try:
        tok = WordTokenizer()
        low_ids = tok.encode(tok.random_words(random.Random(1), 100))
        high_ids = tok.encode(tok.random_words(random.Random(2), 50))
        high, last = preempt_exchange(sim.url, low_ids, 1500, high_ids, 120)
        assert high["num_retractions"] == 0 and high["completion_tokens"] == 4
        assert last["num_retractions"] == 1 and last["completion_tokens"] == 1500
        assert last["finish_reason"]["type"] == "length"
        assert high["e2e_latency"] < last["e2e_latency"]  # the high one went first
    finally:
        assert sim.stop() == 0
