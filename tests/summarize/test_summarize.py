"""Summaries from a capture built by hand (tests/helpers/summary_capture.py), figures worked out here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.summarize.summary import SCHEMA_VERSION, merge_seeds, summarize
from tests.helpers.summary_capture import T0, build, prefill, request, stamp, write_point


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> dict:
    root = build(tmp_path_factory.mktemp("cap") / "capture")
    return summarize([root])["l4"].to_json()


def _point(s: dict, exp: str, server: str, key: str) -> dict:
    return next(
        p for p in s["points"] if (p["experiment"], p["server"], p["point_key"]) == (exp, server, key)
    )


def test_top_level(summary: dict) -> None:
    assert summary["schema_version"] == SCHEMA_VERSION and summary["node"] == "l4"
    assert {"generated_at", "harness_version", "experiments", "points", "pairs", "problems"} <= set(summary)
    gsp = summary["experiments"]["gsp"]
    assert gsp["manifest"]["spec"]["workload"]["groups"] == 4
    assert gsp["servers"]["gpu"]["args"] == ["--max-total-tokens", "4096"]
    assert gsp["servers"]["gpu"]["pool"]["device_tokens"] == 4096
    assert gsp["servers"]["hicache"]["pool"]["host_tokens"] == 8192
    assert gsp["servers"]["gpu"]["log"]["counts"]["prefill"] == 12
    assert gsp["servers"]["gpu"]["log"]["counts"]["unknown"] == 1
    assert summary["experiments"]["mt"]["servers"]["lfu"]["args"][0] == "--radix-eviction-policy=lfu"
    assert len(summary["points"]) == 6
    json.dumps(summary)  # serializable as is


def test_verdicts_are_kept_with_their_thresholds(summary: dict) -> None:
    """The summary holds its verdicts and the thresholds they used; validate at those returns them as is."""
    from dataclasses import asdict

    from harness.verdicts import Thresholds, validate_summary

    assert summary["verdict_thresholds"] == asdict(Thresholds())
    out = validate_summary(summary)
    assert out["verdicts"] == "summary" and out["note"] is None
    assert [r["verdict"] for r in out["points"]] == [p["verdict"]["verdict"] for p in summary["points"]]
    assert out["pairs"] == summary["pairs"] and len(out["pairs"]) > 0


def test_seed_figures_worked_out(summary: dict) -> None:
    p = _point(summary, "gsp", "gpu", "groups=4")
    s0 = p["seeds"]["0"]["figures"]
    # TTFT 0.1, 0.2, 0.3, 0.4 s: median 0.25; linear p90 = 0.3 + 0.7 * 0.1; p99 = 0.3 + 0.97 * 0.1
    assert s0["ttft_median_s"] == pytest.approx(0.25)
    assert s0["ttft_p90_s"] == pytest.approx(0.37)
    assert s0["ttft_p99_s"] == pytest.approx(0.397)
    assert s0["itl_median_s"] == pytest.approx(0.015)  # gaps 10 ms and 20 ms in every request
    assert s0["itl_p99_s"] == pytest.approx(0.02)  # 8 gaps, four of 20 ms: p99 sits among them
    assert s0["e2e_median_s"] == pytest.approx(2.0)
    # 4 x 10 output and 4 x 100 prompt tokens over 2 s from first scheduled to last done
    assert s0["output_tok_s"] == pytest.approx(20.0) and s0["input_tok_s"] == pytest.approx(200.0)
    # usage: (0 + 80 + 80 + 40) / 400; log: 200 cached / (200 + 200); counters: (150 + 50) / 400
    assert s0["hit_rate_usage"] == pytest.approx(0.5)
    assert s0["hit_rate_log"] == pytest.approx(0.5)
    assert s0["hit_rate_counters"] == pytest.approx(0.5)
    assert s0["hit_rate_disagree"] is False and s0["hit_rate_spread_points"] == pytest.approx(0.0)
    assert s0["hit_rate_timings"] is None and s0["hit_rate_sources"] == 3  # SGLang gives no timings
    assert s0["counter_cached_device_tokens"] == 150 and s0["counter_cached_host_tokens"] == 50
    # positions: 0 → requests 0 and 3 (0 + 40) / 200; 1 → 80 / 100; 2 → 80 / 100
    assert s0["hit_rate_usage_by_position"] == pytest.approx({"0": 0.2, "1": 0.8, "2": 0.8})
    assert s0["log_prefill_lines"] == 4 and s0["pool_device_tokens"] == 4096
    s1 = p["seeds"]["1"]["figures"]
    # usage 270/400 = 0.675 = log 270/(270+130); counters (210-10)/(1400-1000) = 0.5 → 17.5 points apart
    assert s1["hit_rate_usage"] == pytest.approx(0.675) and s1["hit_rate_log"] == pytest.approx(0.675)
    assert s1["hit_rate_counters"] == pytest.approx(0.5)
    assert s1["hit_rate_spread_points"] == pytest.approx(17.5) and s1["hit_rate_disagree"] is True


def test_median_and_spread_over_seeds(summary: dict) -> None:
    p = _point(summary, "gsp", "gpu", "groups=4")
    assert p["status"] == "ok" and p["sweep"] == {"groups": 4}
    assert p["median"]["ttft_median_s"] == pytest.approx(0.30)  # seeds 0.25 and 0.35
    assert p["spread"]["ttft_median_s"] == pytest.approx([0.25, 0.35])
    assert p["median"]["hit_rate_usage"] == pytest.approx((0.5 + 0.675) / 2)
    assert p["spread"]["hit_rate_usage"] == pytest.approx([0.5, 0.675])
    assert p["median"]["hit_rate_disagree"] is True  # any seed disagreeing flags the point
    assert p["prompt_tokens_to_keep"] == 4 * 80
    assert _point(summary, "gsp", "gpu", "groups=1")["prompt_tokens_to_keep"] == 80
    # evidence: verbatim lines of the first seed, cold line first, then lines with cached tokens
    assert p["evidence"][0] == prefill(T0 + 1, 100, 0)
    assert p["evidence"][1] == prefill(T0 + 2, 20, 80)


def test_partial_and_missing_points_not_averaged_in(summary: dict) -> None:
    p = _point(summary, "gsp", "hicache", "groups=4")
    assert p["status"] == "partial" and p["seed_status"] == {"0": "ok", "1": "partial"}
    assert p["median"]["ttft_median_s"] == pytest.approx(0.1)  # seed 1's 9 s is kept, not averaged in
    assert p["seeds"]["1"]["figures"]["ttft_median_s"] == pytest.approx(9.0)
    assert p["seeds"]["1"]["figures"]["failures"] == 1
    assert p["seeds"]["1"]["figures"]["errors"] == {"timeout-total": 1}
    missing = _point(summary, "gsp", "hicache", "groups=1")
    assert missing["status"] == "missing" and missing["median_over"] == "all seeds (none ok)"
    assert missing["seeds"]["0"]["figures"]["requests"] == 1  # the cut line is skipped
    reasons = {
        Path(x["path"]).name: x["reason"] for x in summary["problems"] if "groups=1,seed=0" in x["path"]
    }
    assert "1 unreadable lines" in reasons["requests.jsonl"] and "missing" in reasons["point.json"]


def test_multi_turn_hit_rate_per_turn(summary: dict) -> None:
    lru = _point(summary, "mt", "lru", "default")
    lfu = _point(summary, "mt", "lfu", "default")
    # prompts 50, 100, 150 per session; cached 0, 50, 100 (lru) / 140 (lfu)
    assert lru["median"]["hit_rate_usage_by_turn"] == pytest.approx({"0": 0.0, "1": 0.5, "2": 100 / 150})
    assert lfu["median"]["hit_rate_usage_by_turn"]["2"] == pytest.approx(140 / 150)
    assert lru["median"]["hit_rate_usage"] == pytest.approx(300 / 600)
    assert lru["median"]["ttft_median_s_by_turn"] == pytest.approx({"0": 0.1, "1": 0.2, "2": 0.3})
    assert lru["median"]["hit_rate_log"] is None  # no server.log: reported, not invented
    assert lru["workload_kind"] == "multi-turn"


def test_telemetry_and_verdicts(summary: dict) -> None:
    no_tel = _point(summary, "gsp", "gpu", "groups=1")
    assert no_tel["telemetry"] == {"status": "sim server: no GPU"}
    assert no_tel["verdict"]["verdict"] == "no-telemetry"
    p = _point(summary, "gsp", "gpu", "groups=4")
    assert len(p["clock_series"]["0"]["t_s"]) == 20 and len(p["clock_series"]["1"]["t_s"]) == 10
    assert p["clock_series"]["0"]["sm_clock_mhz"][:2] == [1800, 1810]
    assert p["telemetry"]["n_samples"] == 30  # both seeds' samples
    # 10 x 1800, 10 x 1810, 5 x 1900, 5 x 1910: median of all busy samples
    assert p["telemetry"]["busy_median_sm_clock_mhz"] == pytest.approx(1810)
    assert p["seeds"]["1"]["telemetry"]["busy_median_sm_clock_mhz"] == pytest.approx(1905)
    assert p["verdict"]["verdict"] == "ok"
    assert any(pr["point_key"] == "groups=4" for pr in summary["pairs"])


def test_merge_seeds() -> None:
    m, s = merge_seeds(
        [
            {"a": 1, "f": False, "d": {"x": 1.0}, "n": None},
            {"a": 3, "f": True, "d": {"x": 3.0}},
            {"a": 2, "f": False, "d": {}},
        ]
    )
    assert m == {"a": 2.0, "f": True, "d": {"x": 2.0}, "n": None}
    assert s == {"a": [1.0, 3.0], "d": {"x": [1.0, 3.0]}}


def test_points_sharing_one_second_are_cut_at_their_flush_lines(tmp_path: Path) -> None:
    exp = tmp_path / "n1" / "fast"
    srv = exp / "sim"
    srv.mkdir(parents=True)
    (exp / "manifest.json").write_text(json.dumps({"experiment": "fast", "node": "n1"}))
    t = T0 + 0.1
    log = [
        f"{stamp(t)} Cache flushed successfully!",
        prefill(t, 100, 0),
        prefill(t, 0, 100),
        f"{stamp(t)} Cache flushed successfully!",
        prefill(t, 50, 50),
        prefill(t, 50, 50),
    ]
    (srv / "server.log").write_text("\n".join(log) + "\n")
    for seed, (start, cached) in enumerate(((t, 100), (t + 0.4, 100))):
        d = write_point(srv, {}, seed, [request(0, prompt=200, cached=cached, ttft=0.1)], start=start)
        point = json.loads((d / "point.json").read_text())
        point["end_wall"] = start + 0.3
        (d / "point.json").write_text(json.dumps(point))
    p = summarize([tmp_path])["n1"].to_json()["points"][0]
    assert p["seeds"]["0"]["figures"]["hit_rate_log"] == pytest.approx(0.5)  # 100 / 200
    assert p["seeds"]["1"]["figures"]["hit_rate_log"] == pytest.approx(0.5)  # 100 / 200
    assert p["seeds"]["0"]["figures"]["log_prefill_lines"] == 2
    assert "flush line" in p["seeds"]["0"]["figures"]["log_slice"]


def test_log_written_in_another_time_zone_is_shifted(tmp_path: Path) -> None:
    exp = tmp_path / "n1" / "tz"
    srv = exp / "sim"
    srv.mkdir(parents=True)
    (exp / "manifest.json").write_text(json.dumps({"experiment": "tz", "node": "n1"}))
    (srv / "server.log").write_text(prefill(T0 + 3600 + 2, 30, 70) + "\n")
    write_point(srv, {}, 0, [request(0, prompt=100, cached=70, ttft=0.1)], start=T0)
    s = summarize([tmp_path])["n1"].to_json()
    assert s["experiments"]["tz"]["servers"]["sim"]["log"]["time_shift_s"] == -3600
    assert s["points"][0]["median"]["hit_rate_log"] == pytest.approx(0.7)


def test_hit_rate_from_llama_cpp_timings(tmp_path: Path) -> None:
    """llama.cpp's per-request timings are a hit-rate source of their own, checked against usage."""
    from harness.report import markdown

    exp = tmp_path / "cpu" / "llama"
    srv = exp / "llama-cpu"
    srv.mkdir(parents=True)
    (exp / "manifest.json").write_text(json.dumps({"experiment": "llama", "node": "cpu"}))

    def rec(i: int, cached: int, cache_n: int | None = None, prompt_n: int | None = None, **kw) -> dict:
        cache_n = cached if cache_n is None else cache_n
        prompt_n = 100 - cache_n if prompt_n is None else prompt_n
        timings = {"cache_n": cache_n, "prompt_n": prompt_n, "prompt_ms": 5.0}
        return request(i, prompt=100, cached=cached, ttft=0.1, position=i, timings=timings, **kw)

    # seed 0: usage (0 + 80 + 80 + 40) / 400 = 0.5; timings the same request by request. A request
    # without timings and a failed one with timings are left out of the timings sum.
    no_timings = {**request(4, prompt=100, cached=0, ttft=0.1), "server_timings": None}
    failed = rec(5, 100, ok=False)
    write_point(srv, {}, 0, [rec(0, 0), rec(1, 80), rec(2, 80), rec(3, 40), failed], start=T0)
    d0 = srv / "seed=0"
    with open(d0 / "requests.jsonl", "a") as f:
        f.write(json.dumps({**no_timings, "seed": 0}) + "\n")
    # seed 1: usage (0 + 90 + 90 + 90) / 400 = 0.675; timings (0 + 50 + 50 + 50) / (100 + 3 x 100) = 0.375
    write_point(
        srv,
        {},
        1,
        [rec(0, 0), rec(1, 90, cache_n=50), rec(2, 90, cache_n=50), rec(3, 90, cache_n=50)],
        start=T0 + 20,
    )
    s = summarize([tmp_path])["cpu"].to_json()
    (p,) = s["points"]
    f0, f1 = p["seeds"]["0"]["figures"], p["seeds"]["1"]["figures"]
    assert f0["hit_rate_usage"] == pytest.approx(200 / 500)  # the extra request counts for usage
    assert f0["hit_rate_timings"] == pytest.approx(200 / 400)
    assert f0["hit_rate_sources"] == 2  # usage and timings; no log, no counters here
    assert f0["hit_rate_spread_points"] == pytest.approx(10.0) and f0["hit_rate_disagree"] is True
    assert f1["hit_rate_usage"] == pytest.approx(0.675) and f1["hit_rate_timings"] == pytest.approx(0.375)
    assert f1["hit_rate_spread_points"] == pytest.approx(30.0) and f1["hit_rate_disagree"] is True
    assert p["median"]["hit_rate_timings"] == pytest.approx((0.5 + 0.375) / 2)
    assert p["spread"]["hit_rate_timings"] == pytest.approx([0.375, 0.5])
    table = "\n".join(markdown.sources_table(s["points"]))
    assert (
        "| llama-cpu | default | 53.8% [40.0%–67.5%] | 43.8% | n/a | n/a | n/a | 20.00 | disagree | ok |"
        in table
    )


