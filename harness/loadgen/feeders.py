"""How a run's conversations reach its queue: one feeder per mode, behind the small Feeder protocol.

harness.loadgen.run picks one at construction (`pick_feeder`) and asks only the protocol:
- AllAtOnce: every conversation's first turn queued at the start (a shared-prefix schedule, a multi-turn
  one with think times);
- FromFile: a replayed trace (or an open-loop multi-turn schedule's first turns) read a window ahead
  of the workers, in arrival order, so memory does not grow with the trace;
- TurnByTurn: a closed-loop multi-turn schedule fed in index order, idle sessions spilled
  (harness.loadgen.turn_feed).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

from harness.loadgen.due import DueQueue
from harness.loadgen.part import Part
from harness.loadgen.sessions import Session, trace_due
from harness.loadgen.turn_feed import TurnFeed, cached
from harness.spec.load import LoadSettings
from harness.workloads import Schedule
from harness.workloads.arrivals import iter_arrival_offsets
from harness.workloads.schedule import Conversation, Request
from harness.workloads.spilled_sessions import SpilledSessions

FEED_WINDOW = 64  # a trace's conversations queued ahead of the workers (at least 2 x concurrency)


class Arrivals:
    """The open loop's arrival process (seeded, offsets from the run start), drawn one ahead for the sim's hint."""

    __slots__ = ("_offsets", "_next")

    def __init__(self, rate: float, seed: int, load: LoadSettings) -> None:
        self._offsets = iter_arrival_offsets(rate, seed, load.arrival, load.burstiness)
        self._next = next(self._offsets)

    def draw(self, last: bool) -> tuple[float, float | None]:
        """The next arrival offset and the one after it (None for the last conversation)."""
        offset, self._next = self._next, next(self._offsets)
        return offset, None if last else self._next


class Host(Protocol):
    """What a feeder needs of its run: the queue it fills, the sessions in RAM, the clock, and the
    way a request that will not be sent is recorded."""

    queue: DueQueue
    sessions: dict[int, Session]
    t0: float
    time_up: bool
    arrivals: Arrivals | None

    def unsent(self, reqs: Sequence[Request], why: str, text: str) -> None: ...

    def not_sent(self, s: Session, why: str, text: str) -> None: ...


class Feeder(Protocol):
    """One feed mode. `taken` runs on every request a worker takes: keep it cheap."""

    timed: bool  # a trace's own send times (timestamps: honor) were met: the run is an open loop

    def start(self, run: Host) -> None:
        """Queue what the run starts with."""

    def taken(self, run: Host, s: Session) -> None:
        """A worker took s's next turn: keep the window full."""

    def park(self, run: Host, s: Session) -> bool:
        """s's turn ended well: True when the feeder keeps s off the heap until it reaches it again."""

    def drop_rest(self, run: Host, why: str, text: str) -> None:
        """duration_s ran out or the run stalled: record what the feeder still holds as not sent."""

    def ready_unfed(self) -> int:
        """Requests ready to send but not yet queued (the sim's lockstep hint counts them as ready)."""

    def done(self, conv_id: int) -> None:
        """A session has no turn left."""

    def close(self) -> None:
        """The run is over."""


class AllAtOnce:
    """Every conversation's first turn queued at the start, by arrival time with a rate."""

    timed = False

    def __init__(self, schedule: Schedule, part: Part, sessions: dict[int, Session]) -> None:
        # every conversation in first-turn order (open loop: each draws its arrival time, whoever sends it)
        self._firsts = sorted((c for c in schedule.conversations if c.turns), key=_first)
        sessions.update((c.id, Session(cached(c))) for c in self._firsts if part.mine(c))

    def start(self, run: Host) -> None:
        n = len(self._firsts)
        for k, conv in enumerate(self._firsts):
            s = run.sessions.get(conv.id)
            if run.arrivals is not None:
                offset, nxt = run.arrivals.draw(last=k == n - 1)
                if s is not None:
                    s.offset, s.next_offset, s.due = offset, nxt, run.t0 + offset
            elif s is not None:
                s.due = trace_due(conv.turns[0], run.t0, None, None)
            if s is not None:
                run.queue.put(s, conv.turns[0].index, s.due)
        self._firsts = []

    def taken(self, run: Host, s: Session) -> None:
        return None

    def park(self, run: Host, s: Session) -> bool:
        return False

    def drop_rest(self, run: Host, why: str, text: str) -> None:
        return None

    def ready_unfed(self) -> int:
        return 0

    def done(self, conv_id: int) -> None:
        return None

    def close(self) -> None:
        return None


