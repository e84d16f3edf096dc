"""The replayed engine rebuilt from a server's server_info keeps its priority-scheduling settings."""

from __future__ import annotations

from harness.summarize.prediction import engine_from_info

INFO = {"max_total_num_tokens": 4000, "card_profile": "tiny-test", "enable_priority_scheduling": True}


def test_preemption_and_queue_limit_from_server_info() -> None:
    default = engine_from_info(INFO)
    assert not isinstance(default, str)
    assert default.priority_scheduling and default.priority_preemption
    assert default.preemption_threshold == 10 and default.max_queued_requests is None
    info = {
        **INFO,
        "disable_priority_preemption": True,
        "priority_scheduling_preemption_threshold": 3,
        "max_queued_requests": 7,
    }
    cfg = engine_from_info(info)
    assert not isinstance(cfg, str)
    assert not cfg.priority_preemption and cfg.preemption_threshold == 3 and cfg.max_queued_requests == 7
