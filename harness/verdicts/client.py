"""The `client-bound` verdict: the load generator, not the server, set the point's timings.

Why: a saturated client's event loop makes every finished answer wait to be read, and the wait is reported
as the server's TTFT (issue 61: 15.8 ms p50 at c=256 against a zero-latency server where a faster client saw
2.3 ms), with no verdict. Judged from point.json's `client` (harness.loadgen.client_load): per process, the
loop thread's busy share and its loop's lag. Thresholds, measured figures and what to do: docs/performance.md.
"""

from __future__ import annotations

import math
from typing import Any

from harness.summary.funnel import HealthVerdict

BUSY_SHARE = 0.9  # CPU + wait for a core over the run: the loop was (nearly) never idle
LAG_FLOOR_S = 0.005  # the loop's own lag p50 at least this ...
LAG_TTFT_SHARE = 0.1  # ... and at least this share of the point's TTFT p50


def lag_bound(ttft_p50_s: float | None) -> float:
    """The loop's own lag p50 above which a busy client is said to have set the point's timings."""
    return max(LAG_FLOOR_S, LAG_TTFT_SHARE * ttft_p50_s if ttft_p50_s is not None else 0.0)


def own_lag(p: dict[str, Any]) -> float:
    """The loop lag p50 in the share of its busy time the process was on a core: the lag its own work made.

    Why: on a host shared with other work the loop also lags while it waits for a core (a c=8 run here: 6.4 ms,
    68 % of the run waiting); that is the host's, and more load-generator processes would not remove it."""
    busy = p["cpu_s"] + (p.get("wait_s") or 0.0)
    return float(p["lag_p50_s"]) * (p["cpu_s"] / busy if busy > 0 else 1.0)


def suggested_workers(procs: list[dict[str, Any]], bound: float) -> int:
    """Load-generator processes to try: the processes now, times the worst loop's own lag over the bound;
    each needs a free core. A starting point, then re-run."""
    own = max((own_lag(p) for p in procs if isinstance(p.get("lag_p50_s"), int | float)), default=0.0)
    return max(len(procs) + 1, math.ceil(len(procs) * own / bound))


def client_bound(
    seed: str, point: dict[str, Any] | None, ttft_p50_s: float | None, client_late_p99_s: float | None = None
) -> HealthVerdict | None:
    """client-bound when some load-generator process was busy the whole run (CPU + wait for a core >= 0.9 of
    its wall time) and its loop's own lag p50 (own_lag) exceeded max(5 ms, 10 % of the TTFT p50); None otherwise."""
    procs = [p for p in (point or {}).get("client") or [] if isinstance(p, dict)]
    bound = lag_bound(ttft_p50_s)
    hot = [
        p
        for p in procs
        if isinstance(p.get("lag_p50_s"), int | float)
        and p.get("busy_share", 0.0) >= BUSY_SHARE
        and own_lag(p) > bound
    ]
    if not hot:
        return None
    worst = max(hot, key=own_lag)
    n = suggested_workers(procs, bound)
    wall = worst["wall_s"] or 1.0
    cpu, wait = worst["cpu_s"] / wall, (worst.get("wait_s") or 0.0) / wall
    per_req = worst["cpu_s"] / worst["requests"] * 1000 if worst.get("requests") else None
    advice = (
        f"the host's other work held its core ({wait:.0%} of the run waiting for one): give the client a free core"
        if wait > cpu
        else f"spread the load over processes with a free core each: `workers: {n}` in the spec (or `--workers {n}`)"
    )
    ttft = f"{ttft_p50_s * 1000:.1f} ms" if ttft_p50_s is not None else "unknown"
    figures: dict[str, Any] = {
        "processes": len(procs),
        "busy_share": worst.get("busy_share"),
        "cpu_share": round(cpu, 4),
        "wait_share": round(wait, 4),
        "loop_lag_p50_s": worst["lag_p50_s"],
        "own_lag_p50_s": round(own_lag(worst), 6),
        "loop_lag_p99_s": worst.get("lag_p99_s"),
        "lag_bound_s": round(bound, 6),
        "ttft_p50_s": ttft_p50_s,
        "cpu_ms_per_request": None if per_req is None else round(per_req, 4),
        "suggested_workers": n,
    }
    if client_late_p99_s is not None:
        figures["client_late_p99_s"] = client_late_p99_s
    return HealthVerdict(
        verdict="client-bound",
        seed=seed,
        reason=(
            f"the load generator was busy {worst.get('busy_share', 0.0):.0%} of the run ({cpu:.0%} on a core, "
            f"{wait:.0%} waiting for one) and its event loop ran {worst['lag_p50_s'] * 1000:.1f} ms late at the "
            f"median, {own_lag(worst) * 1000:.1f} ms of it its own work (bound {bound * 1000:.1f} ms; TTFT p50 "
            f"{ttft}): finished answers waited that long to be read, so the TTFT is partly the client's; {advice}"
        ),
        window_s=[0.0, round(wall, 3)],
        figures=figures,
        evidence="point-file",
    )
