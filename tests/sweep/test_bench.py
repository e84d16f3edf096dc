"""`harness bench` against the sim, through the real CLI in a temp folder: sweep, resume, restarts, signals.

Every server a test starts carries a unique BENCH_TEST_MARK in its environment, so "no server survives"
is checked by scanning /proc for that mark rather than trusting the harness's own bookkeeping.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from harness.capture import experiment_dir, point_name
from harness.capture.manifest import write_manifest
from harness.capture.redact import spec_redactor
from harness.errors import HarnessError
from harness.spec import load_spec
from harness.sweep.bench import write_bench_manifest
from harness.sweep.plan import BenchOptions, check_capture_matches, check_model, plan_experiment
from tests.helpers.cli import bench_argv, run_bench
from tests.helpers.procs import marked_pids, no_survivors
from tests.helpers.specs import SIM_FAST, bench_spec

REPO = Path(__file__).resolve().parents[2]
FIRST_LAUNCH = str(Path(__file__).parents[1] / "helpers" / "servers_first_launch.py")


def point_json(cap: Path, exp: str, server: str, point: str) -> dict:
    return json.loads((cap / "n" / exp / server / point / "point.json").read_text())


@pytest.fixture
def mark() -> str:
    m = uuid.uuid4().hex
    yield m
    for pid in marked_pids(m):  # never leave anything behind, even when an assertion failed
        os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_smoke_suite_end_to_end(tmp_path: Path) -> None:
    t0 = time.monotonic()
    r = run_bench(tmp_path, "--suite", "smoke", timeout=170)
    assert r.returncode == 0, r.stdout + r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("server kind: sim, modelling card ") and "--card-profile" in first
    out = r.stdout.splitlines()  # the phases after the bar say when they start and end (no silent minutes)
    starts = [
        i for i, x in enumerate(out) if x.startswith(("summarizing ", "report n ")) and x.endswith("...")
    ]
    ends = [i for i, x in enumerate(out) if x.startswith(("summarizing ", "report n ")) and ": done in " in x]
    assert len(starts) == 2 and len(ends) == 2 and starts[0] < ends[0] < starts[1] < ends[1], r.stdout
    assert re.search(r"^sweep: \d+/\d+ runs ok \(a run: one point at one seed\)", r.stdout, re.M), r.stdout
    glance = out[
        out.index("at a glance (n):") + 1 :
    ]  # the terminal shows the first screen the .md opens with
    assert glance[0].startswith("- smoke-bench. ") and "`" not in glance[0], r.stdout
    md = (tmp_path / "summaries" / "n.md").read_text()
    assert glance[0][2:] in md.replace("**", "").replace("`", "")
    summary = json.loads((tmp_path / "summaries" / "n.json").read_text())
    assert len(summary["points"]) == 4 and all(p["status"] == "ok" for p in summary["points"])
    assert (tmp_path / "summaries" / "n.md").read_text().startswith("# Node n")
    for pid in (int(p) for p in re.findall(r"\(pid (\d+)\)", r.stdout)):
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().split(") ")[1][:1]
        )
    manifest = json.loads((tmp_path / "capture" / "n" / "smoke-bench" / "manifest.json").read_text())
    assert manifest["bench"]["server_kind"] == "sim" and manifest["harness_version"]
    assert manifest["servers"]["hicache"]["argv"][-4:] == ["--card-profile", "l4-8b", "--time-scale", "0.05"]
    print(f"smoke suite: {time.monotonic() - t0:.1f}s")


@pytest.mark.slow
def test_dry_run_prints_plan_and_launch_lines_and_writes_nothing(tmp_path: Path, mark: str) -> None:
    spec = bench_spec(tmp_path, mark)
    r = run_bench(tmp_path, "--spec", str(spec), "--dry-run")
    assert r.returncode == 0, r.stderr
    assert (
        "-m harness serve-sim --host 127.0.0.1 --port {port} --model-path default --card-profile tiny-test"
        in r.stdout
    )
    assert "groups=1,seed=0" in r.stdout and "total: 2 runs (point x seed) to run" in r.stdout
    assert not (tmp_path / "capture").exists() and not marked_pids(mark)


@pytest.mark.slow
def test_kill_9_then_rerun_resumes_without_rerunning_done_points(tmp_path: Path, mark: str) -> None:
    spec = bench_spec(tmp_path, mark, seeds=[0, 1], sweep={"groups": [1, 2, 3]},
                      servers=[{"name": "s", "launch": "sim", "args": ["--card-profile", "tiny-test", "--time-scale", "0.5"]}])  # fmt: skip
    cap = tmp_path / "capture"
    proc = subprocess.Popen(bench_argv("--spec", str(spec)), cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    ok_lines = []
    try:
        for line in proc.stdout:
            if ": ok (attempt" in line:
                ok_lines.append(line)
            if len(ok_lines) == 2:
                break
        proc.kill()
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(ok_lines) == 2
    assert no_survivors(mark), "the server outlived a harness killed with SIGKILL"
    done = {p.parent.name: p.stat().st_mtime_ns for p in (cap / "n" / "tiny" / "s").glob("*/point.json")
            if json.loads(p.read_text())["status"] == "ok"}  # fmt: skip
    assert 2 <= len(done) < 6
    r = run_bench(tmp_path, "--spec", str(spec))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"{len(done)} runs already ok, skipped" in r.stdout
    for name, mtime in done.items():
        assert (cap / "n" / "tiny" / "s" / name / "point.json").stat().st_mtime_ns == mtime
        assert point_json(cap, "tiny", "s", name)["attempt"] == 1
    pts = sorted(p.parent.name for p in (cap / "n" / "tiny" / "s").glob("*/point.json"))
    assert len(pts) == 6 and all(point_json(cap, "tiny", "s", p)["status"] == "ok" for p in pts)
    # the same sweep uninterrupted, elsewhere: the summaries hold the same points
    other = tmp_path / "other"
    other.mkdir()
    r2 = run_bench(other, "--spec", str(spec))
    assert r2.returncode == 0, r2.stdout + r2.stderr
    a = json.loads((tmp_path / "summaries" / "n.json").read_text())["points"]
    b = json.loads((other / "summaries" / "n.json").read_text())["points"]
    assert len(a) == len(b) == 3
    assert sorted((p["point_key"], len(p["seeds"])) for p in a) == sorted(
        (p["point_key"], len(p["seeds"])) for p in b
    )
    assert no_survivors(mark)


@pytest.mark.slow
def test_server_crash_mid_point_is_restarted_and_the_point_retried(tmp_path: Path, mark: str) -> None:
    marker = tmp_path / "launched-once"
    cmd = [
        sys.executable,
        FIRST_LAUNCH,
        str(marker),
        "--fault-crash-after",
        "3",
        "--",
        "--port",
        "{port}",
        "--model-path",
        "default",
        *SIM_FAST,
    ]
    spec = bench_spec(tmp_path, mark, sweep={"groups": [2]},
                      servers=[{"name": "c", "launch": "command", "engine": "sim", "command": cmd}])  # fmt: skip
    r = run_bench(tmp_path, "--spec", str(spec))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "failed (attempt 1): server exited with code" in r.stdout and "restarting and retrying" in r.stdout
    assert "groups=2,seed=0: ok (attempt 2" in r.stdout
    pdir = tmp_path / "capture" / "n" / "tiny" / "c" / "groups=2,seed=0"
    rec = json.loads((pdir / "point.json").read_text())
    assert rec["status"] == "ok" and rec["attempt"] == 2
    assert (pdir / "requests.attempt-1.jsonl").exists()
    log = (pdir.parent / "server.log").read_text()
    assert log.count("ready to roll") == 2
    assert no_survivors(mark)


@pytest.mark.slow
def test_server_that_never_becomes_ready_fails_with_its_log_tail(tmp_path: Path, mark: str) -> None:
    servers = [
        {
            "name": "late",
            "launch": "sim",
            "args": [*SIM_FAST, "--fault-ready-delay", "-1"],
            "ready_timeout_s": 3,
        }
    ]
    spec = bench_spec(tmp_path, mark, servers=servers)
    t0 = time.monotonic()
    r = run_bench(tmp_path, "--spec", str(spec))
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    assert "late: server failed to start" in r.stdout and "not ready after 3s" in r.stdout
    assert "last lines:" in r.stdout and "server_args=" in r.stdout  # the tail quotes the server's own log
    assert took < 30
    assert no_survivors(mark)


@pytest.mark.slow
def test_sigint_stops_the_server_and_leaves_the_capture_resumable(tmp_path: Path, mark: str) -> None:
    spec = bench_spec(tmp_path, mark, seeds=[0, 1, 2], sweep={"groups": [1, 2, 3]},
                      servers=[{"name": "s", "launch": "sim", "args": ["--card-profile", "tiny-test", "--time-scale", "0.5"]}])  # fmt: skip
    proc = subprocess.Popen(bench_argv("--spec", str(spec)), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    server_pid = None
    try:
        for line in proc.stdout:
            m = re.search(r"\(pid (\d+)\)", line)
            server_pid = int(m.group(1)) if m else server_pid
            if ": ok (attempt" in line:
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "run the same command again to resume" in err
    assert server_pid and not Path(f"/proc/{server_pid}").exists()
    assert no_survivors(mark, within=2)
    r = run_bench(tmp_path, "--spec", str(spec))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 runs already ok, skipped" in r.stdout


@pytest.mark.slow
def test_sigterm_stops_the_server(tmp_path: Path, mark: str) -> None:
    servers = [{"name": "s", "launch": "sim", "args": ["--card-profile", "tiny-test", "--time-scale", "1"]}]
    spec = bench_spec(tmp_path, mark, seeds=[0, 1, 2], servers=servers)
    proc = subprocess.Popen(bench_argv("--spec", str(spec)), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        for line in proc.stdout:
            if "ready in" in line:
                break
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert no_survivors(mark, within=2)


@pytest.mark.slow
def test_api_keys_never_reach_the_capture(tmp_path: Path, mark: str) -> None:
    key = "sk-test-" + uuid.uuid4().hex
    servers = [{"name": "s", "launch": "sim", "args": [*SIM_FAST, "--api-key", "{env:BENCH_TEST_API_KEY}"]}]
    spec = bench_spec(
        tmp_path,
        mark,
        servers=servers,
        headers={"Authorization": "Bearer ${BENCH_TEST_API_KEY}"},
        sweep={"groups": [1]},
    )
    r = run_bench(
        tmp_path, "--spec", str(spec), env={"BENCH_TEST_API_KEY": key, "OTHER_SERVICE_TOKEN": key + "x"}
    )
    assert r.returncode == 0, r.stdout + r.stderr  # requests were accepted: the key was sent
    assert key not in r.stdout + r.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".yaml"]
    names = {p.name for p in files}
    assert {"requests.jsonl", "server.log", "server_info.json", "manifest.json", "n.json", "n.md"} <= names
    for p in files:
        assert key.encode() not in p.read_bytes(), f"API key written to {p}"
    assert no_survivors(mark)


@pytest.mark.slow
def test_unwritable_capture_stops_before_any_server_is_launched(tmp_path: Path, mark: str) -> None:
    spec = bench_spec(tmp_path, mark)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the capture folder should be")
    r = run_bench(tmp_path, "--spec", str(spec), "--capture", str(blocker / "capture"))
    assert r.returncode == 2
    assert r.stderr.strip().startswith("harness bench: error: capture ") and "not writable" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "ready in" not in r.stdout
    assert not marked_pids(mark)


@pytest.mark.slow
def test_bad_server_profile_is_one_line_exit_2(tmp_path: Path, mark: str) -> None:
    spec = bench_spec(
        tmp_path, mark, servers=[{"name": "x", "launch": "command", "command": "serve --port {port}"}]
    )
    r = run_bench(tmp_path, "--spec", str(spec), "--dry-run")
    assert r.returncode == 2
    assert r.stderr.strip() == (
        f"harness bench: error: {spec}: servers[0].command: expected a list of arguments, "
        "not one string (commands are never run by a shell)"
    )


# ------------------------------------------------------------------ planning (in process)


def _opts(tmp_path: Path, **kw) -> BenchOptions:
    return BenchOptions(node="n", capture=tmp_path / "capture", summaries=tmp_path / "summaries", **kw)


def test_plan_skips_ok_points_and_filters_by_only_and_server(tmp_path: Path) -> None:
    servers = [{"name": "{policy}", "launch": "sglang", "args": ["--radix-eviction-policy", "{policy}"]}]
    spec = load_spec(
        bench_spec(tmp_path, "m", servers=servers, matrix={"policy": ["lru", "lfu"]}, seeds=[0, 1])
    )
    opts = _opts(tmp_path)
    ok = tmp_path / "capture" / "n" / "tiny" / "lru" / "groups=1,seed=1" / "point.json"
    ok.parent.mkdir(parents=True)
    ok.write_text(json.dumps({"status": "ok"}))
    bad = ok.parent.parent / "groups=2,seed=0" / "point.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"status": "failed"}))
    plan = plan_experiment(spec, opts)
    lru, lfu = plan.servers
    assert lru.done == ["groups=1,seed=1"] and len(lru.todo) == 3 and len(lfu.todo) == 4
    assert lru.profile.launch == "sim" and lru.profile.args[-2:] == ("--card-profile", "l4-8b")
    only = plan_experiment(spec, _opts(tmp_path, only=["groups=2"], servers=["lf*"]))
    assert [s.profile.name for s in only.servers] == ["lfu"]
    assert [point_name(p.sweep, s) for p, s in only.servers[0].todo] == [
        "groups=2,seed=0",
        "groups=2,seed=1",
    ]
    assert plan_experiment(spec, _opts(tmp_path, only=["turns=2"])).skipped
    with pytest.raises(HarnessError, match="no point with groups=9"):
        plan_experiment(spec, _opts(tmp_path, only=["groups=9"]))


def test_sim_settings_come_from_cli_then_spec(tmp_path: Path) -> None:
    spec = load_spec(bench_spec(tmp_path, "m", servers=[{"name": "a", "launch": "sglang"}],
                                suite={"sim": {"card_profile": "h200-8b", "time_scale": 0.1, "args": ["--page-size", "1"]}}))  # fmt: skip
    p = plan_experiment(spec, _opts(tmp_path)).servers[0].profile
    assert p.args == ("--card-profile", "h200-8b", "--time-scale", "0.1", "--page-size", "1")
    p = plan_experiment(spec, _opts(tmp_path, time_scale=0.5, card_profile="tiny-test")).servers[0].profile
    assert p.args[:4] == ("--card-profile", "tiny-test", "--time-scale", "0.5")
    real = plan_experiment(spec, _opts(tmp_path, server_kind="sglang")).servers[0].profile
    assert real.launch == "sglang" and real.args == ("--served-model-name", "default")


@pytest.mark.slow
def test_changed_spec_or_server_refuses_to_mix_into_an_old_capture(tmp_path: Path) -> None:
    path = bench_spec(tmp_path, "m")
    spec = load_spec(path)
    opts = _opts(tmp_path)
    plan = plan_experiment(spec, opts)
    red = spec_redactor([spec])
    write_bench_manifest(plan, opts, red, {})
    pj = tmp_path / "capture" / "n" / "tiny" / "s" / "groups=1,seed=0" / "point.json"
    pj.parent.mkdir(parents=True)
    pj.write_text(json.dumps({"status": "ok"}))
    check_capture_matches(plan, red)  # same spec: fine
    raw = yaml.safe_load(path.read_text())
    raw["servers"][0]["args"] = [*SIM_FAST, "--max-total-tokens", "4096"]
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(HarnessError, match="different server launch"):
        check_capture_matches(plan_experiment(load_spec(path), opts), red)
    raw["workload"]["system_prompt_tokens"] = 128
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(HarnessError, match="different version"):
        check_capture_matches(plan_experiment(load_spec(path), opts), red)


def test_bench_and_run_share_one_spec_check(tmp_path: Path) -> None:
    """Points left by `harness run` under another spec version are refused by bench too; a stale key is not."""
    path = bench_spec(tmp_path, "m")
    opts = _opts(tmp_path)
    red = spec_redactor([load_spec(path)])
    spec = load_spec(path)
    write_manifest(experiment_dir(opts.capture, opts.node, spec.name), spec, opts.node, red)
    raw = yaml.safe_load(path.read_text())
    raw["workload"]["system_prompt_tokens"] = 128
    path.write_text(yaml.safe_dump(raw))
    plan = plan_experiment(load_spec(path), opts)
    check_capture_matches(plan, red)  # no points yet: fine
    pj = tmp_path / "capture" / "n" / "tiny" / "attached" / "groups=1,seed=0" / "point.json"
    pj.parent.mkdir(parents=True)
    pj.write_text(json.dumps({"status": "ok"}))
    with pytest.raises(HarnessError, match="different version"):
        check_capture_matches(plan, red)
    pj.unlink()
    write_bench_manifest(plan, opts, red, {})  # the new spec's fingerprint replaces the old one
    pj.write_text(json.dumps({"status": "ok"}))
    check_capture_matches(plan, red)


def test_model_path_that_does_not_exist_is_caught_before_launch(tmp_path: Path) -> None:
    spec = load_spec(bench_spec(tmp_path, "m", servers=[{"name": "a", "launch": "sglang"}]))
    opts = _opts(tmp_path, server_kind="sglang", model=str(tmp_path / "no-such-model"))
    with pytest.raises(HarnessError, match="--model: .*no-such-model does not exist"):
        check_model([plan_experiment(spec, opts)])


def test_suites_exist_and_are_valid() -> None:
    from harness.sweep.suites import SUITES

    for files in SUITES.values():
        for f in files:
            spec = load_spec(REPO / "workloads" / f)
            plan = plan_experiment(spec, BenchOptions(node="n", capture=Path("/nonexistent")))
            assert plan.servers and all(s.todo for s in plan.servers)
    ws = load_spec(REPO / "workloads" / "working-set.yaml")
    assert ws.sweep == {"groups": [4, 16, 32, 64]} and ws.seeds == [0, 1, 2] and ws.concurrency == 8
    ev = plan_experiment(load_spec(REPO / "workloads" / "eviction-multiturn.yaml"), BenchOptions(node="n"))
    assert [s.profile.name for s in ev.servers] == [
        "lru-8192",
        "lru-16384",
        "lfu-8192",
        "lfu-16384",
        "slru-8192",
        "slru-16384",
    ]


def test_a_replicas_experiment_short_of_gpus_is_skipped_in_a_suite_and_refused_from_a_spec(
    tmp_path: Path,
) -> None:
    """On a one-GPU node the default suite's replicas experiment must not stop the rest of the suite; a spec
    the user named is refused in one line before anything starts."""
    server = {"name": "rr", "launch": "sglang", "replicas": 2, "router": {"policy": "round_robin"},
              "env": {"CUDA_VISIBLE_DEVICES": "0"}}  # fmt: skip
    spec = load_spec(bench_spec(tmp_path, "m", servers=[server]))
    plan = plan_experiment(spec, _opts(tmp_path, server_kind="sglang", suite="default"))
    assert plan.servers == [] and plan.skipped == (
        "server rr: replicas 2 x tensor parallel 1 needs 2 GPUs; 1 visible (0) "
        "(the default suite skips this experiment on this node)"
    )
    with pytest.raises(
        HarnessError, match=r"^server rr: replicas 2 x tensor parallel 1 needs 2 GPUs; 1 visible"
    ):
        plan_experiment(spec, _opts(tmp_path, server_kind="sglang"))
    sim = plan_experiment(spec, _opts(tmp_path, server_kind="sim", suite="default"))
    assert not sim.skipped and sim.servers[0].gpus == [None, None]  # the sim has no GPU to split


@pytest.mark.slow
def test_too_little_free_disk_stops_before_launch(tmp_path: Path, mark: str) -> None:
    spec = bench_spec(tmp_path, mark)
    r = run_bench(tmp_path, "--spec", str(spec), "--min-free-mb", str(10**12))
    assert r.returncode == 2 and "MB free (need at least" in r.stderr and "ready in" not in r.stdout
    assert not marked_pids(mark)


@pytest.mark.slow
def test_server_kind_sglang_without_sglang_is_one_line(tmp_path: Path, mark: str) -> None:
    pytest.importorskip("harness.telemetry.gpus")
    spec = bench_spec(tmp_path, mark)
    try:
        import sglang  # noqa: F401

        pytest.skip("sglang is installed here")
    except ImportError:
        pass
    r = run_bench(tmp_path, "--spec", str(spec), "--server-kind", "sglang")
    assert r.returncode == 2
    assert r.stderr.startswith("harness bench: error: --server-kind sglang: import sglang failed")
    assert len(r.stderr.strip().splitlines()) == 1
