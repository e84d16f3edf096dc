"""A multi-turn session's turns in a few bytes each: the questions packed, each Request made when read.

A multi-turn run keeps every session open at once (round-robin), so a Request object and a str per
turn held for the whole run made its memory ~330 bytes a request. Here a session holds its questions
as one str (or one int64 array of token ids) with their end offsets and token counts; the Request of
turn t is built on access, with the same fields generators.multi_turn gave it.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import overload

from harness.workloads.prompts import Turnout
from harness.workloads.schedule import Prompt, Request


class SessionTurns(Sequence[Request]):
    """Turns of session `session` of `sessions`: turn t is request t x sessions + session."""

    __slots__ = ("session", "sessions", "output_tokens", "text", "ids", "ends", "counts")

    def __init__(self, session: int, sessions: int, output_tokens: int) -> None:
        self.session, self.sessions, self.output_tokens = session, sessions, output_tokens
        self.text = ""  # the questions' text, end to end (a text schedule)
        self.ids: array | None = None  # or their token ids (tokenizer: server)
        self.ends = array("I")  # where each question ends in text / ids
        self.counts = array("I")  # each question's token count

    def append(self, question: Prompt, tokens: int) -> None:
        if isinstance(question, str):
            self.text += question
            self.ends.append(len(self.text))
        else:
            if self.ids is None:
                self.ids = array("q")
            self.ids.extend(question)
            self.ends.append(len(self.ids))
        self.counts.append(tokens)

    def question(self, t: int) -> Prompt:
        start = self.ends[t - 1] if t else 0
        if self.ids is not None:
            return tuple(self.ids[start : self.ends[t]])
        return self.text[start : self.ends[t]]

    def _request(self, t: int) -> Request:
        return Request(
            index=t * self.sessions + self.session,
            conversation=self.session,
            turn=t,
            position=t,
            question=self.question(t),
            question_tokens=self.counts[t],
            output_tokens=self.output_tokens,
            session=self.session,
        )

    def __len__(self) -> int:
        return len(self.counts)

    @overload
    def __getitem__(self, i: int) -> Request: ...

    @overload
    def __getitem__(self, i: slice) -> list[Request]: ...

    def __getitem__(self, i: int | slice) -> Request | list[Request]:
        n = len(self.counts)
        if isinstance(i, slice):
            return [self._request(t) for t in range(*i.indices(n))]
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return self._request(i)

    def __iter__(self) -> Iterator[Request]:
        return (self._request(t) for t in range(len(self.counts)))


class Answers(Sequence[Turnout]):
    """A session's answers so far, packed like its questions (one str, one id array, offsets, counts):
    what Session.history holds for PromptBuilder, read back as Turnouts."""

    __slots__ = ("text", "ends", "ids", "id_ends", "counts")

    def __init__(self) -> None:
        self.text = ""
        self.ends = array("I")
        self.ids: array | None = None  # answer token ids (tokenizer: server), when the server gave them
        self.id_ends = array("I")
        self.counts = array("i")  # completion tokens; -1: not reported

    def append(self, out: Turnout) -> None:
        self.text += out.answer
        self.ends.append(len(self.text))
        if out.answer_ids is not None:
            if self.ids is None:
                self.ids = array("q")
            self.ids.extend(out.answer_ids)
        self.id_ends.append(len(self.ids) if self.ids is not None else 0)
        self.counts.append(-1 if out.completion_tokens is None else out.completion_tokens)

    def __len__(self) -> int:
        return len(self.counts)

    @overload
    def __getitem__(self, i: int) -> Turnout: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Turnout]: ...
    def __getitem__(self, i: int | slice) -> Turnout | Sequence[Turnout]:
        """One answer by turn (an agent's tool result and lineage read earlier answers by index)."""
        if isinstance(i, slice):
            return list(self)[i]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        start = self.ends[i - 1] if i else 0
        id_start = self.id_ends[i - 1] if i else 0
        ids = tuple(self.ids[id_start : self.id_ends[i]]) if self.ids is not None else None
        n = self.counts[i]
        return Turnout(self.text[start : self.ends[i]], ids, None if n < 0 else n)

    def __iter__(self) -> Iterator[Turnout]:
        start = id_start = 0
        for end, id_end, n in zip(self.ends, self.id_ends, self.counts, strict=True):
            ids = tuple(self.ids[id_start:id_end]) if self.ids is not None else None
            yield Turnout(self.text[start:end], ids, None if n < 0 else n)
            start, id_start = end, id_end
