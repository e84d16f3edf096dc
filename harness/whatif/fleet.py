"""The routing replay: N of today's exact caches behind a modelled smg (harness.whatif.routing).

Two paths, as harness.whatif.replay chooses them:
- traces without a concurrency (Mooncake, bailian) and no L3: one request at a time in arrival order, each
  routed and served by `serve_request` on its worker's tree; nothing overlaps, so every load is 0.
- specs, captures and any L3: N copies of the sim's scheduler in one virtual time. The load generator's
  closed loop sends; each arrival is routed when every busy worker has reached its time, on the requests
  then in flight per worker (routed and not finished), and queued on that worker as `simulate` queues it.
  With one worker this is `simulate` step for step, so `--replicas 1` equals today's replay.

A shared L3 is one storage directory for every worker (the sim's file store shares pages through it,
as HiCacheFile does); otherwise each worker has its own empty one.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.sim.radix import serve_request
from harness.sim.timing import DEFAULT_PROFILE, CardProfile, get_profile
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace
from harness.whatif.replay import (
    Result,
    _cache_answer,
    _Tally,
    closed_loop,
    engine_config,
    ideal_hits,
    new_cache,
    tier_seconds,
    tier_tokens,
)
from harness.whatif.routing import Request, Router, RouterConfig, make_router, routing_text

if TYPE_CHECKING:
    from harness.sim.engine import Engine, EngineConfig, SimRequest


@dataclass
class WorkerFigures:
    """One worker's share of a routing replay."""

    worker: str
    requests: int = 0
    prompt_tokens: int = 0
    device_hit_tokens: int = 0
    host_hit_tokens: int = 0
    storage_hit_tokens: int = 0
    ttft_ms: dict[str, float] = field(default_factory=dict)

    @property
    def hit_tokens(self) -> int:
        return self.device_hit_tokens + self.host_hit_tokens + self.storage_hit_tokens

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.hit_tokens

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.update(
            hit_tokens=self.hit_tokens, prefill_tokens=self.prefill_tokens, hit_rate=round(self.hit_rate, 6)
        )
        return d


@dataclass
class FleetResult:
    """A routing replay: the aggregate (today's Result over every request), each worker, the routing."""

    config: Config
    replicas: int
    router: RouterConfig
    shared_l3: bool
    aggregate: Result
    workers: list[WorkerFigures]
    worker_of: list[int]  # per request, in the trace's order
    branches: dict[str, int]
    ttft_s: list[float] = field(repr=False, default_factory=list)  # per request, trace order (nan: none)
    makespan_s: float = 0.0  # virtual seconds from the first send to the last answer (engine replays)
    # following a live run's choices: requests whose worker was not one the model could have picked
    off_model: list[int] = field(default_factory=list)

    @property
    def load_skew(self) -> float:
        """The busiest worker's prefill tokens over the mean (1.0: even)."""
        pre = [w.prefill_tokens for w in self.workers]
        mean = sum(pre) / len(pre) if pre else 0.0
        return max(pre) / mean if mean else 1.0

    def slo_met(self, slo_ms: float) -> float:
        """The share of requests whose modelled TTFT is within the SLO."""
        ok = [t for t in self.ttft_s if t == t]
        return sum(1 for t in ok if t * 1000.0 <= slo_ms) / len(self.ttft_s) if self.ttft_s else 0.0

    def goodput_rps(self, slo_ms: float) -> float | None:
        """Requests meeting the SLO per virtual second (engine replays; None one request at a time)."""
        if not self.makespan_s:
            return None
        return self.slo_met(slo_ms) * len(self.ttft_s) / self.makespan_s

    def to_dict(self, slo_ms: float | None = None) -> dict[str, Any]:
        agg = self.aggregate.to_dict()
        out = {
            "replicas": self.replicas,
            "router": dataclasses.asdict(self.router),
            "shared_l3": self.shared_l3,
            "hit_rate": agg["hit_rate"],
            "aggregate": agg,
            "load_skew": round(self.load_skew, 4),
            "workers": [w.to_dict() for w in self.workers],
            "branches": dict(sorted(self.branches.items())),
            "makespan_s": self.makespan_s,
        }
        if slo_ms is not None:
            out["slo_ms"] = slo_ms
            out["slo_met"] = round(self.slo_met(slo_ms), 6)
            out["goodput_rps"] = self.goodput_rps(slo_ms)
        return out


