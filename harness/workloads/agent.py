"""Agent sessions from a seed: steps that resend the whole context plus a tool result, and sub-agents.

One conversation per session, its requests in the order they run: the parent's steps, and after each step
in `subagents.at_steps` the sub-agent's steps, then the parent's next step. Each request names the earlier
requests of its context (`Request.lineage`): a parent step sees the parent's steps only, a sub-agent step
the parent's steps up to the fork and its own; so the sub-agent's prompt begins with the parent's whole
context at the fork (its cached prefix), and the parent's step after it takes the sub-agent's last answer
(the summary, `Request.tool_from`) as its tool result. `turn` and `position` are the step depth: how many
earlier exchanges the request's context holds.
"""

from __future__ import annotations

import dataclasses
import random

from harness.spec import AgentWorkload
from harness.workloads.generators import QuestionSource, seed_tags
from harness.workloads.schedule import Conversation, Question, Request, Schedule
from harness.workloads.tokenizers import PromptMaker


class _Sources:
    """The question sources of one run: the task, tool results, a sub-agent's task."""

    def __init__(self, wl: AgentWorkload, maker: PromptMaker, spec_file: str) -> None:
        self.task = QuestionSource(wl.task_tokens, maker, spec_file, "workload.task_tokens")
        self.tool = QuestionSource(wl.tool_result_tokens, maker, spec_file, "workload.tool_result_tokens")
        sub = wl.subagents
        self.sub_task = (
            QuestionSource(sub.task_tokens, maker, spec_file, "workload.subagents.task_tokens")
            if sub
            else None
        )


def _session(wl: AgentWorkload, s: int, seed: int, rng: random.Random, maker: PromptMaker, src: _Sources):
    """One session's conversation and its requests in the order they run (not yet numbered)."""
    tags = seed_tags(seed, s)
    system, sys_n = maker.make(rng, wl.system_prompt_tokens, tags)
    reqs: list[Request] = []

    def add(q: Question, q_n: int, lineage: list[int], out: int, tool_from: int | None = None) -> int:
        depth = len(lineage)
        reqs.append(
            Request(-1, s, depth, depth, q, q_n, out, session=s, lineage=tuple(lineage), tool_from=tool_from)
        )
        return len(reqs) - 1

    parent: list[int] = []  # the parent's requests so far (positions in reqs)
    summary: int | None = None  # the sub-agent answer the parent's next step takes as its tool result
    sub = wl.subagents
    for step in range(wl.steps):
        if step == 0:
            q, q_n = src.task.make(rng, tags + [0] if sys_n == 0 else [])
        elif summary is not None:
            q, q_n = "", 0  # the summary is the tool result, filled in at send time
        else:
            q, q_n = src.tool.make(rng, [])
        parent.append(add(q, q_n, list(parent), wl.answer_tokens, tool_from=summary))
        summary = None
        if sub is not None and src.sub_task is not None and step in sub.at_steps:
            mine: list[int] = []
            for j in range(sub.steps):
                q, q_n = src.sub_task.make(rng, []) if j == 0 else src.tool.make(rng, [])
                out = sub.summary_tokens if j == sub.steps - 1 else wl.answer_tokens
                mine.append(add(q, q_n, parent + mine, out))
            summary = mine[-1]
    return Conversation(id=s, system=system, system_tokens=sys_n, session=s), reqs


def agent(wl: AgentWorkload, seed: int, maker: PromptMaker, spec_file: str) -> Schedule:
    """N sessions, round-robin by request: every session's k-th request before any session's (k+1)-th."""
    rng = random.Random(f"agent:{seed}")
    src = _Sources(wl, maker, spec_file)
    planned = [_session(wl, s, seed, rng, maker, src) for s in range(wl.sessions)]
    index = 0
    for k in range(max(len(reqs) for _, reqs in planned)):
        for conv, reqs in planned:
            if k < len(reqs):
                conv.turns.append(dataclasses.replace(reqs[k], index=index))
                index += 1
    convs = [conv for conv, _ in planned]
    return Schedule(
        kind=wl.kind, seed=seed, tokenizer=maker.kind, conversations=convs, ids=maker.kind == "server"
    )
