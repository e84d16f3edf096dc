"""Findings in words, computed from a summary: what each experiment showed, with numbers and seed spread.

Every writer (Markdown, HTML) opens an experiment with these sentences. A difference is stated only
when the seed ranges do not overlap (every seed of one side beats every seed of the other); otherwise
the sentence says the difference is within the seed spread. A caveat follows when a point a finding
rests on is flagged, not ok, or has no telemetry.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from harness.report.common import server_card, server_policy, server_pool, server_time_scale, sort_key

HIT_MARGIN = 0.01  # hit rates closer than 1 point are not called different, whatever the seeds say
TTFT_FACTOR = 1.05  # nor TTFTs within 5 %


@dataclass(frozen=True)
class Spread:
    """A figure's median over ok seeds and the per-seed min and max."""

    median: float
    lo: float
    hi: float
    n: int

    def above(self, other: Spread, margin: float = 0.0, factor: float = 1.0) -> bool:
        """True when every seed here is above every seed of `other` by more than `margin` (absolute) and
        `factor` (relative): a difference the seeds support and large enough to matter."""
        return self.n > 1 and other.n > 1 and self.lo > other.hi * factor + margin


def _spread(values: list[float]) -> Spread | None:
    vals = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
    if not vals:
        return None
    return Spread(float(statistics.median(vals)), float(min(vals)), float(max(vals)), len(vals))


def _ok_seeds(p: dict[str, Any]) -> list[dict[str, Any]]:
    seeds = p.get("seeds") or {}
    return [s.get("figures") or {} for _, s in sorted(seeds.items()) if s.get("status") == "ok"]


def _ttft_ms(fig: dict[str, Any], modelled: bool) -> Any:
    if modelled:
        return ((fig.get("modelled") or {}).get("ttft_ms") or {}).get("p50")
    v = fig.get("ttft_median_s")
    return v * 1000 if isinstance(v, int | float) else None


def _has_host_tier(entry: dict[str, Any]) -> bool:
    pool = entry.get("pool") or {}
    return bool(pool.get("host_tokens") or pool.get("host_gb")) or "+ host" in server_pool(entry)


def _ms(v: float) -> str:
    return f"{v:,.0f} ms" if v >= 10 else f"{v:.1f} ms"


def _ms_range(s: Spread) -> str:
    return f"{s.lo:,.0f}–{s.hi:,.0f} ms" if s.lo >= 10 else f"{s.lo:.1f}–{s.hi:.1f} ms"


def _x(v: float) -> str:
    return f"{v:.1f}×"


def _pct(v: float) -> str:
    return f"{v * 100:.1f} %"


def _pct_range(s: Spread) -> str:
    if s.n < 2:
        return "one seed"
    same = f"{s.lo:.4f}" == f"{s.hi:.4f}"
    return "every seed alike" if same else f"seeds {s.lo * 100:.1f}–{s.hi * 100:.1f}"


def _pct_seeds(pol: str, s: Spread) -> str:
    """`lru 24.8 % (seeds 23.3–26.6)`."""
    return f"{pol} {_pct(s.median)} ({_pct_range(s)})"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# ---------------------------------------------------------------- caveats


def _caveats(points: list[dict[str, Any]], servers: dict[str, Any], timings: bool) -> list[str]:
    """What the findings' points do not vouch for: flags, not-ok seeds, and (for timings) missing telemetry."""
    from harness.verdicts import short_reason

    out: list[str] = []
    flagged = []
    for p in points:
        v = p.get("verdict") or {}
        cache = p.get("cache_state") not in (None, "cold")
        if (isinstance(v, dict) and v.get("flagged") and (timings or cache)) or cache:
            why = short_reason({**v, "cache_state": p.get("cache_state")}, p.get("telemetry") or {})
            flagged.append(f"{p['server']} {p['point_key']} ({why})")
        elif p.get("status") != "ok":
            flagged.append(f"{p['server']} {p['point_key']} ({p.get('status')})")
    if flagged:
        out.append(
            f"Caveat: {_join(flagged[:4])}{' and others' if len(flagged) > 4 else ''} "
            "flagged or not ok; the findings that rest on them may not hold."
        )
    unchecked = [p for p in points if (p.get("verdict") or {}).get("verdict") == "no-telemetry"]
    if unchecked:
        sims = sorted({p["server"] for p in unchecked if server_time_scale(servers.get(p["server"], {}))})
        cards = sorted({c for s in sims if (c := server_card(servers.get(s, {})))})
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


