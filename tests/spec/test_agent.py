"""`workload: {kind: agent}`: the keys parsed, and each bad value refused with one line."""

from __future__ import annotations

from typing import Any

import pytest

from harness.errors import SpecError
from harness.spec import AgentWorkload, LogNormal, SubAgents, parse_spec
from tests.helpers.specs import spec


def agent_wl(**over: Any) -> dict[str, Any]:
    wl = {
        "kind": "agent",
        "sessions": 3,
        "steps": 4,
        "system_prompt_tokens": 100,
        "task_tokens": 40,
        "tool_result_tokens": {"distribution": "lognormal", "mean": 200, "sigma": 0.8},
        "answer_tokens": 16,
    }
    return {**wl, **over}


def test_an_agent_workload_with_sub_agents_parses() -> None:
    sub = {"at_steps": [2, 0], "steps": 2, "task_tokens": 30, "summary_tokens": 24}
    s = parse_spec(spec("a", agent_wl(subagents=sub), think_time_s=1.5, sweep={"steps": [4, 8]}), "a.yaml")
    wl = s.workload
    assert isinstance(wl, AgentWorkload) and wl.subagents == SubAgents((0, 2), 2, 30, 24)
    assert wl.tool_result_tokens == LogNormal(200.0, 0.8, 1, None) and s.load.think_time is not None
    assert [p.workload.steps for p in s.points()] == [4, 8]


BAD = [
    ({"steps": 0}, "workload.steps", "expected a positive integer, got 0"),
    ({"task_tokens": "long"}, "workload.task_tokens", "expected a positive integer"),
    ({"tool_result_tokens": {"distribution": "lognormal"}}, "workload.tool_result_tokens.mean", "missing"),
    ({"colour": 1}, "workload.colour", "unknown key"),
    ({"subagents": [1]}, "workload.subagents", "expected a mapping"),
    (
        {"subagents": {"at_steps": [3], "steps": 1, "task_tokens": 5, "summary_tokens": 5}},
        "workload.subagents.at_steps[0]",
        "expected a step before the last (0..2), got 3",
    ),
    (
        {"subagents": {"at_steps": [1], "steps": 1, "task_tokens": 5, "summary_tokens": 0}},
        "workload.subagents.summary_tokens",
        "got 0",
    ),
    ({"subagents": {"at_steps": [], "steps": 1}}, "workload.subagents.at_steps", "non-empty list"),
]


@pytest.mark.parametrize(("over", "key", "words"), BAD, ids=[b[1] for b in BAD])
def test_bad_agent_keys_one_line(over: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(SpecError) as e:
        parse_spec(spec("a", agent_wl(**over)), "a.yaml")
    assert str(e.value).startswith(f"a.yaml: {key}: ") and words in str(e.value), str(e.value)


def test_a_multi_turn_key_cannot_be_swept_on_an_agent() -> None:
    with pytest.raises(SpecError, match="sweep.turns: unknown key for a agent workload"):
        parse_spec(spec("a", agent_wl(), sweep={"turns": [1, 2]}), "a.yaml")
