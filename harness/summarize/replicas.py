"""The figures of a replicas profile's point: every worker's own, their sums, the load skew, the gateway's.

Each request is tied to its worker by the gateway's `x-smg-routed-worker-id` response header (the
worker's URL, mapped to its name through point.json's `workers`). Each worker's log slice and counter
deltas are its own; the point's log and counter hit rates are their sums (harness.summarize.summary).
Attribution is checked: a worker's prompt tokens by header must equal its own counters' delta.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from harness import metrics, serverlog
from harness.summarize.figures import counter_figures, is_num, request_figures, slice_log, tz_shift
from harness.summarize.modelled import from_records
from harness.summarize.read import SeedCapture, ServerCapture
from harness.summary.figures import Figures
from harness.telemetry.stats import point_stats
from harness.verdicts.clocks import point_verdict

ATTRIBUTION = "x-smg-routed-worker-id response header (smg)"
SKEW_NOTE_AT = 1.5  # a worker with more than this x the mean prefill work gets a `load-skew` note
UNATTRIBUTED = "unattributed"
_CLOCK_ORDER = ("thermal", "hw-slowdown", "power-brake", "below-floor", "no-telemetry", "ok")  # worst first
# the gateway's counters a point keeps (deltas): routing decisions, requests, answers, retries
ROUTER_FAMILIES = (
    "smg_router_requests_total",
    "smg_worker_selection_total",
    "smg_router_upstream_responses_total",
    "smg_cache_aware_policy_branch_total",
    "smg_worker_retries_total",
)
Slices = dict[Path, tuple[list[serverlog.LogRecord], str]]


def worker_slices(srv: ServerCapture) -> dict[str, Slices]:
    """Each worker's log records of each point (slice_log on its own log: its own flush lines)."""
    out: dict[str, Slices] = {}
    seeds = list(srv.seeds.values())
    for name, w in srv.workers.items():
        if w.log is None:
            continue
        mine = [dataclasses.replace(sc, log=w.log) for sc in seeds]
        out[name] = slice_log(w.log, mine, tz_shift(w.log, mine))
    return out


def merged_slices(per_worker: dict[str, Slices]) -> dict[Path, tuple[Any, float]]:
    """The point's records over all workers (what the log hit rate sums), keyed as summary.py's slices."""
    out: dict[Path, tuple[Any, float]] = {}
    paths = {p for sl in per_worker.values() for p in sl}
    for path in paths:
        recs: list[serverlog.LogRecord] = []
        hows = []
        for _name, sl in sorted(per_worker.items()):
            if path in sl:
                recs += sl[path][0]
                hows.append(sl[path][1])
        how = (
            f"each worker's log, {hows[0]}"
            if len(set(hows)) == 1
            else "each worker's log: " + "; ".join(hows)
        )
        out[path] = ((recs, how), 0.0)
    return out


def replica_figures(sc: SeedCapture, srv: ServerCapture, per_worker: dict[str, Slices]) -> Figures:
    """`workers` {name: figures}, `load_skew`, attribution and its check, cross-replica storage hits, and
    the gateway's counters, for one point x seed."""
    urls = {str(u).rstrip("/"): n for n, u in ((sc.point or {}).get("workers") or {}).items()}
    by_worker: dict[str, list[dict[str, Any]]] = {n: [] for n in srv.workers}
    for r in sc.requests:
        name = urls.get(str(r.get("worker") or "").rstrip("/"), UNATTRIBUTED)
        by_worker.setdefault(name, []).append(r)
    cross = _cross_replica_storage(sc.requests, urls)
    workers: dict[str, dict[str, Any]] = {}
    for name, rows in by_worker.items():
        if name == UNATTRIBUTED:
            continue
        workers[name] = _one_worker(sc, name, rows, per_worker.get(name, {}).get(sc.path), cross.get(name))
    fig: dict[str, Any] = {
        "workers": workers,
        "attribution": ATTRIBUTION,
        "requests_unattributed": len(by_worker.get(UNATTRIBUTED, [])),
    }
    worker_clocks(workers, sc, (srv.replicas or {}).get("gpus") or {})
    fig.update(_skew(workers))
    fig.update(_attribution_check(workers))
    fig["storage_hits_cross_replica"] = sum(c["requests"] for c in cross.values()) if cross else 0
    fig["router_counters"] = _router_counters(sc)
    return Figures.model_validate(fig)


