"""Agents as the load (`agents: N`): N agentic conversations at once, drawn seeded from the folder, each
agent taking a new one when its conversation ends, until every draw is replayed.

Draws: seeded permutations of the folder's slice (start/limit) laid end to end, max(N, files) in all, so
every file is replayed at least once and a ramp past the folder's size repeats files. Every draw is read
again into an id space of its own (agentic_trace.IdSpace), so a repeated file is another agent of the
same shape, never a free hit on its twin. Agent k replays draws k, k + N, k + 2N, ... one after another
as one closed-loop session (the load generator's Conversation): a draw's first request goes as soon as
the previous draw's last answer arrived. Assigning draws to agents ahead, rather than to whichever agent
frees first, keeps the load generator untouched; the draws are random either way. Each request's
`session` is its draw, so per-conversation figures and the tool-gap table see conversations, not agents.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from harness.errors import HarnessError
from harness.workloads.agentic_trace import AgenticConversation, IdSpace, files_of, gaps, read_conversation


@dataclass(frozen=True)
class Draw:
    """One drawn conversation: which agent replays it and its place in the run's draws."""

    number: int  # 0-based over the run: the requests' `session`
    agent: int
    conversation: AgenticConversation


def draw_agents(
    path: object, start: int, limit: int | None, shared_prefix: bool, agents: int, seed: int
) -> list[list[Draw]]:
    """Per agent, its draws in replay order (seeded by `seed`)."""
    from pathlib import Path

    files = files_of(Path(str(path)))[start : None if limit is None else start + limit]
    if not files:
        raise HarnessError(f"{path}: no conversations from conversation {start} on")
    rng = random.Random(f"agents:{seed}")
    order: list[int] = []
    while len(order) < max(agents, len(files)):
        perm = list(range(len(files)))
        rng.shuffle(perm)
        order += perm
    order = order[: max(agents, len(files))]
    ids = IdSpace(shared_prefix)
    draws = [Draw(n, n % agents, read_conversation(files[i], ids)) for n, i in enumerate(order)]
    return [draws[k::agents] for k in range(agents)]


@dataclass(frozen=True)
class AgentSlot:
    """One request's place in an agents run: agent, draw, turn in the draw, nominal index, unscaled gap."""

    agent: int
    draw: int
    turn: int
    index: int
    gap: float | None  # None: the agent's first request (at the run's start)


def agent_slots(chains: list[list[Draw]], timing: str, api_scale: float) -> list[list[AgentSlot]]:
    """Per agent, its requests' slots; indices interleave the agents by recorded time, each draw's
    recorded times following the agent's previous draws'."""
    keyed: list[tuple[float, int, int]] = []
    per_agent: list[list[tuple[int, int, float | None]]] = []
    for k, chain in enumerate(chains):
        rows: list[tuple[int, int, float | None]] = []
        offset = 0.0
        for d in chain:
            t = 0.0
            for turn, (r, g) in enumerate(
                zip(d.conversation.requests, gaps(d.conversation, timing, api_scale), strict=True)
            ):
                t = max(t, r.recorded_s)
                keyed.append((offset + t, k, len(rows)))
                rows.append((d.number, turn, g if g is not None or not rows else 0.0))
            offset += t
        per_agent.append(rows)
    keyed.sort()
    index = {(k, i): n for n, (_, k, i) in enumerate(keyed)}
    return [
        [AgentSlot(k, draw, turn, index[k, i], g) for i, (draw, turn, g) in enumerate(rows)]
        for k, rows in enumerate(per_agent)
    ]
