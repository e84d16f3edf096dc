"""The harness's CLI in a child process, as a user runs it (`python -m harness ...`): for the tests that need
its exit code and its real stderr. One helper, so every such test starts it the same way."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository: the default working folder


def harness_argv(*args: str) -> list[str]:
    """The command line of `harness ARGS` with this interpreter (for Popen: signals, streamed output)."""
    return [sys.executable, "-m", "harness", *args]


def harness(
    *args: str, cwd: Path = ROOT, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run `harness ARGS` to the end; `env` adds to this process's environment (which finds this checkout)."""
    return subprocess.run(
        harness_argv(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def bench_argv(*args: str) -> list[str]:
    """`harness bench` on node "n", quiet: what the bench tests run, in full or under Popen."""
    return harness_argv("bench", "--node", "n", "--quiet", *args)


def run_bench(
    cwd: Path, *args: str, timeout: float = 120, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`harness bench --node n --quiet ARGS` in `cwd` (its captures and summaries land there)."""
    return harness("bench", "--node", "n", "--quiet", *args, cwd=cwd, env=env, timeout=timeout)
