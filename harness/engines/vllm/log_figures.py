"""A point's log figures from vLLM's log: its cumulative stats lines read over the point's window, its
reset line, and the stats interval the log shows (summarize's `log_figures` asks through
harness.engines.log_figures)."""

from __future__ import annotations

from typing import Any

import numpy as np

from harness import serverlog
from harness.engines.vllm.hit_rate import vllm_point_hit_rate, vllm_throughput_counts


def vllm_log_interval(log: serverlog.ParsedLog) -> float:
    """VLLM_LOG_STATS_INTERVAL as the log shows it: the usual gap between stats lines (idle ones are silent)."""
    walls = [r.wall for r in log.of("vllm_stats") if r.wall is not None]
    gaps = sorted(b - a for a, b in zip(walls, walls[1:], strict=False) if b - a >= 1.0)
    if not gaps:
        return 10.0  # vLLM's default
    near = [g for g in gaps if g <= 1.5 * gaps[0]]
    return float(np.median(near))


def vllm_log_figures(
    log: serverlog.ParsedLog, window: tuple[float, float], shift: float, flushed: bool
) -> tuple[dict[str, Any], list[str]]:
    """The point's hit rate from vLLM's cumulative stats lines (vllm_point_hit_rate), as Figures' keys."""
    start, end = window[0] - shift, window[1] - shift
    resets = [r for r in log.of("flush") if r.wall is not None]
    own = next((r for r in resets if start - 1.0 <= r.wall <= end + 1.0), None) if flushed else None  # type: ignore[operator]
    later = [r for r in resets if (r.lineno > own.lineno if own else r.wall >= end)]  # type: ignore[operator]
    engine = log.of("vllm_engine")
    interval = vllm_log_interval(log)
    res = vllm_point_hit_rate(
        log.records,
        start,
        end,
        reset_lineno=own.lineno if own else None,
        next_reset_lineno=later[0].lineno if later else None,
        interval_s=interval,
        throughput_counts=vllm_throughput_counts(engine[-1].fields["version"] if engine else None),
    )
    fig: dict[str, Any] = {
        "hit_rate_log": None if res.coarse else res.hit_rate,
        "log_slice": f"vLLM stats lines every {interval:g} s ({res.method})",
        "log_hit_rate_method": res.method,
        "log_hit_rate_uncertainty": res.uncertainty,
        "log_coarse": res.coarse,
    }
    if res.coarse:
        fig["hit_rate_log_coarse"] = res.hit_rate
        fig["log_coarse_why"] = res.why
    pools = serverlog.pool_sizes(r for r in log.records if r.wall is None or r.wall <= end + 1.0)
    fig["pool_device_tokens"] = pools["device_tokens"]
    by_line = {r.lineno: r.line for r in log.records}
    evidence = [by_line[n] for n in (res.start_line, res.end_line) if n is not None and n in by_line]
    return fig, evidence
