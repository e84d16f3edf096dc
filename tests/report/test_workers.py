"""The report's per-worker table: one row per worker of a replicas point and an `all` row with its skew."""

from __future__ import annotations

from typing import Any

from harness.report.workers import worker_lines, worker_table


def _point(server: str, figures: dict[str, Any]) -> dict[str, Any]:
    return {
        "experiment": "x",
        "server": server,
        "sweep": {},
        "point_key": "default",
        "status": "ok",
        "median": figures,
        "seeds": {"0": {"status": "ok", "figures": figures}},
    }


def _worker(requests: int, rate: float, share: float, prefill: int) -> dict[str, Any]:
    return {
        "requests": requests,
        "hit_rate_usage": rate,
        "hit_rate_log": rate,
        "hit_rate_counters": rate,
        "prefill_share": share,
        "prefill_tokens": prefill,
        "ttft_p50_s": 0.03,
        "ttft_p99_s": 0.13,
        "modelled_ttft_p50_ms": 873.4,
        "cached_storage_tokens": 512,
        "storage_hits_cross_replica": 2,
    }


def test_a_row_per_worker_the_skew_note_on_the_busiest_and_an_all_row():
    skewed = {
        "hit_rate_usage": 0.38,
        "hit_rate_log": 0.38,
        "hit_rate_counters": 0.379,
        "ttft_median_s": 0.05,
        "ttft_p99_s": 0.2,
        "load_skew": 1.9,
        "load_skew_worker": "w0",
        "load_skew_note": "load-skew: w0 did 1.90x the mean prefill work",
        "attribution_agrees": False,
        "attribution_mismatch": "w1",
        "storage_hits_cross_replica": 2,
        "workers": {"w1": _worker(10, 0.1, 0.05, 3894), "w0": _worker(54, 0.4, 0.95, 80342)},
    }
    pts = [_point("cache_aware", skewed), _point("single", {"hit_rate_usage": 0.5})]
    t = worker_table(pts)
    assert t is not None and t.kind == "workers"
    texts = t.texts()
    assert [r[2] for r in texts] == ["w0", "w1", "all"]  # the single-server point has no rows
    w0, w1, agg = texts
    assert w0[3:8] == ["54", "40.0% / 40.0% / 40.0%", "95.0%", "80,342", "30 / 130"]
    assert w0[8:11] == ["873", "- / 512", "2"]
    assert w0[11] == "load-skew: w0 did 1.90x the mean prefill work" and w1[11] == ""
    assert agg[3] == "64" and agg[6] == "84,236" and agg[4] == "38.0% / 38.0% / 37.9%"
    assert agg[11] == "load skew 1.90x; attribution differs: w1"
    lines = worker_lines(pts)
    assert lines[0].startswith("| server | point | worker |") and len(lines) == 2 + 3


def test_no_table_without_a_replicas_point():
    pts = [_point("single", {"hit_rate_usage": 0.5, "workers": {}})]
    assert worker_table(pts) is None and worker_lines(pts) == []


def test_the_workers_chart_is_drawn_for_replicas_points_only(tmp_path):
    from harness.report.charts import workers

    summary = {"schema_version": 2, "node": "n", "experiments": {"x": {"servers": {}}}, "points": []}
    pts = [
        _point(
            "rr", {"workers": {"w0": _worker(32, 0.18, 0.49, 27715), "w1": _worker(32, 0.15, 0.51, 28739)}}
        )
    ]
    png = workers(summary, "x", pts, tmp_path / "w.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert workers(summary, "x", [_point("single", {"hit_rate_usage": 0.5})], tmp_path / "n.png") is None
    assert not (tmp_path / "n.png").exists()
