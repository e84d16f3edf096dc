"""Advice -> advise.md: the recommendation first, then the evidence it rests on."""

from __future__ import annotations

from pathlib import Path

from harness.advise.advice import Advice
from harness.advise.better import ranked
from harness.advise.breakeven import slower_than_recompute
from harness.advise.breakeven import table as breakeven_table
from harness.advise.launch_line import SGLANG_VERSION


def _pct(x: float) -> str:
    return f"{x:.1%}"


SHOWN = 15  # candidates shown in the table (and with their launch lines)


def _block(line: str) -> list[str]:
    return ["```sh", line, "```", ""]


def candidates_rows(a: Advice, top: int = SHOWN) -> list[list[str]]:
    """The best `top` by the recommendation's own measure (harness.advise.better.measure)."""
    rows = []
    for c in ranked(a.candidates)[:top]:
        m = c.modelled
        rows.append(
            [
                c.label(),
                _pct(c.hit_rate),
                f"{m.ttft_ms['mean']:.1f}",
                f"{m.ttft_ms['p50']:.1f}",
                f"{m.ttft_ms['p99']:.1f}",
                f"{m.throughput_rps:.2f}",
                "-" if m.goodput_rps is None else f"{m.goodput_rps:.2f}",
            ]
        )
    return rows


def confirmed_row(c: dict) -> list[str]:
    """One --confirm result: a run that did not end ok shows as such, not as 0%; a stopped one as the part
    it finished."""
    m = c["measured_hit_rate"]
    status = c.get("status")
    missing = "not run" if status == "not run" else "run failed"
    measured = missing if m is None else _pct(m)
    if status == "partial":
        measured += f" (partial: {c['requests_done']:,} of {c.get('requests_total') or '?'} requests)"
    return [
        c["config"],
        c.get("server_kind", "sim"),
        _pct(c["predicted_hit_rate"]),
        measured,
        "-" if m is None else f"{(m - c['predicted_hit_rate']) * 100:+.2f} pt",
    ]


CAND_HEAD = [
    "configuration",
    "hit rate",
    "TTFT mean ms",
    "TTFT p50 ms",
    "TTFT p99 ms",
    "req/s",
    "goodput req/s",
]


def _serveable(a: Advice) -> list[str]:
    """What today's and the default pool reject, and each lever that fixes it with its line (advise.serveable)."""
    s = a.serveable
    if s is None or not s.headline:
        return []
    out = ["## Serveability", "", s.headline, ""]
    for f in s.fixes:
        rejects = f"still rejects {_pct(f.rejects.share)}" if f.rejects.requests else "serves every request"
        out += [f"- {f.kind}: {f.text}; {rejects}", ""] + _block(f.launch.line())
    if s.flagged:
        out += [
            f"Today's configuration rejects {_pct(s.today.share)} of the requests; not to launch as is:",
            "",
        ]
        out += _block(s.today_launch.line())
    return out


