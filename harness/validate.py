"""Verdicts on whether a point's timings can be trusted, and whether an A/B pair's clocks confound it.

Point verdict: the first of thermal, hw-slowdown, power-brake, below-floor that applies (root causes
before the symptom); `reasons` lists every one that applies. No samples gives `no-telemetry`, which
is *expected* (not flagged) when the telemetry status says the server had no GPU to watch (the sim,
`CUDA_VISIBLE_DEVICES` hiding all GPUs: statuses starting "sim server" or "no GPU"); any other missing
telemetry (no NVML on a GPU server, NVML errors) is flagged, since the GPU may have run unobserved.
Pairs: different servers of one experiment at one sweep value; clock-confounded when the ratio of
their busy-median SM clocks exceeds max_ab_clock_ratio.

Verdicts are computed once, by `harness summarize`, which keeps the thresholds it used in the
summary (`verdict_thresholds`). `validate_summary` at those thresholds returns the summary's own
verdicts, so validate and the report cannot disagree; at other thresholds it recomputes them and
says so in `note`. A summary without `verdict_thresholds` (hand-made, or older) is judged afresh.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from itertools import combinations
from typing import Any

from harness.errors import HarnessError

SUPPORTED_SCHEMA_MAJOR = 1
POINT_VERDICTS = ("ok", "below-floor", "thermal", "hw-slowdown", "power-brake", "no-telemetry")
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


def floor_mhz(stats: dict[str, Any], th: Thresholds) -> float:
    """max(absolute floor, ratio x the part's max SM clock): 1,000 MHz means different things on different parts."""
    max_sm = stats.get("max_sm_clock_mhz")
    return max(th.clock_floor_mhz, th.clock_floor_ratio * max_sm) if max_sm else th.clock_floor_mhz


def point_verdict(stats: dict[str, Any] | None, thresholds: Thresholds | None = None) -> dict[str, Any]:
    """{"verdict", "reasons", "flagged"} for one point's telemetry figures (stats.point_stats output)."""
    th = thresholds or Thresholds()
    if not stats or not stats.get("n_samples"):
        status = (stats or {}).get("status") or "no telemetry figures for this point"
        return {"verdict": "no-telemetry", "reasons": [str(status)], "flagged": not expected_no_gpu(status)}
    found: dict[str, str] = {}
    tf = stats.get("thermal_fraction")
    if tf is not None and tf > th.max_thermal_fraction:
        found["thermal"] = f"thermal flag (0x20|0x40) in {tf:.0%} of samples > {th.max_thermal_fraction:.0%}"
    if stats.get("hw_slowdown"):
        found["hw-slowdown"] = "hardware slowdown (0x8) on 2+ consecutive samples"
    if stats.get("power_brake"):
        found["power-brake"] = "power brake (0x80) seen"
    clock = stats.get("busy_median_sm_clock_mhz")
    notes: list[str] = []
    if clock is None:
        notes.append(f"no busy samples (gpu_util >= 50%) among {stats['n_samples']}: clock floor not judged")
    else:
        floor = floor_mhz(stats, th)
        if clock < floor:
            max_sm = stats.get("max_sm_clock_mhz")
            how = (
                f"max({th.clock_floor_mhz:.0f}, {th.clock_floor_ratio:g} x {max_sm:.0f})"
                if max_sm
                else "absolute"
            )
            found["below-floor"] = f"busy-median SM clock {clock:.0f} MHz < floor {floor:.0f} MHz ({how})"
    for v in ("thermal", "hw-slowdown", "power-brake", "below-floor"):
        if v in found:
            return {"verdict": v, "reasons": list(found.values()) + notes, "flagged": True}
    return {"verdict": "ok", "reasons": notes, "flagged": False}


def _sweep_key(sweep: Any) -> str:
    return json.dumps(sweep, sort_keys=True, default=str)


def pair_verdicts(points: list[dict[str, Any]], thresholds: Thresholds | None = None) -> list[dict[str, Any]]:
    """Every pair of different servers of one experiment at one sweep value, in first-seen order."""
    th = thresholds or Thresholds()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault((str(p.get("experiment")), _sweep_key(p.get("sweep"))), []).append(p)
    out: list[dict[str, Any]] = []
    for (experiment, _), members in groups.items():
        for a, b in combinations(members, 2):
            if a.get("server") == b.get("server"):
                continue
            out.append(_pair(experiment, a, b, th))
    return out


def _pair(experiment: str, a: dict[str, Any], b: dict[str, Any], th: Thresholds) -> dict[str, Any]:
    ta, tb = a.get("telemetry") or {}, b.get("telemetry") or {}
    ca, cb = ta.get("busy_median_sm_clock_mhz"), tb.get("busy_median_sm_clock_mhz")
    row: dict[str, Any] = {
        "experiment": experiment,
        "sweep": a.get("sweep"),
        "point_key": a.get("point_key"),
        "a": a.get("server"),
        "b": b.get("server"),
        "clock_a_mhz": ca,
        "clock_b_mhz": cb,
        "ratio": None,
    }
    if not ca or not cb:
        missing = [
            s for s, c, t in ((a, ca, ta), (b, cb, tb)) if not c and not expected_no_gpu(t.get("status"))
        ]
        why = "; ".join(
            f"{p.get('server')}: {(t.get('status') or 'no busy-median clock')}" for p, t in ((a, ta), (b, tb))
        )
        return {**row, "verdict": "no-telemetry", "reasons": [why], "flagged": bool(missing)}
    ratio = max(ca, cb) / min(ca, cb)
    row["ratio"] = round(ratio, 3)
    if ratio > th.max_ab_clock_ratio:
        faster = row["a"] if ca > cb else row["b"]
        reason = (
            f"busy-median SM clocks {ca:.0f} vs {cb:.0f} MHz: {faster} ran at {ratio:.2f}x the other's clock "
            f"(> {th.max_ab_clock_ratio:g}); the latency ratio mixes cache effect and clock"
        )
        return {**row, "verdict": "clock-confounded", "reasons": [reason], "flagged": True}
    return {**row, "verdict": "ok", "reasons": [], "flagged": False}


def summary_thresholds(summary: dict[str, Any], source: str = "summary") -> Thresholds | None:
    """The thresholds the summary's verdicts were computed with; None when it does not record them."""
    raw = summary.get("verdict_thresholds")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise HarnessError(f"{source}: verdict_thresholds: expected an object, got {type(raw).__name__}")
    names = [f.name for f in fields(Thresholds)]
    for key in raw:
        if key not in names:
            raise HarnessError(
                f"{source}: verdict_thresholds: unknown key {key!r} (known: {', '.join(names)})"
            )
    values: dict[str, float] = {}
    for key in names:
        v = raw.get(key)
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise HarnessError(f"{source}: verdict_thresholds.{key}: expected a number, got {v!r}")
        values[key] = float(v)
    return Thresholds(**values)


def resolve_thresholds(summary: Any, given: dict[str, float], source: str = "summary") -> Thresholds:
    """The summary's own thresholds (defaults when it records none) with the given ones on top."""
    check_summary(summary, source)
    return replace(summary_thresholds(summary, source) or Thresholds(), **given)


def _differences(stored: Thresholds, th: Thresholds) -> str:
    a, b = asdict(stored), asdict(th)
    return ", ".join(f"{k} {a[k]:g} → {b[k]:g}" for k in a if a[k] != b[k])


_POINT_VERDICT_KEYS = ("verdict", "reasons", "flagged")
_PAIR_KEYS = ("experiment", "sweep", "a", "b", "clock_a_mhz", "clock_b_mhz", "ratio", *_POINT_VERDICT_KEYS)


def _stored_verdicts(
    summary: dict[str, Any], points: list[dict[str, Any]], source: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The summary's point verdicts and pairs, checked for the keys validate reads."""
    verdicts = []
    for i, p in enumerate(points):
        v = p.get("verdict")
        if not isinstance(v, dict) or any(k not in v for k in _POINT_VERDICT_KEYS):
            raise HarnessError(
                f"{source}: points[{i}].verdict: expected an object with {', '.join(_POINT_VERDICT_KEYS)} "
                "(the summary records verdict_thresholds)"
            )
        verdicts.append({k: v[k] for k in _POINT_VERDICT_KEYS})
    pairs = summary.get("pairs")
    if not isinstance(pairs, list):
        raise HarnessError(f"{source}: pairs: expected a list (the summary records verdict_thresholds)")
    for i, pr in enumerate(pairs):
        missing = [k for k in _PAIR_KEYS if not isinstance(pr, dict) or k not in pr]
        if missing:
            raise HarnessError(f"{source}: pairs[{i}]: missing {', '.join(map(repr, missing))}")
    return verdicts, pairs


def check_summary(summary: Any, source: str = "summary") -> list[dict[str, Any]]:
    """The summary's points, after checking the shape validate relies on; HarnessError names what is wrong."""
    if not isinstance(summary, dict) or "points" not in summary or "schema_version" not in summary:
        raise HarnessError(f"{source}: not a harness summary (expected top-level schema_version and points)")
    version = summary["schema_version"]
    major = str(version).split(".", 1)[0]
    if not major.isdigit() or int(major) != SUPPORTED_SCHEMA_MAJOR:
        raise HarnessError(
            f"{source}: schema_version {version!r} is not supported (expected {SUPPORTED_SCHEMA_MAJOR}.x)"
        )
    points = summary["points"]
    if not isinstance(points, list):
        raise HarnessError(f"{source}: points: expected a list, got {type(points).__name__}")
    for i, p in enumerate(points):
        if not isinstance(p, dict):
            raise HarnessError(f"{source}: points[{i}]: expected an object, got {type(p).__name__}")
        for key in ("experiment", "server"):
            if key not in p:
                raise HarnessError(f"{source}: points[{i}]: missing key {key!r}")
        tel = p.get("telemetry")
        if tel is not None and not isinstance(tel, dict):
            raise HarnessError(
                f"{source}: points[{i}].telemetry: expected an object or null, got {type(tel).__name__}"
            )
    return points


WARM_STATES = ("warm-start", "cache-not-cold")


def _with_cache_state(verdict: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """A point measured on a cache that was not cold is flagged whatever its clocks say (issue 20)."""
    if point.get("cache_state") not in WARM_STATES:
        return verdict
    flags = point.get("cache_flags") or {point["cache_state"]: "cache not cold"}
    reasons = list(verdict["reasons"]) + [f"{k}: {why}" for k, why in flags.items()]
    return {**verdict, "reasons": reasons, "flagged": True}


CLIENT_LATE_FLOOR_S = 0.005  # flag client lateness p99 above max(this, CLIENT_LATE_TTFT_SHARE x median TTFT)
CLIENT_LATE_TTFT_SHARE = 0.05


def client_late(point: dict[str, Any]) -> str | None:
    """Why the load generator, not the server, limited this point (its lateness p99, worst seed), or None."""
    med = point.get("median") or {}
    p99 = max(
        (
            (s.get("figures") or {}).get("client_late_s", {}).get("p99")
            for s in (point.get("seeds") or {}).values()
        ),
        key=lambda v: v if isinstance(v, int | float) else -1.0,
        default=None,
    )
    ttft = ((med.get("latency") or {}).get("ttft_s") or {}).get("p50")
    if not isinstance(p99, int | float):
        return None
    bound = max(CLIENT_LATE_FLOOR_S, CLIENT_LATE_TTFT_SHARE * ttft if isinstance(ttft, int | float) else 0.0)
    if p99 <= bound:
        return None
    return (
        f"client-late: p99 of the client's own lateness {p99 * 1000:.1f} ms > {bound * 1000:.1f} ms "
        f"(max of 5 ms and 5% of the median TTFT): the load generator, not the server, limited this point"
    )


def _with_client_lateness(verdict: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    why = client_late(point)
    if why is None:
        return {**verdict, "client_late": False}
    return {**verdict, "reasons": [*verdict["reasons"], why], "flagged": True, "client_late": True}


def validate_summary(
    summary: Any, thresholds: Thresholds | None = None, source: str = "summary"
) -> dict[str, Any]:
    """Verdicts for every point and pair of a summary; `flagged` counts what should fail the exit code.

    Without thresholds, or with the summary's own, these are the summary's verdicts (`verdicts`:
    "summary"); otherwise they are recomputed ("recomputed") and `note` says why in one line.
    """
    points = check_summary(summary, source)
    stored = summary_thresholds(summary, source)
    th = thresholds or stored or Thresholds()
    note = None
    from_summary = stored is not None and th == stored
    if from_summary:
        verdicts, pairs = _stored_verdicts(summary, points, source)
    else:
        verdicts = [point_verdict(p.get("telemetry") or {}, th) for p in points]
        pairs = pair_verdicts(points, th)
        if stored is not None:
            note = f"thresholds differ from the summary's ({_differences(stored, th)}): verdicts recomputed"
    rows = []
    for p, verdict in zip(points, verdicts, strict=True):
        tel = p.get("telemetry") or {}
        verdict = _with_client_lateness(_with_cache_state(verdict, p), p)
        rows.append(
            {
                "experiment": p.get("experiment"),
                "server": p.get("server"),
                "sweep": p.get("sweep"),
                "busy_median_sm_clock_mhz": tel.get("busy_median_sm_clock_mhz"),
                "max_sm_clock_mhz": tel.get("max_sm_clock_mhz"),
                "floor_mhz": floor_mhz(tel, th) if tel.get("n_samples") else None,
                "thermal_fraction": tel.get("thermal_fraction"),
                "temp_max_c": tel.get("temp_max_c"),
                "telemetry_status": tel.get("status"),
                "cache_state": p.get("cache_state"),
                **verdict,
            }
        )
    flagged = sum(r["flagged"] for r in rows) + sum(r["flagged"] for r in pairs)
    result = {
        "thresholds": asdict(th),
        "verdicts": "summary" if from_summary else "recomputed",
        "note": note,
        "points": rows,
        "pairs": pairs,
        "flagged": flagged,
        "ok": flagged == 0,
    }
    result["line"] = verdict_line(result)
    return result


# ---------------------------------------------------------------- wording: short reasons and the verdict line

CLOCK_PROBLEMS = ("below-floor", "thermal", "hw-slowdown", "power-brake", "clock-confounded")
SIM_CARD = "the sim's model of a card, not a card"


def _status_short(status: str | None) -> str:
    """A telemetry status in a few words (the long form stays in the JSON's `reasons`)."""
    s = str(status or "")
    if s.startswith("sim server"):
        return "sim: no GPU"
    if s.startswith("no GPU"):
        return "no GPU used" if "hides" in s else "no GPU"
    if "pynvml" in s or "nvidia-ml-py" in s:
        return "pynvml missing"
    if "libnvidia-ml" in s:
        return "no NVML library"
    if "permission" in s:
        return "NVML: no permission"
    if "did not answer" in s:
        return "NVML timed out"
    if s.startswith("no NVML"):
        return "NVML failed"
    return "no samples" if s else "no telemetry"


def short_reason(row: dict[str, Any], telemetry: dict[str, Any] | None = None) -> str:
    """A verdict's reason in at most ~22 characters, for table cells; `row` is a point or pair verdict.

    `telemetry` is the point's telemetry figures (a validate row carries them itself).
    """
    tel = telemetry if telemetry is not None else row
    verdict = row.get("verdict")
    if isinstance(verdict, dict):  # a summary point: {"verdict": {...}}
        row, verdict = {**row, **verdict}, verdict.get("verdict")
    parts: list[str] = []
    if verdict == "no-telemetry":
        if "a" in row and "b" in row:  # a pair: the first server's status says why
            text = "; ".join(str(r) for r in row.get("reasons") or [])
            parts.append("sim: no GPU" if "sim server" in text else "no clocks")
        else:
            parts.append(_status_short(tel.get("status") or tel.get("telemetry_status")))
    elif verdict == "below-floor":
        clock, floor = tel.get("busy_median_sm_clock_mhz"), tel.get("floor_mhz")
        if clock and floor:
            parts.append(f"SM {clock:.0f} < {floor:.0f} MHz")
        else:
            parts.append(f"SM {clock:.0f} MHz < floor" if clock else "SM clock below floor")
    elif verdict == "thermal":
        tf = tel.get("thermal_fraction")
        parts.append(f"thermal in {tf:.0%}" if isinstance(tf, int | float) else "thermal throttling")
    elif verdict == "hw-slowdown":
        parts.append("HW slowdown")
    elif verdict == "power-brake":
        parts.append("power brake")
    elif verdict == "clock-confounded":
        ratio = row.get("ratio")
        parts.append(f"clocks {ratio:.2f}x apart" if ratio else "clocks differ")
    elif verdict == "ok" and any("floor not judged" in str(r) for r in row.get("reasons") or []):
        parts.append("idle: floor not judged")
    elif verdict == "ok":
        parts.append("clocks ok")
    state = row.get("cache_state")
    if state in WARM_STATES:
        parts.append(str(state))
    if row.get("client_late"):
        parts.append("client late")
    return ", ".join(parts)


def _kind(row: dict[str, Any]) -> str:
    """checked-ok, rerun (a re-run can fix it), unobserved (NVML could not watch a GPU), no-gpu, sim."""
    if row.get("cache_state") in WARM_STATES or row["verdict"] in CLOCK_PROBLEMS or row.get("client_late"):
        return "rerun"
    if row["verdict"] != "no-telemetry":
        return "checked-ok"
    if row["flagged"]:
        return "unobserved"
    status = str(row.get("telemetry_status") or "; ".join(row.get("reasons") or []))
    return "sim" if "sim server" in status else "no-gpu"


def verdict_line(result: dict[str, Any]) -> str:
    """The one line `validate`, `bench` and `bench-real` end with: what was checked, what could not be, what to do.

    "checked and fine" is kept apart from "could not check": a point with no telemetry is never called
    trustworthy, and a re-run is advised only for what a re-run can change (clocks, a warm cache).
    """
    rows = list(result["points"]) + list(result["pairs"])
    kinds = [_kind(r) for r in rows]
    n_pts, n_pairs = len(result["points"]), len(result["pairs"])
    counts = {k: kinds.count(k) for k in ("checked-ok", "rerun", "unobserved", "sim", "no-gpu")}
    unchecked = counts["unobserved"] + counts["sim"] + counts["no-gpu"]
    head = (
        f"{n_pts} points, {n_pairs} pairs: {counts['checked-ok']} checked and fine, "
        f"{counts['rerun'] + counts['unobserved']} flagged, {unchecked} not checkable"
    )
    says: list[str] = []
    if counts["checked-ok"] and unchecked and not counts["rerun"]:
        says.append(f"the {counts['checked-ok']} checked are trustworthy")
    if counts["rerun"]:
        causes = sorted(
            {
                r["verdict"]
                for r, k in zip(rows, kinds, strict=True)
                if k == "rerun" and r["verdict"] in CLOCK_PROBLEMS
            }
            | {str(r.get("cache_state")) for r in rows if r.get("cache_state") in WARM_STATES}
            | {"client-late" for r in rows if r.get("client_late")}
        )
        says.append(f"re-run the flagged points ({', '.join(causes)}: a re-run can change these)")
    if counts["unobserved"]:
        statuses = sorted(
            {
                _status_short(r.get("telemetry_status") or "; ".join(r.get("reasons") or []))
                for r, k in zip(rows, kinds, strict=True)
                if k == "unobserved" and "a" not in r
            }
        )
        says.append(
            f"timings unchecked: NVML could not watch a GPU ({', '.join(statuses) or 'no samples'}); "
            "if the server used one, discount those timings (re-running will not help until NVML can "
            "see it); if it used none, there were no clocks to check"
        )
    if counts["sim"]:
        says.append(f"timings unchecked: sim servers have no GPU, their times are {SIM_CARD}")
    if counts["no-gpu"] and not counts["sim"]:
        says.append("timings unchecked: the server used no GPU, so there were no clocks to check")
    if not says:
        says.append("timings trustworthy" if counts["checked-ok"] else "nothing to check")
    elif not counts["rerun"] and not counts["unobserved"]:
        says.append("hit rates do not depend on clocks")
    return f"{head}: {'; '.join(says)}"
