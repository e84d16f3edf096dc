"""Two CLI rough edges of issue 23 item 6: `harness run --server-log FILE` (an attached server's log read
as a launched server's) and `harness bench --spec A --spec B` (every spec runs, in order)."""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path

import pytest

from harness.cli import main
from tests.helpers import cli
from tests.helpers.specs import TIMEOUTS, shared_prefix, write_spec

harness = partial(cli.harness, timeout=300)  # a bench of two specs on the sim


def spec_file(tmp: Path, name: str = "attached-log", **top) -> Path:
    wl = shared_prefix(question_tokens=8, output_tokens=4)
    top = {
        "workload": wl,
        "concurrency": 2,
        "seeds": [0],
        "sweep": {"groups": [1, 2]},
        "timeouts": TIMEOUTS,
        **top,
    }
    return write_spec(tmp, name, **{"api": "sglang-generate", "model": "m", **top})


@pytest.mark.parametrize("bad", ["missing", "folder"])
def test_server_log_missing_or_not_a_file_is_one_line_exit_2(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "nope.log"
    if bad == "folder":
        log.mkdir()
    code = main(
        ["run", str(spec_file(tmp_path)), "--server-url", "http://127.0.0.1:9", "--server-log", str(log)]
        + ["--capture", str(tmp_path / "cap"), "--wait-ready", "0"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    want = "no such file" if bad == "missing" else "not a file"
    assert err.startswith("harness run: error: --server-log: ") and str(log) in err and want in err
    assert not (tmp_path / "cap").exists() or not any((tmp_path / "cap").rglob("point.json"))


def test_server_log_unreadable_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    log = tmp_path / "locked.log"
    log.write_text("x\n")
    log.chmod(0)
    code = main(
        ["run", str(spec_file(tmp_path)), "--server-url", "http://127.0.0.1:9", "--server-log", str(log)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "cannot read" in err, err


@pytest.mark.slow
def test_run_reads_an_attached_servers_log_like_a_launched_one(tmp_path: Path) -> None:
    """serve-sim started here (its own port, its own --log-file), attached with --server-log: each point
    gets the log's hit rate over its own window, equal to what the answers reported, and the pool."""
    from tests.helpers.procs import SimProc

    srv = SimProc(tmp_path, "--max-total-tokens", "5000", "--enable-cache-report", "--time-scale", "0.01")
    cap, out = tmp_path / "cap", tmp_path / "sum"
    try:
        r = harness(
            "run", str(spec_file(tmp_path)), "--server-url", srv.url, "--server", "sim", "--node", "n",
            "--capture", str(cap), "--server-log", str(srv.log_path), "--quiet",
        )  # fmt: skip
    finally:
        srv.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    kept = cap / "n" / "attached-log" / "sim" / "server.log"
    assert srv.log_path.read_bytes().startswith(kept.read_bytes()) and kept.stat().st_size > 1000
    s = harness("summarize", str(cap), "--output", str(out))
    assert s.returncode in (0, 1), s.stdout + s.stderr
    summary = json.loads((out / "n.json").read_text())
    server = summary["experiments"]["attached-log"]["servers"]["sim"]
    assert server["log"]["lines"] > 0 and server["log"]["counts"]
    assert server["pool"]["device_tokens"] == 5000  # the pool, from the log's startup lines
    assert server["log"]["counts"]["prefill"] > 0 and server["log"]["counts"]["kv_pool"] == 1
    points = summary["points"]
    assert len(points) == 2
    for p in points:
        med = p["median"]
        assert med["hit_rate_log"] is not None and med["hit_rate_log"] > 0.3, med
        assert med["hit_rate_log"] == pytest.approx(med["hit_rate_usage"], abs=1e-9)
    # each point's slice is its own window: the two points' log rates differ as their answers' do
    by_groups = {p["sweep"]["groups"]: p["median"]["hit_rate_log"] for p in points}
    assert by_groups[1] != by_groups[2]


def test_bench_spec_repeated_plans_every_spec_in_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    servers = [{"name": "s", "launch": "sim"}]
    a = spec_file(tmp_path, "alpha", servers=servers)
    b = spec_file(tmp_path, "beta", servers=servers)
    code = main(
        ["bench", "--spec", str(a), "--spec", str(b), "--server-kind", "sim", "--dry-run"]
        + ["--capture", str(tmp_path / "cap"), "--summaries", str(tmp_path / "sum")]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "alpha" in out and "beta" in out and out.index("alpha") < out.index("beta")
    code = main(["bench", "--spec", str(a), "--spec", str(a), "--server-kind", "sim", "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "'alpha'" in err, err


@pytest.mark.slow
def test_bench_spec_repeated_runs_every_spec(tmp_path: Path) -> None:
    servers = [{"name": "s", "launch": "sim", "args": ["--enable-cache-report"]}]
    suite = {"sim": {"time_scale": 0.01}}
    specs = [spec_file(tmp_path, n, servers=servers, suite=suite) for n in ("alpha", "beta")]
    r = harness(
        "bench", "--spec", str(specs[0]), "--spec", str(specs[1]), "--server-kind", "sim", "--node", "n",
        "--capture", str(tmp_path / "cap"), "--summaries", str(tmp_path / "sum"), "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sweep: 4/4 runs ok" in r.stdout
    summary = json.loads((tmp_path / "sum" / "n.json").read_text())
    assert sorted({p["experiment"] for p in summary["points"]}) == ["alpha", "beta"]