def render(a: Advice) -> str:
    r = a.recommendation
    ws = a.working_set
    u = a.unit
    out = [
        f"# Advice for {a.input}",
        "",
        f"{a.requests:,} requests, {a.prompt_tokens:,} prompt tokens; "
        f"{a.card} ({a.model}); pools in {u}" + (f" of {a.unit_tokens} tokens" if u == "blocks" else ""),
        "",
    ]
    if a.node is not None:
        out += [a.node.sentence()[0].upper() + a.node.sentence()[1:] + ".", ""]
    out += [f"**{r.headline}**", ""]
    out += _serveable(a)
    if a.load is not None:
        out += [
            f"Modelled figures are one request at a time, except *At the input's load* ({a.load.describe()}).",
            "",
        ]
    out += ["## Recommendation", ""]
    if r.steps:
        for i, s in enumerate(r.steps, 1):
            out.append(f"{i}. **{s.action}** — {s.why}")
            if s.before is not None and s.after is not None:
                out.append(
                    f"   hit rate {_pct(s.before.hit_rate)} → {_pct(s.after.hit_rate)}, modelled TTFT p50 "
                    f"{s.before.modelled.ttft_ms['p50']:.1f} → {s.after.modelled.ttft_ms['p50']:.1f} ms, p99 "
                    f"{s.before.modelled.ttft_ms['p99']:.1f} → {s.after.modelled.ttft_ms['p99']:.1f} ms"
                )
                out.append(f"   `{a.launch(s.after).line()}`")
    out += [f"- {n}" for n in r.notes]
    out += ["", f"Launch the recommendation ({r.chosen.label()}) on SGLang {SGLANG_VERSION}:", ""]
    out += _block(a.launch(r.chosen).line())
    if r.chosen is not r.baseline:
        flagged = a.serveable is not None and a.serveable.flagged  # then the baseline is the lever's pool
        base = "The smallest pool that serves the input" if flagged else "Today's configuration"
        out += [f"{base} ({r.baseline.label()}):", ""] + _block(a.launch(r.baseline).line())
    if r.better is not None:
        out += ["", "### A better candidate the steps did not take", "", f"**{r.better.figures()}**", ""]
        out += [f"- {w}" for w in r.better.why]
        out += ["", "Its launch line:", ""] + _block(a.launch(r.better.candidate).line())
    out += ["", "## Working set", ""]
    out.append(
        f"Distinct reused prefix live at the peak: {ws.within['1m']:,} {u} within 1 minute, {ws.within['5m']:,} "
        f"within 5, {ws.within['15m']:,} within 15; {ws.overall:,} {u} reused over the whole input "
        f"({ws.distinct:,} distinct). Pools: current {a.current_pool:,}, card default {a.device_pool:,}, "
        f"device + host {a.device_plus_host:,}."
    )
    out.append("")
    out.append(
        f"One-time prompts: {_pct(ws.one_time_share)} of requests ({_pct(ws.one_time_token_share)} of tokens). "
        "Reuse distance (the pool that serves that share of the hit tokens): "
        + (", ".join(f"{k} {v:,}" for k, v in ws.reuse_distance.items()) or "no reuse")
        + f" {u}. "
        f"Prefix stability: {ws.unstable_turns} of {ws.later_turns} later turns do not extend the previous turn."
    )
    out += ["", "## Hit rate by pool (LRU)", "", "| pool | one pass | exact replay |", "|---|---|---|"]
    marks = {a.current_pool: " (current)", a.device_pool: " (card default)"}
    marks[a.device_plus_host] = marks.get(a.device_plus_host, "") + " (device + host)"
    step = max(1, len(a.curve) // 20)
    shown = [p for i, p in enumerate(a.curve) if i % step == 0 or p.pool in marks]
    out += [
        f"| {p.pool:,}{marks.get(p.pool, '')} | {_pct(p.hit_rate)} | "
        f"{'' if p.replayed is None else _pct(p.replayed)} |"
        for p in shown
    ]
    out.append(f"\nCeiling (unbounded pool): {_pct(a.ceiling)}, reached at {a.knee_pool:,} {u}.")
    out += [
        "",
        "## Candidates (exact replay)",
        "",
        "| " + " | ".join(CAND_HEAD) + " |",
        "|" + "---|" * len(CAND_HEAD),
    ]
    out += ["| " + " | ".join(row) + " |" for row in candidates_rows(a)]
    out += ["", f"Their launch lines (SGLang {SGLANG_VERSION}, in tokens):", ""]
    out += [f"- {c.label()}: `{a.launch(c).line()}`" for c in ranked(a.candidates)[:SHOWN]]
    out += [
        "",
        "## Break-even per tier (load from the tier vs recompute, ms)",
        "",
    ]
    head, rows = breakeven_table(a.breakeven)
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    out += ["", *[f"- {line}" for line in slower_than_recompute(a.breakeven)]]
    if a.at_load:
        from harness.advise.load import markdown as load_markdown

        out += load_markdown(a.at_load, a.load)
        if a.slo is not None:
            from harness.advise.sizing_words import markdown as capacity_markdown

            out += capacity_markdown(a.at_load, a.load, a.slo, a.node.gpus if a.node is not None else 8)
        if a.agents is not None:
            from harness.advise.agents import markdown as agents_markdown

            out += agents_markdown(a.agents, a.unit, a.unit_tokens)
    if a.replicas is not None:
        from harness.advise.replicas import markdown as replicas_markdown

        out += replicas_markdown(a.replicas)
    if a.confirmed:
        from harness.advise.confirm_rows import table as confirm_table

        head, rows = confirm_table(a.confirmed, confirmed_row)
        out += ["", "## Confirmed live", "", f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
        out += [f"| {' | '.join(r)} |" for r in rows]
        if a.confirm is not None:
            out += ["", *[f"- {line}" for line in a.confirm.sentences()], *a.confirm.capacity_markdown()]
    if a.notes:
        out += ["", "## Notes", ""] + [f"- {n}" for n in a.notes]
    return "\n".join(out) + "\n"


def write_markdown(a: Advice, path: Path) -> Path:
    path.write_text(render(a))
    return path
