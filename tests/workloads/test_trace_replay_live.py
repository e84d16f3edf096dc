"""Trace replay against a live `harness serve-sim`, checked against `harness whatif` (issue 14).

Every test here starts processes (serve-sim, the CLI): slow.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import pytest
import yaml

from harness.workloads.traces import mooncake_ideal
from tests.helpers import cli
from tests.helpers.specs import write_spec

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = ROOT / "tests" / "data" / "mooncake" / "conversation_trace.jsonl"
SLICE = {"start": 1000, "limit": 300, "block_tokens": 16}  # ~130k tokens; ideal hit rate ~17%
POOL = 24_000  # a fifth of the slice's tokens: conversations come back after their prefix was evicted
harness = partial(cli.harness, timeout=300)  # a whole trace slice through serve-sim


def trace_spec(tmp: Path, concurrency: int, name: str = "trace", **top) -> Path:
    wl = {"kind": "trace", "path": str(MOONCAKE), "format": "mooncake", "timestamps": "ignore"}
    wl |= {"max_output_tokens": 8, **SLICE}
    timeouts = {"connect": 5, "first_token": 60, "total": 120}
    top = {
        "api": "openai-completions",
        "model": "m",
        "workload": wl,
        "concurrency": concurrency,
        "timeouts": timeouts,
        **top,
    }
    return write_spec(tmp, name, file=f"{name}-c{concurrency}.yaml", **top)


def test_live_replay_measures_what_whatif_predicts(tmp_path: Path) -> None:
    """The Done-when of issue 14: at concurrency 1 within 1 point, at 8 within 3 points, with eviction."""
    from harness.capture import read_jsonl
    from harness.spec import load_spec
    from harness.sweep.attach import run_points
    from tests.helpers.procs import SimProc

    srv = SimProc(tmp_path, "--max-total-tokens", str(POOL), "--time-scale", "0.01", "--enable-cache-report")
    measured: dict[int, float] = {}
    try:
        for c in (1, 8):
            spec = load_spec(trace_spec(tmp_path, c))
            rec = run_points(
                spec, base_url=srv.url, server_name="sim", node="n", capture_root=tmp_path / "cap"
            )[0]
            assert rec.status == "ok", rec
            rows, bad = read_jsonl(tmp_path / "cap" / "n" / "trace" / "sim" / "seed=0" / "requests.jsonl")
            assert bad == 0 and len(rows) == SLICE["limit"] and all(r["ok"] for r in rows)
            assert all(r["prompt_tokens"] == r["expected_prompt_tokens"] for r in rows)  # block-exact
            measured[c] = sum(r["cached_tokens"] or 0 for r in rows) / sum(r["prompt_tokens"] for r in rows)
    finally:
        srv.stop()
    _n, hit, total = mooncake_ideal(MOONCAKE, SLICE["start"], SLICE["limit"], SLICE["block_tokens"])
    ideal = hit / total
    for c, tolerance in ((1, 1.0), (8, 3.0)):
        r = harness("whatif", str(trace_spec(tmp_path, c)), "--pool", str(POOL), "--policy", "lru", "--json")
        assert r.returncode == 0, r.stderr
        res = json.loads(r.stdout)[0]["results"][0]
        assert res["concurrency"] == c and res["evicted_tokens"] > 0
        assert abs(measured[c] - res["hit_rate"]) * 100 <= tolerance, (c, measured[c], res["hit_rate"])
        assert measured[c] < ideal - 0.02  # the pool did bind
        assert (
            abs(res["ideal_hit_rate"] - ideal) < 0.005
        )  # token-level unbounded cache vs the README's blocks


def test_bench_summary_predicts_trace_and_synthetic_points(tmp_path: Path) -> None:
    """harness bench on the sim: every point gets predicted_hit_rate beside measured_hit_rate, the report
    a side-by-side table; a trace point its ideal hit rate over the requests sent."""
    servers = [
        {"name": "small", "launch": "sim", "args": ["--max-total-tokens", str(POOL), "--enable-cache-report"]}
    ]
    trace = trace_spec(tmp_path, 4, name="trace", servers=servers, suite={"sim": {"time_scale": 0.01}})
    raw = yaml.safe_load(trace.read_text())
    raw["workload"]["limit"] = 120
    trace.write_text(yaml.safe_dump(raw))
    synthetic = tmp_path / "synthetic.yaml"
    synthetic.write_text(
        yaml.safe_dump(
            {
                "name": "synthetic",
                "model": "m",
                "api": "openai-chat",
                "concurrency": 4,
                "workload": {
                    "kind": "multi-turn",
                    "sessions": 6,
                    "turns": 3,
                    "system_prompt_tokens": 40,
                    "question_tokens": 8,
                    "answer_tokens": 8,
                },
                "servers": servers,
                "suite": {"sim": {"time_scale": 0.01}},
            }
        )
    )
    r = harness(
        "bench",
        "--spec",
        str(trace),
        str(synthetic),
        "--server-kind",
        "sim",
        "--node",
        "n",
        "--capture",
        str(tmp_path / "cap"),
        "--summaries",
        str(tmp_path / "sum"),
        "--quiet",
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((tmp_path / "sum" / "n.json").read_text())
    points = {p["experiment"]: p for p in summary["points"]}
    for p in points.values():
        assert p["predicted_hit_rate"] is not None and p["measured_hit_rate"] is not None
        assert p["prediction"]["flag"] is False and abs(p["prediction"]["diff_points"]) <= 3
    assert points["synthetic"]["measured_hit_rate"] > 0.3
    assert points["synthetic"]["ideal_hit_rate"] >= points["synthetic"]["predicted_hit_rate"]
    _n, hit, total = mooncake_ideal(MOONCAKE, SLICE["start"], 120, SLICE["block_tokens"])
    assert points["trace"]["ideal_hit_rate"] == pytest.approx(hit / total)
    assert points["trace"]["median"]["hit_rate_usage_by_position"]["0"] == 0.0
    assert points["trace"]["prompt_check"] == {"checked": 120, "differ": 0}
    report = (tmp_path / "sum" / "n.md").read_text()
    assert "### Predicted vs measured" in report


BAD = [
    ("missing", None, "file not found"),
    ("not-json", ['{"input_length": 10, "hash_ids": [1]}', "{oops"], "line 2: not JSON"),
    (
        "too-many-ids",
        ['{"input_length": 600, "hash_ids": [1, 2, 3]}'],
        "3 ids, but input_length 600 allows at most 2",
    ),
    ("format", ['{"input_length": 10, "hash_ids": [1]}'], "workload.format: expected one of"),
]


@pytest.mark.parametrize(("case", "lines", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_trace_one_line_exit_2(tmp_path: Path, case: str, lines: list[str] | None, message: str) -> None:
    """Through the CLI, before the (unreachable) server is contacted: one line, exit 2."""
    trace = tmp_path / "t.jsonl"
    if lines is not None:
        trace.write_text("\n".join(lines) + "\n")
    wl = {"kind": "trace", "path": str(trace), "format": "csv" if case == "format" else "mooncake"}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"name": "bad", "model": "m", "workload": wl}))
    for args in (
        ["run", str(spec), "--server-url", "http://127.0.0.1:9", "--capture", str(tmp_path / "cap")],
        ["whatif", str(spec), "--pool", "1000"],
    ):
        r = harness(*args, timeout=60)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr
        lines_out = r.stderr.strip().splitlines()
        assert len(lines_out) == 1 and message in lines_out[0], r.stderr


def test_honored_timestamps_and_a_duration_limit(tmp_path: Path) -> None:
    """timestamps: honor sends each request at its trace time / speedup (TTFT from there); duration_s
    stops a long trace and records the rest, read or not yet read from the file, as not sent."""
    from harness.capture import read_jsonl
    from harness.spec import load_spec
    from harness.sweep.attach import run_points
    from tests.helpers.procs import SimProc

    trace = tmp_path / "t.jsonl"
    lines = [
        {"timestamp": 100 * i, "input_length": 600, "output_length": 2, "hash_ids": [0, i + 1]}
        for i in range(400)
    ]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    wl = {"kind": "trace", "path": str(trace), "block_tokens": 8, "speedup": 4.0}  # one request per 25 ms
    spec_path = tmp_path / "honor.yaml"
    spec_path.write_text(
        yaml.safe_dump(
            {
                "name": "honor",
                "model": "m",
                "api": "openai-completions",
                "concurrency": 4,
                "workload": wl,
                "duration_s": 1.0,
            }
        )
    )
    spec = load_spec(spec_path)
    srv = SimProc(tmp_path, "--time-scale", "0.01", "--enable-cache-report")
    try:
        rec = run_points(spec, base_url=srv.url, server_name="sim", node="n", capture_root=tmp_path / "cap")[
            0
        ]
    finally:
        srv.stop()
    rows, bad = read_jsonl(tmp_path / "cap" / "n" / "honor" / "sim" / "seed=0" / "requests.jsonl")
    assert bad == 0 and len(rows) == 400 == rec.requests_scheduled
    sent = [r for r in rows if r.get("sent_mono") is not None]
    not_sent = [r for r in rows if r.get("not_sent") == "time-limit"]
    assert len(sent) + len(not_sent) == 400
    assert 25 <= len(sent) <= 45  # about 1 s / 25 ms
    t0 = min(r["scheduled_mono"] for r in sent)
    for r in sent:
        assert r["scheduled_mono"] - t0 == pytest.approx(r["index"] * 0.025, abs=1e-6)
        assert r["late_s"] < 0.2
    assert rows[-1]["index"] == 399 or max(r["index"] for r in not_sent) == 399
