"""`make faults`: each fault scenario of issue 8 against a real `harness serve-sim`, through the real harness.

Every scenario starts its own sim on 127.0.0.1 (port chosen by the OS), drives it with `harness run` or
`harness bench` as a user would, reads the capture files back and counts: requests scheduled, recorded ok,
recorded as an error, lost (scheduled minus recorded once the harness has recovered; must be 0), and the
recovery time. Prints a rich table and writes reports/fault-report.md (ignored by git; `make docs` writes
the committed docs/fault-report.md). Exit 1 when anything was lost.

Usage: .venv/bin/python scripts/fault_report.py [--out reports/fault-report.md] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from harness.servers import control

ROOT = Path(__file__).resolve().parents[1]
_PORT_RE = re.compile(r"Uvicorn running on http://[\d.]+:(\d+)")
# a server command whose first launch crashes after N requests and whose relaunch (the marker file
# exists by then) runs clean: what `harness bench` must recover from
CRASH_ONCE = (
    "import os, sys; marker, n, *args = sys.argv[1:]; first = not os.path.exists(marker); "
    "first and open(marker, 'w').close(); crash = ['--fault-crash-after', n] if first else []; "
    "os.execv(sys.executable, [sys.executable, '-m', 'harness', 'serve-sim', *args, *crash])"
)
FAST = ["--card-profile", "tiny-test", "--time-scale", "0.05"]
SLOW = ["--card-profile", "tiny-test", "--time-scale", "1.0"]  # long enough to interrupt mid-point
NODE, EXP = "n", "faults"


def _stop(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM by its own pid, SIGKILL after 10 s: a server this report started never outlives it."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


@dataclass
class Row:
    """One scenario's line of the report."""

    scenario: str
    answer: str  # what the harness did about it
    scheduled: int = 0
    ok: int = 0
    error: int = 0
    lost: int = 0
    recovery: str = "-"
    note: str = ""
    problems: list[str] = field(default_factory=list)  # broken promises; any makes the report fail


# ------------------------------------------------------------------ processes


class Sim:
    """A `harness serve-sim` on a port the OS picks (read back from its --log-file); stopped by its pid."""

    def __init__(self, folder: Path, *args: str, wait_ready: bool = True, timeout: float = 30.0) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        log, self.err_path = folder / "sim.log", folder / "sim.stderr"
        cmd = [sys.executable, "-m", "harness", "serve-sim", "--port", "0", "--log-file", str(log), *args]
        with self.err_path.open("w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT)
        port = self._until(lambda: log.exists() and _PORT_RE.search(log.read_text()), "listening", timeout)
        self.url = f"http://127.0.0.1:{port.group(1)}"
        if wait_ready:  # the harness's own readiness poll
            control.wait_ready(self.url + "/health", within_s=timeout, poll_s=0.05, gate=self._alive)

    def _alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"serve-sim exited {self.proc.returncode}: {self.err_path.read_text()}")

    def _until(self, cond: Callable[[], Any], what: str, timeout: float) -> Any:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self._alive()
            if got := cond():
                return got
            time.sleep(0.05)
        raise TimeoutError(f"serve-sim not {what} within {timeout:g} s")

    def stop(self) -> None:
        _stop(self.proc)

    def counts(self) -> tuple[int, int]:
        """Generation requests the server took in, and those it finished sending (its own counters)."""
        text = httpx.get(self.url + "/metrics", timeout=5).text

        def total(name: str) -> int:
            return int(sum(float(x.rsplit(" ", 1)[1]) for x in text.splitlines() if x.startswith(name)))

        return total("sglang:num_requests_total"), total("sglang:e2e_request_latency_seconds_count")


