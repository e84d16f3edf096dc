"""`harness compare A.json B.json ...`: ratios of each summary's figures to A's, for the points both hold;
`--html OUT.html` also writes one page with the nodes side by side (harness.report.html_page)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.report.compare import DEFAULT_FIGURES, FIGURES
from harness.report.compare_text import compare_summaries


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


def run(args: argparse.Namespace) -> int:
    return 0 if compare_summaries([args.a, *args.others], args.figures, args.html) else 1
