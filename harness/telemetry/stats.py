"""Per-point GPU figures from `telemetry.jsonl` lines: the clock a point ran at, and what held it down.

Multi-GPU: figures are computed per GPU (`per_gpu`), then the worst GPU governs the point: the
lowest busy-median clock (with that GPU's max clock, so the relative floor compares like with like),
the highest thermal / power-cap fraction and temperature, any hardware slowdown or power brake.
Energy is summed over GPUs; violation-time deltas are the largest over GPUs.

The prefill window: a run's busy-median is not the clock its prefills ran at (a card can drop its clock
in the decode stretches between them), so each point also gets the median SM clock over the samples
taken while any request was between send and first token, with that sample count. TTFT comparisons
are judged on it, throughput on the busy-median (harness.verdicts.clocks).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any

from harness.capture import REQUESTS, TELEMETRY, read_jsonl
from harness.telemetry.nvml import HW_SLOWDOWN, POWER_BRAKE, POWER_CAP, THERMAL_MASK

BUSY_UTIL = 50  # % GPU utilization at or above which a sample counts as busy
PREFILL_BASIS = "samples while a request was between send and first token"
Windows = Sequence[tuple[float, float]]


def prefill_windows(requests: Iterable[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """[sent, first token] of every sent, measured request that got a first token, overlaps merged, sorted.

    Monotonic stamps from requests.jsonl: the sampler's `t_mono` is the same clock. Warm-up requests
    ran before the sampler started, and a request with no first token never finished a prefill.
    """
    spans = sorted(
        (float(r["sent_mono"]), float(r["first_token_mono"]))
        for r in requests
        if not r.get("warmup")
        and isinstance(r.get("sent_mono"), int | float)
        and isinstance(r.get("first_token_mono"), int | float)
        and r["first_token_mono"] >= r["sent_mono"]
    )
    merged: list[tuple[float, float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _in_windows(t: Any, starts: list[float], windows: Windows) -> bool:
    if not isinstance(t, int | float):
        return False
    i = bisect_right(starts, t) - 1
    return i >= 0 and t <= windows[i][1]


def _vals(rows: list[dict[str, Any]], key: str) -> list[Any]:
    return [r[key] for r in rows if r.get(key) is not None]


def _delta(rows: list[dict[str, Any]], key: str) -> float | None:
    """last - first of a cumulative counter; None when absent or it went backwards (reset)."""
    vals = _vals(rows, key)
    if len(vals) < 2 or vals[-1] < vals[0]:
        return None
    return vals[-1] - vals[0]


def _fraction(reasons: list[int], mask: int) -> float | None:
    return sum(1 for r in reasons if r & mask) / len(reasons) if reasons else None


def _max_consecutive(rows: list[dict[str, Any]], mask: int) -> int:
    """Longest run of consecutive samples with the bit set (a null `reasons` breaks the run)."""
    best = run = 0
    for r in rows:
        bits = r.get("reasons")
        run = run + 1 if bits is not None and bits & mask else 0
        best = max(best, run)
    return best


def gpu_stats(rows: list[dict[str, Any]], windows: Windows | None = None) -> dict[str, Any]:
    """Figures for one GPU's samples, in time order; `windows` (prefill_windows) adds the prefill-window clock."""
    rows = sorted(rows, key=lambda r: r.get("t_mono") or 0.0)
    prefill: list[Any] | None = None
    if windows is not None:
        starts = [a for a, _ in windows]
        prefill = _vals([r for r in rows if _in_windows(r.get("t_mono"), starts, windows)], "sm_clock_mhz")
    with_util = [r for r in rows if r.get("gpu_util") is not None]
    if with_util:
        busy = [r for r in with_util if r["gpu_util"] >= BUSY_UTIL]
        basis = f"gpu_util >= {BUSY_UTIL}"
    else:  # utilization unsupported (e.g. MIG): every sample counts, and says so
        busy, basis = rows, "all samples (no utilization)"
    busy_clocks = _vals(busy, "sm_clock_mhz")
    clocks = _vals(rows, "sm_clock_mhz")
    reasons = _vals(rows, "reasons")
    temps = _vals(rows, "temp_c")
    power = _vals(rows, "power_w")
    max_sm = _vals(rows, "max_sm_clock_mhz")
    energy_mj = _delta(rows, "energy_mj")
    t = _vals(rows, "t_mono")
    seen = 0
    for r in reasons:
        seen |= r
    return {
        "gpu": rows[0].get("gpu") if rows else None,
        "uuid": rows[0].get("uuid") if rows else None,
        "n_samples": len(rows),
        "n_busy": len(busy_clocks),
        "busy_basis": basis,
        "busy_median_sm_clock_mhz": float(median(busy_clocks)) if busy_clocks else None,
        "n_prefill": len(prefill) if prefill is not None else None,
        "prefill_median_sm_clock_mhz": float(median(prefill)) if prefill else None,
        "sm_clock_min_mhz": min(clocks) if clocks else None,
        "sm_clock_max_mhz": max(clocks) if clocks else None,
        "max_sm_clock_mhz": max(max_sm) if max_sm else None,
        "thermal_fraction": _fraction(reasons, THERMAL_MASK),
        "hw_slowdown": _max_consecutive(rows, HW_SLOWDOWN) >= 2,
        "hw_slowdown_max_run": _max_consecutive(rows, HW_SLOWDOWN),
        "power_brake": any(r & POWER_BRAKE for r in reasons),
        "power_cap_fraction": _fraction(reasons, POWER_CAP),
        "reasons_seen": seen if reasons else None,
        "temp_max_c": max(temps) if temps else None,
        "power_median_w": float(median(power)) if power else None,
        "energy_j": energy_mj / 1000.0 if energy_mj is not None else None,
        "violation_power_ns": _delta(rows, "violation_power_ns"),
        "violation_thermal_ns": _delta(rows, "violation_thermal_ns"),
        "duration_s": t[-1] - t[0] if len(t) >= 2 else None,
    }


