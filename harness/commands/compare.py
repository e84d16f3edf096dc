"""`harness compare A.json B.json ...`: ratios of each summary's figures to A's, for the points both hold;
`--html OUT.html` also writes one page with the nodes side by side (harness.report.html_page)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.report.common import load_summary
from harness.report.compare import DEFAULT_FIGURES, FIGURES, LABELS, cell, check_figures, compare
from harness.summary import Summary


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
        "--figures",
        default=",".join(DEFAULT_FIGURES),
        help=f"comma-separated median figures (default {','.join(DEFAULT_FIGURES)}; known: {', '.join(FIGURES)})",
    )
    return p


def _labels(paths: list[Path], summaries: list[Summary]) -> list[str]:
    """Node names, or file stems where two summaries share a node name."""
    nodes = [s.node if "node" in s else p.stem for p, s in zip(paths, summaries, strict=True)]
    return nodes if len(set(nodes)) == len(nodes) else [p.stem for p in paths]


def _print_ratios(pa: Path, a: Summary, pb: Path, b: Summary, figures: list[str]) -> bool:
    """One table per experiment, readable at 80 columns: ratios B / A, hit rates as A → B."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    rows = compare(a, b, figures)
    console = Console()
    console.print(
        f"A = {pa} (node {a.get('node')}), B = {pb} (node {b.get('node')}); "
        "ratio = B / A (× ; < 1 means B is lower), hit rates A→B in %",
        highlight=False,
    )
    if not rows:
        console.print("no matching points (experiment, server and sweep must be equal)")
        return False
    for exp in dict.fromkeys(r.key[0] for r in rows):
        t = Table(title=exp, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        t.add_column("server", overflow="fold")
        t.add_column("point", overflow="fold")
        for f in figures:
            t.add_column(LABELS.get(f, f), justify="right", overflow="fold")
        for r in (r for r in rows if r.key[0] == exp):
            status = "/".join(r.status)
            point = r.key[2] + ("" if status == "ok/ok" else f" ({status})")
            t.add_row(r.key[1], point, *(cell(f, r.figures[f]) for f in figures))
        console.print(t)
    return True


def run(args: argparse.Namespace) -> int:
    paths = [args.a, *args.others]
    summaries = [load_summary(p) for p in paths]
    figures = check_figures(args.figures, summaries)
    matched = [
        _print_ratios(paths[0], summaries[0], pb, b, figures)
        for pb, b in zip(paths[1:], summaries[1:], strict=True)
    ]
    if args.html is not None:
        from harness.report.html_compare import write_compare_html

        labels = _labels(paths, summaries)
        print(write_compare_html(list(zip(labels, summaries, strict=True)), args.html))
    return 0 if all(matched) else 1
