"""Lockstep with the load generator: the virtual clock waits for requests the client is about to send.

The live sim keeps its own virtual clock (advanced only by modelled forward times), so wall-clock
work (HTTP, SSE, the event loop, a busy machine) never becomes modelled time. What it cannot know on
its own is *when* in virtual time a request would have arrived: in a closed loop a finished request's
replacement arrives the moment it finished, but over HTTP it lands some wall milliseconds later, by
which time the engine may have run several decode steps without it. So the harness's load generator
describes its loop in a request header (`X-Harness-Lockstep`), and the engine holds its clock
(schedules nothing) while the client owes it a request: a free concurrency slot with a ready request
to fill it, or (open loop) a request whose scheduled arrival the clock has reached. Replacements are
admitted in the client's send order and stamped with the held virtual time, so batches and cache
decisions are those of `harness whatif`'s virtual-time replay whatever the machine's load. A hold that
outlasts `wait_s` of wall time gives up (counted and logged): the clock then runs on as before.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

HEADER = "X-Harness-Lockstep"
_KEYS = {"run", "concurrency", "seq", "ready", "followed", "follow", "index", "offset", "next"}


class BadHint(ValueError):
    """The lockstep header is malformed: answered with HTTP 400 naming the header and the value."""


@dataclass(frozen=True)
class ClientHint:
    """One request's view of the client's loop, as the load generator sends it.

    run: names the client's run (a new name starts a new loop; requests of one run may land out of
    send order); concurrency: the client's cap on requests in flight; seq: this request's send number in its run
    (1 = the first); ready: requests ready to send after this one (sent as soon as a slot frees);
    followed: requests sent with follow that ended well, their next turn queued by then (so the engine
    knows which of its finishes `ready` already counts); follow: finishing this request (not aborted)
    makes one more ready at once (a session's next turn); index: its schedule
    index (requests arriving at the same virtual time are queued in index order, as the virtual-time
    replay queues them); offset / next (open loop only): this request's and the next request's
    scheduled arrival, seconds after the run start.
    """

    concurrency: int
    seq: int
    ready: int
    followed: int = 0
    follow: bool = False
    index: int | None = None
    offset: float | None = None
    next: float | None = None
    run: str = ""

    def header(self) -> str:
        parts = [f"run={self.run}"] if self.run else []
        parts += [f"concurrency={self.concurrency}", f"seq={self.seq}", f"ready={self.ready}"]
        parts += [f"followed={self.followed}", f"follow={int(self.follow)}"]
        if self.index is not None:
            parts.append(f"index={self.index}")
        if self.offset is not None:
            parts.append(f"offset={self.offset!r}")
        if self.next is not None:
            parts.append(f"next={self.next!r}")
        return ";".join(parts)


def parse_hint(value: str | None) -> ClientHint | None:
    """`run=a1;concurrency=8;seq=3;ready=20;followed=2;follow=1[;index=7][;offset=0.5;next=0.75]`."""
    if value is None or not value.strip():
        return None
    fields: dict[str, str] = {}
    for part in value.split(";"):
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in _KEYS:
            raise BadHint(f"{HEADER}: bad field {part.strip()!r} (expected {', '.join(sorted(_KEYS))})")
        fields[key] = val.strip()
    try:
        hint = ClientHint(
            concurrency=int(fields["concurrency"]),
            seq=int(fields["seq"]),
            ready=int(fields.get("ready", "0")),
            followed=int(fields.get("followed", "0")),
            follow=fields.get("follow", "0") not in ("0", "", "false"),
            index=int(fields["index"]) if "index" in fields else None,
            offset=float(fields["offset"]) if "offset" in fields else None,
            next=float(fields["next"]) if "next" in fields else None,
            run=fields.get("run", ""),
        )
    except KeyError as e:
        raise BadHint(f"{HEADER}: missing {e.args[0]!r} in {value!r}") from None
    except ValueError:
        raise BadHint(f"{HEADER}: not a number in {value!r}") from None
    if hint.concurrency < 1 or hint.seq < 1 or hint.ready < 0 or hint.followed < 0:
        raise BadHint(f"{HEADER}: concurrency and seq must be >= 1, ready and followed >= 0, got {value!r}")
    return hint


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
        if free <= 0 or ready <= 0 or (self.next_due is not None and self.next_due > now):
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
