"""The /metrics timeline against a crafted stdlib server (not the sim): watched fields only, tp rank 0 only,
cache_source split, rates per second, a 404 source asked once, every line flushed as it is written."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.engines import TIMELINE_WATCH
from harness.telemetry.timeline import (
    METRICS_TIMELINE,
    Watch,
    metrics_timeline,
    read_timeline,
    watched_values,
)

PAGE = """# TYPE sglang:evicted_tokens_total counter
sglang:evicted_tokens_total{model_name="m",tp_rank="0"} {ev}
sglang:evicted_tokens_total{model_name="m",tp_rank="1"} 999999
sglang:cached_tokens_total{cache_source="host",model_name="m"} 40.0
sglang:cached_tokens_total{cache_source="device",model_name="m"} 60.0
sglang:num_running_reqs{model_name="m",tp_rank="0"} 3
sglang:hicache_host_used_tokens{model_name="m",tp_rank="0"} 512
sglang:something_else_total 7
vllm:num_requests_waiting{model_name="m"} 2
"""


def test_watched_values_keep_rank_0_and_split_cached_tokens_by_tier():
    v = watched_values(PAGE.replace("{ev}", "100"), TIMELINE_WATCH)
    assert v == {"evicted_tokens": 100.0, "cached_host": 40.0, "cached_device": 60.0, "running": 3.0,
                 "host_used_tokens": 512.0, "queued": 2.0}  # fmt: skip


def test_every_engine_declares_its_own_names_and_the_registry_merges_them():
    from harness.engines import ADAPTERS

    assert TIMELINE_WATCH.counters["sglang:evicted_tokens_total"] == "evicted_tokens"
    assert TIMELINE_WATCH.gauges["vllm:num_requests_waiting"] == "queued"
    for ad in ADAPTERS.values():  # each name under the engine's own prefix, SGLang's also the sim's
        names = {*ad.timeline.counters, *ad.timeline.gauges, *ad.timeline.split}
        assert all(n.startswith(ad.name.replace("sim", "sglang") + ":") for n in names), ad.name
    assert TIMELINE_WATCH.counter_fields >= {"prompt_tokens", "preemptions", "cached_host", "cached_storage"}
    assert "running" not in TIMELINE_WATCH.counter_fields  # a gauge: no rate


def test_two_engines_naming_one_sample_as_two_fields_is_refused():
    with pytest.raises(ValueError, match="x:a_total"):
        Watch(counters={"x:a_total": "a"}).merged(Watch(counters={"x:a_total": "b"}))
    same = Watch(counters={"x:a_total": "a"}).merged(Watch(gauges={"y:b": "b"}))
    assert same.fields == {"x:a_total": "a", "y:b": "b"}


def test_a_timeline_of_a_crafted_server_has_values_and_rates(tmp_path):
    start = time.monotonic()

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path != "/metrics" or self.server.server_port == off.server_port:
                self.send_response(404)
                self.end_headers()
                return
            ev = int((time.monotonic() - start) * 1000)  # 1,000 evicted tokens per second
            body = PAGE.replace("{ev}", str(ev)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    on, off = ThreadingHTTPServer(("127.0.0.1", 0), H), ThreadingHTTPServer(("127.0.0.1", 0), H)
    for s in (on, off):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        sources = {
            "w0": f"http://127.0.0.1:{on.server_port}",
            "gateway": f"http://127.0.0.1:{off.server_port}",
        }
        with metrics_timeline(tmp_path, sources, 0.05, watch=TIMELINE_WATCH):
            time.sleep(1.2)  # >= 8 samples at 0.05 s even when a busy 2-core host delays ticks
    finally:
        for s in (on, off):
            s.shutdown()
    header, samples = read_timeline(tmp_path / METRICS_TIMELINE)
    assert header["interval_s"] == 0.05 and set(header["sources"]) == {"w0", "gateway"}
    gw = [s for s in samples if s["source"] == "gateway"]
    assert len(gw) == 1 and gw[0]["error"] == "HTTP 404"  # asked once
    w0 = [s for s in samples if s["source"] == "w0"]
    assert len(w0) >= 8 and all(s["values"]["running"] == 3.0 for s in w0)
    rates = [s["rates"]["evicted_tokens"] for s in w0[1:]]
    assert 700 < sorted(rates)[len(rates) // 2] < 1300, rates  # about 1,000 tokens/s
    assert [s["t_mono"] for s in w0] == sorted(s["t_mono"] for s in w0)
