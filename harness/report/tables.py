"""A summary's tables as data: header and rows of cells, each cell its text plus the verdicts behind it.

One source for every format: Markdown joins the texts, HTML adds verdict badges whose hover gives the
reasons. The layout comes from the data (see `layout`): A/B for a groups sweep, policy for multi-turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.engines.counters import COUNTER_NOTES, UNKNOWN_ENGINE_NOTE
from harness.engines.log_figures import LOG_NOTE
from harness.report.columns import (
    POINT_COLUMNS,
    modelled_tok_s,
    modelled_ttft_p50_ms,
    ms,
    ms1,
    num,
    pct,
    shown,
)
from harness.report.common import (
    as_points,
    as_server,
    as_servers,
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
from harness.summary import Pair, Point, Record, Server, Summary, parse_summary

Points = Iterable[Point | Mapping[str, Any]]  # records, or the JSON objects tests and scripts build
Servers = Mapping[str, Server | Mapping[str, Any]] | None


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


def reasons_text(v: Any) -> str:
    """A verdict's reasons on one line (what the badge shows on hover)."""
    if isinstance(v, Record):
        v = v.to_json()
    if isinstance(v, dict):
        return "; ".join(str(r) for r in v.get("reasons") or []) or verdict_word(v)
    return ""


def point_badge(p: Point, who: bool = False) -> Badge:
    """A point's clock verdict; `who` names its server (where one cell holds several servers' badges)."""
    return Badge(verdict_word(p.verdict), reasons_text(p.verdict), p.server if who else "")


def layout(points: Points) -> str:
    """`policy` for multi-turn points (hit rate per turn), `ab` for a groups sweep, else `generic`."""
    pts = as_points(points)
    if any(p.workload_kind == "multi-turn" or len(p.median.hit_rate_usage_by_turn or {}) > 1 for p in pts):
        return "policy"
    if any("groups" in p.sweep for p in pts):
        return "ab"
    return "generic"


def time_scale_lines(points: Points, servers: Servers) -> list[str]:
    """Sentences for a table with sim servers: where their modelled figures come from, what --time-scale did."""
    pts, srvs = as_points(points), as_servers(servers)
    by_scale: dict[float, list[str]] = {}
    for name in sorted({p.server for p in pts}):
        x = server_time_scale(srvs.get(name))
        if x is not None:
            by_scale.setdefault(x, []).append(name)
    lines = []
    for x, names in sorted(by_scale.items()):
        cards = sorted({c for n in names if (c := server_card(srvs.get(n)))})
        card = f"modelled {', '.join(cards)} card" if cards else "modelled card"
        speed = f"{1 / x:g}x faster than" if x < 1 else (f"{x:g}x slower than" if x > 1 else "as fast as")
        sources = sorted({p.modelled.source for p in pts if p.modelled and p.modelled.source})
        src = (
            f"modelled columns are the {card}'s time from the sim's own clock ({'; '.join(sources)})"
            if sources
            else "no modelled figures (the records carry no sim stamps: an older capture)"
        )
        lines.append(
            f"Sim server{'s' if len(names) > 1 else ''} {', '.join(names)}: {src}; --time-scale {x:g} "
            f"only paced the run ({speed} the card), and the other timings are this machine's wall clock."
        )
    sims = [p.modelled for p in pts if p.modelled]
    over = [m.wall_overhead_max for m in sims if m.wall_overhead_max is not None]
    if over:
        lines.append(
            f"On {len(over)} of {len(sims)} sim points serve-sim warned that its wall-clock overhead passed "
            f"5% of the modelled step time (up to {max(over):.0%}): those runs took longer than "
            "--time-scale says; the modelled columns are unaffected."
        )
    return lines


def pairs_of(pairs: Iterable[Pair], exp: str, key: str) -> list[Pair]:
    return [pr for pr in pairs if pr.experiment in (exp, None) and pr.point_key == key]


