"""The real-server checks on hand-made records: each broken promise is caught and named."""

from __future__ import annotations

import pytest

from harness.realserver.checks import check_records

pytestmark = pytest.mark.real_server  # no build needed


def _rec(index, *, position, prompt, cached, ttft_s, prompt_ms, cache_n=None, prompt_n=None, ok=True):
    cache_n = cached if cache_n is None else cache_n
    prompt_n = prompt - cache_n if prompt_n is None else prompt_n
    return {
        "index": index,
        "ok": ok,
        "position": position,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "ttft_sent_s": ttft_s,
        "server_timings": {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms},
    }


def test_a_consistent_run_passes_with_its_figures():
    rows = [
        _rec(0, position=0, prompt=400, cached=3, ttft_s=0.120, prompt_ms=100.0),
        _rec(1, position=1, prompt=400, cached=380, ttft_s=0.030, prompt_ms=10.0),
        _rec(2, position=1, prompt=400, cached=380, ttft_s=0.0105, prompt_ms=11.2),  # within the ms rounding
        {"index": 3, "ok": False, "error_kind": "timeout-total"},
    ]
    c = check_records(rows)
    assert c.passed, c.problems()
    assert (c.requests, c.ok, c.with_timings) == (4, 3, 3)
    assert c.gap_ms_median == 20.0 and round(c.gap_ms_min, 6) == -0.7
    assert c.hit_rate_usage == c.hit_rate_timings == (3 + 380 + 380) / 1200
    assert c.hit_rate_usage_first == 3 / 400 and c.hit_rate_usage_later == 760 / 800
    assert c.hit_rate_by_position == {"0": 3 / 400, "1": 760 / 800}


def test_each_broken_promise_is_named():
    rows = [
        _rec(0, position=0, prompt=400, cached=0, ttft_s=0.050, prompt_ms=80.0),  # TTFT below prompt time
        _rec(
            1, position=1, prompt=400, cached=380, cache_n=300, ttft_s=0.2, prompt_ms=10.0
        ),  # usage != timings
        _rec(
            2, position=1, prompt=400, cached=200, prompt_n=100, ttft_s=0.2, prompt_ms=10.0
        ),  # tokens don't add up
    ]
    c = check_records(rows)
    assert not c.passed
    assert c.ttft_below_prompt_ms == [0]
    assert c.cached_mismatch == [1]
    assert c.prompt_mismatch == [2]
    text = "\n".join(c.problems())
    assert "TTFT below server prompt_ms" in text and "cache_n" in text and "hit rate from usage" in text


def test_records_without_timings_fail_the_run():
    rows = [
        {"index": 0, "ok": True, "position": 0, "prompt_tokens": 10, "cached_tokens": 0, "ttft_sent_s": 0.1}
    ]
    c = check_records(rows)
    assert c.with_timings == 0 and "lack server timings" in c.problems()[0]