class FromFile:
    """Conversations read a window ahead of the workers, in order; `by_firsts`: the window counts first
    turns waiting (an open-loop multi-turn schedule, whose later turns queue themselves) rather than
    everything waiting."""

    def __init__(self, schedule: Schedule, part: Part, window: int, by_firsts: bool, open_loop: bool) -> None:
        self._part = part
        self._feed: Iterator[Conversation] | None = part.feed(schedule)
        self._unfed = len(schedule)  # requests of conversations not yet queued
        self._window = window
        self._firsts = 0 if by_firsts else None  # first turns queued, not yet taken
        self._open = open_loop
        self.timed = False

    def start(self, run: Host) -> None:
        self._top_up(run)

    def taken(self, run: Host, s: Session) -> None:
        if self._firsts is not None and not s.history:
            self._firsts -= 1
        self._top_up(run)

    def _top_up(self, run: Host) -> None:
        """Queue the next conversations until `window` wait untaken (or the file is done)."""
        if self._feed is None or run.time_up:
            return
        part, queue = self._part, run.queue
        while (queue.waiting() if self._firsts is None else self._firsts) < self._window:
            conv = next(self._feed, None)
            if conv is None:
                self._feed = None
                return
            if not conv.turns:
                continue
            self._unfed -= len(conv.turns)
            first = conv.turns[0]
            offset = nxt = None
            if first.arrival is None and run.arrivals is not None:
                offset, nxt = run.arrivals.draw(last=self._unfed <= 0)
            if not part.mine(conv):
                continue  # another worker's (its arrival time drawn all the same: one clock for all)
            s = Session(cached(conv))
            run.sessions[conv.id] = s
            if self._firsts is not None:
                self._firsts += 1
            if first.arrival is not None:  # the trace's own time (timestamps: honor), over speedup
                self.timed = True
                s.due = trace_due(first, run.t0, None, None)
            elif offset is not None:
                s.offset, s.next_offset, s.due = offset, nxt, run.t0 + offset
            queue.put(s, first.index, s.due)

    def park(self, run: Host, s: Session) -> bool:
        return False

    def drop_rest(self, run: Host, why: str, text: str) -> None:
        for conv in self._feed or ():  # conversations not yet read
            self._unfed -= len(conv.turns)
            if self._part.mine(conv):
                run.not_sent(Session(conv), why, text)

    def ready_unfed(self) -> int:
        # a closed loop's conversations not yet read are ready too
        return 0 if self._open or self.timed else self._unfed

    def done(self, conv_id: int) -> None:
        return None

    def close(self) -> None:
        return None


class TurnByTurn:
    """A closed-loop multi-turn schedule fed in index order by a TurnFeed, idle sessions off the heap."""

    timed = False

    def __init__(self, convs: SpilledSessions, part: Part, load: LoadSettings, window: int) -> None:
        self._turns = TurnFeed(convs, part, load.think_time)
        self._window = window

    def start(self, run: Host) -> None:
        self._top_up(run)

    def taken(self, run: Host, s: Session) -> None:
        self._top_up(run)

    def _top_up(self, run: Host) -> None:
        queue, sessions, turns = run.queue, run.sessions, self._turns
        while not run.time_up and queue.waiting() < self._window:
            got = turns.next()
            if got is None:
                return
            sessions[got[0].conv.id] = got[0]
            queue.put(got[0], got[1], None)

    def park(self, run: Host, s: Session) -> bool:
        if run.time_up or not self._turns.ahead(s):
            return False
        self._turns.park(s)
        del run.sessions[s.conv.id]
        return True

    def drop_rest(self, run: Host, why: str, text: str) -> None:
        for reqs in self._turns.unsent():  # idle sessions the feed has not reached
            run.unsent(reqs, why, text)

    def ready_unfed(self) -> int:
        return self._turns.ready_unfed

    def done(self, conv_id: int) -> None:
        self._turns.done(conv_id)

    def close(self) -> None:
        self._turns.close()


def pick_feeder(
    schedule: Schedule,
    part: Part,
    load: LoadSettings,
    rate: float | None,
    concurrency: int,
    sessions: dict[int, Session],
) -> Feeder:
    """The feed mode a schedule and load call for (the module docstring says which is which)."""
    convs = schedule.conversations
    spilled = isinstance(convs, SpilledSessions)  # a multi-turn schedule (its prompts in a file)
    think = load.think_time
    window = max(FEED_WINDOW, 2 * concurrency)
    if isinstance(convs, SpilledSessions) and not rate and (think is None or think.mean_s <= 0):
        return TurnByTurn(convs, part, load, window)
    if schedule.total is not None or (spilled and bool(rate)):
        return FromFile(schedule, part, window, by_firsts=spilled, open_loop=bool(rate))
    return AllAtOnce(schedule, part, sessions)


def _first(c: Conversation) -> int:
    return c.turns[0].index


__all__ = ["FEED_WINDOW", "AllAtOnce", "Arrivals", "Feeder", "FromFile", "TurnByTurn", "pick_feeder"]
