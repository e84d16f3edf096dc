"""`harness run --wait-ready`: a server whose port opens late (as vLLM's does) is waited for, not refused."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.procs import STDLIB_CACHE_SERVER as SERVER

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spec(tmp_path: Path) -> Path:
    d = {
        "name": "late",
        "api": "openai-chat",
        "model": "m",
        "concurrency": 1,
        "seeds": [0],
        "workload": {
            "kind": "shared-prefix",
            "groups": 1,
            "prompts_per_group": 2,
            "system_prompt_tokens": 8,
            "question_tokens": 2,
            "output_tokens": 1,
        },
    }
    p = tmp_path / "late.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.mark.slow
def test_late_port_is_waited_for_and_zero_fails_at_once(tmp_path: Path) -> None:
    port = _free_port()
    late = subprocess.Popen(
        ["sh", "-c", f"sleep 3; exec {sys.executable} {SERVER} --port {port} --reset real"],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        t0 = time.monotonic()
        now = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "run",
                str(_spec(tmp_path)),
                "--server-url",
                url,
                "--wait-ready",
                "0",
                "--capture",
                str(tmp_path / "c0"),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
        assert now.returncode == 2 and "cannot reach" in now.stderr and now.stderr.strip().count("\n") == 0
        assert time.monotonic() - t0 < 3  # refused at once: the server is still asleep
        waited = subprocess.run(
            [
                sys.executable,
                "-m",
                "harness",
                "run",
                str(_spec(tmp_path)),
                "--server-url",
                url,
                "--wait-ready",
                "60",
                "--capture",
                str(tmp_path / "c1"),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert waited.returncode == 0, waited.stderr
        assert "1/1 points ok" in waited.stdout + waited.stderr
    finally:
        late.terminate()
        late.wait(timeout=10)
