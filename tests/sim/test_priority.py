"""The sim's priority scheduling as SGLang 0.5.23's: queue order, the default for an unset priority."""

from __future__ import annotations

import sys
from collections import deque

from harness.sim.engine import EngineConfig, SimRequest
from harness.sim.priority import by_priority, unset_priority
from harness.sim.simulate import simulate


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
