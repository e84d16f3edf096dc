"""`harness summarize CAPTURE_DIR... -o summaries/`: capture folders → one JSON summary per node."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.summarize.figures import DISAGREE_POINTS
from harness.summarize.summary import summarize, write_summaries


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Turn capture folders into summaries/<node>.json.")
    p.add_argument(
        "dirs",
        nargs="+",
        type=Path,
        metavar="CAPTURE_DIR",
        help="capture/, capture/<node> or an experiment folder",
    )
    p.add_argument(
        "-o",
        "--output",
        type=Path,
        default=Path("summaries"),
        help="a .json file (one node) or a directory for <node>.json files (default: summaries/)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    summaries = summarize(args.dirs)
    paths = write_summaries(summaries, args.output)
    flagged = 0
    for (node, s), path in zip(summaries.items(), paths, strict=True):
        not_ok = sum(p.status != "ok" for p in s.points)
        disagree = sum(bool(p.median.hit_rate_disagree) for p in s.points)
        flagged += not_ok + disagree
        print(
            f"{path}: node {node}, {len(s.experiments)} experiments, {len(s.points)} points "
            f"({not_ok} not ok, {disagree} with hit-rate sources > {DISAGREE_POINTS:g} points apart)"
        )
        for prob in s.problems:
            print(f"  skipped: {prob.path}: {prob.reason}", file=sys.stderr)
    return 1 if flagged else 0
