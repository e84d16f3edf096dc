"""The first screen, computed once: each experiment's answer to its question and its miss anatomy in one
line, which the Markdown, the HTML page and the terminal all render (so the three never say different things).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.report.common import server_pool
from harness.summary import Point, Server, Summary

# Sentences that qualify an answer rather than give it: they go after the ones that state a difference.
_QUALIFIERS = ("did not matter", "too few to", "within the seed spread or 95 % interval")
_CAVEATS = ("Caveat:", "These timings are unchecked", "Hit rates do not depend on clocks", "Load skew past")
MAX_ANSWER_SENTENCES = 2


@dataclass(frozen=True)
class Glance:
    """One experiment on the first screen: its answer first, then where its misses came from."""

    experiment: str
    answer: str
    misses: str = ""
    note: str = ""  # why a related command's figures differ (the bench's pool against advise's)


def _answer(sentences: list[str]) -> str:
    """The sentences that state a difference first, caveats dropped (the verdict line carries them)."""
    said = [s for s in sentences if not s.startswith(_CAVEATS)]
    ordered = [s for s in said if not any(q in s for q in _QUALIFIERS)]
    ordered += [s for s in said if any(q in s for q in _QUALIFIERS)]
    return " ".join(ordered[:MAX_ANSWER_SENTENCES])


def pool_note(points: list[Point], servers: dict[str, Server]) -> str:
    """A trace replayed by the bench runs the spec's pool; `harness advise` models the card's default pool,
    so the two report different hit rates on the same trace unless advise is given the same `--pool`."""
    if not points or not all(p.workload_kind == "trace" for p in points):
        return ""
    pools = sorted({f"`{n}` {server_pool(servers.get(n))}" for n in {p.server for p in points}})
    return (
        f"These hit rates are at this spec's pools ({', '.join(pools)} tokens); `harness advise` on the same "
        "trace models its card's default pool unless given `--pool`, so its hit rates differ from these."
    )


def experiment_glance(exp: str, points: list[Point], servers: dict[str, Server]) -> Glance:
    """The answer to what the experiment asked (capacity, routing, policy, host tier), then the miss anatomy."""
    from harness.report.anatomy import anatomy_findings
    from harness.report.capacity import capacity_findings
    from harness.report.findings import ab_findings, hit_findings, policy_findings
    from harness.report.replicas_findings import routing_answer
    from harness.report.tables import layout

    why = anatomy_findings(points, servers)
    misses = why[0] if why else ""
    cap = capacity_findings(servers)
    routed = routing_answer(points, servers)
    if cap:
        answer = _answer(cap)
    elif routed:
        answer = routed
    else:
        kind = layout(points)
        if kind == "ab":
            said = ab_findings(points, servers)
        elif kind == "policy":
            said = policy_findings(points, servers) or hit_findings(points, servers)
        else:
            said = hit_findings(points, servers)
        answer = _answer(said)
    return Glance(exp, answer or "No finding to state.", misses, pool_note(points, servers))


def glance(s: Summary) -> list[Glance]:
    """Every experiment of the summary that has points, in name order."""
    out = []
    for exp, entry in sorted(s.experiments.items()):
        pts = [p for p in s.points if p.experiment == exp]
        if pts:
            out.append(experiment_glance(exp, pts, dict(entry.servers)))
    return out


def card_line(s: Summary) -> str:
    """Which card a sim run modelled and how to choose another: the figures are that card's, not this machine's."""
    from harness.report.common import server_card, server_time_scale

    cards = sorted(
        {
            c
            for e in s.experiments.values()
            for srv in e.servers.values()
            if server_time_scale(srv) is not None and (c := server_card(srv))
        }
    )
    if not cards:
        return ""
    return (
        f"Sim run: the modelled figures are the {', '.join(cards)} card's (the sim's model of it, not a card); "
        "model another with `harness bench --card-profile NAME` (e.g. h100, h200, a100-80g)."
    )


def glance_markdown(entries: list[Glance]) -> list[str]:
    """Two or three lines an experiment: its answer, then its misses (and the pool note) beneath."""
    out: list[str] = []
    for g in entries:
        out.append(f"- **{g.experiment}.** {g.answer}")
        if g.misses:
            out.append(f"  - Misses: {g.misses}")
        if g.note:
            out.append(f"  - {g.note}")
    return out


def glance_text(entries: list[Glance]) -> list[str]:
    """The same lines for the terminal (no Markdown marks)."""
    return [line.replace("**", "").replace("`", "") for line in glance_markdown(entries)]
