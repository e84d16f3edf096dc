"""Reading trace files line by line: each line checked, every error one line naming the file and line.

Mooncake lines: `hash_ids` (one id per 512-token block), `input_length`, `output_length`, `timestamp`
(ms). Request logs: `timestamp`, `messages` | `prompt` | `input_ids`, `max_tokens`, `session_id`.
Conversations: ShareGPT (`conversations: [{from, value}]`) or OpenAI (`messages: [{role, content}]`),
one per JSONL line or all in one JSON array.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import HarnessError

MOONCAKE_BLOCK = 512  # tokens per hash id in Mooncake's own traces


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _open(path: Path):
    try:
        return path.open("rb")
    except OSError as e:
        raise HarnessError(f"{path}: cannot read: {e.strerror}") from None


def raw_lines(path: Path, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of the non-blank lines from the `start`-th on (0-based); skipped ones unparsed."""
    seen = 0
    with _open(path) as f:
        for no, line in enumerate(f, 1):
            if not line.strip():
                continue
            if seen >= start:
                yield no, line
            seen += 1


def objects(path: Path, start: int = 0, limit: int | None = None) -> Iterator[tuple[int, dict]]:
    """(line number, object) for `limit` non-blank JSONL lines from the `start`-th; a bad line is an error."""
    if limit == 0:
        return
    for n, (no, line) in enumerate(raw_lines(path, start), 1):
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            msg = getattr(e, "msg", None) or "not UTF-8"
            raise HarnessError(f"{path}: line {no}: not JSON ({msg})") from None
        if not isinstance(obj, dict):
            raise HarnessError(f"{path}: line {no}: expected a JSON object, got {type(obj).__name__}")
        yield no, obj
        if limit is not None and n >= limit:
            return


@dataclass(frozen=True)
class MooncakeLine:
    hash_ids: tuple[int, ...]
    input_length: int
    output_length: int
    timestamp_s: float


def mooncake_line(path: Path, no: int, obj: dict) -> MooncakeLine:
    """One Mooncake request, checked: as many hash ids as its input length needs (ceil(input / 512))."""
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not ids or set(map(type, ids)) != {int} or min(ids) < 0:
        raise HarnessError(
            f"{path}: line {no}: hash_ids: expected a non-empty list of non-negative integers, got {ids!r:.60}"
        )
    n_in = obj.get("input_length")
    if type(n_in) is not int or n_in <= 0:
        raise HarnessError(f"{path}: line {no}: input_length: expected a positive integer, got {n_in!r}")
    need = math.ceil(n_in / MOONCAKE_BLOCK)
    if len(ids) > need:
        raise HarnessError(
            f"{path}: line {no}: hash_ids: {len(ids)} ids, but input_length {n_in} allows at most {need} "
            f"(one per {MOONCAKE_BLOCK} tokens)"
        )
    if len(ids) < need:
        raise HarnessError(
            f"{path}: line {no}: hash_ids: {len(ids)} ids, but input_length {n_in} needs {need} "
            f"(one per {MOONCAKE_BLOCK} tokens)"
        )
    out = obj.get("output_length", 1)
    if not _int(out) or out < 0:
        raise HarnessError(f"{path}: line {no}: output_length: expected a non-negative integer, got {out!r}")
    ts = obj.get("timestamp", 0)
    if not _num(ts):
        raise HarnessError(f"{path}: line {no}: timestamp: expected a number (ms), got {ts!r}")
    return MooncakeLine(tuple(ids), n_in, out, ts / 1000.0)


