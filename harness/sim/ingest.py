"""The way in: a request's path from the HTTP server to SGLang's scheduler, modelled as one FIFO server.

SGLang's tokenizer manager runs in the HTTP server's single asyncio loop: each request is parsed,
validated, tokenized, pickled and sent to the scheduler over ZMQ one after another, so requests that
land together reach the scheduler one `latency_s` apart, in arrival order. The scheduler drains its
socket without blocking at the top of every loop iteration and busy-polls when idle (no
--sleep-on-idle), so an idle scheduler starts the first request of a burst alone, and the requests
that reach it during a forward join the next batch. This is why a burst's later requests find the
first one's prefix cached (docs/sglang-scheduling.md). Both the offline driver (simulate.py) and the
live server (live.py) push every arrival through one `Ingest`, so they agree request for request.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from harness.sim.sched_records import INGEST_LATENCY_S, SimRequest

__all__ = ["INGEST_LATENCY_S", "Ingest", "idle_poll"]


@dataclass
class Ingest:
    """Requests that have reached the server but not yet the scheduler, and when each will."""

    latency_s: float = INGEST_LATENCY_S
    free_at: float = float("-inf")  # when the tokenizer manager finishes the request it is working on
    # (reaches the scheduler at, request), in order: one server in arrival order never reorders them
    _wire: deque[tuple[float, SimRequest]] = field(default_factory=deque)

    def send(self, req: SimRequest, arrival: float) -> float:
        """Queue a request that reached the server at virtual `arrival` (call in arrival order); returns
        when the scheduler can receive it."""
        start = max(arrival, self.free_at)
        self.free_at = start + self.latency_s
        req.received = self.free_at
        self._wire.append((self.free_at, req))
        return self.free_at

    def next_at(self) -> float | None:
        """When the next queued request reaches the scheduler (None: none queued)."""
        return self._wire[0][0] if self._wire else None

    def receive(self, now: float) -> list[SimRequest]:
        """What a scheduler polling at `now` takes in: every request that reached it by then, in order."""
        out = []
        while self._wire and self._wire[0][0] <= now:
            out.append(self._wire.popleft()[1])
        return out

    def remove(self, req: SimRequest) -> bool:
        """Drop a request still on its way (its client went away); True if it was."""
        for item in self._wire:
            if item[1] is req:
                self._wire.remove(item)
                return True
        return False

    def __len__(self) -> int:
        return len(self._wire)


def idle_poll(reach: float, idle_since: float, period_s: float) -> float:
    """When an idle scheduler that went idle at `idle_since` and spins once per `period_s` first sees a
    request that reached its socket at `reach` (0: at once). Each spin of SGLang's idle loop runs its
    self-checks (`on_idle`), so on a slow or busy host it takes long enough for several requests of a
    burst to land before the spin that finds the first (--sim-idle-poll-ms)."""
    if period_s <= 0 or reach <= idle_since:
        return reach
    t = idle_since + math.ceil((reach - idle_since) / period_s) * period_s
    return t if t >= reach else t + period_s
