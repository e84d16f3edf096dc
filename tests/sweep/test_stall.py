"""`stalled`: requests in flight and no token for timeouts.stall seconds fail the point at once, with the
window, the in-flight count and the reason, against the sim's stalled streams and its hung scheduler."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from harness.capture import read_jsonl
from harness.spec import load_spec
from harness.sweep.attach import run_points
from harness.telemetry.timeline import METRICS_TIMELINE, read_timeline
from tests.helpers import specs
from tests.helpers.procs import SimProc

FAST = ("--card-profile", "tiny-test", "--time-scale", "0.05", "--enable-metrics")


@pytest.fixture
def sim(tmp_path):
    procs: list[SimProc] = []

    def start(*args: str) -> SimProc:
        d = tmp_path / f"sim{len(procs)}"
        d.mkdir()
        p = SimProc(d, *FAST, *args)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()


def _run(tmp_path: Path, url: str, stall: float) -> tuple[dict, list[dict], Path, float]:
    wl = specs.shared_prefix(groups=2, prompts_per_group=6, system_prompt_tokens=32, question_tokens=4)
    timeouts = {"connect": 5, "first_token": 100, "total": 200, "stall": stall}
    path = specs.write_spec(
        tmp_path,
        "stall",
        wl,
        file=f"s-{uuid.uuid4().hex[:6]}.yaml",
        concurrency=4,
        seeds=[0],
        timeouts=timeouts,
    )
    t0 = time.monotonic()
    run_points(load_spec(path), base_url=url, server_name="sim", node="n", capture_root=tmp_path / "cap")
    took = time.monotonic() - t0
    pdir = tmp_path / "cap" / "n" / "stall" / "sim" / "seed=0"
    rows, _ = read_jsonl(pdir / "requests.jsonl")
    return json.loads((pdir / "point.json").read_text()), rows, pdir, took


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault",
    [
        ("--fault-stall", "1.0", "--fault-stall-seconds", "60"),  # every stream stops mid-answer for 60 s
        ("--fault-hicache", "prefetch-hang", "--fault-hang-after", "2"),  # the scheduler never answers
    ],
    ids=["stream-stops", "prefetch-hang"],
)
def test_a_stall_fails_the_point_within_seconds_of_the_threshold(sim, tmp_path, fault):
    s = sim(*fault)
    point, rows, pdir, took = _run(tmp_path, s.url, stall=3.0)
    assert took < 3.0 + 8.0, took  # not the 60 s stall, nor the 100 s first-token timeout
    assert point["status"] == "failed" and point["failure"].startswith("stalled:"), point
    st = point["stall"]
    assert st["in_flight"] >= 1 and st["limit_s"] == 3.0
    assert 3.0 <= st["detected_mono"] - st["since_mono"] < 4.0
    assert st["thread_dump"].startswith("none:")  # an attached server: no pid of ours to dump
    stalled = [r for r in rows if r.get("error_kind") == "stalled"]
    assert len(stalled) == st["in_flight"] and all("no token for" in r["error"] for r in stalled)
    header, samples = read_timeline(pdir / METRICS_TIMELINE)
    assert header["interval_s"] == 0.5 and samples, "the timeline ran through the stall"
    assert all(x["source"] == "server" and "values" in x for x in samples)


@pytest.mark.slow
def test_no_stall_while_tokens_flow_under_a_short_limit(sim, tmp_path):
    s = sim()
    point, rows, _, _ = _run(tmp_path, s.url, stall=1.0)
    assert point["status"] == "ok" and point["stall"] is None
    assert not [r for r in rows if r.get("error_kind") == "stalled"]