class ScriptedServer:
    """tests/helpers/fakeserver.py serving scripted /metrics pages (tests/helpers/metrics_script.py): a server
    that is not the sim, failing the way a health verdict describes; stopped by its pid."""

    def __init__(self, folder: Path, verdict: str | None, requests: int) -> None:
        sys.path.insert(0, str(ROOT))  # the repository root: tests.helpers
        from tests.helpers.metrics_script import write_script

        folder.mkdir(parents=True, exist_ok=True)
        script = write_script(folder / "metrics-script.json", verdict, requests)
        cmd = [sys.executable, str(ROOT / "tests" / "helpers" / "fakeserver.py"), "--port", "0", "--ttft-ms", "60",
               "--metrics-script", str(script)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"fakeserver did not start: {line!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def stop(self) -> None:
        _stop(self.proc)


def harness(
    *args: str, cwd: Path = ROOT, timeout: float = 120, env: dict | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def run_cmd(spec: Path, url: str, cap: Path) -> list[str]:
    return [sys.executable, "-m", "harness", "run", str(spec), "--server-url", url]\
        + ["--node", NODE, "--capture", str(cap), "--server", "sim", "--quiet"]  # fmt: skip


def write_spec(folder: Path, *, workload: dict | None = None, **over) -> Path:
    spec = {
        "name": EXP,
        "api": "openai-chat",
        "model": "default",
        "concurrency": 4,
        "seeds": [0],
        "workload": {
            "kind": "shared-prefix",
            "groups": 4,
            "prompts_per_group": 10,
            "system_prompt_tokens": 32,
            "question_tokens": 4,
            "output_tokens": 8,
            **(workload or {}),
        },
        "timeouts": {"connect": 5, "first_token": 10, "total": 20},
        "max_failed_fraction": 0.5,
        **over,
    }
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# ------------------------------------------------------------------ reading a capture back


def read_rows(path: Path) -> tuple[list[dict], int]:
    """Records of one requests file and the count of lines that are not whole JSON records."""
    rows, bad = [], 0
    if not path.exists():
        return rows, bad
    for line in path.read_bytes().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            bad += 1
    return rows, bad


def point_dir(cap: Path, server: str = "sim", point: str = "seed=0") -> Path:
    return cap / NODE / EXP / server / point


def fill_from_point(row: Row, pdir: Path) -> dict:
    """Counts from the final requests.jsonl, checked against point.json; lost = scheduled - recorded."""
    try:
        point = json.loads((pdir / "point.json").read_text())
    except (OSError, ValueError):
        row.problems.append(f"no readable point.json in {pdir}")
        return {}
    rows, bad = read_rows(pdir / "requests.jsonl")
    row.scheduled = point["requests_scheduled"]
    row.ok = sum(1 for r in rows if r.get("ok"))
    row.error = len(rows) - row.ok
    indexes = {r.get("index") for r in rows}
    row.lost = row.scheduled - len(indexes & set(range(row.scheduled)))
    if bad:
        row.problems.append(f"{bad} broken lines in requests.jsonl")
    if (point["requests_ok"], point["requests_failed"]) != (row.ok, row.error):
        row.problems.append("point.json counts differ from requests.jsonl")
    if row.lost:
        row.problems.append(f"{row.lost} requests lost")
    return point


def kinds(point: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted((point.get("errors") or {}).items())) or "none"


def one_line(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    return lines[-1] if lines else ""


# ------------------------------------------------------------------ scenarios


def point_under_fault(name: str, answer: str, sim_args: list[str], **spec_over) -> Callable[[Path], Row]:
    """A `harness run` of one point against a sim with these fault flags."""

    def scenario(tmp: Path) -> Row:
        row = Row(name, answer)
        sim = Sim(tmp / "sim", *FAST, *sim_args)
        try:
            cap = tmp / "cap"
            t0 = time.monotonic()
            r = subprocess.run(run_cmd(write_spec(tmp, **spec_over), sim.url, cap), capture_output=True, text=True,
                               timeout=120, cwd=ROOT)  # fmt: skip
            took = time.monotonic() - t0
            point = fill_from_point(row, point_dir(cap))
            if "Traceback" in r.stderr:
                row.problems.append("traceback")
            row.note = f"status {point.get('status')}; errors: {kinds(point)}; run {took:.1f}s"
            if point.get("flush_note"):
                row.note += f"; {point['flush_note']}"
            return row
        finally:
            sim.stop()

    return scenario


HICACHE_SIM = ["--time-scale", "1.0", "--enable-metrics", "--max-total-tokens", "1500",
               "--enable-hierarchical-cache", "--hicache-ratio", "4"]  # fmt: skip
SESSIONS = {"kind": "multi-turn", "sessions": 8, "turns": 6, "system_prompt_tokens": 64, "question_tokens": 24,
            "answer_tokens": 16}  # fmt: skip


def health_verdict(
    name: str,
    expect: str,
    sim_args: list[str],
    workload: dict | None = None,
    scripted: int | None = None,
    **spec_over,
) -> Callable[[Path], Row]:
    """`harness run` (timeline on), summarize and validate against a sim failing this way (or, `scripted`
    requests given, tests/helpers/fakeserver.py serving `expect`'s scripted counters): the health verdict it
    yields must be `expect` and nothing else (docs/faults.md#health-verdicts)."""

    def scenario(tmp: Path) -> Row:
        row = Row(name, f"`{expect}` and no other verdict, in the summary and `harness validate` (exit 1)")
        sim: Sim | ScriptedServer
        if scripted is not None:
            sim = ScriptedServer(tmp / "fake", expect, scripted)
        else:
            sim = Sim(tmp / "sim", *FAST, *sim_args)
        try:
            cap = tmp / "cap"
            t0 = time.monotonic()
            spec = write_spec(tmp, **spec_over)
            if workload is not None:  # the whole workload, not keys over the shared-prefix default
                raw = yaml.safe_load(spec.read_text())
                spec.write_text(yaml.safe_dump({**raw, "workload": workload}, sort_keys=False))
            cmd = run_cmd(spec, sim.url, cap) + ["--metrics-interval-s", "0.05"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
            took = time.monotonic() - t0
        finally:
            sim.stop()
        point = fill_from_point(row, point_dir(cap))
        unsent = int(point.get("requests_not_sent") or 0) + int(point.get("requests_skipped") or 0)
        if point.get("requests_failed", -1) + unsent == row.error:  # a stalled run's unsent turns: recorded
            row.problems = [p for p in row.problems if p != "point.json counts differ from requests.jsonl"]
        s = harness("summarize", str(cap / NODE), "-o", str(tmp / "summaries"))
        v = harness("validate", str(tmp / "summaries" / f"{NODE}.json"), "--json")
        if "Traceback" in r.stderr + s.stderr + v.stderr:
            row.problems.append("traceback")
        try:
            found = json.loads(v.stdout)["health"]
        except (ValueError, KeyError):
            row.problems.append(f"validate gave no JSON: {one_line(v)}")
            return row
        if [h["verdict"] for h in found] != [expect] or v.returncode != 1:
            row.problems.append(f"verdicts {[h['verdict'] for h in found]}, validate exit {v.returncode}")
        first = found[0]["reason"] if found else "-"
        row.recovery = f"{took:.1f} s"
        row.note = f"status {point.get('status')}; {first}"
        return row

    return scenario


def slow_readiness(tmp: Path) -> Row:
    row = Row("ready only after 3 s", "waits while /health says 503, then runs")
    t_launch = time.time()
    sim = Sim(tmp / "sim", *FAST, "--fault-ready-delay", "3", wait_ready=False)
    try:
        cap = tmp / "cap"
        r = subprocess.run(
            run_cmd(write_spec(tmp), sim.url, cap), capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        point = fill_from_point(row, point_dir(cap))
        rows, _ = read_rows(point_dir(cap) / "requests.jsonl")
        first = min((x["start_wall"] for x in rows), default=t_launch)
        row.recovery = f"{first - t_launch:.1f}s to first request"
        row.note = f"status {point.get('status')}; errors: {kinds(point)}; exit {r.returncode}"
        return row
    finally:
        sim.stop()


def never_ready(tmp: Path) -> Row:
    row = Row(
        "never ready (bench, ready timeout 3 s)", "server reported failed with its log tail; nothing sent"
    )
    spec = write_spec(tmp, servers=[{"name": "late", "launch": "sim", "args": [*FAST, "--fault-ready-delay", "-1"],
                                     "ready_timeout_s": 3}])  # fmt: skip
    t0 = time.monotonic()
    r = harness("bench", "--spec", str(spec), "--node", NODE, "--server-kind", "sim", "--quiet", cwd=tmp)
    row.recovery = f"gave up after {time.monotonic() - t0:.1f}s"
    line = next((x for x in r.stdout.splitlines() if "failed to start" in x), "")
    row.note = f"exit {r.returncode}: {line[:110]}"
    if r.returncode != 1 or not line:
        row.problems.append("never-ready server not reported")
    return row


def health_hangs(tmp: Path) -> Row:
    row = Row("/health stops answering", "refused before any request: one line, exit 2")
    sim = Sim(tmp / "sim", *FAST, "--fault-health-stop-after", "0", wait_ready=False)
    try:
        t0 = time.monotonic()
        r = subprocess.run(run_cmd(write_spec(tmp), sim.url, tmp / "cap"), capture_output=True, text=True,
                           timeout=60, cwd=ROOT)  # fmt: skip
        row.recovery = f"stopped in {time.monotonic() - t0:.1f}s"
        row.note = f"exit {r.returncode}: {one_line(r)[:110]}"
        if r.returncode != 2 or len(r.stderr.strip().splitlines()) != 1:
            row.problems.append("not a one-line refusal")
        return row
    finally:
        sim.stop()


def crash_restart(tmp: Path) -> Row:
    row = Row(
        "server crash after 12 requests", "harness bench: point failed, server restarted, point retried"
    )
    cmd = [sys.executable, "-c", CRASH_ONCE, str(tmp / "launched-once"), "12", "--port", "{port}",
           "--model-path", "default", *FAST]  # fmt: skip
    spec = write_spec(tmp, servers=[{"name": "sim", "launch": "command", "engine": "sim", "command": cmd}],
                      timeouts={"connect": 2, "first_token": 10, "total": 20})  # fmt: skip
    r = harness("bench", "--spec", str(spec), "--node", NODE, "--server-kind", "sim", "--quiet", cwd=tmp)
    pdir = point_dir(tmp / "capture")
    point = fill_from_point(row, pdir)
    before, _ = read_rows(pdir / "requests.attempt-1.jsonl")
    crash = max(
        (x["start_wall"] + (x["done_mono"] - x["sent_mono"]) for x in before if x.get("done_mono")), default=0
    )
    if point and crash:
        row.recovery = f"{point['start_wall'] - crash:.1f}s restart to re-run"
    b_ok = sum(1 for x in before if x.get("ok"))
    row.note = (f"attempt {point.get('attempt')} {point.get('status')}; attempt 1 kept: {b_ok} ok, "
                f"{len(before) - b_ok} errors; exit {r.returncode}")  # fmt: skip
    if point.get("status") != "ok" or not before:
        row.problems.append(f"crash not recovered: {r.stdout[-300:]}")
    return row


def interrupt(tmp: Path, sig: signal.Signals) -> Row:
    kill = sig == signal.SIGKILL
    name = (
        "kill -9 of `harness run` mid-point, then resume"
        if kill
        else f"{sig.name} to `harness run` mid-point, then resume"
    )
    answer = (
        "records on disk kept; resume re-runs the point"
        if kill
        else "in-flight recorded as cancelled, point.json interrupted; resume re-runs"
    )
    row = Row(name, answer)
    sim = Sim(tmp / "sim", *SLOW, "--enable-metrics")
    try:
        cap = tmp / "cap"
        spec = write_spec(tmp)
        pdir = point_dir(cap)
        proc = subprocess.Popen(run_cmd(spec, sim.url, cap), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT)  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            req = pdir / "requests.jsonl"
            if req.exists() and req.read_bytes().count(b"\n") >= 8:
                break
            time.sleep(0.02)
        proc.send_signal(sig)
        if kill:
            proc.wait(10)
            received, finished = sim.counts()  # at once, before the orphaned answers can finish
        _, err = proc.communicate(timeout=30)
        if not kill:
            received, finished = sim.counts()
        t_int = time.monotonic()
        rows, bad = read_rows(pdir / "requests.jsonl")
        done = sum(1 for x in rows if x.get("error_kind") != "cancelled")  # answers the harness saw end
        in_flight = received - finished  # the server was still answering them
        unrecorded = finished - done  # answers the server finished that have no record: lost
        interrupted = json.loads((pdir / "point.json").read_text()) if (pdir / "point.json").exists() else {}
        r = subprocess.run(run_cmd(spec, sim.url, cap), capture_output=True, text=True, timeout=120, cwd=ROOT)
        point = fill_from_point(row, pdir)
        row.recovery = f"{time.monotonic() - t_int:.1f}s resume"
        cancelled = sum(1 for x in rows if x.get("error_kind") == "cancelled")
        row.note = (f"at the signal: server got {received}, finished {finished}; {len(rows)} records on disk "
                    f"({cancelled} cancelled in flight), {max(unrecorded, 0)} finished answers without a "
                    f"record, {bad} broken lines; exit {proc.returncode} then {r.returncode}; "
                    f"final attempt {point.get('attempt')} {point.get('status')}")  # fmt: skip
        if not kill and interrupted.get("status") != "interrupted":
            row.problems.append("no interrupted point.json")
        if not kill and received > len(
            rows
        ):  # a request cancelled on its way out has a record the server never saw
            row.problems.append(f"{received - len(rows)} requests sent without a record")
        if bad or unrecorded > 0 or in_flight > 4 or "Traceback" in err:
            row.problems.append(
                f"lost beyond in-flight: {unrecorded} finished answers unrecorded, {bad} broken lines"
            )
        return row
    finally:
        sim.stop()


def unwritable(tmp: Path) -> Row:
    row = Row(
        "unwritable capture folder", "refused before the server is contacted or launched: one line, exit 2"
    )
    blocker = tmp / "not-a-folder"
    blocker.write_text("a file where the capture folder should be")
    spec = write_spec(tmp, servers=[{"name": "sim", "launch": "sim", "args": FAST}])
    bench = harness("bench", "--spec", str(spec), "--node", NODE, "--server-kind", "sim", "--quiet",
                    "--capture", str(blocker / "capture"), cwd=tmp)  # fmt: skip
    run = harness(
        "run", str(spec), "--server-url", "http://127.0.0.1:9", "--capture", str(blocker / "capture"), cwd=tmp
    )
    row.note = f"bench exit {bench.returncode}, run exit {run.returncode}: {one_line(run)[:100]}"
    for r in (bench, run):
        if r.returncode != 2 or len(r.stderr.strip().splitlines()) != 1 or "ready in" in r.stdout:
            row.problems.append(f"not a one-line refusal: {r.stderr[-200:]}")
    return row


def signal_moments(kind: str, loop: str, moments: int = 20) -> Callable[[Path], Row]:
    """Issue 39: SIGINT and SIGTERM at random moments of one command on one loop (tests/helpers/signal_stress.py)."""

    def scenario(tmp: Path) -> Row:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.helpers
        from tests.helpers.signal_stress import stress

        row = Row(f"SIGINT/SIGTERM at {moments} random moments of `harness {kind}` on {loop}, each resumed",
                  "exit 130, no traceback, in-flight recorded, point.json interrupted, no server left")  # fmt: skip
        t0 = time.monotonic()
        took, trials = stress(kind, loop, moments, 0, tmp)
        hit = [t for t in trials if not t.missed]
        row.scheduled = sum(t.received for t in trials)  # requests the server took in before the signal
        row.ok = sum(t.ok for t in trials)
        row.error = sum(t.records - t.ok for t in trials)
        row.lost = sum(max(t.received - t.records, 0) for t in trials)
        row.recovery = f"{sum(t.resumed.startswith('ok') for t in trials)}/{len(trials)} resumed ok"
        exits = sorted({str(t.exit) for t in hit})
        mid = sum(t.point == "interrupted" for t in hit)
        row.note = (f"{len(hit)} of {len(trials)} landed before the command ended ({mid} mid-point), exits "
                    f"{', '.join(exits)}; an unperturbed run {took:.1f}s; {time.monotonic() - t0:.0f}s in all")  # fmt: skip
        row.problems = [f"{t.sig} at {t.at_s}s: {p}" for t in trials for p in t.problems]
        return row

    return scenario


SCENARIOS: dict[str, Callable[[Path], Row]] = {
    "crash": crash_restart,
    "health-stall": health_verdict(
        "every stream stops for 60 s mid-answer (timeouts.stall 5)",
        "stalled",
        ["--fault-stall", "1.0", "--fault-stall-seconds", "60", "--enable-metrics"],
        timeouts={"connect": 5, "first_token": 100, "total": 200, "stall": 5},
    ),
    "health-prefetch-hang": health_verdict(
        "a prefetch that never completes (sglang#30760)",
        "stalled",
        ["--fault-hicache", "prefetch-hang", "--fault-hang-after", "4", *HICACHE_SIM],
        workload=SESSIONS,
        timeouts={"connect": 5, "first_token": 100, "total": 200, "stall": 5},
    ),
    "health-host-inert": health_verdict(
        "a host tier that never matches (sglang#33713)",
        "host-tier-inert",
        ["--fault-hicache", "host-never-matches", *HICACHE_SIM],
        workload=SESSIONS,
    ),  # fmt: skip
    "health-evict-storm": health_verdict(
        "load-back evicting other sessions' prefixes (sglang#35129)",
        "evict-storm",
        ["--fault-hicache", "load-back-evicts-others", *HICACHE_SIM],
        workload=SESSIONS,
    ),  # fmt: skip
    "health-over-eviction": health_verdict(
        "evictions beyond the shortfall, scripted /metrics of a server not the sim (sglang PR #40748)",
        "over-eviction",
        [],
        workload={
            "kind": "shared-prefix",
            "groups": 2,
            "prompts_per_group": 6,
            "system_prompt_tokens": 200,
            "question_tokens": 16,
            "output_tokens": 4,
        },
        scripted=12,
        concurrency=1,
    ),
    "http-errors": point_under_fault(
        "HTTP 500 on 20%, 503 on 10%",
        "each recorded as error_kind http; point partial (threshold 50%)",
        ["--fault-http-500", "0.2", "--fault-http-503", "0.1", "--fault-seed", "1"],
    ),
    "http-errors-strict": point_under_fault(
        "HTTP 500 on 20% (max_failed_fraction 0.05)",
        "point marked failed (re-run on resume), records kept",
        ["--fault-http-500", "0.2", "--fault-seed", "1"],
        max_failed_fraction=0.05,
    ),
    "stall-total": point_under_fault(
        "stall 5 s mid-stream on 30% (total timeout 2 s)",
        "timeout-total, tokens before the stall kept",
        ["--fault-stall", "0.3", "--fault-stall-seconds", "5", "--fault-seed", "2"],
        timeouts={"connect": 5, "first_token": 1.5, "total": 2},
        max_failed_fraction=1.0,
    ),
    "stall-first": point_under_fault(
        "stall 5 s before the first token (first-token timeout 1 s)",
        "timeout-first-token on each; point failed",
        ["--fault-stall", "1.0", "--fault-stall-seconds", "5"],
        workload={"groups": 2, "prompts_per_group": 4, "output_tokens": 2},
        timeouts={"connect": 5, "first_token": 1, "total": 20},
    ),
    "malformed": point_under_fault(
        "malformed SSE event in 30% of streams",
        "error_kind protocol; other streams unaffected",
        ["--fault-malformed-sse", "0.3", "--fault-seed", "3"],
        max_failed_fraction=1.0,
    ),
    "drop": point_under_fault(
        "connection dropped mid-stream in 30%",
        "error_kind disconnect; other streams unaffected",
        ["--fault-drop", "0.3", "--fault-seed", "4"],
        max_failed_fraction=1.0,
    ),
    "flush": point_under_fault(
        "/flush_cache refused 3 times",
        "flush retried until it succeeds; noted in point.json",
        ["--fault-refuse-flush", "3"],
    ),
    "ready-slow": slow_readiness,
    "ready-never": never_ready,
    "health": health_hangs,
    "sigint": lambda tmp: interrupt(tmp, signal.SIGINT),
    "sigterm": lambda tmp: interrupt(tmp, signal.SIGTERM),
    "kill9": lambda tmp: interrupt(tmp, signal.SIGKILL),
    "unwritable": unwritable,
    **{
        f"signals-{kind}-{loop}": signal_moments(kind, loop)
        for kind in ("run", "bench")
        for loop in ("uvloop", "asyncio")
    },
}


# ------------------------------------------------------------------ output


HEADER = (
    "scenario",
    "harness answer",
    "scheduled",
    "recorded ok",
    "recorded error",
    "lost",
    "recovery",
    "details",
)


def cells(row: Row) -> list[str]:
    return [row.scenario, row.answer, str(row.scheduled), str(row.ok), str(row.error), str(row.lost),
            row.recovery, row.note + ("; PROBLEM: " + "; ".join(row.problems) if row.problems else "")]  # fmt: skip


def markdown(rows: list[Row], took: float) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|")

    out = [
        "# Fault-test report",
        "",
        "Written by `make faults` (`scripts/fault_report.py`): each scenario runs against a real `harness serve-sim` "
        "on 127.0.0.1 through the real `harness run` / `harness bench`, and the counts are read back from the "
        "capture files.",
        "",
        "- **scheduled**: requests in the point's schedule; **recorded ok / error**: lines of the final "
        "`requests.jsonl` (earlier attempts are kept beside it as `requests.attempt-N.jsonl`, see details).",
        "- **lost**: scheduled minus requests with a record once the harness has recovered (resumed, retried); "
        "must be 0. For kill -9, the requests in flight at the kill are the only ones without a record in the "
        "killed attempt (counted from the sim's own request counter, in details) and are re-run on resume.",
        "- **recovery**: time from the fault to measuring again (restart, resume) or to a clear stop.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---" for _ in HEADER) + "|",
    ]
    out += ["| " + " | ".join(esc(c) for c in cells(r)) + " |" for r in rows]
    bad = [r for r in rows if r.problems]
    out += ["", f"{len(rows)} scenarios, {sum(r.lost for r in rows)} requests lost, "
            f"{len(bad)} with problems; {took:.0f}s on {socket.gethostname()}, "
            f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}.", ""]  # fmt: skip
    return "\n".join(out)


def print_table(rows: list[Row]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="fault scenarios (harness serve-sim, loopback)")
    for h in HEADER:
        t.add_column(h, overflow="fold", max_width=48 if h in ("details", "harness answer") else None)
    for r in rows:
        t.add_row(*cells(r), style="red" if r.problems else None)
    Console(width=200).print(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out",
        type=Path,
        default=ROOT / "reports" / "fault-report.md",
        help="default reports/fault-report.md (git ignores it); `make docs` refreshes docs/fault-report.md",
    )
    ap.add_argument("--only", nargs="+", choices=sorted(SCENARIOS), help="run only these scenarios")
    args = ap.parse_args()
    names = args.only or list(SCENARIOS)
    rows: list[Row] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        for name in names:
            folder = Path(tmp) / name
            folder.mkdir()
            s0 = time.monotonic()
            try:
                row = SCENARIOS[name](folder)
            except Exception as e:  # noqa: BLE001 - one broken scenario is a row, not the end of the report
                row = Row(name, "scenario failed to run", problems=[f"{type(e).__name__}: {e}"])
            row.note = row.note.replace(tmp, "$TMP")
            print(
                f"{name}: {time.monotonic() - s0:.1f}s{' PROBLEM' if row.problems else ''}",
                file=sys.stderr,
                flush=True,
            )
            rows.append(row)
    took = time.monotonic() - t0
    print_table(rows)
    if not args.only:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(markdown(rows, took), encoding="utf-8")
        print(f"written: {args.out}")
    return 1 if any(r.problems for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
