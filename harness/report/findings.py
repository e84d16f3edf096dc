"""Findings in words, computed from a summary: what each experiment showed, with numbers and seed spread.

Every writer (Markdown, HTML) opens an experiment with these sentences. A difference is stated only
when the seed ranges do not overlap (every seed of one side beats every seed of the other) and neither
do the 95% Student-t intervals of the means (harness.summarize.intervals); otherwise the sentence says
the difference is within the seed spread. A caveat follows when a point a finding
rests on is flagged, not ok, or has no telemetry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.report.common import (
    server_card,
    server_host_tier,
    server_policy,
    server_pool,
    server_time_scale,
    sort_key,
)
from harness.report.wording import (
    HIT_MARGIN,
    TTFT_FACTOR,
    Spread,
    fmt_ms,
    fmt_ms_range,
    fmt_pct,
    fmt_pct_range,
    fmt_pct_seeds,
    fmt_x,
    join_words,
    ok_seeds,
    spread_of,
    ttft_ms_of,
)
from harness.summary import Figures, Point, Server, Summary

Points = Iterable[Point]
Servers = Mapping[str, Server] | None


# ---------------------------------------------------------------- caveats


def _caveats(points: list[Point], servers: dict[str, Server], timings: bool) -> list[str]:
    """What the findings' points do not vouch for: flags, not-ok seeds, and (for timings) missing telemetry."""
    from harness.verdicts import short_reason

    out: list[str] = []
    flagged = []
    for p in points:
        v = p.verdict.to_json() if p.verdict else {}
        cache = p.cache_state not in (None, "cold")
        if (p.verdict and p.verdict.flagged and (timings or cache)) or cache:
            why = short_reason({**v, "cache_state": p.cache_state}, p.telemetry or {})
            flagged.append(f"{p.server} {p.point_key} ({why})")
        elif p.status != "ok":
            flagged.append(f"{p.server} {p.point_key} ({p.status})")
    if flagged:
        out.append(
            f"Caveat: {join_words(flagged[:4])}{' and others' if len(flagged) > 4 else ''} "
            "flagged or not ok; the findings that rest on them may not hold."
        )
    unchecked = [p for p in points if p.verdict and p.verdict.verdict == "no-telemetry"]
    if unchecked:
        sims = sorted({p.server for p in unchecked if server_time_scale(servers.get(p.server))})
        cards = sorted({c for s in sims if (c := server_card(servers.get(s)))})
        model = f"the {', '.join(cards)} card" if cards else "a card"
        what = f"the sim's model of {model}, not a card" if sims else "no clock was watched"
        if timings:
            out.append(f"These timings are unchecked: no telemetry ({what}).")
        else:
            out.append(
                f"Hit rates do not depend on clocks, so the missing telemetry ({what}) does not touch them."
            )
    return out


# ---------------------------------------------------------------- A/B: a groups sweep across servers