def ab(
    exp: str,
    points: Points,
    pairs: Iterable[Pair | Mapping[str, Any]],
    entries: Servers = None,
) -> Table:
    """Servers side by side per groups value: TTFT (and the modelled card's for sims), tok/s, clocks."""
    pts, srvs = as_points(points), as_servers(entries)
    prs_all = [pr if isinstance(pr, Pair) else Pair.model_validate(pr) for pr in pairs]
    servers = sorted({p.server for p in pts})
    by_key: dict[str, dict[str, Point]] = {}
    for p in pts:
        by_key.setdefault(p.point_key, {})[p.server] = p
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
    with_model = any(p.modelled for p in pts)
    if with_model:  # sim servers: the modelled card's figures, from the sim's virtual clock
        cards = sorted({c for s in servers if (c := server_card(srvs.get(s)))})
        on = f", {', '.join(cards)}" if cards else ""
        header.insert(3, f"modelled median TTFT ms{on} ({names})")
        header.insert(5, f"modelled output tok/s{on} ({names})")
    wall_too = not with_model or not all(p.modelled for p in pts)  # sims alone: the card's time leads
    if not wall_too:
        del header[4], header[2]
    extra_keys = sorted({k for p in pts for k in p.sweep if k != "groups"})
    if extra_keys:
        header.insert(1, "point")
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for key, per in sorted(
        by_key.items(), key=lambda kv: sort_key(next(iter(kv[1].values())).sweep.get("groups"))
    ):
        any_p = next(iter(per.values()))

        def cell(fn: Any, per: dict[str, Point] = per) -> Cell:
            return Cell(" / ".join(fn(per[s]) + status_note(per[s]) if s in per else "—" for s in servers))

        prs = pairs_of(prs_all, exp, key)
        if prs:
            verdict = Cell(
                verdict_cell(prs[0]),
                [
                    Badge(verdict_word(x), "; ".join(x.reasons) or verdict_word(x), f"{x.a} vs {x.b}")
                    for x in prs
                ],
            )
        else:
            verdict = Cell(
                " / ".join(
                    verdict_cell(per[s].verdict, per[s].telemetry, per[s]) if s in per else "—"
                    for s in servers
                ),
                [point_badge(per[s], who=True) for s in servers if s in per],
            )
        row = [
            Cell(str(any_p.sweep.get("groups", ""))),
            Cell(num(any_p.prompt_tokens_to_keep, "d")),
            cell(lambda p: ms(p.median.ttft_median_s)),
            cell(lambda p: num(p.median.output_tok_s)),
            cell(lambda p: num(clock(p), ".0f")),
            verdict,
            Cell(
                (
                    "ok"
                    if all(per[s].status == "ok" for s in per) and len(per) == len(servers)
                    else "; ".join(
                        f"{s}: {status_text(per[s])}" if s in per else f"{s}: not run" for s in servers
                    )
                )
                + "".join(f"; {s}:{cache_note(per[s])}" for s in servers if s in per and cache_note(per[s]))
            ),
        ]
        if with_model:
            row.insert(3, cell(lambda p: num(modelled_ttft_p50_ms(p), ".0f")))
            row.insert(5, cell(lambda p: num(modelled_tok_s(p))))
        if not wall_too:  # the sim's wall clock only paced the run: in the JSON and the latency details
            del row[4], row[2]
        if extra_keys:
            row.insert(1, Cell(",".join(f"{k}={any_p.sweep.get(k)}" for k in extra_keys)))
        rows.append(row)
        keys.append(key)
    return Table("ab", header, rows, keys, "A/B: servers side by side per number of distinct prompts")


def routing_of(entry: Server | Mapping[str, Any] | None) -> tuple[str, int] | None:
    """(routing policy, replica count) of replicas behind a gateway; None for a single server."""
    reps = as_server(entry).replicas
    count = reps.get("replicas") if isinstance(reps, dict) else None
    if isinstance(reps, dict) and reps.get("policy") and isinstance(count, int):
        return str(reps["policy"]), count
    return None


def _axes(pts: list[Point], srvs: Mapping[str, Server]) -> tuple[list[str], str]:
    """The row-label columns and the title's axes: routing × replicas behind a gateway, else policy × pool."""
    if pts and all(routing_of(srvs.get(p.server)) for p in pts):
        return ["routing", "replicas", "pool (tokens)"], "Routing × replicas"
    return ["pool (tokens)", "policy"], "Eviction policy × pool"


