"""Lines that reach the terminal from inside a fixture, past pytest's output capture.

A long one-time setup (a llama.cpp build, a venv install, a cluster start) says what it is doing and,
when done, how long it took, so `make test` is never silent for minutes. pytest captures fd 1 and 2
(so `print(..., file=sys.__stderr__)` would be captured too); the terminal reporter, with capture
suspended, is what reaches the person. Outside pytest (no config yet), and in an xdist worker (whose
reporter writes nowhere; its stderr is the terminal's), the line goes to stderr.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

_config: Any = None


def set_config(config: Any) -> None:
    """Called from tests/conftest.py's pytest_configure."""
    global _config
    _config = config


def announce(msg: str) -> None:
    """One line on the terminal now, even while pytest captures output."""
    if _config is None:
        print(msg, file=sys.stderr, flush=True)
        return
    capman = _config.pluginmanager.getplugin("capturemanager")
    reporter = _config.pluginmanager.getplugin("terminalreporter")
    ctx = capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext()
    with ctx:
        if reporter is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
            reporter.ensure_newline()
            reporter.write_line(msg)
        else:
            print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def setup_step(what: str) -> Iterator[None]:
    """`setup: <what> …` now, and `setup: <what>: done in N s` (or `failed after N s`) at the end."""
    announce(f"setup: {what} …")
    t0 = time.monotonic()
    try:
        yield
    except BaseException:
        announce(f"setup: {what}: failed after {time.monotonic() - t0:.0f} s")
        raise
    announce(f"setup: {what}: done in {time.monotonic() - t0:.0f} s")
