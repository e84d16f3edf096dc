"""A multi-turn schedule kept in a spill file: system prompts, then questions, in the order drawn.

generators.multi_turn draws every session's system prompt, then every question turn-major (request
index t x S + s), from one seeded stream. Held as Python text that was ~150 bytes a request plus
objects, for the whole run. Here each prompt goes to a SpillFile as it is drawn (a header with its
byte length and token count, then its bytes); RAM keeps one file offset every STRIDE entries.
Conversations and Requests are made when read, with the fields multi_turn gave them; the load
generator reads the questions in index order with one sequential reader (`scan`).
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator, Sequence
from typing import overload

from harness.spec.traffic import PriorityClass
from harness.workloads.schedule import Conversation, Prompt, Request
from harness.workloads.spill import SpillFile, pack_ids, unpack_ids
from harness.workloads.traffic import draw_class

ENTRY = struct.Struct("<II")  # payload bytes, token count
STRIDE = 16  # entries between two remembered offsets (half a byte of RAM an entry)
BLOCK = 1 << 16  # bytes a sequential read takes at once


class PromptStore:
    """Prompts appended in order and read back by entry number: text as UTF-8, ids as int64."""

    def __init__(self, ids: bool) -> None:
        self.spill = SpillFile()
        self.ids = ids
        self.marks = array("Q")  # offset of entry k x STRIDE
        self.count = 0
        self._group: tuple[int, bytes] = (-1, b"")  # the last STRIDE entries read by `get`

    def add(self, prompt: Prompt, tokens: int) -> None:
        if self.count % STRIDE == 0:
            self.marks.append(self.spill.size)
        data = pack_ids(prompt) if isinstance(prompt, tuple) else prompt.encode()
        self.spill.append(ENTRY.pack(len(data), tokens) + data)
        self.count += 1

    def _decode(self, data: bytes | bytearray) -> Prompt:
        return unpack_ids(data) if self.ids else data.decode()

    def get(self, k: int) -> tuple[Prompt, int]:
        """Entry k: one read of its group of STRIDE entries (kept for the next call), then a walk."""
        g = k // STRIDE
        if self._group[0] != g:
            start = self.marks[g]
            end = self.marks[g + 1] if g + 1 < len(self.marks) else self.spill.size
            self._group = (g, self.spill.read(start, end - start))
        data = self._group[1]
        pos = 0
        for _ in range(k - g * STRIDE):
            pos += ENTRY.size + ENTRY.unpack_from(data, pos)[0]
        n, tokens = ENTRY.unpack_from(data, pos)
        pos += ENTRY.size
        return self._decode(data[pos : pos + n]), tokens

    def scan(self, start: int, stop: int) -> Iterator[tuple[Prompt, int]]:
        """Entries start .. stop-1 in order, read a block at a time."""
        if start >= stop:
            return
        g = start // STRIDE
        at = self.marks[g]
        buf = bytearray()
        pos = 0
        k = g * STRIDE
        while k < stop:
            if len(buf) - pos < ENTRY.size:
                del buf[:pos]
                pos = 0
                buf += self.spill.read(at, BLOCK)
                at += BLOCK
            n, tokens = ENTRY.unpack_from(buf, pos)
            while len(buf) - pos < ENTRY.size + n:
                del buf[:pos]
                pos = 0
                buf += self.spill.read(at, max(BLOCK, n))
                at += max(BLOCK, n)
            pos += ENTRY.size
            if k >= start:
                yield self._decode(buf[pos : pos + n]), tokens
            pos += n
            k += 1


class SpilledSessions(Sequence[Conversation]):
    """The S sessions of a multi-turn schedule (entries 0..S-1 of the store: system prompts; S + t x S + s:
    turn t of session s), each Conversation made when read; `classes`: the spec's priorities, drawn
    per session as traffic.classed draws them."""

    def __init__(self, sessions: int, turns: int, output_tokens: int, store: PromptStore) -> None:
        self.sessions, self.turns, self.output_tokens, self.store = sessions, turns, output_tokens, store
        self.classes: Sequence[PriorityClass] = ()
        self._class_of = array("H")  # each session's class (an index into classes), when classed

    # ------------------------------------------------------------ the sequence
    def __len__(self) -> int:
        return self.sessions

    @overload
    def __getitem__(self, i: int) -> Conversation: ...
    @overload
    def __getitem__(self, i: slice) -> list[Conversation]: ...
    def __getitem__(self, i: int | slice) -> Conversation | list[Conversation]:
        if isinstance(i, slice):
            return [self[s] for s in range(*i.indices(self.sessions))]
        if i < 0:
            i += self.sessions
        if not 0 <= i < self.sessions:
            raise IndexError(i)
        return self._conversation(i, *self.store.get(i))

    def __iter__(self) -> Iterator[Conversation]:
        for s, (system, n) in enumerate(self.store.scan(0, self.sessions)):
            yield self._conversation(s, system, n)

    def _conversation(self, s: int, system: Prompt, n: int) -> Conversation:
        return Conversation(id=s, system=system, system_tokens=n, turns=SpilledTurns(self, s), session=s)

    # ------------------------------------------------------------ requests
    @property
    def request_count(self) -> int:
        return self.sessions * self.turns

    def count_part(self, i: int, n: int) -> int:
        """Requests of sessions i modulo n (a worker's share of a split run)."""
        return self.turns * len(range(i, self.sessions, n))

    def question(self, t: int, s: int) -> tuple[Prompt, int]:
        return self.store.get(self.sessions * (t + 1) + s)

    def request(self, t: int, s: int, question: Prompt, tokens: int) -> Request:
        """Turn t of session s, as generators.multi_turn made it (and traffic.classed classed it)."""
        priority = name = None
        if self.classes:
            c = self.classes[self._class_of[s]]
            priority, name = c.value, c.name
        return Request(
            index=t * self.sessions + s,
            conversation=s,
            turn=t,
            position=t,
            question=question,
            question_tokens=tokens,
            output_tokens=self.output_tokens,
            session=s,
            priority=priority,
            priority_class=name,
        )

    def requests_in_order(self) -> Iterator[Request]:
        """Every request in index order, read sequentially (nothing held)."""
        S = self.sessions
        for k, (q, n) in enumerate(self.store.scan(S, S + self.request_count)):
            t, s = divmod(k, S)
            yield self.request(t, s, q, n)

    def head(self, n: int) -> list[Conversation]:
        """The conversations of the first n requests in index order, each with its turns among them."""
        out = []
        for s in range(min(n, self.sessions)):
            conv = self[s]
            conv.turns = conv.turns[: len(range(s, n, self.sessions))]
            out.append(conv)
        return out

    def with_classes(self, classes: Sequence[PriorityClass], seed: int) -> SpilledSessions:
        """The same sessions (same store), each classed by its seeded draw."""
        other = SpilledSessions(self.sessions, self.turns, self.output_tokens, self.store)
        other.classes = list(classes)
        index = {id(c): k for k, c in enumerate(classes)}
        other._class_of = array("H", (index[id(draw_class(classes, seed, s))] for s in range(self.sessions)))
        return other


class SpilledTurns(Sequence[Request]):
    """Session s's turns, each Request made (its question read from the store) when accessed."""

    __slots__ = ("owner", "session")

    def __init__(self, owner: SpilledSessions, session: int) -> None:
        self.owner, self.session = owner, session

    def __len__(self) -> int:
        return self.owner.turns

    @overload
    def __getitem__(self, i: int) -> Request: ...
    @overload
    def __getitem__(self, i: slice) -> list[Request]: ...
    def __getitem__(self, i: int | slice) -> Request | list[Request]:
        n = self.owner.turns
        if isinstance(i, slice):
            return [self[t] for t in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._turn(i)

    def _turn(self, i: int) -> Request:
        return self.owner.request(i, self.session, *self.owner.question(i, self.session))

    def __iter__(self) -> Iterator[Request]:
        return (self[t] for t in range(self.owner.turns))


class PackedTurns(SpilledTurns):
    """Session s's turns for a session held in RAM for a whole run (open loop, think time): each question
    read from the store once, on first access, and kept packed (one str or int64 array, end offsets,
    token counts: a Request object per turn held would cost ~200 bytes more); Requests made on read."""

    __slots__ = ("text", "ids", "ends", "counts")

    def __init__(self, owner: SpilledSessions, session: int) -> None:
        super().__init__(owner, session)
        self.text = ""
        self.ids: array | None = None
        self.ends = array("I")
        self.counts = array("I")

    def _read(self, upto: int) -> None:
        while len(self.counts) <= upto:
            q, n = self.owner.question(len(self.counts), self.session)
            if isinstance(q, tuple):
                if self.ids is None:
                    self.ids = array("q")
                self.ids.extend(q)
                self.ends.append(len(self.ids))
            else:
                self.text += q
                self.ends.append(len(self.text))
            self.counts.append(n)

    def _turn(self, i: int) -> Request:
        self._read(i)
        start = self.ends[i - 1] if i else 0
        q: Prompt = (
            tuple(self.ids[start : self.ends[i]]) if self.ids is not None else self.text[start : self.ends[i]]
        )
        return self.owner.request(i, self.session, q, self.counts[i])
