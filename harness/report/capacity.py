"""A capacity search's result and the seeds' confidence intervals as report tables, and the sentence that
compares two servers' capacities; shown by the Markdown report, the HTML page and `harness compare`'s page.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.report.common import as_points, as_servers, point_order
from harness.report.tables import Cell, Points, Servers, Table, pct
from harness.summarize.intervals import HIT_RATE_SOURCES, LEVEL
from harness.summary import Point

# interval key -> (column, value formatter); hit rate: whichever source the point's interval names
INTERVAL_COLUMNS: dict[str, tuple[str, Any]] = {
    "latency.ttft_s.p50": ("TTFT p50 ms", lambda v: f"{v * 1000:.0f}"),
    "latency.ttft_s.p99": ("TTFT p99 ms", lambda v: f"{v * 1000:.0f}"),
    "latency.tpot_s.p50": ("TPOT p50 ms", lambda v: f"{v * 1000:.1f}"),
    "throughput.requests_per_s": ("req/s", lambda v: f"{v:.2f}"),
    "output_tok_s": ("output tok/s", lambda v: f"{v:.1f}"),
    "hit_rate": ("hit rate", pct),
    "goodput.fraction": ("goodput", lambda v: f"{v:.3f}"),
    "modelled.ttft_ms.p50": ("modelled TTFT p50 ms", lambda v: f"{v:.0f}"),
    "modelled.output_tok_s": ("modelled output tok/s", lambda v: f"{v:.1f}"),
    # a sim's goodput on the card's clock: what its capacity search judged (the wall-clock one is paced)
    "modelled.goodput.fraction": ("modelled goodput", lambda v: f"{v:.3f}"),
}
KNOB_WORDS = {"concurrency": "concurrent requests", "request_rate": "req/s", "sessions": "sessions"}


def _at(obj: Any, path: Iterable[str]) -> Any:
    for k in path:
        obj = obj.get(k) if isinstance(obj, Mapping) else None
    return obj


def _hit_key(p: Point) -> str | None:
    return next((k for k in HIT_RATE_SOURCES if k in p.interval), None)


def interval_text(p: Point, key: str, fmt: Any) -> str:
    """`median [min–max] ±CI lo–hi` for one figure of a point: n/a without a median."""
    path = (key,) if key in HIT_RATE_SOURCES else tuple(key.split("."))
    median = p.median.to_json()
    m = _at(median, path)
    if not isinstance(m, int | float) or isinstance(m, bool):
        return "n/a"
    text = fmt(m)
    sp = _at(p.spread, path)
    if isinstance(sp, list) and len(sp) == 2 and None not in sp and fmt(sp[0]) != fmt(sp[1]):
        text += f" [{fmt(sp[0])}–{fmt(sp[1])}]"
    ci = p.interval.get(key)
    if isinstance(ci, list) and len(ci) == 2:
        text += f" (CI {fmt(ci[0])}–{fmt(ci[1])})"
    return text


def interval_table(points: Points) -> Table | None:
    """Per point with 2+ seeds: median [min–max] (95% CI) of TTFT p50/p99, TPOT, throughput, hit rate, goodput."""
    pts = [p for p in as_points(points) if p.interval]
    if not pts:
        return None
    cols = [
        k for k in INTERVAL_COLUMNS if any(k in p.interval or (k == "hit_rate" and _hit_key(p)) for p in pts)
    ]
    if all(p.modelled for p in pts):  # sims alone: their wall-clock latency only paced the run, not beside
        cols = [k for k in cols if not k.startswith("latency.")]  # the card's (it stays in the JSON)
    header = ["server", "point", "seeds"] + [INTERVAL_COLUMNS[k][0] for k in cols]
    rows: list[list[Cell]] = []
    keys: list[str] = []
    for p in sorted(pts, key=point_order):
        texts = [p.server, p.point_key, str(len([s for s in p.seeds.values() if s.status == "ok"]))]
        for k in cols:
            key = (_hit_key(p) or "hit_rate_usage") if k == "hit_rate" else k
            texts.append(interval_text(p, key, INTERVAL_COLUMNS[k][1]))
        rows.append([Cell(t) for t in texts])
        keys.append(f"{p.server}|{p.point_key}")
    title = f"How sure: median [seed min–max] (CI: the {LEVEL:.0%} Student-t interval of the mean over seeds)"
    return Table("intervals", header, rows, keys, title)


def _searches(servers: Servers) -> dict[str, Any]:
    return {name: s.search for name, s in sorted(as_servers(servers).items()) if s.search is not None}


def search_table(servers: Servers) -> Table | None:
    """One row per server that ran a capacity search: best value, the probes in order of value, why it stopped."""
    found = _searches(servers)
    if not found:
        return None
    header = ["server", "knob", "best", "limiting", "probes (value: status)", "stopped"]
    rows, keys = [], []
    for name, r in found.items():
        probes = ", ".join(f"{p.value:g}: {p.status}" for p in r.probes)
        best = "none" if r.best is None else f"{r.best:g}"
        rows.append([Cell(t) for t in (name, r.knob, best, r.limiting or "", probes, r.stopped or "")])
        keys.append(name)
    return Table("search", header, rows, keys, "Capacity: the largest load that met the SLO")


def _target_text(target: Mapping[str, Any]) -> str:
    raw = target.get("slo")
    slo: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    pctl = target.get("percentile")
    terms = ", ".join(
        f"{'p' + format(pctl, 'g') + ' ' if pctl else ''}{k.removesuffix('_ms').upper()} ≤ {v:g} ms"
        for k, v in slo.items()
    )
    return f"{terms} for {target.get('goodput', 0.9):g} of requests"


def capacity_findings(servers: Servers) -> list[str]:
    """`hicache` took N more sessions than `gpu-only` at p99 TTFT ≤ 2000 ms: one sentence per search pair."""
    found = _searches(servers)
    if not found:
        return []
    names = list(found)
    first = found[names[0]]
    words = KNOB_WORDS.get(first.knob, first.knob)
    target = _target_text(first.target)
    if len(names) == 1:
        best = "none (lo already missed it)" if first.best is None else f"{first.best:g} {words}"
        return [f"`{names[0]}` met the SLO ({target}) up to {best}."]
    out = []
    base = names[0]
    for other in names[1:]:
        a, b = found[base].best, found[other].best
        if a is None or b is None:
            out.append(
                f"Capacity at {target}: `{base}` {a if a is not None else 'none'}, `{other}` {b if b is not None else 'none'} {words}."
            )
        elif b == a:
            out.append(f"`{other}` and `{base}` met the SLO ({target}) up to the same {a:g} {words}.")
        else:
            more = "more" if b > a else "fewer"
            out.append(
                f"`{other}` took {abs(b - a):g} {more} {words} than `{base}` ({b:g} against {a:g}) at {target}."
            )
    return out


def capacity_tables(points: Points, servers: Servers) -> list[Table]:
    """The tables this module adds to an experiment, those that have anything to show."""
    return [t for t in (search_table(servers), interval_table(points)) if t is not None]


def markdown_lines(points: Points, servers: Servers) -> list[str]:
    """The search table and the interval table as Markdown sections (none when neither has rows)."""
    out: list[str] = []
    for t in capacity_tables(points, servers):
        out += [
            "",
            f"### {t.title}",
            "",
            "| " + " | ".join(t.header) + " |",
            "|" + "|".join("---" for _ in t.header) + "|",
        ]
        out += ["| " + " | ".join(r) + " |" for r in t.texts()]
    return out
