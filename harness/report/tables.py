"""A summary's tables as data: header and rows of cells, each cell its text plus the verdicts behind it.

One source for every format: Markdown joins the texts, HTML adds verdict badges whose hover gives the
reasons. The layout comes from the data (see `layout`): A/B for a groups sweep, policy for multi-turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    verdict_cell,
    verdict_word,
)


@dataclass
class Badge:
    """One verdict: the word shown, why (hover text), and whose it is (a server or a pair a/b)."""

    word: str
    reason: str = ""
    who: str = ""


@dataclass
class Cell:
    text: str
    badges: list[Badge] = field(default_factory=list)


@dataclass
class Table:
    """`kind` names the layout (ab, policy, generic, sources, latency); `row_keys` the point of each row."""

    kind: str
    header: list[str]
    rows: list[list[Cell]]
    row_keys: list[str]
    title: str = ""

    def texts(self) -> list[list[str]]:
        return [[c.text for c in r] for r in self.rows]


def ms(v: Any) -> str:
    return f"{v * 1000:.0f}" if isinstance(v, int | float) else "n/a"


def num(v: Any, fmt: str = ".1f") -> str:
    return format(v, fmt) if isinstance(v, int | float) and not isinstance(v, bool) else "n/a"


def ms1(v: Any) -> str:
    return f"{v * 1000:.1f}" if isinstance(v, int | float) else "n/a"


def pct(v: Any) -> str:
    return f"{v * 100:.1f}%" if isinstance(v, int | float) else "n/a"


def reasons_text(v: Any) -> str:
    """A verdict's reasons on one line (what the badge shows on hover)."""
    if isinstance(v, dict):
        return "; ".join(str(r) for r in v.get("reasons") or []) or verdict_word(v)
    return ""


def point_badge(p: dict[str, Any], who: bool = False) -> Badge:
    """A point's clock verdict; `who` names its server (where one cell holds several servers' badges)."""
    return Badge(verdict_word(p.get("verdict")), reasons_text(p.get("verdict")), p["server"] if who else "")


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


def time_scale_lines(points: list[dict[str, Any]], servers: dict[str, Any]) -> list[str]:
    """Sentences for a table with sim servers: where their modelled figures come from, what --time-scale did."""
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
            f"Sim server{'s' if len(names) > 1 else ''} {', '.join(names)}: {src}; --time-scale {x:g} "
            f"only paced the run ({speed} the card), and the other timings are this machine's wall clock."
        )
    sims = [p for p in points if p.get("modelled")]
    over = [m for p in sims if (m := p["modelled"].get("wall_overhead_max")) is not None]
    if over:
        lines.append(
            f"On {len(over)} of {len(sims)} sim points serve-sim warned that its wall-clock overhead passed "
            f"5% of the modelled step time (up to {max(over):.0%}): those runs took longer than "
            "--time-scale says; the modelled columns are unaffected."
        )
    return lines


def modelled(p: dict[str, Any], key: str) -> Any:
    """A point's modelled figure: `ttft_p50_ms`, `output_tok_s`; None without a modelled block."""
    m = p.get("modelled") or {}
    if key == "ttft_p50_ms":
        return (m.get("ttft_ms") or {}).get("p50")
    return m.get(key)


def pairs_of(pairs: list[dict[str, Any]], exp: str, key: str) -> list[dict[str, Any]]:
    return [pr for pr in pairs if pr.get("experiment") in (exp, None) and pr.get("point_key") == key]


