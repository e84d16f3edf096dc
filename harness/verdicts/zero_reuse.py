"""The zero-reuse control (`salt: per-request`): every prompt was unique from its first token, so a
request that found more than one page cached means the cache was not cold, or the server counts as
cached something it did not reuse (a BOS token, a template's opening, a stale slot)."""

from __future__ import annotations

from typing import Any

FLAG = "salted-hits"


def cached_of(row: dict[str, Any]) -> int:
    """The tokens a request found cached: usage's cached_tokens, else llama.cpp's timings.cache_n."""
    c = row.get("cached_tokens")
    if isinstance(c, int | float) and not isinstance(c, bool):
        return int(c)
    t = row.get("server_timings")
    n = t.get("cache_n") if isinstance(t, dict) else None
    return int(n) if isinstance(n, int | float) and not isinstance(n, bool) else 0


def salted_hits(rows: list[dict[str, Any]], block_tokens: int | None) -> str | None:
    """Why a salted point is flagged, or None: its ok requests each found at most one page cached."""
    page = block_tokens if block_tokens and block_tokens > 0 else 1
    ok = [r for r in rows if r.get("ok") and not r.get("warmup")]
    over = [cached_of(r) for r in ok if cached_of(r) > page]
    if not over:
        return None
    return (
        f"{len(over)} of {len(ok)} salted requests found more than one page ({page} tokens) cached "
        f"(up to {max(over)}): the cache was not cold, or the server counts tokens it did not reuse"
    )