def _one_worker(
    sc: SeedCapture,
    name: str,
    rows: list[dict[str, Any]],
    sliced: tuple[list[serverlog.LogRecord], str] | None,
    cross: dict[str, int] | None,
) -> dict[str, Any]:
    req = request_figures(rows)
    out: dict[str, Any] = {
        k: req.get(k)
        for k in (
            "requests",
            "ok",
            "prompt_tokens",
            "cached_tokens",
            "hit_rate_usage",
            "cached_host_tokens",
            "cached_storage_tokens",
        )
    }
    out["ttft_p50_s"] = req.get("ttft_median_s")
    out["ttft_p99_s"] = req.get("ttft_p99_s")
    modelled = from_records(rows)
    if modelled is not None:
        out["modelled_ttft_p50_ms"] = (modelled.get("ttft_ms") or {}).get("p50")
        out["modelled_ttft_p99_ms"] = (modelled.get("ttft_ms") or {}).get("p99")
    if sliced is not None:
        tot = serverlog.prefill_totals(r for r in sliced[0] if r.kind == "prefill")
        out["log_new_tokens"] = tot["new_tokens"]
        out["log_cached_tokens"] = tot["cached_tokens"]
        out["hit_rate_log"] = tot["hit_rate"]
    before, after = sc.worker_scrapes.get(name, (None, None))
    cf = counter_figures(dataclasses.replace(sc, before=before, after=after))
    out["hit_rate_counters"] = cf.get("hit_rate_counters")
    for k in ("counter_prompt_tokens", "counter_cached_tokens", "counter_cached_host_tokens"):
        out[k] = cf.get(k)
    out["counter_cached_storage_tokens"] = cf.get("counter_cached_storage_tokens")
    out["prefill_tokens"] = _prefill_work(out)
    out["storage_hits_cross_replica"] = (cross or {}).get("requests", 0)
    out["storage_tokens_cross_replica"] = (cross or {}).get("tokens", 0)
    return out


def worker_clocks(workers: dict[str, dict[str, Any]], sc: SeedCapture, gpus: dict[str, Any]) -> None:
    """Each worker's clock verdict on its own GPUs' samples (its CUDA_VISIBLE_DEVICES, by NVML index or
    UUID): one throttled card among the replicas is named, not averaged into the point's."""
    rows = sc.telemetry or []
    header = [r for r in rows if r.get("kind") == "header"]
    for name, fig in workers.items():
        mine = {g.strip() for g in str(gpus.get(name) or "").split(",") if g.strip()}
        if not mine:
            continue
        samples = [r for r in rows if r.get("kind", "sample") == "sample"
                   and (str(r.get("gpu")) in mine or str(r.get("uuid")) in mine)]  # fmt: skip
        stats = point_stats(header + samples)
        verdict = point_verdict(stats)
        fig["gpus"] = ",".join(sorted(mine))
        fig["busy_median_sm_clock_mhz"] = stats.get("busy_median_sm_clock_mhz")
        fig["clock_verdict"] = verdict["verdict"]
        fig["clock_reasons"] = [str(x) for x in verdict["reasons"]]


def _prefill_work(w: dict[str, Any]) -> float | None:
    """Tokens the worker prefilled (computed, not cached): its log's #new-token, else counters, else usage;
    none for a worker the router sent nothing (cache_aware may keep one prefix on one worker): its share is 0
    and the skew counts it, rather than going unknown at its worst."""
    if w.get("requests") == 0:
        return 0.0
    if is_num(w.get("log_new_tokens")) and w.get("hit_rate_log") is not None:
        return float(w["log_new_tokens"])
    for p, c in (("counter_prompt_tokens", "counter_cached_tokens"), ("prompt_tokens", "cached_tokens")):
        if is_num(w.get(p)):
            return float(w[p]) - float(w.get(c) or 0)
    return None