def ab_findings(points: list[dict[str, Any]], servers: dict[str, Any]) -> list[str]:
    """How a second server changed median TTFT against the first, per group count, and where it did not."""
    names = sorted({p["server"] for p in points})
    if len(names) != 2:
        return []
    host = [n for n in names if _has_host_tier(servers.get(n, {}))]
    a, b = (names[0], names[1]) if len(host) != 1 else (next(n for n in names if n not in host), host[0])
    modelled = all(p.get("modelled") for p in points)
    by_g: dict[Any, dict[str, dict[str, Any]]] = {}
    for p in points:
        by_g.setdefault(p["sweep"].get("groups"), {})[p["server"]] = p
    cut, raised, same, used = [], [], [], []
    for g in sorted(by_g, key=sort_key):
        per = by_g[g]
        if a not in per or b not in per:
            continue
        sa = _spread([_ttft_ms(f, modelled) for f in _ok_seeds(per[a])])
        sb = _spread([_ttft_ms(f, modelled) for f in _ok_seeds(per[b])])
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
    scales = {x for n in names if (x := server_time_scale(servers.get(n, {})))}
    if not modelled and scales:  # a sim without modelled figures: its wall clock, paced by the time scale
        x = min(scales)
        what = f"wall-clock median TTFT (a sim at --time-scale {x:g}, {1 / x:g}× faster than the card)"
    label = "HiCache" if len(host) == 1 else f"`{b}`"
    out = []
    if cut:
        parts = [f"{_x(f)} at {g} groups ({rng})" for g, f, rng in cut]
        out.append(
            f"{label} (`{b}`) cut the {what} of `{a}` by {_join(parts)}."
            if len(host) == 1
            else f"{label} cut the {what} of `{a}` by {_join(parts)}."
        )
    if raised:
        parts = [f"{_x(f)} at {g} groups ({rng})" for g, f, rng in raised]
        out.append(f"`{b}` raised the {what} against `{a}` by {_join(parts)}.")
    if same:
        gs = _join([str(g) for g, _, _ in same])
        g0, sa, sb = same[0]
        one = sa.n < 2 or sb.n < 2
        why = (
            "one seed each: no spread to judge a difference by" if one else "within the seed spread (or 5 %)"
        )
        out.append(
            f"At {gs} groups the two are {why} ({f'{g0} groups: ' if len(same) > 1 else ''}`{a}` {_ms(sa.median)}"
            + ("" if one else f", seeds {_ms_range(sa)}")
            + f"; `{b}` {_ms(sb.median)}"
            + ("" if one else f", seeds {_ms_range(sb)}")
            + ")"
            + (": there it did not matter." if not one else ".")
        )
    return out[:3] + _caveats(used, servers, timings=True)[:1]


def _seed_ratios(pa: dict[str, Any], pb: dict[str, Any], modelled: bool) -> list[float]:
    """A's TTFT over B's, seed by seed (the same seed id on both sides)."""
    out = []
    for seed, sa in (pa.get("seeds") or {}).items():
        sb = (pb.get("seeds") or {}).get(seed)
        if not sb or sa.get("status") != "ok" or sb.get("status") != "ok":
            continue
        va, vb = _ttft_ms(sa.get("figures") or {}, modelled), _ttft_ms(sb.get("figures") or {}, modelled)
        if isinstance(va, int | float) and isinstance(vb, int | float) and vb > 0:
            out.append(va / vb)
    return out


# ---------------------------------------------------------------- policy: multi-turn across policies x pools


