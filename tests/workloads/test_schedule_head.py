"""Schedule.head (a warm-up's requests): the first n in send order, read without the rest of the schedule."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from harness.spec import load_spec, parse_spec
from harness.workloads import build_schedule
from harness.workloads.schedule import Conversation, Request, Schedule
from tests.helpers import specs

SIZES = (0, 1, 5, 17, 40, 1000)


def reference_head(s: Schedule, n: int) -> list[tuple[int, list[int]]]:
    """(conversation id, kept indices) by brute force: every request sorted, the n smallest indices kept."""
    convs = list(s.conversations)
    keep = set(sorted(r.index for c in convs for r in c.turns)[:n])
    out = [(c.id, [r.index for r in c.turns if r.index in keep]) for c in convs]
    return [x for x in out if x[1]]


def shape(s: Schedule) -> list[tuple[int, list[int]]]:
    return [(c.id, [r.index for r in c.turns]) for c in s.conversations]


def built(wl: dict) -> Schedule:
    return build_schedule(parse_spec(specs.spec("h", wl), "h.yaml"), None, 0)


MULTI = {
    "kind": "multi-turn",
    "sessions": 6,
    "turns": 4,
    "system_prompt_tokens": 8,
    "question_tokens": 4,
    "answer_tokens": 3,
}
SHARED = {
    "kind": "shared-prefix",
    "groups": 5,
    "prompts_per_group": 4,
    "system_prompt_tokens": 8,
    "question_tokens": 4,
    "output_tokens": 3,
    "shuffle": True,
}
AGENT = {
    "kind": "agent",
    "sessions": 3,
    "steps": 4,
    "system_prompt_tokens": 10,
    "task_tokens": 5,
    "tool_result_tokens": 5,
    "answer_tokens": 4,
    "subagents": {"at_steps": [1], "steps": 2, "task_tokens": 4, "summary_tokens": 4},
}


@pytest.mark.parametrize("wl", [MULTI, SHARED, AGENT], ids=["multi-turn", "shared-prefix", "agent"])
def test_head_keeps_the_first_n_requests_in_send_order(wl: dict) -> None:
    s = built(wl)
    for n in SIZES:
        h = s.head(n)
        assert shape(h) == reference_head(s, n), n
        assert len(h) == min(n, len(s)) and h.total is None
        # the kept requests are the schedule's own, field for field
        own = {r.index: r for c in s.conversations for r in c.turns}
        assert all(r == own[r.index] for c in h.conversations for r in c.turns)


def test_head_of_a_trace_equals_the_brute_force_one(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    lines = [
        {"timestamp": i, "input_length": 600, "output_length": 2, "hash_ids": [i % 3, i]} for i in range(30)
    ]
    trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
    wl = {"kind": "trace", "path": str(trace), "format": "mooncake", "block_tokens": 8}
    s = build_schedule(load_spec(specs.write_spec(tmp_path, "tr", wl)), None, 0)
    assert s.total == 30
    for n in (0, 1, 7, 30, 31):
        assert shape(s.head(n)) == reference_head(s, n)


class Refuses(Sequence[Request]):
    """A conversation's turns that fail the test when a turn past `allowed` is read."""

    def __init__(self, turns: list[Request], allowed: int, reads: list[int]) -> None:
        self.turns, self.allowed, self.reads = turns, allowed, reads

    def __len__(self) -> int:
        return len(self.turns)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        got = self.turns[i]
        for r in got if isinstance(i, slice) else [got]:
            assert r.turn <= self.allowed, f"read turn {r.turn} of conversation {r.conversation}"
            self.reads.append(r.index)
        return got


def test_head_of_a_list_reads_at_most_one_turn_past_the_cut_per_conversation() -> None:
    """A round-robin multi-turn schedule (S sessions x T turns, index = t x S + s): the head of n reads each
    session's kept turns and at most its next one, never a later turn, and sorts nothing."""
    s = built(MULTI)
    S = MULTI["sessions"]
    for n in (0, 3, S, S + 2, 2 * S + 5):
        reads: list[int] = []
        convs = []
        for c in s.conversations:
            kept = len([t for t in range(MULTI["turns"]) if t * S + c.id < n])
            convs.append(dataclasses.replace(c, turns=Refuses(list(c.turns), kept, reads)))
        h = dataclasses.replace(s, conversations=convs).head(n)
        assert shape(h) == reference_head(s, n)
        assert len(set(reads)) <= n + S


class Feed:
    """A lazy schedule's conversations, one request each, that fail the test when one past `stop` is made."""

    def __init__(self, stop: int) -> None:
        self.stop = stop

    def __iter__(self) -> Iterator[Conversation]:
        for i in range(10**9):
            assert i < self.stop, f"conversation {i} made: head read past what it keeps"
            req = Request(
                index=i, conversation=i, turn=0, position=0, question="q", question_tokens=1, output_tokens=1
            )
            yield Conversation(id=i, system="", system_tokens=0, turns=[req])


def test_head_of_a_lazy_schedule_makes_no_conversation_past_n() -> None:
    for n in (0, 1, 9):
        s = Schedule(kind="trace", seed=0, tokenizer="word", conversations=Feed(n), total=10**9)
        h = s.head(n)
        assert [c.id for c in h.conversations] == list(range(n)) and len(h) == n
