"""harness.loadgen.run as `harness run` loads it: what a run over plain http:// pays for at start."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.procs import ROOT


@pytest.mark.slow
def test_a_run_over_http_never_imports_aiohttp():
    """aiohttp's import builds TLS contexts (~0.3 s of CPU): only a run on its engine may pay for it."""
    code = (
        "import sys\n"
        "import harness.cli, harness.commands.run, harness.sweep.bench, harness.loadgen.run, harness.sweep.point\n"
        "from harness.loadgen.run import _pick_engine\n"
        "assert _pick_engine('auto', 'http://127.0.0.1:1/v1/chat/completions', {}) == 'http1'\n"
        "print('aiohttp' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False", out.stdout + out.stderr
