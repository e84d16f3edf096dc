"""The live sim's engine loop: a virtual clock paced to --time-scale, lockstep with the client, stamps.

Modelled time is the engine's own virtual clock: it advances by each forward's modelled duration and
by nothing else, so HTTP, SSE, the event loop or a busy machine never become modelled milliseconds.
The wall clock only paces the loop (a forward of d modelled seconds takes d x --time-scale wall
seconds, or longer when the machine cannot keep up; see `Pace`). Each request is stamped with its
virtual arrival, first token and finish; the server hands them to the client (`sim_time` in the
response) and to its log. With a lockstep client (lockstep.py) the clock also waits for the requests
the client owes it, so the batches, and with them every figure, match the virtual-time replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.protocol.lockstep import ClientHint
from harness.sim.engine import Batch, Engine, SimRequest
from harness.sim.ingest import Ingest, idle_poll
from harness.sim.lockstep import Lockstep

OVERHEAD_WARN = 0.05  # warn when wall-clock overhead exceeds this fraction of the paced step time
PACE_REPORT_S = 30.0  # wall seconds between overhead reports while busy (also reported on going idle)


def sim_time(req: SimRequest) -> dict[str, float | None]:
    """A request's stamps on the sim's virtual clock (seconds since the server started)."""
    return {"arrival_s": req.arrival, "first_token_s": req.first_token_time, "finish_s": req.finish_time}


@dataclass
class Pace:
    """Wall time the loop spent beyond what --time-scale gives the forwards it ran (one window)."""

    forwards: int = 0
    paced_s: float = 0.0  # sum of modelled durations x time scale
    wall_s: float = 0.0  # wall time from each forward's scheduling to its completion
    held_s: float = 0.0  # wall time the clock stood still waiting for the lockstep client
    modelled_s: float = 0.0
    since: float = field(default_factory=time.monotonic)

    @property
    def overhead_s(self) -> float:
        return max(0.0, self.wall_s - self.paced_s)

    def fraction(self) -> float:
        return self.overhead_s / self.paced_s if self.paced_s > 0 else 0.0


def overhead_line(p: Pace, scale: float, timeouts: int) -> str:
    """The warning serve-sim logs when a window's wall-clock overhead passes OVERHEAD_WARN."""
    return (
        f"serve-sim: wall-clock overhead {p.fraction():.1%} of the modelled step time "
        f"(over {p.forwards} forwards: {p.modelled_s * 1000:.1f} ms modelled, "
        f"{p.paced_s * 1000:.1f} ms of wall time at --time-scale {scale:g}, "
        f"{p.overhead_s * 1000:.1f} ms beyond that, {p.held_s * 1000:.1f} ms waiting for the client, "
        f"lockstep timeouts: {timeouts}). Modelled times come from the virtual clock and are unaffected; "
        "wall-clock timings are not modelled time x --time-scale."
    )


def request_line(req: SimRequest) -> str:
    """One line per finished request with its virtual stamps, for readers of the log alone."""

    def f(v: float | None) -> str:
        return "None" if v is None else f"{v:.6f}"

    return (
        f"Sim request finished, rid: {req.rid}, arrival: {f(req.arrival)}, first_token: "
        f"{f(req.first_token_time)}, finish: {f(req.finish_time)}, #prompt-token: {len(req.input_ids)}, "
        f"#cached-token: {req.cached_tokens}, #completion-token: {req.generated}, "
        f"finish_reason: {req.finish_reason}"
    )


@dataclass
class _Arrival:
    req: SimRequest
    seq: float  # the client's send order (lockstep); inf for other requests
    n: int  # arrival order here


