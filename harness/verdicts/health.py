"""Health verdicts beside the clock verdicts: host-tier-inert, evict-storm, over-eviction, stalled, crashed.

Why: a point can end `ok` while the server misbehaved (sglang#33713, #35129, PR #40748, #30760, #42465).
Each verdict carries its figures and its window; thresholds and what to do: docs/faults.md.
"""

from __future__ import annotations

from typing import Any

from harness.summary.funnel import HealthVerdict, HicacheFunnel

INERT_MIN_TOKENS = 64  # returning tokens off the device before "no host hit" means anything
# evict-storm is judged on the ticks with load-backs only: a storm is load-back evicting others (#35129).
# Each load-back tick is judged up to the next scrape whose KV gauges changed: SGLang refreshes them when it logs
# a batch, so a scrape can see a load-back's evictions beside a free count from before the allocation they made
# room for (a healthy SGLang 0.5.23 on CPU in CI: 2,435 tokens "still free", a false storm). Free space counts
# as excess only when it is still free at the refresh. Measured healthy and the margin: docs/faults.md.
STORM_RATIO = 4.0  # tokens evicted per token the allocations up to the gauges' refresh needed
EXCESS_FRACTION = (
    0.2  # of tokens evicted beside load-backs, the share still free at that tick's end and the next
)
# over-eviction on the other ticks: of their evicted tokens, the share still free at the tick's end;
# node-granular eviction of a healthy pool reaches 0.41-0.54 (whole 400-token nodes for shorter shortfalls)
# and 0.55 (decode steps evicting whole leaves: tests/verdicts/test_health.py), so above it; and at least a
# device pool's worth evicted, so a few evictions after a burst of finishing requests do not count
OVER_EVICTION_FRACTION = 0.6
OVER_EVICTION_POOLS = 1.0
# and the pool kept free at those ticks' ends (weighted by tokens evicted) at least this share of it: a healthy
# pool evicts when it is full, so what is left free is one node's overshoot (measured on the sim: 0.14 under
# decode pressure with 120-token leaves, 0.15 with 400-token nodes in a 1,500-token pool; whole-allocation
# eviction 0.23). Without the pool's size (no pool gauge) this part is not applied.
OVER_EVICTION_FREE_SHARE = 0.2
MIN_EVICTED = 256  # fewer evicted tokens than this: too few to judge a storm or over-eviction


def host_tier_inert(seed: str, f: HicacheFunnel, window: list[float]) -> HealthVerdict | None:
    """Backed up and evicted, prompts returned off the device, and not one host (or L3) hit."""
    if not (f.backed_up_tokens and f.evicted_tokens and f.returning_off_device_tokens):
        return None
    if f.returning_off_device_tokens < INERT_MIN_TOKENS or f.host_hit_tokens or f.storage_hit_tokens:
        return None
    return HealthVerdict(
        verdict="host-tier-inert",
        seed=seed,
        reason=(
            f"{f.backed_up_tokens:.0f} tokens backed up to host and {f.evicted_tokens:.0f} evicted from the "
            f"device; {f.returning_off_device_tokens:.0f} returning prompt tokens were not on the device, and "
            "the host matched none of them"
            + (
                " (returning tokens estimated from the workload's own repeats and the server's prompt tokens)"
                if f.returning_basis == "workload-structure"
                else ""
            )
        ),
        window_s=window,
        figures=f.model_dump(exclude_none=True),
        evidence=f.returning_basis or "token-ids",
    )


def _free(v: dict[str, float]) -> float | None:
    if "kv_available_tokens" in v:
        return v["kv_available_tokens"]
    pool, used, ev = v.get("pool_tokens"), v.get("kv_used_tokens"), v.get("kv_evictable_tokens")
    if pool is None or used is None or ev is None:
        return None
    return max(0.0, pool - used - ev)


GAUGE_FIELDS = ("kv_available_tokens", "kv_used_tokens", "kv_evictable_tokens")


def _until_refresh(rows: list[dict[str, Any]], i: int) -> tuple[float, float, float]:
    """The load-back tick rows[i] -> rows[i+1] merged up to the first later scrape whose KV gauges changed:
    (evicted, needed, free both at the tick's end and at that refresh).

    Why: SGLang sets its KV gauges when it logs a batch's stats, not when it evicts, so the scrape that sees a
    load-back's evictions can show a free count from before the allocation they made room for (a loaded
    CPU host: seconds). Until the gauges move again the free space is not known to have stayed free. Without
    a later refresh the tick stands alone."""
    va, vb = rows[i]["values"], rows[i + 1]["values"]
    fa, fb = _free(va), _free(vb)
    assert fa is not None and fb is not None
    seen = tuple(vb.get(k) for k in GAUGE_FIELDS)
    for r in rows[i + 2 :]:
        vc = r["values"]
        fc = _free(vc)
        if "evicted_tokens" not in vc or fc is None:
            break
        if tuple(vc.get(k) for k in GAUGE_FIELDS) != seen:
            ev = vc["evicted_tokens"] - va["evicted_tokens"]
            return ev, max(0.0, ev - (fc - fa)), min(fb, fc)
    ev = vb["evicted_tokens"] - va["evicted_tokens"]
    return ev, max(0.0, ev - (fb - fa)), fb


