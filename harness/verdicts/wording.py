"""Verdict wording: the short reason beside a verdict in a table cell, and the one verdict line.

"checked and fine" is kept apart from "could not check": a point with no telemetry is never called
trustworthy, and a re-run is advised only for what a re-run can change (clocks, a warm cache).
"""

from __future__ import annotations

from typing import Any

from harness.summary import Record

WARM_STATES = ("warm-start", "cache-not-cold")

CLOCK_PROBLEMS = (
    "below-floor",
    "prefill-below-floor",
    "thermal",
    "hw-slowdown",
    "power-brake",
    "clock-confounded",
)
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


def short_reason(row: dict[str, Any], telemetry: dict[str, Any] | Record | None = None) -> str:
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
    elif verdict == "prefill-below-floor":
        clock, floor = tel.get("prefill_median_sm_clock_mhz"), tel.get("floor_mhz")
        parts.append(f"prefill {clock:.0f} < {floor:.0f}" if clock and floor else "prefill clock < floor")
    elif verdict == "thermal":
        tf = tel.get("thermal_fraction")
        parts.append(f"thermal in {tf:.0%}" if isinstance(tf, int | float) else "thermal throttling")
    elif verdict == "hw-slowdown":
        parts.append("HW slowdown")
    elif verdict == "power-brake":
        parts.append("power brake")
    elif verdict == "clock-confounded":
        ratio = row.get("ratio")
        basis = "prefill " if row.get("clock_basis") == "prefill-window" else ""
        parts.append(f"{basis}clocks {ratio:.2f}x apart" if ratio else "clocks differ")
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


def verdict_line(result: dict[str, Any] | Record) -> str:
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


# ---------------------------------------------------------------- table cells


def verdict_word(v: Any) -> str:
    """`ok`, `below-floor`, ...: the word of a point's verdict or a pair; `n/a` without one."""
    if isinstance(v, Record):
        v = v.to_json()
    if isinstance(v, dict):
        return str(v.get("verdict", v.get("status", "?")))
    return str(v) if v is not None else "n/a"


def verdict_cell(v: Any, telemetry: Any = None, point: Any = None) -> str:
    """The verdict word with its short reason beside it, e.g. `no-telemetry (sim: no GPU)`; the long form is in
    the JSON. `v` is a point's verdict object or a pair; `point` adds its cache state."""
    word = verdict_word(v)
    if isinstance(v, Record):
        v = v.to_json()
    if not isinstance(v, dict):
        return word
    row = {**v, "cache_state": (point or {}).get("cache_state")}
    why = short_reason(row, telemetry if telemetry is not None else {})
    return f"{word} ({why})" if why else word
