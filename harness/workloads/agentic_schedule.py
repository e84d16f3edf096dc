"""An agentic trace (harness.workloads.agentic_trace) as the run's schedule, and as what-if requests.

Every conversation is one closed-loop session (Conversation/Request with `gap`, the machinery the bailian
session traces use): all start at the run's start, as a fleet of agents does, and each later request is
due its gap (think time, by `timing`) / `speedup` after the previous answer arrived. Prompts are made from
the hash ids as for Mooncake (trace_prompts.BlockPrompt), each id `block_tokens` tokens, so a small pool
can be tried with blocks smaller than the trace's 64 tokens (the prompt scaled by block_tokens / 64).

Nominal send order (`index`, the lowest ready goes first under a concurrency cap): by recorded time from
the conversations' starts (its running maximum, so a conversation's own indices only grow).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.errors import HarnessError, SpecError
from harness.spec import TraceWorkload
from harness.workloads.agentic_agents import agent_slots, draw_agents
from harness.workloads.agentic_trace import AgenticConversation, AgenticRequest, gaps, read_fleet
from harness.workloads.schedule import Conversation, Request
from harness.workloads.tokenizers import PromptMaker


@dataclass(frozen=True)
class Slot:
    """One request's place in the fleet: conversation, turn, nominal index and gap (unscaled)."""

    conversation: int
    turn: int
    index: int
    gap: float | None


def slots(convs: list[AgenticConversation], timing: str, api_scale: float) -> list[list[Slot]]:
    """Per conversation, its requests' slots; indices interleave the conversations by recorded time."""
    keyed = []
    gap_lists = []
    for c, conv in enumerate(convs):
        gap_lists.append(list(gaps(conv, timing, api_scale)))
        t = 0.0
        for k, r in enumerate(conv.requests):
            t = max(t, r.recorded_s)
            keyed.append((t, c, k))
    keyed.sort()
    index = {(c, k): i for i, (_, c, k) in enumerate(keyed)}
    return [[Slot(c, k, index[c, k], g) for k, g in enumerate(gap_lists[c])] for c in range(len(convs))]


def describe(convs: list[AgenticConversation], wl: TraceWorkload | None = None) -> str:
    """One line saying what was read and which hash id scope it used."""
    n = sum(len(c.requests) for c in convs)
    subs = sum(c.subagents for c in convs)
    shared = [c.shared_blocks for c in convs if c.shared_blocks]
    scope = (
        f"tools + system prompt shared fleet-wide ({min(shared)}..{max(shared)} blocks of "
        f"{convs[0].block_size} tokens)"
        if shared
        else "hash ids local to each conversation"
    )
    timing = f", timing {wl.timing}" if wl is not None else ""
    return f"agentic: {len(convs)} conversations, {n} requests, {subs} sub-agents; {scope}{timing}"


def agentic_conversations(
    wl: TraceWorkload, maker: PromptMaker, spec_file: str, cap: int | None, seed: int = 0
) -> list[Conversation]:
    """The slice's conversations (start/limit count files) as closed-loop sessions, gaps by `timing`;
    with `agents: N`, N agents replaying seeded draws of them (harness.workloads.agentic_agents)."""
    from harness.workloads.trace_prompts import BlockMaker, BlockPrompt

    blocks = BlockMaker(maker.kind, wl.block_tokens, maker.hf)
    honor = wl.timestamps == "honor"

    def request(
        r: AgenticRequest, block_size: int, index: int, conv: int, turn: int, session: int, gap: float | None
    ) -> Request:
        n = -(-r.input_tokens * wl.block_tokens // block_size)
        answer = max(1, r.output_tokens)
        return Request(
            index=index,
            conversation=conv,
            turn=turn,
            position=turn,
            question=BlockPrompt(r.hash_ids, n, blocks),
            question_tokens=n,
            output_tokens=min(answer, cap) if cap else answer,
            session=session,
            gap=gap / wl.speedup if honor and gap is not None else None,
            arrival=0.0 if honor and gap is None else None,  # every agent starts at the start
        )

    try:
        if wl.agents is not None:
            return _agents(wl, seed, request)
        convs = read_fleet(wl.path, wl.start, wl.limit, wl.shared_prefix)
    except HarnessError as e:
        if wl.start and "no conversations" in str(e):
            raise SpecError(spec_file, "workload.start", str(e)) from None
        raise
    out: list[Conversation] = []
    for conv, conv_slots in zip(convs, slots(convs, wl.timing, wl.api_time_scale), strict=True):
        turns = [
            request(r, conv.block_size, s.index, s.conversation, s.turn, s.conversation, s.gap)
            for r, s in zip(conv.requests, conv_slots, strict=True)
        ]
        out.append(Conversation(id=len(out), system="", system_tokens=0, turns=turns, session=len(out)))
    return out


def _agents(wl: TraceWorkload, seed: int, request: Callable[..., Request]) -> list[Conversation]:
    """`agents: N`: one session per agent, its draws one after another (each request's session its draw)."""
    assert wl.agents is not None
    chains = draw_agents(wl.path, wl.start, wl.limit, wl.shared_prefix, wl.agents, seed)
    out: list[Conversation] = []
    for chain, agent_slots_ in zip(chains, agent_slots(chains, wl.timing, wl.api_time_scale), strict=True):
        reqs = [(r, d.conversation.block_size) for d in chain for r in d.conversation.requests]
        turns = [
            request(r, size, s.index, s.agent, s.turn, s.draw, s.gap)
            for (r, size), s in zip(reqs, agent_slots_, strict=True)
        ]
        out.append(Conversation(id=len(out), system="", system_tokens=0, turns=turns, session=len(out)))
    return out