def eviction_verdict(seed: str, samples: list[dict[str, Any]], t0: float) -> HealthVerdict | None:
    """evict-storm or over-eviction from the /metrics timeline: per tick, evicted tokens against what the
    pool needed (evicted - growth of free space) and what was still free at the tick's end."""
    by_src: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        if "values" in s:
            by_src.setdefault(str(s.get("source")), []).append(s)
    evicted = needed = excess_lb = excess = 0.0
    evicted_lb = needed_lb = 0.0
    free_share_w = free_share_n = 0.0  # Σ evicted x (free / pool) at eviction ticks' ends, and its Σ evicted
    first = last = None
    peak = pool = 0.0
    for rows in by_src.values():
        for i, (a, b) in enumerate(zip(rows, rows[1:], strict=False)):
            va, vb = a["values"], b["values"]
            if "evicted_tokens" not in va or "evicted_tokens" not in vb:
                continue
            ev = vb["evicted_tokens"] - va["evicted_tokens"]
            fa, fb = _free(va), _free(vb)
            if ev <= 0 or fa is None or fb is None:
                continue
            need = max(0.0, ev - (fb - fa))
            evicted += ev
            needed += need
            pool = max(pool, vb.get("pool_tokens", 0.0))
            loaded = vb.get("load_back_tokens", 0.0) - va.get("load_back_tokens", 0.0)
            if loaded > 0:  # evictions beside load-backs: what a load-back evicted beyond its room
                ev_w, need_w, kept = _until_refresh(rows, i)
                evicted_lb += ev
                needed_lb += need_w * ev / max(ev_w, ev)  # the window's need, in this tick's share
                excess_lb += min(ev, kept)
            else:
                excess += min(ev, fb)
                if vb.get("pool_tokens"):
                    free_share_w += ev * fb / vb["pool_tokens"]
                    free_share_n += ev
            t_a, t_b = a["t_mono"] - t0, b["t_mono"] - t0
            first = t_a if first is None else min(first, t_a)
            last = t_b if last is None else max(last, t_b)
            peak = max(peak, ev / max(t_b - t_a, 1e-6))
    if evicted < MIN_EVICTED or first is None or last is None:
        return None
    ratio = evicted / max(needed, 1.0)
    ratio_lb = evicted_lb / max(needed_lb, 1.0)
    evicted_other = evicted - evicted_lb
    free_share = free_share_w / free_share_n if free_share_n else None
    figures = {
        "evicted_tokens": evicted,
        "needed_tokens": needed,
        "evicted_beside_load_backs_tokens": evicted_lb,
        "ratio_beside_load_backs": round(ratio_lb, 2),
        "free_after_load_back_evictions_tokens": excess_lb,
        "free_after_other_evictions_tokens": excess,
        "free_share_of_pool_after_other_evictions": None if free_share is None else round(free_share, 3),
        "ratio": round(ratio, 2),
        "peak_evicted_per_s": round(peak, 1),
    }
    window = [round(first, 3), round(last, 3)]
    span = f"between {window[0]:.1f} s and {window[1]:.1f} s"
    if evicted_lb >= MIN_EVICTED and (ratio_lb >= STORM_RATIO or excess_lb >= EXCESS_FRACTION * evicted_lb):
        return HealthVerdict(
            verdict="evict-storm",
            seed=seed,
            reason=(
                f"{evicted_lb:.0f} tokens evicted beside load-backs ({ratio_lb:.1f}x what the allocations needed); "
                f"{excess_lb:.0f} of them were still free when the gauges next moved: load-back evicting others, {span}"
            ),
            window_s=window,
            figures=figures,
            evidence="kv-gauges",
        )
    kept_free = free_share is None or free_share >= OVER_EVICTION_FREE_SHARE
    if (
        excess >= OVER_EVICTION_FRACTION * evicted_other
        and evicted_other >= OVER_EVICTION_POOLS * pool
        and kept_free
    ):
        return HealthVerdict(
            verdict="over-eviction",
            seed=seed,
            reason=(
                f"{excess:.0f} of {evicted_other:.0f} evicted tokens were still free at the end of their tick: "
                f"evictions beyond the allocation's shortfall"
                + ("" if free_share is None else f", {free_share:.0%} of the pool left free after them")
                + f", {span}"
            ),
            window_s=window,
            figures=figures,
            evidence="kv-gauges",
        )
    return None


def point_file_verdicts(seed: str, point: dict[str, Any] | None) -> list[HealthVerdict]:
    """stalled (point.json's `stall`) and crashed (point.json's `server_died`, with its exit code)."""
    if not point:
        return []
    out = []
    t0 = point.get("start_mono") or 0.0
    st = point.get("stall")
    if isinstance(st, dict):
        out.append(
            HealthVerdict(
                verdict="stalled",
                seed=seed,
                reason=str(st.get("reason")),
                window_s=[round(st["since_mono"] - t0, 3), round(st["detected_mono"] - t0, 3)],
                figures={k: st[k] for k in ("in_flight", "limit_s", "thread_dump") if k in st},
                evidence="point-file",
            )
        )
    if point.get("server_died"):  # set where the harness saw the process gone (sweep.bench), not from wording
        code = point.get("server_exit_code")
        out.append(
            HealthVerdict(
                verdict="crashed",
                seed=seed,
                reason=str(point.get("failure") or "the server died during the point")[:2000],
                figures={"exit_code": code} if code is not None else {},
                evidence="point-file",
            )
        )
    return out


def summary_health(summary: Any, key: str = "health") -> list[dict[str, Any]]:
    """Every point's health verdicts of a summary (a dict as read from JSON), each with its point named;
    `key="not_judged"`: what could not be judged, and why."""
    out = []
    for p in summary.get("points") or [] if isinstance(summary, dict) else []:
        for v in p.get(key) or []:
            out.append(
                {"experiment": p.get("experiment"), "server": p.get("server"), "sweep": p.get("sweep"), **v}
            )
    return out
