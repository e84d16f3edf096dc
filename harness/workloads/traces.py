"""Replayed traces as schedules: the file is checked once, then read again lazily while the run sends.

Preparation reads the slice [start, start + limit) once: every line is checked (bad input stops the
run before anything is sent) and each request's position is worked out (harness.workloads.block_trie).
What stays in memory is one byte of position per request; the conversations (and their prompts) are
made from the file while the load generator takes them, so memory does not grow with the trace.

Position of a trace request: how many earlier requests of the slice went through the longest block
prefix it shares with them (0: it shares nothing), in powers of two (1, 2, 4, 8, ...: the bucket's
lower bound), since a root block shared by every request would otherwise give one position each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from harness.errors import SpecError
from harness.spec import TraceWorkload
from harness.workloads.block_trie import block_positions
from harness.workloads.heap import release_free_heap
from harness.workloads.schedule import Conversation, Request, Schedule
from harness.workloads.tokenizers import PromptMaker
from harness.workloads.trace_files import (
    conversation_item,
    conversation_items,
    mooncake_line,
    objects,
    request_line,
    scaled_tokens,
)
from harness.workloads.trace_prompts import BlockMaker, BlockPrompt, LoggedPrompt

DEFAULT_OUTPUT_TOKENS = 256  # when a request log or conversation does not say how much was generated


class LazyConversations:
    """Re-iterable conversations made from the file on each pass, in send order; len() known up front."""

    def __init__(self, make: Callable[[], Iterator[Conversation]], count: int) -> None:
        self._make, self.count = make, count

    def __iter__(self) -> Iterator[Conversation]:
        return self._make()

    def __len__(self) -> int:
        return self.count


def bucket(n: int) -> int:
    """0, 1, 2, 4, 8, ...: the largest power of two <= n."""
    return 0 if n <= 0 else 1 << (n.bit_length() - 1)


def _cap(n: int | None, wl: TraceWorkload) -> int:
    n = DEFAULT_OUTPUT_TOKENS if n is None else max(1, n)
    return min(n, wl.max_output_tokens) if wl.max_output_tokens else n


def trace_schedule(wl: TraceWorkload, seed: int, maker: PromptMaker, spec_file: str, api: str) -> Schedule:
    """The trace's slice as a lazy schedule; every line of it checked first (HarnessError on bad input)."""
    if wl.format in ("bailian", "agentic"):  # sessions of several turns: a list, in index order (requests())
        from harness.workloads.agentic_schedule import agentic_conversations
        from harness.workloads.bailian import bailian_conversations

        if wl.format == "agentic":  # `agents: N` draws its conversations by the seed
            sessions = agentic_conversations(wl, maker, spec_file, wl.max_output_tokens, seed)
        else:
            sessions = bailian_conversations(wl, maker, spec_file, wl.max_output_tokens)
        return Schedule(
            kind="trace", seed=seed, tokenizer=maker.kind, conversations=sessions, ids=maker.kind == "server"
        )
    build = {"mooncake": _mooncake, "conversations": _conversations, "requests": _requests}[wl.format]
    convs, history, total = build(wl, maker, spec_file, api)
    return Schedule(
        kind="trace",
        seed=seed,
        tokenizer=maker.kind,
        conversations=convs,
        history=history,
        ids=maker.kind == "server",
        total=total,
    )


def _mooncake(wl: TraceWorkload, maker: PromptMaker, spec_file: str, api: str):
    path = wl.path
    first_ts: list[float] = []

    def checked() -> Iterator[tuple[int, ...]]:
        for no, obj in objects(path, wl.start, wl.limit):
            line = mooncake_line(path, no, obj)
            if not first_ts:
                first_ts.append(line.timestamp_s)
            yield line.hash_ids

    positions = block_positions(checked())
    release_free_heap()  # the tree walked above is freed: its pages must not stay resident for the run
    if not positions:
        raise SpecError(spec_file, "workload.start", f"{path}: no requests from request {wl.start} on")
    blocks = BlockMaker(maker.kind, wl.block_tokens, maker.hf)
    t0 = first_ts[0]
    honor = wl.timestamps == "honor"

    def make() -> Iterator[Conversation]:
        for i, (no, obj) in enumerate(objects(path, wl.start, len(positions))):
            line = mooncake_line(path, no, obj)
            n = scaled_tokens(line.input_length, wl.block_tokens)
            req = Request(
                index=i,
                conversation=i,
                turn=0,
                position=positions[i],
                question=BlockPrompt(line.hash_ids, n, blocks),
                question_tokens=n,
                output_tokens=_cap(line.output_length, wl),
                arrival=max(0.0, line.timestamp_s - t0) / wl.speedup if honor else None,
            )
            yield Conversation(id=i, system="", system_tokens=0, turns=[req])

    return LazyConversations(make, len(positions)), "verbatim", len(positions)


