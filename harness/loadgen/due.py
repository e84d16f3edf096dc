"""Requests waiting to be sent, released to idle workers at their due time, earliest due first.

One timer for the earliest future item and one future per idle worker: an arrival wakes exactly one
worker (never every worker), and nothing polls. Items due now (closed loop) go straight to the ready
heap, ordered by schedule index as before.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections import deque
from typing import Any

_mono = time.monotonic


class DueQueue:
    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ready: list[tuple[float, int, Any, bool]] = []  # (due or 0, index, item, a worker was idle)
        self._later: list[tuple[float, int, Any]] = []  # (due, index, item), due in the future
        self._waiters: deque[asyncio.Future] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self.closed = False
        self._asked = False  # no worker has asked yet (the run is starting: all of them are free)

    def put(self, item: Any, index: int, due: float | None = None) -> None:
        """Queue item (schedule index `index`), to be handed out at `due` (time.monotonic) or now."""
        if due is None or due <= _mono():
            heapq.heappush(self._ready, (due or 0.0, index, item, self._wake_one()))
            return
        heapq.heappush(self._later, (due, index, item))
        if due < self._timer_at:
            self._arm(due)

    async def get(self) -> tuple[Any, bool]:
        """(the next item due, whether a worker was idle when it came due), waiting as long as it takes;
        (None, False) once the queue is closed. No idle worker: it waited for a free slot (the cap)."""
        self._asked = True
        while not self._ready:
            if self.closed:
                return None, False
            fut = self._loop.create_future()
            self._waiters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                if fut.done() and not fut.cancelled():
                    self._wake_one()  # pass the wake-up on, it was meant for someone
                raise
        _, _, item, idle = heapq.heappop(self._ready)
        return item, idle

    def waiting(self) -> int:
        """Items queued and not yet taken, due now or later."""
        return len(self._ready) + len(self._later)

    def ready_count(self) -> int:
        """Items due now and not yet taken."""
        return len(self._ready)

    def drain(self) -> list[Any]:
        """Take every queued item out (ready and future), earliest first; nothing more is handed out."""
        items = [x[2] for x in sorted([*self._ready, *self._later], key=lambda x: x[:2])]
        self._ready.clear()
        self._later.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, float("inf")
        return items

    def close(self) -> None:
        """No more items will come: idle workers get None."""
        self.closed = True
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)

    def _arm(self, due: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = due
        self._timer = self._loop.call_at(self._loop.time() + (due - _mono()), self._release)

    def _release(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        now = _mono()
        later = self._later
        while later and later[0][0] <= now:
            due, index, item = heapq.heappop(later)
            heapq.heappush(self._ready, (due, index, item, self._wake_one()))
        if later:
            self._arm(later[0][0])

    def _wake_one(self) -> bool:
        """Wake one idle worker; False when every worker was busy (before any asked, all are idle)."""
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return True
        return not self._asked
