"""The HiCache tier funnel of one point x seed: counter deltas, the host pool's gauge, and the returning
tokens computed from the prompts the harness sent (harness.whatif.captured rebuilds them exactly).

Why: a hit rate cannot say the host tier did nothing (sglang#33713); the funnel shows where tokens stopped.
"""

from __future__ import annotations

from typing import Any

from harness import metrics
from harness.engines import counters
from harness.errors import HarnessError
from harness.summarize.read import SeedCapture
from harness.summary.funnel import HicacheFunnel

BLOCK = 16  # returning prefixes are counted in whole blocks of this many tokens


def is_hicache(sc: SeedCapture) -> bool:
    """The server ran with a host tier: its host-pool gauge or backup counter is there."""
    for s in (sc.after, sc.before):
        if s is not None and (
            s.get("sglang:hicache_host_total_tokens") is not None
            or s.get(metrics.HICACHE_BACKUP_TOKENS) is not None
        ):
            return True
    return False


def returning_tokens(prompts: list[tuple[int, ...]]) -> int:
    """Σ over prompts of the whole blocks each shares with an earlier prompt (in send order)."""
    seen: set[int] = set()
    total = 0
    for key in prompts:
        h = 0
        matching = True
        for i in range(0, len(key) - BLOCK + 1, BLOCK):
            h = hash((h, key[i : i + BLOCK]))
            if matching and h in seen:
                total += BLOCK
            else:
                matching = False
                seen.add(h)
    return total


def _sent_prompts(sc: SeedCapture) -> tuple[list[tuple[int, ...]] | None, str | None]:
    from harness.whatif.captured import read_capture

    try:
        trace = read_capture(sc.path)
    except (HarnessError, OSError, ValueError, KeyError) as e:
        return None, str(e)[:300]
    return [tuple(r.key) for r in trace.requests], None


def seed_funnel(sc: SeedCapture) -> HicacheFunnel | None:
    """The funnel of a HiCache point x seed; None when the server has no host tier or no scrapes."""
    if not is_hicache(sc) or sc.before is None or sc.after is None:
        return None
    d = metrics.counter_deltas(sc.before, sc.after)
    cf = counters.cache_figures(d)
    by = cf.get("cached_by_source") or {}
    host_hits = by.get("host", 0.0 if cf.get("cached_tokens") is not None else None)
    device = by.get("device", 0.0 if cf.get("cached_tokens") is not None else None)
    backed = cf.get("hicache_backup_tokens")
    used0, used1 = (
        sc.before.get("sglang:hicache_host_used_tokens"),
        sc.after.get("sglang:hicache_host_used_tokens"),
    )
    released = None
    if backed is not None and used0 is not None and used1 is not None:
        released = max(0.0, backed - (used1 - used0))
    f: dict[str, Any] = {
        "backed_up_tokens": backed,
        "evicted_tokens": cf.get("evicted_tokens"),
        "dropped_tokens": cf.get("hicache_dropped_tokens") if backed is not None else None,
        "host_released_tokens": released,
        "host_hit_tokens": host_hits,
        "loaded_back_tokens": cf.get("load_back_tokens"),
        "device_hit_tokens": device,
        "storage_prefetched_tokens": d.total("sglang:prefetched_tokens_total"),
        "storage_hit_tokens": by.get("storage"),
        "storage_written_tokens": d.total(metrics.STORAGE_BACKUPED),
        **_l3_outcomes(d),
    }
    if f["dropped_tokens"] is None and backed is not None:
        f["dropped_tokens"] = 0.0  # labelled: appears only after its first increment
    prompts, why = _sent_prompts(sc)
    if prompts is None:
        f["returning_why_none"] = why
        ret_est = _returning_by_structure(sc, cf.get("prompt_tokens"))
        if ret_est is not None and device is not None:  # the workload's own repeats, in the server's tokens
            f["returning_tokens"] = ret_est
            f["returning_off_device_tokens"] = max(0.0, ret_est - device)
            f["returning_basis"] = "workload-structure"
    else:
        ret = float(returning_tokens(prompts))
        f["returning_tokens"] = ret
        f["returning_off_device_tokens"] = max(0.0, ret - device) if device is not None else None
        f["returning_basis"] = "token-ids"
    return HicacheFunnel.model_validate(f)


