"""The report stage: a summary → one file per format, sharing `common` and `tables`.

`markdown` (tables people paste), `charts` (PNG), `html_page` (one self-contained page with interactive
charts, drawn in the browser by the vendored uPlot), `csv_files` (one CSV per experiment). `write_report`
is the stage's entry point (harness report, harness bench): charts first, so the Markdown can link them;
matplotlib is loaded only when charts are drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.report import csv_files, html_page, markdown
from harness.summary import parse_summary


def write_report(
    summary: Any,
    out: Path,
    stem: str | None = None,
    charts: bool = True,
    html: bool = True,
    csv: bool = True,
) -> list[Path]:
    """Write `<stem>.md`, its PNG charts, `<stem>.html` and `<stem>-<experiment>.csv` into `out`;
    returns the paths written, the Markdown first. `summary`: a Summary, or its JSON object."""
    summary = parse_summary(summary)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or summary.node
    written: list[Path] = []
    pngs: dict[str, list[Path]] = {}
    if charts:
        from harness.report import charts as charts_mod

        pngs = charts_mod.draw_all(summary, out, stem)
        written += [p for ps in pngs.values() for p in ps]
    md = out / f"{stem}.md"
    md.write_text(markdown.render(summary, pngs, out), encoding="utf-8")
    if html:
        written.append(html_page.write_html(summary, out / f"{stem}.html"))
    if csv:
        written += csv_files.write_csvs(summary, out, stem)
    return [md, *written]
