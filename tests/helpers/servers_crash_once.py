"""Run `harness serve-sim` and make only its first launch crash after N requests (restart tests).

Usage: servers_crash_once.py MARKER_FILE N -- serve-sim args...  The marker file records the first launch.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    marker, n, sep, *rest = sys.argv[1:]
    assert sep == "--"
    args = list(rest)
    if not os.path.exists(marker):
        with open(marker, "w") as f:
            f.write("launched\n")
        args += ["--fault-crash-after", n]
    os.execv(sys.executable, [sys.executable, "-m", "harness", "serve-sim", *args])


if __name__ == "__main__":
    main()
