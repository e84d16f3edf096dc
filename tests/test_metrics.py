"""Prometheus text parsing and counter deltas over a point."""

from __future__ import annotations

import pytest

from harness import metrics
from harness.engines import counters

BEFORE = """\
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen"} 1000.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="qwen"} 400.0
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="qwen"} 10.0
sglang:num_requests_created{model_name="qwen"} 1.7e9
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.5
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="qwen"} 0.9
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen"} 3.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen"} 10.0
sglang:time_to_first_token_seconds_count{model_name="qwen"} 10.0
sglang:time_to_first_token_seconds_sum{model_name="qwen"} 2.5
"""

AFTER = """\
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen"} 3000.0
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="qwen"} 1400.0
sglang:cached_tokens_total{cache_source="host",model_name="qwen"} 250.0
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="qwen"} 30.0
sglang:num_requests_created{model_name="qwen"} 1.7e9
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.1
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="qwen"} 0.2
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen"} 13.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen"} 30.0
sglang:time_to_first_token_seconds_count{model_name="qwen"} 30.0
sglang:time_to_first_token_seconds_sum{model_name="qwen"} 4.5
"""


def test_parse_labels_types_and_escapes() -> None:
    s = metrics.parse_prometheus(
        BEFORE + 'odd_total{path="a\\"b,c",x="\\\\"} 7 1700000000000\nbroken line here\nbad{x=1} 3\n'
    )
    assert s.get("sglang:prompt_tokens_total") == 1000.0
    assert s.get("sglang:cached_tokens_total", cache_source="device") == 400.0
    assert s.get("sglang:cached_tokens_total", cache_source="host") is None
    assert s.values[("odd_total", (("path", 'a"b,c'), ("x", "\\")))] == 7.0
    assert s.bad_lines == 2
    assert s.is_counter("sglang:prompt_tokens_total")
    assert not s.is_counter("sglang:token_usage")
    assert s.is_counter("sglang:time_to_first_token_seconds_count")
    assert not s.is_counter("sglang:num_requests_created")


def test_counter_deltas_and_first_increment_counts_from_zero() -> None:
    d = metrics.counter_deltas(metrics.parse_prometheus(BEFORE), metrics.parse_prometheus(AFTER))
    assert d.total("sglang:prompt_tokens_total") == 2000.0
    assert d.total("sglang:cached_tokens_total", cache_source="device") == 1000.0
    # the host series appears only after its first increment: it counts from zero
    assert d.total("sglang:cached_tokens_total", cache_source="host") == 250.0
    assert d.appeared == ['sglang:cached_tokens_total{cache_source="host",model_name="qwen"}']
    assert d.total("sglang:time_to_first_token_seconds_count") == 20.0
    assert d.total("sglang:token_usage") is None  # gauges give no delta
    assert not d.reset
    cf = counters.cache_figures(d)
    assert cf["prompt_tokens"] == 2000.0 and cf["cached_tokens"] == 1250.0
    assert cf["hit_rate"] == pytest.approx(1250 / 2000)
    assert cf["cached_by_source"] == {"device": 1000.0, "host": 250.0}
    assert cf["requests"] == 20.0


def test_cached_counter_absent_everywhere_means_zero_hits() -> None:
    before = metrics.parse_prometheus("sglang:prompt_tokens_total 0\n")
    after = metrics.parse_prometheus("sglang:prompt_tokens_total 500\n")
    cf = counters.cache_figures(metrics.counter_deltas(before, after))
    assert cf["cached_tokens"] == 0.0 and cf["hit_rate"] == 0.0


def test_counter_going_down_is_flagged() -> None:
    before = metrics.parse_prometheus(AFTER)
    after = metrics.parse_prometheus(BEFORE)  # a restart between the scrapes
    d = metrics.counter_deltas(before, after)
    assert d.reset
    assert 'sglang:prompt_tokens_total{model_name="qwen"}' in d.went_down
    assert 'sglang:cached_tokens_total{cache_source="host",model_name="qwen"}' in d.vanished
    assert d.total("sglang:prompt_tokens_total") is None
    cf = counters.cache_figures(d)
    assert cf["hit_rate"] is None and cf["reset"]
    assert d.to_dict()["deltas"]['sglang:prompt_tokens_total{model_name="qwen"}'] is None


def test_tensor_parallel_ranks_count_once() -> None:
    before = metrics.parse_prometheus(
        '# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{tp_rank="0"} 0\nsglang:prompt_tokens_total{tp_rank="1"} 0\n'
    )
    after = metrics.parse_prometheus(
        '# TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{tp_rank="0"} 100\nsglang:prompt_tokens_total{tp_rank="1"} 100\n'
    )
    assert metrics.counter_deltas(before, after).total("sglang:prompt_tokens_total") == 100.0
