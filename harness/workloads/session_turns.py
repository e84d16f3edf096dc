"""A session's answers packed: one str, one id array, offsets and counts instead of a Turnout each.

A session held in RAM (queued or in flight, or open for a whole open-loop or think-time run) keeps
its answers here; read back as Turnouts for the prompt builder. (A multi-turn schedule's questions
live in a spill file: harness.workloads.spilled_sessions.)
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import overload

from harness.workloads.prompts import Turnout


class Answers(Sequence[Turnout]):
    """A session's answers so far, packed (one str, one id array, offsets, counts):
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
