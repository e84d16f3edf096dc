"""`harness compare A.json B.json ...`: ratios of each summary's figures to A's, for the points both hold;
`--html OUT.html` also writes one page with the nodes side by side (harness.report.html_page)."""

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
        prog=prog, description="Ratios (B / A) between the matching points of summaries; --html: one page."
    )
    p.add_argument("a", type=Path, help="summary A (the baseline)")
    p.add_argument("others", type=Path, nargs="+", metavar="B", help="summaries to hold against A")
    p.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="OUT.html",
        help="also write the nodes side by side as a page",
    )
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


def _labels(paths: list[Path], summaries: list[dict[str, Any]]) -> list[str]:
    """Node names, or file stems where two summaries share a node name."""
    nodes = [str(s.get("node") or p.stem) for p, s in zip(paths, summaries, strict=True)]
    return nodes if len(set(nodes)) == len(nodes) else [p.stem for p in paths]


def _print_ratios(pa: Path, a: dict[str, Any], pb: Path, b: dict[str, Any], figures: list[str]) -> bool:
    rows = compare(a, b, figures)
    print(f"A = {pa} (node {a.get('node')}), B = {pb} (node {b.get('node')}); ratio = B / A")
    if not rows:
        print("no matching points (experiment, server and sweep must be equal)")
        return False
    header = ["experiment", "server", "point", "status A/B"] + [f"{f} B/A" for f in figures]
    print(" | ".join(header))
    for r in rows:
        cells = [*r["key"], "/".join(r["status"])]
        for f in figures:
            ratio = r["figures"][f][2]
            cells.append(f"{ratio:.3f}" if ratio is not None else "n/a")
        print(" | ".join(cells))
    return True


def run(args: argparse.Namespace) -> int:
    paths = [args.a, *args.others]
    summaries = [load_summary(p) for p in paths]
    figures = [f.strip() for f in args.figures.split(",") if f.strip()]
    matched = [
        _print_ratios(paths[0], summaries[0], pb, b, figures)
        for pb, b in zip(paths[1:], summaries[1:], strict=True)
    ]
    if args.html is not None:
        from harness.report.html_compare import write_compare_html

        labels = _labels(paths, summaries)
        print(write_compare_html(list(zip(labels, summaries, strict=True)), args.html))
    return 0 if all(matched) else 1