def ab_findings(points: Points, servers: Servers) -> list[str]:
    """How a second server changed median TTFT against the first, per group count, and where it did not."""
    pts, srvs = list(points), dict(servers or {})
    names = sorted({p.server for p in pts})
    if len(names) != 2:
        return []
    host = [n for n in names if server_host_tier(srvs.get(n))]
    a, b = (names[0], names[1]) if len(host) != 1 else (next(n for n in names if n not in host), host[0])
    modelled = all(p.modelled for p in pts)
    by_g: dict[Any, dict[str, Point]] = {}
    for p in pts:
        by_g.setdefault(p.sweep.get("groups"), {})[p.server] = p
    cut, raised, same, used = [], [], [], []
    for g in sorted(by_g, key=sort_key):
        per = by_g[g]
        if a not in per or b not in per:
            continue
        sa = spread_of([ttft_ms_of(f, modelled) for f in ok_seeds(per[a])])
        sb = spread_of([ttft_ms_of(f, modelled) for f in ok_seeds(per[b])])
        if sa is None or sb is None or sb.median <= 0 or sa.median <= 0:
            continue
        used += [per[a], per[b]]
        ratios = _seed_ratios(per[a], per[b], modelled)
        lo_r, hi_r = (f"{min(ratios):.1f}", f"{max(ratios):.1f}") if ratios else ("", "")
        rng = (
            "one seed"
            if len(ratios) < 2
            else ("every seed alike" if lo_r == hi_r else f"seeds {lo_r}–{hi_r}×")
        )
        if sa.above(sb, factor=TTFT_FACTOR):
            cut.append((g, sa.median / sb.median, rng))
        elif sb.above(sa, factor=TTFT_FACTOR):
            raised.append((g, sb.median / sa.median, rng))
        else:
            same.append((g, sa, sb))
    if not used:
        return []
    what = "modelled median TTFT" if modelled else "median TTFT"
    scales = {x for n in names if (x := server_time_scale(srvs.get(n)))}
    if not modelled and scales:  # a sim without modelled figures: its wall clock, paced by the time scale
        x = min(scales)
        what = f"wall-clock median TTFT (a sim at --time-scale {x:g}, {1 / x:g}× faster than the card)"
    label = "HiCache" if len(host) == 1 else f"`{b}`"
    out = []
    if cut:
        parts = [f"{fmt_x(f)} at {g} groups ({rng})" for g, f, rng in cut]
        out.append(
            f"{label} (`{b}`) cut the {what} of `{a}` by {join_words(parts)}."
            if len(host) == 1
            else f"{label} cut the {what} of `{a}` by {join_words(parts)}."
        )
    if raised:
        parts = [f"{fmt_x(f)} at {g} groups ({rng})" for g, f, rng in raised]
        out.append(f"`{b}` raised the {what} against `{a}` by {join_words(parts)}.")
    if same:
        gs = join_words([str(g) for g, _, _ in same])
        g0, sa, sb = same[0]
        one = sa.n < 2 or sb.n < 2
        equal = all(fmt_ms(x.median) == fmt_ms(y.median) for _, x, y in same)
        head = (  # one seed: no seed spread and no interval, so nothing is stated either way
            f"At {gs} groups `{a}` and `{b}` ran one seed each"
            + (f", with the same {what}" if equal else f": too few to state a difference in {what}")
            if one
            else f"At {gs} groups the two differ by less than the seed spread, the 95 % interval or 5 %"
        )
        out.append(
            f"{head} ({f'{g0} groups: ' if len(same) > 1 else ''}`{a}` {fmt_ms(sa.median)}"
            + ("" if one else f", seeds {fmt_ms_range(sa)}")
            + f"; `{b}` {fmt_ms(sb.median)}"
            + ("" if one else f", seeds {fmt_ms_range(sb)}")
            + ")"
            + (f": there `{b}` did not matter." if not one else ".")
        )
    return out[:3] + _caveats(used, srvs, timings=True)[:1]


def _seed_ratios(pa: Point, pb: Point, modelled: bool) -> list[float]:
    """A's TTFT over B's, seed by seed (the same seed id on both sides)."""
    out = []
    for seed, sa in pa.seeds.items():
        sb = pb.seeds.get(seed)
        if not sb or sa.status != "ok" or sb.status != "ok":
            continue
        va, vb = ttft_ms_of(sa.figures, modelled), ttft_ms_of(sb.figures, modelled)
        if isinstance(va, int | float) and isinstance(vb, int | float) and vb > 0:
            out.append(va / vb)
    return out


# ---------------------------------------------------------------- policy: multi-turn across policies x pools


