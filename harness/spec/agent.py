"""The `workload: {kind: agent}` mapping: tool-calling sessions whose steps resend the whole context plus a
tool result, with optional sub-agents that fork from the parent's context and return a summary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.errors import SpecError
from harness.spec.checks import no_unknown, nonneg_int, pos_int, req, tname

AGENT_KEYS = {
    "kind",
    "sessions",
    "steps",
    "system_prompt_tokens",
    "task_tokens",
    "tool_result_tokens",
    "answer_tokens",
    "subagents",
}
SUBAGENT_KEYS = {"at_steps", "steps", "task_tokens", "summary_tokens"}
AGENT_SWEEP_KEYS = {"sessions", "steps", "system_prompt_tokens", "answer_tokens"}


@dataclass(frozen=True)
class SubAgents:
    """After each parent step in `at_steps` (0-based), a sub-agent runs `steps` steps on the parent's context
    so far plus its own task, and its last answer (`summary_tokens` long) is the parent's next tool result."""

    at_steps: tuple[int, ...]
    steps: int
    task_tokens: Any  # QuestionLength
    summary_tokens: int


@dataclass(frozen=True)
class AgentWorkload:
    kind: str
    sessions: int
    steps: int
    system_prompt_tokens: int
    task_tokens: Any  # QuestionLength: the user's task, the first step's new message
    tool_result_tokens: Any  # QuestionLength: each later step's new tool result
    answer_tokens: int  # each step's output (the model's tool call)
    subagents: SubAgents | None = None

    @property
    def output_tokens(self) -> int:
        return self.answer_tokens


def parse_agent(wl: dict, f: str, key: str, parse_question: Callable[[Any, str], Any]) -> AgentWorkload:
    """parse_question(value, key path): a question length, as harness.spec.workload reads one."""
    no_unknown(wl, AGENT_KEYS, f, key)

    def pos(name: str) -> int:
        return pos_int(req(wl, name, f, key), f, f"{key}.{name}")

    def question(d: dict, name: str, where: str) -> Any:
        return parse_question(req(d, name, f, where), f"{where}.{name}")

    steps = pos("steps")
    sub = wl.get("subagents")
    subagents = None
    if sub is not None:
        where = f"{key}.subagents"
        if not isinstance(sub, dict):
            raise SpecError(
                f,
                where,
                f"expected a mapping with at_steps, steps, task_tokens, summary_tokens, got {tname(sub)}",
            )
        no_unknown(sub, SUBAGENT_KEYS, f, where)
        at = req(sub, "at_steps", f, where)
        if not isinstance(at, list) or not at:
            raise SpecError(f, f"{where}.at_steps", f"expected a non-empty list of step numbers, got {at!r}")
        for i, s in enumerate(at):
            nonneg_int(s, f, f"{where}.at_steps[{i}]")
            if s >= steps - 1:
                raise SpecError(
                    f, f"{where}.at_steps[{i}]", f"expected a step before the last (0..{steps - 2}), got {s}"
                )
        if len(set(at)) != len(at):
            raise SpecError(f, f"{where}.at_steps", f"expected distinct steps, got {at!r}")
        subagents = SubAgents(
            at_steps=tuple(sorted(at)),
            steps=pos_int(req(sub, "steps", f, where), f, f"{where}.steps"),
            task_tokens=question(sub, "task_tokens", where),
            summary_tokens=pos_int(req(sub, "summary_tokens", f, where), f, f"{where}.summary_tokens"),
        )
    return AgentWorkload(
        kind="agent",
        sessions=pos("sessions"),
        steps=steps,
        system_prompt_tokens=nonneg_int(
            req(wl, "system_prompt_tokens", f, key), f, f"{key}.system_prompt_tokens"
        ),
        task_tokens=question(wl, "task_tokens", key),
        tool_result_tokens=question(wl, "tool_result_tokens", key),
        answer_tokens=pos("answer_tokens"),
        subagents=subagents,
    )
