"""A session's turns and answers packed (issue 29): each read back exactly as it was given."""

from __future__ import annotations

import pickle

import pytest

from harness.workloads.prompts import Turnout
from harness.workloads.schedule import Request
from harness.workloads.session_turns import Answers, SessionTurns


def test_turns_read_back_as_the_requests_they_stand_for() -> None:
    turns = SessionTurns(session=2, sessions=5, output_tokens=7)
    questions = [("alpha beta", 2), ("", 0), ("é γ 中", 3)]
    for q, n in questions:
        turns.append(q, n)
    want = [Request(t * 5 + 2, 2, t, t, q, n, 7, session=2) for t, (q, n) in enumerate(questions)]
    assert list(turns) == want and len(turns) == 3
    assert turns[2] == want[2] and turns[-1] == want[2] and turns[1:] == want[1:]
    assert pickle.loads(pickle.dumps(turns))[0] == want[0]  # split runs hand schedules to workers
    with pytest.raises(IndexError):
        turns[3]


def test_token_id_turns_come_back_as_tuples() -> None:
    turns = SessionTurns(0, 1, 4)
    turns.append((5, 1 << 40, 0), 3)
    turns.append((9,), 1)
    assert [r.question for r in turns] == [(5, 1 << 40, 0), (9,)]


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
