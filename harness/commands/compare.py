"""`harness compare A.json B.json`: ratios B / A of the figures of points both summaries hold."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from harness.report.common import load_summary

FIGURES = (
    "ttft_median_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "itl_median_s",
    "e2e_median_s",
    "output_tok_s",
    "input_tok_s",
    "hit_rate_usage",
    "hit_rate_log",
    "hit_rate_counters",
)


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Ratios (B / A) between the matching points of two summaries."
    )
    p.add_argument("a", type=Path, help="summary A (the baseline)")
    p.add_argument("b", type=Path, help="summary B")
    p.add_argument(
        "--figures", default=",".join(FIGURES[:7]), help="comma-separated median figures to compare"
    )
    return p


def _key(p: dict[str, Any]) -> tuple[str, str, str]:
    return (p["experiment"], p["server"], p["point_key"])


def compare(a: dict[str, Any], b: dict[str, Any], figures: list[str]) -> list[dict[str, Any]]:
    """One row per point present in both: A and B medians and B / A for each figure."""
    bmap = {_key(p): p for p in b["points"]}
    rows = []
    for pa in a["points"]:
        pb = bmap.get(_key(pa))
        if pb is None:
            continue
        row: dict[str, Any] = {"key": _key(pa), "status": (pa["status"], pb["status"]), "figures": {}}
        for f in figures:
            va, vb = pa["median"].get(f), pb["median"].get(f)
            ratio = vb / va if isinstance(va, int | float) and isinstance(vb, int | float) and va else None
            row["figures"][f] = (va, vb, ratio)
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    a, b = load_summary(args.a), load_summary(args.b)
    figures = [f.strip() for f in args.figures.split(",") if f.strip()]
    rows = compare(a, b, figures)
    print(f"A = {args.a} (node {a.get('node')}), B = {args.b} (node {b.get('node')}); ratio = B / A")
    if not rows:
        print("no matching points (experiment, server and sweep must be equal)")
        return 1
    header = ["experiment", "server", "point", "status A/B"] + [f"{f} B/A" for f in figures]
    print(" | ".join(header))
    for r in rows:
        cells = [*r["key"], "/".join(r["status"])]
        for f in figures:
            ratio = r["figures"][f][2]
            cells.append(f"{ratio:.3f}" if ratio is not None else "n/a")
        print(" | ".join(cells))
    return 0
