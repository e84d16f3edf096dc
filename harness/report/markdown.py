"""A summary → Markdown tables in the shapes people already read.

The layout comes from the data: a shared-prefix sweep over `groups` across servers gives the A/B
table; multi-turn points give the policy table with hit rate per turn. Points that are not ok are
shown as such, and the server's own prefill lines are quoted under each table as evidence.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.report.common import (
    cache_note,
    clock,
    point_order,
    server_card,
    server_policy,
    server_pool,
    server_time_scale,
    sort_key,
    status_note,
    status_text,
    verdict_word,
)

MAX_EVIDENCE_PER_POINT = 2


# ---------------------------------------------------------------- cells


def _ms(v: Any) -> str:
    return f"{v * 1000:.0f}" if isinstance(v, int | float) else "n/a"


def _num(v: Any, fmt: str = ".1f") -> str:
    return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "n/a"


def _pct(v: Any) -> str:
    return f"{v * 100:.1f}%" if isinstance(v, int | float) else "n/a"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def time_scale_lines(points: list[dict[str, Any]], servers: dict[str, Any]) -> list[str]:
    """Under a table with sim servers: where their modelled figures come from, what --time-scale did."""
    by_scale: dict[float, list[str]] = {}
    for name in sorted({p["server"] for p in points}):
        x = server_time_scale(servers.get(name, {}))
        if x is not None:
            by_scale.setdefault(x, []).append(name)
    lines = []
    for x, names in sorted(by_scale.items()):
        cards = sorted({c for n in names if (c := server_card(servers.get(n, {})))})
        card = f"modelled {', '.join(cards)} card" if cards else "modelled card"
        speed = f"{1 / x:g}x faster than" if x < 1 else (f"{x:g}x slower than" if x > 1 else "as fast as")
        sources = sorted({str(m["source"]) for p in points if (m := p.get("modelled")) and m.get("source")})
        src = (
            f"modelled columns are the {card}'s time from the sim's own clock ({'; '.join(sources)})"
            if sources
            else "no modelled figures (the records carry no sim stamps: an older capture)"
        )
        lines.append(
            f"_Sim server{'s' if len(names) > 1 else ''} {', '.join(names)}: {src}; --time-scale {x:g} "
            f"only paced the run ({speed} the card), and the other timings are this machine's wall clock._"
        )
    sims = [p for p in points if p.get("modelled")]
    over = [m for p in sims if (m := p["modelled"].get("wall_overhead_max")) is not None]
    if over:
        lines.append(
            f"_On {len(over)} of {len(sims)} sim points serve-sim warned that its wall-clock overhead passed "
            f"5% of the modelled step time (up to {max(over):.0%}): those runs took longer than "
            "--time-scale says; the modelled columns are unaffected._"
        )
    return lines


def _modelled(p: dict[str, Any], key: str) -> Any:
    """A point's modelled figure: `ttft_p50_ms`, `output_tok_s`; None without a modelled block."""
    m = p.get("modelled") or {}
    if key == "ttft_p50_ms":
        return (m.get("ttft_ms") or {}).get("p50")
    return m.get(key)


# ---------------------------------------------------------------- layouts


def layout(points: list[dict[str, Any]]) -> str:
    """`policy` for multi-turn points (hit rate per turn), `ab` for a groups sweep, else `generic`."""
    if any(
        p.get("workload_kind") == "multi-turn" or len(p["median"].get("hit_rate_usage_by_turn") or {}) > 1
        for p in points
    ):
        return "policy"
    if any("groups" in p.get("sweep", {}) for p in points):
        return "ab"
    return "generic"


