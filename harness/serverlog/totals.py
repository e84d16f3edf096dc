"""What a log says in sum: pool sizes, prefill totals, and the records inside one point's window."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from harness.serverlog.records import LogRecord


def pool_sizes(records: Iterable[LogRecord]) -> dict[str, Any]:
    """Device and host pool sizes the server reported (the last value of each wins: post-capture resizes)."""
    out: dict[str, Any] = {
        "device_tokens": None,
        "max_total_num_tokens": None,
        "host_tokens": None,
        "host_gb": None,
        "kv_pools": {},
    }
    for r in records:
        if r.kind == "kv_pool" and isinstance(r.fields.get("tokens"), int):
            label = r.fields.get("label") or ""
            out["kv_pools"][label] = r.fields["tokens"]
            if r.fields.get("how") != "VA upper bound":
                out["device_tokens"] = r.fields["tokens"]
        elif r.kind == "scheduler" and isinstance(r.fields.get("max_total_num_tokens"), int):
            out["max_total_num_tokens"] = r.fields["max_total_num_tokens"]
        elif r.kind == "host_pool":
            out["host_gb"] = r.fields.get("gb")
            if r.fields.get("tokens") is not None:
                out["host_tokens"] = r.fields["tokens"]
    return out


def prefill_totals(records: Iterable[LogRecord]) -> dict[str, Any]:
    """Sums over prefill lines: new and cached tokens, and the hit rate cached / (cached + new)."""
    new = cached = n = 0
    for r in records:
        if r.kind != "prefill":
            continue
        n += 1
        new += token_count(r.fields.get("new_token"))
        cached += token_count(r.fields.get("cached_token"))
    total = new + cached
    return {
        "prefill_lines": n,
        "new_tokens": new,
        "cached_tokens": cached,
        "hit_rate": (cached / total) if total else None,
    }


def token_count(v: Any) -> int:
    """A token count from a log field; text where a number belongs (a garbled line) counts as 0."""
    try:
        return int(v or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def in_window(
    records: Iterable[LogRecord], start: float, end: float, slack_s: float = 1.0
) -> Iterator[LogRecord]:
    """Records stamped within [start - slack, end + slack]: 1 s log resolution needs the slack."""
    lo, hi = start - slack_s, end + slack_s
    for r in records:
        if r.wall is not None and lo <= r.wall <= hi:
            yield r
