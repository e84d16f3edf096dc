"""One real SGLang 0.5.23 server (GPU-only pool of 1,200 tokens, lru) holds every SGLang-facing part to it:
flush and its refusal, /metrics names and counter deltas, meta_info and chat usage, every log line on these
paths, the server_info facts the summary uses, and `harness run` end to end with its three hit-rate sources.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers import specs
from tests.helpers.cli import harness
from tests.real_sglang.agreement import MULTI_8X4, agree_at_c1, agree_within_spread
from tests.real_sglang.conftest import REPO, RunningSglang, start_sglang

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(1200)]
# --sleep-on-idle: an idle scheduler sleeps on its sockets and wakes on a burst's first request, as a quiet
# GPU host's spinning one sees it; on two loaded cores a spinning scheduler loses its core for whole time
# slices and finds a burst's requests together (tests/real_sglang/agreement.py, FORWARD_SLEEP_S)
ARGS = ["--max-total-tokens", "1200", "--enable-cache-report", "--enable-metrics", "--sleep-on-idle"]


@pytest.fixture(scope="module")
def server(sglang_setup, tmp_path_factory):
    yield from start_sglang("gpu-only", ARGS, sglang_setup, tmp_path_factory.mktemp("sglang-gpu-only"))


def _flush(server: RunningSglang, **kw) -> tuple[bool | None, str | None]:
    from harness.servers.control import flush_cache

    return flush_cache(server.url, paths=server.proc.reset_paths, **kw)


def test_the_cpu_launch_line_is_sglangs_own_server_with_the_cpu_flags(server: RunningSglang) -> None:
    argv = server.proc.display_argv()
    assert argv[1:3] == ["-m", "sglang.launch_server"] and "sglang-cpu-0.5.23" in argv[0]
    for flag in ("--device", "--attention-backend", "--sampling-backend", "--disable-overlap-schedule"):
        assert flag in argv, argv
    assert "--hicache-io-backend" not in argv  # HiCache flags only where HiCache is on
    assert server.proc.profile.env["SGLANG_USE_CPU_ENGINE"] == "1"


def test_flush_resets_the_cache_and_the_next_request_finds_nothing(server: RunningSglang) -> None:
    ids = list(range(1000, 1300))
    server.generate(ids)
    again = server.generate(ids)["meta_info"]
    assert again["cached_tokens"] == 299  # all but the last token, which is always computed
    assert again["cached_tokens_details"] == {"device": 299, "host": 0}
    assert _flush(server) == (True, None)
    after = server.generate(ids)["meta_info"]
    assert after["cached_tokens"] == 0 and after["cached_tokens_details"] is None
    assert "Cache flushed successfully!" in server.log.read_text()


def test_a_flush_refused_while_a_request_runs_is_reported_not_retried_forever(server: RunningSglang) -> None:
    done = threading.Event()

    def long_request() -> None:
        try:  # 100 + 1,000 tokens: the most the 1,200-token pool holds, seconds of decoding even on a quiet CPU
            server.generate(list(range(2000, 2100)), max_new_tokens=1000)
        finally:
            done.set()

    t = threading.Thread(target=long_request, daemon=True)
    t.start()
    time.sleep(0.3)  # the request is decoding
    assert not done.is_set(), "the long request ended before the flush could be refused"
    t0 = time.monotonic()
    flushed, note = _flush(server, tries=3, wait_s=0.1)
    took = time.monotonic() - t0
    assert not done.is_set(), f"the long request ended during the flush's {took:.2f} s: nothing was refused"
    assert flushed is False and note is not None and "not flushed after 3 tries" in note, note
    assert took < 10, took
    t.join(120)
    assert "Cache not flushed because there are pending requests" in server.log.read_text()


def test_metrics_counter_deltas_equal_meta_infos_cached_tokens(server: RunningSglang) -> None:
    from harness.metrics import SGLANG_NAMES, counter_deltas, parse_prometheus

    def scrape():
        return parse_prometheus(httpx.get(server.url + "/metrics", timeout=10).text)

    assert _flush(server)[0] is True
    before = scrape()
    ids = list(range(3000, 3200))
    cached = [server.generate(ids + [3500 + i])["meta_info"]["cached_tokens"] for i in range(3)]
    after = scrape()
    for name in ("sglang:cached_tokens_total", "sglang:prompt_tokens_total", "sglang:cache_hit_rate"):
        assert after.get(name) is not None or any(k.startswith(name) for k in after.series), name
    d = counter_deltas(before, after)
    assert d.total(SGLANG_NAMES["cached_tokens"]) == sum(cached) == 400  # 0, then 200 twice
    assert d.total(SGLANG_NAMES["prompt_tokens"]) == 3 * 201


def test_chat_usage_reports_cached_tokens_with_enable_cache_report(server: RunningSglang) -> None:
    msg = {"model": "default", "messages": [{"role": "user", "content": "hello " * 150}], "max_tokens": 2}
    for _ in range(2):
        r = httpx.post(server.url + "/v1/chat/completions", json=msg, timeout=120)
        r.raise_for_status()
    usage = r.json()["usage"]
    assert usage["prompt_tokens"] > 100
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - 1


def test_every_line_sglang_printed_on_these_paths_is_parsed(server: RunningSglang) -> None:
    from harness.engines.logs import parse_file
    from harness.serverlog.totals import pool_sizes

    text = server.log.read_text()
    parsed = parse_file(server.log)
    prefill_lines = [ln for ln in text.splitlines() if "Prefill batch" in ln]
    assert prefill_lines, "no prefill line in the log"
    prefills = parsed.of("prefill")
    assert len(prefills) == len(prefill_lines), [ln for ln in prefill_lines][:3]
    assert {(r.fields.get("graph_kind"), r.fields.get("graph")) for r in prefills} == {("cpu", False)}
    pools = pool_sizes(parsed.records)
    assert pools["device_tokens"] == 1200, pools
    assert parsed.of("ready") and parsed.of("flush")


def test_server_info_gives_the_facts_the_summary_and_the_prediction_use(server: RunningSglang) -> None:
    from harness.summarize.prediction import engine_from_info

    info = json.loads((server.proc.server_dir / "server_info.json").read_text())
    assert info["version"] == "0.5.23"
    assert info["max_total_num_tokens"] == 1200 and info["page_size"] == 1
    assert info["radix_eviction_policy"] == "lru" and info["enable_hierarchical_cache"] is False
    cfg = engine_from_info(info)
    assert not isinstance(cfg, str), cfg
    assert cfg.pool_tokens == 1200 and cfg.policy == "lru" and not cfg.hicache


def _spec(tmp: Path, concurrency: int) -> Path:
    text = (REPO / "workloads" / "sglang-cpu" / "working-set.yaml").read_text()
    text = text.replace("name: sglang-working-set", f"name: ws-c{concurrency}")
    text = text.replace("concurrency: 4", f"concurrency: {concurrency}").replace(
        "seeds: [0, 1, 2]", "seeds: [0]"
    )
    path = tmp / f"ws-c{concurrency}.yaml"
    path.write_text(text)
    return path


def test_harness_run_end_to_end_three_sources_agree(server: RunningSglang, tmp_path: Path) -> None:
    capture, summaries = tmp_path / "capture", tmp_path / "summaries"
    for c in (1, 4):
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(_spec(tmp_path, c)),
            "--server-url",
            server.url,
            "--server",
            "gpu-only",
            "--node",
            "sg",
            "--capture",
            str(capture),
            "--only",
            "groups=2",
            "--quiet",
            "--server-log",
            str(server.log),
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    r = harness("summarize", str(capture / "sg"), "-o", str(summaries), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads((summaries / "sg.json").read_text())
    points = summary["points"]
    assert len(points) == 2
    for p in points:
        m = p["median"]
        rates = [m["hit_rate_usage"], m["hit_rate_counters"], m["hit_rate_log"]]
        assert None not in rates and max(rates) - min(rates) <= 0.01, (p["experiment"], rates)
        assert p["status"] == "ok" and p["cache_state"] == "cold", p
        if p["experiment"] == "ws-c1":  # in send order at concurrency 1 the replay is exact
            assert p["predicted_hit_rate"] == pytest.approx(m["hit_rate_usage"], abs=1e-9), p["prediction"]


# ------------------------------------------------------------------ the sim against this server
SHARED = specs.shared_prefix(groups=2, system_prompt_tokens=256, question_tokens=16, output_tokens=16)


def test_the_sim_caches_what_sglang_cached_request_by_request_at_c1(
    server: RunningSglang, tmp_path: Path
) -> None:
    agree_at_c1(server, ARGS, tmp_path, {"shared": SHARED, "multi": MULTI_8X4})


def test_the_sim_lies_within_sglangs_spread_at_c4_and_c8(server: RunningSglang, tmp_path: Path) -> None:
    agree_within_spread(server, ARGS, tmp_path, {"shared": (SHARED, [4, 8]), "multi": (MULTI_8X4, [4])})