def _later_turns(points: list[dict[str, Any]]) -> list[int]:
    turns = sorted({int(t) for p in points for t in (p["median"].get("hit_rate_usage_by_turn") or {})})
    return turns[len(turns) // 2 :] if len(turns) > 1 else turns


def _later_rate(fig: dict[str, Any], turns: list[int]) -> float | None:
    by = fig.get("hit_rate_usage_by_turn") or {}
    vals = [by.get(str(t)) for t in turns]
    vals = [v for v in vals if isinstance(v, int | float)]
    return sum(vals) / len(vals) if vals and len(vals) == len(turns) else None


def policy_findings(points: list[dict[str, Any]], servers: dict[str, Any]) -> list[str]:
    """Per pool, which policy held the later-turn hit rate, and whether the seeds support the order."""
    turns = _later_turns(points)
    if not turns:
        return []
    span = f"turn {turns[0] + 1}" if len(turns) == 1 else f"turns {turns[0] + 1}–{turns[-1] + 1}"
    pools: dict[str, list[tuple[str, Spread, dict[str, Any]]]] = {}
    for p in points:
        entry = servers.get(p["server"], {})
        s = _spread([_later_rate(f, turns) for f in _ok_seeds(p)])
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
                    else "within the seed spread (or 1 point) of each other"
                )
                + (
                    f" (all {lo * 100:.1f} %)"
                    if f"{lo:.3f}" == f"{hi:.3f}"
                    else f" ({lo * 100:.1f}–{hi * 100:.1f} %)"
                )
                + ": there the policy did not matter."
            )
            continue
        rest_text = _join([_pct_seeds(pol, s) for pol, s, _ in rest])
        if len(top) == 1:
            pol, s, _ = top[0]
            out.append(
                f"At pool {pool}, {pol} held the later-turn ({span}) hit rate best: {_pct(s.median)} "
                f"({_pct_range(s)}), against {rest_text}."
            )
        else:
            tops = "; ".join(_pct_seeds(pol, s) for pol, s, _ in top)
            out.append(
                f"At pool {pool}, {_join([pol for pol, _, _ in top])} held the later-turn ({span}) hit rate "
                f"best, within the seed spread (or 1 point) of each other ({tops}), above {rest_text}."
            )
    if not out:
        return []
    return out[:3] + _caveats(used, servers, timings=False)[:1]


# ---------------------------------------------------------------- servers side by side on the whole-run hit rate


def hit_findings(points: list[dict[str, Any]], servers: dict[str, Any]) -> list[str]:
    """Per point, which server kept more of the prompt tokens cached (when the policy table has no pair)."""
    by_key: dict[str, list[tuple[str, Spread, dict[str, Any]]]] = {}
    for p in points:
        s = _spread([f.get("hit_rate_usage") for f in _ok_seeds(p)])
        if s is not None:
            by_key.setdefault(p["point_key"], []).append((p["server"], s, p))
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
            others = _join([_pct_seeds(f"`{n}`", s) for n, s, _ in rest])
            out.append(
                f"{at}`{best[0]}` kept the most prompt tokens "
                f"cached: {_pct(best[1].median)} ({_pct_range(best[1])}), against {others}."
            )
        elif any(s.n < 2 for _, s, _ in rows):
            vals = _join([f"`{n}` {_pct(s.median)}" for n, s, _ in rows])
            out.append(f"{at}one seed only, so no spread to judge the difference by: {vals}.")
        else:
            vals = _join([_pct_seeds(f"`{n}`", s) for n, s, _ in rows])
            out.append(f"{at}the servers' hit rates are within the seed spread (or 1 point): {vals}.")
        if len(out) == 3:
            break
    if not out:
        return []
    out[0] = out[0][0].upper() + out[0][1:]
    return out + _caveats(used, servers, timings=False)[:1]


# ---------------------------------------------------------------- the summary


def experiment_findings(points: list[dict[str, Any]], servers: dict[str, Any]) -> list[str]:
    """2–4 sentences for one experiment's points (empty when its layout has no finding to state)."""
    from harness.report.tables import layout

    if not points:
        return []
    kind = layout(points)
    if kind == "ab":
        return ab_findings(points, servers)
    if kind == "policy":
        return policy_findings(points, servers) or hit_findings(points, servers)
    return hit_findings(points, servers)


def findings(summary: dict[str, Any]) -> dict[str, list[str]]:
    """experiment → its sentences, for every experiment of the summary."""
    out = {}
    for exp, entry in (summary.get("experiments") or {}).items():
        pts = [p for p in summary.get("points") or [] if p.get("experiment") == exp]
        out[exp] = experiment_findings(pts, (entry or {}).get("servers") or {})
    return out
