"""`harness validate summaries/<node>.json`: clock-floor and throttle verdicts per point and per A/B pair.

Exit 0 when nothing is flagged, 1 when anything is (a no-telemetry point counts only when the status
does not say the server had no GPU, e.g. the sim; a point measured on a cache that was not cold,
`warm-start` or `cache-not-cold`, always counts), 2 on bad input. A threshold not given is the
summary's own, so plain `harness validate` shows the verdicts the summary (and its report) holds.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.validate import Thresholds, resolve_thresholds, validate_summary

STYLE = {"ok": "green", "no-telemetry": "yellow"}


def build_parser(prog: str) -> argparse.ArgumentParser:
    d = Thresholds()
    p = argparse.ArgumentParser(prog=prog, description="Clock-floor and throttle verdicts for a summary.")
    p.add_argument("summary", type=Path, help="summaries/<node>.json written by `harness summarize`")
    p.add_argument(
        "--clock-floor-mhz",
        type=float,
        default=None,
        help=f"absolute floor (default: the summary's, else {d.clock_floor_mhz:g})",
    )
    p.add_argument(
        "--clock-floor-ratio",
        type=float,
        default=None,
        help=f"floor as a share of max SM clock (the summary's, else {d.clock_floor_ratio:g})",
    )
    p.add_argument(
        "--max-thermal-fraction",
        type=float,
        default=None,
        help=f"thermal-flagged share (the summary's, else {d.max_thermal_fraction:g})",
    )
    p.add_argument(
        "--max-ab-clock-ratio",
        type=float,
        default=None,
        help=f"A/B clock ratio (the summary's, else {d.max_ab_clock_ratio:g})",
    )
    p.add_argument("--json", action="store_true", help="print the verdicts as JSON")
    return p


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise HarnessError(f"{path}: unreadable: {e}") from None
    except json.JSONDecodeError as e:
        raise HarnessError(f"{path}: not JSON: line {e.lineno} column {e.colno}: {e.msg}") from None


def _mhz(v: Any) -> str:
    return "-" if v is None else f"{v:.0f}"


def _sweep(s: Any) -> str:
    if isinstance(s, dict):
        return ",".join(f"{k}={v}" for k, v in s.items()) or "-"
    return "-" if s is None else str(s)


def _verdict(r: dict[str, Any]) -> str:
    """The verdict word, coloured: flagged red (no-telemetry yellow), ok green, an expected gap dim."""
    style = STYLE.get(r["verdict"], "red") if r["flagged"] or r["verdict"] == "ok" else "dim"
    return f"[{style}]{r['verdict']}[/]"


def _cache(state: Any) -> str:
    """cold in green, warm-start / cache-not-cold in red (they flag the point), `-` when not judged."""
    if state is None:
        return "-"
    return f"[{'green' if state == 'cold' else 'red'}]{state}[/]"


def print_tables(result: dict[str, Any], title: str, width: int | None = None) -> None:
    """Point verdicts, then pair verdicts, then one summary line, as rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=width)
    t = Table(title=f"point verdicts: {title}", title_justify="left")
    for col in (
        "experiment",
        "server",
        "sweep",
        "busy SM MHz",
        "floor MHz",
        "max SM MHz",
        "thermal",
        "temp °C",
    ):
        t.add_column(col, justify="right" if "MHz" in col or col in ("thermal", "temp °C") else "left")
    t.add_column("cache")
    t.add_column("verdict")
    t.add_column("reasons", overflow="fold")
    for r in result["points"]:
        tf = r["thermal_fraction"]
        t.add_row(
            str(r["experiment"]),
            str(r["server"]),
            _sweep(r["sweep"]),
            _mhz(r["busy_median_sm_clock_mhz"]),
            _mhz(r["floor_mhz"]),
            _mhz(r["max_sm_clock_mhz"]),
            "-" if tf is None else f"{tf:.0%}",
            "-" if r["temp_max_c"] is None else str(r["temp_max_c"]),
            _cache(r.get("cache_state")),
            _verdict(r),
            "; ".join(r["reasons"]),
        )
    console.print(t)
    if result["pairs"]:
        pt = Table(title="A/B pairs (same experiment, same sweep value)", title_justify="left")
        for col in ("experiment", "sweep", "A", "B", "SM MHz A", "SM MHz B", "ratio", "verdict"):
            pt.add_column(col, justify="right" if "MHz" in col or col == "ratio" else "left")
        pt.add_column("reasons", overflow="fold")
        for r in result["pairs"]:
            pt.add_row(
                str(r["experiment"]),
                _sweep(r["sweep"]),
                str(r["a"]),
                str(r["b"]),
                _mhz(r["clock_a_mhz"]),
                _mhz(r["clock_b_mhz"]),
                "-" if r["ratio"] is None else f"{r['ratio']:.2f}",
                _verdict(r),
                "; ".join(r["reasons"]),
            )
        console.print(pt)
    n_pts, n_pairs = len(result["points"]), len(result["pairs"])
    bad_pts = sum(r["flagged"] for r in result["points"])
    bad_pairs = sum(r["flagged"] for r in result["pairs"])
    console.print(
        f"{n_pts} points, {bad_pts} flagged; {n_pairs} pairs, {bad_pairs} flagged: "
        + ("[green]timings trustworthy[/]" if result["ok"] else "[red]re-run or discount the flagged rows[/]")
    )


def run(args: argparse.Namespace) -> int:
    given: dict[str, float] = {}
    for name in ("clock_floor_mhz", "clock_floor_ratio", "max_thermal_fraction", "max_ab_clock_ratio"):
        value = getattr(args, name)
        if value is None:
            continue
        if value < 0:
            raise HarnessError(f"--{name.replace('_', '-')} {value}: must be >= 0")
        given[name] = value
    summary = _load(args.summary)
    th = resolve_thresholds(summary, given, source=str(args.summary))
    result = validate_summary(summary, th, source=str(args.summary))
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        if result["note"]:
            print(result["note"])
        print_tables(result, str(args.summary))
    return 0 if result["ok"] else 1
