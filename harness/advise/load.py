"""advise at the input's own load: the shown candidates replayed through the sim's scheduler.

The curve and the grid rank one request at a time (cheap, and exact against SGLang's tree); the
candidates a user reads first — the recommendation, today's configuration, the better candidate and the
top of the table — are replayed again at a load (harness.whatif.serve.engine: batching, chunked prefill,
queueing; with `--replicas`, N workers behind the modelled router), and that replay's hit rate and TTFT
are the ones shown at load. The load is, in this order: `--concurrency N` (requests in flight, sent back
to back), `--rate R` (Poisson arrivals, R requests/s, nothing capped), a trace's own arrival times
divided by `--speedup` (as `harness run` sends a trace: all of them open loop), else a spec's or
capture's own concurrency.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from harness.advise.capacity import Capacity
from harness.advise.grid import Candidate
from harness.errors import HarnessError
from harness.sim.timing import CardProfile
from harness.whatif.fleet import replay_fleet
from harness.whatif.forked import fork_map
from harness.whatif.grid import Config
from harness.whatif.result import Result
from harness.whatif.routing import RouterConfig
from harness.whatif.serve import engine
from harness.whatif.trace import Trace


@dataclass(frozen=True)
class Load:
    """At which load the at-load figures are."""

    kind: str  # trace | concurrency | rate
    speedup: float = 1.0
    concurrency: int | None = None
    rate: float | None = None
    offered_rps: float | None = None  # a trace's requests over its span, after --speedup
    span_s: float | None = None  # a trace's first to last arrival, after --speedup
    start_s: float = 0.0  # a trace's first arrival, after --speedup (a slice need not start at 0)
    agents: bool = False  # the concurrency counts agents: conversations with their think times (--agents)

    def describe(self) -> str:
        if self.kind == "concurrency" and self.agents:
            return f"{self.concurrency} agents at once (closed loop: each request its think time after the last answer)"
        if self.kind == "concurrency":
            return f"{self.concurrency} requests in flight (closed loop)"
        if self.kind == "rate":
            return f"Poisson arrivals at {self.rate:g} req/s"
        rps = f" ({self.offered_rps:.2f} req/s offered)" if self.offered_rps else ""
        return f"the trace's arrival times / --speedup {self.speedup:g}{rps}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"describe": self.describe()}


def load_of(
    trace: Trace,
    speedup: float = 1.0,
    concurrency: int | None = None,
    rate: float | None = None,
    agents: int | None = None,
) -> Load:
    """The load the flags and the input name (see the module docstring for the order; --agents first)."""
    check_load(speedup, concurrency, rate, agents)
    if agents is not None:
        return Load("concurrency", concurrency=agents, agents=True)
    if concurrency is not None:
        return Load("concurrency", concurrency=concurrency)
    if rate is not None:
        return Load("rate", rate=rate)
    arrivals = [r.arrival for r in trace.requests]
    span = (max(arrivals) - min(arrivals)) / speedup if arrivals else 0.0
    if span > 0 and trace.concurrency is None:
        return Load(
            "trace",
            speedup=speedup,
            offered_rps=len(arrivals) / span,
            span_s=span,
            start_s=min(arrivals) / speedup,
        )
    return Load("concurrency", concurrency=int(trace.concurrency or 1), agents=trace.agents)


def check_load(
    speedup: float, concurrency: int | None, rate: float | None, agents: int | None = None
) -> None:
    """The load flags, before any work: one line naming the flag and its value."""
    if agents is not None and agents < 1:
        raise HarnessError(f"--agents: {agents}: must be 1 or more")
    if agents is not None and (concurrency is not None or rate is not None):
        raise HarnessError("--agents: give one of --agents, --concurrency and --rate")
    if speedup <= 0:
        raise HarnessError(f"--speedup: {speedup:g}: must be positive")
    if concurrency is not None and concurrency < 1:
        raise HarnessError(f"--concurrency: {concurrency}: must be 1 or more")
    if rate is not None and rate <= 0:
        raise HarnessError(f"--rate: {rate:g}: must be positive")


def at_load(trace: Trace, load: Load) -> Trace:
    """The trace as the scheduler replay sends it at `load`."""
    n = len(trace.requests)
    if load.kind == "trace":
        reqs = [dataclasses.replace(r, arrival=r.arrival / load.speedup) for r in trace.requests]
        return dataclasses.replace(trace, requests=reqs, concurrency=n, request_rate=None)
    reqs = [dataclasses.replace(r, arrival=0.0) for r in trace.requests]
    if load.kind == "rate":
        return dataclasses.replace(trace, requests=reqs, concurrency=n, request_rate=load.rate)
    return dataclasses.replace(trace, requests=reqs, concurrency=load.concurrency, request_rate=None)


@dataclass(frozen=True)
class AtLoad:
    """One shown candidate's figures at the load."""

    role: str  # recommendation | today | better | top
    label: str
    replicas: int
    router: str
    hit_rate: float
    one_at_a_time_hit_rate: float
    ttft_ms: dict[str, float]  # mean, p50, p99 at load
    one_at_a_time_ttft_ms: dict[str, float]  # mean, p50, p99 one request at a time
    makespan_s: float
    seconds: float  # the replay's wall time
    overloaded: bool = False  # the queue grows over the replay: the TTFT figures are not steady
    slo_figures: dict[str, float] = dataclasses.field(default_factory=dict)  # each SLO bound at this load
    attainment: float | None = None  # share of requests within the SLO at this load
    capacity: Capacity | None = None  # one replica's highest load within the SLO
    gpus_needed: int | None = None  # the fewest replicas that meet the SLO at this load (None: none)
    floor_share: float | None = None  # requests whose TTFT one at a time already misses the SLO
    gpus_needed_range: tuple[int, int] | None = None  # with the card physics' error band (physics_error)
    needed_figures: dict[str, float] = dataclasses.field(default_factory=dict)  # the SLO on gpus_needed
    tp: int = 1  # GPUs a replica takes (--tp): gpus_needed counts GPUs, replicas x tp

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["capacity"] = None if self.capacity is None else self.capacity.to_dict()
        return out


