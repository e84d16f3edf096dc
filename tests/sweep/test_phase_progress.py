"""The phases after a sweep (summarizing, reporting) say they started, that they are still going, and
when they ended, so a long summarize never leaves the terminal silent after the bar reaches 100 %."""

from __future__ import annotations

import threading

import pytest

from harness.sweep.progress import phase


def test_a_phase_logs_its_start_a_heartbeat_while_it_runs_and_its_end() -> None:
    lines: list[str] = []
    beats = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if sum("still going" in x for x in lines) >= 2:
            beats.set()

    with phase("summarizing capture/n", log, every_s=0.01):
        assert beats.wait(30), lines  # the phase's body runs long: the heartbeat fills the silence
    assert lines[0] == "summarizing capture/n..."
    assert all(x.startswith("summarizing capture/n: still going, ") for x in lines[1:-1])
    assert lines[-1].startswith("summarizing capture/n: done in ")


def test_a_phase_without_a_heartbeat_still_says_start_and_end_even_when_it_fails() -> None:
    lines: list[str] = []
    with phase("report n", lines.append, every_s=None):
        pass
    assert lines[0] == "report n..." and lines[-1].startswith("report n: done in ") and len(lines) == 2
    lines.clear()
    with pytest.raises(ValueError), phase("report n", lines.append, every_s=None):
        raise ValueError("boom")
    assert lines[0] == "report n..." and lines[-1].startswith("report n: stopped after ") and len(lines) == 2
