"""Advice -> advise.html: one self-contained page (the report's stylesheet and CSP, the curve as inline SVG
with the current, card-default and device + host pools marked, the candidates table). No script needed."""

from __future__ import annotations

import math
from pathlib import Path

from harness.advise.advice import Advice
from harness.advise.better import ranked
from harness.advise.breakeven import slower_than_recompute
from harness.advise.breakeven import table as breakeven_table
from harness.advise.launch_line import SGLANG_VERSION
from harness.advise.markdown import CAND_HEAD, SHOWN, candidates_rows, confirmed_row
from harness.report.html_page import CSP, _asset, esc

W, H, PAD_L, PAD_B, PAD_T, PAD_R = 760, 340, 56, 40, 16, 24


def curve_svg(a: Advice) -> str:
    pts = [p for p in a.curve if p.pool > 0]
    if not pts:
        return "<p>No reuse in this input: the curve is flat at 0%.</p>"
    marks = [
        (a.current_pool, "current", "#c0392b"),
        (a.device_pool, "card default", "#2c7fb8"),
        (a.device_plus_host, "device + host", "#27ae60"),
    ]
    lo = math.log10(max(1, min(p.pool for p in pts)))
    hi = math.log10(max(max(p.pool for p in pts), *(m[0] for m in marks), 10))
    hi = hi if hi > lo else lo + 1
    top = min(1.0, math.ceil(max(a.ceiling, 0.01) * 10 + 0.5) / 10)

    def x(pool: int) -> float:
        return PAD_L + (math.log10(max(pool, 1)) - lo) / (hi - lo) * (W - PAD_L - PAD_R)

    def y(rate: float) -> float:
        return H - PAD_B - rate / top * (H - PAD_B - PAD_T)

    path = " ".join(f"{x(p.pool):.1f},{y(p.hit_rate):.1f}" for p in pts)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
        'aria-label="hit rate by pool size">'
    ]
    parts.append(f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" stroke="#888"/>')
    parts.append(f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" stroke="#888"/>')
    step = 0.1 if top <= 0.5 else 0.2
    for k in range(int(round(top / step)) + 1):
        rate = k * step
        parts.append(
            f'<text x="{PAD_L - 6}" y="{y(rate) + 4:.1f}" font-size="11" text-anchor="end">{rate:.0%}</text>'
        )
    for e in range(math.floor(lo), math.ceil(hi) + 1):
        if lo <= e <= hi:
            parts.append(
                f'<text x="{x(10**e):.1f}" y="{H - PAD_B + 16}" font-size="11" text-anchor="middle">'
                f"{10**e:,}</text>"
            )
    parts.append(f'<polyline fill="none" stroke="#333" stroke-width="2" points="{path}"/>')
    for i, (pool, name, color) in enumerate(marks):
        if pool <= 0:
            continue
        px = x(pool)
        parts.append(
            f'<line x1="{px:.1f}" y1="{PAD_T}" x2="{px:.1f}" y2="{H - PAD_B}" stroke="{color}" '
            'stroke-dasharray="4 3"/>'
        )
        left = px > W * 0.7  # a line near the right edge gets its label on its left
        parts.append(
            f'<text x="{px - 4 if left else px + 4:.1f}" y="{PAD_T + 12 + 13 * i}" font-size="11" '
            f'fill="{color}" text-anchor="{"end" if left else "start"}">{esc(name)} {pool:,}</text>'
        )
    parts.append(
        f'<text x="{(W + PAD_L) / 2}" y="{H - 6}" font-size="12" text-anchor="middle">'
        f"device pool ({esc(a.unit)}, log scale)</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def _table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<div class="table-wrap"><table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table></div>'


ARG_KEEP = 60  # a flag and its value shorter than this never part at a line's wrap


def _args(line: str) -> str:
    """One launch line with each `--flag value` kept whole, so a wrap at the page's edge never parts
    `--` from its flag's name or a flag from its value; the text (and a copy of it) is unchanged."""
    groups: list[list[str]] = []
    for word in line.split(" "):
        if word.startswith("--") or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)
    parts = [" ".join(g) for g in groups]
    return " ".join(f'<span class="arg">{esc(t)}</span>' if len(t) <= ARG_KEEP else esc(t) for t in parts)


def _code(line: str) -> str:
    return "<pre><code>" + "\n".join(_args(ln) for ln in line.split("\n")) + "</code></pre>"


def render(a: Advice) -> str:
    r = a.recommendation
    ws = a.working_set
    steps = "".join(
        f"<li><b>{esc(s.action)}</b>: {esc(s.why)}"
        + (
            f" (hit rate {s.before.hit_rate:.1%} &rarr; {s.after.hit_rate:.1%}, TTFT p50 "
            f"{s.before.modelled.ttft_ms['p50']:.1f} &rarr; {s.after.modelled.ttft_ms['p50']:.1f} ms)"
            if s.before is not None and s.after is not None
            else ""
        )
        + (_code(a.launch(s.after).line()) if s.after is not None else "")
        + "</li>"
        for s in r.steps
    )
    launch = (
        f"<p>Launch the recommendation ({esc(r.chosen.label())}) on SGLang {SGLANG_VERSION}:</p>"
        + _code(a.launch(r.chosen).line())
    )
    if r.chosen is not r.baseline:
        launch += f"<p>Today's configuration ({esc(r.baseline.label())}):</p>" + _code(
            a.launch(r.baseline).line()
        )
    notes = "".join(f"<li>{esc(n)}</li>" for n in r.notes + a.notes)
    better = ""
    if r.better is not None:
        better = (
            "<h3>A better candidate the steps did not take</h3>"
            f"<p><b>{esc(r.better.figures())}</b></p><ul>"
            + "".join(f"<li>{esc(w)}</li>" for w in r.better.why)
            + "</ul><p>Its launch line:</p>"
            + _code(a.launch(r.better.candidate).line())
        )
    blocks = a.unit_tokens > 1
    ws_rows = [[k, f"{v:,}"] + ([f"{v * a.unit_tokens:,}"] if blocks else []) for k, v in ws.within.items()]
    ws_rows.append(
        ["whole input", f"{ws.overall:,}"] + ([f"{ws.overall * a.unit_tokens:,}"] if blocks else [])
    )
    ws_head = ["window", a.unit] + (["tokens"] if blocks else [])
    be_head, be_rows = breakeven_table(a.breakeven)
    confirmed = ""
    if a.confirmed:
        from harness.advise.confirm_rows import table as confirm_table

        confirmed = "<h2>Confirmed live</h2>" + _table(*confirm_table(a.confirmed, confirmed_row))
        if a.confirm is not None:
            confirmed += "<ul>" + "".join(f"<li>{esc(line)}</li>" for line in a.confirm.sentences()) + "</ul>"
            if a.confirm.capacity is not None:
                confirmed += (
                    "<p>" + esc(a.confirm.capacity.sentence()) + "</p>" + _table(*a.confirm.capacity.table())
                )
    replicas = ""
    if a.replicas is not None:
        from harness.advise.replicas import chart_svg, confirmed_table
        from harness.advise.replicas import table as replicas_table

        ra = a.replicas
        replicas = (
            "<h2>Replicas behind smg</h2><ol>"
            + "".join(f"<li><b>{esc(s.action)}</b>: {esc(s.why)}</li>" for s in ra.steps)
            + "</ol><ul>"
            + "".join(f"<li>{esc(n)}</li>" for n in ra.notes)
            + "</ul>"
            + chart_svg(ra)
            + _table(*replicas_table(ra))
            + (("<h3>Confirmed live behind smg</h3>" + _table(*confirmed_table(ra))) if ra.confirmed else "")
            + "".join(
                f"<p>Launch {n} replicas ({lines['replicas']} after the steps, {lines['replicas_per_node']} a "
                f"node, {lines['nodes']} node(s); each node runs the same worker lines):</p>"
                + _code("\n".join([*(w["line"] for w in lines["workers"]), lines["router"]["line"]]))
                for n, lines in ra.launch.items()
            )
        )
    body = (
        f"<h1>harness advise: {esc(Path(a.input).name)}</h1>"
        f"<p>{a.requests:,} requests, {a.prompt_tokens:,} prompt tokens; {esc(a.card)} ({esc(a.model)})</p>"
        + (f"<p>{esc(a.node.sentence())}</p>" if a.node is not None else "")
        + f"<p><b>{esc(r.headline)}</b></p>"
        f"<h2>Recommendation</h2><ol>{steps or '<li>no change pays</li>'}</ol>{launch}{better}<ul>{notes}</ul>"
        f"<h2>Hit rate by pool (LRU, exact one pass)</h2>{curve_svg(a)}"
        f"<p>Ceiling {a.ceiling:.1%} at {a.knee_pool:,} {esc(a.unit)}.</p>"
        f"<h2>Candidates (exact replay)</h2>{_table(CAND_HEAD, candidates_rows(a))}"
        f"<p>Their launch lines (SGLang {SGLANG_VERSION}, in tokens):</p><ul>"
        + "".join(
            f"<li>{esc(c.label())}: {_code(a.launch(c).line())}</li>" for c in ranked(a.candidates)[:SHOWN]
        )
        + "</ul>"
        f"<h2>Working set</h2>{_table(ws_head, ws_rows)}"
        f"<p>One-time prompts {ws.one_time_share:.1%}; {ws.unstable_turns} of {ws.later_turns} later turns not "
        "prefix-stable.</p>"
        f"<h2>Break-even per tier</h2>{_table(be_head, be_rows)}"
        + "".join(f"<p>{esc(line)}</p>" for line in slower_than_recompute(a.breakeven))
        + at_load_html(a)
        + replicas
        + confirmed
    )
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        f"<title>advise: {esc(Path(a.input).name)}</title>"
        f"<style>{_asset('report.css')}</style></head>"
        f"<body><main>{body}</main></body></html>\n"
    )


def write_html(a: Advice, path: Path) -> Path:
    path.write_text(render(a))
    return path


def at_load_html(a: Advice) -> str:
    """The shown candidates at the input's load (harness.advise.load), as in the Markdown."""
    if not a.at_load:
        return ""
    from harness.advise.load import HEAD, row

    out = (
        f"<h2>At the input's load</h2><p>Replayed through the sim's scheduler at {esc(a.load.describe())}; "
        "every other table is one request at a time.</p>" + _table(HEAD, [row(r) for r in a.at_load])
    )
    if a.slo is None or a.at_load[0].capacity is None:
        return out
    from harness.advise.sizing_words import CAP_HEAD, capacity_row

    most = a.node.gpus if a.node is not None else 8
    return (
        out
        + f"<h2>Capacity at the SLO</h2><p>SLO: {esc(a.slo.describe())}. Capacity: the highest offered load one "
        "replica serves within it with a steady queue; GPUs needed: the fewest replicas behind the modelled "
        f"router at {esc(a.load.describe())}, up to the node's {most} GPUs.</p>"
        + _table(CAP_HEAD, [capacity_row(r, most, a.load.kind == "concurrency") for r in a.at_load])
    )
