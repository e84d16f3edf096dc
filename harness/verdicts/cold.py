"""Was the cache cold when a point began? From the reset the runner did and from the point's own requests.

A point measured on a cache left warm by earlier points reads a hit rate that is not the workload's
(91.8 % instead of 76.5 % on an engine whose reset endpoint the harness did not call). Two checks:
- the reset: a point is `warm-start` when its cache could not be reset (no endpoint, refused after
  retries, the request failed) and its server was not started fresh for it;
- the first request of each group or session: on a cold cache the one the server serves first shares at
  most one block or page with anything sent before it (the chat template's head and the seed tags every
  prompt of a seed opens with fit in HEAD_SLACK tokens), so the group's least-cached request is held to
  that; finding more is `cache-not-cold`, with the numbers: a reset that answered success but did not
  take shows up here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

# what a point records when the harness made it cold with a fresh server on an empty L3 directory instead
# of a flush (harness.sweep.cold_start); defined with the capture's records, re-exported for readers
from harness.capture.records import STORAGE_COLD_NOTE as STORAGE_COLD_NOTE

HEAD_SLACK = 16  # tokens any two prompts of a run may share: template head + seed tags
STATES = ("cold", "cache-not-cold", "warm-start")  # worst last


@dataclass
class FirstRequests:
    """Per group/session, the least cached of its requests: on a cold cache the one served first found
    (almost) nothing. Served first, not scheduled first: at concurrency > 1 a later prompt of a group can
    reach the server before its position-0 prompt and warm the cache for it."""

    checked: int  # groups/sessions judged
    allowance: int  # tokens a first request may find cached on a cold cache
    block_tokens: int | None  # the server's block/page size when known
    over: list[dict[str, Any]] = field(default_factory=list)  # {unit, index, cached, prompt} above allowance
    unknown: int = 0  # requests whose server did not report cached tokens

    @property
    def cold(self) -> bool:
        return not self.over

    def describe(self) -> str:
        if not self.over:
            return f"the first request of each of {self.checked} groups/sessions found at most {self.allowance} tokens cached"
        worst = max(self.over, key=lambda o: o["cached"])
        return (
            f"{len(self.over)} of {self.checked} groups/sessions found more than {self.allowance} tokens cached "
            f"even on their first request (up to {worst['cached']} of {worst['prompt']}, request {worst['index']})"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["cold"] = self.cold
        return d


def first_requests(rows: Iterable[dict[str, Any]], block_tokens: int | None = None) -> FirstRequests:
    """Each group's (session's) least-cached ok request, held to one block of cache."""
    allowance = max(int(block_tokens or 0), HEAD_SLACK)
    res = FirstRequests(0, allowance, block_tokens)
    least: dict[tuple[str, Any], dict[str, Any]] = {}
    rows = [r for r in rows if r.get("ok")]
    # SGLang reports null for zero cached tokens: null counts as 0 once any request reported a number
    says = any(
        isinstance(r.get("cached_tokens"), int) and not isinstance(r.get("cached_tokens"), bool) for r in rows
    )
    for r in rows:
        if says and r.get("cached_tokens") is None:
            r = {**r, "cached_tokens": 0}
        unit = ("group", r["group"]) if r.get("group") is not None else ("session", r.get("session"))
        if unit[1] is None:
            continue
        cached = r.get("cached_tokens")
        if not isinstance(cached, int) or isinstance(cached, bool):
            res.unknown += 1
            continue
        if unit not in least or cached < least[unit]["cached"]:
            least[unit] = {
                "unit": f"{unit[0]} {unit[1]}",
                "index": r.get("index"),
                "cached": cached,
                "prompt": r.get("prompt_tokens"),
            }
    res.checked = len(least)
    res.over = [v for _, v in sorted(least.items(), key=lambda kv: str(kv[0])) if v["cached"] > allowance]
    return res


def reset_state(point: dict[str, Any] | None) -> tuple[bool, str | None]:
    """(the point began on a reset or fresh cache, why not) from point.json's flush fields."""
    if not point:
        return True, None  # never finished: its status says so; nothing to say about its cache
    if point.get("flushed") is True or point.get("fresh_server") is True:
        return True, None
    note = point.get("flush_note") or (
        "no reset endpoint" if point.get("flushed") is None else "reset failed"
    )
    return False, f"cache not reset: {note}"


# Workloads whose groups/sessions share nothing but the template head and seed tags; a trace's
# conversations may share real prefixes (a common system prompt), so its first requests are not judged.
DISJOINT_KINDS = ("shared-prefix", "multi-turn", "agent")


def cache_state(
    point: dict[str, Any] | None,
    rows: list[dict[str, Any]],
    block_tokens: int | None,
    workload_kind: str | None = None,
) -> dict[str, Any]:
    """`state` (cold / warm-start / cache-not-cold), the flags raised with their reasons, and the first-request check."""
    reset_ok, why = reset_state(point)
    judged = workload_kind is None or workload_kind in DISJOINT_KINDS
    check = first_requests(rows if judged else [], block_tokens)
    flags: dict[str, str] = {}
    if not reset_ok:
        flags["warm-start"] = why or "cache not reset"
    if not check.cold:
        flags["cache-not-cold"] = check.describe()
    state = "warm-start" if "warm-start" in flags else ("cache-not-cold" if flags else "cold")
    return {"state": state, "flags": flags, "first_requests": check.to_dict()}


def worst_state(states: Iterable[str]) -> str:
    """The least trustworthy of several seeds' states."""
    return max(states, key=lambda s: STATES.index(s) if s in STATES else len(STATES), default="cold")
