"""Figures of one point x seed: from its request records, its slice of the server log, its counters.

Each source of a hit rate (usage, server timings, log prefill lines, counters) is computed here, once;
`hit_rate_agreement` flags sources further apart than DISAGREE_POINTS.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import pandas as pd

from harness import metrics, serverlog
from harness.engines import counters
from harness.engines.log_figures import engine_log_figures
from harness.summarize.classes import class_figures
from harness.summarize.latency import goodput, latency_figures
from harness.summarize.read import SeedCapture
from harness.summary.figures import Figures
from harness.telemetry.stats import point_stats, prefill_windows
from harness.whatif.per_conversation import per_conversation_hit_rate

DISAGREE_POINTS = 2.0  # hit-rate sources further apart than this (percentage points) are flagged
EVIDENCE_LINES = 4
SERIES_POINTS = 300  # SM clock samples kept per seed for the chart


def is_num(v: Any) -> TypeGuard[float]:
    """A real number (an int or a float that is not NaN), never a bool: what a figure may average."""
    return (
        isinstance(v, int | float)
        and not isinstance(v, bool)
        and not (isinstance(v, float) and math.isnan(v))
    )


# ---------------------------------------------------------------- figures of one seed


def _quantile(s: pd.Series, q: float) -> float | None:
    s = s.dropna()
    return float(s.quantile(q)) if len(s) else None


def _hit(cached: pd.Series, prompt: pd.Series) -> float | None:
    p = float(prompt.sum())
    return float(cached.sum()) / p if p > 0 else None


def _usage_cached(ok: pd.DataFrame) -> pd.Series | None:
    """Cached tokens per request; None when the server never said (SGLang reports null for zero)."""
    if "cached_tokens" not in ok or ok["cached_tokens"].isna().all():
        return None
    return ok["cached_tokens"].fillna(0).astype(float)


def _timings_hit(ok: pd.DataFrame) -> float | None:
    """Σ cache_n / Σ (cache_n + prompt_n) over requests whose server_timings give both (llama.cpp)."""
    if "server_timings" not in ok:
        return None
    cached = prompt = 0.0
    for t in ok["server_timings"]:
        c = t.get("cache_n") if isinstance(t, dict) else None
        n = t.get("prompt_n") if isinstance(t, dict) else None
        if is_num(c) and is_num(n):
            cached += c
            prompt += c + n
    return cached / prompt if prompt > 0 else None


def request_figures(
    rows: list[dict[str, Any]],
    slo: dict[str, float] | None = None,
    scheduled: int | None = None,
    agent: bool = False,
) -> Figures:
    """Latency, throughput, goodput and hit-rate figures (usage, server timings) of one point x seed
    from its measured records; scheduled: the requests goodput is a fraction of (default: the rows);
    agent: an agent workload's (figures by step depth too)."""
    df = pd.DataFrame(rows)
    fig: dict[str, Any] = {"requests": len(df), "ok": 0, "failures": 0}
    if df.empty:
        return Figures.model_validate(fig)
    for col in (
        "ok",
        "ttft_s",
        "e2e_s",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "turn",
        "position",
    ):
        if col not in df:
            df[col] = None
    okmask = df["ok"].fillna(False).astype(bool)
    ok = df[okmask].copy()
    fig["ok"] = int(okmask.sum())
    fig["failures"] = int((~okmask).sum())
    if "error_kind" in df and fig["failures"]:
        fig["errors"] = {
            str(k): int(v) for k, v in df.loc[~okmask, "error_kind"].fillna("unknown").value_counts().items()
        }
    ttft = pd.to_numeric(ok["ttft_s"], errors="coerce")
    fig["ttft_median_s"] = _quantile(ttft, 0.5)
    fig["ttft_p90_s"] = _quantile(ttft, 0.9)
    fig["ttft_p99_s"] = _quantile(ttft, 0.99)
    gaps = [
        np.diff(np.asarray(t, dtype=float))
        for t in ok.get("token_mono", [])
        if isinstance(t, list) and len(t) > 1
    ]
    itl = pd.Series(np.concatenate(gaps)) if gaps else pd.Series(dtype=float)
    fig["itl_median_s"] = _quantile(itl, 0.5)
    fig["itl_p99_s"] = _quantile(itl, 0.99)
    fig["e2e_median_s"] = _quantile(pd.to_numeric(ok["e2e_s"], errors="coerce"), 0.5)
    # throughput over the span from the first scheduled send to the last completion
    span = None
    if "scheduled_mono" in df and "done_mono" in df:
        start = pd.to_numeric(df["scheduled_mono"], errors="coerce").min()
        end = pd.to_numeric(df["done_mono"], errors="coerce").max()
        if pd.notna(start) and pd.notna(end) and end > start:
            span = float(end - start)
    fig["duration_s"] = span
    out_tok = pd.to_numeric(ok["completion_tokens"], errors="coerce").fillna(0)
    in_tok = pd.to_numeric(ok["prompt_tokens"], errors="coerce").fillna(0)
    fig["output_tokens"] = int(out_tok.sum())
    fig["prompt_tokens"] = int(in_tok.sum())
    fig["output_tok_s"] = float(out_tok.sum()) / span if span else None
    fig.update(latency_figures(df, okmask, span))
    fig["goodput"] = goodput(df, okmask, span, slo, scheduled if scheduled is not None else len(df))
    fig["input_tok_s"] = float(in_tok.sum()) / span if span else None
    cached = _usage_cached(ok)
    fig["cached_tokens"] = int(cached.sum()) if cached is not None else None
    fig["hit_rate_usage"] = _hit(cached, in_tok) if cached is not None else None
    fig["hit_rate_timings"] = _timings_hit(ok)
    fig["cached_device_tokens"] = _tier_sum(ok, "cached_device")
    fig["cached_host_tokens"] = _tier_sum(ok, "cached_host")
    fig["cached_storage_tokens"] = _tier_sum(ok, "cached_storage")
    by_turn = _by_key(ok, "turn", cached, at_least=2)
    if by_turn is not None:
        fig["hit_rate_usage_by_turn"], fig["ttft_median_s_by_turn"] = by_turn
    if cached is not None and "session" in ok and ok["session"].notna().any():
        sessions = (None if pd.isna(v) else int(v) for v in ok["session"])
        fig["per_conversation_hit_rate"] = per_conversation_hit_rate(
            zip(sessions, cached, in_tok, strict=True)
        )
    by_position = _by_key(ok, "position", cached, at_least=1)
    if by_position is not None:
        fig["hit_rate_usage_by_position"], fig["ttft_median_s_by_position"] = by_position
    fig.update(class_figures(ok, cached, agent))
    return Figures.model_validate(fig)


