"""The replay paths that the one-instance replay (harness.whatif.replay) and the routing replay
(harness.whatif.fleet) share: N caches one request at a time, or N schedulers in one virtual time.
One replica is the one-instance replay; nothing here is copied in either caller.

- `sequential`: one request at a time in trace order through `harness.sim.radix.serve_request` on the
  routed worker's tree; TTFT is the card profile's service time (no queueing).
- `engine`: the load generator's closed loop (`closed_loop`) over N copies of the sim's scheduler
  (`harness.sim.simulate.Worker`); each arrival is routed once every busy worker has reached its time, on
  the requests then in flight per worker. A block trace's key element stands for `trace.unit` tokens in
  the engine's timing (`EngineConfig.key_tokens`); its answer decodes `output_tokens` steps, one per token,
  its KV in whole blocks that match nothing, and the tree caches its prompt alone, as `sequential` does.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.sim.memory_store import memory_shelf
from harness.sim.radix import RadixCache, serve_request
from harness.sim.timing import DEFAULT_PROFILE, CardProfile, get_profile
from harness.whatif.grid import Config, new_cache
from harness.whatif.inputs import Trace, TraceRequest
from harness.whatif.result import Result, Tally

if TYPE_CHECKING:
    from harness.sim.engine import EngineConfig, SimRequest
    from harness.sim.simulate import Worker

# (request index, arrival time, requests in flight per worker) -> the worker it goes to
Route = Callable[[int, float, list[int]], int]


@dataclass
class Served:
    """One replay over N workers: the aggregate and what each request got and where it went."""

    result: Result
    worker_of: list[int]  # per request, in the trace's order
    hits: list[tuple[int, int, int]]  # per request: device, host, storage hit tokens
    ttft_s: list[float] = field(repr=False, default_factory=list)  # per request (nan: none)
    makespan_s: float = 0.0  # virtual seconds from the first send to the last answer (engine)
    stopped: bool = False  # the engine gave up early (`give_up`): the requests not done have no TTFT
    tpot_s: list[float] = field(repr=False, default_factory=list)  # per request, engine (nan: < 2 tokens)


def _profile(card: str | CardProfile | None) -> CardProfile:
    return card if isinstance(card, CardProfile) else get_profile(card or DEFAULT_PROFILE)


def sequential(
    trace: Trace,
    cfg: Config,
    ideal: list[int],
    card: str | CardProfile | None = None,
    n: int = 1,
    route: Route | None = None,
) -> Served:
    """Requests one at a time in trace order (nothing overlaps: every load 0), each on its worker's tree."""
    caches = [new_cache(cfg, trace.unit if trace.kind == "blocks" else 1) for _ in range(n)]
    profile = _profile(card)
    prefill, overhead, load_time = profile.prefill_time, profile.prefill_overhead_s, profile.load_back_time
    zero = [0] * n
    tally = Tally()
    ttft: list[float] = []
    worker_of: list[int] = []
    hits: list[tuple[int, int, int]] = []
    # token traces: the scheduler matches all but the last prompt token; block traces match whole keys
    tokens = trace.kind == "tokens"
    t0 = time.perf_counter()
    for i, (r, ideal_units) in enumerate(zip(trace.requests, ideal, strict=True)):
        w = route(i, r.arrival, zero) if route is not None else 0
        c = caches[w]
        d, h = serve_request(c, r.key, cfg.pool, len(r.key) - 1 if tokens else None)
        if r.output_key:
            # the last generated token has no KV yet when the request finishes
            cache_answer(c, r.key, r.output_key[:-1], cfg.pool)
        dt = trace.hit_tokens(r, d)
        ht = trace.hit_tokens(r, d + h) - dt
        tally.add(r, dt, ht, trace.hit_tokens(r, ideal_units))
        cached = dt + ht
        ttft.append(overhead + prefill(r.tokens - cached, cached) + load_time(ht))
        tally.ttft(r, ttft[-1])
        worker_of.append(w)
        hits.append((dt, ht, 0))
    seconds = time.perf_counter() - t0
    unit = trace.unit
    st = [c.stats for c in caches]
    evicted = (
        sum(s.evicted_tokens for s in st) * unit,
        sum(s.load_back_tokens for s in st) * unit,
        sum(s.load_back_calls for s in st),
    )
    written = sum(s.host_written_tokens for s in st) * unit
    res = tally.result(cfg, trace, evicted, seconds, ttft, host_written_tokens=written)
    return Served(res, worker_of, hits, ttft)


