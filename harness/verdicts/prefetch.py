"""The `prefetch-declined` verdict: returning prompts' pages were in L3 and the server did not prefetch them.

Why: SGLang counts an L3 hit it did not fetch in `sglang:storage_prefetch_unfulfilled_tokens_total{reason}`,
and nothing else says so: users see recompute where the store held the pages (sglang#33984, Mooncake#3317:
a prefetch refused past 0.8 x (host - device); PR #40193: a full L3 hit shrunk to the host's free space).
Thresholds and what to do: docs/faults.md.
"""

from __future__ import annotations

from harness.summary.funnel import HealthVerdict, HicacheFunnel

# reasons that are the server declining pages the store held; the others are the policy's own choices
# (below_threshold: SGLang's storage_prefetch_threshold, by design; device_covered: the device had them) or
# timing (storage_transfer, deadline: the policy took what landed), judged elsewhere or not at all
DECLINED = ("host_capacity",)
POLICY = ("below_threshold", "device_covered", "storage_transfer", "deadline")
MIN_DECLINED = 256  # SGLang's default storage_prefetch_threshold: one prefetch's worth
DECLINED_SHARE = 0.2  # of the L3 hits past the threshold (prefetched + declined)

ADVICE = {
    "host_capacity": "the host pool had no room for the prefetch: raise --hicache-ratio / --hicache-size, or "
    "upgrade past the 0.8 x (host - device) limit (sglang#33984, Mooncake#3317; PR #40193)",
}


def prefetch_declined(seed: str, f: HicacheFunnel, window: list[float]) -> HealthVerdict | None:
    """prefetch-declined when the L3 hits the server declined (reason host_capacity, or a reason SGLang
    0.5.23 does not have) reach 256 tokens and a fifth of the hits past the threshold."""
    by = f.storage_unfulfilled_by_reason or {}
    declined = {r: float(v) for r, v in by.items() if r in DECLINED or r not in POLICY}
    total = sum(declined.values())
    prefetched = float(f.storage_prefetched_tokens or 0.0)
    if total < MIN_DECLINED or total < DECLINED_SHARE * (total + prefetched):
        return None
    reasons = ", ".join(f"{v:.0f} {r}" for r, v in sorted(declined.items(), key=lambda kv: -kv[1]))
    top = max(declined, key=lambda r: declined[r])
    advice = ADVICE.get(top, f"SGLang's reason `{top}`: see its HiCache storage prefetch path")
    return HealthVerdict(
        verdict="prefetch-declined",
        seed=seed,
        reason=(
            f"{total:.0f} tokens of returning prompts were in L3 and not prefetched ({reasons}; "
            f"{prefetched:.0f} prefetched): they were recomputed; {advice}"
        ),
        window_s=window,
        figures={
            "declined_tokens": total,
            "declined_by_reason": declined,
            "prefetched_tokens": prefetched,
            "unfulfilled_by_reason": dict(by),
            "deferred_tokens": f.storage_deferred_tokens,
            "backup_dropped_tokens": f.storage_backup_dropped_tokens,
        },
        evidence="counters",
    )
