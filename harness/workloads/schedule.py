"""A schedule: conversations of turns in nominal send order, built entirely before the run starts."""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Prompt = str | tuple[int, ...]  # text, or token ids for SGLang's /generate `input_ids`


@dataclass
class BuiltPrompt:
    """What one request sends (harness.workloads.prompts builds it), with the tokens it should count."""

    payload: Any  # list of chat messages | rendered text | list of token ids
    expected_tokens: int | None
    sha: str


class SendTimePrompt(Protocol):
    """A trace's question made only when sent (trace_prompts.BlockPrompt, LoggedPrompt): memory stays flat."""

    def render(self, api: str) -> BuiltPrompt: ...


Question = Prompt | SendTimePrompt


@dataclass(frozen=True, slots=True)  # slots: a multi-turn schedule holds every request for the run
class Request:
    """One turn: what to ask and how many tokens to generate; history is added at send time."""

    index: int  # nominal send order (0-based) over the whole schedule
    conversation: int
    turn: int
    position: int  # occurrence of this group/session prefix so far in send order (0 = first)
    question: Question
    question_tokens: int
    output_tokens: int
    group: int | None = None
    session: int | None = None
    arrival: float | None = None  # trace replay (timestamps: honor): due this long after the run start
    # session trace replay (bailian, timestamps: honor): a later turn is due this long after the previous
    # turn's answer was received (its recorded gap / speedup); it replaces the think time
    gap: float | None = None
    answer: str | None = None  # trace replay (history: recorded): the answer the file recorded
    priority: int | None = None  # SGLang's `priority` field, from the spec's `priorities:` class
    priority_class: str | None = None  # that class's name, carried into the records
    # agent sessions (harness.workloads.agent): the conversation's earlier requests (positions in its turns)
    # this one's context holds, in order (None: all of them), and the one whose answer is this question
    lineage: tuple[int, ...] | None = None
    tool_from: int | None = None


@dataclass
class Conversation:
    """A shared-prefix request (one turn) or a multi-turn session; turns go strictly in order."""

    id: int
    system: Prompt
    system_tokens: int
    turns: Sequence[Request] = field(default_factory=list)  # multi-turn: spilled_sessions.SpilledTurns
    group: int | None = None
    session: int | None = None


@dataclass
class Schedule:
    kind: str
    seed: int
    tokenizer: str  # word | server | path of a HF tokenizer
    conversations: Iterable[Conversation]  # re-iterable: a list, or made on each pass (shared-prefix, traces)
    history: str = "verbatim"  # multi-turn: verbatim | drop-reasoning
    ids: bool = False  # prompts are token ids (tokenizer: server)
    # trace replay: conversations is a lazy re-iterable (read from the file, in index order) of this many
    # requests, so a long trace is never held in memory; None: a list, counted
    total: int | None = None
    salt: str | None = None  # per-request: prompts unique from the first token (workloads.traffic)
    salt_words: tuple[str, ...] = ()  # a local tokenizer's one-token words the salt is made of

    def requests(self) -> Iterator[Request]:
        """Every request in nominal send order."""
        if self.total is not None:  # a trace's conversations already come in send order, turns in a row
            return (r for c in self.conversations for r in c.turns)
        in_order = getattr(self.conversations, "requests_in_order", None)
        if in_order is not None:  # a spilled multi-turn schedule reads them in index order
            return in_order()
        reqs = [r for c in self.conversations for r in c.turns]
        reqs.sort(key=lambda r: r.index)
        return iter(reqs)

    def __len__(self) -> int:
        if self.total is not None:
            return self.total
        counted = getattr(self.conversations, "request_count", None)
        if counted is not None:  # a spilled multi-turn schedule: sessions x turns
            return counted
        return sum(len(c.turns) for c in self.conversations)

    def head(self, n: int) -> Schedule:
        """The first n requests in send order (a session keeps its turns up to there), e.g. a warm-up.

        Reads only what it keeps, plus (a list of conversations) each conversation's next turn: a long
        schedule's warm-up head never builds, sorts or reads the rest of it."""
        head = getattr(self.conversations, "head", None)
        if head is not None:  # a spilled multi-turn schedule: its first n requests without reading the rest
            return dataclasses.replace(self, conversations=head(n), total=None)
        if self.total is not None:  # a trace or shared-prefix: conversations in send order, turns in a row
            convs = []
            left = n
            for c in self.conversations if left > 0 else ():
                turns = list(itertools.islice(c.turns, left))
                if turns:
                    convs.append(dataclasses.replace(c, turns=turns))
                    left -= len(turns)
                if left <= 0:
                    break  # the next conversation is never made
            return dataclasses.replace(self, conversations=convs, total=None)
        listed = list(self.conversations)
        # the conversations' turns merged by index: each conversation's next turn competes once the
        # previous one is taken (the order the run sends them in); count how many each one gives
        taken = [0] * len(listed)
        streams = [_tagged(c.turns, k) for k, c in enumerate(listed)]
        for _, k in itertools.islice(heapq.merge(*streams), n):
            taken[k] += 1
        convs = [
            dataclasses.replace(c, turns=list(itertools.islice(c.turns, m)))
            for c, m in zip(listed, taken, strict=True)
            if m
        ]
        return dataclasses.replace(self, conversations=convs, total=None)


def _tagged(turns: Iterable[Request], k: int) -> Iterator[tuple[int, int]]:
    """(index, k) of each turn, read one at a time."""
    return ((r.index, k) for r in turns)
