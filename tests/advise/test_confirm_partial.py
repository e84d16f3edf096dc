"""A confirm that finishes: its estimate, why it stopped, and each candidate's row from what its point
folder holds (whole, partial over the requests done, not run, failed); all three outputs say so."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.advise.confirm_info import ConfirmInfo, SliceScale
from harness.advise.confirm_progress import Estimate, estimate
from harness.advise.confirm_rows import Measured, predicted_over, read_point, row
from harness.advise.confirm_stop import EXIT_SIGNAL, EXIT_TIME_LIMIT, Stop, TimeLimit, stop_of
from harness.advise.live_spec import live_block
from harness.engines.confirm import GPU_PACE, SIM_PACE
from harness.whatif.grid import Config
from harness.whatif.inputs import read_mooncake
from harness.whatif.replay import replay

MOONCAKE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def _cand(pool: int = 240):
    from harness.advise.grid import Candidate
    from harness.advise.physics import Modelled
    from harness.whatif.replay import Result

    cfg = Config("lru", pool)
    res = Result(cfg, 1, 100, 50, 50, 0, 100, 0, 0, 0, 0.0)
    return Candidate(cfg, res, Modelled({"mean": 1.0, "p50": 1.0, "p99": 1.0}, 2.0, 1.0, None, None), 512)


def test_the_estimate_is_the_sims_measured_costs_the_cards_physics_on_a_gpu_and_none_on_a_cpu() -> None:
    sim = estimate("sim", 2, 600, 7000, 300.0)
    assert sim.seconds == pytest.approx(2 * (2.0 + 600 * 0.0035 + 7000 * 0.00105))
    assert sim.line().startswith("about ") and sim.basis == SIM_PACE.basis and "sim" in sim.basis
    gpu = estimate("sglang", 1, 600, 7000, 300.0)
    assert gpu.seconds == 90.0 + 300.0 and gpu.basis == GPU_PACE.basis and "modelled" in gpu.basis
    for kind in ("sglang-cpu", "vllm"):
        cpu = estimate(kind, 1, 600, 7000, 300.0)
        assert (
            cpu.seconds is None
            and cpu.line() == f"no estimate ({kind}: a CPU server's speed is not modelled)"
        )
    assert estimate("sim", 1, None, 0, 0.0).seconds is None  # a spec: its requests are not counted here
    assert Estimate(90.4, "x").to_dict() == {"seconds": 90.4, "basis": "x"}


def test_a_stop_says_whether_the_time_limit_or_which_signal_and_exits_as_timeout_or_ctrl_c() -> None:
    limit = TimeLimit(30.0)
    assert stop_of(KeyboardInterrupt(), limit) == Stop("stopped by SIGINT (Ctrl-C)", EXIT_SIGNAL)
    assert stop_of(KeyboardInterrupt("signal SIGTERM"), limit) == Stop("stopped by SIGTERM", EXIT_SIGNAL)
    limit.fired = True
    assert stop_of(KeyboardInterrupt("signal SIGINT"), limit) == Stop(
        "--confirm-time-limit 30 s reached", EXIT_TIME_LIMIT
    )
    later = TimeLimit(4.5, total=30.0)  # a later stage runs on what is left; the reason names the limit
    later.fired = True
    assert stop_of(KeyboardInterrupt(), later).reason == "--confirm-time-limit 30 s reached"
    assert (EXIT_TIME_LIMIT, EXIT_SIGNAL) == (124, 130)  # as timeout(1), as Ctrl-C
    with TimeLimit(None) as none:  # no limit: no timer, nothing sent
        pass
    assert not none.fired and none.left() is None


def test_the_bars_join_a_display_on_stderr_and_quiet_shows_none() -> None:
    from harness.advise.confirm_progress import display
    from harness.loadgen import progress as point_bars
    from harness.sweep.progress import sweep_progress

    with display(True) as shown:
        assert shown is None and not point_bars.joined()
    with display(False) as shown:
        assert shown is not None and shown.console.stderr and point_bars.joined()
        with sweep_progress(1, quiet=False) as overall:
            assert overall is None  # the sweep's own bar (on stdout) stays out of advise's display
        bar = point_bars.Progress("candidate-1 seed=0", 10)
        assert bar.shared is shown.p and len(shown.p.tasks) == 1
        bar.finish(SimpleNamespace(ok=10, failed=0, skipped=0, not_sent=0), [])
        assert not shown.p.tasks  # a finished candidate's bar leaves; its result line is logged
    assert not point_bars.joined()


def _point(pdir: Path, status: str | None, rows: list[dict]) -> Path:
    pdir.mkdir(parents=True)
    if status is not None:
        (pdir / "point.json").write_text(json.dumps({"status": status, "requests_scheduled": 600}))
    (pdir / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return pdir


def test_a_stopped_candidate_is_measured_over_the_requests_it_finished(tmp_path: Path) -> None:
    rows = [
        {"index": 0, "ok": True, "prompt_tokens": 100, "cached_tokens": 0},
        {"index": 1, "ok": True, "prompt_tokens": 100, "cached_tokens": 50},
        {"index": 0, "ok": True, "prompt_tokens": 999, "cached_tokens": 999, "warmup": True},
        {"index": 2, "ok": False, "prompt_tokens": None, "cached_tokens": None, "error": "cancelled"},
    ]
    m = read_point(_point(tmp_path / "p", "interrupted", rows))
    assert (m.status, m.indices, m.prompt_tokens, m.cached_tokens, m.scheduled) == (
        "interrupted",
        (0, 1),
        200,
        50,
        600,
    )
    r = row(_cand(), "sim", 0.40, m, stopped=True, partial_predicted=0.20)
    assert r["status"] == "partial" and r["partial"] is True
    assert (r["measured_hit_rate"], r["predicted_hit_rate"], r["difference_points"]) == (0.25, 0.2, 5.0)
    assert (r["requests_done"], r["requests_total"], r["predicted_over"]) == (2, 600, "the requests done")
    # a candidate that never answered a request before the stop was not run; after a whole run: failed
    nothing = Measured("none", (), 0, 0, None)
    assert row(_cand(), "sim", 0.4, nothing, stopped=True)["status"] == "not run"
    assert row(_cand(), "sim", 0.4, None, stopped=True)["measured_hit_rate"] is None
    assert row(_cand(), "sim", 0.4, None, stopped=False)["status"] == "failed"
    whole = read_point(_point(tmp_path / "q", "ok", rows[:2]))
    assert row(_cand(), "sim", 0.2, whole, stopped=True) == {
        "config": "lru, pool 240",
        "server_kind": "sim",
        "status": "ok",
        "predicted_hit_rate": 0.2,
        "measured_hit_rate": 0.25,
        "difference_points": 5.0,
    }


def test_the_partial_prediction_is_the_candidate_replayed_on_the_requests_done(tmp_path: Path) -> None:
    from harness.advise.confirm_slice import slice_file

    whole = read_mooncake(slice_file(MOONCAKE, 300, tmp_path))
    first = read_mooncake(slice_file(MOONCAKE, 120, tmp_path / "first"))
    c = _cand(240)
    got = predicted_over(c, whole, tuple(range(120)), None)
    assert got == replay(first, c.config).hit_rate
    assert got != replay(whole, c.config).hit_rate  # the first 120 are not the whole 300
    assert predicted_over(c, None, (0, 1), None) is None  # a spec or capture: no order to replay in
    assert predicted_over(c, whole, (), None) is None


def test_a_partial_confirm_says_why_in_the_outputs_sentences_and_json() -> None:
    info = ConfirmInfo(
        "sim",
        Estimate(40.0, "the sim's measured time a request and an answer token"),
        live_block("sim", 512, None),
        SliceScale(600, 12031, 1952, 44144, 240),
        time_limit_s=5.0,
        elapsed_s=5.1,
        stop=Stop("--confirm-time-limit 5 s reached", EXIT_TIME_LIMIT),
    )
    d = info.to_dict()
    assert (d["partial"], d["partial_reason"], d["exit_code"], d["time_limit_s"]) == (
        True,
        "--confirm-time-limit 5 s reached",
        124,
        5.0,
    )
    assert d["block"]["block_tokens"] == 16 and d["block"]["answers_scaled"] is True
    assert d["slice"]["pool_ratio"] == round(1952 / 44144, 6) and d["slice"]["pool_floor"] == 240
    said = "\n".join(info.sentences())
    assert said.startswith("Partial confirm: --confirm-time-limit 5 s reached after 5 s")
    assert "16 tokens a hash id (shrunk from 512" in said and "1,952 / 44,144" in said
    whole = ConfirmInfo("sglang", Estimate(None, "x"), live_block("sglang", 512, None))
    assert not whole.partial and whole.to_dict()["block"]["answers_scaled"] is False
    assert "Partial" not in "\n".join(whole.sentences())


ADVISE = ("advise", str(MOONCAKE), "--card", "h100", "--model", "llama-3.1-8b-instruct", "--host-memory", "0")


def _outputs_say_partial(out: Path, reason: str, exit_code: int) -> list[dict]:
    """All three outputs carry the partial confirm and why; the JSON's rows are returned."""
    d = json.loads((out / "advise.json").read_text())
    conf = d["confirm"]
    assert (conf["partial"], conf["partial_reason"], conf["exit_code"]) == (True, reason, exit_code), conf
    assert conf["block"]["block_tokens"] == 16 and conf["slice"]["of_requests"] == 12031
    for name in ("advise.md", "advise.html"):
        text = (out / name).read_text()
        assert f"Partial confirm: {reason}" in text and "Live blocks: 16 tokens a hash id" in text, name
    return d["confirmed"]