def request_texts(trace: Trace) -> list[str]:
    """What smg sees of each request: its text when the input kept it, else its ids joined by spaces
    (what a `/generate` with `input_ids` shows smg; a block trace's block ids likewise)."""
    return [r.text if r.text is not None else routing_text(r.key) for r in trace.requests]


def replay_fleet(
    trace: Trace,
    cfg: Config,
    replicas: int,
    rcfg: RouterConfig,
    card: str | CardProfile | None = None,
    shared_l3: bool = False,
    ideal: list[int] | None = None,
    econf: EngineConfig | None = None,
    follow: list[int] | None = None,
) -> FleetResult:
    """One configuration on `replicas` workers behind `rcfg`'s policy; paths as harness.whatif.replay.

    follow: a worker per request (the trace's order), e.g. where a live gateway sent each: the replay
    routes there instead of drawing, and lists the requests the model could not have sent there."""
    ideal = ideal if ideal is not None else ideal_hits(trace, cfg.page_size)
    route = _Route(make_router(replicas, rcfg), follow)
    if trace.concurrency is not None or cfg.storage or econf is not None:
        res = _engine(trace, cfg, replicas, route, rcfg, card, shared_l3, ideal, econf)
    else:
        res = _sequential(trace, cfg, replicas, route, rcfg, card, ideal)
    res.off_model = sorted(route.off_model)
    return res


class _Route:
    """The router, or a live run's choices checked against what the router could have done."""

    def __init__(self, router: Router, follow: list[int] | None) -> None:
        self.router = router
        self.follow = follow
        self.off_model: list[int] = []
        if follow is not None:
            router.follow_live()  # e.g. the live ring's placement is learned from the live choices

    @property
    def branches(self) -> dict[str, int]:
        return self.router.branches

    def __call__(self, i: int, req: Request, loads: list[int]) -> int:
        if self.follow is None:
            return self.router.select(req, loads)
        opts = self.router.options(req, loads)
        w = self.follow[i]
        if w not in opts:
            self.off_model.append(i)
        self.router.commit(req, w, loads)
        return w


def _figures(
    trace: Trace,
    n: int,
    worker_of: list[int],
    hits: list[tuple[int, int, int]],
    ttft: list[float],
) -> list[WorkerFigures]:
    from harness.whatif.replay import _percentiles

    figs = [WorkerFigures(f"w{i}") for i in range(n)]
    per: list[list[float]] = [[] for _ in range(n)]
    for r, w, (d, h, s), t in zip(trace.requests, worker_of, hits, ttft, strict=True):
        f = figs[w]
        f.requests += 1
        f.prompt_tokens += r.tokens
        f.device_hit_tokens += d
        f.host_hit_tokens += h
        f.storage_hit_tokens += s
        if t == t:
            per[w].append(t)
    for f, ts in zip(figs, per, strict=True):
        f.ttft_ms = _percentiles(ts)
    return figs


