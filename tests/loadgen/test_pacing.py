"""Pacing and honesty of the load generator against a real server (tests/helpers/fakeserver.py, 127.0.0.1):
multi-turn due times with a rate and think time, skipped turns after a failure, arrival processes,
duration_s, and the client's lateness on every record."""

from __future__ import annotations

import statistics

import pytest

from harness.capture import read_jsonl
from harness.spec import parse_spec
from harness.spec.load import LoadSettings, ThinkTime
from harness.workloads import build_schedule
from harness.workloads.arrivals import arrival_offsets
from harness.workloads.schedule import Conversation, Request, Schedule
from tests.helpers.loadrun import run_sync as run

pytestmark = pytest.mark.slow


def multi_turn(sessions=3, turns=4):
    wl = {
        "kind": "multi-turn",
        "sessions": sessions,
        "turns": turns,
        "system_prompt_tokens": 10,
        "question_tokens": 3,
        "answer_tokens": 3,
    }
    return build_schedule(parse_spec({"name": "t", "model": "m", "workload": wl}), None, 0)


def test_later_turns_are_due_when_the_previous_answer_ended_plus_think_time(fake_server_factory, tmp_path):
    """With a rate, a later turn's TTFT counts from (previous answer end + think time), not from an
    arrival slot claimed long before: it then equals TTFT from send plus the client's own lateness."""
    srv = fake_server_factory("--ttft-ms", "40", "--itl-ms", "2")
    think = ThinkTime(mean_s=0.03)
    res = run(
        multi_turn(),
        srv.url,
        tmp_path / "r.jsonl",
        concurrency=2,
        request_rate=200.0,
        load=LoadSettings(think_time=think),
    )
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert res.ok == 12 and len(rows) == 12
    by = {(r["session"], r["turn"]): r for r in rows}
    for (sess, turn), r in by.items():
        assert r["late_s"] == pytest.approx(r["sent_mono"] - r["scheduled_mono"])
        assert r["ttft_s"] == pytest.approx(r["ttft_sent_s"] + r["late_s"])
        if turn == 0:
            continue
        prev = by[(sess, turn - 1)]
        assert r["think_s"] == 0.03
        assert r["scheduled_mono"] == pytest.approx(prev["done_mono"] + 0.03, abs=1e-9)
        assert r["sent_mono"] >= prev["done_mono"] + 0.03
    later = [r for r in rows if r["turn"] > 0]
    # TTFT from the due time stays near TTFT from send (40 ms); the old arrival slot put 100s of ms here
    assert statistics.median(r["ttft_s"] - r["ttft_sent_s"] for r in later) < 0.02


def test_sessions_start_by_the_arrival_process(fake_server_factory, tmp_path):
    srv = fake_server_factory("--itl-ms", "1")
    s = multi_turn(sessions=5, turns=2)
    res = run(
        s,
        srv.url,
        tmp_path / "r.jsonl",
        concurrency=8,
        request_rate=20.0,
        load=LoadSettings(arrival="constant"),
    )
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert res.ok == 10
    firsts = sorted(r["scheduled_mono"] - res.start_mono for r in rows if r["turn"] == 0)
    assert firsts == pytest.approx([k / 20.0 for k in range(5)], abs=1e-6)


def _session_schedule(questions: list[str]) -> Schedule:
    turns = [
        Request(
            index=i,
            conversation=0,
            turn=i,
            position=i,
            question=q,
            question_tokens=len(q.split()),
            output_tokens=4,
            session=0,
        )
        for i, q in enumerate(questions)
    ]
    conv = Conversation(id=0, system="system words here", system_tokens=3, turns=turns, session=0)
    return Schedule(kind="multi-turn", seed=0, tokenizer="word", conversations=[conv])


def test_after_a_failed_turn_the_rest_of_the_session_is_skipped_not_sent(fake_server_factory, tmp_path):
    srv = fake_server_factory("--itl-ms", "1")
    s = _session_schedule(
        ["first question", "second FAULT_500 question", "third question", "fourth question"]
    )
    res = run(s, srv.url, tmp_path / "r.jsonl", concurrency=1)
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert [r["turn"] for r in rows] == [0, 1, 2, 3]
    assert rows[0]["ok"] and rows[1]["error_kind"] == "http"
    for r in rows[2:]:
        assert (
            r["not_sent"] == "skipped" and not r["ok"] and r["sent_mono"] is None and r["error_kind"] is None
        )
        assert "turn 1 of this session failed (http)" in r["error"]
    assert srv.stats()["requests"] == 2  # the server never saw the turns after the failure
    assert (res.ok, res.failed, res.skipped, res.not_sent) == (1, 1, 2, 0)
    assert res.ok + res.failed + res.skipped == res.scheduled == 4


def test_arrival_processes_are_seeded_and_have_the_asked_mean():
    n, rate = 4000, 50.0
    for process, burst in (("poisson", 1.0), ("gamma", 0.25), ("gamma", 4.0), ("constant", 1.0)):
        offs = arrival_offsets(n, rate, 3, process, burst)
        assert offs == arrival_offsets(n, rate, 3, process, burst) and offs[0] == 0.0
        gaps = [b - a for a, b in zip(offs, offs[1:], strict=False)]
        assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.1)
        cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
        want = 0.0 if process == "constant" else burst**-0.5  # gamma: CV = 1 / sqrt(shape)
        assert cv == pytest.approx(want, abs=0.1), (process, burst, cv)
    assert arrival_offsets(50, rate, 3, "gamma", 0.5) != arrival_offsets(50, rate, 4, "gamma", 0.5)
    assert arrival_offsets(50, rate, 3) == arrival_offsets(50, rate, 3, "poisson")  # default unchanged


