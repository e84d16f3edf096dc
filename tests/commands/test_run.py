"""`harness run` in attach mode: the capture it writes, resume, flush handling, bad URL, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from harness.capture import read_jsonl
from harness.servers.control import flush_cache
from harness.spec import load_spec
from harness.sweep.attach import run_points
from tests.helpers import cli
from tests.helpers.procs import wait_lines
from tests.helpers.specs import shared_prefix, write_spec

ROOT = Path(__file__).resolve().parents[2]
# the token the spec's header names, in every run's environment
harness = partial(cli.harness, env={"HARNESS_TEST_TOKEN": "tok-123-secret"})


def spec_file(tmp_path: Path, **over) -> Path:
    wl = shared_prefix(prompts_per_group=3, system_prompt_tokens=12, question_tokens=3, output_tokens=3)
    headers = {"Authorization": "Bearer ${HARNESS_TEST_TOKEN}"}
    top = {
        "model": "m",
        "workload": wl,
        "concurrency": 3,
        "seeds": [0, 1],
        "sweep": {"groups": [1, 2]},
        "headers": headers,
    }
    return write_spec(tmp_path, "exp", file="exp.yaml", **{**top, **over})


@pytest.mark.slow
def test_run_writes_capture_and_resumes(fake_server, tmp_path):
    spec = spec_file(tmp_path)
    cap = tmp_path / "cap"
    r = harness(
        "run", str(spec), "--server-url", fake_server.url, "--node", "n1", "--capture", str(cap), "--quiet"
    )
    assert r.returncode == 0, r.stderr
    exp = cap / "n1" / "exp"
    names = sorted(p.name for p in (exp / "attached").iterdir())
    assert names == ["groups=1,seed=0", "groups=1,seed=1", "groups=2,seed=0", "groups=2,seed=1"]
    for n in names:
        pdir = exp / "attached" / n
        point = json.loads((pdir / "point.json").read_text())
        rows, bad = read_jsonl(pdir / "requests.jsonl")
        assert bad == 0 and point["status"] == "ok" and point["flushed"] is True
        assert point["requests_ok"] == len(rows) == point["requests_scheduled"] == 3 * int(n[7])
        assert (pdir / "metrics-before.prom").read_text().startswith("# TYPE")
        assert (pdir / "metrics-after.prom").exists()
        assert (pdir / "point.json").stat().st_mtime >= (pdir / "requests.jsonl").stat().st_mtime
        assert all(r["point"] == n and r["server"] == "attached" for r in rows)
        # telemetry around every point: on this GPU-less machine, a null sampler that says why
        header = json.loads((pdir / "telemetry.jsonl").read_text().splitlines()[0])
        assert header["kind"] == "header" and point["telemetry_status"] == header["status"]
        assert header["status"].startswith(("no NVML", "no GPU", "ok"))
    manifest = (exp / "manifest.json").read_text()
    m = json.loads(manifest)
    assert m["experiment"] == "exp" and m["harness_version"] and m["host"] and m["python"]
    assert "tok-123-secret" not in manifest and m["spec"]["headers"]["Authorization"] == "<redacted>"
    for n in names:
        assert "tok-123-secret" not in (exp / "attached" / n / "requests.jsonl").read_text()
    # resume: nothing re-run
    before = fake_server.stats()["requests"]
    r2 = harness(
        "run", str(spec), "--server-url", fake_server.url, "--node", "n1", "--capture", str(cap), "--quiet"
    )
    assert r2.returncode == 0 and fake_server.stats()["requests"] == before
    assert "already ok" in r2.stderr


@pytest.mark.slow
def test_only_and_seeds_select_points(fake_server, tmp_path):
    cap = tmp_path / "cap"
    r = harness(
        "run",
        str(spec_file(tmp_path)),
        "--server-url",
        fake_server.url,
        "--node",
        "n",
        "--capture",
        str(cap),
        "--only",
        "groups=2",
        "--seeds",
        "1",
        "--quiet",
    )
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (cap / "n" / "exp" / "attached").iterdir()] == ["groups=2,seed=1"]
    bad = harness("run", str(spec_file(tmp_path)), "--server-url", fake_server.url, "--only", "colour=red")
    assert bad.returncode == 2 and "not a sweep key" in bad.stderr


@pytest.mark.slow
def test_refused_url_is_one_line_exit_2(tmp_path, free_port):
    r = harness(
        "run",
        str(spec_file(tmp_path)),
        "--server-url",
        f"http://127.0.0.1:{free_port}",
        "--capture",
        str(tmp_path / "cap"),
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "cannot reach" in r.stderr
    assert not (tmp_path / "cap").exists() or not list((tmp_path / "cap").rglob("point.json"))


@pytest.mark.slow
def test_unparsable_url_is_one_line_exit_2(tmp_path):
    r = harness(
        "run", str(spec_file(tmp_path)), "--server-url", "http://[::1", "--capture", str(tmp_path / "c")
    )
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "cannot reach" in r.stderr, r.stderr


@pytest.mark.slow
def test_flush_retries_and_missing_endpoint(fake_server_factory):
    busy = fake_server_factory("--flush-busy", "2")
    ok, note = flush_cache(busy.url, wait_s=0.01)
    assert ok is True and "3 tries" in note
    stuck = fake_server_factory("--flush-busy", "100")
    ok, note = flush_cache(stuck.url, tries=3, wait_s=0.01)
    assert ok is False and "pending" in note
    none = fake_server_factory("--no-flush")
    ok, note = flush_cache(none.url)
    assert ok is None and "no flush endpoint" in note


@pytest.mark.slow
def test_failed_point_is_rerun_with_old_records_kept(fake_server_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_TOKEN", "x")
    srv = fake_server_factory("--no-flush")
    spec = load_spec(spec_file(tmp_path, seeds=[0], sweep={"groups": [1]}, max_failed_fraction=0.0))
    cap = tmp_path / "cap"
    pdir = cap / "n" / "exp" / "attached" / "groups=1,seed=0"
    pdir.mkdir(parents=True)
    (pdir / "requests.jsonl").write_text('{"ok": false, "error_kind": "http"}\n')
    (pdir / "point.json").write_text(json.dumps({"status": "failed", "attempt": 1}))
    recs = run_points(spec, base_url=srv.url, server_name="attached", node="n", capture_root=cap)
    assert recs[0].status == "ok" and recs[0].attempt == 2 and recs[0].flushed is None
    assert "no flush endpoint" in recs[0].flush_note
    assert (pdir / "requests.attempt-1.jsonl").read_text().count("\n") == 1
    assert len(read_jsonl(pdir / "requests.jsonl")[0]) == 3


def test_partial_and_failed_status(fake_server_factory, tmp_path, free_port, monkeypatch):
    monkeypatch.setenv("HARNESS_TEST_TOKEN", "x")
    spec = load_spec(spec_file(tmp_path, seeds=[0], sweep={"groups": [1]}))
    recs = run_points(
        spec,
        base_url=f"http://127.0.0.1:{free_port}",
        server_name="down",
        node="n",
        capture_root=tmp_path / "cap",
    )
    assert recs[0].status == "failed" and recs[0].errors == {"connect": 3} and recs[0].flushed is False


@pytest.mark.slow
@pytest.mark.parametrize(
    "inherited", [signal.SIG_DFL, signal.SIG_IGN], ids=["sigint-default", "sigint-ignored"]
)
def test_sigint_leaves_valid_requests_jsonl(fake_server_factory, tmp_path, inherited):
    # sigint-ignored: started as `harness run … &` from a script or CI job is (the shell ignores SIGINT
    # for it); a Ctrl-C / kill -INT was then lost and the run went on to exit 0 with every request sent
    srv = fake_server_factory("--ttft-ms", "20", "--itl-ms", "150")
    spec = spec_file(
        tmp_path,
        seeds=[0],
        sweep={"groups": [1]},
        workload={
            "kind": "shared-prefix",
            "groups": 4,
            "prompts_per_group": 20,
            "system_prompt_tokens": 8,
            "question_tokens": 2,
            "output_tokens": 8,
        },
    )
    cap = tmp_path / "cap"
    env = {**os.environ, "HARNESS_TEST_TOKEN": "x"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(spec),
            "--server-url",
            srv.url,
            "--node",
            "n",
            "--capture",
            str(cap),
            "--quiet",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, inherited),  # what exec hands the child
    )
    pdir = cap / "n" / "exp" / "attached" / "groups=1,seed=0"
    wait_lines(pdir / "requests.jsonl", 3)  # some records on disk
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    lines = (pdir / "requests.jsonl").read_text().splitlines()
    rows = [json.loads(x) for x in lines]  # all complete
    assert 3 <= len(rows) < 80
    assert any(r["error_kind"] == "cancelled" for r in rows)
    point = json.loads((pdir / "point.json").read_text())
    assert point["status"] == "interrupted" and point["requests_ok"] + point["requests_failed"] == len(rows)


# a run's end writes point.json and records, never a summary: these load only for summarize/report or a trace
NOT_FOR_A_RUN = ("pydantic", "numpy", "harness.summary", "harness.verdicts")


@pytest.mark.slow
def test_a_run_over_http_imports_no_summary_types_and_no_numpy(tmp_path):
    """pydantic (the summary's types) and numpy cost a run ~20 MB of RSS and ~0.3 s of CPU at start."""
    from tests.helpers.procs import SimProc

    sim = SimProc(tmp_path)
    try:
        spec = spec_file(tmp_path)
        argv = ["run", str(spec), "--server-url", sim.url, "--capture", str(tmp_path / "cap"), "--quiet"]
        code = (
            "import atexit, sys\n"
            f"atexit.register(lambda: print(sorted(m for m in {NOT_FOR_A_RUN!r} if m in sys.modules)))\n"
            "from harness.cli import main\n"
            f"sys.exit(main({argv!r}))\n"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_TEST_TOKEN": "t"}
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
        )
    finally:
        sim.stop()
    assert out.returncode == 0, out.stderr
    assert "4/4 points ok" in out.stdout and out.stdout.strip().splitlines()[-1] == "[]", out.stdout