def _returning_by_structure(sc: SeedCapture, server_prompt_tokens: float | None) -> float | None:
    """Returning tokens when the ids the server saw are unknown: the share of the prompts' words (as the
    workload built them, in send order) that repeat an earlier prompt's prefix, times the server's own prompt
    token count. Why: a multi-turn history, a shared prefix or a trace's repeated blocks return whatever the
    tokenizer; only the count needs the server's. None when the prompts cannot be rebuilt even as words."""
    from harness.capture import REQUESTS, read_jsonl
    from harness.whatif.captured import captured_point
    from harness.whatif.routing import routing_text
    from harness.workloads import build_schedule
    from harness.workloads.prompts import PromptBuilder, Turnout
    from harness.workloads.tokenizers import load_prompt_maker

    if not server_prompt_tokens:
        return None
    try:
        spec, point = captured_point(sc.path)
        records, _bad = read_jsonl(sc.path / REQUESTS)
        sent = sorted(
            (r for r in records if r.get("sent_mono") is not None and not r.get("warmup")),
            key=lambda r: (r.get("sent_mono") or 0.0, r.get("index", 0)),
        )
        maker = load_prompt_maker(spec.tokenizer)
        schedule = build_schedule(spec, point.workload, int(sent[0].get("seed") or 0) if sent else 0, maker)
    except (HarnessError, OSError, ValueError, KeyError, IndexError):
        return None
    builder = PromptBuilder(schedule, spec.api)
    by_index = {r.index: (c, r, k) for c in schedule.conversations for k, r in enumerate(c.turns)}
    history: dict[int, list[Any]] = {}
    words: dict[str, int] = {}
    prompts: list[tuple[int, ...]] = []
    for rec in sent:
        if rec.get("index") not in by_index:
            return None
        conv, req, place = by_index[rec["index"]]
        hist = history.setdefault(conv.id, [])
        text = routing_text(builder.build(conv, req, hist[:place]).payload)
        prompts.append(tuple(words.setdefault(w, len(words)) for w in text.split()))
        hist.append(Turnout(answer=rec.get("answer") or ""))
    total = sum(len(p) for p in prompts)
    return round(returning_tokens(prompts) / total * float(server_prompt_tokens)) if total else None


L3_UNFULFILLED = "sglang:storage_prefetch_unfulfilled_tokens_total"
L3_DEFERRED = "sglang:storage_prefetch_deferred_tokens_total"
L3_BACKUP_DROPPED = "sglang:hicache_backup_dropped_tokens_total"


def _l3_outcomes(d: Any) -> dict[str, Any]:
    """The L3 prefetch outcomes SGLang 0.5.23 counts beside its prefetches: unfulfilled (by reason),
    deferred, and backups dropped before the write (null where the server has no such counter)."""
    reasons = metrics._label_values(d.deltas, L3_UNFULFILLED, "reason")
    by_reason = {r: v for r in reasons if (v := d.total(L3_UNFULFILLED, reason=r))}
    return {
        "storage_unfulfilled_tokens": d.total(L3_UNFULFILLED),
        "storage_unfulfilled_by_reason": by_reason or None,
        "storage_deferred_tokens": d.total(L3_DEFERRED),
        "storage_backup_dropped_tokens": d.total(L3_BACKUP_DROPPED),
    }


