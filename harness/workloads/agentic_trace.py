"""Agentic coding traces (the kv-cache-tester format, github.com/callanjfox/kv-cache-tester, `traces/`):
one JSON file per conversation, read from a folder (files in name order) or one file.

A file: `block_size` (tokens per hash id, 64), `tool_tokens`, `system_tokens`, `hash_id_scope` and
`requests`. A request: `t` (s from the conversation's start), `type` (`s` streaming, `n` not), `in`,
`out`, `hash_ids` (one per *full* block of the prompt: floor(in / block_size)), `think_time` (the
client's delay before sending it, s) and `api_time` (how long the service took, s); a `subagent` entry
holds its own `requests` (times from its own start), with its own tools and system prompt.

Replay order (docs/agentic-traces.md says why): a conversation's requests in file order; consecutive
sub-agent entries form a group whose requests go in the parent's place, agent after agent, and the
parent's next request waits for the whole group. `s` and `n` are replayed alike (the harness always
streams): the type says how the client asked, not what it asked, and consecutive requests with the same
hash ids are sent twice, as the service got them.

Hash ids are local to a file (`hash_id_scope: local`, every published file): each file's ids are offset
past the files before it, so that two conversations never share a block by accident; a `global` file's
ids are kept as they are (in a range of their own), shared with the other global files. `shared_prefix` makes the blocks of a
conversation's tools + system prompt (the first floor((tool_tokens + system_tokens) / block_size) of its
first request) one prompt for the whole fleet, by position, as agents of one product share it. The
prompt's last partial block (in mod block_size tokens) gets an id of its own: it is never a hit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from harness.errors import HarnessError

AGENTIC_BLOCK = 64  # tokens per hash id in the published traces
TIMINGS = ("think", "recorded", "api-scaled")


@dataclass(frozen=True)
class AgenticRequest:
    """One request in replay order; `hash_ids` are fleet-wide ids and end with the tail's id."""

    recorded_s: float  # when the service got it, from the conversation's start (a sub-agent's: offset)
    streaming: bool
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    think_s: float | None
    api_s: float | None
    agent: int  # 0: the conversation itself; k: its k-th sub-agent
    first_of_agent: bool  # a sub-agent's first request: sent as soon as the parent reaches the group


@dataclass(frozen=True)
class AgenticConversation:
    name: str
    block_size: int
    tool_tokens: int
    system_tokens: int
    requests: tuple[AgenticRequest, ...]
    subagents: int
    shared_blocks: int  # blocks of its tools + system prompt made fleet-wide (0: local scope)


class IdSpace:
    """Fleet-wide block ids: file k's id h is h + the ids of the files before it; with a shared prefix
    the tools + system blocks are one id per position; prompt tails count down from TAIL_BASE."""

    TAIL_BASE = 1 << 62
    GLOBAL_BASE = 1 << 61  # files with `hash_id_scope: global`: their ids as they are, above the local ones

    def __init__(self, shared_prefix: bool) -> None:
        self.shared_prefix = shared_prefix
        self.base = 0  # the current file's offset
        self.top = 0  # the largest fleet id given so far
        self._tails = 0

    def next_file(self, scope: str) -> None:
        self.base = self.GLOBAL_BASE if scope == "global" else self.top + 1

    def shared(self, role: str, k: int) -> int:
        """The k-th shared block of `role` (main or sub): below every file's ids (negative)."""
        return -(2 * k + (role == "sub") + 1)

    def tail(self) -> int:
        self._tails += 1
        return self.TAIL_BASE - self._tails


