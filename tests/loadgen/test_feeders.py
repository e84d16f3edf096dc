"""Each schedule and load gets the feed mode the run needs (harness.loadgen.feeders), and a file-fed run
keeps only its window queued."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from harness.loadgen.due import DueQueue
from harness.loadgen.feeders import FEED_WINDOW, AllAtOnce, Arrivals, FromFile, TurnByTurn, pick_feeder
from harness.loadgen.part import Part
from harness.loadgen.sessions import Session
from harness.spec import parse_spec
from harness.spec.load import LoadSettings, ThinkTime
from harness.workloads import build_schedule
from harness.workloads.schedule import Request, Schedule


def _schedule(workload: dict[str, Any]) -> Schedule:
    return build_schedule(parse_spec({"name": "t", "model": "m", "workload": workload}), None, 0)


MULTI = {
    "kind": "multi-turn",
    "sessions": 4,
    "turns": 3,
    "system_prompt_tokens": 6,
    "question_tokens": 3,
    "answer_tokens": 3,
}
SHARED = {
    "kind": "shared-prefix",
    "groups": 50,
    "prompts_per_group": 4,
    "system_prompt_tokens": 8,
    "question_tokens": 4,
    "output_tokens": 2,
}


def _load(think_s: float | None = None) -> LoadSettings:
    return LoadSettings(think_time=ThinkTime(think_s) if think_s is not None else None)


def test_the_feed_mode_follows_the_schedule_and_the_loop() -> None:
    multi, shared = _schedule(MULTI), _schedule(SHARED)
    part = Part(0, 1)

    def pick(s: Schedule, load: LoadSettings, rate: float | None) -> object:
        return pick_feeder(s, part, load, rate, 8, {})

    assert isinstance(pick(multi, _load(), None), TurnByTurn)  # closed loop, no think time
    assert isinstance(pick(multi, _load(0.5), None), AllAtOnce)
    assert isinstance(pick(multi, _load(), 5.0), FromFile)  # open loop: first turns in arrival order
    assert isinstance(pick(shared, _load(), None), FromFile)  # a lazy schedule is read as it goes


class _Host:
    """The run as a feeder sees it, recording what would be written as not sent."""

    def __init__(self, arrivals: Arrivals | None = None) -> None:
        self.queue = DueQueue()
        self.sessions: dict[int, Session] = {}
        self.t0 = 100.0
        self.time_up = False
        self.arrivals = arrivals
        self.unsent_reqs: list[int] = []

    def unsent(self, reqs: Sequence[Request], why: str, text: str) -> None:
        self.unsent_reqs += [r.index for r in reqs]

    def not_sent(self, s: Session, why: str, text: str) -> None:
        self.unsent(s.remaining(), why, text)
        self.sessions.pop(s.conv.id, None)


def test_a_file_fed_run_queues_a_window_and_records_the_rest_as_not_sent_at_time_up() -> None:
    async def go() -> tuple[int, int, int, list[int]]:
        sched = _schedule(SHARED)
        host = _Host()
        feeder = pick_feeder(sched, Part(0, 1), _load(), None, 8, host.sessions)
        feeder.start(host)
        queued = host.queue.waiting()
        unfed = feeder.ready_unfed()  # closed loop: what the file still holds is ready too
        s, _ = await host.queue.get()
        feeder.taken(host, s)
        after = host.queue.waiting()
        host.time_up = True
        feeder.drop_rest(host, "time-limit", "time")
        return queued, unfed, after, host.unsent_reqs

    queued, unfed, after, unsent = asyncio.run(go())
    assert queued == after == FEED_WINDOW
    assert unfed == 200 - FEED_WINDOW
    assert len(unsent) == 200 - FEED_WINDOW - 1  # every conversation never read, one request each


def test_all_at_once_queues_every_first_turn_with_its_arrival_offset() -> None:
    async def go() -> list[float]:
        sched = _schedule(MULTI)
        load = _load(0.5)
        host = _Host(Arrivals(10.0, sched.seed, load))
        feeder = pick_feeder(sched, Part(0, 1), load, 10.0, 8, host.sessions)
        feeder.start(host)
        assert host.queue.waiting() == 4 and feeder.ready_unfed() == 0
        return [s.offset for s in host.sessions.values() if s.offset is not None]

    offsets = asyncio.run(go())
    assert len(offsets) == 4 and all(o >= 0 for o in offsets)
    assert offsets == sorted(offsets)  # drawn in first-turn order
