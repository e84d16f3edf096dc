"""The capacity search end to end: `harness run` against a server whose TTFT grows with the requests in
flight by a known amount (tests/helpers/loaded_server.py), then `harness summarize`; resume reuses probes."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.helpers.cli import ROOT, harness, run_bench
from tests.helpers.procs import LOADED_SERVER, ScriptServer
from tests.helpers.specs import TIMEOUTS, shared_prefix, write_spec, write_yaml

# TTFT at concurrency c: at least BASE + PER_REQUEST x c (the server sleeps that long): 1,600 ms at c = 11
# (+ a few ms of client overhead once its connections are open), at least 1,700 ms at c = 12, so the
# largest concurrency whose median TTFT meets the bound is 11. The base keeps throughput rising well past
# the plateau test's 5% between probes (4 -> 8: +38%); with a 100 ms base it rose 11%, and a CI host busy
# with SGLang beside the test read 8 as saturated
BASE_MS = 500
PER_REQUEST_MS = 100
BOUND_MS = 1690


@pytest.fixture
def loaded_server():  # a process: every test that uses it is marked slow
    srv = ScriptServer(LOADED_SERVER, "--base-ms", str(BASE_MS), "--per-request-ms", str(PER_REQUEST_MS))
    yield srv
    srv.stop()


def _search_spec(tmp: Path, **search: object) -> Path:
    # 24 requests: two waves at c = 11 or 12 (the rest a short third), so every probe's waves see c in flight
    wl = shared_prefix(
        groups=1, prompts_per_group=24, system_prompt_tokens=16, question_tokens=4, output_tokens=4
    )
    return write_spec(
        tmp,
        "capacity",
        wl,
        tokenizer="word",
        seeds=[0],
        timeouts=dict(TIMEOUTS),
        search={
            "knob": "concurrency",
            "lo": 2,
            "hi": 16,
            # judged on the median: the first wave also pays for opening its connections (tens of ms on a
            # busy machine), the second does not; the goodput target only asks that many requests met it
            "slo": {"ttft_ms": BOUND_MS, "percentile": 50},
            "goodput": 0.4,
            **search,
        },
    )


def _run(spec: Path, url: str, cap: Path) -> str:
    r = harness(
        "run", str(spec), "--server-url", url, "--node", "n", "--capture", str(cap), "--quiet", timeout=300
    )
    assert r.returncode == 0, r.stderr + r.stdout
    return r.stdout + r.stderr


def _summary(cap: Path, out: Path, rc: int = 0) -> dict:
    r = harness("summarize", str(cap / "n"), "--out", str(out))
    assert r.returncode == rc, r.stderr
    return json.loads((out / "n.json").read_text())


@pytest.mark.slow
def test_search_finds_the_exact_largest_concurrency_in_few_probes_and_resumes(loaded_server, tmp_path):
    spec, cap = _search_spec(tmp_path), tmp_path / "cap"
    log = _run(spec, loaded_server.url, cap)
    s = _summary(cap, tmp_path / "sum")
    res = s["experiments"]["capacity"]["servers"]["attached"]["search"]
    assert res["knob"] == "concurrency" and res["complete"] is True
    assert (res["best"], res["above"]) == (11, 12), res
    # expanding 2, 4, 8, 16 (over), then bisecting 12 (over), 10, 11: seven probes for a range of 15 values
    assert [(p["value"], p["status"]) for p in res["probes"][:-1]] == [
        (2, "pass"),
        (4, "pass"),
        (8, "pass"),
        (10, "pass"),
        (11, "pass"),
        (12, "over"),
    ]
    # 16: over the SLO, and (24 requests = 1.5 waves) its throughput fell below 8's: either word is true
    assert res["probes"][-1]["value"] == 16 and res["probes"][-1]["status"] in ("over", "saturated")
    assert res["limiting"] == "ttft_ms"
    assert "over the SLO at 12" in res["stopped"]
    assert "best 11" in log
    # every probe is an ordinary point of the summary, with its goodput against the search's SLO
    keys = sorted(p["point_key"] for p in s["points"])
    assert keys == sorted(f"concurrency={c}" for c in (2, 4, 8, 10, 11, 12, 16))
    at = {p["point_key"]: p["median"]["goodput"]["fraction"] for p in s["points"]}
    # goodput counts the requests within the bound, recomputed here from the point's own records: at 12
    # fewer than half (its median was over), at 11 at least the target. Not 0 at 12 on a busy host: a
    # second-wave request that arrives after a slow client spread its wave sees 11 in flight and meets it
    for c in (11, 12):
        assert at[f"concurrency={c}"] == pytest.approx(_met(cap, c)), c
    assert at["concurrency=11"] >= 0.4 and at["concurrency=12"] < 0.5
    # the server saw what the search assumed: waves of 11 and of 12 in flight at once
    assert {11, 12} <= set(_stats(loaded_server)["peaks"])
    # a re-run reuses every ok probe: nothing is sent again
    served = _served(loaded_server)
    log2 = _run(spec, loaded_server.url, cap)
    assert _served(loaded_server) == served
    assert "7 probes already ok, reused" in log2 and "best 11" in log2


def _met(cap: Path, c: int) -> float:
    """The fraction of concurrency c's 24 requests that finished ok within BOUND_MS, from requests.jsonl."""
    (f,) = [p for p in cap.rglob("requests.jsonl") if f"concurrency={c}" in str(p)]
    rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if not r.get("warmup")]
    assert len(rows) == 24, (f, len(rows))
    return sum(1 for r in rows if r.get("ok") and r["ttft_s"] <= BOUND_MS / 1000) / 24


