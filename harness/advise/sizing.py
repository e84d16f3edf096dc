"""The shown candidates sized at the user's load: one replica's capacity at the SLO, the replicas the load
needs, and whether the queue grows — each found by replays through the sim's scheduler (capacity.py's
searches), one fork-pool job per distinct configuration.

A request whose TTFT one at a time (nothing queued) already misses the SLO misses it at any load: when
more of them than the percentile allows, no replica count serves the load and the search is skipped.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from harness.advise.capacity import Capacity, Tried, fewest_replicas, highest, overloaded, search, serves
from harness.advise.grid import Candidate
from harness.advise.levers import Levers
from harness.advise.load import AtLoad, Load, at_load, shown
from harness.advise.node import Node
from harness.advise.physics_error import PhysicsError, physics_error
from harness.advise.slo import Slo
from harness.sim.timing import CardProfile
from harness.whatif.forked import fork_map
from harness.whatif.grid import Config
from harness.whatif.trace import Trace


@dataclass(frozen=True)
class Sized:
    """One configuration sized at the load (the job's answer)."""

    capacity: Capacity
    gpus_needed: int | None
    gpus_tried: tuple[Tried, ...]
    floor_share: float  # requests whose TTFT one at a time already misses the SLO's TTFT bound
    at: dict[int, Tried]  # the probe at the input's own load, by replica count


@dataclass(frozen=True)
class Work:
    trace: Trace
    profile: CardProfile
    slo: Slo
    load: Load
    router: str
    node: Node | None
    levers: Levers
    rows_replicas: int  # the at-load table's replica count (a probe there labels its rows)
    max_factor: float = 64.0  # the search's cap on the load factor (a closed loop: the trace's conversations)


_WORK: Work | None = None


def scaled(load: Load, f: float) -> Load:
    """`load` x f: a trace's arrival times / (speedup x f), f x the rate, f x the requests in flight."""
    if load.kind == "trace":
        return dataclasses.replace(
            load,
            speedup=load.speedup * f,
            offered_rps=(load.offered_rps or 0.0) * f,
            span_s=(load.span_s or 0.0) / f,
        )
    if load.kind == "rate":
        return dataclasses.replace(load, rate=(load.rate or 0.0) * f, offered_rps=(load.rate or 0.0) * f)
    return dataclasses.replace(load, concurrency=max(1, round((load.concurrency or 1) * f)))


def arrivals(loaded: Trace, load: Load) -> list[float]:
    """Each request's send time at `load` (empty for a closed loop, whose queue cannot grow)."""
    if load.kind == "trace":
        return [r.arrival for r in loaded.requests]
    if load.kind == "rate":
        from harness.workloads.arrivals import arrival_offsets

        return arrival_offsets(len(loaded.requests), load.rate or 1.0, loaded.seed)
    return []


def fit_host(cfg: Config, replicas: int, w: Work) -> Config:
    """The configuration as `replicas` replicas run it: those sharing a node split its host memory, so
    a host tier larger than a replica's share shrinks to it (off below 1x the device pool)."""
    node = w.node
    if cfg.host_ratio <= 0 or node is None or node.host_memory_gb is None:
        return cfg
    per_node = node.per_node if node.per_node_given else min(replicas, node.gpus)
    share = node.host_memory_gb / max(per_node, 1)
    need = w.levers.host_gb(cfg.pool, cfg.host_ratio)
    if need <= share:
        return cfg
    ratio = math.floor(cfg.host_ratio * share / need * 10) / 10
    return dataclasses.replace(cfg, host_ratio=ratio if ratio > 1 else 0.0)


def probe(cfg: Config, f: float, replicas: int, early: bool = False) -> Tried:
    """One replay of `cfg` on `replicas` workers at f x the input's load; `early`: stop it once more
    requests missed the SLO's TTFT bound than its percentile allows (its figures are then partial)."""
    from harness.whatif.fleet import replay_fleet
    from harness.whatif.replay import ideal_hits
    from harness.whatif.routing import RouterConfig
    from harness.whatif.serve import engine

    w = _WORK
    assert w is not None, "size() sets the work before the pool forks"
    load = scaled(w.load, f)
    loaded = at_load(w.trace, load)
    run = fit_host(cfg, replicas, w)
    ideal = ideal_hits(w.trace, cfg.page_size)  # the keys do not change with the load
    bound = w.slo.ttft_bound()
    give_up = (bound.ms / 1e3, int(len(loaded.requests) * (1 - bound.percentile / 100))) if early else None
    if replicas > 1:
        rc = RouterConfig(w.router)
        fl = replay_fleet(loaded, run, replicas, rc, w.profile, ideal=ideal, give_up=give_up)
        res, ttft, span, stopped, tpot = fl.aggregate, fl.ttft_s, fl.makespan_s, fl.stopped, fl.tpot_s
    else:
        got = engine(loaded, run, ideal, w.profile, give_up=give_up)
        res, ttft, span, stopped, tpot = got.result, got.ttft_s, got.makespan_s, got.stopped, got.tpot_s
    rps = load.offered_rps if load.kind != "concurrency" else None
    if rps is None:  # a closed loop offers what it completes
        rps = len(ttft) / span if span > 0 else 0.0
    return Tried(
        rps=rps,
        scale=_scale(load),
        replicas=replicas,
        meets=w.slo.meets(ttft, tpot),
        overloaded=overloaded(arrivals(loaded, load), ttft),
        attainment=w.slo.attainment(ttft, tpot),
        figures=w.slo.figures(ttft, tpot),
        hit_rate=res.hit_rate,
        stopped=stopped,
    )


def floor_share(cfg: Config) -> float:
    """The share of requests whose TTFT one request at a time (no queue) is over the SLO's TTFT bound."""
    from harness.whatif.replay import ideal_hits
    from harness.whatif.serve import sequential

    w = _WORK
    assert w is not None
    got = sequential(w.trace, cfg, ideal_hits(w.trace, cfg.page_size), w.profile)
    bound = w.slo.ttft_bound()
    return sum(1 for t in got.ttft_s if t * 1e3 > bound.ms) / max(len(got.ttft_s), 1)


def size_one(job: tuple[Config, int]) -> Sized:
    """Capacity on one replica, then the fewest replicas (up to `most`) for the input's load (a job of
    the pool)."""
    cfg, most = job
    w = _WORK
    assert w is not None
    ttft_bound = w.slo.ttft_bound()
    floor = floor_share(cfg)
    tokens = sum(r.tokens for r in w.trace.requests) / max(len(w.trace.requests), 1)
    at: dict[int, Tried] = {}
    if floor > 1 - ttft_bound.percentile / 100:  # no load, no replica count meets it
        if w.rows_replicas >= 1:
            at[w.rows_replicas] = probe(cfg, 1.0, w.rows_replicas)
        return Sized(Capacity(None, None, None), None, (), floor, at)
    at[1] = probe(cfg, 1.0, 1)  # whole: its figures are the row's at the input's load
    tried = search(lambda f: at[1] if f == 1.0 else probe(cfg, f, 1, early=True), max_factor=w.max_factor)
    cap = highest(tried, tokens)
    need: int | None = None
    fleet: list[Tried] = []
    if serves(at[1]):
        need = 1
    else:  # from the capacity's ratio; a replica that serves no load tried still splits a burst with others
        guess = max(2, math.ceil(at[1].rps / cap.rps)) if cap.rps else 2
        need, fleet = fewest_replicas(lambda n: probe(cfg, 1.0, n, early=True), guess, most)
        for t in fleet:
            if not t.stopped:  # a whole replay: its figures stand for that replica count
                at.setdefault(t.replicas, t)
    if w.rows_replicas not in at:
        at[w.rows_replicas] = probe(cfg, 1.0, w.rows_replicas)
    return Sized(cap, need, tuple(fleet), floor, at)


def _scale(load: Load) -> float:
    return load.speedup if load.kind == "trace" else (load.rate or float(load.concurrency or 1))


def size(
    a: Any, trace: Trace, load: Load, profile: CardProfile, slo: Slo, workers: int | None = None
) -> dict[Config, Sized]:
    """Each shown candidate's configuration sized at `load`; the rows at load (a.at_load) get their
    capacity, GPUs needed, overload and SLO figures. a: harness.advise.advice.Advice."""
    global _WORK
    pairs: list[tuple[str, Candidate]] = shown(a.recommendation, a.candidates)
    configs = list(dict.fromkeys(c.config for _, c in pairs))
    node: Node | None = a.node
    levers: Levers = a.levers or Levers(profile, trace.unit, a.unit)
    n_rows = a.at_load[0].replicas if a.at_load else 1
    router = a.at_load[0].router if a.at_load and a.at_load[0].router != "-" else "cache_aware"
    most = node.gpus if node is not None else 8
    cap = 64.0
    if load.kind == "concurrency":  # a closed loop holds no more than the input's conversations at once
        convs = len(
            {r.conversation if r.conversation is not None else -1 - i for i, r in enumerate(trace.requests)}
        )
        cap = max(1.0, min(cap, convs / max(load.concurrency or 1, 1)))
    _WORK = Work(trace, profile, slo, load, router, node, levers, n_rows, cap)
    # on --tp N (one card cannot serve the input: every candidate starts there) a replica takes N GPUs
    tp = {c: _tp(a) for c in configs}
    jobs = [(c, max(1, most // tp[c])) for c in configs]
    try:
        got = fork_map(size_one, jobs, workers)
    finally:
        _WORK = None
    by = dict(zip(configs, got, strict=True))
    err = physics_error(profile)
    a.at_load = [
        _fill(r, by[c.config], err, tp[c.config]) for r, (_, c) in zip(a.at_load, pairs, strict=True)
    ]
    return by


def _tp(a: Any) -> int:
    s = getattr(a, "serveable", None)
    return int(getattr(s, "tp", 1) or 1)


def _fill(row: AtLoad, s: Sized, err: PhysicsError, tp: int = 1) -> AtLoad:
    """The row at load with its sizing, GPUs = replicas x tp; where the card physics' error is large,
    capacity and GPUs needed carry its range (a capacity x [low, high] needs the replicas / [high, low])."""
    t = s.at.get(row.replicas)
    cap = s.capacity
    need_range: tuple[int, int] | None = None
    if err.is_large and cap.rps is not None:
        lo, hi = err.capacity_range(cap.rps)
        cap = dataclasses.replace(cap, low_rps=lo, high_rps=hi)
        if s.gpus_needed is not None:
            need_range = (
                tp * max(1, math.ceil(s.gpus_needed / err.high - 1e-9)),
                tp * math.ceil(s.gpus_needed / err.low - 1e-9),
            )
    at_need = s.at.get(s.gpus_needed) if s.gpus_needed is not None else None
    return dataclasses.replace(
        row,
        overloaded=bool(t and t.overloaded),
        slo_figures=dict(t.figures) if t else {},
        attainment=t.attainment if t else None,
        capacity=cap,
        gpus_needed=None if s.gpus_needed is None else s.gpus_needed * tp,
        gpus_needed_range=need_range,
        tp=tp,
        floor_share=s.floor_share,
        needed_figures=dict(at_need.figures) if at_need else {},
    )


def finish_at_load(
    a: Any, trace: Trace, load: Load, profile: CardProfile, slo: Slo | None, workers: int | None
) -> None:
    """Size the rows at load and lead the headline with the answer at the user's load (the steps'
    one-request-at-a-time sentence follows it). a: harness.advise.advice.Advice with its rows at load."""
    import time

    from harness.advise.sizing_words import card_name, headline
    from harness.advise.slo import AGENTS_SLO, DEFAULT_SLO

    if not a.at_load:
        return
    t0 = time.perf_counter()
    a.slo = slo or (AGENTS_SLO if load.agents else DEFAULT_SLO)
    size(a, trace, load, profile, a.slo, workers)
    most = a.node.gpus if a.node is not None else 8
    longest = max((r.tokens for r in trace.requests), default=0)
    a.headline_at_load = headline(a.at_load, load, a.slo, card_name(profile), most, longest)
    if a.headline_at_load:  # what the pool rejects first, then the load, then one request at a time
        rec = a.recommendation
        first = getattr(getattr(a, "serveable", None), "headline", "") or ""
        rest = (
            rec.headline[len(first) :].strip() if first and rec.headline.startswith(first) else rec.headline
        )
        rec.headline = " ".join(x for x in (first, a.headline_at_load, f"One request at a time: {rest}") if x)
    if _tp(a) > 1:
        a.notes.append(
            f"capacity on --tp {_tp(a)} is timed as one card's prefill and decode (the sim has no tensor-parallel "
            "timing): a lower bound; GPUs needed count the replicas x --tp"
        )
    if load.agents:
        from harness.advise.agents import agent_gaps

        a.agents = agent_gaps(a, trace, load, profile)
    err = physics_error(profile)
    if err.is_large:
        a.notes.append(
            f"capacity and GPUs needed carry the card physics' error band (x{err.low:.2f}-{err.high:.2f} on "
            f"capacity; docs/physics.md): {err.summary()}"
        )
    a.seconds["capacity"] = time.perf_counter() - t0
