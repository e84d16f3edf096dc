"""Servers that tests start as child processes on 127.0.0.1: one readiness poll, one stop, by pid.

`wait_ready` is how every test waits for a server to answer (it polls through the harness's own
`servers.control.wait_ready`); `stop` the only way a test ends one (SIGTERM, then SIGKILL after a
grace period). Ports are chosen at run time.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from harness.servers.control import NotReady
from harness.servers.control import wait_ready as poll_ready
from harness.servers.process import free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
FAKESERVER = HERE / "fakeserver.py"
STDLIB_SERVER = HERE / "stdlib_server.py"
STDLIB_CACHE_SERVER = HERE / "stdlib_cache_server.py"
LOADED_SERVER = HERE / "loaded_server.py"  # TTFT grows with the requests in flight (capacity search)
__all__ = [
    "marked_pids",
    "no_survivors",
    "FAKESERVER",
    "LOADED_SERVER",
    "STDLIB_CACHE_SERVER",
    "STDLIB_SERVER",
    "FakeServerProcess",
    "ScriptServer",
    "SimProc",
    "free_port",
    "stop",
    "wait_lines",
    "wait_ready",
]
_PORT_RE = re.compile(r"Uvicorn running on http://[\d.]+:(\d+)")


def wait_ready(
    url: str,
    proc: subprocess.Popen | None = None,
    *,
    timeout: float = 20.0,
    path: str = "/health",
    what: str = "server",
    log: Path | None = None,
) -> None:
    """GET url+path until it answers 200, through the harness's own readiness poll; fail at once if
    `proc` exits, quoting the end of `log`."""

    def tail() -> str:
        return log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""

    def alive() -> None:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}: {tail()}")

    try:
        poll_ready(url + path, within_s=timeout, poll_s=0.05, gate=alive)
    except NotReady as e:
        raise TimeoutError(f"{what} not ready within {timeout:g} s ({e.why}): {tail()}") from None


def wait_lines(path: Path, n: int, within: float = 30) -> None:
    """Wait until a process under test has written n lines (records) to path."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"{path}: fewer than {n} records after {within}s")


def stop(proc: subprocess.Popen, *, grace: float = 10.0, group: bool = False) -> int:
    """SIGTERM the process (or its process group), SIGKILL it after `grace` seconds; its exit code."""
    if proc.poll() is None:
        kill = os.killpg if group else os.kill
        kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
    return proc.returncode


class ScriptServer:
    """One of the scripted servers here (fakeserver, stdlib_server, ...) in its own process: ready once
    it prints `PORT <n>`; stopped by its pid."""

    def __init__(self, script: Path, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"{script.name} did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        stop(self.proc, grace=5.0)


class FakeServerProcess(ScriptServer):
    """tests/helpers/fakeserver.py, plus its /stats and /reset."""

    def __init__(self, *args: str) -> None:
        super().__init__(FAKESERVER, "--port", "0", *args)

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def stats(self) -> dict:
        return self.get("/stats")

    def reset(self) -> None:
        req = urllib.request.Request(self.url + "/reset", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=10).close()


class SimProc:
    """A `harness serve-sim` subprocess on a port the OS picks (read back from its --log-file)."""

    def __init__(
        self,
        tmp: Path,
        *args: str,
        wait_ready: bool = True,
        timeout: float = 20.0,
        log_path: Path | None = None,
    ) -> None:
        self.log_path = log_path or tmp / "sim.log"
        self.err_path = tmp / "sim.stderr"
        cmd = [
            sys.executable,
            "-m",
            "harness",
            "serve-sim",
            "--port",
            "0",
            "--log-file",
            str(self.log_path),
            *args,
        ]
        self.err = open(self.err_path, "w")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err, cwd=os.getcwd())
        self.port = self._wait_port(timeout)
        self.url = f"http://127.0.0.1:{self.port}"
        if wait_ready:
            self.wait_ready(timeout)

    def _wait_port(self, timeout: float) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve-sim exited {self.proc.returncode}: {self.err_path.read_text()}")
            if self.log_path.exists():
                m = _PORT_RE.search(self.log_path.read_text())
                if m:
                    return int(m.group(1))
            time.sleep(0.05)
        raise TimeoutError("serve-sim did not start listening")

    def wait_ready(self, timeout: float = 20.0) -> None:
        wait_ready(self.url, self.proc, timeout=timeout, what="serve-sim", log=self.err_path)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        code = stop(self.proc)
        self.err.close()
        return code


def marked_pids(mark: str) -> list[int]:
    """Processes whose environment carries this test's mark (servers and their children)."""
    needle = f"BENCH_TEST_MARK={mark}".encode()
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if needle in env.split(b"\0") and not stat.split(") ", 1)[1].startswith("Z"):
            out.append(int(d.name))
    return out


def no_survivors(mark: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while marked_pids(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