def _tier_sum(ok: pd.DataFrame, col: str) -> int | None:
    """Σ of a usage tier split (`cached_host`, …) over ok requests; None when no request gave it."""
    return int(ok[col].fillna(0).sum()) if col in ok and not ok[col].isna().all() else None


Keyed = dict[str, float | None]


def _by_key(ok: pd.DataFrame, by: str, cached: pd.Series | None, at_least: int) -> tuple[Keyed, Keyed] | None:
    """Hit rate and median TTFT per value of `by` (turn, position); None with fewer than `at_least` values."""
    keyed = ok[ok[by].notna()]
    if keyed.empty or keyed[by].nunique() < at_least:
        return None
    hits: Keyed = {}
    ttfts: Keyed = {}
    for key, g in keyed.groupby(keyed[by].astype(int)):
        gp = pd.to_numeric(g["prompt_tokens"], errors="coerce").fillna(0)
        gc = cached.loc[g.index] if cached is not None else None
        hits[str(key)] = _hit(gc, gp) if gc is not None else None
        ttfts[str(key)] = _quantile(pd.to_numeric(g["ttft_s"], errors="coerce"), 0.5)
    return hits, ttfts


HIT_RATE_SOURCES = ("hit_rate_usage", "hit_rate_timings", "hit_rate_log", "hit_rate_counters")
# the source label values of each engine's cached-token counters (harness.engines.counters), each with
# its declared figure
COUNTER_SOURCES = {
    "device": "counter_cached_device_tokens",
    "host": "counter_cached_host_tokens",
    "storage": "counter_cached_storage_tokens",
    "local_cache_hit": "counter_cached_local_cache_hit_tokens",
    "external_kv_transfer": "counter_cached_external_kv_transfer_tokens",
}


