"""Session traces in the Qwen "bailian" usage-trace format, replayed as sessions with block-exact prompts.

A line (JSONL): `chat_id`, `parent_chat_id` (-1: the session's first request), `turn`, `timestamp`
(seconds), `input_length`, `output_length`, `type`, and `hash_ids`, one per 16-token block of the prompt
(github.com/alibaba-edu/qwen-bailian-usagetraces-anon). A line is the whole request the service got,
history included: a later turn's hash ids begin with the earlier turns' blocks. So each request's prompt
is made from its own hash ids as for Mooncake (harness.workloads.trace_prompts.BlockPrompt: the same id,
the same tokens), and two requests share a cached prefix exactly where their hash ids do; the server's
answers are not resent (the next turn's blocks already hold the recorded ones).

Sessions: a request belongs to the session of the first request its parent links lead to (within the
slice read); its turns go in `turn` order. `timestamp` is when the service got the request (aiperf's
bailian loader reads it as the request's arrival time). With `timestamps: honor` a session's first turn is
sent at its recorded time from the slice's first request, divided by `speedup`; each later turn once the
previous turn's answer was received, plus its recorded gap from the previous turn's timestamp / `speedup`
(so a slow server delays the rest of a session, as a user waits for an answer before typing the next turn).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from harness.errors import HarnessError, SpecError
from harness.spec import TraceWorkload
from harness.workloads.schedule import Conversation, Request
from harness.workloads.tokenizers import PromptMaker
from harness.workloads.trace_files import objects
from harness.workloads.trace_prompts import BlockMaker, BlockPrompt

BAILIAN_BLOCK = 16  # tokens per hash id in the published traces


@dataclass(frozen=True)
class BailianLine:
    chat_id: int
    parent_chat_id: int
    turn: int
    timestamp_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def bailian_line(path: Path, no: int, obj: dict) -> BailianLine:
    """One line, checked: each bad field is one error naming the file, line, field and value."""

    def bad(field: str, want: str) -> HarnessError:
        return HarnessError(f"{path}: line {no}: {field}: expected {want}, got {obj.get(field)!r:.60}")

    for field in ("chat_id", "turn"):
        if not _int(obj.get(field)) or obj[field] < 0:
            raise bad(field, "a non-negative integer")
    parent = obj.get("parent_chat_id")
    if not _int(parent) or parent < -1:
        raise bad("parent_chat_id", "-1 (a first request) or a chat id")
    ts = obj.get("timestamp")
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
        raise bad("timestamp", "a non-negative number of seconds")
    n_in = obj.get("input_length")
    if not _int(n_in) or n_in <= 0:
        raise bad("input_length", "a positive integer")
    out = obj.get("output_length", 1)
    if not _int(out) or out < 0:
        raise bad("output_length", "a non-negative integer")
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not ids or not all(_int(h) and h >= 0 for h in ids):
        raise bad("hash_ids", "a non-empty list of non-negative integers")
    need = math.ceil(n_in / BAILIAN_BLOCK)
    if len(ids) != need:
        raise HarnessError(
            f"{path}: line {no}: hash_ids: {len(ids)} ids, but input_length {n_in} needs {need} "
            f"(one per {BAILIAN_BLOCK} tokens)"
        )
    return BailianLine(obj["chat_id"], parent, obj["turn"], float(ts), n_in, out, tuple(ids))


def session_roots(lines: list[BailianLine]) -> list[int]:
    """Each line's session root (a chat id): its parent links followed within the slice."""
    parent = {ln.chat_id: ln.parent_chat_id for ln in lines}
    out = []
    for ln in lines:
        cur, seen = ln.chat_id, set()
        while parent.get(cur, -1) in parent and cur not in seen:
            seen.add(cur)
            cur = parent[cur]
        out.append(cur)
    return out


def bailian_conversations(
    wl: TraceWorkload, maker: PromptMaker, spec_file: str, cap: int | None
) -> list[Conversation]:
    """The slice's sessions, each a conversation of its turns in order; index = file order of the request."""
    path = wl.path
    lines = [bailian_line(path, no, obj) for no, obj in objects(path, wl.start, wl.limit)]
    if not lines:
        raise SpecError(spec_file, "workload.start", f"{path}: no requests from request {wl.start} on")
    blocks = BlockMaker(maker.kind, wl.block_tokens, maker.hf)
    t0 = min(ln.timestamp_s for ln in lines)
    honor = wl.timestamps == "honor"
    sessions: dict[int, list[int]] = {}
    for i, root in enumerate(session_roots(lines)):
        sessions.setdefault(root, []).append(i)
    convs = []
    for c, members in enumerate(sessions.values()):
        members.sort(key=lambda i: (lines[i].turn, lines[i].timestamp_s, i))
        turns = []
        for t, i in enumerate(members):
            ln = lines[i]
            prev = lines[members[t - 1]].timestamp_s if t else None
            n = -(-ln.input_length * wl.block_tokens // BAILIAN_BLOCK)
            out = max(1, ln.output_length)
            turns.append(
                Request(
                    index=i,
                    conversation=c,
                    turn=t,
                    position=t,
                    question=BlockPrompt(ln.hash_ids, n, blocks),
                    question_tokens=n,
                    output_tokens=min(out, cap) if cap else out,
                    session=c,
                    arrival=(ln.timestamp_s - t0) / wl.speedup if honor and prev is None else None,
                    gap=max(0.0, ln.timestamp_s - prev) / wl.speedup if honor and prev is not None else None,
                )
            )
        convs.append(Conversation(id=c, system="", system_tokens=0, turns=turns, session=c))
    return convs
