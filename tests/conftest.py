"""Shared fixtures: a real streaming HTTP server (tests/fakeserver.py) in its own process on a free port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FAKESERVER = Path(__file__).resolve().parent / "fakeserver.py"


class FakeServerProcess:
    """A fakeserver subprocess; stopped by its own pid."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKESERVER), "--port", "0", *args],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def stats(self) -> dict:
        return self.get("/stats")

    def reset(self) -> None:
        req = urllib.request.Request(self.url + "/reset", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=10).close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


@pytest.fixture
def fake_server_factory() -> Iterator:
    """Start fake servers with chosen options (e.g. "--ttft-ms", "30"); all stopped at teardown."""
    started: list[FakeServerProcess] = []

    def make(*args: str) -> FakeServerProcess:
        s = FakeServerProcess(*args)
        started.append(s)
        return s

    yield make
    for s in started:
        s.stop()


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeServerProcess]:
    """A shared server streaming with a 20 ms TTFT and 5 ms between tokens, recording prompts."""
    s = FakeServerProcess("--ttft-ms", "20", "--itl-ms", "5", "--record-prompts")
    yield s
    s.stop()


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on (bound then released) for refused-connection tests."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
