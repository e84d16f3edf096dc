"""A summary → Markdown tables in the shapes people already read.

The layout comes from the data: a shared-prefix sweep over `groups` across servers gives the A/B
table; multi-turn points give the policy table with hit rate per turn. Points that are not ok are
shown as such, and the server's own prefill lines are quoted under each table as evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.report import capacity, tables
from harness.report.classes import traffic_tables
from harness.report.common import as_points, server_time_scale
from harness.report.findings import experiment_findings
from harness.report.glance import card_line, glance_markdown
from harness.report.glance import glance as glance_entries
from harness.report.health import health_lines
from harness.report.latency import latency_table, modelled_goodput_note, slo_text
from harness.report.predicted import prediction_table
from harness.report.tables import Points, Servers, layout
from harness.report.tiers import tier_lines
from harness.report.tool_gap import tool_gap_lines
from harness.report.workers import worker_lines
from harness.summary import Pair, parse_summary

MAX_EVIDENCE_PER_POINT = 2


# ---------------------------------------------------------------- tables (built in harness.report.tables)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _md(t: tables.Table) -> list[str]:
    return _table(t.header, t.texts())


def time_scale_lines(points: Points, servers: Servers) -> list[str]:
    """Under a table with sim servers: their timings are wall-clock at --time-scale X, not card time."""
    return [f"_{line}_" for line in tables.time_scale_lines(points, servers)]


def _evidence(points: Points) -> list[str]:
    lines: list[str] = []
    for p in as_points(points):
        ev = p.evidence[:MAX_EVIDENCE_PER_POINT]
        if ev:
            lines.append(f"- {p.server} `{p.point_key}`:")
            lines.append("  ```")
            lines += [f"  {e}" for e in ev]
            lines.append("  ```")
    if not lines:
        return ["_No prefill lines from the server log fell in these points' windows._"]
    return [
        "Server prefill lines (verbatim, first lines of the first seed; `#cached-token` is the server's own count):",
        "",
    ] + lines


def ab_table(
    exp: str,
    points: Points,
    pairs: Iterable[Pair | Mapping[str, Any]],
    entries: Servers = None,
) -> list[str]:
    return _md(tables.ab(exp, points, pairs, entries))


def policy_table(exp: str, points: Points, servers: Servers) -> list[str]:
    return _md(tables.policy(exp, points, servers))


def generic_table(points: Points) -> list[str]:
    return _md(tables.generic(points))


def sources_table(points: Points) -> list[str]:
    """The hit-rate sources side by side, with the seed spread of the usage figure."""
    return _md(tables.sources(points))


def cache_lines(points: Points) -> list[str]:
    """Why a point is flagged warm-start or cache-not-cold: its hit rate is not a cold-cache figure."""
    return [f"- {line}" for line in tables.cache_warnings(points)]


def sources_note(points: Points) -> str:
    return tables.sources_note(points)


def render(summary: Any, charts: dict[str, list[Path]] | None = None, base: Path | None = None) -> str:
    """The whole report as Markdown; `charts` maps experiment → PNG paths to link.

    The verdict line is the one the summary stores (harness.verdicts, computed once by summarize);
    a summary without one (hand-made) is rendered without it, not judged here.
    """
    s = parse_summary(summary)
    lines = [
        f"# Node {s.node}",
        "",
        f"Summary generated {s.generated_at or '?'} by harness {s.harness_version or '?'}.",
    ]
    if s.verdict is not None:  # the same line `harness validate` and `make bench` end with
        lines += ["", f"**Verdicts:** {s.verdict.line}."]
    card = card_line(s)
    if card:
        lines += ["", card]
    points = s.points
    pairs = s.pairs
    lines += glance(s)  # one screen: every experiment's answer and its misses
    for exp, entry in sorted(s.experiments.items()):
        pts = [p for p in points if p.experiment == exp]
        servers = entry.servers
        lines += ["", f"## {exp}", ""]
        if not pts:
            lines.append("_No points._")
            continue
        said = experiment_findings(pts, servers)
        if said:  # the conclusion first, computed from the data (harness.report.findings)
            lines += [" ".join(said), ""]
        lines += main_table(exp, pts, pairs, servers)
        scale_note = time_scale_lines(pts, servers)
        if scale_note:  # where the sim's timings come from: collapsed, as on the page
            lines += [
                "",
                "<details><summary>Sim timings: what they are</summary>",
                "",
                *scale_note,
                "",
                "</details>",
            ]
        lines += ["", "### Latency, throughput and goodput", "", *latency_table(pts)]
        slo = slo_text(pts)
        lines += [
            "",
            f"Goodput: ok requests within every SLO ({slo} ms) per scheduled request."
            + modelled_goodput_note(pts)
            if slo
            else "No `slo` in the spec: no goodput.",
        ]
        lines += capacity.markdown_lines(pts, servers)  # the capacity search, the seeds' intervals
        for t in traffic_tables(pts):
            lines += ["", f"### {t.title}", "", *_md(t)]
        lines += ["", *_evidence(pts), "", "### Hit rate by source", ""]
        lines += sources_table(pts)
        lines += ["", sources_note(pts)]
        by_tier = tier_lines(pts)
        if by_tier:
            lines += ["", "### Cached tokens by tier", "", *by_tier]
        lines += tool_gap_lines(pts)  # agentic traces: hits by tier against the tool gap
        by_worker = worker_lines(pts)
        if by_worker:
            lines += ["", "### Replicas: every worker", "", *by_worker]
        predicted = prediction_table(pts)
        if predicted and all(server_time_scale(servers.get(p.server)) for p in pts):  # sims only
            lines += ["", "### Predicted vs measured: the sim's self-check", "", SELF_CHECK, "", *predicted]
        elif predicted:
            lines += ["", "### Predicted vs measured", "", *predicted]
        lines += ["", *health_lines(pts)]  # funnel and health verdicts (harness.report.health)
        flagged = cache_lines(pts)
        if flagged:
            lines += ["", "Not measured on a cold cache:", "", *flagged]
        for png in (charts or {}).get(exp, []):
            rel = png.relative_to(base) if base and png.is_relative_to(base) else png
            lines += ["", f"![{png.stem}]({rel.as_posix()})"]
    if s.problems:
        lines += ["", "## Skipped files", ""] + [f"- `{p.path}`: {p.reason}" for p in s.problems]
    for note in s.notes:
        lines += ["", f"_Note: {note}_"]
    return "\n".join(lines) + "\n"


SELF_CHECK = (
    "On the embedded sim the replay runs the sim's own engine on the same requests, so these rows check the "
    "harness against itself (expect +0.00); on a real server they are a prediction."
)


def main_table(exp: str, pts: list[Any], pairs: Any, servers: Any) -> list[str]:
    """The experiment's one table (the A/B, the policy or routing grid, or the generic one), under its title."""
    kind = layout(pts)
    if kind == "ab":
        t = tables.ab(exp, pts, pairs, servers)
    elif kind == "policy":
        t = tables.policy(exp, pts, servers)
    else:
        t = tables.generic(pts)
    return [f"**{t.title}**", "", *_md(t)]


def glance(s: Any) -> list[str]:
    """The first screen: each experiment's answer, then its miss anatomy (harness.report.glance, the same
    entries the HTML page and the terminal show); the tables follow in each experiment's section."""
    entries = glance_entries(s)
    if not entries:
        return []
    return ["", "## At a glance", "", *glance_markdown(entries), "", "Each experiment's tables follow."]
