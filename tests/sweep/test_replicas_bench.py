"""`harness bench` of a `replicas:` profile: sims behind SGLang's real gateway (smg 1.13.0), through the CLI.

The routing is smg's own; the harness must measure every worker (its log slice, its counters, the
gateway's routed-worker header) so that the three hit-rate sources agree and add up per worker, and a
worker that dies mid-point must fail that point naming the worker, and that point alone is retried on a fresh fleet.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.telemetry.timeline import read_timeline
from tests.helpers.cli import harness, run_bench
from tests.helpers.procs import marked_pids, no_survivors
from tests.helpers.specs import SIM_FAST, bench_spec, shared_prefix

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("smg") is None and not (Path(sys.executable).parent / "smg").exists(),
                       reason="smg (the router extra) is not installed"),
]  # fmt: skip
FIRST_LAUNCH = str(Path(__file__).parents[1] / "helpers" / "servers_first_launch.py")
# 6 groups x 4 prompts of a 384-token prefix: a 1,200-token pool per worker holds two or three groups
WORKLOAD = shared_prefix(groups=6, prompts_per_group=4, system_prompt_tokens=384, question_tokens=16)
POOL = ["--max-total-tokens", "1200", "--enable-cache-report", "--enable-metrics"]


@pytest.fixture
def mark() -> Iterator[str]:
    m = uuid.uuid4().hex
    yield m
    for pid in marked_pids(m):  # workers, gateway: nothing outlives the test, even when it failed
        os.kill(pid, signal.SIGKILL)


def _summarize(tmp_path: Path) -> dict[str, Any]:
    r = harness("summarize", str(tmp_path / "capture" / "n"), "-o", str(tmp_path / "summaries"), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((tmp_path / "summaries" / "n.json").read_text())


def test_two_sims_behind_smg_every_worker_measured_and_the_sources_agree(tmp_path: Path, mark: str) -> None:
    server = {"name": "{policy}", "launch": "sim", "replicas": 2, "router": {"policy": "{policy}"},
              "args": [*SIM_FAST, *POOL]}  # fmt: skip
    spec = bench_spec(tmp_path, mark, name="rep", workload=WORKLOAD, sweep={}, concurrency=4, seeds=[0, 1],
                      matrix={"policy": ["round_robin", "cache_aware"]}, servers=[server])  # fmt: skip
    r = run_bench(tmp_path, "--spec", str(spec))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert no_survivors(mark)
    sdir = tmp_path / "capture" / "n" / "rep"
    info = json.loads((sdir / "cache_aware" / "replicas.json").read_text())
    assert info["replicas"] == 2 and info["policy"] == "cache_aware" and info["storage"] == "own"
    # the two policies' workers are launched alike: cache_aware kept round_robin's, only its gateway new
    (before,) = json.loads((sdir / "round_robin" / "replicas.json").read_text())["launches"]
    (after,) = info["launches"]
    assert after["workers_from"] == "round_robin" and after["workers"] == before["workers"], (before, after)
    assert (
        "rep/cache_aware: ready in" in r.stdout + r.stderr and "the workers of round_robin kept" in r.stdout
    )
    for w in ("w0", "w1"):  # one log file, in both folders: each group's points read their slices of it
        assert os.path.samefile(sdir / "round_robin" / "workers" / w / "server.log",
                                sdir / "cache_aware" / "workers" / w / "server.log")  # fmt: skip
        assert (sdir / "cache_aware" / "workers" / w / "server_info.json").exists()
    first = json.loads((sdir / "cache_aware" / "seed=0" / "point.json").read_text())
    assert first["fresh_server"] is False and first["flushed"] is True, first  # flushed, not fresh
    summary = _summarize(tmp_path)
    by_server = {p["server"]: p for p in summary["points"]}
    assert set(by_server) == {"round_robin", "cache_aware"}
    for name, p in by_server.items():
        for seed, s in p["seeds"].items():
            f = s["figures"]
            usage, log, counters = f["hit_rate_usage"], f["hit_rate_log"], f["hit_rate_counters"]
            assert abs(usage - log) < 0.005 and abs(usage - counters) < 0.005, (
                name,
                seed,
                usage,
                log,
                counters,
            )
            assert f["attribution_agrees"] is True, (name, seed, f.get("attribution_mismatch"))
            workers = f["workers"]
            assert set(workers) == {"w0", "w1"}
            assert sum(w["requests"] for w in workers.values()) == 24
            for w in workers.values():  # each worker's own counters match the requests routed to it
                if w["requests"] == 0:  # cache_aware may keep the one shared prefix on one worker
                    assert name == "cache_aware" and not w["counter_prompt_tokens"], (name, w)
                    assert w["prefill_share"] == 0, w
                    continue
                assert w["counter_prompt_tokens"] == w["prompt_tokens"] > 0
                assert abs(w["hit_rate_usage"] - w["hit_rate_counters"]) < 0.005
            assert abs(sum(w["prefill_share"] for w in workers.values()) - 1) < 1e-6
            assert f["load_skew"] >= 1.0
    rr = by_server["round_robin"]["median"]
    ca = by_server["cache_aware"]["median"]
    assert ca["hit_rate_usage"] > rr["hit_rate_usage"], (ca["hit_rate_usage"], rr["hit_rate_usage"])
    assert all(abs(w["requests"] - 12) <= 1 for w in rr["workers"].values())  # round robin: even
    r = harness("report", str(tmp_path / "summaries" / "n.json"), "--no-html", timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    md = (tmp_path / "summaries" / "n.md").read_text()
    assert "### Replicas: every worker" in md and "| cache_aware | default | w1 |" in md


def test_a_worker_that_dies_mid_point_fails_that_attempt_by_name(tmp_path: Path, mark: str) -> None:
    marker = tmp_path / "launched-once"  # the first worker to start crashes after 5 requests; no other
    cmd = [sys.executable, FIRST_LAUNCH, str(marker), "--fault-crash-after", "5", "--", "--port", "{port}", "--model-path", "default",
           *SIM_FAST, *POOL]  # fmt: skip
    server = {"name": "c", "launch": "command", "engine": "sim", "command": cmd, "replicas": 2,
              "router": {"policy": "round_robin"}}  # fmt: skip
    spec = bench_spec(tmp_path, mark, name="rep", workload=WORKLOAD, sweep={"groups": [2, 3]}, concurrency=2,
                      servers=[server])  # fmt: skip
    r = run_bench(tmp_path, "--spec", str(spec))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    # groups=2 (4 requests a worker) passes; w0 dies during groups=3, which alone is retried on a fresh fleet
    assert "groups=2,seed=0: ok (attempt 1" in out, out[-4000:]
    assert "groups=3,seed=0: failed (attempt 1): worker w0 of c exited with code 1 during the point" in out, (
        out[-4000:]
    )
    assert "groups=3,seed=0: ok (attempt 2" in out, out[-4000:]
    pdir = tmp_path / "capture" / "n" / "rep" / "c"
    assert json.loads((pdir / "groups=2,seed=0" / "point.json").read_text())["attempt"] == 1
    assert json.loads((pdir / "groups=3,seed=0" / "point.json").read_text())["attempt"] == 2
    assert no_survivors(mark)


def test_a_shared_l3_directory_gives_each_sim_the_pages_the_other_wrote(tmp_path: Path, mark: str) -> None:
    """The spec tests/real_sglang/test_replicas.py runs on two SGLang servers, on two sims: round_robin sends
    each group's second prompt to the worker that has not seen it, and with one L3 directory it reads the
    other's pages (SGLang: one such hit per worker); with a directory each (`storage: own`) it cannot."""
    wl = shared_prefix(
        groups=2, prompts_per_group=4, system_prompt_tokens=600, question_tokens=16, output_tokens=4
    )
    l3 = ["--enable-hierarchical-cache", "--hicache-ratio", "2", "--hicache-storage-backend", "file",
          "--hicache-storage-prefetch-policy", "wait_complete"]  # fmt: skip
    servers = [{"name": s, "launch": "sim", "replicas": 2, "router": {"policy": "round_robin"}, "storage": s,
                "args": [*SIM_FAST, *POOL, *l3]} for s in ("shared", "own")]  # fmt: skip
    spec = bench_spec(tmp_path, mark, name="l3", workload=wl, sweep={}, concurrency=1, seeds=[0], servers=servers,
                      api="sglang-generate", request_rate=2, arrival="constant")  # fmt: skip
    r = run_bench(tmp_path, "--spec", str(spec), timeout=300)
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-3000:]  # 1: validate flagged a late client
    assert no_survivors(mark)
    points = _summarize(tmp_path)["points"]
    assert all(p["status"] == "ok" for p in points), r.stdout[-3000:]
    by_server = {p["server"]: p["seeds"]["0"]["figures"] for p in points}
    shared, own = by_server["shared"], by_server["own"]
    assert {n: w["storage_hits_cross_replica"] for n, w in shared["workers"].items()} == {"w0": 1, "w1": 1}
    assert own["storage_hits_cross_replica"] == 0 and shared["hit_rate_usage"] > own["hit_rate_usage"]