def _evidence(points: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for p in points:
        ev = (p.get("evidence") or [])[:MAX_EVIDENCE_PER_POINT]
        if ev:
            lines.append(f"- {p['server']} `{p['point_key']}`:")
            lines.append("  ```")
            lines += [f"  {e}" for e in ev]
            lines.append("  ```")
    if not lines:
        return ["_No prefill lines from the server log fell in these points' windows._"]
    return [
        "Server prefill lines (verbatim, first lines of the first seed; `#cached-token` is the server's own count):",
        "",
    ] + lines


def _pair_verdict(pairs: list[dict[str, Any]], exp: str, key: str) -> str | None:
    for pr in pairs:
        if pr.get("experiment") in (exp, None) and pr.get("point_key") == key:
            return verdict_word(pr.get("verdict", pr))
    return None


def ab_table(
    exp: str,
    points: list[dict[str, Any]],
    pairs: list[dict[str, Any]],
    entries: dict[str, Any] | None = None,
) -> list[str]:
    servers = sorted({p["server"] for p in points})
    by_key: dict[str, dict[str, dict[str, Any]]] = {}
    for p in points:
        by_key.setdefault(p["point_key"], {})[p["server"]] = p
    names = " / ".join(servers)
    header = [
        "groups",
        "prompt tokens to keep",
        f"median TTFT ms ({names})",
        f"output tok/s ({names})",
        f"median SM clock MHz ({names})",
        "verdict",
        "status",
    ]
    modelled = any(p.get("modelled") for p in points)
    if modelled:  # sim servers: the modelled card's figures, from the sim's virtual clock
        cards = sorted({c for s in servers if (c := server_card((entries or {}).get(s, {})))})
        on = f", {', '.join(cards)}" if cards else ""
        header.insert(3, f"modelled median TTFT ms{on} ({names})")
        header.insert(5, f"modelled output tok/s{on} ({names})")
    extra_keys = sorted({k for p in points for k in p["sweep"] if k != "groups"})
    if extra_keys:
        header.insert(1, "point")
    rows = []
    for key, per in sorted(
        by_key.items(), key=lambda kv: sort_key(next(iter(kv[1].values()))["sweep"].get("groups"))
    ):
        any_p = next(iter(per.values()))

        def cell(fn: Any, per: dict[str, dict[str, Any]] = per) -> str:
            return " / ".join(fn(per[s]) + status_note(per[s]) if s in per else "—" for s in servers)

        verdict = _pair_verdict(pairs, exp, key) or " / ".join(
            verdict_word(per[s].get("verdict")) if s in per else "—" for s in servers
        )
        row = [
            str(any_p["sweep"].get("groups", "")),
            _num(any_p.get("prompt_tokens_to_keep"), "d"),
            cell(lambda p: _ms(p["median"].get("ttft_median_s"))),
            cell(lambda p: _num(p["median"].get("output_tok_s"))),
            cell(lambda p: _num(clock(p), ".0f")),
            verdict,
            (
                "ok"
                if all(per[s].get("status") == "ok" for s in per) and len(per) == len(servers)
                else "; ".join(
                    f"{s}: {status_text(per[s])}" if s in per else f"{s}: not run" for s in servers
                )
            )
            + "".join(f"; {s}:{cache_note(per[s])}" for s in servers if s in per and cache_note(per[s])),
        ]
        if modelled:
            row.insert(3, cell(lambda p: _num(_modelled(p, "ttft_p50_ms"), ".0f")))
            row.insert(5, cell(lambda p: _num(_modelled(p, "output_tok_s"))))
        if extra_keys:
            row.insert(1, ",".join(f"{k}={any_p['sweep'].get(k)}" for k in extra_keys))
        rows.append(row)
    return _table(header, rows)


def policy_table(exp: str, points: list[dict[str, Any]], servers: dict[str, Any]) -> list[str]:
    turns = sorted(
        {int(t) for p in points for t in (p["median"].get("hit_rate_usage_by_turn") or {})},
    )
    multi = len({p["point_key"] for p in points}) > 1
    header = ["pool (tokens)", "policy", "server"] + (["point"] if multi else [])
    modelled = any(p.get("modelled") for p in points)
    header += (
        ["whole-run hit rate"]
        + [f"turn {t + 1}" for t in turns]
        + (["modelled median TTFT ms", "modelled output tok/s"] if modelled else [])
        + ["median SM clock MHz", "verdict", "status"]
    )
    rows = []
    for p in sorted(
        points,
        key=lambda p: (
            server_pool(servers.get(p["server"], {})),
            server_policy(servers.get(p["server"], {})),
            p["point_key"],
        ),
    ):
        entry = servers.get(p["server"], {})
        by_turn = p["median"].get("hit_rate_usage_by_turn") or {}
        m = p["median"]
        whole = m.get("hit_rate_usage")
        if whole is None:
            whole = m.get("hit_rate_counters", m.get("hit_rate_log"))
        flag = " ⚠ sources disagree" if m.get("hit_rate_disagree") else ""
        row = [server_pool(entry), server_policy(entry), p["server"]] + ([p["point_key"]] if multi else [])
        row += [_pct(whole) + flag + status_note(p) + cache_note(p)] + [
            _pct(by_turn.get(str(t))) for t in turns
        ]
        if modelled:
            row += [_num(_modelled(p, "ttft_p50_ms"), ".0f"), _num(_modelled(p, "output_tok_s"))]
        row += [_num(clock(p), ".0f"), verdict_word(p.get("verdict")), status_text(p)]
        rows.append(row)
    return _table(header, rows)


def generic_table(points: list[dict[str, Any]]) -> list[str]:
    header = [
        "server",
        "point",
        "requests",
        "failures",
        "TTFT median ms",
        "TTFT p99 ms",
        "output tok/s",
        "hit rate",
    ]
    header += ["median SM clock MHz", "verdict", "status"]
    rows = []
    for p in sorted(points, key=point_order):
        m = p["median"]
        rows.append(
            [
                p["server"],
                p["point_key"] + status_note(p) + cache_note(p),
                _num(m.get("requests"), ".0f"),
                _num(m.get("failures"), ".0f"),
                _ms(m.get("ttft_median_s")),
                _ms(m.get("ttft_p99_s")),
                _num(m.get("output_tok_s")),
                _pct(m.get("hit_rate_usage")),
                _num(clock(p), ".0f"),
                verdict_word(p.get("verdict")),
                status_text(p),
            ]
        )
    return _table(header, rows)


def sources_table(points: list[dict[str, Any]]) -> list[str]:
    """The hit-rate sources side by side, with the seed spread of the usage figure."""
    header = [
        "server",
        "point",
        "usage",
        "server timings",
        "log",
        "counters",
        "block",
        "spread (points)",
        "flag",
        "status",
    ]
    rows = []
    for p in sorted(points, key=point_order):
        m = p["median"]
        sp = p.get("spread", {}).get("hit_rate_usage")
        usage = _pct(m.get("hit_rate_usage")) + (
            f" [{_pct(sp[0])}–{_pct(sp[1])}]" if sp and sp[0] != sp[1] else ""
        )
        log = _pct(m.get("hit_rate_log"))
        if m.get("log_coarse"):
            log = f"coarse ({_pct(m.get('hit_rate_log_coarse'))})"
        flags = ["disagree"] if m.get("hit_rate_disagree") else []
        flags += list(p.get("cache_flags") or {})
        rows.append(
            [
                p["server"],
                p["point_key"],
                usage,
                _pct(m.get("hit_rate_timings")),
                log,
                _pct(m.get("hit_rate_counters")),
                _num(p.get("block_size"), "d"),
                _num(m.get("hit_rate_spread_points"), ".2f"),
                ", ".join(flags),
                p.get("status", "?"),
            ]
        )
    return _table(header, rows)


def cache_lines(points: list[dict[str, Any]]) -> list[str]:
    """Why a point is flagged warm-start or cache-not-cold: its hit rate is not a cold-cache figure."""
    out = []
    for p in sorted(points, key=point_order):
        for flag, why in (p.get("cache_flags") or {}).items():
            out.append(f"- ⚠ {flag}: {p['server']} {p['point_key']}: {why}")
    return out


def sources_note(points: list[dict[str, Any]]) -> str:
    """What each source is, for the engines these points ran on, and why a cell is n/a."""
    engines = {p["median"].get("counter_engine") for p in points} - {None}
    counters = []
    if "sglang" in engines or not engines:
        counters.append("Δ sglang:cached_tokens_total / Δ sglang:prompt_tokens_total (SGLang)")
    if "vllm" in engines:
        counters.append("Δ vllm:prefix_cache_hits_total / Δ vllm:prefix_cache_queries_total (vLLM)")
    whys = sorted({w for p in points if (w := p["median"].get("hit_rate_counters_why"))})
    text = (
        "usage = Σ cached / Σ prompt tokens of ok requests; server timings = Σ timings.cache_n / "
        "Σ (cache_n + prompt_n) of ok requests (llama.cpp); log = #cached-token / (#cached-token + "
        "#new-token) of prefill lines in the point's window (SGLang), or vLLM's cumulative `Prefix cache "
        "hit rate` line after the point (since its reset, or differenced between the lines at its edges; "
        "coarse when the log's rounding moves it by more than 2 points); counters = "
        + "; ".join(counters)
        + "; block = the server's block (page) size, which caps what can be cached. n/a: no such figure "
        "for that point"
    )
    return text + (f" ({'; '.join(whys)})." if whys else ".")


def render(
    summary: dict[str, Any], charts: dict[str, list[Path]] | None = None, base: Path | None = None
) -> str:
    """The whole report as Markdown; `charts` maps experiment → PNG paths to link."""
    node = summary.get("node", "?")
    lines = [
        f"# Node {node}",
        "",
        f"Summary generated {summary.get('generated_at', '?')} by harness {summary.get('harness_version', '?')}.",
    ]
    points = summary["points"]
    pairs = summary.get("pairs") or []
    for exp, entry in sorted((summary.get("experiments") or {}).items()):
        pts = [p for p in points if p.get("experiment") == exp]
        servers = entry.get("servers", {})
        lines += ["", f"## {exp}", ""]
        kind = layout(pts)
        if not pts:
            lines.append("_No points._")
            continue
        if kind == "ab":
            lines += ab_table(exp, pts, pairs, servers)
        elif kind == "policy":
            lines += policy_table(exp, pts, servers)
        else:
            lines += generic_table(pts)
        scale_note = time_scale_lines(pts, servers)
        if scale_note:
            lines += ["", *scale_note]
        lines += ["", *_evidence(pts), "", "### Hit rate by source", ""]
        lines += sources_table(pts)
        lines += ["", sources_note(pts)]
        flagged = cache_lines(pts)
        if flagged:
            lines += ["", "Not measured on a cold cache:", "", *flagged]
        for png in (charts or {}).get(exp, []):
            rel = png.relative_to(base) if base and png.is_relative_to(base) else png
            lines += ["", f"![{png.stem}]({rel.as_posix()})"]
    probs = summary.get("problems") or []
    if probs:
        lines += ["", "## Skipped files", ""] + [f"- `{p['path']}`: {p['reason']}" for p in probs]
    for note in summary.get("notes") or []:
        lines += ["", f"_Note: {note}_"]
    return "\n".join(lines) + "\n"
