"""A point end to end on real servers (the sim; the standard-library server of tests/helpers): warm-up
kept out of every figure, an SGLang abort stream's records and point status, goodput at two SLOs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.capture import experiment_dir, read_jsonl
from harness.capture.manifest import write_manifest
from harness.capture.redact import spec_redactor
from harness.spec import load_spec
from harness.summarize.summary import summarize
from harness.sweep.attach import run_points
from tests.helpers import specs
from tests.helpers.procs import STDLIB_SERVER, ScriptServer, SimProc
from tests.helpers.specs import shared_prefix

pytestmark = pytest.mark.slow
FAST = ("--card-profile", "tiny-test", "--time-scale", "0.05")


def write_spec(folder: Path, name: str, **over) -> Path:
    wl = shared_prefix(groups=3, system_prompt_tokens=32, question_tokens=4, output_tokens=16)
    timeouts = {"connect": 5, "first_token": 10, "total": 20}
    return specs.write_spec(
        folder, name, **{"workload": wl, "concurrency": 4, "seeds": [0], "timeouts": timeouts, **over}
    )


def run(spec_path: Path, url: str, cap: Path):
    spec = load_spec(spec_path)
    write_manifest(experiment_dir(cap, "n", spec.name), spec, "n", spec_redactor([spec]))
    rec = run_points(spec, base_url=url, server_name="s", node="n", capture_root=cap)[0]
    pdir = cap / "n" / spec.name / "s" / "seed=0"
    rows, bad = read_jsonl(pdir / "requests.jsonl")
    assert bad == 0
    return rec, rows, json.loads((pdir / "point.json").read_text())


@pytest.fixture
def sim(tmp_path):
    p = SimProc(tmp_path, *FAST)
    yield p
    p.stop()


def test_warmup_requests_are_recorded_apart_and_in_no_figure(sim, tmp_path):
    cap = tmp_path / "cap"
    rec, rows, point = run(write_spec(tmp_path, "warm", warmup_requests=5), sim.url, cap)
    warm = [r for r in rows if r["warmup"]]
    measured = [r for r in rows if not r["warmup"]]
    assert len(warm) == 5 and len(measured) == 12 and all(r["ok"] for r in rows)
    assert point["requests_warmup"] == 5 and point["requests_ok"] == 12 and point["status"] == "ok"
    assert not {r["prompt_sha"] for r in warm} & {r["prompt_sha"] for r in measured}  # other prompt text
    assert max(r["done_mono"] for r in warm) < point["start_mono"]  # before the point's window and flush
    fig = summarize([cap / "n" / "warm"])["n"].to_json()["points"][0]["seeds"]["0"]["figures"]
    assert fig["requests"] == 12 and fig["ok"] == 12
    assert fig["output_tokens"] == 12 * 16


def test_goodput_at_two_slos_on_the_sim(sim, tmp_path):
    cap = tmp_path / "cap"
    _, rows, _ = run(write_spec(tmp_path, "loose", slo={"ttft_ms": 60000, "e2e_ms": 60000}), sim.url, cap)
    ttfts = sorted(r["ttft_s"] for r in rows)
    bound_ms = ttfts[len(ttfts) // 2] * 1000  # the first run's median TTFT: this run's count is checked
    run(write_spec(tmp_path, "tight", slo={"ttft_ms": bound_ms}), sim.url, cap)
    s = summarize([cap / "n" / "loose", cap / "n" / "tight"])["n"].to_json()
    by = {p["experiment"]: p["seeds"]["0"]["figures"] for p in s["points"]}
    loose, tight = by["loose"]["goodput"], by["tight"]["goodput"]
    assert (
        loose["fraction"] == 1.0
        and loose["good"] == 12
        and loose["slo"] == {"ttft_ms": 60000, "e2e_ms": 60000}
    )
    _, rows2, _ = read_jsonl_rows(cap / "n" / "tight" / "s" / "seed=0")
    want = sum(r["ok"] and r["ttft_s"] * 1000 <= bound_ms for r in rows2)
    assert tight["good"] == want and tight["fraction"] == pytest.approx(want / 12)
    dur = by["tight"]["duration_s"]
    assert tight["requests_per_s"] == pytest.approx(want / dur)
    run(write_spec(tmp_path, "impossible", slo={"ttft_ms": 0.001}), sim.url, cap)
    none_met = summarize([cap / "n" / "impossible"])["n"].to_json()["points"][0]["seeds"]["0"]["figures"][
        "goodput"
    ]
    assert none_met["fraction"] == 0.0 and none_met["good"] == 0 and none_met["requests_per_s"] == 0.0
    assert by["loose"]["latency"]["tpot_s"]["p50"] > 0 and by["loose"]["throughput"]["requests_per_s"] > 0


def read_jsonl_rows(pdir: Path):
    rows, bad = read_jsonl(pdir / "requests.jsonl")
    return None, rows, bad


def test_no_slo_no_goodput(sim, tmp_path):
    cap = tmp_path / "cap"
    run(write_spec(tmp_path, "none"), sim.url, cap)
    fig = summarize([cap / "n" / "none"])["n"].to_json()["points"][0]["seeds"]["0"]["figures"]
    assert fig["goodput"] is None


def test_sglang_abort_streams_are_truncated_and_fail_the_point(tmp_path):
    server = ScriptServer(STDLIB_SERVER)
    try:
        rec, rows, point = run(write_spec(tmp_path, "abort"), server.url + "/abort", tmp_path / "cap")
    finally:
        server.stop()
    assert len(rows) == 12
    assert all(
        not r["ok"]
        and r["error_kind"] == "truncated"
        and r["finish_reason"] == "abort"
        and r["completion_tokens"] == 3
        for r in rows
    )
    assert point["status"] == "failed" and point["errors"] == {"truncated": 12} and point["requests_ok"] == 0
