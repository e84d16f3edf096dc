"""The capacity search's logic on made-up probes: the order it asks for values, what a probe means
(pass, over, saturated, failed), the result, and the sim's modelled clock."""

from __future__ import annotations

from typing import Any

from harness.spec.search import SearchSpec
from harness.summarize.capacity import (
    Probe,
    SeedRun,
    measure_probe,
    next_value,
    replay,
    search_result,
)

CONC = SearchSpec("concurrency", 2, 16, {"ttft_ms": 500})


def rows(
    ttfts_ms: list[float], *, span_s: float = 10.0, ok: bool = True, **extra: Any
) -> list[dict[str, Any]]:
    """One request per TTFT, scheduled evenly over span_s."""
    n = len(ttfts_ms)
    return [
        {
            "ok": ok,
            "ttft_s": t / 1000,
            "e2e_s": t / 1000 + 0.1,
            "tpot_s": 0.01,
            "completion_tokens": 8,
            "scheduled_mono": i * span_s / n,
            "done_mono": i * span_s / n + t / 1000 + 0.1,
            **extra,
        }
        for i, t in enumerate(ttfts_ms)
    ]


def probe(value: float, ttfts_ms: list[float], search: SearchSpec = CONC, **kw: Any) -> Probe:
    return measure_probe(value, [SeedRun("ok", None, rows(ttfts_ms, **kw), None)], search)


def walk(search: SearchSpec, capacity: float) -> list[float]:
    """The values the search asks for against a server that meets the SLO up to `capacity` exactly."""
    measured: dict[float, Probe] = {}
    asked = []
    while (v := replay(search, measured)[1]) is not None:
        asked.append(v)
        # throughput rising with the knob (no saturation); TTFT within the bound up to capacity
        measured[v] = probe(v, [100.0 if v <= capacity else 900.0] * 20, span_s=20 / v)
    return asked


def test_expanding_then_bisecting_finds_the_exact_largest_value_in_few_probes() -> None:
    assert walk(CONC, 11) == [2, 4, 8, 16, 12, 10, 11]
    assert walk(CONC, 16) == [2, 4, 8, 16]  # hi met the target: nothing more to ask
    assert walk(CONC, 1) == [2]  # lo already over: the answer is none
    assert walk(SearchSpec("concurrency", 3, 100, {"ttft_ms": 500}), 37) == [
        3,
        6,
        12,
        24,
        48,
        36,
        42,
        39,
        37,
        38,
    ]
    for cap in range(2, 17):  # exact for every capacity in range, never more than 8 probes
        asked = walk(CONC, cap)
        judged, _ = replay(
            CONC, {v: probe(v, [100.0 if v <= cap else 900.0] * 20, span_s=20 / v) for v in asked}
        )
        assert search_result(CONC, judged)["best"] == cap and len(asked) <= 8


def test_a_rate_search_closes_to_five_percent_on_three_significant_digits() -> None:
    rate = SearchSpec("request_rate", 1.0, 10.0, {"ttft_ms": 500})
    asked = walk(rate, 3.3)
    assert asked[:4] == [1.0, 2.0, 4.0, 3.0]
    assert all(float(f"{v:.3g}") == v for v in asked)
    judged, _ = replay(rate, {v: probe(v, [100.0 if v <= 3.3 else 900.0] * 20, span_s=20 / v) for v in asked})
    best = search_result(rate, judged)["best"]
    assert 3.3 * 0.95 <= best <= 3.3