def engine(
    trace: Trace,
    cfg: Config,
    ideal: list[int],
    card: str | CardProfile | None = None,
    econf: EngineConfig | None = None,
    n: int = 1,
    route: Route | None = None,
    shared_l3: bool = False,
    give_up: tuple[float, int] | None = None,
) -> Served:
    """The closed loop over N schedulers in one virtual time, each arrival routed on the loads then.

    give_up: (TTFT s, n): stop once more than n finished requests took longer than that to their first
    token (an SLO search needs no more of a replay its SLO already failed; advise.sizing).

    econf: a whole EngineConfig (a live server's own, e.g. rebuilt from its server_info) instead of
    cfg's cache settings on `card`'s defaults. An L3 without a directory gets an empty in-memory store of its
    own per worker, or one for all with `shared_l3` (harness.sim.memory_store: the file store's rules)."""
    from harness.sim.simulate import Worker

    econf = econf or engine_config(cfg, card, trace)
    with ExitStack() as stack:
        dirs: list[str | None] = [econf.storage_dir] * n
        if econf.storage_backend and econf.storage_dir is None:  # pages kept in memory (MemoryStore)
            one = stack.enter_context(memory_shelf()) if shared_l3 else None
            dirs = [one or stack.enter_context(memory_shelf()) for _ in range(n)]
        workers = [Worker(dataclasses.replace(econf, storage_dir=d)) for d in dirs]
        first, on_finish = closed_loop(trace)
        t0 = time.perf_counter()
        placed, makespan, stopped = _drive(workers, first, on_finish, route, give_up)
        seconds = time.perf_counter() - t0
    done = {int(d.rid): d for w in workers for d in w.done}
    tally = Tally()
    ttft: list[float] = []
    all_ttft: list[float] = []
    hits: list[tuple[int, int, int]] = []
    tpot: list[float] = []
    nan = float("nan")
    for i, (r, ideal_units) in enumerate(zip(trace.requests, ideal, strict=True)):
        d = done.get(i)
        tpot.append(_tpot(d) if d is not None else nan)
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
    stats = [w.engine.tree.stats for w in workers]
    evicted = (
        sum(s.evicted_tokens for s in stats) * unit,
        sum(s.load_back_tokens for s in stats) * unit,
        sum(s.load_back_calls for s in stats),
    )
    res = tally.result(
        cfg,
        trace,
        evicted,
        seconds,
        ttft,
        replay="engine",
        concurrency=int(trace.concurrency or 1),
        host_written_tokens=sum(s.host_written_tokens for s in stats) * unit,
    )
    res.tier_seconds = tier_seconds(res, econf)
    l3 = workers[0].engine.l3 if n == 1 else None
    res.backend_free_pages = l3.backend_free() if l3 is not None else None
    worker_of = [placed.get(i, 0) for i in range(len(trace.requests))]
    return Served(res, worker_of, hits, all_ttft, makespan, stopped, tpot)


def _tpot(d: SimRequest) -> float:
    """A finished request's time per output token after the first (nan with fewer than two tokens)."""
    n = d.output_tokens if d.output_tokens is not None else len(d.output_ids)
    if n < 2 or d.first_token_time is None or d.finish_time is None:
        return float("nan")
    return (d.finish_time - d.first_token_time) / (n - 1)