def _stats(srv: ScriptServer) -> dict:
    with urllib.request.urlopen(srv.url + "/stats", timeout=10) as r:
        return json.loads(r.read())


def _served(srv: ScriptServer) -> int:
    return int(_stats(srv)["served"])


@pytest.mark.slow
def test_sim_sessions_search_gives_gpu_only_and_hicache_capacities(tmp_path):
    """workloads/capacity-sessions.yaml on the sim, shortened (one seed, sessions 2..8): both servers'
    capacities, HiCache's the larger, in the summary and as one sentence of the report."""
    raw = yaml.safe_load((ROOT / "workloads" / "capacity-sessions.yaml").read_text())
    raw["seeds"] = [0]
    raw["search"]["hi"] = 8
    write_yaml(tmp_path / "cap.yaml", raw)
    r = run_bench(tmp_path, "--spec", "cap.yaml", "--server-kind", "sim", "--time-scale", "0.01", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    s = json.loads((tmp_path / "summaries" / "n.json").read_text())
    servers = s["experiments"]["capacity-sessions"]["servers"]
    gpu, hic = servers["gpu-only"]["search"], servers["hicache"]["search"]
    assert gpu["complete"] and hic["complete"]
    # GPU-only runs out of pool first: its sessions' histories are evicted and prefilled again
    assert gpu["best"] is not None and hic["best"] is not None and gpu["best"] < hic["best"], (gpu, hic)
    assert hic["best"] == 8 and hic["stopped"] == "hi (8) met the target"
    assert any(p["status"] in ("over", "saturated") for p in gpu["probes"])
    report = (tmp_path / "summaries" / "n.md").read_text()
    more = hic["best"] - gpu["best"]
    assert f"`hicache` took {more:g} more sessions than `gpu-only`" in report
    assert "### Capacity: the largest load that met the SLO" in report
    # the summary's and the report's goodput on the sim is the search's: judged on the modelled clock
    points = {(p["server"], p["point_key"]): p for p in s["points"]}
    for server, res in (("gpu-only", gpu), ("hicache", hic)):
        for pr in res["probes"]:
            modelled = points[(server, f"sessions={pr['value']:g}")]["median"]["modelled"]
            assert modelled["goodput"]["fraction"] == pytest.approx(pr["goodput"]), (server, pr)
    over = next(pr for pr in gpu["probes"] if pr["status"] in ("over", "saturated"))
    assert over["goodput"] < raw["search"]["goodput"]
    header = next(
        ln
        for ln in report.splitlines()
        if ln.startswith("| server | point |") and "| modelled goodput |" in ln
    )
    cols = [c.strip() for c in header.strip("|").split("|")]
    row = next(
        ln for ln in report.splitlines() if ln.startswith(f"| gpu-only | sessions={over['value']:g} |")
    )
    cells = dict(zip(cols, (c.strip() for c in row.strip("|").split("|")), strict=True))
    assert cells["modelled goodput"] == f"{over['goodput'] * 100:.1f}", cells


def _ok_probe(cap: Path, spec: Path, value: int, ttft_ms: float) -> None:
    """A probe's point folder as a finished run leaves it: point.json ok and its request records."""
    pdir = cap / "n" / "capacity" / "attached" / f"concurrency={value},seed=0"
    pdir.mkdir(parents=True)
    # throughput rising with the concurrency (24 requests in 24 / value seconds): no saturation
    recs = [
        {
            "ok": True,
            "ttft_s": ttft_ms / 1000,
            "e2e_s": 0.5,
            "completion_tokens": 4,
            "scheduled_mono": i / value,
            "done_mono": i / value + 0.5,
        }
        for i in range(24)
    ]
    (pdir / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    point = {"status": "ok", "requests_scheduled": 24, "sweep": {"concurrency": value}, "seed": 0}
    (pdir / "point.json").write_text(json.dumps(point))


def test_the_plan_reuses_ok_probes_and_names_only_the_next(tmp_path):
    from harness.capture.redact import spec_redactor
    from harness.spec import load_spec
    from harness.sweep.plan import BenchOptions, describe_plan, plan_experiment, plan_probes

    spec = load_spec(_search_spec(tmp_path))
    cap = tmp_path / "cap"
    _ok_probe(cap, tmp_path, 2, 300)
    _ok_probe(cap, tmp_path, 4, 500)
    planned = plan_probes(spec, [0], cap, "n", "attached")
    assert [(p.name, p.done) for p in planned] == [
        ("concurrency=2,seed=0", True),
        ("concurrency=4,seed=0", True),
        ("concurrency=8,seed=0", False),  # the next of the doubling: the only point to run now
    ]
    _ok_probe(cap, tmp_path, 8, 5000)  # over the bound: the search bisects below it
    assert [p.name for p in plan_probes(spec, [0], cap, "n", "attached") if not p.done] == [
        "concurrency=6,seed=0"
    ]
    raw = yaml.safe_load(_search_spec(tmp_path).read_text())
    spec = load_spec(
        write_yaml(tmp_path / "capacity.yaml", {**raw, "servers": [{"name": "attached", "launch": "sim"}]})
    )
    opts = BenchOptions(node="n", capture=cap)
    plan = plan_experiment(spec, opts)
    assert [p.name for p in plan.servers[0].points] == [f"concurrency={c},seed=0" for c in (2, 4, 8, 6)]
    text = "\n".join(describe_plan([plan], opts, spec_redactor([spec])))
    assert "search concurrency in [2, 16]: the points after these are chosen as the search goes" in text


@pytest.mark.slow
def test_a_failed_probe_is_failed_with_its_reason_not_over_the_slo(tmp_path):
    """Above 5 in flight the server refuses requests (503): those probes fail, and the search bisects below them."""
    srv = ScriptServer(LOADED_SERVER, "--base-ms", "50", "--per-request-ms", "10", "--fail-above", "5")
    try:
        spec, cap = _search_spec(tmp_path, hi=8, slo={"ttft_ms": 10_000}), tmp_path / "cap"
        r = harness(
            "run", str(spec), "--server-url", srv.url, "--node", "n", "--capture", str(cap), "--quiet"
        )
        assert r.returncode == 1, r.stderr  # failed points make the run exit 1, search or not
    finally:
        srv.stop()
    res = _summary(cap, tmp_path / "sum", rc=1)["experiments"]["capacity"]["servers"]["attached"]["search"]
    assert res["best"] == 5, res
    by = {p["value"]: p for p in res["probes"]}
    assert [(v, by[v]["status"]) for v in sorted(by)] == [
        (2, "pass"),
        (4, "pass"),
        (5, "pass"),
        (6, "failed"),
        (8, "failed"),
    ]
    # the point's own failure, its HTTP errors counted: how many of the 24 the server refused is timing
    rows = (cap / "n" / "capacity" / "attached" / "concurrency=6,seed=0" / "requests.jsonl").read_text()
    refused = sum(json.loads(x).get("error_kind") == "http" for x in rows.splitlines() if x.strip())
    assert 0 < refused <= 24 and by[6]["reason"] == f"point failed: http: {refused}", (refused, by[6])
    assert by[6]["goodput"] is None  # not judged against the SLO at all
    assert res["stopped"].startswith("failed at 6: point failed: ")


# request_rate: open loop, constant arrivals, one request at a time (concurrency 1: the client's queue is the
# server's). The loaded server then always sees one in flight, so each request is served in S = base +
# per_request x 1 (+ a few ms of overhead: S' is measured, the TTFT p50 of the lowest, unqueued probe).
# At rate r < 1/S' nothing waits: TTFT = S'. At r > 1/S' request k (from 0) is due at k/r and starts when
# k - 1 ended, k S': it waits k (S' - 1/r), so TTFT_k = S' + k (S' - 1/r), growing through the run: the queue
# never drains. Of N = 24 requests the median is the mean of k = 11 and 12, so p50 TTFT <= bound X iff
# S' + 11.5 (S' - 1/r) <= X, and the largest rate meeting it is r* = 1 / (S' - (X - S') / 11.5): with
# S' = 60 ms and X = 100 ms, 17.7 req/s (17.0 req/s with S' = 62 ms). At 24 req/s the last quarter's median
# (k = 20.5) waits about 8x the first quarter's (k = 2.5): the doubling from 12 stops there, saturated.
RATE_BASE_MS, RATE_PER_REQUEST_MS, RATE_BOUND_MS = 50, 10, 100


@pytest.mark.slow
def test_request_rate_search_finds_the_largest_rate_and_stops_at_a_queue_that_never_drains(tmp_path):
    srv = ScriptServer(
        LOADED_SERVER, "--base-ms", str(RATE_BASE_MS), "--per-request-ms", str(RATE_PER_REQUEST_MS)
    )
    try:
        spec = _search_spec(
            tmp_path,
            knob="request_rate",
            lo=12,
            hi=24,
            slo={"ttft_ms": RATE_BOUND_MS, "percentile": 50},
        )
        raw = yaml.safe_load(spec.read_text())
        # 48 requests: at 24 req/s the last quarter waits ~5x the first (3x is "never drained"); with 24 the
        # margin was ~4x over 3x, and a client slowed by a busy host sent them too slowly to show it
        raw["workload"]["prompts_per_group"] = 48
        write_yaml(spec, {**raw, "concurrency": 1, "arrival": "constant"})
        _run(spec, srv.url, tmp_path / "cap")
        assert set(_stats(srv)["peaks"]) == {1}  # one in flight, always: the queue is the client's
    finally:
        srv.stop()
    s = _summary(tmp_path / "cap", tmp_path / "sum")
    res = s["experiments"]["capacity"]["servers"]["attached"]["search"]
    assert res["knob"] == "request_rate" and res["complete"] is True, res
    by = {p["value"]: p for p in res["probes"]}
    # 12 req/s is below 1/S': unqueued, TTFT = S'
    s_prime = by[12]["ttft_p50_s"]
    assert RATE_BASE_MS + RATE_PER_REQUEST_MS <= s_prime * 1000 < RATE_BOUND_MS, by[12]
    expected = 1 / (s_prime - (RATE_BOUND_MS / 1000 - s_prime) / 11.5)
    # the doubling stopped at 24 as saturated (the queue grew through the run), not merely over the SLO
    assert by[24]["status"] == "saturated" and "never drained" in by[24]["reason"], by[24]
    assert "saturated" in res["stopped"]
    # bisected down to the search's resolution: best passed, above did not, within 5% of each other ...
    best, above = res["best"], res["above"]
    assert by[best]["status"] == "pass" and by[above]["status"] in ("over", "saturated"), res
    assert best < above <= best * 1.05 + 1e-9, res
    # ... around the computed capacity: 3% above for the run's jitter of a few ms per request; 8% below, as
    # a loaded host serves the faster probes slower than S' measured at 12 req/s (a CI run with both cores
    # busy found above = 16.5 against 17.1 computed)
    assert best <= expected * 1.03 and above >= expected * 0.92, (expected, res)
    assert all(p["status"] == "pass" for p in res["probes"] if p["value"] < best)
    assert len(res["probes"]) <= 7, res