def add_health(point: Any, seeds: list[SeedCapture]) -> None:
    """Point.hicache_funnel ({seed: funnel}, HiCache points) and Point.health (every verdict that applies)."""
    from harness.telemetry.timeline import METRICS_TIMELINE, read_timeline
    from harness.verdicts import coverage, health
    from harness.verdicts.client import client_bound
    from harness.verdicts.prefetch import prefetch_declined

    funnels: dict[str, HicacheFunnel] = {}
    series: dict[str, Any] = {}
    found: list[Any] = []
    gaps: list[Any] = []
    for sc in seeds:
        seed = str(sc.seed)
        t0 = float((sc.point or {}).get("start_mono") or 0.0)
        t1 = float((sc.point or {}).get("end_mono") or t0)
        window = [0.0, round(t1 - t0, 3)]
        found += health.point_file_verdicts(seed, sc.point)
        if (cb := client_bound(seed, sc.point, *_client_times(point, seed))) is not None:
            found.append(cb)
        f = seed_funnel(sc)
        if f is not None:
            funnels[seed] = f
            v = health.host_tier_inert(seed, f, window)
            pd = prefetch_declined(seed, f, window)
            if v is not None and pd is None:  # declined L3 prefetches explain the missing hits: named once
                found.append(v)
            gaps += coverage.inert_gaps(seed, f)
            if pd is not None:
                found.append(pd)
        _, samples = read_timeline(sc.path / METRICS_TIMELINE)
        if (ts := timeline_series(samples, t0)) is not None:
            series[seed] = ts
        ev = health.eviction_verdict(seed, samples, t0)
        if ev is not None:
            found.append(ev)
        missing, by_counters = coverage.eviction_gaps(seed, samples)
        gaps += missing
        if by_counters and ev is None:  # no gauges (or no timeline): the storm from the point's counters
            storm, why = coverage.counter_storm(seed, _point_counters(sc), window)
            found += [storm] if storm is not None else []
            gaps = [g for g in gaps if (g.verdict, g.seed) != ("evict-storm", seed)] + (
                [why] if why is not None else []
            )
    if funnels:
        point.hicache_funnel = funnels
    if series:
        point.metrics_timeline = series  # the page's timeline chart (harness.report.timeline_chart)
    point.health = found
    point.not_judged = gaps or None


def _client_times(point: Any, seed: str) -> tuple[float | None, float | None]:
    """The seed's TTFT p50 and client lateness p99 (s), what `client-bound` weighs the loop lag against."""
    s = point.seeds.get(seed)
    fig = s.figures if s is not None else None
    lat = fig.latency if fig is not None else None
    ttft = lat.ttft_s.p50 if lat is not None else None
    late = fig.client_late_s.p99 if fig is not None and fig.client_late_s is not None else None
    num = (int, float)
    return (float(ttft) if isinstance(ttft, num) else None, float(late) if isinstance(late, num) else None)


def _point_counters(sc: SeedCapture) -> dict[str, Any] | None:
    """The point's counter figures (before/after /metrics), or None without both scrapes."""
    if sc.before is None or sc.after is None:
        return None
    return counters.cache_figures(metrics.counter_deltas(sc.before, sc.after))


SERIES_POINTS = 300


def timeline_series(samples: list[dict[str, Any]], t0: float) -> dict[str, list[float | None]] | None:
    """The first source's timeline, thinned for the page's chart (seconds since the point began)."""
    src = next((s.get("source") for s in samples if "values" in s), None)
    rows = [s for s in samples if s.get("source") == src and "values" in s]
    if len(rows) < 2:
        return None
    step = max(1, -(-len(rows) // SERIES_POINTS))
    rows = rows[::step]
    out: dict[str, list[float | None]] = {k: [] for k in ("t_s", "token_usage_pct", "host_used_pct", "running",
                                                            "queued", "evicted_per_s", "load_back_per_s", "backup_per_s")}  # fmt: skip
    for r in rows:
        v, rt = r["values"], r.get("rates") or {}
        host = v.get("host_total_tokens")
        out["t_s"].append(round(r["t_mono"] - t0, 3))
        out["token_usage_pct"].append(100 * v["token_usage"] if "token_usage" in v else None)
        out["host_used_pct"].append(100 * v.get("host_used_tokens", 0) / host if host else None)
        out["running"].append(v.get("running"))
        out["queued"].append(v.get("queued"))
        for k, f in (("evicted_per_s", "evicted_tokens"), ("load_back_per_s", "load_back_tokens"), ("backup_per_s", "backup_tokens")):  # fmt: skip
            out[k].append(rt[f] / 100 if f in rt else None)
    return out