def _drive(
    workers: list[Worker],
    first: list[SimRequest],
    on_finish: Callable[[SimRequest, float], list[SimRequest]],
    route: Route | None,
    give_up: tuple[float, int] | None = None,
) -> tuple[dict[int, int], float, bool]:
    """Step the worker furthest behind, or route the next arrival once no busy worker is behind it;
    with `give_up`, stop (True) once more finished requests missed its TTFT than it allows."""
    seq = itertools.count()
    arrivals = [(r.arrival, r.order, next(seq), r) for r in first]
    heapq.heapify(arrivals)
    inflight: list[list[SimRequest]] = [[] for _ in workers]
    placed: dict[int, int] = {}
    inf = float("inf")
    end = 0.0
    bound, most = give_up if give_up is not None else (inf, -1)
    missed = 0
    while True:
        busy = [w for w in workers if w.busy()]
        if not arrivals and not busy:
            break
        m = (busy[0] if len(busy) == 1 else min(busy, key=lambda x: x.t)) if busy else None
        a = arrivals[0][0] if arrivals else inf
        if arrivals and (m is None or a <= m.t):
            item = heapq.heappop(arrivals)
            req = item[3]
            i = int(req.rid)
            w = 0
            if route is not None:
                for q in inflight:
                    q[:] = [x for x in q if x.finish_time is None or x.finish_time > a]
                w = route(i, a, [len(q) for q in inflight])
                inflight[w].append(req)
            placed[i] = w
            heapq.heappush(workers[w].arrivals, item)
            continue
        assert m is not None
        if not m.step(a):
            continue
        for fin in m.finished():
            end = max(end, fin.finish_time or 0.0)
            if most >= 0 and (fin.first_token_time is None or fin.first_token_time - fin.arrival > bound):
                missed += 1
                if missed > most:
                    return placed, end, True
            for nxt in on_finish(fin, m.t):
                nxt.arrival = max(nxt.arrival, m.t)
                heapq.heappush(arrivals, (nxt.arrival, nxt.order, next(seq), nxt))
    return placed, end, False


def tier_tokens(trace: Trace, r: TraceRequest, dk: int, hk: int, lk: int) -> tuple[int, int, int]:
    """The engine counts key elements (blocks on a block trace): each tier's hit in tokens, device, host,
    storage, the last block at its real length, as replay_sequential counts."""
    dt = trace.hit_tokens(r, dk)
    ht = trace.hit_tokens(r, dk + hk) - dt
    return dt, ht, trace.hit_tokens(r, dk + hk + lk) - dt - ht


def engine_config(
    cfg: Config, card: str | CardProfile | None = None, trace: Trace | None = None
) -> EngineConfig:
    """The serve-sim engine a live run of this configuration would use (the card's other defaults); on
    a block trace each key element is timed as the `trace.unit` tokens it stands for."""
    from harness.sim.engine import EngineConfig

    return EngineConfig(
        pool_tokens=cfg.pool,
        page_size=cfg.page_size,
        policy=cfg.policy,
        policy_config=dict(cfg.policy_config),
        hicache=cfg.host_ratio > 0,
        hicache_ratio=cfg.host_ratio if cfg.host_ratio > 0 else 2.0,
        hicache_write_policy=cfg.write_policy,
        card=card or DEFAULT_PROFILE,
        radix_tree=cfg.tree,
        radix_mode=cfg.mode,
        storage_backend=cfg.storage or None,
        storage_prefetch_policy=cfg.storage_policy,
        key_tokens=trace.unit if trace is not None and trace.kind == "blocks" else 1,
    )


