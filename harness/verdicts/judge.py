"""A summary's verdicts as `harness validate` reports them: stored ones at the summary's thresholds.

Verdicts are computed once, by `harness summarize`, which keeps the thresholds it used in the
summary (`verdict_thresholds`) and the verdict line (`verdict`, schema 2). `validate_summary` at
those thresholds returns the summary's own verdicts, so validate and the report cannot disagree; at
other thresholds it recomputes them and says so in `note`. A summary without `verdict_thresholds`
(hand-made, or older) is judged afresh. On top of the clock verdict, a point measured on a cache
that was not cold, or limited by the load generator's own lateness, is flagged.
"""

from __future__ import annotations

from dataclasses import asdict, fields, replace
from typing import Any

from harness.errors import HarnessError
from harness.summary import Pair, Point, Summary, SummaryVerdict, Telemetry, parse_summary
from harness.verdicts.clocks import Thresholds, floor_mhz, pair_verdicts, point_verdict
from harness.verdicts.result import PointRow, Validation
from harness.verdicts.wording import WARM_STATES, verdict_line


def summary_thresholds(summary: Summary, source: str = "summary") -> Thresholds | None:
    """The thresholds the summary's verdicts were computed with; None when it does not record them."""
    raw = summary.verdict_thresholds
    if raw is None:
        return None
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
    s = parse_summary(summary, source)
    return replace(summary_thresholds(s, source) or Thresholds(), **given)


def _differences(stored: Thresholds, th: Thresholds) -> str:
    a, b = asdict(stored), asdict(th)
    return ", ".join(f"{k} {a[k]:g} → {b[k]:g}" for k in a if a[k] != b[k])


_POINT_VERDICT_KEYS = ("verdict", "reasons", "flagged")
_PAIR_KEYS = ("experiment", "sweep", "a", "b", "clock_a_mhz", "clock_b_mhz", "ratio", *_POINT_VERDICT_KEYS)


