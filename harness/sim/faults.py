"""Fault injection for serve-sim (issue 8): seeded dice deciding which requests fail, and how.

Every generation request draws the same four numbers in arrival order, so a fixed --fault-seed and a
sequential client give the same faults on every run.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RequestFaults:
    """What happens to one request."""

    http_status: int | None = None  # 500 / 503 instead of an answer
    stall: bool = False
    malformed: bool = False
    drop: bool = False
    crash: bool = False


# SGLang 0.5.23's lines when /flush_cache killed a server with a storage backend on CPU
# (HiCacheController's storage-thread stop in managers/cache_controller.py, then the scheduler's exception)
FLUSH_CRASH_LINES = (
    "Failed to stop HiCache storage threads cleanly: ['prefetch_thread', 'backup_thread']",
    "Scheduler hit an exception: Traceback (most recent call last):",
    "RuntimeError: Failed to stop HiCache storage threads cleanly.",
    "Received sigquit from a child process. It usually means the child failed.",
)


class Faults:
    """The --fault-* flags and the state they need (request count, flush refusals, start time)."""

    def __init__(self, args: Any, start: float | None = None) -> None:
        self.crash_after: int | None = args.fault_crash_after
        self.p500: float = args.fault_http_500
        self.p503: float = args.fault_http_503
        self.p_stall: float = args.fault_stall
        self.stall_s: float = args.fault_stall_seconds
        self.p_malformed: float = args.fault_malformed_sse
        self.p_drop: float = args.fault_drop
        self.refuse_flush_left: int = args.fault_refuse_flush
        self.crash_on_flush: bool = bool(getattr(args, "fault_crash_on_flush", False))
        self.ready_delay: float = args.fault_ready_delay
        self.health_stop_after: float | None = args.fault_health_stop_after
        self.rng = random.Random(args.fault_seed)
        self.start = time.monotonic() if start is None else start
        self.requests = 0

    def die_at_flush(self, write: Any) -> None:
        """--fault-crash-on-flush: print SGLang's lines and exit at once, as the real server died."""
        for line in FLUSH_CRASH_LINES:
            write(line, "error")
        os._exit(1)

    @property
    def never_ready(self) -> bool:
        return self.ready_delay < 0

    def ready(self, now: float | None = None) -> bool:
        if self.never_ready:
            return False
        return (time.monotonic() if now is None else now) - self.start >= self.ready_delay

    def health_stopped(self, now: float | None = None) -> bool:
        if self.health_stop_after is None:
            return False
        return (time.monotonic() if now is None else now) - self.start >= self.health_stop_after

    def refuse_flush(self) -> bool:
        if self.refuse_flush_left > 0:
            self.refuse_flush_left -= 1
            return True
        return False

    def on_request(self) -> RequestFaults:
        """Roll the dice for the next generation request."""
        self.requests += 1
        u_err, u_stall, u_bad, u_drop = (self.rng.random() for _ in range(4))
        f = RequestFaults()
        if self.crash_after is not None and self.requests > self.crash_after:
            f.crash = True
        if u_err < self.p500:
            f.http_status = 500
        elif u_err < self.p500 + self.p503:
            f.http_status = 503
        f.stall = u_stall < self.p_stall
        f.malformed = u_bad < self.p_malformed
        f.drop = u_drop < self.p_drop
        return f