def _requests(wl: TraceWorkload, maker: PromptMaker, spec_file: str, api: str):
    path = wl.path
    n, t0 = 0, None
    for no, obj in objects(path, wl.start, wl.limit):
        line = request_line(path, no, obj, wl.timestamp_unit)
        ids = isinstance(line.payload, tuple) and line.payload and isinstance(line.payload[0], int)
        if ids and api != "sglang-generate":
            raise SpecError(
                spec_file, "api", f"{path}: line {no}: input_ids need api: sglang-generate (api is {api})"
            )
        if not ids and maker.kind == "server":
            raise SpecError(
                spec_file, "tokenizer", f"{path}: line {no}: text cannot be sent with tokenizer: server"
            )
        if wl.timestamps == "honor" and line.timestamp is None:
            raise SpecError(
                spec_file, "workload.timestamps", f"{path}: line {no}: no timestamp (use timestamps: ignore)"
            )
        t0 = line.timestamp if t0 is None else t0
        n += 1
    if n == 0:
        raise SpecError(spec_file, "workload.start", f"{path}: no requests from request {wl.start} on")
    word = maker.kind == "word"

    def tokens(p) -> int | None:
        if isinstance(p, str):
            return maker.count(p) if maker.kind != "server" else None
        if p and isinstance(p[0], dict):
            return sum(maker.count(m["content"]) for m in p) if word else None
        return len(p)

    def make() -> Iterator[Conversation]:
        sessions: dict[str, int] = {}
        seen: dict[str, int] = {}
        for i, (no, obj) in enumerate(objects(path, wl.start, n)):
            line = request_line(path, no, obj, wl.timestamp_unit)
            sess = pos = None
            if line.session_id is not None:
                sess = sessions.setdefault(line.session_id, len(sessions))
                pos = seen.get(line.session_id, 0)
                seen[line.session_id] = pos + 1
            k = tokens(line.payload)
            arrival = None
            if wl.timestamps == "honor" and line.timestamp is not None and t0 is not None:
                arrival = max(0.0, line.timestamp - t0) / wl.speedup
            req = Request(
                index=i,
                conversation=i,
                turn=0,
                position=pos if pos is not None else 0,
                question=LoggedPrompt(line.payload, k, word),
                question_tokens=k or 0,
                output_tokens=_cap(line.max_tokens, wl),
                session=sess,
                group=sess,
                arrival=arrival,
            )
            yield Conversation(id=i, system="", system_tokens=0, turns=[req], session=sess)

    return LazyConversations(make, n), "verbatim", n


def _conversations(wl: TraceWorkload, maker: PromptMaker, spec_file: str, api: str):
    path = wl.path
    if maker.kind == "server":
        raise SpecError(
            spec_file, "tokenizer", f"{path}: conversations are text; tokenizer: server sends ids"
        )
    # conversations carry no times: sessions start as the concurrency (or request_rate) allows
    count = total = 0
    for no, obj in conversation_items(path, wl.start, wl.limit):
        total += len(conversation_item(path, no, obj).turns)
        count += 1
    if total == 0:
        raise SpecError(spec_file, "workload.start", f"{path}: no conversations from {wl.start} on")

    def make() -> Iterator[Conversation]:
        index = 0
        for c, (no, obj) in enumerate(conversation_items(path, wl.start, wl.limit)):
            conv = conversation_item(path, no, obj)
            turns = []
            for t, turn in enumerate(conv.turns):
                answer_tokens = maker.count(turn.answer) if turn.answer else None
                turns.append(
                    Request(
                        index=index,
                        conversation=c,
                        turn=t,
                        position=t,
                        question=turn.question,
                        question_tokens=maker.count(turn.question),
                        output_tokens=_cap(answer_tokens, wl),
                        session=c,
                        answer=turn.answer,
                    )
                )
                index += 1
            sys_n = maker.count(conv.system) if conv.system else 0
            yield Conversation(id=c, system=conv.system, system_tokens=sys_n, turns=turns, session=c)

    return LazyConversations(make, count), "recorded" if wl.history == "recorded" else "verbatim", total


def mooncake_ideal(
    path: Path, start: int, count: int | None, block_tokens: int, sent: set[int] | None = None
) -> tuple[int, int, int]:
    """(requests, hit tokens, prompt tokens) of an unbounded cache over the slice's requests (those in
    `sent`, by index, when given), in trace order: a request hits the longest block prefix an earlier
    one had, each block counted as block_tokens tokens and the last as its real length (the trace
    README's definition, scaled by block_tokens / 512)."""
    nodes: dict[tuple[int, int], int] = {}
    n = hit = total = 0
    for i, (no, obj) in enumerate(objects(path, start, count)):
        if sent is not None and i not in sent:
            continue
        line = mooncake_line(path, no, obj)
        tokens = scaled_tokens(line.input_length, block_tokens)
        node, m, matched = 0, 0, True
        for h in line.hash_ids:
            key = (node, h)
            nxt = nodes.get(key)
            if nxt is None:
                nxt = nodes[key] = len(nodes) + 1
                matched = False
            elif matched:
                m += 1
            node = nxt
        n += 1
        hit += min(m * block_tokens, tokens)
        total += tokens
    return n, hit, total