def _ttft(ts: list[float]) -> dict[str, float]:
    import numpy as np

    ok = [t for t in ts if t == t]
    if not ok:
        return {"mean": 0.0, "p50": 0.0, "p99": 0.0}
    q = np.percentile(np.asarray(ok), [50, 99]) * 1000.0
    return {"mean": statistics.fmean(ok) * 1000.0, "p50": float(q[0]), "p99": float(q[1])}


_WORK: tuple[Trace, dict[int, list[int]], CardProfile, int, str] | None = None


def _replay_one(cfg: Config) -> tuple[Result, list[float], float]:
    """One distinct configuration at the load: its aggregate, each request's TTFT, the makespan."""
    assert _WORK is not None, "replay_at_load() sets the work before the pool forks"
    loaded, ideal, profile, replicas, router = _WORK
    if replicas > 1:
        f = replay_fleet(loaded, cfg, replicas, RouterConfig(router), profile, ideal=ideal[cfg.page_size])
        return f.aggregate, f.ttft_s, f.makespan_s
    got = engine(loaded, cfg, ideal[cfg.page_size], profile)
    return got.result, got.ttft_s, got.makespan_s


def replay_at_load(
    trace: Trace,
    shown: list[tuple[str, Candidate]],
    load: Load,
    profile: CardProfile,
    replicas: int = 1,
    router: str = "round_robin",
    workers: int | None = None,
) -> list[AtLoad]:
    """Each shown candidate (role, candidate) through the scheduler at `load`, once per distinct config;
    the distinct ones across a process pool as harness.whatif.replay.sweep runs them (fork)."""
    global _WORK
    from harness.whatif.replay import ideal_hits

    loaded = at_load(trace, load)
    configs = distinct(shown)
    ideal = {p: ideal_hits(loaded, p) for p in sorted({c.page_size for c in configs})}  # any load: same keys
    _WORK = (loaded, ideal, profile, replicas, router)
    got = fork_map(_replay_one, configs, workers)
    _WORK = None
    return rows(shown, dict(zip(configs, got, strict=True)), replicas, router)