def _later_turns(points: list[Point]) -> list[int]:
    turns = sorted({int(t) for p in points for t in (p.median.hit_rate_usage_by_turn or {})})
    return turns[len(turns) // 2 :] if len(turns) > 1 else turns


def _later_rate(fig: Figures, turns: list[int]) -> float | None:
    by = fig.hit_rate_usage_by_turn or {}
    vals = [v for t in turns if isinstance(v := by.get(str(t)), int | float)]
    return sum(vals) / len(vals) if vals and len(vals) == len(turns) else None


def policy_findings(points: Points, servers: Servers) -> list[str]:
    """Per pool, which policy held the later-turn hit rate, and whether the seeds support the order."""
    pts, srvs = list(points), dict(servers or {})
    turns = _later_turns(pts)
    if not turns:
        return []
    span = f"turn {turns[0] + 1}" if len(turns) == 1 else f"turns {turns[0] + 1}–{turns[-1] + 1}"
    pools: dict[str, list[tuple[str, Spread, Point]]] = {}
    for p in pts:
        entry = srvs.get(p.server)
        s = spread_of([_later_rate(f, turns) for f in ok_seeds(p)])
        if s is not None:
            pools.setdefault(server_pool(entry), []).append((server_policy(entry), s, p))
    out, used = [], []
    for pool in sorted(pools, key=lambda x: sort_key(int(x) if x.isdigit() else x)):
        rows = sorted(pools[pool], key=lambda r: -r[1].median)
        used += [p for _, _, p in rows]
        if len(rows) < 2:
            continue
        best = rows[0][1]
        top = [r for r in rows if not best.above(r[1], margin=HIT_MARGIN)]
        rest = [r for r in rows if best.above(r[1], margin=HIT_MARGIN)]
        if not rest:
            lo, hi = min(r[1].lo for r in rows), max(r[1].hi for r in rows)
            one = any(r[1].n < 2 for r in rows)
            out.append(
                f"At pool {pool} the policies' later-turn ({span}) hit rates are "
                + (
                    "from one seed each, too few to order them"
                    if one
                    else "within the seed spread or 95 % interval (or 1 point) of each other"
                )
                + (
                    f" (all {lo * 100:.1f} %)"
                    if f"{lo:.3f}" == f"{hi:.3f}"
                    else f" ({lo * 100:.1f}–{hi * 100:.1f} %)"
                )
                + ": there the policy did not matter."
            )
            continue
        rest_text = join_words([fmt_pct_seeds(pol, s) for pol, s, _ in rest])
        if len(top) == 1:
            pol, s, _ = top[0]
            out.append(
                f"At pool {pool}, {pol} held the later-turn ({span}) hit rate best: {fmt_pct(s.median)} "
                f"({fmt_pct_range(s)}), against {rest_text}."
            )
        else:
            tops = "; ".join(fmt_pct_seeds(pol, s) for pol, s, _ in top)
            out.append(
                f"At pool {pool}, {join_words([pol for pol, _, _ in top])} held the later-turn ({span}) hit rate "
                f"best, within the seed spread or 95 % interval (or 1 point) of each other ({tops}), above {rest_text}."
            )
    if not out:
        return []
    return out[:3] + _caveats(used, srvs, timings=False)[:1]


# ---------------------------------------------------------------- servers side by side on the whole-run hit rate


def hit_findings(points: Points, servers: Servers) -> list[str]:
    """Per point, which server kept more of the prompt tokens cached (when the policy table has no pair)."""
    pts, srvs = list(points), dict(servers or {})
    by_key: dict[str, list[tuple[str, Spread, Point]]] = {}
    for p in pts:
        s = spread_of([f.hit_rate_usage for f in ok_seeds(p)])
        if s is not None:
            by_key.setdefault(p.point_key, []).append((p.server, s, p))
    out, used = [], []
    for key in sorted(by_key, key=lambda k: [sort_key(x) for x in k.replace("=", ",").split(",")]):
        rows = sorted(by_key[key], key=lambda r: -r[1].median)
        if len(rows) < 2:
            continue
        used += [p for _, _, p in rows]
        best = rows[0]
        rest = [r for r in rows[1:] if best[1].above(r[1], margin=HIT_MARGIN)]
        at = "" if key == "default" else f"At {key}, "
        if rest:
            others = join_words([fmt_pct_seeds(f"`{n}`", s) for n, s, _ in rest])
            out.append(
                f"{at}`{best[0]}` kept the most prompt tokens "
                f"cached: {fmt_pct(best[1].median)} ({fmt_pct_range(best[1])}), against {others}."
            )
        elif any(s.n < 2 for _, s, _ in rows):
            vals = join_words([f"`{n}` {fmt_pct(s.median)}" for n, s, _ in rows])
            out.append(
                f"{at}one seed each, too few to state a difference (no seed spread, no interval): {vals}."
            )
        else:
            vals = join_words([fmt_pct_seeds(f"`{n}`", s) for n, s, _ in rows])
            out.append(
                f"{at}the servers' hit rates are within the seed spread or 95 % interval (or 1 point): {vals}."
            )
        if len(out) == 3:
            break
    if not out:
        return []
    out[0] = out[0][0].upper() + out[0][1:]
    return out + _caveats(used, srvs, timings=False)[:1]


# ---------------------------------------------------------------- the summary


def experiment_findings(points: Points, servers: Servers) -> list[str]:
    """2–4 sentences for one experiment's points (empty when its layout has no finding to state)."""
    from harness.report.tables import layout

    pts, srvs = list(points), dict(servers or {})
    if not pts:
        return []
    from harness.report.capacity import capacity_findings

    kind = layout(pts)
    first = capacity_findings(srvs)  # a capacity search's result: the question that experiment asked
    if first:
        return first
    from harness.report.anatomy import anatomy_findings
    from harness.report.replicas_findings import replicas_findings

    why = anatomy_findings(pts, srvs)  # the dominant miss class and its lever follow the answer
    routed = replicas_findings(pts, srvs)  # replicas behind a gateway: which routing kept the hits
    if routed:
        return routed + why
    if kind == "ab":
        return ab_findings(pts, srvs) + why
    if kind == "policy":
        return (policy_findings(pts, srvs) or hit_findings(pts, srvs)) + why
    return hit_findings(pts, srvs) + why


def findings(s: Summary) -> dict[str, list[str]]:
    """experiment → its sentences, for every experiment of the summary."""
    return {
        exp: experiment_findings([p for p in s.points if p.experiment == exp], entry.servers)
        for exp, entry in s.experiments.items()
    }