def _ok_rows(pdir: Path) -> int:
    rows = [json.loads(line) for line in (pdir / "requests.jsonl").read_text().splitlines() if line.strip()]
    return sum(1 for r in rows if r.get("ok"))


def _server_pids(stderr: str) -> list[int]:
    import re

    return [int(p) for p in re.findall(r"\(pid (\d+)\)", stderr)]


@pytest.mark.slow  # starts a sim server; ~20 s
def test_a_time_limit_stops_the_confirm_keeps_what_it_measured_and_exits_124(tmp_path: Path) -> None:
    from tests.helpers.cli import harness

    out = tmp_path / "out"
    r = harness(*ADVISE, "--confirm", "1", "--confirm-requests", "600", "--confirm-time-limit", "4",
                "--server-kind", "sim", "-o", str(out), timeout=90)  # fmt: skip
    assert r.returncode == 124, r.stderr
    assert "one server up at a time: about " in r.stderr and "stops at --confirm-time-limit 4 s" in r.stderr
    assert "--confirm: partial: --confirm-time-limit 4 s reached (exit 124)" in r.stderr
    assert "## Confirmed live" in r.stdout  # stdout keeps the result; the bars and lines went to stderr
    (row,) = _outputs_say_partial(out, "--confirm-time-limit 4 s reached", 124)
    pdir = next((out / "confirm" / "cap" / "advise").glob("*/candidate-1/seed=0"))
    assert json.loads((pdir / "point.json").read_text())["status"] == "interrupted"
    done = _ok_rows(pdir)
    assert 0 < done < 600, done  # stopped while it ran: every record already taken is counted
    assert (row["status"], row["requests_done"], row["requests_total"]) == ("partial", done, 600)
    assert row["predicted_over"] == "the requests done" and abs(row["difference_points"]) <= 2.0, row
    assert all(not Path(f"/proc/{pid}").exists() for pid in _server_pids(r.stderr))