def _sequential(
    trace: Trace,
    cfg: Config,
    n: int,
    route: _Route,
    rcfg: RouterConfig,
    card: str | CardProfile | None,
    ideal: list[int],
) -> FleetResult:
    """Requests one at a time (no overlap, every load 0), each on its routed worker's tree."""

    caches = [new_cache(cfg) for _ in range(n)]
    profile = card if isinstance(card, CardProfile) else get_profile(card or DEFAULT_PROFILE)
    texts = request_texts(trace)
    zero = [0] * n
    tally = _Tally()
    ttft: list[float] = []
    worker_of: list[int] = []
    hits: list[tuple[int, int, int]] = []
    t0 = time.perf_counter()
    for i, (r, text, ideal_units) in enumerate(zip(trace.requests, texts, ideal, strict=True)):
        w = route(i, Request(text, r.key, r.arrival), zero)
        c = caches[w]
        d, h = serve_request(c, r.key, cfg.pool, len(r.key) - 1 if trace.kind == "tokens" else None)
        if r.output_key:
            _cache_answer(c, r.key, r.output_key[:-1], cfg.pool)
        dt = trace.hit_tokens(r, d)
        ht = trace.hit_tokens(r, d + h) - dt
        tally.add(r, dt, ht, trace.hit_tokens(r, ideal_units))
        cached = dt + ht
        ttft.append(
            profile.prefill_overhead_s
            + profile.prefill_time(r.tokens - cached, cached)
            + profile.load_back_time(ht)
        )
        tally.ttft(r, ttft[-1])
        worker_of.append(w)
        hits.append((dt, ht, 0))
    seconds = time.perf_counter() - t0
    unit = trace.unit
    evicted = tuple(
        sum(x)
        for x in zip(
            *(
                (c.stats.evicted_tokens * unit, c.stats.load_back_tokens * unit, c.stats.load_back_calls)
                for c in caches
            ),
            strict=True,
        )
    )
    agg = tally.result(cfg, trace, evicted, seconds, ttft)
    return FleetResult(
        cfg, n, rcfg, False, agg, _figures(trace, n, worker_of, hits, ttft), worker_of, route.branches, ttft
    )


class _Member:
    """One worker: an engine, its tokenizer manager and its clock, stepped as `simulate` steps one."""

    def __init__(self, config: EngineConfig) -> None:
        from harness.sim.engine import Engine
        from harness.sim.ingest import Ingest

        self.engine: Engine = Engine(config)
        self.ingest = Ingest(float(config.ingest_latency_s or 0.0))
        self.poll_s = float(config.idle_poll_s or 0.0)
        self.idle_since = 0.0
        self.t = 0.0
        self.arrivals: list[tuple[float, int, int, SimRequest]] = []
        self.done: list[SimRequest] = []
        self.seen = 0
        self.engine.on_finish = self.done.append

    def busy(self) -> bool:
        return bool(self.arrivals or self.ingest or self.engine.busy())

    def step(self, outside: float) -> bool:
        """One pass of simulate's loop; `outside`: the next arrival not routed yet (it may come here).
        False after a decode fast-forward (simulate hands finished requests on at the next pass)."""
        from harness.sim.ingest import idle_poll

        e, t, inf = self.engine, self.t, float("inf")
        while self.arrivals and self.arrivals[0][0] <= t:
            r = heapq.heappop(self.arrivals)[3]
            self.ingest.send(r, r.arrival)
        for r in self.ingest.receive(t):
            e.add(r)
        reach = self.ingest.next_at()
        horizon = min(inf if reach is None else reach, self.arrivals[0][0] if self.arrivals else inf, outside)
        if e.running and not e.waiting:
            t2 = e.fast_forward(t, horizon)
            if t2 != t:
                self.t = t2
                return False
        batch = e.schedule(t)
        if batch is not None:
            t += batch.duration
            e.complete(batch, t)
            self.idle_since = t
        elif horizon < inf:
            t = (
                max(t, idle_poll(reach, self.idle_since, self.poll_s))
                if reach is not None and reach == horizon
                else max(t, horizon)
            )
        self.t = t
        return True


