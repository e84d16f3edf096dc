"""After the units: summaries/<node>.json per group (summarize → report → validate, as bench does), then
the fleet comparison (`harness compare` of every node against the first, text and the HTML page)."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from pathlib import Path

from harness.capture import MANIFEST
from harness.errors import HarnessError
from harness.fleet.config import FleetFile

Log = Callable[[str], None]


def node_stages(fleet: FleetFile, log: Log) -> tuple[list[Path], int]:
    """Summaries of every group that has a capture; returns their paths and how many points validate flagged."""
    from harness.sweep.pipeline import after_sweep
    from harness.sweep.plan import BenchOptions

    paths: list[Path] = []
    flagged = 0
    for group in fleet.nodes:
        if not any((fleet.capture / group.name).glob(f"*/{MANIFEST}")):
            log(f"{group.name}: no experiment captured, no summary")
            continue
        opts = BenchOptions(node=group.name, capture=fleet.capture, summaries=fleet.summaries)
        try:
            stages = after_sweep(opts, log)
        except HarnessError as e:  # one node's capture must not keep the others from their summaries
            log(f"{group.name}: no summary: {e}")
            flagged += 1
            continue
        for line in stages.verdict_lines:
            log(line)
        flagged += stages.flagged
        paths.append(fleet.summaries / f"{group.name}.json")
    return [p for p in paths if p.is_file()], flagged


def fleet_compare(summaries: list[Path], out_dir: Path, log: Log) -> list[Path]:
    """`harness compare FIRST OTHERS... --html`: ratios to the first node, as text and one page."""
    if len(summaries) < 2:
        log("compare: fewer than two node summaries, no fleet comparison")
        return []
    from harness.report.compare import DEFAULT_FIGURES
    from harness.report.compare_text import compare_summaries

    html = out_dir / "fleet-compare.html"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        compare_summaries(summaries, ",".join(DEFAULT_FIGURES), html)
    text = out_dir / "fleet-compare.txt"
    text.write_text(buf.getvalue(), encoding="utf-8")
    written = [text] + ([html] if html.is_file() else [])
    log(
        f"compare: {', '.join(str(p) for p in written)} ({len(summaries) - 1} nodes against {summaries[0].stem})"
    )
    return written
