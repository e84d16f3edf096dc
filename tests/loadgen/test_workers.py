"""`workers: N`: one point's load from N processes against a real server (tests/helpers/fakeserver.py).

N=1 and N=3 send the same requests (same prompts, each session's turns in order), the server never sees
more than the concurrency cap in flight, and a worker killed with SIGKILL mid-point loses only its
requests in flight: the point is partial, its records merged, and a resumed run completes it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from harness.capture import experiment_dir, read_jsonl
from harness.capture.manifest import write_manifest
from harness.capture.points import is_done, next_attempt
from harness.capture.redact import spec_redactor
from harness.errors import SpecError
from harness.loadgen.split import PIDS, shares
from harness.spec import load_spec, parse_spec
from harness.sweep.attach import run_points
from tests.helpers import specs
from tests.helpers.procs import FakeServerProcess

pytestmark = pytest.mark.slow


def write_spec(folder: Path, name: str, workload: dict, **over) -> Path:
    timeouts = {"connect": 5, "first_token": 20, "total": 60}
    top = {"model": "m", "workload": workload, "concurrency": 4, "seeds": [0], "timeouts": timeouts, **over}
    return specs.write_spec(folder, name, **top)


SHARED = {
    "kind": "shared-prefix",
    "groups": 5,
    "prompts_per_group": 4,
    "system_prompt_tokens": 16,
    "question_tokens": 4,
    "output_tokens": 4,
}
TURNS = {
    "kind": "multi-turn",
    "sessions": 5,
    "turns": 3,
    "system_prompt_tokens": 16,
    "question_tokens": 4,
    "answer_tokens": 4,
}


def run(spec_path: Path, url: str, cap: Path, attempt: int = 1):
    spec = load_spec(spec_path)
    write_manifest(experiment_dir(cap, "n", spec.name), spec, "n", spec_redactor([spec]))
    run_points(spec, base_url=url, server_name="s", node="n", capture_root=cap)
    pdir = cap / "n" / spec.name / "s" / "seed=0"
    rows, bad = read_jsonl(pdir / "requests.jsonl")
    assert bad == 0
    return rows, json.loads((pdir / "point.json").read_text()), pdir


@pytest.fixture
def server():
    s = FakeServerProcess("--ttft-ms", "30", "--itl-ms", "5")
    yield s
    s.stop()


def test_shares_split_the_cap_exactly():
    assert shares(4, 3) == [2, 1, 1] and shares(7, 7) == [1] * 7 and sum(shares(257, 8)) == 257
    with pytest.raises(SpecError, match="workers"):
        parse_spec({"name": "t", "model": "m", "concurrency": 2, "workers": 3, "workload": SHARED})


def test_one_and_three_workers_send_the_same_requests_under_the_cap(server, tmp_path):
    got = {}
    for n in (1, 3):
        server.reset()
        rows, point, pdir = run(
            write_spec(tmp_path, f"w{n}", SHARED, workers=n), server.url, tmp_path / f"c{n}"
        )
        assert point["status"] == "ok" and len(rows) == 20 and all(r["ok"] for r in rows)
        assert server.stats()["max_in_flight"] <= 4  # the cap, split 2 + 1 + 1 across the processes
        assert not list(pdir.glob("requests.w*.jsonl"))  # merged into requests.jsonl
        got[n] = sorted((r["index"], r["group"], r["position"], r["prompt_sha"]) for r in rows)
        # each process's own CPU and loop lag (the `client-bound` verdict's figures), one entry per worker
        assert len(point["client"]) == n and sum(c["requests"] for c in point["client"]) == 20
        assert all(c["cpu_s"] > 0 and c["wall_s"] > 0 and c["lag_samples"] > 0 for c in point["client"])
    assert got[1] == got[3]


def test_three_workers_keep_each_sessions_turns_in_order(server, tmp_path):
    rows, point, _ = run(write_spec(tmp_path, "mt", TURNS, workers=3), server.url, tmp_path / "c")
    assert point["status"] == "ok" and len(rows) == 15
    assert server.stats()["max_in_flight"] <= 4
    for s in range(5):
        mine = sorted((r for r in rows if r["session"] == s), key=lambda r: r["sent_mono"])
        assert [r["turn"] for r in mine] == [0, 1, 2]
        assert all(a["done_mono"] <= b["sent_mono"] for a, b in zip(mine, mine[1:], strict=False))
        assert len({r["prompt_sha"] for r in mine}) == 3


def test_a_killed_worker_loses_only_its_requests_in_flight_and_resume_completes(tmp_path):
    slow = FakeServerProcess("--ttft-ms", "150", "--itl-ms", "20")
    try:
        wl = {**SHARED, "groups": 6, "prompts_per_group": 8}  # 48 requests, 16 per worker
        spec_path = write_spec(tmp_path, "kill", wl, concurrency=3, workers=3)
        cap = tmp_path / "cap"
        pdir = cap / "n" / "kill" / "s" / "seed=0"
        out: dict = {}
        t = threading.Thread(target=lambda: out.update(r=run(spec_path, slow.url, cap)))
        t.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # worker 1 has recorded two requests: kill it mid-point
            w1 = pdir / "requests.w1.jsonl"
            if (pdir / PIDS).exists() and w1.exists() and w1.read_bytes().count(b"\n") >= 2:
                break
            time.sleep(0.05)
        pid = int((pdir / PIDS).read_text().split()[1])
        os.kill(pid, signal.SIGKILL)
        t.join(120)
        rows, point, _ = out["r"]
        assert point["status"] == "partial" and not is_done(point)
        by_worker = {g: [r for r in rows if r["group"] % 3 == g] for g in range(3)}
        assert len(by_worker[0]) == 16 and len(by_worker[2]) == 16  # the others finished their parts
        assert 2 <= len(by_worker[1]) < 16 and all(r["ok"] for r in rows)  # kept what it had recorded
        assert "worker 1 died" in (point["failure"] or "")
        assert next_attempt(pdir, point) == 2
        rows2, point2, _ = run(spec_path, slow.url, cap)  # resume: the point runs again, whole
        assert point2["status"] == "ok" and len(rows2) == 48 and point2["attempt"] == 2
        assert (pdir / "requests.attempt-1.jsonl").exists()
    finally:
        slow.stop()
