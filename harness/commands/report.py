"""`harness report summaries/<node>.json [-o DIR]`: Markdown tables, PNG charts, one HTML page and CSVs."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.report import write_report
from harness.report.common import load_summary


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Markdown tables, PNG charts, a self-contained HTML page and CSVs from a summary.",
    )
    p.add_argument("summary", type=Path, help="summaries/<node>.json")
    p.add_argument(
        "-o", "--output", type=Path, default=None, help="output folder (default: beside the summary)"
    )
    p.add_argument("--no-charts", action="store_true", help="no PNG charts")
    p.add_argument("--no-html", action="store_true", help="no <node>.html page")
    p.add_argument("--no-csv", action="store_true", help="no <node>-<experiment>.csv files")
    return p


def run(args: argparse.Namespace) -> int:
    summary = load_summary(args.summary)
    out = args.output or args.summary.parent
    written = write_report(
        summary,
        out,
        stem=args.summary.stem,
        charts=not args.no_charts,
        html=not args.no_html,
        csv=not args.no_csv,
    )
    for path in written:
        print(path)
    return 0