def test_the_timeline_scrapes_every_worker_and_the_gateway(tmp_path: Path, mark: str) -> None:
    server = {"name": "rr", "launch": "sim", "replicas": 2, "router": {"policy": "round_robin"},
              "args": [*SIM_FAST, *POOL]}  # fmt: skip
    spec = bench_spec(tmp_path, mark, name="tl", workload=WORKLOAD, sweep={}, concurrency=2, seeds=[0],
                      servers=[server])  # fmt: skip
    r = run_bench(tmp_path, "--spec", str(spec), "--metrics-interval-s", "0.05")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert no_survivors(mark)
    (path,) = (tmp_path / "capture" / "n" / "tl" / "rr").rglob("metrics.jsonl")
    header, samples = read_timeline(path)
    assert set(header["sources"]) == {"w0", "w1", "gateway"}, header
    by_source: dict[str, list[dict]] = {}
    for s in samples:
        assert "error" not in s, s
        by_source.setdefault(s["source"], []).append(s)
    assert set(by_source) == {"w0", "w1", "gateway"} and all(len(v) >= 2 for v in by_source.values())
    # round robin: each worker's own counters took half the requests
    assert [by_source[w][-1]["values"]["requests"] for w in ("w0", "w1")] == [12, 12], by_source["w0"][-1]


