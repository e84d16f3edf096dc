"""The HiCache tier funnel and the health verdicts as typed summary records (Point.hicache_funnel, .health,
.not_judged).

Why apart from model.py: the funnel and the verdicts are computed by harness.summarize.funnel and
harness.verdicts.health and hooked onto a point in one place; these are the shapes every reader shares.
"""

from __future__ import annotations

from pydantic import Field

from harness.summary.record import JsonObject, Num, Record


class HicacheFunnel(Record):
    """Tokens through the tiers over one point x seed (counter deltas; null where the server has no counter)."""

    backed_up_tokens: Num | None = Field(None, description="device -> host copies (hicache_backup_tokens)")
    evicted_tokens: Num | None = Field(None, description="evicted from the device (evicted_tokens)")
    dropped_tokens: Num | None = Field(
        None, description="device KV destroyed with no host copy (hicache_dropped_tokens)"
    )
    host_released_tokens: Num | None = Field(
        None, description="backed up minus the growth of the host pool's use: what the host let go"
    )
    host_hit_tokens: Num | None = Field(
        None, description='matched on the host (cached_tokens{cache_source="host"})'
    )
    loaded_back_tokens: Num | None = Field(None, description="host -> device loads (load_back_tokens)")
    device_hit_tokens: Num | None = Field(None, description="matched on the device")
    storage_prefetched_tokens: Num | None = Field(
        None, description="L3 -> host prefetches (prefetched_tokens)"
    )
    storage_hit_tokens: Num | None = Field(None, description='matched in L3 (cache_source="storage")')
    storage_written_tokens: Num | None = Field(
        None, description="host -> L3 writes acknowledged (sglang:backuped_tokens_total)"
    )
    storage_unfulfilled_tokens: Num | None = Field(
        None,
        description="L3 hits that did not become a usable prefetch, every reason "
        "(sglang:storage_prefetch_unfulfilled_tokens_total)",
    )
    storage_unfulfilled_by_reason: dict[str, Num] | None = Field(
        None, description="the same by SGLang's `reason` label (only reasons that moved)"
    )
    storage_deferred_tokens: Num | None = Field(
        None,
        description="prefetch tokens put off for capacity, a token counted on each try "
        "(sglang:storage_prefetch_deferred_tokens_total)",
    )
    storage_backup_dropped_tokens: Num | None = Field(
        None,
        description="host -> L3 writes refused before they started (sglang:hicache_backup_dropped_tokens_total)",
    )
    returning_tokens: Num | None = Field(
        None,
        description="prompt tokens the harness had sent before (the prefix each prompt shares with an earlier one)",
    )
    returning_off_device_tokens: Num | None = Field(
        None, description="returning tokens the device did not serve: what the host should have held"
    )
    returning_why_none: str | None = None
    returning_basis: str | None = Field(
        None,
        description="`token-ids` (the ids sent, rebuilt exactly) or `workload-structure` (ids unknown: the share "
        "of the workload's own words that repeat an earlier prompt, times the server's prompt token count)",
    )


class HealthVerdict(Record):
    """One health verdict of one seed, with its figures and the time window (s since the point began)."""

    verdict: str = Field(
        description="host-tier-inert, evict-storm, over-eviction, stalled, crashed, client-bound or prefetch-declined"
    )
    seed: str
    reason: str
    window_s: list[Num] | None = None
    figures: JsonObject = Field(default_factory=dict)
    evidence: str | None = Field(
        None,
        description="what it rests on: `kv-gauges` (the /metrics timeline's KV gauges per scrape), `counters` "
        "(counter deltas over the point), `token-ids` (the prompts sent), `point-file` (point.json)",
    )


class NotJudged(Record):
    """A health verdict that could not be judged on one seed, and why: so an empty `health` never reads as healthy."""

    verdict: str = Field(description="host-tier-inert, evict-storm or over-eviction")
    seed: str
    why: str
