"""How a confirm stops early: `--confirm-time-limit`, Ctrl-C or SIGTERM, each a partial confirm.

The time limit stops the running candidate the way Ctrl-C does (harness.signals): at the deadline a timer
thread sends this process SIGINT, so the load unwinds by cancellation, its point.json says "interrupted",
its server is stopped and every record already taken stays in requests.jsonl. The confirm catches the
KeyboardInterrupt, keeps what finished, and exits 124 (time limit) or 130 (a signal).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from types import TracebackType

EXIT_TIME_LIMIT = 124  # as timeout(1) exits
EXIT_SIGNAL = 130  # as the harness exits on Ctrl-C (harness.cli)


@dataclass(frozen=True)
class Stop:
    """Why a confirm ended before its last candidate did, and the exit code that says so."""

    reason: str
    exit_code: int

    def to_dict(self) -> dict[str, object]:
        return {"reason": self.reason, "exit_code": self.exit_code}


class TimeLimit:
    """A deadline that stops the confirm as Ctrl-C would; `None` seconds: no limit."""

    def __init__(self, seconds: float | None, total: float | None = None) -> None:
        self.seconds = seconds
        self.total = (
            total if total is not None else seconds
        )  # the limit as given (a later stage gets what is left)
        self.fired = False
        self.t0 = time.monotonic()
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._open = False

    def __enter__(self) -> TimeLimit:
        self.t0 = time.monotonic()
        if self.seconds is not None:
            self._open = True
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _fire(self) -> None:
        with self._lock:
            if not self._open:
                return
            self.fired = True
            os.kill(os.getpid(), signal.SIGINT)  # the one stop path (harness.signals)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with self._lock:
            self._open = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer.join()
        if self.fired and kind is None:
            # the signal was sent but not yet raised: let it land here, inside the caller's `try`
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                time.sleep(0.01)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float | None:
        """Seconds left of the limit (None: no limit), for a stage that runs after the candidates."""
        return None if self.seconds is None else max(self.seconds - self.elapsed(), 0.0)


def stop_of(exc: KeyboardInterrupt, limit: TimeLimit) -> Stop:
    """The time limit when its timer fired, else the signal the KeyboardInterrupt names (Ctrl-C: SIGINT)."""
    if limit.fired:
        return Stop(f"--confirm-time-limit {limit.total:g} s reached", EXIT_TIME_LIMIT)
    said = str(exc) if exc.args else ""
    name = said.removeprefix("signal ") if said.startswith("signal ") else "SIGINT"
    return Stop(f"stopped by {name}" + (" (Ctrl-C)" if name == "SIGINT" else ""), EXIT_SIGNAL)
