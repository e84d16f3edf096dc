"""Traffic settings any workload takes: request classes (`priorities:`) and the zero-reuse salt.

A class is drawn per unit of reuse (a session, a shared-prefix group, a trace's session), by a generator
seeded with the run's seed and the unit, so every turn of a session carries the same `priority` and a
re-run draws the same classes. The salt puts a token made of (seed, request index) in front of the
whole prompt the server tokenizes, so no two requests of a run share even their first token.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

from harness.spec.traffic import PriorityClass
from harness.workloads.schedule import BuiltPrompt, Conversation, Schedule
from harness.workloads.tokenizers import ID_BASE, ID_SPAN, PromptMaker, safe_words


def draw_class(classes: Sequence[PriorityClass], seed: int, unit: int) -> PriorityClass:
    """The class of one session or group: a seeded draw weighted by share."""
    u = random.Random(f"priority:{seed}:{unit}").random() * sum(c.share for c in classes)
    for c in classes:
        u -= c.share
        if u < 0:
            return c
    return classes[-1]


def unit_of(conv: Conversation) -> int:
    """What shares a prefix: the session, else the group, else the conversation itself."""
    if conv.session is not None:
        return conv.session
    if conv.group is not None:
        return conv.group
    return conv.id


def classed(conv: Conversation, classes: Sequence[PriorityClass], seed: int) -> Conversation:
    """The conversation with its class on every turn."""
    c = draw_class(classes, seed, unit_of(conv))
    turns = [dataclasses.replace(r, priority=c.value, priority_class=c.name) for r in conv.turns]
    return dataclasses.replace(conv, turns=turns)


class _Classed:
    """A lazy schedule's conversations, classed as they are made (memory stays flat)."""

    def __init__(self, convs: Any, classes: Sequence[PriorityClass], seed: int) -> None:
        self.convs, self.classes, self.seed = convs, classes, seed

    def __iter__(self) -> Iterator[Conversation]:
        return (classed(c, self.classes, self.seed) for c in self.convs)

    def __len__(self) -> int:
        return len(self.convs)


def apply_traffic(
    schedule: Schedule,
    classes: Sequence[PriorityClass],
    salt: str | None,
    seed: int,
    maker: PromptMaker | None = None,
) -> Schedule:
    """The schedule with its requests classed and its prompts salted, as the spec asks."""
    if classes:
        convs: Any = schedule.conversations
        if isinstance(convs, list):
            convs = [classed(c, classes, seed) for c in convs]
        elif hasattr(convs, "with_classes"):  # a spilled multi-turn schedule: classed as requests are made
            convs = convs.with_classes(classes, seed)
        else:
            convs = _Classed(convs, classes, seed)
        schedule = dataclasses.replace(schedule, conversations=convs)
    if salt:
        words: tuple[str, ...] = ()
        if maker is not None and maker.hf is not None:  # subwords: "salt0r1" and "salt0r2" share 4 tokens
            words = tuple(maker.hf.decode([i]) for i in safe_words(maker.hf))
        schedule = dataclasses.replace(schedule, salt=salt, salt_words=words)
    return schedule


def salted(built: BuiltPrompt, seed: int, index: int, word: bool, words: Sequence[str] = ()) -> BuiltPrompt:
    """The prompt with a token unique to (seed, request) in front: one out-of-vocabulary word for text
    (the word tokenizer gives it its own id), two ids for token ids (the first differs between any two
    of the first ID_SPAN requests, the pair between any two of a run). word: text is counted in words.
    words: a local tokenizer's one-token words (` apple`), two of them in front, so the first token
    differs between any two of the first len(words) requests (the count is then unknown)."""
    p = built.payload
    n = built.expected_tokens
    if not word and not (isinstance(p, list) and p and isinstance(p[0], int)):
        n = None
    if isinstance(p, str) and words:
        k = len(words)
        payload: Any = f"{words[index % k]}{words[(index // k + seed * 7919) % k]} {p}"
        n = None
        sha = hashlib.sha1(payload.encode()).hexdigest()
    elif isinstance(p, str):
        payload = f"salt{seed}r{index} {p}"
        n = None if n is None else n + 1
        sha = hashlib.sha1(payload.encode()).hexdigest()
    elif isinstance(p, list) and p and isinstance(p[0], dict):  # chat messages: the first one's content
        first = dict(p[0])
        first["content"] = f"salt{seed}r{index} {first.get('content', '')}"
        payload = [first, *p[1:]]
        n = None if n is None else n + 1
        sha = hashlib.sha1(repr(payload).encode()).hexdigest()
    else:
        head = [ID_BASE + index % ID_SPAN, ID_BASE + (index // ID_SPAN + seed * 7919) % ID_SPAN]
        payload = head + list(p)
        n = None if n is None else n + 2
        sha = hashlib.sha1(array("q", payload).tobytes()).hexdigest()
    return BuiltPrompt(payload, n, sha)