def closed_loop(trace: Trace) -> tuple[list, Callable]:
    """The load generator's sending as simulate() inputs: the first `concurrency` ready requests at t=0,
    then one more per finished request (its session's next turn becomes ready first), lowest schedule
    index first; with a request rate, the k-th conversation's first turn waits for the k-th Poisson
    offset as well, and a later turn goes as soon as the previous one finished (as harness.loadgen does)."""
    from harness.sim.engine import SimRequest
    from harness.workloads.arrivals import arrival_offsets

    convs: dict[int, list[int]] = {}
    for i, r in enumerate(trace.requests):
        convs.setdefault(r.conversation if r.conversation is not None else -1 - i, []).append(i)
    for turns in convs.values():
        turns.sort(key=lambda i: trace.requests[i].index)
    nxt = {cid: 0 for cid in convs}
    conv_of: dict[int, int] = {}
    # ties on the schedule index (a Mooncake trace has none) go in trace order
    ready = [(trace.requests[turns[0]].index, turns[0], cid) for cid, turns in convs.items()]
    heapq.heapify(ready)
    by_first = sorted(convs, key=lambda cid: trace.requests[convs[cid][0]].index)
    arrival_no = {cid: k for k, cid in enumerate(by_first)}
    offsets = arrival_offsets(len(by_first), trace.request_rate, trace.seed) if trace.request_rate else None
    unit = trace.unit if trace.kind == "blocks" else 1
    fresh = itertools.count(-1, -1)  # a block answer's key elements: ids no trace key holds (>= 0)

    answered: dict[int, float] = {}  # conversation -> when its latest answer finished (virtual time)

    def send(t: float) -> SimRequest:
        _, _, cid = heapq.heappop(ready)
        i = convs[cid][nxt[cid]]
        first_turn = nxt[cid] == 0
        nxt[cid] += 1
        conv_of[i] = cid
        r = trace.requests[i]
        arrival = max(t, offsets[arrival_no[cid]]) if offsets and first_turn else t
        arrival = max(arrival, r.arrival)  # a replayed trace's own send time (0 for the rest)
        if not first_turn and r.gap:  # a session trace: its recorded gap after the previous answer
            arrival = max(arrival, answered.get(cid, 0.0) + r.gap)
        out, n_out, u = list(r.output_key), None, 1
        if unit > 1 and not r.output_key:  # a block trace: output_tokens decode steps, KV in whole blocks
            out, n_out, u = [next(fresh) for _ in range(-(-r.output_tokens // unit))], r.output_tokens, unit
        return SimRequest(
            rid=str(i),
            input_ids=list(r.key),
            output_ids=out,
            arrival=arrival,
            order=r.index,
            priority=r.priority,
            output_tokens=n_out,
            out_unit=u,
        )

    first = [send(0.0) for _ in range(min(max(1, trace.concurrency or 1), len(ready)))]
    free = [0]

    def on_finish(done: SimRequest, t: float) -> list[SimRequest]:
        cid = conv_of[int(done.rid)]
        answered[cid] = t
        if nxt[cid] < len(convs[cid]):
            i = convs[cid][nxt[cid]]
            heapq.heappush(ready, (trace.requests[i].index, i, cid))
        free[0] += 1
        out = []
        while free[0] and ready:
            free[0] -= 1
            out.append(send(t))
        return out

    return first, on_finish


def tier_seconds(res: Result, econf: EngineConfig) -> dict[str, float]:
    """What the host and L3 hits cost to bring onto the device (0 for device hits)."""
    from harness.sim.tier_time import host_hit_s, storage_hit_s

    prof, kv = econf.profile, econf.kv_bytes_per_token
    out = {"device": 0.0, "host": host_hit_s(res.host_hit_tokens, prof, kv)}
    if econf.storage_backend:
        out["storage"] = storage_hit_s(
            res.storage_hit_tokens, prof, econf.storage_backend, econf.page_size, kv
        )
    return out


def cache_answer(cache: RadixCache, key: tuple, answer: tuple, pool: int) -> None:
    """On finish SGLang inserts prompt + output; the prompt's own nodes were counted at prefill."""
    full = key + answer
    page = cache.page_size
    extra = len(full) // page * page - len(key) // page * page
    free = pool - cache.device_size()
    if extra > free:
        m = cache.match_prefix(key)
        cache.inc_lock_ref(m.last_device_node)
        cache.evict(max(extra - free, page))
        cache.dec_lock_ref(m.last_device_node)
        free = pool - cache.device_size()
    keep = len(key) // page * page + max(0, min(extra, free)) // page * page
    cache.insert(full[:keep], inserted_len=len(key))