def test_timings_agreeing_with_usage_are_not_flagged(tmp_path: Path) -> None:
    exp = tmp_path / "cpu" / "llama"
    srv = exp / "llama-cpu"
    srv.mkdir(parents=True)
    (exp / "manifest.json").write_text(json.dumps({"experiment": "llama", "node": "cpu"}))
    rows = [
        request(i, prompt=100, cached=c, ttft=0.1, timings={"cache_n": c, "prompt_n": 100 - c})
        for i, c in enumerate((0, 80, 80, 40))
    ]
    write_point(srv, {}, 0, rows, start=T0)
    f = summarize([tmp_path])["cpu"].to_json()["points"][0]["seeds"]["0"]["figures"]
    assert f["hit_rate_usage"] == f["hit_rate_timings"] == pytest.approx(0.5)
    assert f["hit_rate_sources"] == 2 and f["hit_rate_spread_points"] == 0 and f["hit_rate_disagree"] is False


def test_cli_nodes_outputs_and_errors(tmp_path: Path, capsys) -> None:
    build(tmp_path / "a" / "capture", "l4")
    build(tmp_path / "b" / "capture", "gb10")
    out = tmp_path / "summaries"
    # not-ok points (partial, missing) and disagreeing sources are flagged: exit 1, files written
    assert (
        main(["summarize", str(tmp_path / "a" / "capture"), str(tmp_path / "b" / "capture"), "-o", str(out)])
        == 1
    )
    assert sorted(p.name for p in out.iterdir()) == ["gb10.json", "l4.json"]
    assert json.loads((out / "gb10.json").read_text())["node"] == "gb10"
    err = capsys.readouterr().err
    assert "skipped:" in err and "requests.jsonl" in err and "Traceback" not in err
    assert (
        main(
            [
                "summarize",
                str(tmp_path / "a" / "capture"),
                str(tmp_path / "b" / "capture"),
                "-o",
                str(tmp_path / "x.json"),
            ]
        )
        == 2
    )
    assert "several nodes" in capsys.readouterr().err
    assert main(["summarize", str(tmp_path / "a" / "capture"), "-o", str(tmp_path / "l4.json")]) == 1
    assert json.loads((tmp_path / "l4.json").read_text())["node"] == "l4"
    assert main(["summarize", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["summarize", str(empty), "-o", str(tmp_path / "e")]) == 2


def test_the_bench_time_scale_is_a_sim_servers_only() -> None:
    """No --time-scale in server_info or args: the manifest's bench.time_scale, for a server whose launch or
    engine bench paces (the sim), never a real server's."""
    from harness.summarize.summary import _time_scale

    manifest = {"bench": {"time_scale": 0.05}}
    for man in ({"launch": "sim"}, {"launch": "command", "engine": "sim"}):
        assert _time_scale(None, [], {"s": man}, "s", manifest) == 0.05
    for man in ({"launch": "sglang"}, {"launch": "command"}, {"launch": ["sim"]}, "sim"):
        assert _time_scale(None, [], {"s": man}, "s", manifest) is None
    assert _time_scale(None, ["--time-scale", "0.5"], {"s": {"launch": "sglang"}}, "s", manifest) == 0.5
