"""Findings for replicas behind a gateway: which routing kept the hits, at what load skew and modelled TTFT,
and what a shared L3 added, per replica count, from the servers' `replicas.json` and their points."""

from __future__ import annotations

from dataclasses import dataclass

from harness.report.wording import (
    HIT_MARGIN,
    Spread,
    fmt_ms,
    fmt_pct,
    fmt_pct_range,
    join_words,
    ok_seeds,
    spread_of,
    ttft_ms_of,
)
from harness.spec.flags import storage_backend
from harness.summary import Point, Server


@dataclass(frozen=True)
class _Row:
    """One replicas point: its layout (count, policy, L3) and figures over its ok seeds."""

    point: Point
    replicas: int
    policy: str
    l3: str  # "no L3", "own L3", "shared L3"
    hit: Spread
    skew: Spread | None
    ttft_ms: Spread | None


def _l3(entry: Server, storage: str) -> str:
    args = entry.args if isinstance(entry.args, list) else []
    if storage_backend([str(a) for a in args]) is None:
        return "no L3"
    return "shared L3" if storage == "shared" else "own L3"


def _rows(points: list[Point], servers: dict[str, Server]) -> list[_Row]:
    out = []
    for p in points:
        entry = servers.get(p.server)
        info = entry.replicas if entry else None
        count = info.get("replicas") if isinstance(info, dict) else None
        if entry is None or not isinstance(info, dict) or not isinstance(count, int):
            continue
        figs = ok_seeds(p)
        hit = spread_of([f.hit_rate_usage for f in figs])
        if hit is None:
            continue
        skew = spread_of([f.load_skew for f in figs])
        ttft = spread_of([ttft_ms_of(f, modelled=bool(entry.time_scale)) for f in figs])
        policy, storage = str(info.get("policy") or "cache_aware"), str(info.get("storage") or "own")
        out.append(_Row(p, count, policy, _l3(entry, storage), hit, skew, ttft))
    return out


def _routing_sentence(rows: list[_Row], at: str) -> str:
    """The policies of one (replica count, L3) layout, best hit rate first."""
    rows = sorted(rows, key=lambda r: -r.hit.median)
    best, rest = rows[0], rows[1:]
    n, l3 = best.replicas, best.l3
    skews = [f"{r.skew.median:.2f}×" if r.skew else "n/a" for r in rows]
    ttfts = [fmt_ms(r.ttft_ms.median) if r.ttft_ms else "n/a" for r in rows]
    ahead = all(best.hit.above(r.hit, margin=HIT_MARGIN) for r in rest)
    lead = "kept the most prompt tokens cached" if ahead else "led, within the seed spread of the next,"
    others = join_words([f"`{r.policy}` {fmt_pct(r.hit.median)}" for r in rest])
    return (
        f"{at}{n} replicas, {l3}: `{best.policy}` {lead} at {fmt_pct(best.hit.median)} ({fmt_pct_range(best.hit)}), "
        f"against {others}; load skew {', '.join(skews)} and "
        f"{'modelled ' if best.point.modelled else ''}TTFT p50 {', '.join(ttfts)} in that order."
    )


def _l3_sentence(rows: list[_Row]) -> str | None:
    """The largest change a shared L3 made to one policy at one replica count."""
    pairs = []
    for r in rows:
        if r.l3 != "shared L3":
            continue
        base = next((b for b in rows if b.l3 == "no L3" and (b.replicas, b.policy) == (r.replicas, r.policy)
                     and b.point.point_key == r.point.point_key), None)  # fmt: skip
        if base is not None:
            pairs.append((r.hit.median - base.hit.median, base, r))
    if not pairs:
        return None
    gain, base, l3 = max(pairs, key=lambda t: t[0])
    cross = [f.storage_hits_cross_replica for f in ok_seeds(l3.point) if f.storage_hits_cross_replica]
    seen = f", {int(max(cross))} requests read another replica's pages" if cross else ""
    small = [
        f"`{b.policy}` ×{b.replicas} {g * 100:+.1f}" for g, b, _ in sorted(pairs, key=lambda t: -t[0])[1:4]
    ]
    tail = f" (others, in points: {join_words(small)})" if small else ""
    return (
        f"A shared L3 moved `{base.policy}` at {base.replicas} replicas from {fmt_pct(base.hit.median)} to "
        f"{fmt_pct(l3.hit.median)}{seen}{tail}."
    )


def replicas_findings(points: list[Point], servers: dict[str, Server]) -> list[str]:
    """Sentences for an experiment of replicas points (empty when it has none)."""
    rows = _rows(points, servers)
    if not rows:
        return []
    out = []
    keys = sorted({r.point.point_key for r in rows})
    for key in keys:
        at = "" if key == "default" else f"At {key}, "
        layouts = sorted({(r.replicas, r.l3) for r in rows if r.point.point_key == key})
        for n, l3 in layouts:
            group = [r for r in rows if r.point.point_key == key and (r.replicas, r.l3) == (n, l3)]
            if len(group) > 1:
                out.append(_routing_sentence(group, at))
    shared = _l3_sentence(rows)
    if shared:
        out.append(shared)
    notes = [(r.point.median.load_skew_note, r.point.server) for r in rows if r.point.median.load_skew_note]
    if notes:
        out.append(f"Load skew past 1.5×: {join_words([f'`{s}` ({n})' for n, s in notes[:4]])}.")
    return out


def routing_answer(points: list[Point], servers: dict[str, Server]) -> str | None:
    """The experiment's answer in one sentence: per replica layout, the routing that kept the most hits."""
    rows = _rows(points, servers)
    parts = []
    for key in sorted({r.point.point_key for r in rows}):
        at = "" if key == "default" else f"{key}, "
        for n, l3 in sorted({(r.replicas, r.l3) for r in rows if r.point.point_key == key}):
            group = sorted(
                (r for r in rows if r.point.point_key == key and (r.replicas, r.l3) == (n, l3)),
                key=lambda r: -r.hit.median,
            )
            if len(group) < 2:
                continue
            best, nxt = group[0], group[1]
            ahead = all(best.hit.above(r.hit, margin=HIT_MARGIN) for r in group[1:])
            parts.append(
                f"{at}{n} replicas, {l3}: `{best.policy}` {fmt_pct(best.hit.median)}"
                f" ({'ahead of' if ahead else 'not separated by the seeds from'} `{nxt.policy}` {fmt_pct(nxt.hit.median)})"
            )
    if not parts:
        return None
    return f"Routing that kept the most prompt tokens cached: {'; '.join(parts)}."
