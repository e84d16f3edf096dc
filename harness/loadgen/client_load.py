"""The load generator's own load per process: its CPU share of the run and its event loop's lag.

Why: a point where the client, not the server, was the bottleneck reports the client's queueing as the
server's TTFT (issue 61: c=256 against a zero-latency server, 15.8 ms TTFT p50 where a faster client saw
2.3 ms). The lag is sampled by a timer that asks to wake every LAG_STEP_S: how late it wakes is how long
any ready callback (a finished answer waiting to be read, a request due to be sent) waits behind the loop's
other work. The loop thread's wait for a core (Linux's schedstat) is kept beside its CPU: on a host shared
with other work a saturated client gets less than a core, and CPU share alone would hide it. The `client-bound` verdict (harness.verdicts.client) judges these figures; docs/performance.md.
"""

from __future__ import annotations

import asyncio
import time
from array import array
from dataclasses import asdict, dataclass
from typing import Any

LAG_STEP_S = 0.01  # the lag timer's period: 100 samples a second, a few µs of CPU each
SCHEDSTAT = "/proc/thread-self/schedstat"  # ns on a core, ns runnable waiting for one, timeslices
_mono = time.monotonic


def thread_wait_s() -> float | None:
    """Seconds this thread has waited runnable for a core since it started; None off Linux."""
    try:
        with open(SCHEDSTAT) as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class ClientLoad:
    """One load-generator process over one run: CPU seconds, wall seconds and its loop's lag (s)."""

    cpu_s: float
    wall_s: float
    requests: int = 0  # sent by this process
    wait_s: float | None = None  # the loop's thread runnable but waiting for a core (None: not known)
    lag_p50_s: float | None = None
    lag_p99_s: float | None = None
    lag_max_s: float | None = None
    lag_samples: int = 0

    @property
    def cpu_share(self) -> float:
        """The share of one core the process used over the run (1.0: a core full)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def busy_share(self) -> float:
        """CPU plus the wait for a core, as a share of the run (at most 1.0): near 1.0, the loop was never idle."""
        if self.wall_s <= 0:
            return 0.0
        return min(1.0, (self.cpu_s + (self.wait_s or 0.0)) / self.wall_s)  # the two clocks start apart

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "cpu_share": round(self.cpu_share, 4),
            "busy_share": round(self.busy_share, 4),
        }


class LagMonitor:
    """Samples the running loop's lag until stopped; `load()` turns the samples into a ClientLoad."""

    def __init__(self, step_s: float = LAG_STEP_S) -> None:
        self.step_s = step_s
        self.samples = array("d")
        self.wait0 = thread_wait_s()

    async def run(self) -> None:
        step = self.step_s
        while True:
            t = _mono()
            await asyncio.sleep(step)
            self.samples.append(max(0.0, _mono() - t - step))

    def load(self, cpu_s: float, wall_s: float, requests: int) -> ClientLoad:
        """The run's figures; call it on the thread that ran the loop (the wait is that thread's)."""
        w1 = thread_wait_s()
        wait = round(w1 - self.wait0, 6) if w1 is not None and self.wait0 is not None else None
        base = ClientLoad(cpu_s=round(cpu_s, 6), wall_s=round(wall_s, 6), requests=requests, wait_s=wait)
        if not self.samples:
            return base
        lag = sorted(self.samples)  # nearest rank: a run loads no numpy (tests/commands/test_run.py)
        p50, p99 = (lag[min(len(lag) - 1, int(q * len(lag)))] for q in (0.5, 0.99))
        return ClientLoad(
            cpu_s=base.cpu_s,
            wall_s=base.wall_s,
            requests=requests,
            wait_s=wait,
            lag_p50_s=round(p50, 6),
            lag_p99_s=round(p99, 6),
            lag_max_s=round(lag[-1], 6),
            lag_samples=len(lag),
        )
