"""Clock verdicts: can a point's timings be trusted, and do an A/B pair's clocks confound it.

Point verdict: the first of thermal, hw-slowdown, power-brake, below-floor, prefill-below-floor that
applies (root causes before the symptom); `reasons` lists every one that applies. Two clocks are
judged against the floor, and `clock_basis` says which one raised the verdict: the busy-median (what a
point's throughput ran at: below-floor) and the prefill-window clock, the median over samples taken
while any request was between send and first token (what its TTFT ran at: prefill-below-floor); a
card can drop its clock only in the decode stretches between prefills, so the two differ. No samples gives `no-telemetry`, which
is *expected* (not flagged) when the telemetry status says the server had no GPU to watch (the sim,
`CUDA_VISIBLE_DEVICES` hiding all GPUs: statuses starting "sim server" or "no GPU"); any other missing
telemetry (no NVML on a GPU server, NVML errors) is flagged, since the GPU may have run unobserved.
Pairs: different servers of one experiment at one sweep value, compared on TTFT; clock-confounded when
the ratio of their prefill-window clocks exceeds max_ab_clock_ratio. A pair judges the busy-median
instead, and says why, when either point has fewer than MIN_PREFILL_SAMPLES prefill-window samples
(no request records, short prefills, a slow sampler); a busy-median ratio over the threshold beside an
ok prefill-window ratio is noted (a tok/s comparison of the pair mixes clock in), not flagged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from harness.summary import Point, Telemetry

POINT_VERDICTS = (
    "ok",
    "below-floor",
    "prefill-below-floor",
    "thermal",
    "hw-slowdown",
    "power-brake",
    "no-telemetry",
)
BUSY, PREFILL = "busy-median", "prefill-window"
MIN_PREFILL_SAMPLES = 3  # fewer prefill-window samples than this: the window's median is not judged
PAIR_VERDICTS = ("ok", "clock-confounded", "no-telemetry")
EXPECTED_NO_GPU = ("sim server", "no GPU")


@dataclass(frozen=True)
class Thresholds:
    clock_floor_mhz: float = 1000.0
    clock_floor_ratio: float = 0.75  # x max SM clock of the part
    max_thermal_fraction: float = 0.1
    max_ab_clock_ratio: float = 1.1


def expected_no_gpu(status: str | None) -> bool:
    """True when the telemetry status says there was no GPU to watch (not a failure to watch one)."""
    return bool(status) and str(status).startswith(EXPECTED_NO_GPU)


def floor_mhz(stats: Telemetry, th: Thresholds) -> float:
    """max(absolute floor, ratio x the part's max SM clock): 1,000 MHz means different things on different parts."""
    max_sm = stats.max_sm_clock_mhz
    return max(th.clock_floor_mhz, th.clock_floor_ratio * max_sm) if max_sm else th.clock_floor_mhz


def prefill_clock(tel: Telemetry) -> float | None:
    """The prefill-window clock when enough samples back it (MIN_PREFILL_SAMPLES), else None."""
    n = tel.n_prefill or 0
    return tel.prefill_median_sm_clock_mhz if n >= MIN_PREFILL_SAMPLES else None


def point_verdict(
    stats: Telemetry | dict[str, Any] | None, thresholds: Thresholds | None = None
) -> dict[str, Any]:
    """{"verdict", "reasons", "flagged", "clock_basis"} for one point's telemetry figures (point_stats output)."""
    th = thresholds or Thresholds()
    tel = stats if isinstance(stats, Telemetry) else Telemetry.model_validate(stats or {})
    if not tel.n_samples:
        status = tel.status or "no telemetry figures for this point"
        return {
            "verdict": "no-telemetry",
            "reasons": [str(status)],
            "flagged": not expected_no_gpu(status),
            "clock_basis": None,
        }
    found: dict[str, str] = {}
    tf = tel.thermal_fraction
    if tf is not None and tf > th.max_thermal_fraction:
        found["thermal"] = f"thermal flag (0x20|0x40) in {tf:.0%} of samples > {th.max_thermal_fraction:.0%}"
    if tel.hw_slowdown:
        found["hw-slowdown"] = "hardware slowdown (0x8) on 2+ consecutive samples"
    if tel.power_brake:
        found["power-brake"] = "power brake (0x80) seen"
    clock = tel.busy_median_sm_clock_mhz
    notes: list[str] = []
    floor = floor_mhz(tel, th)
    max_sm = tel.max_sm_clock_mhz
    how = f"max({th.clock_floor_mhz:.0f}, {th.clock_floor_ratio:g} x {max_sm:.0f})" if max_sm else "absolute"
    if clock is None:
        notes.append(f"no busy samples (gpu_util >= 50%) among {tel.n_samples}: clock floor not judged")
    elif clock < floor:
        found["below-floor"] = f"busy-median SM clock {clock:.0f} MHz < floor {floor:.0f} MHz ({how})"
    pre = prefill_clock(tel)
    if pre is not None and pre < floor:
        found["prefill-below-floor"] = (
            f"prefill-window SM clock {pre:.0f} MHz over {tel.n_prefill} samples < floor {floor:.0f} MHz "
            f"({how}): TTFT ran at it"
        )
    elif pre is not None and "below-floor" in found:
        notes.append(
            f"prefill-window SM clock {pre:.0f} MHz over {tel.n_prefill} samples is above the floor: "
            "TTFT ran at it, throughput at the busy-median"
        )
    for v in ("thermal", "hw-slowdown", "power-brake", "below-floor", "prefill-below-floor"):
        if v in found:
            basis = PREFILL if v == "prefill-below-floor" else BUSY
            return {
                "verdict": v,
                "reasons": list(found.values()) + notes,
                "flagged": True,
                "clock_basis": basis,
            }
    return {"verdict": "ok", "reasons": notes, "flagged": False, "clock_basis": BUSY}


def _sweep_key(sweep: Any) -> str:
    return json.dumps(sweep, sort_keys=True, default=str)


def pair_verdicts(
    points: Sequence[Point | dict[str, Any]], thresholds: Thresholds | None = None
) -> list[dict[str, Any]]:
    """Every pair of different servers of one experiment at one sweep value, in first-seen order."""
    th = thresholds or Thresholds()
    groups: dict[tuple[str, str], list[Point]] = {}
    for raw in points:
        p = raw if isinstance(raw, Point) else Point.model_validate(raw)
        groups.setdefault((p.experiment, _sweep_key(p.get("sweep"))), []).append(p)
    out: list[dict[str, Any]] = []
    for (experiment, _), members in groups.items():
        for a, b in combinations(members, 2):
            if a.server == b.server:
                continue
            out.append(_pair(experiment, a, b, th))
    return out


def _pair_basis(a: Point, ta: Telemetry, b: Point, tb: Telemetry) -> tuple[str, str | None]:
    """The clock a TTFT comparison is judged on: the prefill window, else the busy-median and why."""
    short = [f"{p.server} {t.n_prefill or 0}" for p, t in ((a, ta), (b, tb)) if prefill_clock(t) is None]
    if not short:
        return PREFILL, None
    return BUSY, (
        f"prefill-window samples: {', '.join(short)} (< {MIN_PREFILL_SAMPLES}): judged on the busy-median clocks"
    )


def _pair(experiment: str, a: Point, b: Point, th: Thresholds) -> dict[str, Any]:
    ta, tb = a.telemetry or Telemetry(), b.telemetry or Telemetry()
    basis, why_busy = _pair_basis(a, ta, b, tb)
    ba, bb = ta.busy_median_sm_clock_mhz, tb.busy_median_sm_clock_mhz
    if basis == PREFILL:
        ca, cb = ta.prefill_median_sm_clock_mhz, tb.prefill_median_sm_clock_mhz
    else:
        ca, cb = ba, bb
    notes = [why_busy] if why_busy and ba and bb else []
    row: dict[str, Any] = {
        "experiment": experiment,
        "sweep": a.get("sweep"),
        "point_key": a.get("point_key"),
        "a": a.server,
        "b": b.server,
        "clock_a_mhz": ca,
        "clock_b_mhz": cb,
        "ratio": None,
        "clock_basis": basis,
        "busy_a_mhz": ba,
        "busy_b_mhz": bb,
    }
    if not ca or not cb:
        missing = [p for p, c, t in ((a, ca, ta), (b, cb, tb)) if not c and not expected_no_gpu(t.status)]
        why = "; ".join(f"{p.server}: {(t.status or 'no busy-median clock')}" for p, t in ((a, ta), (b, tb)))
        return {
            **row,
            "verdict": "no-telemetry",
            "reasons": [why],
            "flagged": bool(missing),
            "clock_basis": None,
        }
    ratio = max(ca, cb) / min(ca, cb)
    row["ratio"] = round(ratio, 3)
    if basis == PREFILL and ba and bb and max(ba, bb) / min(ba, bb) > th.max_ab_clock_ratio:
        notes.append(
            f"busy-median SM clocks {ba:.0f} vs {bb:.0f} MHz ({max(ba, bb) / min(ba, bb):.2f}x): "
            "a tok/s comparison of this pair mixes clock in; TTFT is judged on the prefill window"
        )
    if ratio > th.max_ab_clock_ratio:
        faster = row["a"] if ca > cb else row["b"]
        reason = (
            f"{basis} SM clocks {ca:.0f} vs {cb:.0f} MHz: {faster} ran at {ratio:.2f}x the other's clock "
            f"(> {th.max_ab_clock_ratio:g}); the latency ratio mixes cache effect and clock"
        )
        return {**row, "verdict": "clock-confounded", "reasons": [reason, *notes], "flagged": True}
    return {**row, "verdict": "ok", "reasons": notes, "flagged": False}
