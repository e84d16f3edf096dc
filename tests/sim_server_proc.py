"""Start a real `harness serve-sim` process on 127.0.0.1 (port chosen by the OS) for HTTP tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

_PORT_RE = re.compile(r"Uvicorn running on http://[\d.]+:(\d+)")


class SimProc:
    """A serve-sim subprocess; its log goes to `log_path` (--log-file) and stderr to a file."""

    def __init__(self, tmp: Path, *args: str, wait_ready: bool = True, timeout: float = 20.0) -> None:
        self.log_path = tmp / "sim.log"
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
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if httpx.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError("serve-sim never became ready")

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.err.close()
        return self.proc.returncode