def _worst(values: Iterable[Any], pick: Any) -> Any:
    vals = [v for v in values if v is not None]
    return pick(vals) if vals else None


def _slowest(per: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The GPU (or seed) whose `key` clock is lowest relative to its own max (absolute when max unknown)."""
    judged = [g for g in per if g.get(key) is not None]
    return min(judged, key=lambda g: (g[key] / (g.get("max_sm_clock_mhz") or 1), g[key]), default=None)


def point_stats(
    samples: list[dict[str, Any]],
    output_tokens: int | None = None,
    status: str | None = None,
    windows: Windows | None = None,
) -> dict[str, Any]:
    """Figures for one point from its telemetry lines (header/note lines are read for status, then skipped).

    `status` overrides the header's (e.g. point.json `telemetry_status`). With no samples, every
    figure is None and `status` says why. `windows` (prefill_windows of the point's requests) adds
    `prefill_median_sm_clock_mhz` and `n_prefill`; without them both are None.
    """
    header = next((r for r in samples if r.get("kind") == "header"), None)
    if status is None and header is not None:
        status = header.get("status")
    rows = [r for r in samples if r.get("kind", "sample") == "sample"]
    by_gpu: dict[Any, list[dict[str, Any]]] = {}
    for r in rows:
        by_gpu.setdefault(r.get("uuid") or r.get("gpu"), []).append(r)
    per_gpu = [gpu_stats(g, windows) for g in by_gpu.values()]
    if status is None:
        status = f"ok: {len(per_gpu)} GPU{'s' if len(per_gpu) != 1 else ''}" if rows else "no samples"
    out: dict[str, Any] = {"status": status, "n_samples": len(rows), "n_gpus": len(per_gpu)}
    # the governing GPU: lowest busy-median clock relative to its own max; the prefill window's likewise
    gov = _slowest(per_gpu, "busy_median_sm_clock_mhz")
    pre = _slowest(per_gpu, "prefill_median_sm_clock_mhz")
    energy = _worst((g["energy_j"] for g in per_gpu), sum)
    out.update(
        {
            "n_busy": sum(g["n_busy"] for g in per_gpu),
            "busy_median_sm_clock_mhz": gov["busy_median_sm_clock_mhz"] if gov else None,
            "max_sm_clock_mhz": gov["max_sm_clock_mhz"]
            if gov
            else _worst((g["max_sm_clock_mhz"] for g in per_gpu), max),
            "governing_gpu": gov["uuid"] if gov else None,
            "n_prefill": sum(g["n_prefill"] for g in per_gpu) if windows is not None and rows else None,
            "prefill_median_sm_clock_mhz": pre["prefill_median_sm_clock_mhz"] if pre else None,
            "prefill_basis": PREFILL_BASIS if windows is not None and rows else None,
            "sm_clock_min_mhz": _worst((g["sm_clock_min_mhz"] for g in per_gpu), min),
            "sm_clock_max_mhz": _worst((g["sm_clock_max_mhz"] for g in per_gpu), max),
            "thermal_fraction": _worst((g["thermal_fraction"] for g in per_gpu), max),
            "hw_slowdown": any(g["hw_slowdown"] for g in per_gpu),
            "power_brake": any(g["power_brake"] for g in per_gpu),
            "power_cap_fraction": _worst((g["power_cap_fraction"] for g in per_gpu), max),
            "reasons_seen": _worst((g["reasons_seen"] for g in per_gpu), lambda v: _or(v)),
            "temp_max_c": _worst((g["temp_max_c"] for g in per_gpu), max),
            "power_median_w": _worst((g["power_median_w"] for g in per_gpu), max),
            "energy_j": energy,
            "energy_per_output_token_j": energy / output_tokens
            if energy is not None and output_tokens
            else None,
            "violation_power_ns": _worst((g["violation_power_ns"] for g in per_gpu), max),
            "violation_thermal_ns": _worst((g["violation_thermal_ns"] for g in per_gpu), max),
            "per_gpu": per_gpu,
        }
    )
    return out


def _or(values: list[int]) -> int:
    acc = 0
    for v in values:
        acc |= v
    return acc


def load_point_stats(
    point_dir: Path, output_tokens: int | None = None, status: str | None = None
) -> dict[str, Any]:
    """point_stats of a capture point folder (its requests.jsonl giving the prefill windows); a missing
    telemetry.jsonl is a status, not an error."""
    path = Path(point_dir) / TELEMETRY
    if not path.exists():
        return point_stats([], output_tokens, status or f"no telemetry: {TELEMETRY} missing")
    rows, _bad = read_jsonl(path)
    req = Path(point_dir) / REQUESTS
    windows = prefill_windows(read_jsonl(req)[0]) if req.exists() else None
    return point_stats(rows, output_tokens, status, windows)


def merge_seed_stats(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """One point's figures over its seeds, worst seed governing (as for GPUs); `per_seed` kept inside.

    For summarize: a point is only as trustworthy as its worst seed. Energy per token is the median.
    """
    if not per_seed:
        return point_stats([], status="no samples")
    gov = _slowest(per_seed, "busy_median_sm_clock_mhz")
    pre = _slowest(per_seed, "prefill_median_sm_clock_mhz")
    n_prefill = [s["n_prefill"] for s in per_seed if s.get("n_prefill") is not None]
    with_samples = [s for s in per_seed if s.get("n_samples")]
    status = (with_samples[0] if with_samples else per_seed[0]).get("status")
    ept = [s["energy_per_output_token_j"] for s in per_seed if s.get("energy_per_output_token_j") is not None]
    return {
        "status": status,
        "n_samples": sum(s.get("n_samples") or 0 for s in per_seed),
        "n_busy": sum(s.get("n_busy") or 0 for s in per_seed),
        "n_gpus": max((s.get("n_gpus") or 0) for s in per_seed),
        "seeds_without_samples": sum(1 for s in per_seed if not s.get("n_samples")),
        "busy_median_sm_clock_mhz": gov["busy_median_sm_clock_mhz"] if gov else None,
        "n_prefill": sum(n_prefill) if n_prefill else None,
        "prefill_median_sm_clock_mhz": pre["prefill_median_sm_clock_mhz"] if pre else None,
        "max_sm_clock_mhz": gov.get("max_sm_clock_mhz")
        if gov
        else _worst((s.get("max_sm_clock_mhz") for s in per_seed), max),
        "sm_clock_min_mhz": _worst((s.get("sm_clock_min_mhz") for s in per_seed), min),
        "sm_clock_max_mhz": _worst((s.get("sm_clock_max_mhz") for s in per_seed), max),
        "thermal_fraction": _worst((s.get("thermal_fraction") for s in per_seed), max),
        "hw_slowdown": any(s.get("hw_slowdown") for s in per_seed),
        "power_brake": any(s.get("power_brake") for s in per_seed),
        "power_cap_fraction": _worst((s.get("power_cap_fraction") for s in per_seed), max),
        "temp_max_c": _worst((s.get("temp_max_c") for s in per_seed), max),
        "energy_per_output_token_j": float(median(ept)) if ept else None,
        "violation_power_ns": _worst((s.get("violation_power_ns") for s in per_seed), max),
        "violation_thermal_ns": _worst((s.get("violation_thermal_ns") for s in per_seed), max),
        "per_seed": per_seed,
    }
