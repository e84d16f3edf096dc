"""Lockstep with the load generator: the virtual clock waits for requests the client is about to send.

The live sim keeps its own virtual clock (advanced only by modelled forward times), so wall-clock
work (HTTP, SSE, the event loop, a busy machine) never becomes modelled time. What it cannot know on
its own is *when* in virtual time a request would have arrived: in a closed loop a finished request's
replacement arrives the moment it finished, but over HTTP it lands some wall milliseconds later, by
which time the engine may have run several decode steps without it. So the harness's load generator
describes its loop in a request header (`X-Harness-Lockstep`, harness.protocol.lockstep), and the engine holds its clock
(schedules nothing) while the client owes it a request: a free concurrency slot with a ready request
to fill it, or (open loop) a request whose scheduled arrival the clock has reached. Replacements are
admitted in the client's send order and stamped with the held virtual time, so batches and cache
decisions are those of `harness whatif`'s virtual-time replay whatever the machine's load. A hold that
outlasts `wait_s` of wall time gives up (counted and logged): the clock then runs on as before.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from harness.protocol.lockstep import ClientHint


class _Loop:
    """One client loop (a run, or one worker process of it) as the engine sees it: requests in flight,
    ready ones, the next scheduled arrival."""

    def __init__(self, run: str, hint: ClientHint, now: float) -> None:
        self.run = run
        self.concurrency = hint.concurrency
        self.seq = 0
        self.ready = 0  # the client's ready requests at its latest send
        self.followed = 0  # ... and the finishes whose follow-up it had queued by then
        self.follows = 0  # finishes with a follow-up, here
        self.in_flight = 0
        self.received = 0  # requests of this loop that arrived (seq - received are still on the wire)
        self.anchor = now - (hint.offset or 0.0)  # virtual time of the run's offset 0 (open loop)
        self.began = now  # when its first request landed: nothing of the run arrives before that
        self.next_due: float | None = None
        self.free_at: list[float] = [self.anchor] * hint.concurrency  # open loop: when slots freed (a heap)
        self.gave_up = False

    def arrive(self, hint: ClientHint, now: float) -> float:
        self.in_flight += 1
        self.received += 1
        if hint.seq > self.seq:  # requests may land out of send order; the latest send knows best
            self.seq, self.ready, self.concurrency = hint.seq, hint.ready, hint.concurrency
            self.followed = hint.followed
            self.next_due = self.anchor + hint.next if hint.next is not None else None
        self.gave_up = False
        slot = heapq.heappop(self.free_at) if self.free_at else now
        if hint.offset is None:
            return now
        # open loop: sent once due and a slot was free (the load generator's worker claims the next
        # arrival when it frees), whichever came later, however late it landed here
        return max(slot, self.anchor + hint.offset)

    def rebase(self, hint: ClientHint, now: float, allowed: Callable[[], bool]) -> float:
        """An open-loop request that lands while the clock still stands where the run began, scheduled
        before the run's first arrival: the first one to land overtook it on the way (the sends raced),
        so the run's offset 0 moves to put this one at the run's start, if `allowed()` (asked only then).
        Returns the shift (0: none)."""
        if hint.offset is None or now != self.began:
            return 0.0
        shift = self.began - (self.anchor + hint.offset)
        if shift <= 0 or not allowed():
            return 0.0
        self.anchor += shift
        self.free_at = [t + shift for t in self.free_at]  # no slot freed yet: the clock has not moved
        self.next_due = None if self.next_due is None else self.next_due + shift
        return shift

    def finish(self, follow: bool, at: float) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self.follows += int(follow)
        heapq.heappush(self.free_at, at)
        self.gave_up = False

    @property
    def ready_now(self) -> int:
        """Ready requests once the client has seen every finish: its last count plus the follow-ups of
        finishes it had not seen yet (the client learns of finishes in any order; counts do not care)."""
        return self.ready + max(0, self.follows - self.followed)

    def owed(self, now: float) -> int:
        """Requests this loop sends before the clock may pass `now`: those already on the wire (a later
        send arrived first), and free slots that a ready request fills (closed loop) once the next
        scheduled arrival is due (open loop)."""
        if self.gave_up:
            return 0
        wire = max(0, self.seq - self.received)
        free, ready = self.concurrency - self.in_flight - wire, self.ready_now
        # open loop: the next arrival is owed once the clock reaches it, whether or not the client's wall
        # clock has (at --time-scale the virtual clock runs ahead of the client's schedule)
        if (
            free <= 0
            or (ready <= 0 and self.next_due is None)
            or (self.next_due is not None and self.next_due > now)
        ):
            return wire
        return wire + (min(free, ready) if self.next_due is None else 1)

    def state(self) -> str:
        return (
            f"run {self.run or '-'}: concurrency {self.concurrency}, in flight {self.in_flight}, "
            f"on the wire {max(0, self.seq - self.received)}, ready {self.ready} + follow-ups "
            f"{self.follows} - seen {self.followed}"
        )


class Lockstep:
    """Every client loop the engine has seen, by run name: several at once when a point's load comes
    from several worker processes (each its own loop), or from several clients."""

    def __init__(self) -> None:
        self.loops: dict[str, _Loop] = {}
        self.timeouts = 0

    def loop(self, run: str = "") -> _Loop:
        return self.loops[run]

    def arrive(self, hint: ClientHint, now: float) -> float:
        """A request with this hint arrived at virtual time `now`; returns its virtual arrival time."""
        lp = self.loops.get(hint.run)
        # a new run; without a name, a first send when nothing of the unnamed loop is in flight
        if lp is None or (not hint.run and hint.seq == 1 and lp.in_flight == 0):
            for run in [
                r for r, x in self.loops.items() if x.gave_up or (x.in_flight == 0 and x.owed(now) == 0)
            ]:
                del self.loops[run]  # finished or abandoned loops
            lp = self.loops[hint.run] = _Loop(hint.run, hint, now)
        return lp.arrive(hint, now)

    def rebase(self, hint: ClientHint, now: float, allowed: Callable[[], bool] = lambda: True) -> float:
        """Before `arrive`: move the run's offset 0 when this request was scheduled before the run's first
        arrival and the clock has not moved since (_Loop.rebase); the caller moves the run's requests it
        stamped and still holds by the returned shift."""
        lp = self.loops.get(hint.run)
        return 0.0 if lp is None else lp.rebase(hint, now, allowed)

    def finish(self, run: str, follow: bool, at: float) -> None:
        """A request of loop `run` finished at virtual time `at`: a slot is free, and its session's next
        turn is ready if it has one."""
        lp = self.loops.get(run)
        if lp is not None:
            lp.finish(follow, at)

    def owed(self, now: float) -> int:
        """Requests the clients send before the clock may pass `now` (0: no lockstep client, never hold)."""
        return sum(lp.owed(now) for lp in self.loops.values())

    def state(self) -> str:
        """The bookkeeping behind `owed`, for the log line of a hold that gave up."""
        owing = [lp.state() for lp in self.loops.values() if not lp.gave_up and lp.owed(float("inf"))]
        return "; ".join(owing or ["no loop owes"]) + f"; earlier timeouts {self.timeouts}"

    def give_up(self, now: float) -> None:
        """The loops that owe did not send in time: each runs on until its own loop changes."""
        for lp in self.loops.values():
            if lp.owed(now):
                lp.gave_up = True
        self.timeouts += 1
