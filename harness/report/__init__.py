"""The report stage: a summary → one file per format (`markdown`, `charts`), sharing `common`.

`write_report` is the stage's entry point (harness report, harness bench): charts first, so the
Markdown can link them; matplotlib is loaded only when charts are drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.report import markdown


def write_report(
    summary: dict[str, Any], out: Path, stem: str | None = None, charts: bool = True
) -> list[Path]:
    """Write `<stem>.md` and its PNG charts into `out`; returns the paths written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    stem = stem or str(summary.get("node", "report"))
    written: list[Path] = []
    pngs: dict[str, list[Path]] = {}
    if charts:
        from harness.report import charts as charts_mod

        pngs = charts_mod.draw_all(summary, out, stem)
        written += [p for ps in pngs.values() for p in ps]
    md = out / f"{stem}.md"
    md.write_text(markdown.render(summary, pngs, out), encoding="utf-8")
    return [md, *written]
