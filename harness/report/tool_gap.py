"""The report's tool-gap table and chart (issue 59 item 4): for an agentic trace's points, returning
requests by the gap since their conversation's previous answer, and where their prefix was found
(device, host, storage) or recomputed, as shares of their prompt tokens. The gap is what decides
whether a context survives a tool call, so the table shows which tier pays for which gaps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from harness.report.common import as_points, point_order
from harness.report.tables import Cell, Points, Table
from harness.summary.tool_gap import ToolGap, ToolGapRow

TIERS = ("device", "host", "storage", "recomputed")
COLORS = {"device": "#2b8a3e", "host": "#1971c2", "storage": "#9c36b5", "recomputed": "#c92a2a"}


def _bucket(r: ToolGapRow) -> str:
    return f"≥ {r.gap_lo_s:g}" if r.gap_hi_s is None else f"{r.gap_lo_s:g}–{r.gap_hi_s:g}"


def shares(r: ToolGapRow) -> dict[str, float | None]:
    """Each tier's share of the bucket's prompt tokens (None where the server gave no split)."""
    p = r.prompt_tokens or 1
    return {
        "device": None if r.device_tokens is None else r.device_tokens / p,
        "host": None if r.host_tokens is None else r.host_tokens / p,
        "storage": None if r.storage_tokens is None else r.storage_tokens / p,
        "recomputed": r.recomputed_tokens / p,
    }


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _gapped(points: Points) -> list[tuple[Any, ToolGap]]:
    return [(p, p.tool_gap) for p in sorted(as_points(points), key=point_order) if p.tool_gap is not None]


def tool_gap_table(points: Points) -> Table | None:
    """One row per point x gap bucket; None when no point has a tool-gap table."""
    header = ["server", "point", "gap (s)", "requests", *(f"{t} %" for t in TIERS)]
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p, g in _gapped(points):
        for r in g.rows:
            s = shares(r)
            texts = [p.server, p.point_key, _bucket(r), str(r.requests), *(_pct(s[t]) for t in TIERS)]
            rows.append([Cell(t) for t in texts])
            keys.append(f"{p.server}|{p.point_key}")
    if not rows:
        return None
    return Table("tool-gap", header, rows, keys, "What a tool gap costs: prompt tokens by tier, by the gap")


def gap_note(points: Points) -> str:
    """The gaps' percentiles per point, and the unit (the trace's seconds)."""
    said = [
        f"{p.server} {p.point_key}: {g.requests} returning requests, gap p50 {g.gap_p50_s:.3g} s, "
        f"p95 {g.gap_p95_s:.3g} s, p99 {g.gap_p99_s:.3g} s"
        for p, g in _gapped(points)
    ]
    speedups = sorted({g.speedup for _, g in _gapped(points)})
    unit = (
        f"Gaps in the trace's seconds (the run's x speedup {', '.join(f'{s:g}' for s in speedups)})"
        if speedups != [1]
        else "Gaps in seconds"
    )
    return (
        f"{unit}, since the conversation's previous answer; buckets by powers of two up to the p99 gap. "
        + ("; ".join(said) + ".")
    )


def tool_gap_lines(points: Points) -> list[str]:
    """The section as Markdown lines ([] when no point has a table)."""
    t = tool_gap_table(points)
    if t is None:
        return []
    out = ["", "### What a tool gap costs", "", gap_note(points), ""]
    out += ["| " + " | ".join(t.header) + " |", "|" + "---|" * len(t.header)]
    return out + ["| " + " | ".join(r) + " |" for r in t.texts()]


def _draw(points: Points, out: Path | IO[bytes], title: str) -> bool:
    """One panel per point: stacked bars of each gap bucket's prompt tokens by tier (%)."""
    rows = _gapped(points)
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(2, len(rows))
    nrows = -(-len(rows) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(6.0 * cols, 3.2 * nrows + 0.6), squeeze=False)
    for ax, (p, g) in zip(axes.flat, rows, strict=False):
        bottom = [0.0] * len(g.rows)
        for tier in TIERS:
            vals = [100.0 * (shares(r)[tier] or 0.0) for r in g.rows]
            ax.bar(range(len(g.rows)), vals, bottom=bottom, color=COLORS[tier], label=tier)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        ax.set_xticks(range(len(g.rows)), [_bucket(r) for r in g.rows], rotation=40, ha="right", fontsize=7)
        ax.set_ylim(0, 100)
        ax.set_ylabel("% of prompt tokens")
        ax.set_xlabel("gap since the previous answer (s)")
        ax.set_title(f"{p.server} {p.point_key}", fontsize=9)
    for ax in list(axes.flat)[len(rows) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7, ncols=4, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100, format="png")
    plt.close(fig)
    return True


def tool_gap_chart(points: Points, out: Path, title: str) -> Path | None:
    """The chart as a PNG file (the Markdown report's); None when no point has a table."""
    return out if _draw(points, out, title) else None


def tool_gap_html(points: Points, title: str, table_html: Callable[[Table], str]) -> str:
    """The table (drawn by the page's `table_html`, passed in: the page imports this module) and the chart
    inline, for the self-contained page; "" when no point has a table."""
    import base64
    import io
    from html import escape as esc

    t = tool_gap_table(points)
    if t is None:
        return ""
    buf = io.BytesIO()
    _draw(points, buf, title)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (
        f'<p class="note">{esc(gap_note(points))}</p>'
        + table_html(t)
        + f'<figure class="tool-gap"><img alt="prompt tokens by tier against the tool gap" '
        f'src="data:image/png;base64,{data}"></figure>'
    )