def hit_rate_agreement(fig: Figures) -> Figures:
    """How many hit-rate sources the seed has, how far apart they are, and whether that is too far."""
    found = (fig.hit_rate_usage, fig.hit_rate_timings, fig.hit_rate_log, fig.hit_rate_counters)
    vals = [v for v in found if isinstance(v, float | int)]
    spread = (max(vals) - min(vals)) * 100 if len(vals) > 1 else None
    return Figures(
        hit_rate_sources=len(vals),
        hit_rate_spread_points=spread,
        hit_rate_disagree=bool(spread is not None and spread > DISAGREE_POINTS),
    )


def joined(*parts: Figures) -> Figures:
    """One seed's figures from its parts (request, log, counter, tier figures), keys in the parts' order;
    a later part's key replaces an earlier one's."""
    out: dict[str, Any] = {}
    for part in parts:
        out.update(part.to_json())
    return Figures.model_validate(out)


def point_window(sc: SeedCapture) -> tuple[float, float] | None:
    """The point's wall-clock window: point.json's, else from the request records."""
    if (
        sc.point
        and isinstance(sc.point.get("start_wall"), int | float)
        and isinstance(sc.point.get("end_wall"), int | float)
    ):
        return float(sc.point["start_wall"]), float(sc.point["end_wall"])
    starts = [
        r["start_wall"]
        for r in sc.requests
        if isinstance(r.get("start_wall"), int | float) and r["start_wall"]
    ]
    if not starts:
        return None
    ends = [r["start_wall"] + (r.get("e2e_s") or 0) for r in sc.requests if r.get("start_wall")]
    return min(starts), max(ends)


def load_window(sc: SeedCapture, window: tuple[float, float] | None) -> tuple[float, float] | None:
    """(point start, last request done): where the load ended, before any settle time the runner added."""
    if window is None:
        return None
    done = [
        float(r["start_wall"]) + float(r["e2e_s"])
        for r in sc.requests
        if is_num(r.get("start_wall")) and is_num(r.get("e2e_s")) and r["start_wall"]
    ]
    return (window[0], min(window[1], max(done))) if done else window


def _slack(log: serverlog.ParsedLog) -> float:
    """How far to widen a point's window: 1 s for whole-second stamps, 0.1 s with SGLANG_LOG_MS=1."""
    stamped = [r for r in log.records if r.kind in ("prefill", "flush") and r.wall is not None]
    return 0.1 if stamped and all(r.ms for r in stamped) else 1.0


