"""harness fleet on a real 3-node Ray cluster started here: the checks live in tests/fleet_cluster_checks.py,
run by a pytest of their own inside a network namespace that has only loopback (`unshare -n`), since Ray
advertises the machine's interface address whatever it is asked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_fleet_on_a_local_ray_cluster() -> None:
    pytest.importorskip(
        "ray", reason="Ray is the fleet extra: pip install -e '.[fleet]' (make test installs it)"
    )
    probe = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, text=True)
    if probe.returncode != 0:
        why = f"unshare -n + ip link set lo up is not permitted here (needs root and iproute2): {probe.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(why)  # CI runs as root: a skip there would hide the fleet
        pytest.skip(why)
    inner = f"ip link set lo up && exec {sys.executable} -m pytest -x -q -p no:cacheprovider -s tests/fleet_cluster_checks.py"
    env = {**os.environ, "HARNESS_FLEET_NETNS": "1"}
    r = subprocess.run(
        ["unshare", "-n", "sh", "-c", inner], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    out = "\n".join(
        ln for ln in (r.stdout + r.stderr).splitlines() if not ln.lstrip().startswith("[state-dump]")
    )
    print(out[-20000:])
    assert r.returncode == 0, out[-8000:]
    assert re.search(r"^4 passed in ", out, re.M), out[-2000:]  # none skipped, none failed
