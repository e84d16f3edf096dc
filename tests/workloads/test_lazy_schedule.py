"""Shared-prefix schedules produced lazily: the same requests from any slice, nothing built up front."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from harness.spec import parse_spec
from harness.workloads import build_schedule, load_prompt_maker
from harness.workloads.lazy import Permutation, group_counts
from tests.helpers import specs
from tests.helpers.prompt_digest import bodies_digest

LOGNORMAL = {"distribution": "lognormal", "mean": 8, "sigma": 0.5}


def _spec(groups: int, per_group: int, shuffle: bool = True):
    wl = {
        "kind": "shared-prefix",
        "groups": groups,
        "prompts_per_group": per_group,
        "system_prompt_tokens": 12,
        "question_tokens": 5,
        "output_tokens": 3,
        "shuffle": shuffle,
    }
    return parse_spec({"name": "t", "model": "m", "api": "openai-chat", "workload": wl})


def test_permutation_is_a_seeded_bijection():
    for n in (1, 2, 3, 17, 1000, 4097):
        p = Permutation(n, 11)
        assert sorted(p[i] for i in range(n)) == list(range(n))
    a, b = Permutation(1000, 1), Permutation(1000, 2)
    assert [a[i] for i in range(50)] != [b[i] for i in range(50)]
    assert [a[i] for i in range(1000)] != list(range(1000))  # shuffled


def test_lazy_shared_prefix_is_deterministic_complete_and_counts_positions():
    s = build_schedule(_spec(7, 5), None, 3)
    assert len(s) == 35 and s.total == 35
    convs = list(s.conversations)
    again = list(build_schedule(_spec(7, 5), None, 3).conversations)
    assert [(c.system, c.turns[0].question) for c in convs] == [
        (c.system, c.turns[0].question) for c in again
    ]
    assert [c.turns[0].index for c in convs] == list(range(35))
    assert sorted((c.group, c.turns[0].position) for c in convs) == [
        (g, p) for g in range(7) for p in range(5)
    ]
    seen: dict[int, int] = {}
    for c in convs:  # positions count a group's occurrences in send order
        assert c.turns[0].position == seen.get(c.group, 0)
        seen[c.group] = seen.get(c.group, 0) + 1
    assert len({c.system for c in convs}) == 7 and len({c.turns[0].question for c in convs}) == 35
    other_seed = list(build_schedule(_spec(7, 5), None, 4).conversations)
    assert {c.system for c in convs}.isdisjoint({c.system for c in other_seed})
    # any slice is the same requests as the full pass (what a worker process of a split run produces)
    part = list(s.conversations.slice(10, 20))
    assert [(c.turns[0].index, c.turns[0].position, c.turns[0].question) for c in part] == [
        (c.turns[0].index, c.turns[0].position, c.turns[0].question) for c in convs[10:20]
    ]
    assert [
        (c.group, c.turns[0].position) for c in build_schedule(_spec(3, 2, False), None, 0).conversations
    ] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]


def test_a_million_request_schedule_is_not_built_up_front():
    maker = load_prompt_maker("word")
    made = [0]
    real = maker.make

    def counting(*a, **k):
        made[0] += 1
        return real(*a, **k)

    maker.make = counting  # type: ignore[method-assign]
    s = build_schedule(_spec(1_000_000, 1), None, 0, maker)
    assert len(s) == 1_000_000 and made[0] == 0  # nothing per request exists yet
    first = list(itertools.islice(s.conversations, 3))
    assert len(first) == 3 and made[0] == 6  # a system prompt and a question for each of the three


def test_a_workers_part_makes_only_its_own_prompts_and_keeps_every_index():
    for per_group in (1, 3):
        s = build_schedule(_spec(8, per_group), None, 1)
        full = list(s.conversations)
        part = list(s.conversations.for_part(1, 3))
        assert [(c.id, c.group, c.turns[0].position) for c in part] == [
            (c.id, c.group, c.turns[0].position) for c in full
        ]
        for a, b in zip(full, part, strict=True):
            if a.group % 3 == 1:  # its own: the very same prompts
                assert (a.system, a.turns[0].question) == (b.system, b.turns[0].question)
            else:  # another worker's: a stub, no prompt made
                assert b.system == "" and b.turns[0].question == ""


@pytest.mark.parametrize(
    ("workload", "api", "tokenizer", "digest"),
    [
        (  # the side-by-side benchmark's shape, with more groups than the system-prompt cache once held
            specs.shared_prefix(
                groups=300,
                prompts_per_group=16,
                system_prompt_tokens=32,
                question_tokens=27,
                output_tokens=16,
            ),
            "openai-chat",
            "word",
            "663a2a21ed702348b8b468a411223dd17fffcb3a",
        ),
        (
            specs.shared_prefix(groups=40, prompts_per_group=1, system_prompt_tokens=16, question_tokens=8),
            "openai-completions",
            "word",
            "55770163739ba91107042c8bf7deeb5d2b7a3104",
        ),
        (  # no system prompt: the seed tags lead each question
            specs.shared_prefix(
                groups=6, prompts_per_group=5, system_prompt_tokens=0, question_tokens=LOGNORMAL
            ),
            "openai-chat",
            "word",
            "7b5d0b33154f5036e0066298db3c0cb54ae34d4e",
        ),
        (
            specs.shared_prefix(
                groups=10, prompts_per_group=4, system_prompt_tokens=12, question_tokens=6, shuffle=False
            ),
            "sglang-generate",
            "server",
            "7112aa09a35e4bb36da5b6b88b20b894a4d94629",
        ),
    ],
    ids=["bench-shape", "one-per-group", "no-system", "ids-in-order"],
)
def test_shared_prefix_bodies_unchanged(
    tmp_path: Path, workload: dict[str, Any], api: str, tokenizer: str, digest: str
) -> None:
    """Every request body of these schedules, pinned before issue 29's CPU work on prompt making."""
    assert bodies_digest(tmp_path, workload, api, tokenizer=tokenizer) == digest


def test_positions_count_past_a_byte_and_the_counts_take_a_byte_a_group():
    """A group's positions run 0..P-1 in send order whatever P (the per-group counts widen past 255), and
    the counts kept while iterating are one byte a group when P fits in a byte."""
    for per_group in (2, 300):
        s = build_schedule(_spec(2, per_group), None, 0)
        seen = {0: [], 1: []}
        for c in s.conversations:
            seen[c.group].append(c.turns[0].position)
        assert seen == {0: list(range(per_group)), 1: list(range(per_group))}
    assert len(group_counts(62_500, 16).tobytes()) == 62_500
    assert group_counts(3, 300).itemsize == 2 and group_counts(3, 70_000).itemsize == 4
