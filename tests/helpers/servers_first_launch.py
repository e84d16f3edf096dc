"""Run `harness serve-sim` with some flags on its first launch only (a crash, refused flushes): of several
launches, by restarts or as replicas, exactly one is first.

Usage: servers_first_launch.py MARKER_FILE FLAG... -- serve-sim args...  The marker file records the first.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    marker, *rest = sys.argv[1:]
    cut = rest.index("--")
    first_only, args = rest[:cut], rest[cut + 1 :]
    try:  # atomic: of several launches at once (replicas), exactly one is the first
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        pass
    else:
        os.write(fd, b"launched\n")
        os.close(fd)
        args += first_only
    os.execv(sys.executable, [sys.executable, "-m", "harness", "serve-sim", *args])


if __name__ == "__main__":
    main()
