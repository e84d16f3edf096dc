"""A closed-loop multi-turn run fed in index order (issue 29): few sessions in RAM, every record kept."""

from __future__ import annotations

import pytest

from harness.capture import read_jsonl
from harness.loadgen.history_spill import HistorySpill
from harness.loadgen.turn_feed import BUSY, TurnFeed
from harness.spec import parse_spec
from harness.spec.load import LoadSettings
from harness.workloads import build_schedule
from harness.workloads.prompts import Turnout
from harness.workloads.schedule import Schedule
from harness.workloads.spilled_sessions import PromptStore, SpilledSessions
from tests.helpers.loadrun import run_sync as _run


def test_a_history_chain_reads_back_as_it_was_saved() -> None:
    spill = HistorySpill()
    long_answer = "w " * 3000  # past the first read
    turns = [
        (("sys prompt", 2), "q0 text", 2, Turnout("a0", None, 1)),
        (None, (5, 1 << 40), 2, Turnout(long_answer, (1, 2, 3), None)),
        (None, "", 0, Turnout("", (), 0)),
    ]
    other = spill.save(-1, ("other", 1), "x", 1, Turnout("y", None, 1))  # another session in between
    head = -1
    for system, q, n, out in turns:
        head = spill.save(head, system, q, n, out)
    system, questions, history = spill.load(head)
    assert system == ("sys prompt", 2)
    assert questions == [("q0 text", 2), ((5, 1 << 40), 2), ("", 0)]
    got = [(o.answer, o.answer_ids or (), o.completion_tokens) for o in history]  # as Answers gives them
    assert got == [(t[3].answer, t[3].answer_ids or (), t[3].completion_tokens) for t in turns]
    assert spill.load(other)[0] == ("other", 1)
    spill.close()


def _schedule(sessions: int, turns: int):
    wl = {
        "kind": "multi-turn",
        "sessions": sessions,
        "turns": turns,
        "system_prompt_tokens": 6,
        "question_tokens": 3,
        "answer_tokens": 3,
    }
    return build_schedule(parse_spec({"name": "t", "model": "m", "workload": wl}), None, 0)


@pytest.mark.slow
def test_sessions_in_ram_stay_near_the_window_and_turns_resend_their_history(
    fake_server_factory, tmp_path, monkeypatch
):
    srv = fake_server_factory("--ttft-ms", "1", "--itl-ms", "1", "--record-prompts")
    busy: list[int] = []
    parks: list[int] = []
    real_next, real_park = TurnFeed.next, TurnFeed.park

    def spy_next(self):
        busy.append(self.state.count(BUSY))
        return real_next(self)

    def spy_park(self, sess):
        parks.append(sess.conv.id)
        return real_park(self, sess)

    monkeypatch.setattr(TurnFeed, "next", spy_next)
    monkeypatch.setattr(TurnFeed, "park", spy_park)
    sch = _schedule(sessions=300, turns=3)
    res = _run(sch, srv.url, tmp_path / "r.jsonl", concurrency=4)
    rows, bad = read_jsonl(tmp_path / "r.jsonl")
    assert bad == 0 and res.ok == 900 and len(rows) == 900
    assert max(busy) <= 64 + 4  # the feed window and the requests in flight, not 300 sessions
    assert len(parks) >= 300  # each session went to the spill between its turns
    prompts = srv.stats()["prompts"]
    by_turn = {(r["session"], r["turn"]): r for r in rows}
    for s in (0, 151, 299):  # the last turn's prompt holds the earlier questions and answers
        last = [p for p in prompts if by_turn[(s, 2)]["prompt_sha"] and by_turn[(s, 1)]["answer"] in p]
        assert last, f"session {s}: answer of turn 1 never resent"
        q0 = sch.conversations[s].turns[0].question
        assert any(
            q0 in p and by_turn[(s, 0)]["answer"] in p and by_turn[(s, 1)]["answer"] in p for p in prompts
        )
    assert all(r["expected_prompt_tokens"] == r["prompt_tokens"] for r in rows)


@pytest.mark.slow
def test_duration_records_the_turns_of_sessions_waiting_in_the_spill(fake_server_factory, tmp_path):
    srv = fake_server_factory("--ttft-ms", "5", "--itl-ms", "5")
    res = _run(
        _schedule(sessions=20, turns=10), srv.url, tmp_path / "r.jsonl", 2, load=LoadSettings(duration_s=1.0)
    )
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert res.time_limited and len(rows) == 200 and sorted(r["index"] for r in rows) == list(range(200))
    sent = [r for r in rows if not r["not_sent"]]
    assert 20 < len(sent) < 200 and all(r["ok"] for r in sent)  # past the first row: sessions were spilled
    for s in range(20):  # each session: the turns sent, then the rest not sent
        kinds = [
            r["not_sent"] for r in sorted((r for r in rows if r["session"] == s), key=lambda r: r["turn"])
        ]
        assert kinds == sorted(kinds, key=lambda k: k is not None) and set(kinds) <= {None, "time-limit"}
    assert res.ok == len(sent) and res.not_sent == 200 - len(sent)


@pytest.mark.slow
def test_a_failed_turn_skips_the_rest_of_its_session_and_no_other(fake_server_factory, tmp_path):
    srv = fake_server_factory("--itl-ms", "1")
    S, T = 80, 3
    store = PromptStore(ids=False)
    for s in range(S):
        store.add(f"system of session {s}", 4)
    for k in range(S * T):
        store.add("second FAULT_500 question" if k == S + 5 else f"question {k}", 3)  # turn 1 of session 5
    sch = Schedule(kind="multi-turn", seed=0, tokenizer="word", conversations=SpilledSessions(S, T, 3, store))
    res = _run(sch, srv.url, tmp_path / "r.jsonl", concurrency=2)
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert sorted(r["index"] for r in rows) == list(range(S * T))
    five = sorted((r for r in rows if r["session"] == 5), key=lambda r: r["turn"])
    assert five[0]["ok"] and five[1]["error_kind"] == "http" and five[2]["not_sent"] == "skipped"
    assert all(r["ok"] for r in rows if r["session"] != 5)
    assert (res.ok, res.failed, res.skipped) == (S * T - 2, 1, 1) and srv.stats()["requests"] == S * T - 1
