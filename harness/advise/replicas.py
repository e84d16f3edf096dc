"""`advise --replicas N`: three more steps, in the order an operator changes a fleet behind smg.

1. The routing policy: round robin, cache_aware, prefix_hash, least_load on N replicas of the chosen
   configuration: the hit rate each keeps and the load skew each costs, both inside the modelled TTFT
   (each worker's own queue on a spec or capture; a trace replays one request at a time, no queueing).
2. A shared L3 across the replicas against each replica's own host tier (and own L3): it pays only
   when requests that share a prefix land on different replicas.
3. N replicas against N/2 replicas with twice the pool each (the same memory): fewer, larger replicas
   hold more distinct prefixes, but queue more.

A step is taken when it pays as recommend.py's do (one point of hit rate, no slower mean TTFT);
"no change pays" stays an answer. smg draws ties and places its ring at random, so a drawn policy is
the mean over `seeds` replays.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.advise.levers import Levers
from harness.advise.node import Node
from harness.advise.recommend import MIN_GAIN
from harness.errors import HarnessError
from harness.sim.timing import CardProfile
from harness.spec.router_policies import ADVISED_POLICIES
from harness.whatif.fleet import FleetResult
from harness.whatif.grid import Config
from harness.whatif.replay import ideal_hits
from harness.whatif.routing import RouterConfig
from harness.whatif.routing_grid import Case, run_cases
from harness.whatif.trace import Trace

L3_BACKEND = "file"


@dataclass(frozen=True)
class Row:
    """One fleet configuration, averaged over the seeds of a drawn policy."""

    replicas: int
    policy: str
    pool: int
    host_ratio: float
    l3: str  # "-" | own | shared
    hit_rate: float
    load_skew: float
    ttft_ms: dict[str, float]  # mean, p50, p99
    slo_met: float | None
    workers_hit_rate: list[float]
    config: Config | None = None  # what each replica runs (not in the JSON row: its knobs are above)

    def label(self) -> str:
        host = f", host {self.host_ratio:g}x" if self.host_ratio else ""
        l3 = "" if self.l3 == "-" else f", L3 {self.l3}"
        return f"{self.replicas} x pool {self.pool:,}{host}{l3}, {self.policy}"

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "config"}
        return d | {"label": self.label()}


@dataclass(frozen=True)
class ReplicaStep:
    action: str
    why: str
    rows: tuple[Row, ...]  # the evidence, first the one it starts from, last the one it ends at
    kind: str = "routing"  # routing | l3 | pool
    taken: bool = False  # the fleet changes to the last row


@dataclass(frozen=True)
class Fleet:
    """Where the steps for one replica count end: how many replicas, each running `config`, routed by
    `policy`, with one L3 shared by all (`shared_l3`) or none."""

    replicas: int
    config: Config
    policy: str
    shared_l3: bool = False


@dataclass
class ReplicaAdvice:
    replicas: list[int]
    rows: list[Row] = field(default_factory=list)
    steps: list[ReplicaStep] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chosen: dict[int, Row] = field(default_factory=dict)  # replicas -> the routing step's row
    confirmed: list[dict[str, Any]] = field(default_factory=list)  # --confirm: predicted vs measured
    fleets: dict[int, Fleet] = field(default_factory=dict)  # replicas asked -> the fleet the steps end at
    launch: dict[int, dict[str, Any]] = field(default_factory=dict)  # replicas asked -> its launch lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "confirmed": self.confirmed,
            "steps": [
                {"action": s.action, "why": s.why, "rows": [r.label() for r in s.rows]} for s in self.steps
            ],
            "rows": [r.to_dict() for r in self.rows],
            "notes": self.notes,
            "router_launch": {str(n): v for n, v in self.launch.items()},
        }


class _Rows:
    """The fleet rows the steps read, each replayed once: a row asked again (the L3 step's own host tier
    is the routing step's chosen row) is the same row, and the seeds of one replica draw nothing, so they
    are one replay. A step's rows replay together across a process pool (harness.whatif.routing_grid)."""

    def __init__(
        self,
        trace: Trace,
        profile: CardProfile,
        slo_ms: float | None,
        seeds: int,
        workers: int | None,
    ) -> None:
        self.trace, self.profile, self.slo_ms, self.seeds, self.workers = (
            trace,
            profile,
            slo_ms,
            seeds,
            workers,
        )
        self.ideal: list[int] | None = None
        self.done: dict[tuple[Config, int, str, bool], Row] = {}

    def seeds_of(self, n: int, policy: str) -> range:
        return range(1 if policy == "round_robin" else self.seeds)

    def rows(self, asked: list[tuple[Config, int, str, bool]]) -> list[Row]:
        """Each (configuration, replicas, policy, shared L3) as its row, the ones not replayed yet first."""
        todo = [k for k in dict.fromkeys(asked) if k not in self.done]
        cases = [
            Case(cfg, n, RouterConfig(pol, seed=s), shared)
            for cfg, n, pol, shared in todo
            for s in self.seeds_of(n, pol)[: 1 if n == 1 else None]
        ]
        if cases:
            if self.ideal is None:
                self.ideal = ideal_hits(self.trace, 1)
            results = iter(run_cases(self.trace, cases, self.profile, self.workers, self.ideal))
            for k in todo:
                cfg, n, pol, shared = k
                got = [next(results) for _ in self.seeds_of(n, pol)[: 1 if n == 1 else None]]
                runs = got * len(self.seeds_of(n, pol)) if n == 1 else got  # one worker: every seed alike
                self.done[k] = _row(runs, cfg, n, pol, shared, self.slo_ms)
        return [self.done[k] for k in asked]

    def row(self, cfg: Config, n: int, policy: str, shared: bool) -> Row:
        return self.rows([(cfg, n, policy, shared)])[0]


def fleet_row(trace: Trace, cfg: Config, n: int, policy: str, profile: CardProfile, seeds: int = 5) -> Row:
    """One fleet's row on `trace` as the table replays it (a confirm's slice predicts its fleets so)."""
    return _Rows(trace, profile, None, seeds, 1).row(cfg, n, policy, False)


def _row(
    runs: list[FleetResult], cfg: Config, n: int, policy: str, shared: bool, slo_ms: float | None
) -> Row:
    """One fleet configuration's row: each figure the mean over its seeds' replays."""

    def avg(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else 0.0

    means = [avg([t for t in r.ttft_s if t == t]) * 1000.0 for r in runs]
    return Row(
        n,
        policy,
        cfg.pool,
        cfg.host_ratio,
        "-" if not cfg.storage else ("shared" if shared else "own"),
        avg([r.aggregate.hit_rate for r in runs]),
        avg([r.load_skew for r in runs]),
        {
            "mean": avg(means),
            "p50": avg([r.aggregate.ttft_ms["p50"] for r in runs]),
            "p99": avg([r.aggregate.ttft_ms["p99"] for r in runs]),
        },
        None if slo_ms is None else avg([r.slo_met(slo_ms) for r in runs]),
        sorted((avg([r.workers[i].hit_rate for r in runs]) for i in range(n)), reverse=True),
        cfg,
    )


def _pays(a: Row, b: Row) -> bool:
    return b.hit_rate - a.hit_rate >= MIN_GAIN and b.ttft_ms["mean"] <= a.ttft_ms["mean"]


def _p(x: float) -> str:
    return f"{x:.1%}"


def advise_replicas(
    trace: Trace,
    chosen: Config,
    replicas: Sequence[int],
    profile: CardProfile,
    slo_ms: float | None = None,
    seeds: int = 5,
    node: Node | None = None,
    workers: int | None = None,
) -> ReplicaAdvice:
    """The three steps for each replica count (2 or more) on the configuration advise chose; with `node`, no
    step gives a replica's host tier more than its share of the node's host memory."""
    if not replicas or any(n < 1 or n > 64 for n in replicas):
        raise HarnessError(f"--replicas: {','.join(map(str, replicas))}: each must be within 1..64")
    base = dataclasses.replace(chosen, storage="")
    out = ReplicaAdvice(list(replicas))
    rows = _Rows(trace, profile, slo_ms, seeds, workers)
    for n in sorted(set(replicas)):
        if n < 2:
            continue
        asked = [(base, n, p, False) for p in ADVISED_POLICIES]
        by_policy = dict(zip(ADVISED_POLICIES, rows.rows(asked), strict=True))
        out.rows += by_policy.values()
        rr = by_policy["round_robin"]
        paying = [r for r in by_policy.values() if r is not rr and _pays(rr, r)]
        pick = rr
        if paying:  # the most hits; within a point of them, the fastest first token
            top = max(r.hit_rate for r in paying)
            pick = min((r for r in paying if r.hit_rate >= top - MIN_GAIN), key=lambda r: r.ttft_ms["mean"])
        losers = [
            r
            for r in by_policy.values()
            if r.hit_rate > rr.hit_rate + MIN_GAIN and r.ttft_ms["mean"] > rr.ttft_ms["mean"]
        ]
        why = "; ".join(
            f"{r.policy} {_p(r.hit_rate)} hits, skew {r.load_skew:.2f}x, TTFT mean {r.ttft_ms['mean']:.0f} ms"
            for r in by_policy.values()
        )
        out.chosen[n] = pick
        if pick is rr:
            out.steps.append(
                ReplicaStep(f"{n} replicas: keep round_robin (no routing change pays)", why, (rr,))
            )
        else:
            out.steps.append(ReplicaStep(f"{n} replicas: route with {pick.policy}", why, (rr, pick)))
        for r in losers:
            out.notes.append(
                f"{n} replicas: {r.policy} keeps more hits than round_robin ({_p(r.hit_rate)} vs "
                f"{_p(rr.hit_rate)}) but its load skew ({r.load_skew:.2f}x) makes the mean TTFT worse "
                f"({r.ttft_ms['mean']:.0f} vs {rr.ttft_ms['mean']:.0f} ms)"
            )
        fleet = Fleet(n, base, pick.policy)
        l3 = _l3_step(rows, base, n, pick.policy, out, _share(node, n))
        out.steps.append(l3)
        if l3.taken:
            fleet = Fleet(n, l3.rows[-1].config or base, pick.policy, True)
        if n % 2 == 0:
            big = _bigger_step(rows, base, n, pick, out, _share(node, n // 2))
            out.steps.append(big)
            if big.taken and not fleet.shared_l3:
                fleet = Fleet(n // 2, big.rows[-1].config or base, pick.policy)
        out.fleets[n] = fleet
    return out


def _share(node: Node | None, n: int) -> float | None:
    """One replica's host memory when n replicas run, as many per node as the node takes."""
    if node is None or node.host_memory_gb is None:
        return None
    return node.host_memory_gb / max(1, min(n, node.per_node))


def _host_gb(cfg: Config, trace: Trace, profile: CardProfile) -> float:
    return cfg.host_ratio * cfg.pool * trace.unit * profile.kv_bytes_per_token / 1e9


def _l3_step(
    rows: _Rows,
    base: Config,
    n: int,
    policy: str,
    out: ReplicaAdvice,
    share_gb: float | None = None,
) -> ReplicaStep:
    """Each replica's own host tier, its own L3, one L3 shared by all."""
    host = base if base.host_ratio > 0 else dataclasses.replace(base, host_ratio=2.0)
    need = _host_gb(host, rows.trace, rows.profile)
    if share_gb is not None and need > share_gb * 1.000001:
        return ReplicaStep(
            f"{n} replicas: no shared L3 (its host tier does not fit)",
            f"the L3 sits behind a {host.host_ratio:g}x host tier: {need:,.1f} GB a replica, more than its "
            f"{share_gb:g} GB share of the node's host memory",
            (),
            "l3",
        )
    l3 = dataclasses.replace(host, storage=L3_BACKEND)
    own_host, own_l3, shared = rows.rows(
        [(host, n, policy, False), (l3, n, policy, False), (l3, n, policy, True)]
    )
    out.rows += [own_host, own_l3, shared]
    why = (
        f"own host tier {_p(own_host.hit_rate)}, own L3 {_p(own_l3.hit_rate)}, shared L3 {_p(shared.hit_rate)} "
        f"(TTFT mean {own_host.ttft_ms['mean']:.0f} / {own_l3.ttft_ms['mean']:.0f} / {shared.ttft_ms['mean']:.0f} ms)"
    )
    if base.host_ratio == 0:
        why += "; the L3 sits behind a host tier, so this step compares with a 2x host tier"
    if rows.trace.concurrency is None:  # harness.whatif.fleet: an L3 replays through the engine
        why += (
            "; the L3 rows replay through the sim's scheduler in virtual time, the own-host-tier row one "
            "request at a time (a trace has no concurrency): part of the gap is the replay's, not the L3's"
        )
    if _pays(own_host, shared) and shared.hit_rate - own_l3.hit_rate >= MIN_GAIN:
        return ReplicaStep(
            f"{n} replicas: share one {L3_BACKEND} L3 across the replicas",
            why,
            (own_host, shared),
            "l3",
            True,
        )
    return ReplicaStep(f"{n} replicas: no shared L3 (it does not pay here)", why, (own_host, shared), "l3")


def _bigger_step(
    rows: _Rows,
    base: Config,
    n: int,
    current: Row,
    out: ReplicaAdvice,
    share_gb: float | None = None,
) -> ReplicaStep:
    """n replicas at the pool against n/2 at twice the pool: the same memory."""
    bigger = dataclasses.replace(base, pool=base.pool * 2)
    trace = rows.trace
    levers = Levers(rows.profile, trace.unit, "blocks" if trace.kind == "blocks" else "tokens")
    if not levers.reachable(bigger.pool):  # a pool no --mem-fraction-static nor FP8 KV gives is no option
        top = levers.largest_pool_tokens() or 0
        return ReplicaStep(
            f"keep {n} replicas ({n // 2} with twice the pool are out of reach)",
            f"{n // 2} x pool {bigger.pool:,} is past every lever: FP8 KV at the largest memory fraction "
            f"holds {top // trace.unit:,} {levers.unit_name} a replica",
            (current,),
            "pool",
        )
    need = _host_gb(bigger, rows.trace, rows.profile)
    if share_gb is not None and need > share_gb * 1.000001:
        return ReplicaStep(
            f"keep {n} replicas ({n // 2} with twice the pool would not fit the host memory)",
            f"{n // 2} x pool {bigger.pool:,} with a {bigger.host_ratio:g}x host tier takes {need:,.1f} GB a "
            f"replica, more than its {share_gb:g} GB share of the node's host memory",
            (current,),
            "pool",
        )
    half = rows.row(bigger, n // 2, current.policy, False)
    out.rows.append(half)
    why = (
        f"{n} x pool {base.pool:,}: {_p(current.hit_rate)}, TTFT mean {current.ttft_ms['mean']:.0f} ms; "
        f"{n // 2} x pool {base.pool * 2:,}: {_p(half.hit_rate)}, TTFT mean {half.ttft_ms['mean']:.0f} ms"
    )
    if _pays(current, half):
        return ReplicaStep(
            f"{n // 2} replicas with twice the pool instead of {n}", why, (current, half), "pool", True
        )
    return ReplicaStep(f"keep {n} replicas (fewer, larger replicas do not pay)", why, (current, half), "pool")


HEAD = [
    "replicas",
    "policy",
    "pool",
    "host",
    "L3",
    "hit rate",
    "per worker",
    "load skew",
    "TTFT mean / p50 / p99 ms",
]


def table(ra: ReplicaAdvice) -> tuple[list[str], list[list[str]]]:
    """Every fleet row the steps rest on, for the Markdown and the HTML page."""
    slo = any(r.slo_met is not None for r in ra.rows)
    rows = []
    for r in ra.rows:
        t = r.ttft_ms
        rows.append(
            [
                str(r.replicas),
                r.policy,
                f"{r.pool:,}",
                f"{r.host_ratio:g}x",
                r.l3,
                _p(r.hit_rate),
                " / ".join(f"{h:.0%}" for h in r.workers_hit_rate),
                f"{r.load_skew:.2f}",
                f"{t['mean']:.0f} / {t['p50']:.0f} / {t['p99']:.0f}",
            ]
            + ([] if not slo else ["-" if r.slo_met is None else _p(r.slo_met)])
        )
    return HEAD + (["SLO met"] if slo else []), rows


def markdown(ra: ReplicaAdvice) -> list[str]:
    """The replicas section of advise.md: the steps, then every fleet row."""
    out = ["", "## Replicas behind smg", ""]
    out += [f"{i}. **{s.action}** — {s.why}" for i, s in enumerate(ra.steps, 1)]
    out += [f"- {n}" for n in ra.notes]
    head, rows = table(ra)
    out += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    for n, lines in ra.launch.items():
        out += ["", f"Launch {n} replicas ({lines['replicas']} after the steps, {lines['replicas_per_node']} a node, "
                f"{lines['nodes']} node{'s' if lines['nodes'] > 1 else ''}; each node runs the same worker lines):", ""]  # fmt: skip
        out += ["```sh", *[w["line"] for w in lines["workers"]], lines["router"]["line"], "```"]
    if ra.confirmed:
        h, body = confirmed_table(ra)
        out += ["", "### Confirmed live behind smg", "", "| " + " | ".join(h) + " |", "|" + "---|" * len(h)]
        out += ["| " + " | ".join(r) + " |" for r in body]
    return out


CONFIRMED_HEAD = ["fleet", "worker", "requests", "predicted (drawn)", "predicted (as routed)", "measured"]


def confirmed_table(ra: ReplicaAdvice) -> tuple[list[str], list[list[str]]]:
    """--confirm: each launched fleet, all workers then each worker, predicted beside measured."""
    rows = []
    for c in ra.confirmed:
        if c.get("measured_hit_rate") is None:
            missing = "not run (stopped)" if c.get("status") == "not run" else "did not run ok"
            rows.append([c["fleet"], "all", "-", _p(c["predicted_hit_rate"]), "-", missing])
            continue
        rows.append([c["fleet"], "all", str(sum(w["requests"] for w in c["workers"])), _p(c["predicted_hit_rate"]),
                     _p(c["followed_hit_rate"]), _p(c["measured_hit_rate"])])  # fmt: skip
        for w in c["workers"]:
            rows.append([c["fleet"], w["worker"], str(w["requests"]), "", _p(w["predicted_hit_rate"]),
                         _p(w["measured_hit_rate"])])  # fmt: skip
    return CONFIRMED_HEAD, rows


def chart_svg(ra: ReplicaAdvice, w: int = 560, h: int = 260) -> str:
    """Hit rate against replicas, one line per policy (no L3, the pool advise chose), as inline SVG."""
    from harness.report.html_page import esc

    lines: dict[str, list[tuple[int, float]]] = {}
    pool = min((r.pool for r in ra.rows), default=0)
    for r in ra.rows:
        base = r.l3 == "-" and r.pool == pool and r.host_ratio == min(x.host_ratio for x in ra.rows)
        if base and all(n != r.replicas for n, _ in lines.get(r.policy, [])):
            lines.setdefault(r.policy, []).append((r.replicas, r.hit_rate))
    ns = sorted({n for pts in lines.values() for n, _ in pts})
    if len(ns) < 1:
        return ""
    left, bottom, top_pad, right = 48, 32, 12, 130

    def x(n: int) -> float:
        return left + (ns.index(n) / max(len(ns) - 1, 1)) * (w - left - right)

    def y(rate: float) -> float:
        return h - bottom - rate * (h - bottom - top_pad)

    colors = ["#2c7fb8", "#c0392b", "#27ae60", "#8e44ad", "#e67e22", "#555", "#16a085"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
             'aria-label="hit rate by replicas per policy">']  # fmt: skip
    parts.append(f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="#888"/>')
    for k in range(0, 11, 2):
        parts.append(
            f'<text x="{left - 6}" y="{y(k / 10) + 4:.1f}" font-size="11" text-anchor="end">{k * 10}%</text>'
        )
    for n in ns:
        parts.append(
            f'<text x="{x(n):.1f}" y="{h - bottom + 16}" font-size="11" text-anchor="middle">{n}</text>'
        )
    for i, (pol, pts) in enumerate(sorted(lines.items())):
        pts.sort()
        c = colors[i % len(colors)]
        path = " ".join(f"{x(n):.1f},{y(v):.1f}" for n, v in pts)
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{path}"/>')
        parts.append(
            f'<text x="{w - right + 8}" y="{top_pad + 14 * (i + 1)}" font-size="11" fill="{c}">{esc(pol)}</text>'
        )
    parts.append(
        f'<text x="{(w - right + left) / 2}" y="{h - 4}" font-size="12" text-anchor="middle">replicas</text>'
    )
    parts.append("</svg>")
    return "".join(parts)
