"""A closed-loop multi-turn run fed in index order, its idle sessions off the heap: memory flat in run length.

Without a rate or a think time every session's next turn is ready the moment its previous turn ends,
and workers take the lowest ready index. Queuing every session at the start kept every session (and
its history) in RAM for the whole run. Here requests are read from the spilled schedule in index
order, a window ahead of the workers; a session exists as a Session only while a turn of it is queued
or in flight. Between turns its history sits in a HistorySpill and the session is one int64: 0
(nothing sent yet), -1 (done: finished, failed or not sent), -2 (a Session in RAM), else its history's
chain head + 1. A request the feed reaches whose previous turn is still queued or in flight is passed
over: that turn's end queues it (its index is then behind the feed). The workers take the same
requests in the same order as before, and `ready_unfed` counts the ready requests not yet fed, so the
lockstep hint's ready count is what it was.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import overload

from harness.loadgen.history_spill import HistorySpill
from harness.loadgen.part import Part
from harness.loadgen.sessions import Session
from harness.spec.load import ThinkTime
from harness.workloads.schedule import Conversation, Request
from harness.workloads.spilled_sessions import PackedTurns, SpilledSessions, SpilledTurns

FRESH, DONE, BUSY = 0, -1, -2


class KnownTurns(Sequence[Request]):
    """A session's turns: those already read kept as Requests, the rest read from the schedule once."""

    __slots__ = ("known", "rest")

    def __init__(self, known: list[Request], rest: Sequence[Request]) -> None:
        self.known, self.rest = known, rest

    def __len__(self) -> int:
        return len(self.rest)

    @overload
    def __getitem__(self, i: int) -> Request: ...
    @overload
    def __getitem__(self, i: slice) -> list[Request]: ...
    def __getitem__(self, i: int | slice) -> Request | list[Request]:
        if isinstance(i, slice):
            return [self[t] for t in range(*i.indices(len(self.rest)))]
        if i < 0:
            i += len(self.rest)
        known = self.known
        while len(known) <= i:
            known.append(self.rest[len(known)])
        return known[i]

    def __iter__(self) -> Iterator[Request]:
        return (self[t] for t in range(len(self.rest)))


def cached(conv: Conversation) -> Conversation:
    """A spilled conversation whose questions, once read, stay read, packed (a session held in RAM for the
    whole run reads each once)."""
    if isinstance(conv.turns, SpilledTurns):
        conv.turns = PackedTurns(conv.turns.owner, conv.turns.session)
    return conv


class FedSession(Session):
    """A Session that knows its history's chain head and how many of its turns are in the spill."""

    __slots__ = ("head", "saved")

    def __init__(self, conv: Conversation) -> None:
        super().__init__(conv)
        self.head = -1
        self.saved = 0


class TurnFeed:
    """The sessions of one run (or one worker's part of it) fed in index order, idle ones spilled."""

    def __init__(self, convs: SpilledSessions, part: Part, think: ThinkTime | None) -> None:
        self.convs, self.part, self.think = convs, part, think
        S = self.sessions = convs.sessions
        self.total = S * convs.turns
        self.cursor = 0  # the next request index the feed reads
        self.state = array("q", bytes(8 * S))  # per session, see the module docstring
        self.spill = HistorySpill()
        self._systems = convs.store.scan(0, S)
        self._questions = convs.store.scan(S, S + self.total)
        self.ready_unfed = sum(1 for s in range(S) if self.part.has(s)) if convs.turns else 0

    def next(self) -> tuple[FedSession, int] | None:
        """The next request whose session is idle, as a Session ready to send it (and its index)."""
        S, state = self.sessions, self.state
        while self.cursor < self.total:
            k = self.cursor
            self.cursor += 1
            t, s = divmod(k, S)
            q, q_n = next(self._questions)
            system = next(self._systems) if t == 0 else None
            if not self.part.has(s) or state[s] in (DONE, BUSY):
                continue  # another worker's, or done, or its previous turn's end will queue it
            sess = self._load(t, s, state[s], self.convs.request(t, s, q, q_n), system)
            state[s] = BUSY
            self.ready_unfed -= 1
            return sess, k
        return None

    def _load(self, t: int, s: int, st: int, req: Request, system: tuple[object, int] | None) -> FedSession:
        convs = self.convs
        rest = SpilledTurns(convs, s)
        if st == FRESH:
            assert system is not None
            conv = Conversation(s, system[0], system[1], KnownTurns([req], rest), session=s)  # type: ignore[arg-type]
            return FedSession(conv)
        (sys_p, sys_n), questions, history = self.spill.load(st - 1)
        known = [convs.request(i, s, q, n) for i, (q, n) in enumerate(questions)]
        known.append(req)
        sess = FedSession(Conversation(s, sys_p, sys_n, KnownTurns(known, rest), session=s))
        sess.history = history
        sess.head, sess.saved = st - 1, len(history)
        # what Session.think gave it at its last turn's end
        sess.think_s = None if self.think is None else 0.0
        return sess

    def ahead(self, sess: Session) -> bool:
        """sess has a next turn and the feed has not reached it (its end was read from the schedule)."""
        t = len(sess.history)
        return t < self.convs.turns and t * self.sessions + sess.conv.id >= self.cursor

    def park(self, sess: Session) -> None:
        """sess's turn ended well and its next turn is ahead of the feed: its history to the spill."""
        assert isinstance(sess, FedSession)
        conv = sess.conv
        head = sess.head
        for t in range(sess.saved, len(sess.history)):
            req = conv.turns[t]
            system = (conv.system, conv.system_tokens) if head < 0 else None
            head = self.spill.save(head, system, req.question, req.question_tokens, sess.history[t])  # type: ignore[arg-type]
        self.state[conv.id] = head + 1
        self.ready_unfed += 1

    def done(self, s: int) -> None:
        """Session s is over (finished, failed or not sent): the feed passes its turns over."""
        self.state[s] = DONE

    def unsent(self) -> Iterator[list[Request]]:
        """Each idle session's turns from its next one, in the order of those next turns (duration_s ran
        out); the sessions are done. Requests only: not-sent records need no prompt."""
        S, state, convs = self.sessions, self.state, self.convs
        for k in range(self.cursor, min(self.cursor + S, self.total)):
            t, s = divmod(k, S)
            if not self.part.has(s) or state[s] in (DONE, BUSY):
                continue
            state[s] = DONE
            self.ready_unfed -= 1
            yield [convs.request(u, s, "", 0) for u in range(t, convs.turns)]
        self.cursor = self.total

    def close(self) -> None:
        self.spill.close()