def _skew(workers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each worker's share of the prefill work and the skew max / mean; a note past SKEW_NOTE_AT."""
    work = {n: w["prefill_tokens"] for n, w in workers.items() if is_num(w.get("prefill_tokens"))}
    total = sum(work.values())
    if len(work) < len(workers) or not work or total <= 0:
        return {"load_skew": None}
    for n, v in work.items():
        workers[n]["prefill_share"] = v / total
    mean = total / len(workers)
    top = max(work, key=lambda n: work[n])
    skew = work[top] / mean
    out: dict[str, Any] = {"load_skew": skew, "load_skew_worker": top}
    if skew > SKEW_NOTE_AT:
        out["load_skew_note"] = (
            f"load-skew: {top} took {skew:.2f}x the mean prefill work ({work[top] / total:.0%} of it)"
        )
    return out


def replicas_median(median: dict[str, Any], seeds: list[dict[str, Any]]) -> None:
    """Over seeds, in place: the skew note from the median skew (a string has no median), and attribution
    agrees only when every seed's did (merge_seeds or-s flags)."""
    skew, workers = median.get("load_skew"), median.get("workers") or {}
    if is_num(skew) and skew > SKEW_NOTE_AT and workers:
        top = max(workers, key=lambda n: float(workers[n].get("prefill_share") or 0))
        share = float(workers[top].get("prefill_share") or 0)
        median["load_skew_note"] = (
            f"load-skew: {top} took {skew:.2f}x the mean prefill work ({share:.0%} of it; median over seeds)"
        )
    flags = [f["attribution_agrees"] for f in seeds if f.get("attribution_agrees") is not None]
    if flags:
        median["attribution_agrees"] = all(flags)
    for (
        name,
        w,
    ) in workers.items():  # a worker's clock: its worst seed's verdict (a throttle is not averaged away)
        per_seed = [(f.get("workers") or {}).get(name) or {} for f in seeds]
        said = [s for s in per_seed if s.get("clock_verdict")]
        if said:
            worst = min(said, key=lambda s: _CLOCK_ORDER.index(s["clock_verdict"])
                        if s["clock_verdict"] in _CLOCK_ORDER else 0)  # fmt: skip
            w.update({"gpus": worst.get("gpus"), "clock_verdict": worst["clock_verdict"]})
            w["clock_reasons"] = list(worst.get("clock_reasons") or [])


def _attribution_check(workers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each worker's prompt tokens by the header against its own prompt-token counter delta."""
    off = []
    checked = 0
    for n, w in workers.items():
        a, b = w.get("prompt_tokens"), w.get("counter_prompt_tokens")
        if not (is_num(a) and is_num(b)):
            continue
        checked += 1
        if abs(float(a) - float(b)) > 0.5:
            off.append(f"{n}: {a:g} prompt tokens by header, {b:g} by its counters")
    if not checked:
        return {"attribution_agrees": None}
    out: dict[str, Any] = {"attribution_agrees": not off}
    if off:
        out["attribution_mismatch"] = "; ".join(off)
    return out


def _cross_replica_storage(rows: list[dict[str, Any]], urls: dict[str, str]) -> dict[str, dict[str, int]]:
    """Storage (L3) hits on a worker that never served the request's group or session before in the
    point: the pages another replica wrote. {worker: {requests, tokens}}."""
    seen: set[tuple[str, str]] = set()
    out: dict[str, dict[str, int]] = {}
    ordered = sorted(rows, key=lambda r: float(r.get("sent_mono") or r.get("scheduled_mono") or 0.0))
    for r in ordered:
        name = urls.get(str(r.get("worker") or "").rstrip("/"))
        prefix = _prefix_key(r)
        if name is None or prefix is None:
            continue
        stored = r.get("cached_storage")
        if r.get("ok") and is_num(stored) and stored > 0 and (name, prefix) not in seen:
            c = out.setdefault(name, {"requests": 0, "tokens": 0})
            c["requests"] += 1
            c["tokens"] += int(stored)
        seen.add((name, prefix))
    return out


def _prefix_key(r: dict[str, Any]) -> str | None:
    if r.get("group") is not None:
        return f"group {r['group']}"
    if r.get("session") is not None:
        return f"session {r['session']}"
    return None


def _router_counters(sc: SeedCapture) -> dict[str, float]:
    """The gateway's counter deltas over the point, `family{label=value,...}` -> count (non-zero only)."""
    before, after = sc.router_scrapes
    if before is None or after is None:
        return {}
    d = metrics.counter_deltas(before, after)
    out: dict[str, float] = {}
    for (name, labels), v in sorted(d.deltas.items()):
        if name in ROUTER_FAMILIES and v:
            keep = ",".join(f"{k}={val}" for k, val in labels if val and k not in ("connection_mode",))
            key = f"{name}{{{keep}}}" if keep else name
            out[key] = out.get(key, 0.0) + float(v)
    return out
