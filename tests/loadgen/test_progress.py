"""The sweep's overall bar: points done / total, elapsed, time left from the finished points."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

import pytest

from harness.loadgen.progress import Progress
from harness.sweep import progress


def test_durations_people_plan_by() -> None:
    assert progress.fmt_duration(42.4) == "42 s"
    assert progress.fmt_duration(185) == "3 min 05 s"
    assert progress.fmt_duration(7800) == "2 h 10 min"


def test_time_left_from_finished_points() -> None:
    assert progress.estimate_left(10.0, 0, 42) is None  # nothing finished: no estimate yet
    assert progress.estimate_left(60.0, 12, 42) == 150.0  # 5 s a point x 30 left
    assert progress.estimate_left(60.0, 42, 42) == 0.0


def test_point_bars_join_the_sweep_bar_and_leave_when_done() -> None:
    assert progress.shared() is None  # outside a sweep a point draws its own bar
    with progress.sweep_progress(3, quiet=False) as sp:
        assert sp is not None and progress.shared() is sp.p
        assert "time left: after the first run" in sp.info()
        bar = Progress("gpu-only groups=4,seed=0", 8)
        assert bar.shared is sp.p and len(sp.p.tasks) == 2  # overall on top, the point's beneath
        res = SimpleNamespace(ok=8, failed=0, skipped=0, not_sent=0)
        bar.finish(res, deque([0.02]))
        assert len(sp.p.tasks) == 1  # the finished point's bar is gone
        progress.point_done()
        assert sp.done == 1 and sp.p.tasks[0].completed == 1 and "left" in sp.info()
        progress.point_done()
        progress.point_done()
        assert sp.info().startswith("runs (point x seed)  done in")
    assert progress.shared() is None
    with progress.sweep_progress(3, quiet=True) as sp:
        assert sp is None and progress.shared() is None


def test_a_sims_bar_shows_the_modelled_ttft_not_its_wall_time() -> None:
    """A sim answers in milliseconds at --time-scale; the bar shows the card's modelled TTFT, what the
    point is reported (and a confirm compared) by, and says so."""
    from harness.loadgen.progress import Progress, RecentTtft

    wall = SimpleNamespace(ttft_s=0.0025, sim_time=None)
    sim = SimpleNamespace(ttft_s=0.0025, sim_time={"arrival_s": 1.0, "first_token_s": 1.387})
    recent = RecentTtft(maxlen=8)
    recent.add(wall)
    assert list(recent) == [0.0025] and not recent.modelled  # a real server: its (wall) TTFT
    recent.add(sim)
    recent.add(wall)  # once stamped, wall times never mix in
    assert recent.modelled and list(recent) == [pytest.approx(0.387)]
    bar = Progress("p", 2)
    bar.finish(SimpleNamespace(ok=2, failed=0, skipped=0, not_sent=0), recent)
    assert bar.p.tasks[0].fields["info"] == "failed 0  modelled TTFT p50 387.0 ms"
