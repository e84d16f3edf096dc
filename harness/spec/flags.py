"""Reading a server's launch line: the value a flag was given, and what it says about the server.

Below `sweep/` and `report/` alike, so the cold-start rule and the findings read a launch line one way.
"""

from __future__ import annotations

from collections.abc import Sequence

STORAGE_FLAG = "--hicache-storage-backend"


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The last value given to `flag` (`--flag v` or `--flag=v`); None when absent."""
    out = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            out = args[i + 1]
        elif a.startswith(flag + "="):
            out = a[len(flag) + 1 :]
    return out


def storage_backend(args: Sequence[str]) -> str | None:
    """The `--hicache-storage-backend` a launch line names (None when absent or `none`)."""
    value = flag_value(args, STORAGE_FLAG)
    return None if value is None or value.lower() in ("", "none") else value
