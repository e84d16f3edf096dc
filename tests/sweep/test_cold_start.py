"""Servers with L3 get a fresh server on an empty storage directory per point (no flush); a flush that kills
its server fails the point with the server's own line. `harness bench` on the sim, through the real CLI."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import pytest

from harness.spec.flags import storage_backend
from harness.sweep.cold_start import COLD_NOTE
from tests.helpers.cli import run_bench
from tests.helpers.specs import SIM_FAST, bench_spec, shared_prefix


def test_storage_backend_is_read_from_the_launch_line():
    assert storage_backend(["--hicache-storage-backend", "file"]) == "file"
    assert storage_backend(["--x", "1", "--hicache-storage-backend=mooncake"]) == "mooncake"
    assert storage_backend(["--hicache-storage-backend", "none"]) is None
    assert storage_backend(["--enable-hierarchical-cache"]) is None


def _points(cap: Path, server: str) -> dict[str, dict]:
    folder = cap / "n" / "tiny" / server
    return {
        p.name: json.loads((p / "point.json").read_text()) for p in sorted(folder.iterdir()) if p.is_dir()
    }


def _records(cap: Path, server: str, point: str) -> list[dict]:
    text = (cap / "n" / "tiny" / server / point / "requests.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.fixture
def mark() -> str:
    m = uuid.uuid4().hex
    yield m
    for d in Path("/proc").iterdir():  # never leave a marked server behind
        if d.name.isdigit():
            try:
                if f"BENCH_TEST_MARK={m}".encode() in (d / "environ").read_bytes().split(b"\0"):
                    os.kill(int(d.name), signal.SIGKILL)
            except OSError:
                continue


@pytest.mark.slow
def test_l3_points_start_cold_and_a_flush_that_kills_fails_with_its_line(tmp_path: Path, mark: str) -> None:
    l3 = [*SIM_FAST, "--enable-hierarchical-cache", "--hicache-storage-backend", "file",
          "--hicache-storage-prefetch-policy", "wait_complete", "--enable-cache-report"]  # fmt: skip
    servers = [
        {"name": "l3", "launch": "sim", "args": l3},
        {"name": "dies", "launch": "sim", "args": [*SIM_FAST, "--fault-crash-on-flush"]},
    ]
    spec = bench_spec(tmp_path, mark, api="sglang-generate", sweep={"groups": [1, 2]}, servers=servers,
                      workload=shared_prefix(groups=1, prompts_per_group=2, system_prompt_tokens=400))  # fmt: skip
    tmp = tmp_path / "tmp"  # where bench makes each point's storage directory
    tmp.mkdir()
    r = run_bench(tmp_path, "--spec", str(spec), "--retries", "0", timeout=170, env={"TMPDIR": str(tmp)})
    cap = tmp_path / "capture"
    # the L3 server: every point on a fresh server, its own empty directory, no flush, and no storage hits
    # although the second point sends the first one's group again
    pts = _points(cap, "l3")
    assert len(pts) == 2 and all(p["status"] == "ok" for p in pts.values()), r.stdout + r.stderr
    for p in pts.values():
        assert p["fresh_server"] is True and p["flushed"] is None and p["flush_note"] == COLD_NOTE
    for name in pts:
        assert all((rec.get("cached_storage") or 0) == 0 for rec in _records(cap, "l3", name))
    log = (cap / "n" / "tiny" / "l3" / "server.log").read_text()
    assert log.count("ready to roll") == 2  # launched on new directories, restarted once for the second point
    dirs = {
        line.split("=", 1)[1] for line in r.stdout.splitlines() if "SGLANG_HICACHE" in line and "=" in line
    }
    assert not any(Path(d).exists() for d in dirs)  # removed when bench ended
    summary = json.loads((tmp_path / "summaries" / "n.json").read_text())
    l3_points = [p for p in summary["points"] if p["server"] == "l3"]
    assert {sd["figures"]["cold_start"] for p in l3_points for sd in p["seeds"].values()} == {
        "fresh server, empty storage directory"
    }
    # the server that dies at its flush: the point failed, quoting SGLang's own line
    dead = _points(cap, "dies")
    first = dead[min(dead)]
    assert first["status"] == "failed"
    assert "the cache flush killed the server" in first["failure"]
    assert "RuntimeError: Failed to stop HiCache storage threads cleanly." in first["failure"]
    # crashed is read from point.json's typed fields, whatever the failure's wording
    assert first["server_died"] is True and isinstance(first["server_exit_code"], int), first
    dies = [p for p in summary["points"] if p["server"] == "dies"]
    crashed = [h for p in dies for h in p.get("health") or [] if h["verdict"] == "crashed"]
    assert crashed and crashed[0]["figures"]["exit_code"] == first["server_exit_code"], dies
    assert r.returncode == 1