def ab(
    exp: str, points: list[dict[str, Any]], pairs: list[dict[str, Any]], entries: dict[str, Any] | None = None
) -> Table:
    """Servers side by side per groups value: TTFT (and the modelled card's for sims), tok/s, clocks."""
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
    with_model = any(p.get("modelled") for p in points)
    if with_model:  # sim servers: the modelled card's figures, from the sim's virtual clock
        cards = sorted({c for s in servers if (c := server_card((entries or {}).get(s, {})))})
        on = f", {', '.join(cards)}" if cards else ""
        header.insert(3, f"modelled median TTFT ms{on} ({names})")
        header.insert(5, f"modelled output tok/s{on} ({names})")
    extra_keys = sorted({k for p in points for k in p["sweep"] if k != "groups"})
    if extra_keys:
        header.insert(1, "point")
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for key, per in sorted(
        by_key.items(), key=lambda kv: sort_key(next(iter(kv[1].values()))["sweep"].get("groups"))
    ):
        any_p = next(iter(per.values()))

        def cell(fn: Any, per: dict[str, dict[str, Any]] = per) -> Cell:
            return Cell(" / ".join(fn(per[s]) + status_note(per[s]) if s in per else "—" for s in servers))

        prs = pairs_of(pairs, exp, key)
        if prs:
            pr = prs[0]
            verdict = Cell(
                verdict_cell(pr),
                [
                    Badge(
                        verdict_word(x.get("verdict", x)),
                        "; ".join(x.get("reasons") or []) or verdict_word(x.get("verdict", x)),
                        f"{x.get('a')} vs {x.get('b')}",
                    )
                    for x in prs
                ],
            )
        else:
            verdict = Cell(
                " / ".join(
                    verdict_cell(per[s].get("verdict"), per[s].get("telemetry"), per[s]) if s in per else "—"
                    for s in servers
                ),
                [point_badge(per[s], who=True) for s in servers if s in per],
            )
        row = [
            Cell(str(any_p["sweep"].get("groups", ""))),
            Cell(num(any_p.get("prompt_tokens_to_keep"), "d")),
            cell(lambda p: ms(p["median"].get("ttft_median_s"))),
            cell(lambda p: num(p["median"].get("output_tok_s"))),
            cell(lambda p: num(clock(p), ".0f")),
            verdict,
            Cell(
                (
                    "ok"
                    if all(per[s].get("status") == "ok" for s in per) and len(per) == len(servers)
                    else "; ".join(
                        f"{s}: {status_text(per[s])}" if s in per else f"{s}: not run" for s in servers
                    )
                )
                + "".join(f"; {s}:{cache_note(per[s])}" for s in servers if s in per and cache_note(per[s]))
            ),
        ]
        if with_model:
            row.insert(3, cell(lambda p: num(modelled(p, "ttft_p50_ms"), ".0f")))
            row.insert(5, cell(lambda p: num(modelled(p, "output_tok_s"))))
        if extra_keys:
            row.insert(1, Cell(",".join(f"{k}={any_p['sweep'].get(k)}" for k in extra_keys)))
        rows.append(row)
        keys.append(key)
    return Table("ab", header, rows, keys, "A/B: servers side by side per number of distinct prompts")


def policy(exp: str, points: list[dict[str, Any]], servers: dict[str, Any]) -> Table:
    """One row per server (policy × pool): whole-run hit rate and per turn."""
    turns = sorted({int(t) for p in points for t in (p["median"].get("hit_rate_usage_by_turn") or {})})
    multi = len({p["point_key"] for p in points}) > 1
    header = ["pool (tokens)", "policy", "server"] + (["point"] if multi else [])
    with_model = any(p.get("modelled") for p in points)
    header += ["whole-run hit rate"] + [f"turn {t + 1}" for t in turns]
    header += ["modelled median TTFT ms", "modelled output tok/s"] if with_model else []
    header += ["median SM clock MHz", "verdict", "status"]
    rows: list[list[Cell]] = []
    keys: list[str] = []
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
        texts = [server_pool(entry), server_policy(entry), p["server"]] + ([p["point_key"]] if multi else [])
        texts += [pct(whole) + flag + status_note(p) + cache_note(p)] + [
            pct(by_turn.get(str(t))) for t in turns
        ]
        if with_model:
            texts += [num(modelled(p, "ttft_p50_ms"), ".0f"), num(modelled(p, "output_tok_s"))]
        texts += [num(clock(p), ".0f")]
        row = [Cell(t) for t in texts]
        row += [
            Cell(verdict_cell(p.get("verdict"), p.get("telemetry"), p), [point_badge(p)]),
            Cell(status_text(p)),
        ]
        rows.append(row)
        keys.append(f"{p['server']}|{p['point_key']}")
    return Table("policy", header, rows, keys, "Eviction policy × pool: hit rate per turn")


def generic(points: list[dict[str, Any]]) -> Table:
    header = [
        "server",
        "point",
        "requests",
        "failures",
        "TTFT median ms",
        "TTFT p99 ms",
        "output tok/s",
        "hit rate",
        "median SM clock MHz",
        "verdict",
        "status",
    ]
    sim = any(p.get("modelled") for p in points)
    if sim:  # the modelled card's figures from the sim's virtual clock, beside the wall-clock ones
        header[6:6] = ["modelled median TTFT ms", "modelled output tok/s"]
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p in sorted(points, key=point_order):
        m = p["median"]
        texts = [
            p["server"],
            p["point_key"] + status_note(p) + cache_note(p),
            num(m.get("requests"), ".0f"),
            num(m.get("failures"), ".0f"),
            ms(m.get("ttft_median_s")),
            ms(m.get("ttft_p99_s")),
            num(m.get("output_tok_s")),
            pct(m.get("hit_rate_usage")),
            num(clock(p), ".0f"),
        ]
        if sim:
            texts[6:6] = [num(modelled(p, "ttft_p50_ms"), ".0f"), num(modelled(p, "output_tok_s"))]
        rows.append(
            [Cell(t) for t in texts]
            + [
                Cell(verdict_cell(p.get("verdict"), p.get("telemetry"), p), [point_badge(p)]),
                Cell(status_text(p)),
            ]
        )
        keys.append(f"{p['server']}|{p['point_key']}")
    return Table("generic", header, rows, keys, "Points")


