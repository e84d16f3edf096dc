"""harness fleet on a real 3-node Ray cluster started here: the checks live in tests/fleet/cluster_checks.py,
run by a pytest of their own inside a network namespace that has only loopback (`unshare -n`), since Ray
advertises the machine's interface address whatever it is asked."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# `ip link set lo up` without iproute2: SIOCGIFFLAGS, then SIOCSIFFLAGS with IFF_UP (struct ifreq is 40 bytes)
LO_UP = """import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sh22x", fcntl.ioctl(s, 0x8913, struct.pack("16sh22x", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sh22x", b"lo", flags | 1))"""


@pytest.mark.slow
def test_fleet_on_a_local_ray_cluster() -> None:
    pytest.importorskip(
        "ray", reason="Ray is the fleet extra: pip install -e '.[fleet]' (make test installs it)"
    )
    lo_up = f"{sys.executable} -c {shlex.quote(LO_UP)}"
    probe = subprocess.run(["unshare", "-n", "sh", "-c", lo_up], capture_output=True, text=True)
    if probe.returncode != 0:
        why = f"unshare -n (a network namespace with loopback up) is not permitted here (needs root): {probe.stderr.strip()}"
        if os.environ.get("CI"):
            pytest.fail(why)  # CI runs as root: a skip there would hide the fleet
        pytest.skip(why)
    inner = f"{lo_up} && exec {sys.executable} -m pytest -x -q -p no:cacheprovider -s tests/fleet/cluster_checks.py"
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