def test_workers_are_kept_only_for_a_group_launched_alike(tmp_path: Path, mark: str) -> None:
    """a -> b: another pool, so b launches its own workers; b -> c: only the policy differs, c keeps b's."""
    wl = shared_prefix(groups=2, prompts_per_group=2, system_prompt_tokens=64, question_tokens=8)
    servers = [{"name": n, "launch": "sim", "replicas": 2, "router": {"policy": pol},
                "args": [*SIM_FAST, "--max-total-tokens", pool, "--enable-cache-report"]}
               for n, pol, pool in (("a", "round_robin", "1200"), ("b", "round_robin", "1300"),
                                    ("c", "cache_aware", "1300"))]  # fmt: skip
    spec = bench_spec(tmp_path, mark, name="keep", workload=wl, sweep={}, concurrency=1, servers=servers)
    dry = run_bench(tmp_path, "--spec", str(spec), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    kept = [ln.strip() for ln in dry.stdout.splitlines() if "keeps the running workers" in ln]
    assert kept == ["keeps the running workers of b (launched alike but for the router)"], dry.stdout
    r = run_bench(tmp_path, "--spec", str(spec))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert no_survivors(mark)
    sdir = tmp_path / "capture" / "n" / "keep"
    launches = {n: json.loads((sdir / n / "replicas.json").read_text())["launches"] for n in "abc"}
    assert "workers_from" not in launches["a"][0] and "workers_from" not in launches["b"][0], launches
    assert (
        launches["c"][0]["workers_from"] == "b" and launches["c"][0]["workers"] == launches["b"][0]["workers"]
    )
    assert launches["b"][0]["workers"] != launches["a"][0]["workers"]
    assert all(json.loads((sdir / n / "seed=0" / "point.json").read_text())["status"] == "ok" for n in "abc")


def test_a_worker_that_refuses_a_flush_is_retried_on_its_own_and_its_log_slice_holds_its_point(
    tmp_path: Path, mark: str
) -> None:
    """SGLang refuses a flush while its /health runs the generation smg's checks make it run. Through smg,
    one worker's refusal made the whole flush 206 and the retry flushed the other worker again: three flush
    lines in one point, and that worker's log slice (from the point's flush line to the next) came out
    empty, as on real SGLang in CI. Here w0 (the first launched) refuses its first two flushes, w1 none."""
    wl = shared_prefix(groups=1, prompts_per_group=4, system_prompt_tokens=64, question_tokens=8)
    cmd = [sys.executable, FIRST_LAUNCH, str(tmp_path / "first"), "--fault-refuse-flush", "2", "--",
           "--port", "{port}", "--model-path", "default", *SIM_FAST, *POOL]  # fmt: skip
    server = {"name": "rr", "launch": "command", "engine": "sim", "command": cmd, "replicas": 2,
              "router": {"policy": "round_robin"}}  # fmt: skip
    spec = bench_spec(tmp_path, mark, name="fl", workload=wl, sweep={}, concurrency=1, servers=[server])
    r = run_bench(tmp_path, "--spec", str(spec))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert no_survivors(mark)
    sdir = tmp_path / "capture" / "n" / "fl" / "rr"
    point = json.loads((sdir / "seed=0" / "point.json").read_text())
    assert point["flushed"] is True and point["flush_note"] == "w0: flushed after 3 tries", point
    logs = {w: (sdir / "workers" / w / "server.log").read_text() for w in ("w0", "w1")}
    assert logs["w0"].count("Cache not flushed") == 2 and "Cache not flushed" not in logs["w1"]
    assert all(log.count("Cache flushed successfully") == 1 for log in logs.values())  # one line a point
    f = _summarize(tmp_path)["points"][0]["seeds"]["0"]["figures"]
    assert all(w["hit_rate_log"] == w["hit_rate_usage"] for w in f["workers"].values()), f["workers"]


def test_a_206_from_smg_on_its_own_flush_is_retried(tmp_path: Path, mark: str) -> None:
    """On smg's own /flush_cache (a gateway URL given to `harness run`) a worker's refusal comes back as
    HTTP 206 `partial_success`: retried as SGLang's 400 is, until every worker flushed."""
    from harness.servers.control import flush_cache
    from harness.servers.replicas import ReplicaGroup
    from harness.spec.servers import parse_servers

    raw = {"name": "g", "launch": "sim", "replicas": 2, "router": {"policy": "round_robin"},
           "args": [*SIM_FAST, "--fault-refuse-flush", "2"], "env": {"BENCH_TEST_MARK": mark}}  # fmt: skip
    (prof,) = parse_servers([raw], None, "s.yaml")
    with ReplicaGroup(prof, tmp_path / "g") as group:
        assert flush_cache(group.base_url, wait_s=0.05) == (True, "flushed after 3 tries")
    assert no_survivors(mark)
