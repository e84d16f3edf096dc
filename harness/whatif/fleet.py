"""The routing replay: N of today's exact caches behind a modelled smg (harness.whatif.routing).

Two paths, as harness.whatif.replay chooses them, both harness.whatif.serve's (one replica is the
one-instance replay, the same code):
- traces without a concurrency (Mooncake, bailian) and no L3: one request at a time in arrival order, each
  routed and served by `serve_request` on its worker's tree; nothing overlaps, so every load is 0.
- specs, captures and any L3: N copies of the sim's scheduler in one virtual time. The load generator's
  closed loop sends; each arrival is routed when every busy worker has reached its time, on the requests
  then in flight per worker (routed and not finished), and queued on that worker as `simulate` queues it.
  Each worker is `harness.sim.simulate.Worker`, the stepper `simulate` runs, so `--replicas 1` equals
  today's replay on every figure.

A shared L3 is one storage directory for every worker (the sim's file store shares pages through it,
as HiCacheFile does); otherwise each worker has its own empty one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.sim.timing import CardProfile
from harness.whatif import serve
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace
from harness.whatif.replay import ideal_hits
from harness.whatif.result import Result, percentiles
from harness.whatif.routing import Request, Router, RouterConfig, make_router, routing_text

if TYPE_CHECKING:
    from harness.sim.engine import EngineConfig


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
    stopped: bool = False  # the engine gave up early (serve.engine's give_up)
    tpot_s: list[float] = field(repr=False, default_factory=list)  # per request, engine replays
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
    give_up: tuple[float, int] | None = None,
) -> FleetResult:
    """One configuration on `replicas` workers behind `rcfg`'s policy; paths as harness.whatif.replay.

    follow: a worker per request (the trace's order), e.g. where a live gateway sent each: the replay
    routes there instead of drawing, and lists the requests the model could not have sent there."""
    ideal = ideal if ideal is not None else ideal_hits(trace, cfg.page_size)
    route = _Route(make_router(replicas, rcfg), follow)
    texts = request_texts(trace)

    def pick(i: int, at: float, loads: list[int]) -> int:
        return route(i, Request(texts[i], trace.requests[i].key, at), loads)

    if trace.concurrency is not None or cfg.storage or econf is not None:
        got = serve.engine(trace, cfg, ideal, card, econf, replicas, pick, shared_l3, give_up)
    else:
        got = serve.sequential(trace, cfg, ideal, card, replicas, pick)
        shared_l3 = False
    figs = _figures(trace, replicas, got.worker_of, got.hits, got.ttft_s)
    return FleetResult(
        cfg,
        replicas,
        rcfg,
        shared_l3,
        got.result,
        figs,
        got.worker_of,
        route.branches,
        got.ttft_s,
        got.makespan_s,
        got.stopped,
        got.tpot_s,
        sorted(route.off_model),
    )


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
        f.ttft_ms = percentiles(ts)
    return figs