def files_of(path: Path) -> list[Path]:
    """A folder's `*.json` files in name order, or the one file."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
        if not files:
            raise HarnessError(f"{path}: no .json trace files in this folder")
        return files
    return [path]


def _bad(path: Path, where: str, key: str, want: str, got: object) -> HarnessError:
    return HarnessError(f"{path}: {where}: {key}: expected {want}, got {got!r:.60}")


def _int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _load(path: Path) -> dict:
    try:
        data = json.loads(path.read_bytes())
    except OSError as e:
        raise HarnessError(f"{path}: cannot read: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise HarnessError(f"{path}: not JSON ({getattr(e, 'msg', 'not UTF-8')})") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{path}: expected a JSON object with requests, got {type(data).__name__}")
    return data


def _top(path: Path, obj: dict, where: str, key: str, default: int | None) -> int:
    v = obj.get(key, default)
    if not _int(v) or v < 0 or (key == "block_size" and v == 0):
        raise _bad(
            path, where, key, "a positive integer" if key == "block_size" else "a non-negative integer", v
        )
    return int(v)


def _entries(path: Path, obj: dict, where: str) -> list:
    reqs = obj.get("requests")
    if not isinstance(reqs, list) or not reqs:
        raise _bad(path, where, "requests", "a non-empty list", reqs)
    return reqs


def read_conversation(path: Path, ids: IdSpace) -> AgenticConversation:
    """One file, every request checked: a bad one is one error naming the file, request index and key."""
    data = _load(path)
    block = _top(path, data, "file", "block_size", None)
    tools, system = (_top(path, data, "file", k, 0) for k in ("tool_tokens", "system_tokens"))
    out: list[AgenticRequest] = []
    local: dict[int, int] = {}  # this file's shared-prefix ids (parent and sub-agents share them)
    scope = data.get("hash_id_scope", "local")
    if scope not in ("local", "global"):
        raise _bad(path, "file", "hash_id_scope", "local or global", scope)
    ids.next_file(scope)
    subagents = 0
    main_seen = False  # the conversation's own first request gives its shared prefix
    shared = (tools + system) // block if ids.shared_prefix else 0
    for i, r in enumerate(_entries(path, data, "file")):
        where = f"request {i}"
        if not isinstance(r, dict):
            raise _bad(path, where, "type", "an object", r)
        if r.get("type") == "subagent":
            sub_t = r.get("t", 0.0)
            if not _num(sub_t) or sub_t < 0:
                raise _bad(path, where, "t", "a non-negative number of seconds", sub_t)
            sub_tools, sub_sys = (_top(path, r, where, k, 0) for k in ("tool_tokens", "system_tokens"))
            subagents += 1
            sub_shared = (sub_tools + sub_sys) // block if ids.shared_prefix else 0
            for j, s in enumerate(_entries(path, r, where)):
                req = _request(path, f"{where}.requests[{j}]", s, block, float(sub_t))
                # the prefix is read off the agent's first request; later ones reach it through `local`
                out.append(_keyed(req, ids, local, ("sub", sub_shared if j == 0 else 0), subagents, j == 0))
            continue
        req = _request(path, where, r, block, 0.0)
        out.append(_keyed(req, ids, local, ("main", 0 if main_seen else shared), 0, False))
        main_seen = True
    return AgenticConversation(path.stem, block, tools, system, tuple(out), subagents, shared)


@dataclass(frozen=True)
class _Raw:
    t: float
    streaming: bool
    n_in: int
    n_out: int
    hash_ids: list[int]
    think: float | None
    api: float | None
    tail: bool  # the prompt ends in a partial block (hash_ids cover the full blocks only)


def _request(path: Path, where: str, r: object, block: int, offset: float) -> _Raw:
    if not isinstance(r, dict):
        raise _bad(path, where, "type", "an object", r)
    kind = r.get("type")
    if kind not in ("s", "n"):
        raise _bad(path, where, "type", "s, n or subagent", kind)
    t = r.get("t")
    if not _num(t) or t < 0:
        raise _bad(path, where, "t", "a non-negative number of seconds", t)
    n_in = r.get("in")
    if not _int(n_in) or n_in <= 0:
        raise _bad(path, where, "in", "a positive integer", n_in)
    n_out = r.get("out", 1)
    if not _int(n_out) or n_out < 0:
        raise _bad(path, where, "out", "a non-negative integer", n_out)
    hs = r.get("hash_ids")
    # JSON gives int (bool is its own type): the element types as a set, one C-level pass
    if not isinstance(hs, list) or not set(map(type, hs)) <= {int} or (hs and min(hs) < 0):
        raise _bad(path, where, "hash_ids", "a list of non-negative integers", hs)
    if len(hs) != n_in // block:
        raise HarnessError(
            f"{path}: {where}: hash_ids: {len(hs)} ids, but in {n_in} has {n_in // block} full blocks "
            f"of {block} tokens"
        )
    times = []
    for key in ("think_time", "api_time"):
        v = r.get(key)
        if v is not None and (not _num(v) or v < 0):
            raise _bad(path, where, key, "a non-negative number of seconds", v)
        times.append(None if v is None else float(v))
    return _Raw(offset + float(t), kind == "s", n_in, n_out, hs, times[0], times[1], n_in % block != 0)


def _keyed(
    r: _Raw, ids: IdSpace, local: dict[int, int], shared: tuple[str, int], agent: int, first: bool
) -> AgenticRequest:
    """The request with fleet ids: its tools + system blocks by position when shared, the rest offset."""
    role, n_shared = shared
    for k, h in enumerate(r.hash_ids[:n_shared]):
        local.setdefault(h, ids.shared(role, k))
    keys = [local.get(h, h + ids.base) for h in r.hash_ids] if local else [h + ids.base for h in r.hash_ids]
    if keys:
        ids.top = max(ids.top, max(keys)) if ids.base != ids.GLOBAL_BASE else ids.top
    if r.tail:
        keys.append(ids.tail())
    return AgenticRequest(r.t, r.streaming, r.n_in, r.n_out, tuple(keys), r.think, r.api, agent, first)


def read_fleet(
    path: Path, start: int = 0, limit: int | None = None, shared_prefix: bool = False
) -> list[AgenticConversation]:
    """The conversations [start, start + limit) of a folder (files in name order) or the one file."""
    files = files_of(path)[start : None if limit is None else start + limit]
    if not files:
        raise HarnessError(f"{path}: no conversations from conversation {start} on")
    ids = IdSpace(shared_prefix)
    return [read_conversation(f, ids) for f in files]


def gaps(conv: AgenticConversation, timing: str, api_scale: float = 1.0) -> Iterator[float | None]:
    """Each request's delay after the previous answer (None for the conversation's first): `think` the
    recorded think time, `recorded` the recorded spacing, `api-scaled` the previous request's api_time x
    api_scale + the think time. A sub-agent's first request goes at once; a missing think_time falls
    back to the recorded spacing less the previous api_time."""
    prev: AgenticRequest | None = None
    for r in conv.requests:
        if prev is None:
            yield None
        elif r.first_of_agent:
            yield 0.0
        else:
            spacing = max(0.0, r.recorded_s - prev.recorded_s)
            think = r.think_s if r.think_s is not None else max(0.0, spacing - (prev.api_s or 0.0))
            if timing == "recorded":
                yield spacing
            elif timing == "api-scaled":
                yield (prev.api_s or 0.0) * api_scale + think
            else:
                yield think
        prev = r
