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
    try:  # atomic: of several launches at once (replicas), exactly one is the first
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        pass
    else:
        os.write(fd, b"launched\n")
        os.close(fd)
        args += ["--fault-crash-after", n]
    os.execv(sys.executable, [sys.executable, "-m", "harness", "serve-sim", *args])


if __name__ == "__main__":
    main()
