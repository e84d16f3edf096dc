"""A summary → one CSV per experiment (`<node>-<experiment>.csv`): a row per point and seed, plus the
point's median row (`row` = `median`), for people's own analysis in pandas or a spreadsheet.

Columns: the point's identity and table columns (policy, pool, time scale, verdict, clock), then every
scalar figure under its summary name (seconds, fractions, tokens), then dict figures flattened as
`<figure>.<key>` (e.g. `hit_rate_usage_by_turn.0`). Empty cell = null. `pandas.read_csv(path)` reads it.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.report.common import server_policy, server_pool, server_time_scale, verdict_word
from harness.report.tables import reasons_text
from harness.summary import Summary, parse_summary

ID_COLUMNS = [
    "node",
    "experiment",
    "server",
    "point_key",
    "row",
    "seed",
    "status",
    "policy",
    "pool_tokens",
    "time_scale",
    "workload_kind",
    "prompt_tokens_to_keep",
    "sm_clock_busy_median_mhz",
    "verdict",
    "verdict_reasons",
]


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, bool | int | float | str)


def _flatten(figures: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalars as they are; dicts as `figure.key` (`hit_rate_usage_by_turn.0`, `modelled.ttft_ms.p50`);
    lists (spreads, notes) left out."""
    out: dict[str, Any] = {}
    for k, v in figures.items():
        if _is_scalar(v):
            out[prefix + str(k)] = v
        elif isinstance(v, dict):
            keys = sorted(v, key=lambda x: (0, int(x)) if str(x).isdigit() else (1, str(x)))
            out.update(_flatten({kk: v[kk] for kk in keys}, f"{prefix}{k}."))
    return out


def experiment_rows(summary: Summary | Mapping[str, Any], exp: str) -> list[dict[str, Any]]:
    """Each point's seeds (in seed order) then its median row; points in server and sweep order."""
    s = parse_summary(summary)
    entry = s.experiments.get(exp)
    servers = entry.servers if entry else {}
    rows: list[dict[str, Any]] = []
    pts = [p for p in s.points if p.experiment == exp]
    pts.sort(
        key=lambda p: (
            p.server,
            tuple((0, v) if isinstance(v, int | float) else (1, str(v)) for v in p.sweep.values()),
        )
    )
    for p in pts:
        s_entry = servers.get(p.server)
        common = {
            "node": s.get("node"),
            "experiment": exp,
            "server": p.server,
            "point_key": p.point_key,
            "policy": server_policy(s_entry),
            "pool_tokens": server_pool(s_entry),
            "time_scale": server_time_scale(s_entry),
            "workload_kind": p.workload_kind,
            "prompt_tokens_to_keep": p.prompt_tokens_to_keep,
        }
        sweep = {f"sweep.{k}": v for k, v in p.sweep.items()}
        for seed in sorted(p.seeds, key=lambda s: (0, int(s)) if str(s).isdigit() else (1, s)):
            sd = p.seeds[seed]
            rows.append(
                {
                    **common,
                    "row": "seed",
                    "seed": seed,
                    "status": sd.status,
                    "sm_clock_busy_median_mhz": sd.telemetry.busy_median_sm_clock_mhz,
                    "sm_clock_prefill_window_mhz": sd.telemetry.prefill_median_sm_clock_mhz,
                    "verdict": None,
                    "verdict_reasons": None,
                    **sweep,
                    **_flatten(sd.figures.to_json()),  # every figure, by its summary name
                }
            )
        median = {k: v for k, v in p.median.to_json().items() if k != "modelled"}
        rows.append(
            {
                **common,
                "row": "median",
                "seed": None,
                "status": p.status,
                "sm_clock_busy_median_mhz": p.telemetry.busy_median_sm_clock_mhz if p.telemetry else None,
                "sm_clock_prefill_window_mhz": p.telemetry.prefill_median_sm_clock_mhz
                if p.telemetry
                else None,
                "verdict": verdict_word(p.verdict),
                "verdict_reasons": reasons_text(p.verdict),
                **sweep,
                **_flatten(median),
                **_flatten({"modelled": p.modelled.to_json()} if p.modelled else {}),
            }
        )
    return rows


def _cell(v: Any) -> Any:
    return "" if v is None else v


def write_csvs(summary: Summary | Mapping[str, Any], out: Path, stem: str | None = None) -> list[Path]:
    """`<stem>-<experiment>.csv` per experiment with points; returns the paths written."""
    summary = parse_summary(summary)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or summary.node
    written = []
    for exp in sorted(summary.experiments):
        rows = experiment_rows(summary, exp)
        if not rows:
            continue
        cols = list(ID_COLUMNS)
        for r in rows:
            cols += [k for k in r if k not in cols]
        path = out / f"{stem}-{_safe(exp)}.csv"
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=cols, extrasaction="raise")
            w.writeheader()
            for r in rows:
                w.writerow({c: _cell(r.get(c)) for c in cols})
        written.append(path)
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
