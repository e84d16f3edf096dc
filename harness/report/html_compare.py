"""Several nodes' summaries on one HTML page (`harness compare … --html`): per experiment a table with
each node's TTFT, hit rate, SM clock and verdict and a reading of where a difference comes from, charts
with one series per node and server, then each node's own tables, pair verdicts and evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.report.capacity import capacity_tables
from harness.report.chart_data import Chart, experiment_charts
from harness.report.common import status_text, verdict_word
from harness.report.html_page import (
    badge,
    cache_html,
    chart_figures,
    clock_note,
    esc,
    evidence_html,
    header_facts,
    page,
    pairs_table,
    scale_note,
    table_html,
    time_scales,
    toc,
)
from harness.report.tables import Badge, experiment_tables, ms, num, pct, reasons_text
from harness.summary import Point, Summary, parse_summary

Nodes = list[tuple[str, Summary]]  # (label, that node's summary)


def compare_table(exp: str, nodes: Nodes) -> str:
    """One row per server × point, one column group per node: TTFT, hit rate, SM clock and its verdict."""
    keys: list[tuple[str, str]] = []
    per: dict[str, dict[tuple[str, str], Point]] = {}
    for label, s in nodes:
        for point in s.points:
            if point.experiment != exp:
                continue
            k = (point.server, point.point_key)
            if k not in keys:
                keys.append(k)
            per.setdefault(label, {})[k] = point
    keys.sort(key=lambda k: (k[0], _rank(k, per)))
    labels = [label for label, _ in nodes]
    head = "<th>server</th><th>point</th>" + "".join(
        f"<th>{esc(n)}: TTFT median ms</th><th>{esc(n)}: hit rate</th><th>{esc(n)}: SM clock MHz</th>"
        f"<th>{esc(n)}: verdict</th>"
        for n in labels
    )
    if len(labels) > 1:
        head += f"<th>TTFT {esc(labels[-1])} / {esc(labels[0])}</th><th>reading</th>"
    rows = []
    for k in keys:
        cells = f"<td>{esc(k[0])}</td><td>{esc(k[1])}</td>"
        for n in labels:
            p = per.get(n, {}).get(k)
            if p is None:
                cells += '<td colspan="4" class="muted">not run</td>'
                continue
            m = p.median
            note = "" if p.status == "ok" else f" ({status_text(p)})"
            clk = p.telemetry.busy_median_sm_clock_mhz if p.telemetry else None
            v = p.verdict
            cells += (
                f"<td>{esc(ms(m.ttft_median_s) + note)}</td><td>{esc(pct(m.hit_rate_usage))}</td>"
                f"<td>{esc(num(clk, '.0f'))}</td>"
                f"<td>{badge(Badge(verdict_word(v), reasons_text(v)))}</td>"
            )
        if len(labels) > 1:
            a = per.get(labels[0], {}).get(k)
            b = per.get(labels[-1], {}).get(k)
            va = a.median.ttft_median_s if a else None
            vb = b.median.ttft_median_s if b else None
            ratio = vb / va if isinstance(va, int | float) and isinstance(vb, int | float) and va else None
            seen = [(n, per[n][k]) for n in labels if k in per.get(n, {})]
            cells += f'<td>{esc(num(ratio, ".2f"))}</td><td class="reading">{esc(reading(seen, ratio))}</td>'
        rows.append(f'<tr data-point="{esc(k[0])}|{esc(k[1])}">{cells}</tr>')
    return (
        '<div class="table-wrap"><table class="report-table main" data-table="compare">'
        f"<caption>{esc(exp)}: nodes side by side (median over seeds; verdict: was the SM clock "
        f"steady?)</caption><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


HIT_RATE_POINTS = 2.0  # as the summary's sources check: hit rates closer than this are "the same"


def reading(seen: list[tuple[str, Point]], ratio: float | None) -> str:
    """Where a difference between nodes comes from: a clock that was not steady, the cache, or neither."""
    if len(seen) < 2:
        return "run on one node only"
    flagged = [f"{n}: {verdict_word(p.verdict)}" for n, p in seen if p.verdict and p.verdict.flagged]
    if flagged:
        return "clock: " + "; ".join(flagged) + " — TTFT not comparable"
    rates = [p.median.hit_rate_usage for _, p in seen]
    nums = [r for r in rates if isinstance(r, int | float)]
    if len(nums) == len(rates):
        diff = (max(nums) - min(nums)) * 100
        if diff > HIT_RATE_POINTS:
            return f"cache: hit rate differs by {diff:.1f} points"
    unknown = [n for n, p in seen if verdict_word(p.verdict) != "ok"]
    clock = f"clock unknown on {', '.join(unknown)}" if unknown else "clocks steady"
    if ratio is not None and abs(ratio - 1) > 0.1:
        return f"same hit rate, {clock}: the difference is the card or server"
    return f"alike (same hit rate, TTFT within 10 %; {clock})"


def _rank(k: tuple[str, str], per: dict[str, dict[tuple[str, str], Point]]) -> tuple[Any, ...]:
    for pts in per.values():
        if k in pts:
            return tuple((0, v) if isinstance(v, int | float) else (1, str(v)) for v in pts[k].sweep.values())
    return ()


def render_compare(nodes_in: Iterable[tuple[str, Summary | Mapping[str, Any]]]) -> str:
    """Several nodes' summaries on one page: per experiment a side-by-side table, shared charts (one
    series per node and server), then each node's own tables, pair verdicts and evidence."""
    nodes: Nodes = [(label, parse_summary(s)) for label, s in nodes_in]
    labels = [label for label, _ in nodes]
    exps = sorted({e for _, s in nodes for e in s.experiments})
    head_rows = "".join(
        f"<tr><th>{esc(label)}</th>"
        + "".join(f"<td>{esc(v)}</td>" for _, v in header_facts(s)[1:6])
        + "</tr>"
        for label, s in nodes
    )
    header = (
        f"<header><h1>Prefix-cache benchmark: {esc(' vs '.join(labels))}</h1>"
        '<div class="table-wrap"><table class="report-table" data-table="nodes"><caption>Nodes</caption>'
        "<thead><tr><th>node</th><th>card</th><th>driver</th><th>harness version</th><th>git sha</th>"
        f"<th>started</th></tr></thead><tbody>{head_rows}</tbody></table></div>"
        + "".join(
            f'<p class="note time-scale"><b>{esc(label)}</b> time scale (sim): {esc("; ".join(ts))}</p>'
            for label, s in nodes
            if (ts := time_scales(s))
        )
        + f"{toc(exps)}</header>"
    )
    sections: list[str] = []
    all_charts: list[Chart] = []
    for exp in exps:
        per_node = [(label, [p for p in s.points if p.experiment == exp]) for label, s in nodes]
        present = [(label, pts) for label, pts in per_node if pts]
        parts = [f'<section class="experiment" id="exp-{esc(exp)}" data-experiment="{esc(exp)}">']
        parts.append(f"<h2>{esc(exp)}</h2>")
        missing = [label for label, pts in per_node if not pts]
        if missing:
            parts.append(f'<p class="note">Not run on {esc(", ".join(missing))}.</p>')
        parts.append(compare_table(exp, nodes))
        charts = experiment_charts(exp, present)
        all_charts += charts
        parts.append("<h3>Charts</h3>" + chart_figures(charts))
        for label, s in nodes:
            pts = [p for p in s.points if p.experiment == exp]
            if not pts:
                continue
            entry = s.experiments.get(exp)
            tables = experiment_tables(s, exp)
            inner = "".join(table_html(t) for t in tables[:2])
            inner += scale_note(pts, entry.servers if entry else {})
            inner += cache_html(pts) + pairs_table(exp, s.pairs) + clock_note(pts)
            inner += "".join(table_html(t) for t in capacity_tables(pts, entry.servers if entry else {}))
            inner += evidence_html(pts, label)
            parts.append(
                f'<details class="node-detail" data-node="{esc(label)}" open>'
                f"<summary><b>{esc(label)}</b>: tables, clock verdicts and evidence</summary>{inner}</details>"
            )
        parts.append("</section>")
        sections.append("".join(parts))
    return page(f"harness compare: {' vs '.join(labels)}", header + "".join(sections), all_charts)


def write_compare_html(nodes: Iterable[tuple[str, Summary | Mapping[str, Any]]], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_compare(nodes), encoding="utf-8")
    return path