def sources(points: list[dict[str, Any]]) -> Table:
    """The hit-rate sources side by side, with the seed spread of the usage figure."""
    header = [
        "server",
        "point",
        "usage %",
        "server timings %",
        "log %",
        "counters %",
        "block (tokens)",
        "spread (% points)",
        "flag",
        "status",
    ]
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p in sorted(points, key=point_order):
        m = p["median"]
        sp = (p.get("spread") or {}).get("hit_rate_usage")
        usage = pct(m.get("hit_rate_usage")) + (
            f" [{pct(sp[0])}–{pct(sp[1])}]" if sp and sp[0] != sp[1] else ""
        )
        log = pct(m.get("hit_rate_log"))
        if m.get("log_coarse"):
            log = f"coarse ({pct(m.get('hit_rate_log_coarse'))})"
        flags = ["disagree"] if m.get("hit_rate_disagree") else []
        flags += list(p.get("cache_flags") or {})
        texts = [
            p["server"],
            p["point_key"],
            usage,
            pct(m.get("hit_rate_timings")),
            log,
            pct(m.get("hit_rate_counters")),
            num(p.get("block_size"), "d"),
            num(m.get("hit_rate_spread_points"), ".2f"),
            ", ".join(flags),
            p.get("status", "?"),
        ]
        rows.append([Cell(t) for t in texts])
        keys.append(f"{p['server']}|{p['point_key']}")
    return Table("sources", header, rows, keys, "Hit rate by source")


def cache_warnings(points: list[dict[str, Any]]) -> list[str]:
    """Why a point is flagged warm-start or cache-not-cold: its hit rate is not a cold-cache figure."""
    out = []
    for p in sorted(points, key=point_order):
        for flag, why in (p.get("cache_flags") or {}).items():
            out.append(f"⚠ {flag}: {p['server']} {p['point_key']}: {why}")
    return out


def sources_note(points: list[dict[str, Any]]) -> str:
    """What each source is, for the engines these points ran on, and why a cell is n/a."""
    seed_figs = [s.get("figures") or {} for p in points for s in (p.get("seeds") or {}).values()]
    engines = {f.get("counter_engine") for f in seed_figs} - {None}  # strings are not merged over seeds
    counters = []
    if "sglang" in engines or not engines:
        counters.append("Δ sglang:cached_tokens_total / Δ sglang:prompt_tokens_total (SGLang)")
    if "vllm" in engines:
        counters.append("Δ vllm:prefix_cache_hits_total / Δ vllm:prefix_cache_queries_total (vLLM)")
    whys = sorted(
        {w for f in seed_figs if (w := f.get("hit_rate_counters_why")) or (w := f.get("log_coarse_why"))}
    )
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


LATENCY = (
    ("TTFT median ms", "ttft_median_s"),
    ("TTFT p90 ms", "ttft_p90_s"),
    ("TTFT p99 ms", "ttft_p99_s"),
    ("ITL median ms", "itl_median_s"),
    ("ITL p99 ms", "itl_p99_s"),
    ("E2E median ms", "e2e_median_s"),
)


def goodput_figures(points: list[dict[str, Any]]) -> list[str]:
    """Median figures about goodput / SLOs, when the summary has them (names containing `goodput`)."""
    return sorted({k for p in points for k, v in p["median"].items() if "goodput" in k and _scalar(v)})


def _scalar(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


def latency(points: list[dict[str, Any]]) -> Table:
    """Latency percentiles and throughput per point (and goodput when present), with seed min–max."""
    good = goodput_figures(points)
    header = ["server", "point", "requests", "failures"] + [h for h, _ in LATENCY]
    header += ["output tok/s", "input tok/s"] + good + ["status"]
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p in sorted(points, key=point_order):
        m, sp = p["median"], p.get("spread") or {}

        def with_spread(f: str, fmt: Any, m: dict[str, Any] = m, sp: dict[str, Any] = sp) -> str:
            s = sp.get(f)
            text = fmt(m.get(f))
            if isinstance(s, list) and len(s) == 2 and None not in s and fmt(s[0]) != fmt(s[1]):
                text += f" [{fmt(s[0])}–{fmt(s[1])}]"
            return text

        texts = [p["server"], p["point_key"], num(m.get("requests"), ".0f"), num(m.get("failures"), ".0f")]
        texts += [with_spread(f, ms1) for _, f in LATENCY]
        texts += [with_spread("output_tok_s", num), with_spread("input_tok_s", num)]
        texts += [num(m.get(g), ".3g") for g in good] + [status_text(p)]
        rows.append([Cell(t) for t in texts])
        keys.append(f"{p['server']}|{p['point_key']}")
    return Table("latency", header, rows, keys, "Latency and throughput (median over seeds [min–max])")


def experiment_tables(summary: dict[str, Any], exp: str) -> list[Table]:
    """The main table of the experiment's layout, then hit rate by source, then latency."""
    pts = [p for p in summary["points"] if p.get("experiment") == exp]
    if not pts:
        return []
    servers = ((summary.get("experiments") or {}).get(exp) or {}).get("servers", {})
    kind = layout(pts)
    if kind == "ab":
        main = ab(exp, pts, summary.get("pairs") or [], servers)
    elif kind == "policy":
        main = policy(exp, pts, servers)
    else:
        main = generic(pts)
    return [main, sources(pts), latency(pts)]
