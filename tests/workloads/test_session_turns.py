"""A session's answers packed (issue 29): each read back exactly as it was given."""

from __future__ import annotations

import pytest

from harness.workloads.prompts import Turnout
from harness.workloads.session_turns import Answers


def test_answers_keep_text_ids_and_missing_counts() -> None:
    given = [
        Turnout("first answer", (1, 2), 2),
        Turnout("", None, None),
        Turnout("<think>x</think> ok", (3,), 5),
    ]
    answers = Answers()
    for out in given:
        answers.append(out)
    got = list(answers)
    assert len(answers) == 3
    assert [o.answer for o in got] == [o.answer for o in given]
    assert [o.completion_tokens for o in got] == [2, None, 5]
    assert [o.answer_ids or () for o in got] == [(1, 2), (), (3,)]


def test_answers_without_ids_read_back_none() -> None:
    answers = Answers()
    answers.append(Turnout("a", None, 1))
    assert [o.answer_ids for o in answers] == [None]


def test_answers_read_back_by_index_as_an_agent_lineage_reads_them() -> None:
    packed = Answers()
    outs = [Turnout("one two", (5, 6), 2), Turnout("three", (8,), None), Turnout("", (7,), 1)]
    for o in outs:
        packed.append(o)
    assert [packed[i] for i in range(3)] == outs and packed[-1] == outs[-1] and packed[1:] == outs[1:]
    with pytest.raises(IndexError):
        packed[3]
