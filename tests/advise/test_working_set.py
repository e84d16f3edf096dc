"""Working set: reuse windows, one-time prompts and prefix stability on traces built to known answers."""

from __future__ import annotations

import numpy as np

from harness.advise.curve import stack_distances
from harness.advise.working_set import clock, working_set
from harness.whatif.trace import Trace, TraceRequest


def _ws(reqs: list[TraceRequest], kind: str = "blocks"):
    trace = Trace("t", reqs, unit=1, kind=kind)
    sd = stack_distances(trace)
    return working_set(trace, sd, clock(trace, [1.0] * len(reqs)))


def test_windows_count_reuses_by_their_gap():
    # prefix A (10 pages) comes back after 30 s, prefix B (20 pages) after 10 minutes; C never
    a = tuple(range(10))
    b = tuple(range(100, 120))
    c = tuple(range(200, 205))
    reqs = [
        TraceRequest(a, 10, 0.0),
        TraceRequest(b, 20, 1.0),
        TraceRequest(a, 10, 30.0),
        TraceRequest(c, 5, 100.0),
        TraceRequest(b, 20, 601.0),
    ]
    ws = _ws(reqs)
    assert ws.within == {"1m": 10, "5m": 10, "15m": 30}  # A and B live together from t=1 to t=30
    assert ws.overall == 30 and ws.distinct == 35
    # only C shares no page with another request
    assert ws.one_time_share == 1 / 5 and ws.one_time_token_share == 5 / 65
    assert ws.reuse_distance["max"] == 35  # B's deepest page: A's 10, C's 5 and B's other 19 above it
    assert ws.later_turns == 0


def test_unstable_turns_are_the_ones_that_do_not_extend_prompt_and_answer():
    s1 = [
        TraceRequest((1, 2, 3), 3, 0.0, 2, session=1, turn=1, output_key=(4, 5)),
        TraceRequest((1, 2, 3, 4, 5, 6), 6, 1.0, 1, session=1, turn=2, output_key=(7,)),
    ]
    s2 = [
        TraceRequest((10, 11), 2, 0.5, 2, session=2, turn=1, output_key=(12, 13)),
        TraceRequest((10, 11, 99, 6), 4, 2.0, 1, session=2, turn=2, output_key=(8,)),  # answer dropped
    ]
    ws = _ws([s1[0], s2[0], s1[1], s2[1]], kind="tokens")
    assert ws.later_turns == 2 and ws.unstable_turns == 1
    assert ws.unstable_examples == ["session 2 turn 2: matches 2 of the previous turn's 4 units"]


def test_untimed_inputs_run_on_the_modelled_clock():
    reqs = [TraceRequest((i,), 1) for i in range(4)]
    trace = Trace("t", reqs, concurrency=2)
    assert np.allclose(clock(trace, [2.0, 2.0, 4.0, 4.0]), [1.0, 2.0, 4.0, 6.0])
    timed = Trace("t", [TraceRequest((1,), 1, 5.0), TraceRequest((1,), 1, 9.0)])
    assert clock(timed, [1.0, 1.0]).tolist() == [5.0, 9.0]
