"""Setup lines reach the terminal past pytest's capture (run pytest in a child with the real conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_setup_step_is_shown_while_output_is_captured(tmp_path: Path) -> None:
    t = tmp_path / "test_announce_probe.py"
    t.write_text(
        "import pytest, time\n"
        "from tests.helpers.announce import setup_step\n"
        "@pytest.fixture(scope='session')\n"
        "def built():\n"
        "    with setup_step('probe build'):\n"
        "        print('captured noise')\n"
        "        time.sleep(0.01)\n"
        "    return 1\n"
        "def test_probe(built):\n"
        "    assert built == 1\n"
    )
    # the child is a plain pytest run: not an xdist worker, whatever this test runs in
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    r = subprocess.run(  # tests.conftest as a plugin: the hook that hands pytest's config to announce
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", str(t)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "setup: probe build …" in r.stdout
    assert "setup: probe build: done in 0 s" in r.stdout
    assert "captured noise" not in r.stdout  # ordinary output stays captured