def distinct(shown: list[tuple[str, Candidate]]) -> list[Config]:
    """The configurations to replay for these rows, each once, in the rows' order."""
    return list(dict.fromkeys(cand.config for _, cand in shown))


def rows(
    shown: list[tuple[str, Candidate]],
    by_config: dict[Config, tuple[Result, list[float], float]],
    replicas: int = 1,
    router: str = "round_robin",
) -> list[AtLoad]:
    """The at-load rows from each distinct configuration's replay at the load."""
    out: list[AtLoad] = []
    first: dict[Config, AtLoad] = {}
    for role, cand in shown:
        if cand.config in first:  # the row of the first candidate with this configuration, as shown again
            out.append(dataclasses.replace(first[cand.config], role=role))
            continue
        res, ts, span = by_config[cand.config]
        row = AtLoad(
            role,
            cand.label(),
            replicas,
            router if replicas > 1 else "-",
            res.hit_rate,
            cand.hit_rate,
            _ttft(ts),
            dict(cand.modelled.ttft_ms),
            span,
            res.seconds,
        )
        first[cand.config] = row
        out.append(row)
    return out


HEAD = [
    "shown as",
    "configuration",
    "replicas",
    "hit rate at load",
    "one at a time",
    "TTFT mean / p50 / p99 ms at load",
    "one at a time",
]


def row(r: AtLoad) -> list[str]:
    """One at-load row's cells, for the Markdown and the page."""
    a, b = r.ttft_ms, r.one_at_a_time_ttft_ms
    return [
        r.role + (" (overloaded)" if r.overloaded else ""),
        r.label,
        f"{r.replicas}{'' if r.router == '-' else ' ' + r.router}",
        f"{r.hit_rate:.1%}",
        f"{r.one_at_a_time_hit_rate:.1%}",
        f"{a['mean']:.0f} / {a['p50']:.0f} / {a['p99']:.0f}",
        f"{b['mean']:.0f} / {b['p50']:.0f} / {b['p99']:.0f}",
    ]


def markdown(rows: list[AtLoad], load: Load) -> list[str]:
    """The at-load section of advise.md."""
    out = ["", "## At the input's load", "", f"Replayed through the sim's scheduler at {load.describe()}; "
           "every other table is one request at a time.", ""]  # fmt: skip
    out += ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    out += ["| " + " | ".join(row(r)) + " |" for r in rows]
    span = load.span_s
    late = [r for r in rows if r.overloaded]
    if late:
        r = late[0]
        took = f" finishes the last answer {r.makespan_s - load.start_s:,.0f} s after the first request" + (
            f" against the trace's {span:,.0f} s" if span else ""
        )
        names = ", ".join(dict.fromkeys(x.role for x in late))
        out += ["", f"Overloaded at this load ({names}): the queue grows over the replay ({r.label}{took}), so "
                "its TTFT is mostly waiting and grows with the replay's length, not a steady figure; *Capacity "
                "at the SLO* says how many replicas keep up."]  # fmt: skip
    return out


def shown(rec: Any, cands: list[Candidate]) -> list[tuple[str, Candidate]]:
    """The rows at load: the recommendation, today's configuration, the better candidate and the top of
    the table (harness.advise.recommend.Recommendation, the grid's candidates)."""
    from harness.advise.better import ranked

    out = [("recommendation", rec.chosen), ("today", rec.baseline)]
    if rec.better is not None:
        out.append(("better candidate", rec.better.candidate))
    best = ranked(cands)
    if best:
        out.append(("top of the table", best[0]))
    return out


def shown_at_load(
    a: Any, trace: Trace, load: Load, profile: CardProfile, workers: int | None = None
) -> list[AtLoad]:
    """The recommendation, today's configuration, the better candidate and the top of the table, at
    `load`; with --replicas, on the first replica count's workers behind the policy its step chose."""
    n, router = 1, "round_robin"
    ra = a.replicas
    if ra is not None and ra.chosen:
        n = min(ra.chosen)
        router = ra.chosen[n].policy
    return replay_at_load(trace, shown(a.recommendation, a.candidates), load, profile, n, router, workers)