def slice_log(
    log: serverlog.ParsedLog, seeds: Iterable[SeedCapture], shift: float = 0.0
) -> dict[Path, tuple[list[serverlog.LogRecord], str]]:
    """Each point's log records, and how they were chosen.

    The runner flushes the cache just after a point's start_wall, so when the point says it flushed,
    its records are those after its own `Cache flushed successfully!` line (matched in time order)
    up to the next flush line or end_wall + slack: exact even when several points share one second
    of 1 s log stamps. Otherwise the time window [start_wall, end_wall], widened by the slack.
    """
    recs = [r for r in log.records if r.wall is not None]
    slack = _slack(log)
    flushes = [i for i, r in enumerate(recs) if r.kind == "flush"]
    out: dict[Path, tuple[list[serverlog.LogRecord], str]] = {}
    nxt = 0
    timed = [(w, sc) for sc in seeds if sc.log is log and (w := point_window(sc)) is not None]
    for (start, end), sc in sorted(timed, key=lambda x: x[0]):
        lo, hi = start - slack, end + slack
        anchor = None
        if sc.point and sc.point.get("flushed"):
            j = nxt
            while j < len(flushes) and recs[flushes[j]].wall + shift < lo:  # type: ignore[operator]
                j += 1
            if j < len(flushes) and recs[flushes[j]].wall + shift <= hi:  # type: ignore[operator]
                anchor, nxt = j, j + 1
        if anchor is not None:
            stop = flushes[anchor + 1] if anchor + 1 < len(flushes) else len(recs)
            chosen = [r for r in recs[flushes[anchor] + 1 : stop] if r.wall + shift <= hi]  # type: ignore[operator]
            how = f"after the point's flush line, to the next flush line or end_wall + {slack:g} s"
        else:
            chosen = [r for r in recs if lo <= r.wall + shift <= hi]  # type: ignore[operator]
            how = f"time window [start_wall - {slack:g} s, end_wall + {slack:g} s] (log stamps are coarse)"
        out[sc.path] = (chosen, how)
    return out


def log_figures(
    log: serverlog.ParsedLog | None,
    sliced: tuple[list[serverlog.LogRecord], str] | None,
    end: float | None,
    shift: float,
    window: tuple[float, float] | None = None,
    flushed: bool = False,
) -> tuple[Figures, list[str]]:
    """Hit rate from the point's prefill lines, or from the lines its engine reads its own way
    (harness.engines.log_figures), the pool sizes logged by then, and evidence lines."""
    fig: dict[str, Any] = {"hit_rate_log": None}
    if log is None or sliced is None:
        fig["log_slice"] = (
            "no server log" if log is None else "no time window (no point.json, no request times)"
        )
        return Figures.model_validate(fig), []
    if window is not None and (own := engine_log_figures(log, window, shift, flushed)) is not None:
        return Figures.model_validate(own[0]), own[1]
    records, how = sliced
    prefill = _one_tp_rank([r for r in records if r.kind == "prefill"])
    tot = serverlog.prefill_totals(prefill)
    fig["log_slice"] = how
    fig["log_prefill_lines"] = tot["prefill_lines"]
    fig["log_new_tokens"] = tot["new_tokens"]
    fig["log_cached_tokens"] = tot["cached_tokens"]
    fig["hit_rate_log"] = tot["hit_rate"]
    limit = (end + _slack(log)) if end is not None else float("inf")
    pools = serverlog.pool_sizes(r for r in log.records if r.wall is None or r.wall + shift <= limit)
    fig["pool_device_tokens"] = pools["device_tokens"]
    fig["pool_host_tokens"] = pools["host_tokens"]
    fig["max_total_num_tokens"] = pools["max_total_num_tokens"]
    evidence = [r.line for r in prefill[:1]]
    hits = [r.line for r in prefill[1:] if serverlog.token_count(r.fields.get("cached_token")) > 0]
    evidence += hits[: EVIDENCE_LINES - 1]
    return Figures.model_validate(fig), evidence


def _one_tp_rank(records: list[serverlog.LogRecord]) -> list[serverlog.LogRecord]:
    """Tensor-parallel ranks may each print the same batch: keep the lowest TP rank's lines only."""
    tps = {tp for r in records if (tp := r.ranks.get("TP")) is not None}
    if len(tps) <= 1:
        return records
    keep = min(tps)
    return [r for r in records if r.ranks.get("TP") in (None, keep)]


