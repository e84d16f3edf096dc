"""A summary → one self-contained HTML page (tables, verdict badges, interactive charts, prefill evidence).

Everything is inline: styles, the vendored uPlot (MIT, ~51 KB, see assets/uPlot.LICENSE), the
chart data and the script, so the page opens offline on a GPU node. A Content-Security-Policy meta tag
forbids any load from the network. Tables are HTML (readable and printable without scripts); charts
are drawn by assets/report.js. Several nodes side by side: harness.report.html_compare.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from harness import __version__
from harness.capture.redact import Redactor, collect_secrets, env_secrets
from harness.report.anatomy import anatomy_img
from harness.report.capacity import capacity_tables
from harness.report.chart_data import Chart, experiment_charts
from harness.report.classes import traffic_tables
from harness.report.common import as_points, server_time_scale, verdict_word
from harness.report.findings import experiment_findings
from harness.report.glance import card_line, glance
from harness.report.health import health_html
from harness.report.tables import (
    Badge,
    Table,
    cache_warnings,
    experiment_tables,
    num,
    sources_note,
    time_scale_lines,
)
from harness.report.tiers import tier_table
from harness.report.tool_gap import tool_gap_html
from harness.report.workers import worker_table
from harness.summary import Pair, Point, Server, Summary, parse_summary

Points = Iterable[Point | Mapping[str, Any]]

CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src data:; font-src data:; connect-src 'none'; form-action 'none'; base-uri 'none'"
)
BAD_VERDICTS = {
    "clock-confounded",
    "below-floor",
    "thermal",
    "hw-slowdown",
    "power-brake",
    "failed",
    "missing",
}


def _asset(name: str) -> str:
    return resources.files("harness.report").joinpath("assets", name).read_text(encoding="utf-8")


def esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _json_for_script(obj: Any) -> str:
    """JSON safe inside <script>: no `</script>` or `<!--` can end or confuse the block."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")


# ---------------------------------------------------------------- pieces


def badge(b: Badge) -> str:
    word = b.word or "n/a"
    cls = (
        "v-ok"
        if word == "ok"
        else "v-no-telemetry"
        if word in ("no-telemetry", "n/a")
        else "v-bad"
        if word in BAD_VERDICTS
        else "v-warn"
    )
    reason = f"{b.who}: {b.reason}" if b.who and b.reason else b.reason
    who = f' <span class="who">{esc(b.who)}</span>' if b.who else ""
    return (
        f'<span class="badge {cls}" data-verdict="{esc(word)}" data-reason="{esc(reason)}" '
        f'title="{esc(reason)}">{esc(word)}{who}</span>'
    )


