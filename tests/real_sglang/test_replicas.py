"""Two real SGLang 0.5.23 CPU servers behind SGLang's gateway (smg 1.13.0), through `harness bench --server-kind
sglang-cpu` of a `replicas:` profile: the three hit-rate sources sum over the workers and agree, each worker's
routed requests (smg's x-smg-routed-worker-id) equal its own prompt-token counter, the routing replay
(harness.whatif.fleet) gives each worker the hit rate SGLang counted, a shared L3 directory gives a hit on
the replica that had not seen the prefix, and a worker killed mid-point fails that point by name while the
points before it and the retry on a fresh fleet are untouched.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.summarize.routing_check import check_point
from tests.helpers.cli import harness, run_bench
from tests.helpers.procs import marked_pids, no_survivors
from tests.helpers.specs import bench_spec, shared_prefix

pytestmark = [pytest.mark.sglang, pytest.mark.slow, pytest.mark.timeout(1500)]
SOURCES_WITHIN = 0.01  # usage, log and counters: the same tokens counted three ways
# 6 groups x 4 prompts of a 384-token prefix: a 1,200-token pool per worker holds two or three groups, so
# round_robin (every group on both workers) evicts what cache_aware (each group on one) keeps
WORKLOAD = shared_prefix(groups=6, prompts_per_group=4, system_prompt_tokens=384, question_tokens=16,
                         output_tokens=4)  # fmt: skip
POOL = ["--max-total-tokens", "1200", "--enable-cache-report", "--enable-metrics"]
L3 = ["--enable-hierarchical-cache", "--hicache-ratio", "2", "--hicache-storage-backend", "file",
      "--hicache-storage-prefetch-policy", "wait_complete"]  # fmt: skip
TOP = {
    "api": "sglang-generate",
    "tokenizer": "server",
    "timeouts": {"connect": 10, "first_token": 120, "total": 300},
}


@pytest.fixture
def mark() -> Iterator[str]:
    m = uuid.uuid4().hex
    yield m
    for pid in marked_pids(m):  # workers and gateway: nothing outlives the test, even when it failed
        os.kill(pid, signal.SIGKILL)


def _bench(tmp_path: Path, spec: Path, setup: Any, node: str = "n") -> tuple[int, str]:
    r = run_bench(tmp_path, "--spec", str(spec), "--server-kind", "sglang-cpu", "--sglang-python",
                  str(setup.python), "--model", str(setup.model), timeout=1200)  # fmt: skip
    return r.returncode, r.stdout + r.stderr


def _summary(tmp_path: Path) -> dict[str, Any]:
    r = harness("summarize", str(tmp_path / "capture" / "n"), "-o", str(tmp_path / "summaries"), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((tmp_path / "summaries" / "n.json").read_text())


def test_two_sglang_workers_behind_smg_sum_to_the_three_sources(
    sglang_setup, tmp_path: Path, mark: str
) -> None:
    server = {"name": "{policy}", "launch": "sglang", "replicas": 2, "router": {"policy": "{policy}"},
              "args": POOL}  # fmt: skip
    # concurrency 1: what each worker's cache holds then follows from its requests alone, so the replay of
    # the point as the gateway routed it must give each SGLang's own count (harness.summarize.routing_check)
    spec = bench_spec(tmp_path, mark, name="rep", workload=WORKLOAD, sweep={}, concurrency=1, seeds=[0],
                      matrix={"policy": ["round_robin", "cache_aware"]}, servers=[server], **TOP)  # fmt: skip
    code, out = _bench(tmp_path, spec, sglang_setup)
    assert code in (0, 1), out[-4000:]  # 1: validate flagged timings; every point must still be ok
    assert no_survivors(mark)
    summary = _summary(tmp_path)
    by_server = {p["server"]: p for p in summary["points"]}
    assert set(by_server) == {"round_robin", "cache_aware"}, out[-3000:]
    rates = {}
    for name, p in by_server.items():
        assert p["status"] == "ok", (name, p["status"], out[-3000:])
        f = p["seeds"]["0"]["figures"]
        usage, log, counters = f["hit_rate_usage"], f["hit_rate_log"], f["hit_rate_counters"]
        assert abs(usage - log) <= SOURCES_WITHIN and abs(usage - counters) <= SOURCES_WITHIN, (name, f)
        assert f["attribution_agrees"] is True, (name, f.get("attribution_mismatch"))
        workers = f["workers"]
        assert set(workers) == {"w0", "w1"} and sum(w["requests"] for w in workers.values()) == 24
        for w in workers.values():  # the header's attribution is each SGLang's own count, token for token
            assert w["counter_prompt_tokens"] == w["prompt_tokens"] > 0, (name, w)
            assert abs(w["hit_rate_usage"] - w["hit_rate_counters"]) <= SOURCES_WITHIN, (name, w)
        prompt = sum(w["prompt_tokens"] for w in workers.values())
        cached = sum(w["cached_tokens"] for w in workers.values())
        assert abs(cached / prompt - usage) < 1e-9  # the point's rate is the workers' sum
        assert abs(sum(w["prefill_share"] for w in workers.values()) - 1) < 1e-6 and f["load_skew"] >= 1.0
        rates[name] = usage
        c = check_point(tmp_path / "capture" / "n" / "rep" / name / "seed=0", seeds=100)
        where = f"{name}: {c.to_dict()}"
        assert c.off_model == 0, where  # every live choice is one smg's policy, as modelled, could make
        assert all(w.requests > 0 and abs(w.diff_points) <= 3.0 for w in c.workers), where
        if name == "round_robin":  # no draw in it: the replay is the run
            assert abs(c.diff_points) <= 3.0, where
        else:  # smg breaks ties at random: one live run is one draw, inside the model's draws
            assert min(c.predicted) - 0.03 <= c.measured_hit_rate <= max(c.predicted) + 0.03, where
        print(where)
    assert rates["cache_aware"] > rates["round_robin"], rates
    # launched alike but for the router: the second policy kept the first's SGLang workers (one model load),
    # and the log hit rates above were read from its slices of their logs
    runs = {n: json.loads((tmp_path / "capture" / "n" / "rep" / n / "replicas.json").read_text())["launches"]
            for n in rates}  # fmt: skip
    first, second = sorted(rates, key=lambda n: runs[n][0]["started_wall"])
    assert (
        runs[second][0]["workers_from"] == first and runs[second][0]["workers"] == runs[first][0]["workers"]
    )
    point = json.loads((tmp_path / "capture" / "n" / "rep" / second / "seed=0" / "point.json").read_text())
    assert (
        f"the workers of {first} kept" in out and point["fresh_server"] is False and point["flushed"] is True
    )
    print("real SGLang x2 behind smg, hit rate by usage:", {k: round(v, 3) for k, v in rates.items()})


def test_a_shared_l3_directory_gives_a_cross_replica_hit(sglang_setup, tmp_path: Path, mark: str) -> None:
    """round_robin sends a group's next prompt to the worker that has not seen the group: with one L3
    directory for both, it reads the pages the other wrote half a second before (its own tiers are cold)."""
    wl = shared_prefix(
        groups=2, prompts_per_group=4, system_prompt_tokens=600, question_tokens=16, output_tokens=4
    )
    server = {"name": "shared", "launch": "sglang", "replicas": 2, "router": {"policy": "round_robin"},
              "storage": "shared", "args": [*POOL, *L3]}  # fmt: skip
    spec = bench_spec(tmp_path, mark, name="l3", workload=wl, sweep={}, concurrency=1, seeds=[0],
                      servers=[server], request_rate=2, arrival="constant", **TOP)  # fmt: skip
    code, out = _bench(tmp_path, spec, sglang_setup)
    assert code in (0, 1), out[-4000:]
    assert no_survivors(mark)
    info = json.loads((tmp_path / "capture" / "n" / "l3" / "shared" / "replicas.json").read_text())
    assert info["storage"] == "shared"
    (p,) = _summary(tmp_path)["points"]
    assert p["status"] == "ok", out[-3000:]
    f = p["seeds"]["0"]["figures"]
    workers = f["workers"]
    cross = {n: w["storage_hits_cross_replica"] for n, w in workers.items()}
    assert f["storage_hits_cross_replica"] >= 1 and sum(cross.values()) == f["storage_hits_cross_replica"], f
    assert all(w["cached_storage_tokens"] >= w["storage_tokens_cross_replica"] for w in workers.values())
    print("real SGLang x2, shared L3: cross-replica storage hits per worker", cross)


def _kill_worker_when(point_dir: Path, after: int, mark: str, killed: list[int]) -> None:
    """Once `after` records of the point are on disk, SIGKILL worker w0's process group (SGLang's launcher,
    scheduler and detokenizer): found by its port in the worker's server_info and the test's mark."""
    deadline = time.monotonic() + 900
    req = point_dir / "requests.jsonl"
    while time.monotonic() < deadline:
        if req.exists() and len(req.read_text().splitlines()) >= after:
            break
        time.sleep(0.05)
    else:
        return
    info = json.loads((point_dir.parent / "workers" / "w0" / "server_info.json").read_text())
    needle = f"--port\0{info['port']}\0".encode()
    for pid in marked_pids(mark):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"sglang.launch_server" in cmd and needle in cmd:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
            killed.append(pid)
            return


def test_a_sglang_worker_killed_mid_point_fails_that_point_by_name(
    sglang_setup, tmp_path: Path, mark: str
) -> None:
    server = {
        "name": "rr",
        "launch": "sglang",
        "replicas": 2,
        "router": {"policy": "round_robin"},
        "args": POOL,
    }
    wl = shared_prefix(
        groups=2, prompts_per_group=8, system_prompt_tokens=128, question_tokens=16, output_tokens=4
    )
    spec = bench_spec(tmp_path, mark, name="kill", workload=wl, sweep={"groups": [2, 3]}, concurrency=1, seeds=[0],
                      servers=[server], request_rate=4, arrival="constant", **TOP)  # fmt: skip
    point = tmp_path / "capture" / "n" / "kill" / "rr" / "groups=3,seed=0"
    killed: list[int] = []
    t = threading.Thread(target=_kill_worker_when, args=(point, 4, mark, killed), daemon=True)
    t.start()
    code, out = _bench(tmp_path, spec, sglang_setup)
    t.join(timeout=5)
    assert killed, out[-4000:]
    assert code in (0, 1), out[-4000:]
    assert "groups=2,seed=0: ok (attempt 1" in out, out[-4000:]
    assert (
        "groups=3,seed=0: failed (attempt 1): worker w0 of rr exited with code -9 during the point" in out
    ), out[-4000:]
    assert "groups=3,seed=0: ok (attempt 2" in out, out[-4000:]
    pdir = tmp_path / "capture" / "n" / "kill" / "rr"
    assert json.loads((pdir / "groups=2,seed=0" / "point.json").read_text())["attempt"] == 1
    assert json.loads((pdir / "groups=3,seed=0" / "point.json").read_text())["attempt"] == 2
    launches = json.loads((pdir / "replicas.json").read_text())["launches"]
    assert len(launches) == 2  # the retry ran on a fresh fleet: new workers on new ports
    assert no_survivors(mark)
