"""The what-if engine's input shape: a Trace of TraceRequests (requests in arrival order, each a key to
match), shared by every reader (harness.whatif.inputs, harness.whatif.captured) so they need not import
each other."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TraceRequest:
    key: tuple[int, ...]  # what the tree matches: token ids, or block ids
    tokens: int  # prompt length in tokens
    arrival: float = 0.0  # seconds from the trace start
    output_tokens: int = 0
    session: int | None = None
    turn: int | None = None
    output_key: tuple[int, ...] = ()  # the answer's ids, cached after the prompt when known (as SGLang does)
    position: int | None = None  # how many times this session's / group's prefix was sent before
    index: int = 0  # the schedule's nominal send order (the load generator sends the lowest ready index)
    conversation: int | None = None  # turns of one conversation go strictly in order (closed loop)
    group: int | None = None
    priority: int | None = None  # SGLang's `priority` the request carried (the spec's `priorities:`)
    priority_class: str | None = None
    gap: float = 0.0  # a session trace's later turn: due this long after the previous turn's answer
    text: str | None = (
        None  # what a gateway routes it by (harness.whatif.routing.routing_text); None: the ids
    )


@dataclass
class Trace:
    name: str
    requests: list[TraceRequest]
    unit: int = 1  # tokens per key element (block size for block traces)
    kind: str = "tokens"  # tokens | blocks
    notes: list[str] = field(default_factory=list)
    concurrency: int | None = None  # the run's cap on requests in flight; None: no scheduler replay
    request_rate: float | None = None  # Poisson arrivals (requests/s) on top of the cap, as the loadgen
    seed: int = 0  # the schedule seed (arrival offsets)
    agents: bool = False  # conversations of agents, each request its think time after the last answer

    def hit_tokens(self, req: TraceRequest, units: int) -> int:
        """Tokens a hit of `units` key elements saves; the last block counts its real length."""
        return min(units * self.unit, req.tokens)


def _prompt_ids(payload, tok) -> list[int]:
    """The ids the sim tokenizes a payload to: chat messages through its template, text word by word."""
    from harness.tokenizer import render_chat

    if isinstance(payload, list) and payload and isinstance(payload[0], dict):
        payload = render_chat(payload)
    return tok.encode(payload) if isinstance(payload, str) else list(payload)


def _request(ids: list[int], ans: list[int], conv, r, text: str | None = None) -> TraceRequest:
    return TraceRequest(
        tuple(ids),
        len(ids),
        r.arrival or 0.0,  # a replayed trace's own send time (timestamps: honor)
        len(ans),
        conv.session,
        r.turn,
        tuple(ans),
        position=r.position,
        index=r.index,
        conversation=conv.id,
        group=conv.group,
        priority=r.priority,
        priority_class=r.priority_class,
        gap=r.gap or 0.0,
        text=text,
    )
