"""`harness run --wait-ready`: a server whose port opens late (as vLLM's does) is waited for, not refused."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.cli import harness_argv
from tests.helpers.procs import STDLIB_CACHE_SERVER as SERVER
from tests.helpers.specs import shared_prefix, write_spec

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spec(tmp_path: Path) -> Path:
    wl = shared_prefix(
        groups=1, prompts_per_group=2, system_prompt_tokens=8, question_tokens=2, output_tokens=1
    )
    return write_spec(tmp_path, "late", wl, model="m", concurrency=1, seeds=[0])


@pytest.mark.slow
def test_late_port_is_waited_for_and_zero_fails_at_once(tmp_path: Path) -> None:
    port = _free_port()
    gate = tmp_path / "open"  # the server starts only once this file exists
    late = subprocess.Popen(
        [
            "sh",
            "-c",
            f"while [ ! -e {gate} ]; do sleep 0.1; done; exec {sys.executable} {SERVER} --port {port} --reset real",
        ],
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def run(wait: str, capture: str) -> subprocess.Popen:
        argv = harness_argv("run", str(_spec(tmp_path)), "--server-url", url)
        argv += ["--wait-ready", wait, "--capture", str(tmp_path / capture), "--quiet"]
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)

    try:
        now = run("0", "c0")  # nothing listens yet, and nothing will until the gate opens: refused at once
        out, err = now.communicate(timeout=120)
        assert now.returncode == 2 and "cannot reach" in err and err.strip().count("\n") == 0, err
        waited = run("120", "c1")
        time.sleep(3)  # the run is polling a closed port by now
        gate.touch()
        out, err = waited.communicate(timeout=240)
        assert waited.returncode == 0, err
        assert "1/1 points ok" in out + err
    finally:
        late.terminate()
        late.wait(timeout=10)
