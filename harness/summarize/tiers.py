"""Cached tokens by tier (device, host, storage): whether each source's split adds up to its total, and
L3 prefetch outcomes by reason, from the counters SGLang 0.5.23 exports with a storage backend.

Sources: usage (`cached_tokens_details` per request: `cached_<tier>_tokens` beside `cached_tokens`) and
counters (`sglang:cached_tokens_total{cache_source}`: `counter_cached_<tier>_tokens` beside
`counter_cached_tokens`). SGLang's log line has one `#cached-token` for all tiers, so it has no split.
What the host and storage hits cost to bring onto the device (`host_tier_seconds`, `storage_tier_seconds`)
comes from the card the server states (the sim's server_info `card`: harness.sim.tier_time's model).
"""

from __future__ import annotations

from typing import Any

from harness import metrics
from harness.summarize.read import SeedCapture
from harness.summary.figures import Figures
from harness.verdicts.cold import STORAGE_COLD_NOTE as COLD_NOTE

TIERS = ("device", "host", "storage")
UNFULFILLED = "sglang:storage_prefetch_unfulfilled_tokens_total"
PREFETCHED = "sglang:prefetched_tokens_total"


def split_adds_up(total: float | None, parts: list[float | None]) -> bool | None:
    """Whether the tiers sum to the total; None when there is no split to check."""
    if total is None or all(p is None for p in parts):
        return None
    return abs(sum(p or 0 for p in parts) - total) < 0.5


def cold_start(point: dict[str, Any] | None) -> str | None:
    """How the point began cold: a flush, a fresh server, or (L3 servers, harness.sweep.cold_start) a fresh
    server on an empty storage directory; None when it did not."""
    if not point:
        return None
    if point.get("flush_note") == COLD_NOTE and point.get("fresh_server"):
        return "fresh server, empty storage directory"
    if point.get("flushed") is True:
        return "flush"
    if point.get("fresh_server"):
        return "fresh server"
    return None


def tier_seconds(fig: Figures, info: dict[str, Any] | None) -> dict[str, float]:
    """Seconds the point's host and storage hits cost to copy onto the device, summed over requests and not
    overlapped with compute, on the card server_info states ({} when it states none: a real server)."""
    from harness.sim.storage import BACKENDS

    card = info.get("card") if isinstance(info, dict) else None
    if not isinstance(card, dict):
        return {}
    kv, link = card.get("kv_bytes_per_token"), card.get("h2d_gb_per_s")
    if not isinstance(kv, int) or not isinstance(link, int | float) or kv <= 0 or link <= 0:
        return {}
    assert isinstance(info, dict)
    if str(info.get("kv_cache_dtype") or "auto").startswith("fp8"):
        kv //= 2

    def host_s(tokens: float) -> float:
        return tokens * kv / (link * 1e9)

    out: dict[str, float] = {}
    host = fig.cached_host_tokens
    if isinstance(host, int | float):
        out["host_tier_seconds"] = host_s(host)
    storage, backend = (
        fig.cached_storage_tokens,
        BACKENDS.get(str(info.get("hicache_storage_backend"))),
    )
    if isinstance(storage, int | float) and backend is not None:
        page = int(info.get("page_size") or 1)
        out["storage_tier_seconds"] = backend.read_time(int(storage), kv, page) + host_s(storage)
    return out


def tier_figures(fig: Figures, sc: SeedCapture, info: dict[str, Any] | None = None) -> Figures:
    """`tiers_add_up_usage`, `tiers_add_up_counters`, the tiers' copy seconds (`tier_seconds`), and with L3
    counters `counter_prefetched_tokens` and `counter_storage_unfulfilled_<reason>_tokens` (only reasons
    that moved)."""
    usage = [fig.cached_device_tokens, fig.cached_host_tokens, fig.cached_storage_tokens]
    out: dict[str, Any] = {
        "cold_start": cold_start(sc.point),
        "tiers_add_up_usage": split_adds_up(fig.cached_tokens, usage),
        "tiers_add_up_counters": None,
        **tier_seconds(fig, info),
    }
    labelled = [
        fig.counter_cached_device_tokens,
        fig.counter_cached_host_tokens,
        fig.counter_cached_storage_tokens,
    ]
    if any(v is not None for v in labelled):
        out["tiers_add_up_counters"] = split_adds_up(fig.counter_cached_tokens, labelled)
    if sc.before is None or sc.after is None:
        return Figures.model_validate(out)
    d = metrics.counter_deltas(sc.before, sc.after)
    prefetched = d.total(PREFETCHED)
    if prefetched is not None:
        out["counter_prefetched_tokens"] = prefetched
    other: dict[str, float] = {}
    for reason in metrics._label_values(d.deltas, UNFULFILLED, "reason"):
        v = d.total(UNFULFILLED, reason=reason)
        if v and reason in UNFULFILLED_FIGURES:
            out[UNFULFILLED_FIGURES[reason]] = v
        elif v:
            other[reason] = v
    if other:
        out["counter_storage_unfulfilled_other_tokens"] = other
    return Figures.model_validate(out)


# the unfulfilled-prefetch counter's reasons (SGLang's, which the sim mirrors), each with its declared figure
UNFULFILLED_FIGURES = {
    "below_threshold": "counter_storage_unfulfilled_below_threshold_tokens",
    "host_capacity": "counter_storage_unfulfilled_host_capacity_tokens",
    "device_covered": "counter_storage_unfulfilled_device_covered_tokens",
    "storage_transfer": "counter_storage_unfulfilled_storage_transfer_tokens",
    "deadline": "counter_storage_unfulfilled_deadline_tokens",
}