def test_duration_stops_sending_and_records_the_rest_as_not_sent(fake_server_factory, tmp_path):
    srv = fake_server_factory("--ttft-ms", "20", "--itl-ms", "20")
    wl = {
        "kind": "shared-prefix",
        "groups": 10,
        "prompts_per_group": 4,
        "system_prompt_tokens": 8,
        "question_tokens": 2,
        "output_tokens": 4,
    }
    s = build_schedule(parse_spec({"name": "t", "model": "m", "workload": wl}), None, 0)
    res = run(s, srv.url, tmp_path / "r.jsonl", concurrency=2, load=LoadSettings(duration_s=0.5))
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    sent = [r for r in rows if not r["not_sent"]]
    unsent = [r for r in rows if r["not_sent"]]
    assert res.time_limited and len(rows) == 40 and 2 <= len(sent) < 40
    assert all(r["ok"] for r in sent)  # in flight at the limit: finished, not cut
    assert all(r["not_sent"] == "time-limit" and r["error_kind"] is None for r in unsent)
    assert res.ok == len(sent) and res.not_sent == len(unsent) and res.failed == 0
    assert max(r["sent_mono"] for r in sent) - res.start_mono <= 0.5 + 0.05
    assert srv.stats()["requests"] == len(sent)


def test_a_trace_with_timestamps_is_sent_at_its_own_times(fake_server_factory, tmp_path):
    """timestamps: honor -> Request.arrival: each request due that long after the start (a later turn
    also not before its previous turn ended); TTFT counts from there."""
    srv = fake_server_factory("--ttft-ms", "30", "--itl-ms", "1")
    convs = []
    for i, at in enumerate((0.0, 0.05, 0.3)):
        req = Request(
            index=i,
            conversation=i,
            turn=0,
            position=0,
            question=f"q {i}",
            question_tokens=2,
            output_tokens=4,
            arrival=at,
        )
        convs.append(Conversation(id=i, system=f"system {i}", system_tokens=2, turns=[req], group=i))
    two = [
        Request(
            index=3 + t,
            conversation=3,
            turn=t,
            position=t,
            question=f"turn {t}",
            question_tokens=2,
            output_tokens=4,
            session=0,
            arrival=at,
        )
        for t, at in enumerate((0.1, 0.12))  # the second is due before the first can have finished
    ]
    convs.append(Conversation(id=3, system="session system", system_tokens=2, turns=two, session=0))
    res = run(
        Schedule(kind="trace", seed=0, tokenizer="word", conversations=convs),
        srv.url,
        tmp_path / "r.jsonl",
        concurrency=4,
    )
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    by = {r["index"]: r for r in rows}
    assert res.ok == 5
    for i, at in ((0, 0.0), (1, 0.05), (2, 0.3), (3, 0.1)):
        assert by[i]["scheduled_mono"] - res.start_mono == pytest.approx(at, abs=1e-6)
        assert by[i]["sent_mono"] >= by[i]["scheduled_mono"]
    assert by[4]["scheduled_mono"] == pytest.approx(by[3]["done_mono"])  # its own time had passed


def test_a_wait_for_the_cap_is_not_the_clients_lateness(fake_server_factory, tmp_path):
    """Arrivals faster than one slot serves: they wait for the cap (slot_wait_s, part of late_s and of
    TTFT), which is not the client being late; the summary's client_late_s leaves it out."""
    from harness.summarize.figures import request_figures

    srv = fake_server_factory("--ttft-ms", "40", "--itl-ms", "1")
    wl = {
        "kind": "shared-prefix",
        "groups": 4,
        "prompts_per_group": 3,
        "system_prompt_tokens": 8,
        "question_tokens": 2,
        "output_tokens": 4,
    }
    s = build_schedule(parse_spec({"name": "t", "model": "m", "workload": wl}), None, 0)
    res = run(s, srv.url, tmp_path / "r.jsonl", concurrency=1, request_rate=100.0)
    rows, _ = read_jsonl(tmp_path / "r.jsonl")
    assert res.ok == 12
    waited = [r for r in rows if r["slot_wait_s"] > 0]
    assert len(waited) >= 8  # 100/s against ~45 ms per request through one slot
    for r in rows:
        assert 0 <= r["slot_wait_s"] <= r["late_s"]
    fig = request_figures(rows)
    assert fig["slot_wait_s"]["p99"] > 0.1 and fig["client_late_s"]["p50"] < 0.02


def test_validate_flags_client_late_only_above_its_bound():
    from harness.verdicts import client_late

    def point(p99_s, ttft_p50_s):
        return {
            "experiment": "e",
            "server": "s",
            "median": {"latency": {"ttft_s": {"p50": ttft_p50_s}}},
            "seeds": {"0": {"figures": {"client_late_s": {"p50": p99_s / 4, "p99": p99_s}}}},
        }

    assert client_late(point(0.004, 0.05)) is None  # under the 5 ms floor
    assert "client-late" in client_late(point(0.006, 0.05))  # over 5 ms = max(5 ms, 2.5 ms)
    assert client_late(point(0.04, 1.0)) is None  # 5 % of a 1 s median TTFT is 50 ms
    assert "client-late" in client_late(point(0.06, 1.0))