def counter_figures(sc: SeedCapture) -> Figures:
    """Hit rate and token deltas from the /metrics scrapes before and after the point."""
    if sc.before is None or sc.after is None:
        return Figures(
            hit_rate_counters=None, hit_rate_counters_why="no /metrics scrape before and after the point"
        )
    d = metrics.counter_deltas(sc.before, sc.after)
    cf = counters.cache_figures(d)
    by_source = dict(cf["cached_by_source"])
    fig: dict[str, Any] = {
        "hit_rate_counters": cf["hit_rate"],
        "counter_prompt_tokens": cf["prompt_tokens"],
        "counter_cached_tokens": cf["cached_tokens"],
    }
    for src in list(by_source):  # in the order the server gave them
        if src in COUNTER_SOURCES:
            fig[COUNTER_SOURCES[src]] = by_source.pop(src)
    if by_source:
        fig["counter_cached_other_tokens"] = by_source
    fig["counter_evicted_tokens"] = cf.get("evicted_tokens")
    fig["counter_load_back_tokens"] = cf.get("load_back_tokens")
    fig["counter_hicache_backup_tokens"] = cf.get("hicache_backup_tokens")
    fig["counter_hicache_dropped_tokens"] = cf.get("hicache_dropped_tokens")
    fig["counter_reset"] = cf["reset"]
    fig["counter_engine"] = cf["engine"]
    fig["server_ttft_mean_s"], fig["server_ttft_requests"] = counters.ttft_mean_s(d)
    if cf["engine"] is None:
        fig["hit_rate_counters_why"] = counters.NO_COUNTERS
    if d.went_down or d.vanished:
        fig["counter_reset_series"] = d.went_down + d.vanished
    return Figures.model_validate(fig)


# ---------------------------------------------------------------- telemetry (owned by harness.telemetry/validate)


def telemetry_stats(
    samples: list[dict[str, Any]] | None,
    status: str | None,
    output_tokens: int | None,
    requests: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """harness.telemetry.stats.point_stats over the samples, with the prefill windows of `requests`;
    only a status when there are no samples."""
    if samples is None:
        return {"status": status or "absent"}
    try:
        windows = prefill_windows(requests) if requests is not None else None
        return dict(point_stats(samples, output_tokens, status, windows))
    except Exception as e:  # noqa: BLE001 - a bad sample file must not stop the summary
        return {"status": f"stats failed ({type(e).__name__}: {e})", "n_samples": None}


def clock_series(samples: list[dict[str, Any]]) -> dict[str, list[float]] | None:
    """(seconds since the first sample, SM clock MHz) of the first GPU, thinned for a chart (docs/telemetry.md)."""
    rows = [s for s in samples if s.get("kind", "sample") == "sample"]
    first_gpu = next((s.get("uuid", s.get("gpu")) for s in rows), None)
    pts = [
        (float(s["t_mono"]), float(s["sm_clock_mhz"]))
        for s in rows
        if is_num(s.get("t_mono"))
        and is_num(s.get("sm_clock_mhz"))
        and s.get("uuid", s.get("gpu")) == first_gpu
    ]
    if not pts:
        return None
    pts.sort()
    step = max(1, math.ceil(len(pts) / SERIES_POINTS))
    pts = pts[::step]
    t0 = pts[0][0]
    return {"t_s": [round(t - t0, 3) for t, _ in pts], "sm_clock_mhz": [c for _, c in pts]}


def tz_shift(log: serverlog.ParsedLog | None, seeds: Iterable[SeedCapture]) -> float:
    """Seconds to add to log times when the log was read in another time zone than it was written.

    Log stamps carry no zone. If no prefill line falls in any point window as read, but a whole
    number of half hours puts most of them there, that shift is used (and reported).
    """
    if log is None:
        return 0.0
    walls = [r.wall for r in log.records if r.kind == "prefill" and r.wall is not None]
    windows = [w for w in (point_window(sc) for sc in seeds if sc.log is log) if w]
    if not walls or not windows:
        return 0.0

    def hits(shift: float) -> int:
        return sum(any(a - 1 <= t + shift <= b + 1 for a, b in windows) for t in walls)

    if hits(0.0):
        return 0.0
    best = max((h * 1800.0 for h in range(-28, 29)), key=hits)
    return best if hits(best) > len(walls) // 2 else 0.0
