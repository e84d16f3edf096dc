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
from harness.report.common import sweep_order
from harness.verdicts import Thresholds, judge, resolve_thresholds, short_reason, verdict_line
from harness.verdicts.result import Validation

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


def _verdict(r: Any) -> str:
    """The verdict word, coloured: flagged red (no-telemetry yellow), ok green, an expected gap dim."""
    style = STYLE.get(r.verdict, "red") if r.flagged or r.verdict == "ok" else "dim"
    return f"[{style}]{r.verdict}[/]"


def _cache(state: Any) -> str:
    """cold in green, warm-start / cache-not-cold in red (they flag the point), `-` when not judged."""
    if state is None:
        return "-"
    return f"[{'green' if state == 'cold' else 'red'}]{state}[/]"


MIN_WIDTH = {"server": 9, "sweep": 9, "reason": 16, "experiment": 10, "A / B": 10}


def _pair_cell(a: str, b: str) -> str:
    """`a/b`, or `-` when neither is known (so an empty column can be left out)."""
    return "-" if a == b == "-" else f"{a}/{b}"


def _table(title: str, columns: list[tuple[str, str]], rows: list[list[str]]) -> Any:
    """A compact rich table; a column that is `-` in every row is left out (the caption says which)."""
    from rich import box
    from rich.table import Table

    keep = [i for i, _ in enumerate(columns) if any(r[i] != "-" for r in rows)]
    dropped = [columns[i][0] for i in range(len(columns)) if i not in keep]
    t = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    t.dropped = [d.replace("\n", " ") for d in dropped] if rows else []  # type: ignore[attr-defined]
    for i in keep:
        name, kind = columns[i]
        if kind == "num":
            t.add_column(name, justify="right", no_wrap=True)
        elif kind == "word":
            t.add_column(name, no_wrap=True)
        else:
            t.add_column(name, overflow="fold", min_width=MIN_WIDTH.get(name, 6))
    for r in rows:
        t.add_row(*(r[i] for i in keep))
    return t


def _print(console: Any, table: Any) -> None:
    """The table, then which columns were left out for having no figure in any row."""
    console.print(table)
    if table.dropped:
        console.print(f"[dim]no figures for: {', '.join(table.dropped)}[/]")


def print_tables(result: Validation, title: str, width: int | None = None, file: Any = None) -> None:
    """Point verdicts per experiment, pair verdicts, then the verdict line; readable at 80 columns.

    Reasons are short here; `--json` has them in full.
    """
    from rich.console import Console
    from rich.markup import escape

    console = Console(width=width, file=file)
    console.print(f"verdicts: {escape(title)}")
    point_cols = [
        ("server", "text"),
        ("sweep", "text"),
        ("SM MHz\nbusy/floor", "num"),
        ("prefill\nMHz/n", "num"),
        ("thermal\n%/max °C", "num"),
        ("cache", "word"),
        ("verdict", "word"),
        ("reason", "text"),
    ]
    experiments = list(dict.fromkeys(r.experiment for r in result.points))
    for exp in experiments:
        rows = []
        mine = [r for r in result.points if r.experiment == exp]
        for r in sorted(mine, key=lambda r: (r.server, sweep_order(r.sweep))):
            tf = r.thermal_fraction
            rows.append(
                [
                    r.server,
                    _sweep(r.sweep),
                    _pair_cell(_mhz(r.busy_median_sm_clock_mhz), _mhz(r.floor_mhz)),
                    _pair_cell(
                        _mhz(r.prefill_median_sm_clock_mhz), "-" if r.n_prefill is None else str(r.n_prefill)
                    ),
                    _pair_cell(
                        "-" if tf is None else f"{tf:.0%}",
                        "-" if r.temp_max_c is None else f"{r.temp_max_c:.0f}",
                    ),
                    _cache(r.cache_state),
                    _verdict(r),
                    escape(short_reason(r.to_json())),
                ]
            )
        _print(console, _table(f"points of {exp}", point_cols, rows))
    pair_cols = [
        ("sweep", "text"),
        ("A / B", "text"),
        ("SM MHz\nA/B", "num"),
        ("clock", "word"),
        ("ratio\n×", "num"),
        ("verdict", "word"),
        ("reason", "text"),
    ]
    for exp in dict.fromkeys(r.experiment for r in result.pairs):
        exp_pairs = [r for r in result.pairs if r.experiment == exp]
        rows = [
            [
                _sweep(r.sweep),
                f"{r.a} / {r.b}",
                _pair_cell(_mhz(r.clock_a_mhz), _mhz(r.clock_b_mhz)),
                {"prefill-window": "prefill", "busy-median": "busy"}.get(r.clock_basis or "", "-"),
                "-" if r.ratio is None else f"{r.ratio:.2f}",
                _verdict(r),
                escape(short_reason(r.to_json())),
            ]
            for r in sorted(exp_pairs, key=lambda r: sweep_order(r.sweep))
        ]
        _print(console, _table(f"A/B pairs of {exp} (same sweep value)", pair_cols, rows))
    console.print("[dim]reasons in full: harness validate --json[/]")
    style = "green" if result.ok and not result.unchecked else ("yellow" if result.ok else "red")
    console.print(f"[{style}]{escape(verdict_line(result))}[/]")


def run(args: argparse.Namespace) -> int:
    from harness.verdicts.health import summary_health

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
    result = judge(summary, th, source=str(args.summary))
    health = summary_health(summary)  # beside the clock verdicts (harness.verdicts.health)
    gaps = summary_health(summary, "not_judged")  # what could not be judged: never read as healthy
    if args.json:
        print(json.dumps({**result.to_json(), "health": health, "not_judged": gaps}, indent=2, default=str))
    else:
        if result.note:
            print(result.note)
        print_tables(result, str(args.summary))
        for h in health:
            basis = f" [{h['evidence']}]" if h.get("evidence") else ""
            print(
                f"health: {h['experiment']}/{h['server']} {_sweep(h['sweep'])} seed {h['seed']}: {h['verdict']}: {h['reason']}{basis}"
            )
        for g in gaps:
            print(
                f"health not judged: {g['experiment']}/{g['server']} {_sweep(g['sweep'])} seed {g['seed']}: {g['verdict']}: {g['why']}"
            )
    return 0 if result.ok and not health else 1