def policy(exp: str, points: Points, servers: Servers) -> Table:
    """One row per server (policy × pool, or routing × replicas): whole-run hit rate and per turn."""
    pts, srvs = as_points(points), as_servers(servers)
    turns = sorted({int(t) for p in pts for t in (p.median.hit_rate_usage_by_turn or {})})
    multi = len({p.point_key for p in pts}) > 1
    labels, axes = _axes(pts, srvs)
    routed = labels[0] == "routing"
    header = [*labels, "server"] + (["point"] if multi else [])
    with_model = any(p.modelled for p in pts)
    agent = bool(pts) and all(p.workload_kind == "agent" for p in pts)  # its `turn` is the step depth
    header += ["whole-run hit rate"] + [f"step depth {t}" if agent else f"turn {t + 1}" for t in turns]
    header += ["modelled median TTFT ms", "modelled output tok/s"] if with_model else []
    header += ["median SM clock MHz", "verdict", "status"]
    rows: list[list[Cell]] = []
    keys: list[str] = []

    def order(p: Point) -> tuple[Any, ...]:
        entry = srvs.get(p.server)
        if routed:
            return (*(routing_of(entry) or ("", 0)), p.server, p.point_key)
        return (server_pool(entry), server_policy(entry), p.point_key)

    for p in sorted(pts, key=order):
        entry = srvs.get(p.server)
        by_turn = p.median.hit_rate_usage_by_turn or {}
        m = p.median
        whole = m.hit_rate_usage
        if whole is None:
            whole = m.hit_rate_counters if "hit_rate_counters" in m else m.hit_rate_log
        flag = " ⚠ sources disagree" if m.hit_rate_disagree else ""
        route = routing_of(entry)
        if routed and route:
            texts = [route[0], str(route[1]), server_pool(entry), p.server]
        else:
            texts = [server_pool(entry), server_policy(entry), p.server]
        texts += [p.point_key] if multi else []
        texts += [pct(whole) + flag + status_note(p) + cache_note(p)] + [
            pct(by_turn.get(str(t))) for t in turns
        ]
        if with_model:
            texts += [num(modelled_ttft_p50_ms(p), ".0f"), num(modelled_tok_s(p))]
        texts += [num(clock(p), ".0f")]
        row = [Cell(t) for t in texts]
        row += [
            Cell(verdict_cell(p.verdict, p.telemetry, p), [point_badge(p)]),
            Cell(status_text(p)),
        ]
        rows.append(row)
        keys.append(f"{p.server}|{p.point_key}")
    per = "step depth" if agent else "turn"
    return Table("policy", header, rows, keys, f"{axes}: hit rate per {per}")


def generic(points: Points) -> Table:
    """One row per point: its figure columns as harness.report.columns declares them."""
    pts = as_points(points)
    cols = shown(POINT_COLUMNS, pts)
    header = ["server", "point"] + [c.header for c in cols] + ["verdict", "status"]
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p in sorted(pts, key=point_order):
        rows.append(
            [Cell(p.server), Cell(p.point_key + status_note(p) + cache_note(p))]
            + [Cell(c.text(p)) for c in cols]
            + [
                Cell(verdict_cell(p.verdict, p.telemetry, p), [point_badge(p)]),
                Cell(status_text(p)),
            ]
        )
        keys.append(f"{p.server}|{p.point_key}")
    return Table("generic", header, rows, keys, "Points")