def test_goodput_target_percentile_and_the_limiting_term() -> None:
    two = SearchSpec("concurrency", 2, 16, {"ttft_ms": 500, "e2e_ms": 5000}, goodput=0.9)
    ok = probe(2, [100.0] * 18 + [900.0] * 2, two)  # 90% within: meets 0.9
    assert ok.goodput == 0.9 and ok.met == {"ttft_ms": 0.9, "e2e_ms": 1.0} and ok.limiting == "ttft_ms"
    assert replay(two, {2: ok})[0][2].status == "pass"
    short = probe(2, [100.0] * 17 + [900.0] * 3, two)
    judged = replay(two, {2: short})[0][2]
    assert judged.status == "over" and "goodput 0.85 < 0.9" in (judged.reason or "")
    p99 = SearchSpec("concurrency", 2, 16, {"ttft_ms": 500}, goodput=0.5, percentile=99)
    tail = replay(p99, {2: probe(2, [100.0] * 19 + [900.0], p99)})[0][2]  # goodput 0.95, but p99 is 892 ms
    assert tail.status == "over" and "p99 ttft_ms" in (tail.reason or "") and tail.limiting == "ttft_ms"
    # failures count against goodput: scheduled requests that did not finish ok are not good
    failed_rows = rows([100.0] * 10) + rows([100.0] * 10, ok=False)
    half = measure_probe(2, [SeedRun("ok", None, failed_rows, None)], CONC)
    assert half.goodput == 0.5


def test_saturation_and_failure_end_the_search_upward_and_say_why() -> None:
    # 2 and 4 pass; at 8 throughput stays flat while TTFT climbs past 20%: saturated, though within the SLO
    m = {
        2: probe(2, [100.0] * 20, span_s=10),
        4: probe(4, [150.0] * 20, span_s=5),
        8: probe(8, [400.0] * 20, span_s=5),
    }
    judged, nxt = replay(CONC, m)
    assert judged[8].status == "saturated" and "throughput stopped rising" in (judged[8].reason or "")
    assert nxt == 6  # bisecting below the saturated probe, never above it
    m[6] = probe(6, [300.0] * 20, span_s=5)  # bisecting: judged against the SLO alone
    m[7] = probe(7, [900.0] * 20, span_s=5)
    judged, nxt = replay(CONC, m)
    res = search_result(CONC, judged)
    assert nxt is None and (res["best"], res["above"]) == (6, 7) and res["limiting"] == "ttft_ms"
    assert res["stopped"].startswith("over the SLO at 7: goodput 0 < 0.9")
    assert "; the climb ended at 8: saturated: throughput stopped rising" in res["stopped"]
    m[7] = probe(7, [350.0] * 20, span_s=5)  # 7 within the SLO: the saturated 8 is the ceiling itself
    res = search_result(CONC, replay(CONC, m)[0])
    assert res["best"] == 7 and res["stopped"].startswith("saturated at 8: throughput stopped rising")
    # a failed seed: the probe is failed with the point's reason, not over the SLO
    bad = measure_probe(4, [SeedRun("failed", "server exited with code -9", [], None)], CONC)
    judged, nxt = replay(CONC, {2: probe(2, [100.0] * 20), 4: bad})
    assert judged[4].status == "failed" and judged[4].reason == "point failed: server exited with code -9"
    assert nxt == 3
    res = search_result(CONC, replay(CONC, {2: probe(2, [100.0] * 20), 4: bad, 3: probe(3, [100.0] * 20)})[0])
    assert res["best"] == 3 and res["stopped"] == "failed at 4: point failed: server exited with code -9"


def test_an_open_loop_queue_that_never_drains_is_saturation() -> None:
    rate = SearchSpec("request_rate", 1.0, 8.0, {"ttft_ms": 5000})
    growing = probe(2.0, [100.0 + 200 * i for i in range(20)], rate)  # every request waits longer
    judged = replay(rate, {1.0: probe(1.0, [100.0] * 20, rate), 2.0: growing})[0]
    assert judged[2.0].status == "saturated" and "the queue never drained" in (judged[2.0].reason or "")
    assert judged[2.0].queue_growth is not None and judged[2.0].queue_growth > 3


def test_on_the_sim_a_probe_is_judged_on_the_modelled_clock() -> None:
    # wall clock says 5 ms (a sim at --time-scale 0.01); the sim's stamps say 800 ms: over a 500 ms bound
    stamped = [
        {**r, "sim_time": {"arrival_s": i, "first_token_s": i + 0.8, "finish_s": i + 1.0}}
        for i, r in enumerate(rows([5.0] * 10))
    ]
    p = measure_probe(2, [SeedRun("ok", None, stamped, None)], CONC)
    assert p.goodput == 0.0 and p.ttft_p50_s is not None and abs(p.ttft_p50_s - 0.8) < 1e-9
    assert next_value(CONC, {}) == 2