def scaled_tokens(input_length: int, block_tokens: int) -> int:
    """Prompt tokens sent for a Mooncake request: ceil(input_length x block_tokens / 512)."""
    return -(-input_length * block_tokens // MOONCAKE_BLOCK)


@dataclass(frozen=True)
class LoggedRequest:
    payload: str | tuple[dict, ...] | tuple[int, ...]
    max_tokens: int | None
    timestamp: float | None
    session_id: str | None


def request_line(path: Path, no: int, obj: dict, unit: str) -> LoggedRequest:
    """One line of a request log: exactly one of messages, prompt, input_ids."""
    given = [k for k in ("messages", "prompt", "input_ids") if k in obj]
    if len(given) != 1:
        raise HarnessError(
            f"{path}: line {no}: expected exactly one of messages, prompt, input_ids, got {given or 'none'}"
        )
    k = given[0]
    v = obj[k]
    payload: Any
    if k == "messages":
        payload = tuple(_messages(path, no, v, "messages"))
    elif k == "prompt":
        if not isinstance(v, str) or not v:
            raise HarnessError(f"{path}: line {no}: prompt: expected non-empty text, got {v!r:.60}")
        payload = v
    else:
        if not isinstance(v, list) or not v or not all(_int(i) and i >= 0 for i in v):
            raise HarnessError(f"{path}: line {no}: input_ids: expected a list of token ids, got {v!r:.60}")
        payload = tuple(v)
    mt = obj.get("max_tokens")
    if mt is not None and (not _int(mt) or mt <= 0):
        raise HarnessError(f"{path}: line {no}: max_tokens: expected a positive integer, got {mt!r}")
    ts = obj.get("timestamp")
    if ts is not None and not _num(ts):
        raise HarnessError(f"{path}: line {no}: timestamp: expected a number ({unit}), got {ts!r}")
    sid = obj.get("session_id")
    if sid is not None and not isinstance(sid, str | int):
        raise HarnessError(f"{path}: line {no}: session_id: expected a string or integer, got {sid!r:.60}")
    return LoggedRequest(
        payload,
        mt,
        None if ts is None else (ts / 1000.0 if unit == "ms" else float(ts)),
        None if sid is None else str(sid),
    )


def _messages(path: Path, no: int, v: Any, key: str) -> list[dict]:
    if not isinstance(v, list) or not v:
        raise HarnessError(f"{path}: line {no}: {key}: expected a non-empty list of messages")
    out = []
    for i, m in enumerate(v):
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("content"), str)
            or not isinstance(m.get("role"), str)
        ):
            raise HarnessError(f"{path}: line {no}: {key}[{i}]: expected {{role, content}} with text content")
        out.append({"role": m["role"], "content": m["content"]})
    return out


@dataclass(frozen=True)
class Turn:
    question: str
    answer: str | None  # the reply the file recorded, if any


@dataclass(frozen=True)
class RecordedConversation:
    system: str
    turns: tuple[Turn, ...]


_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def conversation_item(path: Path, no: int, obj: Any) -> RecordedConversation:
    """ShareGPT `conversations: [{from, value}]` or OpenAI `messages: [{role, content}]`, as turns."""
    if not isinstance(obj, dict) or not ("conversations" in obj or "messages" in obj):
        raise HarnessError(f"{path}: item {no}: expected an object with conversations or messages")
    key = "conversations" if "conversations" in obj else "messages"
    msgs = obj[key]
    if not isinstance(msgs, list):
        raise HarnessError(f"{path}: item {no}: {key}: expected a list of messages")
    system, turns = "", list[Turn]()
    q: str | None = None
    for i, m in enumerate(msgs):
        role = m.get("from", m.get("role")) if isinstance(m, dict) else None
        text = m.get("value", m.get("content")) if isinstance(m, dict) else None
        if role not in _ROLES or not isinstance(text, str):
            raise HarnessError(
                f"{path}: item {no}: {key}[{i}]: expected from/role in {sorted(_ROLES)} with text, got {m!r:.60}"
            )
        role = _ROLES[role]
        if role == "system":
            system = text if not turns and q is None else system
        elif role == "user":
            if q is not None:
                turns.append(Turn(q, None))
            q = text
        elif q is not None:
            turns.append(Turn(q, text))
            q = None
    if q is not None:
        turns.append(Turn(q, None))
    if not turns:
        raise HarnessError(f"{path}: item {no}: no human/user turn")
    return RecordedConversation(system, tuple(turns))


def conversation_items(path: Path, start: int = 0, limit: int | None = None) -> Iterator[tuple[int, Any]]:
    """(number, item) of a JSON array (numbered from 1) or a JSONL file (line numbers), sliced."""
    with _open(path) as f:
        head = f.read(4096).lstrip()
    if head.startswith(b"["):
        try:
            data = json.loads(path.read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise HarnessError(f"{path}: not JSON ({getattr(e, 'msg', e)})") from None
        end = None if limit is None else start + limit
        yield from enumerate(data[start:end], start + 1)
        return
    yield from objects(path, start, limit)