def _engine(
    trace: Trace,
    cfg: Config,
    n: int,
    route: _Route,
    rcfg: RouterConfig,
    card: str | CardProfile | None,
    shared_l3: bool,
    ideal: list[int],
    econf: EngineConfig | None,
) -> FleetResult:
    """The closed loop over N schedulers in one virtual time, each arrival routed on the loads then."""
    econf = econf or engine_config(cfg, card)
    texts = request_texts(trace)
    with ExitStack() as stack:
        dirs: list[str | None] = [econf.storage_dir] * n
        if econf.storage_backend and econf.storage_dir is None:
            one = stack.enter_context(tempfile.TemporaryDirectory(prefix="whatif-l3-")) if shared_l3 else None
            dirs = [
                one or stack.enter_context(tempfile.TemporaryDirectory(prefix="whatif-l3-")) for _ in range(n)
            ]
        members = [_Member(dataclasses.replace(econf, storage_dir=d)) for d in dirs]
        first, on_finish = closed_loop(trace)
        t0 = time.perf_counter()
        worker_of, makespan = _drive(members, first, on_finish, route, trace, texts)
        seconds = time.perf_counter() - t0
    done = {int(d.rid): d for m in members for d in m.done}
    tally = _Tally()
    ttft: list[float] = []
    all_ttft: list[float] = []
    hits: list[tuple[int, int, int]] = []
    for i, (r, ideal_units) in enumerate(zip(trace.requests, ideal, strict=True)):
        d = done.get(i)
        dk, hk, lk = (d.cached_device, d.cached_host, d.cached_storage) if d is not None else (0, 0, 0)
        dt, ht, lt = tier_tokens(trace, r, dk, hk, lk)
        tally.add(r, dt, ht, trace.hit_tokens(r, ideal_units), lt)
        hits.append((dt, ht, lt))
        if d is not None and d.first_token_time is not None:
            ttft.append(d.first_token_time - d.arrival)
            tally.ttft(r, ttft[-1])
            all_ttft.append(ttft[-1])
        else:
            all_ttft.append(float("nan"))
    unit = trace.unit
    stats = [m.engine.tree.stats for m in members]
    evicted = (
        sum(s.evicted_tokens for s in stats) * unit,
        sum(s.load_back_tokens for s in stats) * unit,
        sum(s.load_back_calls for s in stats),
    )
    agg = tally.result(
        cfg, trace, evicted, seconds, ttft, replay="engine", concurrency=int(trace.concurrency or 1)
    )
    agg.tier_seconds = tier_seconds(agg, econf)
    figs = _figures(trace, n, [worker_of.get(i, 0) for i in range(len(trace.requests))], hits, all_ttft)
    wo = [worker_of.get(i, 0) for i in range(len(trace.requests))]
    return FleetResult(cfg, n, rcfg, shared_l3, agg, figs, wo, route.branches, all_ttft, makespan)


def _drive(
    members: list[_Member],
    first: list[SimRequest],
    on_finish: Callable[[SimRequest, float], list[SimRequest]],
    route: _Route,
    trace: Trace,
    texts: list[str],
) -> tuple[dict[int, int], float]:
    """Step the busiest-behind worker, or route the next arrival once no busy worker is behind it."""
    seq = itertools.count()
    arrivals = [(r.arrival, r.order, next(seq), r) for r in first]
    heapq.heapify(arrivals)
    inflight: list[list[SimRequest]] = [[] for _ in members]
    worker_of: dict[int, int] = {}
    inf = float("inf")
    end = 0.0
    while True:
        busy = [m for m in members if m.busy()]
        if not arrivals and not busy:
            break
        m = min(busy, key=lambda x: x.t) if busy else None
        a = arrivals[0][0] if arrivals else inf
        if arrivals and (m is None or a <= m.t):
            item = heapq.heappop(arrivals)
            req = item[3]
            for q in inflight:
                q[:] = [x for x in q if x.finish_time is None or x.finish_time > a]
            i = int(req.rid)
            w = route(i, Request(texts[i], trace.requests[i].key, a), [len(q) for q in inflight])
            worker_of[i] = w
            inflight[w].append(req)
            heapq.heappush(members[w].arrivals, item)
            continue
        assert m is not None
        if not m.step(a):
            continue
        while m.seen < len(m.done):
            fin = m.done[m.seen]
            m.seen += 1
            end = max(end, fin.finish_time or 0.0)
            for nxt in on_finish(fin, m.t):
                nxt.arrival = max(nxt.arrival, m.t)
                heapq.heappush(arrivals, (nxt.arrival, nxt.order, next(seq), nxt))
    return worker_of, end
