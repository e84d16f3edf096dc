"""The stall watchdog against an independent server (tests/helpers/fakeserver.py, not the sim): requests
that hang end the run after timeouts.stall seconds, recorded as stalled, while finished ones stay ok."""

from __future__ import annotations

import time

import pytest

from harness.capture import read_jsonl
from harness.spec import Timeouts
from harness.workloads.schedule import Conversation, Request, Schedule
from tests.helpers.loadrun import run_sync as run


def _schedule(markers: list[str | None]) -> Schedule:
    convs = []
    for i, m in enumerate(markers):
        q = f"question {i}" + (f" {m}" if m else "")
        req = Request(index=i, conversation=i, turn=0, position=0, question=q, question_tokens=len(q.split()),
                      output_tokens=4, group=i)  # fmt: skip
        convs.append(Conversation(id=i, system=f"system {i}", system_tokens=2, turns=[req], group=i))
    return Schedule(kind="shared-prefix", seed=0, tokenizer="word", conversations=convs)


@pytest.mark.slow
def test_hanging_requests_stall_the_run_within_a_tick_of_the_threshold(fake_server_factory, tmp_path):
    srv = fake_server_factory("--itl-ms", "2")
    t0 = time.monotonic()
    res = run(_schedule([None, "FAULT_HANG", None, "FAULT_HANG"] + [None] * 4), srv.url, tmp_path / "r.jsonl",
              concurrency=2, timeouts=Timeouts(first_token=300, total=600, stall=1.0))  # fmt: skip
    took = time.monotonic() - t0
    assert res.stall is not None and 1.0 <= res.stall.detected_mono - res.stall.since_mono < 1.3
    assert res.stall.in_flight == 2 and took < 3.0, (res.stall, took)
    rows, bad = read_jsonl(tmp_path / "r.jsonl")
    kinds = {r["index"]: r["error_kind"] for r in rows}
    assert kinds[1] == kinds[3] == "stalled" and kinds[0] is None and kinds[2] is None, kinds


@pytest.mark.slow
def test_one_hanging_request_among_flowing_ones_is_not_a_stall(fake_server_factory, tmp_path):
    srv = fake_server_factory("--itl-ms", "50")
    res = run(_schedule(["FAULT_HANG"] + [None] * 12), srv.url, tmp_path / "r.jsonl", concurrency=2,
              timeouts=Timeouts(first_token=2.0, total=600, stall=0.5))  # fmt: skip
    assert res.stall is None and res.ok == 12 and dict(res.errors) == {"timeout-first-token": 1}