def sources(points: Points) -> Table:
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
    for p in sorted(as_points(points), key=point_order):
        m = p.median
        sp = p.spread.get("hit_rate_usage")
        usage = pct(m.hit_rate_usage) + (
            f" [{pct(sp[0])}–{pct(sp[1])}]" if isinstance(sp, list) and sp and sp[0] != sp[1] else ""
        )
        log = pct(m.hit_rate_log)
        if m.log_coarse:
            log = f"coarse ({pct(m.hit_rate_log_coarse)})"
        flags = ["disagree"] if m.hit_rate_disagree else []
        flags += list(p.cache_flags)
        texts = [
            p.server,
            p.point_key,
            usage,
            pct(m.hit_rate_timings),
            log,
            pct(m.hit_rate_counters),
            num(p.block_size, "d"),
            num(m.hit_rate_spread_points, ".2f"),
            ", ".join(flags),
            p.status if "status" in p and p.status is not None else "?",
        ]
        rows.append([Cell(t) for t in texts])
        keys.append(f"{p.server}|{p.point_key}")
    return Table("sources", header, rows, keys, "Hit rate by source")


def cache_warnings(points: Points) -> list[str]:
    """Why a point is flagged warm-start or cache-not-cold: its hit rate is not a cold-cache figure."""
    out = []
    for p in sorted(as_points(points), key=point_order):
        for flag, why in p.cache_flags.items():
            out.append(f"⚠ {flag}: {p.server} {p.point_key}: {why}")
    return out


def sources_note(points: Points) -> str:
    """What each source is, for the engines these points ran on, and why a cell is n/a."""
    seed_figs = [s.figures for p in as_points(points) for s in p.seeds.values()]
    engines = {f.counter_engine for f in seed_figs} - {None}  # strings are not merged over seeds
    counters = [
        note
        for eng, note in COUNTER_NOTES.items()
        if eng in engines or (not engines and eng == UNKNOWN_ENGINE_NOTE)
    ]
    whys = sorted({w for f in seed_figs if (w := f.hit_rate_counters_why) or (w := f.log_coarse_why)})
    text = (
        "usage = Σ cached / Σ prompt tokens of ok requests; server timings = Σ timings.cache_n / "
        "Σ (cache_n + prompt_n) of ok requests (llama.cpp); "
        + LOG_NOTE
        + "; counters = "
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


def goodput_figures(points: list[Point]) -> list[str]:
    """Median figures about goodput / SLOs, when the summary has them (names containing `goodput`)."""
    return sorted({k for p in points for k, v in p.median.items() if "goodput" in k and _scalar(v)})


def _scalar(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool))


def latency(points: Points) -> Table:
    """Latency percentiles and throughput per point (and goodput when present), with seed min–max."""
    pts = as_points(points)
    good = goodput_figures(pts)
    header = ["server", "point", "requests", "failures"] + [h for h, _ in LATENCY]
    header += ["output tok/s", "input tok/s"] + good + ["status"]
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p in sorted(pts, key=point_order):
        m, sp = p.median, p.spread

        def with_spread(f: str, fmt: Any, m: Any = m, sp: Any = sp) -> str:
            s = sp.get(f)
            text = fmt(m.number(f))
            if isinstance(s, list) and len(s) == 2 and None not in s and fmt(s[0]) != fmt(s[1]):
                text += f" [{fmt(s[0])}–{fmt(s[1])}]"
            return text

        texts = [p.server, p.point_key, num(m.requests, ".0f"), num(m.failures, ".0f")]
        texts += [with_spread(f, ms1) for _, f in LATENCY]
        texts += [with_spread("output_tok_s", num), with_spread("input_tok_s", num)]
        texts += [num(m.number(g), ".3g") for g in good] + [status_text(p)]
        rows.append([Cell(t) for t in texts])
        keys.append(f"{p.server}|{p.point_key}")
    return Table("latency", header, rows, keys, "Latency and throughput (median over seeds [min–max])")


def experiment_tables(summary: Summary | Mapping[str, Any], exp: str) -> list[Table]:
    """The main table of the experiment's layout, then hit rate by source, then latency."""
    s = parse_summary(summary)
    pts = [p for p in s.points if p.experiment == exp]
    if not pts:
        return []
    entry = s.experiments.get(exp)
    servers = entry.servers if entry else {}
    kind = layout(pts)
    if kind == "ab":
        main = ab(exp, pts, s.pairs, servers)
    elif kind == "policy":
        main = policy(exp, pts, servers)
    else:
        main = generic(pts)
    return [main, sources(pts), latency(pts)]