def _stored_verdicts(summary: Summary, source: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The summary's point verdicts and pairs, checked for the keys validate reads."""
    verdicts = []
    for i, p in enumerate(summary.points):
        if p.verdict is None:
            raise HarnessError(
                f"{source}: points[{i}].verdict: expected an object with {', '.join(_POINT_VERDICT_KEYS)} "
                "(the summary records verdict_thresholds)"
            )
        verdicts.append(
            {
                "verdict": p.verdict.verdict,
                "reasons": p.verdict.reasons,
                "flagged": p.verdict.flagged,
                "clock_basis": p.verdict.clock_basis,
            }
        )
    if "pairs" not in summary:
        raise HarnessError(f"{source}: pairs: expected a list (the summary records verdict_thresholds)")
    for i, pr in enumerate(summary.pairs):
        missing = [k for k in _PAIR_KEYS if k not in pr]
        if missing:
            raise HarnessError(f"{source}: pairs[{i}]: missing {', '.join(map(repr, missing))}")
    return verdicts, [pr.to_json() for pr in summary.pairs]


def _with_cache_state(verdict: dict[str, Any], point: Point) -> dict[str, Any]:
    """A point measured on a cache that was not cold is flagged whatever its clocks say (issue 20)."""
    if point.cache_state not in WARM_STATES:
        return verdict
    flags = point.cache_flags or {point.cache_state: "cache not cold"}
    reasons = list(verdict["reasons"]) + [f"{k}: {why}" for k, why in flags.items()]
    return {**verdict, "reasons": reasons, "flagged": True}


CLIENT_LATE_FLOOR_S = 0.005  # flag client lateness p99 above max(this, CLIENT_LATE_TTFT_SHARE x median TTFT)
CLIENT_LATE_TTFT_SHARE = 0.05


def client_late(point: Any) -> str | None:
    """Why the load generator, not the server, limited this point (its lateness p99, worst seed), or None."""
    p = point if isinstance(point, Point) else Point.model_validate(point)
    p99s = [s.figures.client_late_s.p99 for s in p.seeds.values() if s.figures.client_late_s is not None]
    p99 = max(p99s, key=lambda v: v if isinstance(v, int | float) else -1.0, default=None)
    ttft = p.median.latency.ttft_s.p50 if p.median.latency is not None else None
    if not isinstance(p99, int | float):
        return None
    bound = max(CLIENT_LATE_FLOOR_S, CLIENT_LATE_TTFT_SHARE * ttft if isinstance(ttft, int | float) else 0.0)
    if p99 <= bound:
        return None
    return (
        f"client-late: p99 of the client's own lateness {p99 * 1000:.1f} ms > {bound * 1000:.1f} ms "
        f"(max of 5 ms and 5% of the median TTFT): the load generator, not the server, limited this point"
    )


def _with_client_lateness(verdict: dict[str, Any], point: Point) -> dict[str, Any]:
    why = client_late(point)
    if why is None:
        return {**verdict, "client_late": False}
    return {**verdict, "reasons": [*verdict["reasons"], why], "flagged": True, "client_late": True}


def judge(summary: Any, thresholds: Thresholds | None = None, source: str = "summary") -> Validation:
    """Verdicts for every point and pair of a summary; `flagged` counts what should fail the exit code.

    Without thresholds, or with the summary's own, these are the summary's verdicts (`verdicts`:
    "summary"); otherwise they are recomputed ("recomputed") and `note` says why in one line.
    """
    s = parse_summary(summary, source)
    stored = summary_thresholds(s, source)
    th = thresholds or stored or Thresholds()
    note = None
    from_summary = stored is not None and th == stored
    if from_summary:
        verdicts, pairs = _stored_verdicts(s, source)
    else:
        verdicts = [point_verdict(p.telemetry, th) for p in s.points]
        pairs = pair_verdicts(s.points, th)
        if stored is not None:
            note = f"thresholds differ from the summary's ({_differences(stored, th)}): verdicts recomputed"
    rows = []
    for p, verdict in zip(s.points, verdicts, strict=True):
        tel = p.telemetry or Telemetry()
        verdict = _with_client_lateness(_with_cache_state(verdict, p), p)
        rows.append(
            PointRow(
                experiment=p.experiment,
                server=p.server,
                sweep=p.get("sweep"),
                busy_median_sm_clock_mhz=tel.busy_median_sm_clock_mhz,
                prefill_median_sm_clock_mhz=tel.prefill_median_sm_clock_mhz,
                n_prefill=tel.n_prefill,
                max_sm_clock_mhz=tel.max_sm_clock_mhz,
                floor_mhz=floor_mhz(tel, th) if tel.n_samples else None,
                thermal_fraction=tel.thermal_fraction,
                temp_max_c=tel.temp_max_c,
                telemetry_status=tel.status,
                cache_state=p.cache_state,
                **verdict,
            )
        )
    pair_rows = [Pair.model_validate(pr) for pr in pairs]
    flagged = sum(r.flagged for r in rows) + sum(r.flagged for r in pair_rows)
    result = Validation(
        thresholds=asdict(th),
        verdicts="summary" if from_summary else "recomputed",
        note=note,
        points=rows,
        pairs=pair_rows,
        flagged=flagged,
        ok=flagged == 0,
    )
    result.line = verdict_line(result)
    return result


def validate_summary(
    summary: Any, thresholds: Thresholds | None = None, source: str = "summary"
) -> dict[str, Any]:
    """judge() as the JSON object `harness validate --json` prints."""
    return judge(summary, thresholds, source).to_json()


def summary_verdict(summary: Any, source: str = "summary") -> SummaryVerdict:
    """The summary's verdict line and count at its own thresholds: what summarize stores (schema 2)."""
    result = judge(summary, source=source)
    return SummaryVerdict(line=result.line, flagged=result.flagged, ok=result.ok)


def stored_verdict(summary: Summary) -> SummaryVerdict:
    """The verdict a summary holds; for a schema-1 file (written before it was stored), judged now, once."""
    if summary.verdict is None:
        summary.verdict = summary_verdict(summary)
    return summary.verdict