@pytest.mark.slow  # starts two sim servers; ~12 s each
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_keeps_the_finished_candidate_and_the_part_of_the_running_one_and_exits_130(
    tmp_path: Path, sig: str
) -> None:
    import signal
    import subprocess
    import time

    from tests.helpers.cli import ROOT, harness_argv

    out = tmp_path / "out"
    argv = harness_argv(  # one request at a time: at the trace's own times the first alone takes ~67 s
        *ADVISE, "--confirm", "2", "--confirm-requests", "200", "--concurrency", "1", "--server-kind", "sim",
        "-o", str(out),
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    second = (
        out / "confirm" / "cap" / "advise" / "advise-conversation_trace-first-200" / "candidate-2" / "seed=0"
    )
    try:
        give_up = time.monotonic() + 80  # a bound on a hang, not a timing under test
        while proc.poll() is None and time.monotonic() < give_up:
            if (second / "requests.jsonl").is_file() and _ok_rows(second) >= 5:
                break
            time.sleep(0.2)
        proc.send_signal(getattr(signal, sig))
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    reason = "stopped by SIGINT (Ctrl-C)" if sig == "SIGINT" else "stopped by SIGTERM"
    assert f"--confirm: partial: {reason} (exit 130)" in stderr
    first, running = _outputs_say_partial(out, reason, 130)
    assert first["status"] == "ok" and first["measured_hit_rate"] is not None
    assert running["status"] == "partial" and running["requests_done"] == _ok_rows(second) >= 5
    assert "## Confirmed live" in stdout
    assert all(not Path(f"/proc/{pid}").exists() for pid in _server_pids(stderr))
