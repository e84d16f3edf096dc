"""`harness compare`'s work, callable from library code (the fleet's comparison calls it too): one ratio
table per experiment on stdout, and the side-by-side page (harness.report.html_compare)."""

from __future__ import annotations

from pathlib import Path

from harness.report.common import load_summary
from harness.report.compare import INTERVAL_OF, LABELS, cell, check_figures, compare
from harness.summary import Summary


def node_labels(paths: list[Path], summaries: list[Summary]) -> list[str]:
    """Node names, or file stems where two summaries share a node name."""
    nodes = [s.node if "node" in s else p.stem for p, s in zip(paths, summaries, strict=True)]
    return nodes if len(set(nodes)) == len(nodes) else [p.stem for p in paths]


def print_ratios(pa: Path, a: Summary, pb: Path, b: Summary, figures: list[str]) -> bool:
    """One table per experiment, readable at 80 columns: ratios B / A, hit rates as A → B."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    rows = compare(a, b, figures)
    console = Console()
    bare = [LABELS.get(f, f) for f in figures if f not in INTERVAL_OF]
    console.print(
        f"A = {pa} (node {a.get('node')}), B = {pb} (node {b.get('node')}); "
        "ratio = B / A (× ; < 1 means B is lower), hit rates A→B in %; "
        "≈: the 95% seed intervals overlap (not a difference the seeds support); no mark: they do not, "
        "or a side has no interval (one ok seed" + (f"; none for {', '.join(bare)}" if bare else "") + ")",
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
            t.add_row(r.key[1], point, *(cell(f, r.figures[f], r.overlap.get(f)) for f in figures))
        console.print(t)
    return True


def compare_summaries(paths: list[Path], figures: str, html: Path | None) -> bool:
    """Ratios of each summary to the first (figures: comma-separated); the page too when html is set.
    True when every summary shared a point with the first."""
    summaries = [load_summary(p) for p in paths]
    chosen = check_figures(figures, summaries)
    matched = [
        print_ratios(paths[0], summaries[0], pb, b, chosen)
        for pb, b in zip(paths[1:], summaries[1:], strict=True)
    ]
    if html is not None:
        from harness.report.html_compare import write_compare_html

        labels = node_labels(paths, summaries)
        print(write_compare_html(list(zip(labels, summaries, strict=True)), html))
    return all(matched)
