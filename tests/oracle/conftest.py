"""Builds (once) and runs SGLang 0.5.23's own radix cache in its cached venv, for differential tests."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.announce import setup_step

from . import oracle_env

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@pytest.fixture(scope="session")
def oracle_python() -> Path:
    try:
        if oracle_env.is_built():
            return oracle_env.ensure_oracle_python()
        with setup_step(f"SGLang {oracle_env.SGLANG_VERSION} venv for the oracle (installed once, ~3 min)"):
            return oracle_env.ensure_oracle_python()
    except (oracle_env.OracleUnavailable, OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"SGLang {oracle_env.SGLANG_VERSION} oracle venv cannot be built here: {e}")


@pytest.fixture(scope="session")
def run_oracle(oracle_python):
    """Send scenarios to driver.py in the oracle venv; returns one result list per scenario."""

    def run(specs: list[dict]) -> list[list]:
        env = dict(os.environ, HARNESS_REPO=str(REPO), PYTHONWARNINGS="ignore")
        r = subprocess.run(
            [str(oracle_python), str(HERE / "driver.py")],
            input=json.dumps(specs),
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
            cwd=str(REPO),
        )
        marker = "__RESULTS__"
        if r.returncode != 0 or marker not in r.stdout:
            raise AssertionError(f"oracle driver failed (exit {r.returncode}):\n{r.stderr[-4000:]}")
        return json.loads(r.stdout.rsplit(marker, 1)[1])

    return run
