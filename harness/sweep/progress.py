"""One overall bar for a sweep (runs done / total, elapsed, time left from the finished runs), and a
heartbeat for the phases after it (summarizing, reporting) so none is silent for more than a few seconds.

Counts use one vocabulary (docs/reading-results.md): a *point* is one server at one sweep value, a *run*
one point at one seed (what the bar counts), a *pair* two servers compared at one point.

It shares one rich display with the load generator's per-point bar (registered with
harness.loadgen.progress.join_outer while the sweep runs), so the sweep bar stays on top and the point bars come and go beneath it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from harness.loadgen import progress as point_bars

_CURRENT: SweepProgress | None = None


def fmt_duration(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `2 h 10 min`: what a person plans by."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def estimate_left(elapsed: float, done: int, total: int) -> float | None:
    """Seconds left: the mean time of the finished points times the points left; None before the first."""
    if done <= 0:
        return None
    return elapsed / done * max(total - done, 0)


class SweepProgress:
    """The overall task of a rich Progress that the per-point bars join."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.total = total
        self.done = 0
        self.t0 = time.monotonic()
        self.p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            auto_refresh=True,
            refresh_per_second=2,
            transient=False,
        )
        self.task = self.p.add_task("sweep runs", total=total, info=self.info())

    def info(self) -> str:
        elapsed = time.monotonic() - self.t0
        left = estimate_left(elapsed, self.done, self.total)
        if self.done >= self.total:
            return f"runs (point x seed)  done in {fmt_duration(elapsed)}; summarizing next"
        tail = "time left: after the first run" if left is None else f"~{fmt_duration(left)} left"
        return f"runs (point x seed)  {fmt_duration(elapsed)} elapsed, {tail}"

    def point_done(self) -> None:
        self.done += 1
        self.p.update(self.task, completed=self.done, info=self.info())

    def tick(self) -> None:
        self.p.update(self.task, info=self.info())


def shared() -> Any:
    """The running sweep's rich Progress, for the per-point bar to join; None outside a sweep."""
    if _CURRENT is not None:
        _CURRENT.tick()
        return _CURRENT.p
    return None


def point_done() -> None:
    """Count one finished point (any status) on the overall bar, if a sweep shows one."""
    if _CURRENT is not None:
        _CURRENT.point_done()


@contextlib.contextmanager
def sweep_progress(total: int, quiet: bool) -> Iterator[SweepProgress | None]:
    """Show the overall bar while the sweep runs (not when quiet, not for an empty sweep, not when the
    caller's own display hosts the point bars: advise --confirm's, on stderr)."""
    global _CURRENT
    if quiet or total <= 0 or _CURRENT is not None or point_bars.joined():
        yield None
        return
    sp = SweepProgress(total)
    sp.p.start()
    _CURRENT = sp
    point_bars.join_outer(shared)
    try:
        yield sp
    finally:
        _CURRENT = None
        point_bars.join_outer(None)
        sp.tick()
        sp.p.stop()


HEARTBEAT_S = 5.0  # the longest a phase after the sweep goes without a line


@contextlib.contextmanager
def phase(label: str, log: Callable[[str], None], every_s: float | None = HEARTBEAT_S) -> Iterator[None]:
    """Log that `label` started, every `every_s` that it is still going, and when it ended: summarizing a
    large capture takes minutes, and a silent terminal after a full bar reads as a hang. None: no heartbeat."""
    t0 = time.monotonic()
    log(f"{label}...")
    stop = threading.Event()

    def beat() -> None:
        while every_s is not None and not stop.wait(every_s):
            log(f"{label}: still going, {fmt_duration(time.monotonic() - t0)} elapsed")

    thread = threading.Thread(target=beat, name=f"phase {label}", daemon=True)
    thread.start()
    ended = "stopped after"  # an error on the way out: said, then raised
    try:
        yield
        ended = "done in"
    finally:
        stop.set()
        thread.join()
        log(f"{label}: {ended} {fmt_duration(time.monotonic() - t0)}")