def table_html(t: Table, extra_class: str = "") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in t.header)
    body = []
    for key, row in zip(t.row_keys, t.rows, strict=True):
        cells = "".join(
            f"<td>{''.join(badge(b) for b in c.badges)}</td>" if c.badges else f"<td>{esc(c.text)}</td>"
            for c in row
        )
        body.append(f'<tr data-point="{esc(key)}">{cells}</tr>')
    return (
        f'<div class="table-wrap"><table class="report-table {extra_class}" data-table="{esc(t.kind)}">'
        f"<caption>{esc(t.title)}</caption><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _sweep_rank(sweep: Any) -> tuple[Any, ...]:
    values = sweep.values() if isinstance(sweep, dict) else ()
    return tuple((0, v) if isinstance(v, int | float) else (1, str(v)) for v in values)


def pairs_table(exp: str, pairs: Iterable[Pair | Mapping[str, Any]]) -> str:
    """Every A/B pair's clock verdict: were both sides measured at comparable SM clocks?"""
    typed = [pr if isinstance(pr, Pair) else Pair.model_validate(pr) for pr in pairs]
    rows = sorted(
        (pr for pr in typed if pr.experiment == exp),
        key=lambda pr: (_sweep_rank(pr.sweep), str(pr.a), str(pr.b)),
    )
    if not rows:
        return ""
    body = "".join(
        f'<tr data-point="{esc(pr.point_key)}|{esc(pr.a)}|{esc(pr.b)}">'
        f"<td>{esc(pr.point_key)}</td><td>{esc(pr.a)}</td><td>{esc(pr.b)}</td>"
        f"<td>{esc(num(pr.clock_a_mhz, '.0f'))}</td><td>{esc(num(pr.clock_b_mhz, '.0f'))}</td>"
        f"<td>{esc(num(pr.ratio, '.3f'))}</td>"
        f"<td>{badge(Badge(verdict_word(pr), '; '.join(pr.reasons)))}</td></tr>"
        for pr in rows
    )
    return (
        '<div class="table-wrap"><table class="report-table" data-table="pairs">'
        "<caption>Clock verdicts of the A/B pairs (SM clock of each side; ratio b / a)</caption>"
        "<thead><tr><th>point</th><th>a</th><th>b</th><th>clock a MHz</th><th>clock b MHz</th>"
        f"<th>ratio</th><th>verdict</th></tr></thead><tbody>{body}</tbody></table></div>"
    )


def evidence_html(points: Points, node: str = "") -> str:
    blocks = []
    for p in sorted(as_points(points), key=lambda p: (p.server, p.point_key)):
        ev = p.evidence
        if not ev:
            continue
        label = f"{node} · " if node else ""
        blocks.append(
            f'<div class="evidence-point"><code>{esc(label)}{esc(p.server)} {esc(p.point_key)}</code>'
            f'<pre class="evidence" data-point="{esc(p.server)}|{esc(p.point_key)}">'
            f"{esc(chr(10).join(str(e) for e in ev))}</pre></div>"
        )
    if not blocks:
        return '<p class="note">No prefill lines from the server log fell in these points\' windows.</p>'
    return (
        "<details open><summary>Server prefill lines (verbatim, first seed; <code>#cached-token</code> is "
        f"the server's own count)</summary>{''.join(blocks)}</details>"
    )


def cache_html(points: Points) -> str:
    """The points not measured on a cold cache, and why (warm-start, cache-not-cold)."""
    items = "".join(f"<li>{esc(w)}</li>" for w in cache_warnings(points))
    return (
        f'<p class="note">Not measured on a cold cache:</p><ul class="problems">{items}</ul>' if items else ""
    )


def chart_figures(charts: list[Chart]) -> str:
    if not charts:
        return ""
    figs = "".join(
        f'<figure class="chart" data-kind="{esc(c["kind"])}" data-expected-series="{len(c["series"])}">'
        f"<figcaption>{esc(c['title'])}</figcaption>"
        f'<div class="plot" id="{esc(c["id"])}"></div></figure>'
        for c in charts
    )
    return f'<div class="charts{" two" if len(charts) > 1 else ""}">{figs}</div>'


def clock_note(points: Points) -> str:
    """Why there is no SM clock chart: the points' telemetry status (e.g. a sim has no GPU)."""
    pts = as_points(points)
    if any(p.clock_series for p in pts):
        return ""
    why = sorted({str((p.telemetry.status if p.telemetry else None) or "absent") for p in pts})
    return f'<p class="note sm-clock-absent">No SM clock samples: {esc("; ".join(why))}.</p>'


def scale_note(points: Points, servers: Mapping[str, Server | Mapping[str, Any]] | None) -> str:
    return "".join(
        f'<p class="note time-scale">{esc(line)}</p>' for line in time_scale_lines(points, servers)
    )


# ---------------------------------------------------------------- header facts


def _manifests(summary: Summary) -> list[tuple[str, dict[str, Any]]]:
    """(experiment, manifest.json as written): the run's own facts, read by their manifest names."""
    return [(e, v.manifest) for e, v in sorted(summary.experiments.items())]


def _redactor(summary: Summary) -> Redactor:
    return Redactor(collect_secrets({e: v.to_json() for e, v in summary.experiments.items()}) | env_secrets())


def _uniq(values: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for v in values:
        if v not in (None, "", []) and str(v) not in out:
            out.append(str(v))
    return out


def card_text(summary: Summary) -> str:
    """Real GPUs from the manifests (name × count); for sim servers the modelled card profile."""
    parts: list[str] = []
    for _, m in _manifests(summary):
        gpus = m.get("gpus")
        names = [g.get("name") for g in gpus or [] if isinstance(g, dict) and g.get("name")]
        if names:
            parts += [f"{n} × {names.count(n)}" for n in dict.fromkeys(names)]
    for entry in summary.experiments.values():
        for s in entry.servers.values():
            card = s.info().get("card")
            if isinstance(card, dict) and card.get("name"):
                parts.append(
                    f"sim, modelled {card['name']} ({card.get('gpu', '?')}, {card.get('model', '?')})"
                )
    return ", ".join(_uniq(parts)) or "n/a"


def driver_text(summary: Summary) -> str:
    ms_ = [m for _, m in _manifests(summary)]
    drivers = _uniq(m.get("driver") for m in ms_)
    if drivers:
        return ", ".join(drivers)
    why = _uniq(m.get("gpu_status") for m in ms_)
    return f"n/a ({'; '.join(why)})" if why else "n/a"


def time_scales(summary: Any) -> list[str]:
    """`0.02 (every server)` or `0.02 (exp/a, exp/b)` per distinct --time-scale of the sim servers."""
    summary = parse_summary(summary)
    by_x: dict[float, list[str]] = {}
    n = 0
    for exp, entry in sorted(summary.experiments.items()):
        for name, s in sorted(entry.servers.items()):
            n += 1
            x = server_time_scale(s)
            if x is not None:
                by_x.setdefault(x, []).append(f"{exp}/{name}")
    if len(by_x) == 1 and len(next(iter(by_x.values()))) == n:
        return [f"{x:g} (every server is the sim)" for x in by_x]
    return [f"{x:g} ({', '.join(names)})" for x, names in sorted(by_x.items())]


def _manifest_servers(m: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The manifest's `servers`: a {name: entry} dict, or a list of entries that carry `name`."""
    servers = m.get("servers") or {}
    if isinstance(servers, dict):
        return sorted((str(k), v) for k, v in servers.items() if isinstance(v, dict))
    return sorted(
        (str(v.get("name", i)), v)
        for i, v in enumerate(servers if isinstance(servers, list) else [])
        if isinstance(v, dict)
    )


def launch_lines(summary: Any) -> list[tuple[str, str]]:
    """(experiment/server, the command line as run, secrets redacted) for every server of every experiment."""
    summary = parse_summary(summary)
    red = _redactor(summary)
    out = []
    for exp, m in _manifests(summary):
        for name, s in _manifest_servers(m):
            argv = s.get("argv") or s.get("args") or []
            env = s.get("env") or {}
            line = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in red.obj(env).items())
            line = (line + " " if line else "") + shlex.join(red.argv([str(a) for a in argv]))
            out.append((f"{exp}/{name}", line or f"(launch: {s.get('launch', '?')})"))
    return out


def header_facts(summary: Any) -> list[tuple[str, str]]:
    summary = parse_summary(summary)
    ms_ = _manifests(summary)
    shas = _uniq(m.get("git_sha") for _, m in ms_)
    ran_by = _uniq(m.get("harness_version") for _, m in ms_)
    facts = [
        ("node", summary.node),
        ("card", card_text(summary)),
        ("driver", driver_text(summary)),
        (
            "harness version",
            f"{summary.harness_version or '?'} (summarized)"
            + (f"; {', '.join(ran_by)} (ran)" if ran_by else ""),
        ),
        ("git sha", ", ".join(shas) or "n/a"),
        ("started", ", ".join(_uniq(m.get("start_time") for _, m in ms_)) or "n/a"),
        (
            "summary",
            f"generated {summary.generated_at or '?'} on {summary.generated_on or '?'} "
            f"from {', '.join(summary.sources) or '?'}",
        ),
    ]
    scales = time_scales(summary)
    if scales:
        facts.append(
            (
                "time scale (sim)",
                "; ".join(scales)
                + " — it only paced the run; modelled columns come from the sim's own clock, other timings are wall clock",
            )
        )
    return facts


COLLAPSED_FACTS = ("time scale (sim)",)  # long lists (every sim server's name): below the fold, in <details>


def facts_html(facts: list[tuple[str, str]], lines: list[tuple[str, str]]) -> str:
    """The run's facts; the long ones and the launch lines collapsed, so the first screen stays the answers."""
    dl = "".join(
        f'<dt>{esc(k)}</dt><dd data-fact="{esc(k)}">{esc(v)}</dd>'
        for k, v in facts
        if k not in COLLAPSED_FACTS
    )
    dl += "".join(
        f'<dt>{esc(k)}</dt><dd data-fact="{esc(k)}"><details><summary>details</summary>{esc(v)}</details></dd>'
        for k, v in facts
        if k in COLLAPSED_FACTS
    )
    launch = "".join(
        f'<div><code>{esc(who)}</code><pre class="evidence launch">{esc(line)}</pre></div>'
        for who, line in lines
    )
    details = (
        f"<details><summary>Server launch lines ({len(lines)}, secrets redacted)</summary>{launch}</details>"
        if lines
        else ""
    )
    return f'<dl class="facts">{dl}</dl>{details}'


# ---------------------------------------------------------------- pages


def page(title: str, body: str, charts: list[Chart]) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta name="generator" content="harness {esc(__version__)}">'
        f"<title>{esc(title)}</title>"
        f"<style>{_asset('uPlot.min.css')}\n{_asset('report.css')}</style></head>"
        f"<body><main>{body}</main>"
        f'<script type="application/json" id="report-data">{_json_for_script({"charts": charts})}</script>'
        f"<script>{_asset('uPlot.iife.min.js')}</script>"
        f"<script>{_asset('report.js')}</script>"
        "</body></html>\n"
    )


def toc(exps: list[str]) -> str:
    links = "".join(f'<a href="#exp-{esc(e)}">{esc(e)}</a>' for e in exps)
    return f'<nav class="toc">Experiments: {links}</nav>' if exps else ""


def _footer(summary: Summary) -> str:
    out = ""
    if summary.problems:
        items = "".join(f"<li><code>{esc(p.path)}</code>: {esc(p.reason)}</li>" for p in summary.problems)
        out += f'<h2>Skipped files</h2><ul class="problems">{items}</ul>'
    for note in summary.notes:
        out += f'<p class="note">Note: {esc(note)}</p>'
    return out


def words_html(text: str) -> str:
    """A finding's sentence as HTML: escaped, its `names` as <code> (the .md's backticks)."""
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", esc(text))


def first_screen(summary: Summary) -> str:
    """The verdict line, the modelled card, and "At a glance": the same entries the .md opens with."""
    out = ""
    if summary.verdict is not None:
        out += f'<p class="verdict-line"><strong>Verdicts:</strong> {esc(summary.verdict.line)}.</p>'
    card = card_line(summary)
    if card:
        out += f'<p class="card-line">{words_html(card)}</p>'
    items = "".join(
        f'<li data-experiment="{esc(g.experiment)}"><strong>{esc(g.experiment)}.</strong> {words_html(g.answer)}'
        + "".join(
            f'<br><span class="misses">{words_html(x)}</span>'
            for x in (f"Misses: {g.misses}" if g.misses else "", g.note)
            if x
        )
        + "</li>"
        for g in glance(summary)
    )
    if items:
        out += f'<section class="glance" id="at-a-glance"><h2>At a glance</h2><ul>{items}</ul></section>'
    return out


def render(summary: Any) -> str:
    """The whole page for one node's summary."""
    summary = parse_summary(summary)
    node = summary.node
    exps = sorted(summary.experiments)
    sections: list[str] = []
    all_charts: list[Chart] = []
    for exp in exps:
        entry = summary.experiments[exp]
        pts = [p for p in summary.points if p.experiment == exp]
        spec = entry.manifest.get("spec")
        desc = spec.get("description") if isinstance(spec, dict) else None
        parts = [f'<section class="experiment" id="exp-{esc(exp)}" data-experiment="{esc(exp)}">']
        parts.append(f"<h2>{esc(exp)}</h2>")
        if desc:
            parts.append(f'<p class="muted">{esc(desc)}</p>')
        if not pts:
            parts.append('<p class="note">No points.</p></section>')
            sections.append("".join(parts))
            continue
        said = experiment_findings(pts, entry.servers)  # the same sentences as the .md's section
        if said:
            parts.append(f'<p class="findings">{words_html(" ".join(said))}</p>')
        tables = experiment_tables(summary, exp)
        parts.append(table_html(tables[0], "main"))
        scale = scale_note(pts, entry.servers)
        if scale:  # where the timings come from: read once, then in the way of the tables
            parts.append(
                f'<details class="time-scale"><summary>Sim timings: what they are</summary>{scale}</details>'
            )
        charts = experiment_charts(exp, [(node, pts)])
        all_charts += charts
        parts.append("<h3>Charts</h3>" + chart_figures(charts) + anatomy_img(pts, exp) + clock_note(pts))
        parts.append(pairs_table(exp, summary.pairs))
        sims = all(p.modelled for p in pts)  # the latency table's wall clock only paced a sim: collapsed
        for t in tables[1:]:
            parts.append(
                "<details><summary>The sim's wall clock (paced by --time-scale; not the card's time)</summary>"
                f"{table_html(t)}</details>"
                if t.kind == "latency" and sims
                else table_html(t)
            )
            if t.kind == "sources":
                parts.append(f'<p class="note">{esc(sources_note(pts))}</p>' + cache_html(pts))
        by_tier = tier_table(pts)
        if by_tier is not None:
            parts.append(table_html(by_tier))
        parts.append(tool_gap_html(pts, f"{exp}: prompt tokens by tier against the tool gap", table_html))
        by_worker = worker_table(pts)
        if by_worker is not None:
            parts.append(table_html(by_worker))
        parts += [table_html(t) for t in capacity_tables(pts, entry.servers)]  # search, intervals
        parts += [table_html(t) for t in traffic_tables(pts)]
        parts.append(health_html(pts))  # health verdicts and those not judged (harness.report.health)
        parts.append("<h3>Evidence</h3>" + evidence_html(pts))
        parts.append("</section>")
        sections.append("".join(parts))
    body = (
        f"<header><h1>Prefix-cache benchmark: node {esc(node)}</h1>{first_screen(summary)}"
        f"{facts_html(header_facts(summary), launch_lines(summary))}{toc(exps)}</header>"
        + "".join(sections)
        + _footer(summary)
    )
    return page(f"harness report: {node}", body, all_charts)


def write_html(summary: Any, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(summary), encoding="utf-8")
    return path
