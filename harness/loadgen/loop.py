"""The event loop a load run drives: uvloop where it is installed, the standard library's otherwise.

uvloop's loop, sockets and transports are C (libuv): answers are read sooner after they land (the client's
own share of TTFT against a saturated server down by a third) for a few % less CPU per request
(docs/performance.md). HARNESS_LOOP=asyncio keeps the standard loop, e.g. to compare the two side by side.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from harness.errors import HarnessError
from harness.signals import within_loop

T = TypeVar("T")
ENV = "HARNESS_LOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory, or None (asyncio's default) when it is absent or HARNESS_LOOP=asyncio."""
    choice = os.environ.get(ENV, "").strip().lower()
    if choice not in ("", "auto", "uvloop", "asyncio"):
        raise HarnessError(f"{ENV}={choice!r}: expected uvloop, asyncio or auto")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise HarnessError(
                f"{ENV}=uvloop, but uvloop is not installed here (pip install uvloop)"
            ) from None
        return None
    return uvloop.new_event_loop


def loop_name() -> str:
    """Which loop `run` uses here: 'uvloop' or 'asyncio' (for benchmark rows and tests)."""
    return "asyncio" if loop_factory() is None else "uvloop"


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) on the chosen loop; a stop signal cancels main (harness.signals.within_loop) and
    leaves as KeyboardInterrupt."""
    try:
        factory = loop_factory()
    except HarnessError:
        main.close()  # never started: no "coroutine was never awaited" warning on top of the error
        raise
    with asyncio.Runner(loop_factory=factory) as runner, within_loop(runner.get_loop()) as stop:
        return runner.run(stop.wrap(main))
