"""Ctrl-C and SIGTERM at random moments of `harness run` and `harness bench`, on uvloop and asyncio (issue 39).

Each trial starts the real command as a user would, sends SIGINT or SIGTERM (alternating) at a moment drawn
uniformly over a calibrated unperturbed run, then checks what a user is promised: exit 130, no traceback,
every request the server took in has a record (the sim's own log and counters against requests.jsonl),
point.json `interrupted` where a request went out, no server process left behind, and a resume that
completes with every scheduled request recorded once. Loopback only, bounded: a few seconds a trial.

Usage: .venv/bin/python -m tests.helpers.signal_stress [--moments 20] [--commands run bench] [--loops uvloop asyncio]
Prints one table row per trial and a line per (command, loop); exit 1 when any trial broke a promise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from harness.capture import read_jsonl
from harness.servers import control

ROOT = Path(__file__).resolve().parents[2]
SIM_ARGS = ["--card-profile", "tiny-test", "--time-scale", "1.0"]  # a point of ~1-2 s: room to land in it
_PORT_RE = re.compile(r"Uvicorn running on http://[\d.]+:(\d+)")
_FINISHED = "Sim request finished"
NODE = "n"
SIGNALS = (signal.SIGINT, signal.SIGTERM)
START_S = 0.1


def _handlers_installed(pid: int, within_s: float = 20.0) -> float:
    """Seconds until the child catches SIGTERM (its /proc status `SigCgt` mask): harness.signals installs
    its handlers first thing in the entry point. Before that the interpreter and its imports own the
    process, and a signal there ends it as it ends any Python program (a traceback, or -15): no promise of
    ours. On a loaded 2-core host that start alone took 0.12-0.5 s, past a fixed START_S."""
    t0 = time.monotonic()
    bit = 1 << (signal.SIGTERM - 1)
    while time.monotonic() - t0 < within_s:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            break  # gone, or no /proc: the trial goes on from here
        cgt = next((ln.split()[1] for ln in status.splitlines() if ln.startswith("SigCgt:")), "0")
        if int(cgt, 16) & bit:
            break
        time.sleep(0.005)
    return time.monotonic() - t0


@dataclass
class Trial:
    """One signal at one moment, and what the harness did about it."""

    command: str
    loop: str
    sig: str
    at_s: float
    exit: int | None = None
    records: int = 0  # records of requests that went out (ok, failed or cancelled)
    ok: int = 0  # of which answered in full
    received: int = 0  # requests the server took in during the interrupted attempt
    point: str = "-"  # point.json's status after the signal ("-": no point had started)
    resumed: str = "-"
    missed: bool = False  # the command had ended (or was in its exit handlers, its work done) first
    problems: list[str] = field(default_factory=list)


def _env(loop: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "HARNESS_LOOP": loop}


def write_spec(folder: Path, name: str, *, launch: bool) -> Path:
    spec: dict = {
        "name": name,
        "api": "openai-chat",
        "model": "default",
        "concurrency": 4,
        "seeds": [0],
        "workload": {"kind": "shared-prefix", "groups": 4, "prompts_per_group": 6,
                     "system_prompt_tokens": 32, "question_tokens": 4, "output_tokens": 16},
        "timeouts": {"connect": 5, "first_token": 10, "total": 20},
    }  # fmt: skip
    if launch:
        spec["servers"] = [{"name": "sim", "launch": "sim", "args": SIM_ARGS}]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


class AttachedSim:
    """One `harness serve-sim` that the `harness run` trials of a loop share; stopped by its pid."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.log = folder / "sim.log"
        cmd = [sys.executable, "-m", "harness", "serve-sim", "--port", "0", "--log-file", str(self.log)]
        cmd += [*SIM_ARGS, "--enable-metrics"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        end = time.monotonic() + 30
        while not (self.log.exists() and _PORT_RE.search(self.log.read_text())):
            if time.monotonic() > end or self.proc.poll() is not None:
                raise RuntimeError(f"serve-sim did not start: {self.log}")
            time.sleep(0.05)
        port = _PORT_RE.search(self.log.read_text()).group(1)  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        control.wait_ready(self.url + "/health", within_s=30, poll_s=0.05)

    def finished(self) -> int:
        """Requests the server has ended (answered or aborted) so far, from its own log."""
        return self.log.read_text().count(_FINISHED)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def _command(kind: str, spec: Path, cap: Path, url: str | None) -> list[str]:
    base = [sys.executable, "-m", "harness", kind]
    if kind == "run":
        return [*base, str(spec), "--server-url", str(url), "--node", NODE, "--capture", str(cap), "--quiet"]
    return [*base, "--spec", str(spec), "--node", NODE, "--server-kind", "sim", "--quiet",
            "--capture", str(cap), "--summaries", str(cap.parent / "summaries")]  # fmt: skip


def _point_dir(kind: str, cap: Path, name: str) -> Path:
    return cap / NODE / name / ("attached" if kind == "run" else "sim") / "seed=0"


def _rows(path: Path) -> tuple[list[dict], int]:
    """The records of a requests file (none before the point began) and its unreadable lines."""
    return read_jsonl(path) if path.exists() else ([], 0)


def _left_behind(marker: str) -> list[int]:
    """Processes whose command line names this trial's folder (a server the harness launched)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd and "serve-sim" in cmd:
            pids.append(int(p.name))
    return pids


def _server_log(cap: Path) -> Path | None:
    logs = sorted(cap.rglob("server.log"))
    return logs[0] if logs else None


def trial(
    kind: str,
    loop: str,
    sig: signal.Signals,
    at_s: float,
    folder: Path,
    sim: AttachedSim | None,
    in_point_s: float | None = None,
) -> Trial:
    """One interrupted command, checked, then resumed. in_point_s: the signal goes this long after the
    point's folder appears instead (a server's launch takes as long as the host's load lets it, so a
    moment from the calibrated start can miss the point in every trial)."""
    t = Trial(kind, loop, sig.name, round(at_s, 3))
    name = folder.name
    spec = write_spec(folder, name, launch=kind == "bench")
    cap = folder / "cap"
    before = sim.finished() if sim else 0
    cmd = _command(kind, spec, cap, sim.url if sim else None)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=folder,
                            env=_env(loop))  # fmt: skip
    started = _handlers_installed(proc.pid)  # the moment counts from the process's start, as calibrated,
    if in_point_s is None:
        time.sleep(max(0.0, at_s - started))  # but never lands before the harness can keep its promise
    else:
        pdir = _point_dir(kind, cap, name)
        while not pdir.exists() and proc.poll() is None and time.monotonic() - t0 < 60:
            time.sleep(0.005)
        time.sleep(in_point_s)
        t.at_s = round(time.monotonic() - t0, 3)
    if proc.poll() is None:
        proc.send_signal(sig)
    else:
        t.missed = True
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        t.problems.append("still running 60 s after the signal")
    t.exit = proc.returncode
    if t.exit == 0 and not t.missed and _complete(kind, cap, name, out):
        t.missed = True  # it landed in the exit handlers, after every record and page was written
    if not t.missed and t.exit != 130:
        t.problems.append(f"exit {t.exit}, not 130: {err.strip().splitlines()[-1:] or ''}")
    if "Traceback" in out + err:
        t.problems.append("traceback: " + (out + err).split("Traceback", 1)[1][:300].replace("\n", " | "))
    leftover = _left_behind(str(folder))
    if leftover:
        t.problems.append(f"server processes left behind: {leftover}")
        for pid in leftover:
            os.kill(pid, signal.SIGKILL)
    pdir = _point_dir(kind, cap, name)
    rows, bad = _rows(pdir / "requests.jsonl")
    sent = [r for r in rows if not r.get("not_sent")]
    t.records = len(sent)
    t.ok = sum(1 for r in sent if r["ok"])
    if sim is not None:
        t.received = sim.finished() - before
    else:
        log = _server_log(cap)
        t.received = log.read_text().count(_FINISHED) if log else 0
    if bad:
        t.problems.append(f"{bad} broken lines in requests.jsonl")
    if t.received > t.records:
        t.problems.append(f"{t.received - t.records} requests the server ended have no record")
    if len({r["index"] for r in rows}) != len(rows):
        t.problems.append("a request recorded twice")
    if (pdir / "point.json").exists():
        point = json.loads((pdir / "point.json").read_text())
        t.point = point["status"]
        if (point["requests_ok"], point["requests_failed"]) != (
            sum(1 for r in sent if r["ok"]),
            sum(1 for r in sent if not r["ok"]),
        ):
            t.problems.append("point.json's counts differ from requests.jsonl")
        if not t.missed and t.exit == 130 and t.point == "ok" and len(sent) < point["requests_scheduled"]:
            t.problems.append("point.json says ok for a partial point")
    elif sent:
        t.problems.append(f"{len(sent)} records but no point.json")
    if not t.missed and sent and t.point not in ("interrupted", "ok"):
        t.problems.append(f"point.json status {t.point!r}")
    t.resumed = _resume(kind, cmd, folder, loop, pdir, t)
    return t


def _complete(kind: str, cap: Path, name: str, out: str) -> bool:
    """The command had done all its work: the point ok with every record, and (bench) its verdict line."""
    pdir = _point_dir(kind, cap, name)
    try:
        point = json.loads((pdir / "point.json").read_text())
    except (OSError, ValueError):
        return False
    whole = point["status"] == "ok" and len(_rows(pdir / "requests.jsonl")[0]) == point["requests_scheduled"]
    return whole and (kind == "run" or "validate " in out)


def _resume(kind: str, cmd: list[str], folder: Path, loop: str, pdir: Path, t: Trial) -> str:
    """The same command again, to the end: exit 0, the point ok, every scheduled request recorded once."""
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=folder, env=_env(loop), timeout=120)
    if r.returncode != 0:
        t.problems.append(f"resume exit {r.returncode}: {r.stderr.strip()[-200:]}")
        return f"exit {r.returncode}"
    point = json.loads((pdir / "point.json").read_text())
    rows, _ = _rows(pdir / "requests.jsonl")
    n = point["requests_scheduled"]
    if point["status"] != "ok" or sorted(x["index"] for x in rows) != list(range(n)):
        t.problems.append(f"resume: status {point['status']}, {len(rows)} of {n} records")
    if _left_behind(str(folder)):
        t.problems.append("resume left a server behind")
    return f"{point['status']} {len(rows)}/{n}"


def calibrate(kind: str, loop: str, folder: Path, sim: AttachedSim | None) -> tuple[float, float, float]:
    """An unperturbed run of the same command here: its length, and when its point ran (seconds from the
    start), the windows the moments are drawn from."""
    name = "calibrate"
    spec = write_spec(folder / name, name, launch=kind == "bench")
    cap = folder / name / "cap"
    t0, wall0 = time.monotonic(), time.time()
    r = subprocess.run(_command(kind, spec, cap, sim.url if sim else None), capture_output=True, text=True,
                       cwd=folder / name, env=_env(loop), timeout=120)  # fmt: skip
    took = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError(f"the unperturbed {kind} run failed ({r.returncode}): {r.stderr[-400:]}")
    point = json.loads((_point_dir(kind, cap, name) / "point.json").read_text())
    return took, point["start_wall"] - wall0, point["end_wall"] - wall0


@contextmanager
def _attached(kind: str, folder: Path) -> Iterator[AttachedSim | None]:
    sim = AttachedSim(folder / "sim") if kind == "run" else None
    try:
        yield sim
    finally:
        if sim:
            sim.stop()


def stress(kind: str, loop: str, moments: int, seed: int, folder: Path) -> tuple[float, list[Trial]]:
    """`moments` trials of one command on one loop; the calibrated run length and the trials.

    Every other moment falls in the point's own window, counted from when the point's folder appears (a
    bench spends most of its time launching and summarizing), the rest anywhere in the run; from 0.1 s, since the interpreter's own start (~30 ms
    here) comes before any harness code runs."""
    rng = random.Random(f"{seed}-{kind}-{loop}")
    out: list[Trial] = []
    with _attached(kind, folder) as sim:
        took, p_from, p_to = calibrate(kind, loop, folder, sim)
        scale = (
            1.0  # a calibration run slower than the trials (a cold, loaded host) drew moments past their end
        )
        for i in range(moments):
            in_point = i % 4 >= 2
            lo, hi = (p_from, p_to) if in_point else (0.05 * took, 0.95 * took)
            at = max(START_S, rng.uniform(lo, hi) * scale)
            after = max(0.0, at - p_from) if in_point else None  # counted from the point's own start
            t = trial(kind, loop, SIGNALS[i % 2], at, folder / f"t{i:02d}", sim, after)
            out.append(t)
            if t.missed:
                scale *= 0.8
    return took, out


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moments", type=int, default=20, help="trials per command and loop (default 20)")
    ap.add_argument("--commands", nargs="+", default=["run", "bench"], choices=["run", "bench"])
    ap.add_argument("--loops", nargs="+", default=["uvloop", "asyncio"], choices=["uvloop", "asyncio"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    console = Console(width=200)
    broken = 0
    with tempfile.TemporaryDirectory(prefix="signal-stress-") as tmp:
        for kind in args.commands:
            for loop in args.loops:
                took, trials = stress(kind, loop, args.moments, args.seed, Path(tmp) / f"{kind}-{loop}")
                table = Table(title=f"harness {kind} on {loop} (an unperturbed run: {took:.1f} s)")
                for col in (
                    "signal",
                    "at s",
                    "exit",
                    "records",
                    "server ended",
                    "point.json",
                    "resume",
                    "problems",
                ):
                    table.add_column(col)
                for t in trials:
                    exit_ = f"{t.exit} (ended first)" if t.missed else str(t.exit)
                    table.add_row(t.sig, f"{t.at_s:.2f}", exit_, str(t.records), str(t.received), t.point,
                                  t.resumed, "; ".join(t.problems) or "none")  # fmt: skip
                console.print(table)
                for t in trials:
                    for p in t.problems:
                        console.print(f"  {t.sig} at {t.at_s}s: {p}", markup=False, highlight=False)
                bad = sum(1 for t in trials if t.problems)
                hit = sum(1 for t in trials if not t.missed)
                console.print(
                    f"harness {kind} on {loop}: {hit} of {len(trials)} signals landed, {bad} broke a promise"
                )
                broken += bad
    return 1 if broken else 0


if __name__ == "__main__":
    raise SystemExit(main())