@dataclass
class LiveEngine:
    """Drives an Engine in real time on the sim's virtual clock (one per server)."""

    engine: Engine
    time_scale: float
    hold_wait_s: float = 1.0  # a lockstep hold gives up after this much wall time; 0 turns lockstep off
    log_info: Callable[[str], None] = print
    log_warning: Callable[[str], None] = print
    vnow: float = 0.0
    lockstep: Lockstep = field(default_factory=Lockstep)
    pace: Pace = field(default_factory=Pace)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    _pending: list[_Arrival] = field(default_factory=list)  # arrived, not yet taken by the tokenizer manager
    ingest: Ingest = field(default_factory=Ingest)  # ... taken, not yet received by the scheduler
    _tracked: dict[str, tuple[str, bool]] = field(default_factory=dict)  # rid -> (run, follow), lockstep
    _held: set[str] = field(default_factory=set)  # rids whose finish reaches the client late (delivered())
    _inflight: tuple[Batch, float] | None = None  # the forward being paced and its wall start
    _orders: int = 0
    _idle_since: float = 0.0  # when the last forward ended (an idle scheduler's spins start then)

    def __post_init__(self) -> None:
        self.engine.on_finish = self._finished
        self.ingest = Ingest(float(self.engine.config.ingest_latency_s or 0.0))

    # --- clock -------------------------------------------------------------------------------
    def model_now(self) -> float:
        """The virtual time now: inside a forward, its start plus the wall time paced so far (scaled)."""
        if self._inflight is None:
            return self.vnow
        batch, wall0 = self._inflight
        return batch.start + min(batch.duration, (time.monotonic() - wall0) / self.time_scale)

    # --- requests ------------------------------------------------------------------------------
    def submit(self, req: SimRequest, hint: ClientHint | None, held: bool = False) -> None:
        """Stamp a request's virtual arrival and queue it for the engine (it goes through the tokenizer
        manager once the clock reaches its arrival, and the scheduler receives it between forwards).
        `held`: its answer will be held back on the way (a stall fault), so the client learns of its
        finish only when the handler says so (delivered())."""
        now = self.model_now()
        if hint is not None and self.hold_wait_s > 0:
            self._rebase(hint, now)
            req.arrival = self.lockstep.arrive(hint, now)
            req.order = hint.index if hint.index is not None else req.order
            self._tracked[req.rid] = (hint.run, hint.follow)
            if held:
                self._held.add(req.rid)
            seq: float = hint.seq
        else:
            req.arrival = now
            seq = float("inf")
        self._orders += 1
        self._pending.append(_Arrival(req, seq, self._orders))
        self.wake.set()

    def _rebase(self, hint: ClientHint, now: float) -> None:
        """Sends that raced: this open-loop request was scheduled before the one that began its run. While
        every request of the run is still held here (none went on to the tokenizer manager), the run's
        offset 0 moves to this one and their stamps move with it. The scan of what is held runs only for
        such a request, not for every arrival."""
        mine: list[_Arrival] = []

        def all_held() -> bool:
            mine.extend(a for a in self._pending if self._tracked.get(a.req.rid, ("",))[0] == hint.run)
            return len(mine) == sum(1 for run, _ in self._tracked.values() if run == hint.run)

        shift = self.lockstep.rebase(hint, now, all_held)
        for a in mine if shift else ():
            a.req.arrival += shift

    def abort(self, req: SimRequest) -> None:
        """The client went away: drop the request (still queued here, or in the engine)."""
        for a in self._pending:
            if a.req is req:
                self._pending.remove(a)
                req.aborted, req.finish_reason, req.finish_time = True, "abort", self.model_now()
                self._finished(req)
                break
        else:
            if self.ingest.remove(req):
                req.aborted, req.finish_reason, req.finish_time = True, "abort", self.model_now()
                self._finished(req)
                self.wake.set()
                return
            was_waiting = req in self.engine.waiting
            self.engine.abort(req)
            if was_waiting:
                self._finished(req)
        self.wake.set()

    def _finished(self, req: SimRequest) -> None:
        tracked = None if req.rid in self._held else self._tracked.pop(req.rid, None)
        if tracked is not None:  # an aborted request's session stops: the load generator skips its next turns
            run, follow = tracked
            at = req.finish_time if req.finish_time is not None else self.vnow
            self.lockstep.finish(run, follow and req.finish_reason != "abort", at)
        self.log_info(request_line(req))

    def delivered(self, req: SimRequest, whole: bool) -> None:
        """A held request's handler is done: its answer reached the client (`whole`) or the client went
        away. Only now is its slot free on the client's side; until now the clock did not wait for a
        follow-up the client could not send yet (it would have stood still for the whole stall)."""
        if req.rid not in self._held:
            return
        self._held.discard(req.rid)
        tracked = self._tracked.pop(req.rid, None)
        if tracked is not None:
            run, follow = tracked
            self.lockstep.finish(run, follow and whole and req.finish_reason != "abort", self.model_now())
            self.wake.set()

    def _admit(self) -> None:
        """Move arrivals on as `simulate` does: those the clock reached go through the tokenizer manager (by
        virtual arrival, then schedule index), and the engine receives those that reached the scheduler.
        An idle engine's clock first jumps to the next of these events (an open-loop client's scheduled
        arrival, or the idle loop's spin that sees the next request to reach the scheduler) and hands
        nothing over: the next step's lockstep hold runs at the new time before anything moves on."""
        if not self._pending and not self.ingest:
            return
        if not self.engine.busy():
            first = min((a.req.arrival for a in self._pending), default=float("inf"))
            reach = self.ingest.next_at()
            if reach is not None and reach <= first:
                poll_s = float(self.engine.config.idle_poll_s or 0.0)
                target = idle_poll(reach, self._idle_since, poll_s)
            else:
                target = first
            if target > self.vnow:
                self.vnow = target
                return  # the next step holds for what the client owes by then, then hands over
        due = [a for a in self._pending if a.req.arrival <= self.vnow]
        due.sort(key=lambda a: (a.req.arrival, a.req.order, a.seq, a.n))
        for a in due:
            self._pending.remove(a)
            self.ingest.send(a.req, a.req.arrival)
        for req in self.ingest.receive(self.vnow):
            self.engine.add(req)

    # --- the loop ------------------------------------------------------------------------------
    async def _hold(self) -> None:
        """Stand the clock still while the lockstep client owes requests (up to hold_wait_s of wall)."""
        ls = self.lockstep
        if ls.owed(self.vnow) <= 0:
            return
        t0 = time.monotonic()
        deadline = t0 + self.hold_wait_s
        while ls.owed(self.vnow) > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                self.log_warning(
                    f"serve-sim: lockstep: the client owed {ls.owed(self.vnow)} request(s) and sent none in "
                    f"{self.hold_wait_s:g} s of wall time; the virtual clock runs on ({ls.state()})"
                )
                ls.give_up(self.vnow)
                break
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), left)
        self.pace.held_s += time.monotonic() - t0

    async def step(self) -> bool:
        """Run one forward (after any hold); False when there is nothing to run."""
        await self._hold()
        self._admit()
        wall0 = time.monotonic()
        batch = self.engine.schedule(self.vnow)
        if batch is None:
            return False
        self._inflight = (batch, wall0)
        paced = batch.duration * self.time_scale
        try:
            await asyncio.sleep(max(0.0, wall0 + paced - time.monotonic()))
        finally:
            self._inflight = None
        self.vnow = batch.start + batch.duration
        self._idle_since = self.vnow
        self.engine.complete(batch, self.vnow)
        p = self.pace
        p.forwards += 1
        p.paced_s += paced
        p.modelled_s += batch.duration
        p.wall_s += time.monotonic() - wall0
        if time.monotonic() - p.since >= PACE_REPORT_S:
            self.report_pace()
        return True

    def report_pace(self) -> None:
        """Warn when the window's wall-clock overhead passed OVERHEAD_WARN; start a new window."""
        p = self.pace
        if p.forwards and p.fraction() > OVERHEAD_WARN:
            self.log_warning(overhead_line(p, self.time_scale, self.lockstep.timeouts))
        self.pace = Pace()

    async def run(self) -> None:
        """Forever: run forwards while there is work, report the pace and sleep on `wake` when idle."""
        while True:
            if await self.step():
                continue
            if self._pending or self.ingest:
                continue  # arrivals the clock has not reached yet: _admit jumps to them when idle
            if self.pace.forwards:
                self.report_pace()
            self.wake.clear()
            await self.wake.wait()
