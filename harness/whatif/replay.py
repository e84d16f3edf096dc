"""Offline what-if replay: a trace through SGLang's cache semantics for each policy x pool x host tier.

Two paths, chosen by the input:
- Mooncake traces (no concurrency, no conversations): requests run one at a time in arrival order
  through `harness.sim.radix.serve_request` (match, load back a host hit, evict max(shortfall, page)
  with the prefix locked, insert): the cache decisions of a server whose requests do not overlap; TTFT
  is the card profile's service time (prefill of the uncached part + load-back), without queueing. Fast:
  well under a second per configuration on the 12k-request trace.
- experiment specs and captures (a concurrency, multi-turn sessions): the requests go through the sim's
  own scheduler (`harness.sim.simulate.simulate`, virtual time) as the load generator sends them: at most
  `concurrency` in flight, a session's next turn ready when its previous one finishes, the lowest ready
  schedule index first. Batching, chunked prefill, admission and the running requests' locks are the
  live sim's; TTFT includes queueing. With concurrency 1 the result equals a live `harness serve-sim`
  run of the same spec request for request (tests/whatif/test_whatif.py).
"""

from __future__ import annotations

import dataclasses
import heapq
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from harness.sim.radix import RadixCache, serve_request
from harness.sim.timing import DEFAULT_PROFILE, CardProfile, get_profile
from harness.whatif.grid import Config, new_cache
from harness.whatif.inputs import Trace, TraceRequest

if TYPE_CHECKING:  # the engine is imported when a replay needs it (see replay_engine)
    from harness.sim.engine import Engine, EngineConfig


@dataclass
class Result:
    config: Config
    requests: int
    prompt_tokens: int
    hit_tokens: int
    device_hit_tokens: int
    host_hit_tokens: int
    ideal_hit_tokens: int
    evicted_tokens: int
    load_back_tokens: int
    load_backs: int
    seconds: float
    per_turn: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # turn -> (hit, ideal, prompt)
    ttft_ms: dict[str, float] = field(default_factory=dict)
    # session position (times the session's / group's prefix was sent before) -> (hit, ideal, prompt)
    per_position: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    replay: str = "sequential"  # sequential | engine (the sim's scheduler at the input's concurrency)
    concurrency: int = 1
    cached_per_request: list[int] = field(default_factory=list, repr=False)  # in the trace's order
    storage_hit_tokens: int = 0  # L3 hits (engine replays with a storage backend)
    host_written_tokens: int = 0  # tokens copied device -> host (under write_back: at eviction)
    # seconds the hits' copies cost on the card, summed over requests (harness.sim.tier_time; not overlapped)
    tier_seconds: dict[str, float] = field(default_factory=dict)
    # per priority class (a spec's or capture's `priorities:`): (hit, ideal, prompt) and TTFT percentiles
    per_class: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    ttft_ms_by_class: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def ideal_rate(self) -> float:
        return self.ideal_hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["config"]["policy_config"] = dict(self.config.policy_config)
        d["hit_rate"] = round(self.hit_rate, 6)
        d["ideal_hit_rate"] = round(self.ideal_rate, 6)
        d["per_turn"] = _rates(self.per_turn)
        d["per_position"] = _rates(self.per_position)
        d["per_class"] = _rates(self.per_class)
        del d["cached_per_request"]
        return d


def _rates(table: Mapping[Any, tuple[int, int, int]]) -> dict[str, dict[str, float | int]]:
    """(hit, ideal, prompt) tokens per turn or position → rates, for JSON."""
    return {
        str(k): {
            "hit_rate": h / p if p else 0.0,
            "ideal_hit_rate": i / p if p else 0.0,
            "prompt_tokens": p,
        }
        for k, (h, i, p) in sorted(table.items())
    }


def ideal_hits(trace: Trace, page_size: int = 1) -> list[int]:
    """Per request, the longest prefix (key units) any earlier request cached: an unbounded cache's hit.

    Earlier requests leave their prompt and answer (but its last token) in the cache; token traces match
    at most all but the last prompt token, as the scheduler does."""
    root: dict = {}
    out = []
    tokens = trace.kind == "tokens"  # the scheduler never reuses the last prompt token; see replay()
    for r in trace.requests:
        cut = len(r.key) - 1 if tokens else len(r.key)
        key = r.key[: max(cut, 0) // page_size * page_size]
        node, m = root, 0
        for i in range(0, len(key), page_size):
            k = key[i] if page_size == 1 else key[i : i + page_size]
            nxt = node.get(k)
            if nxt is None:
                break
            node, m = nxt, m + page_size
        out.append(m)
        full = r.key + r.output_key[:-1]
        full = full[: len(full) // page_size * page_size]
        for i in range(m, len(full), page_size):
            k = full[i] if page_size == 1 else full[i : i + page_size]
            node = node.setdefault(k, {})
    return out


class _Tally:
    """Hit (device, host), ideal and prompt tokens over the trace, per turn and per session position."""

    def __init__(self) -> None:
        self.device = self.host = self.storage = self.ideal = self.prompt = 0
        self.cached: list[int] = []  # per request, in the trace's order
        self.turn: dict[int, list[int]] = {}
        self.position: dict[int, list[int]] = {}
        self.cls: dict[str, list[int]] = {}
        self.cls_ttft: dict[str, list[float]] = {}

    def add(self, r: TraceRequest, device: int, host: int, ideal: int, storage: int = 0) -> None:
        hit = device + host + storage
        self.device += device
        self.host += host
        self.storage += storage
        self.ideal += ideal
        self.prompt += r.tokens
        self.cached.append(hit)
        for table, k in ((self.turn, r.turn), (self.position, r.position)):
            if k is not None:
                acc = table.setdefault(k, [0, 0, 0])
                acc[0] += hit
                acc[1] += ideal
                acc[2] += r.tokens
        if r.priority_class is not None:
            acc = self.cls.setdefault(r.priority_class, [0, 0, 0])
            acc[0] += hit
            acc[1] += ideal
            acc[2] += r.tokens

    def ttft(self, r: TraceRequest, seconds: float) -> None:
        """One request's modelled TTFT, kept per class."""
        if r.priority_class is not None:
            self.cls_ttft.setdefault(r.priority_class, []).append(seconds)

    def result(
        self,
        cfg: Config,
        trace: Trace,
        evicted: tuple[int, int, int],
        seconds: float,
        ttft: list[float],
        **kw,
    ) -> Result:
        """The Result; `evicted` is (evicted tokens, load-back tokens, load-back calls) of the tree."""

        def frozen(table: dict[Any, list[int]]) -> dict[Any, tuple[int, int, int]]:
            return {k: (a, b, c) for k, (a, b, c) in table.items()}

        return Result(
            config=cfg,
            requests=len(trace.requests),
            prompt_tokens=self.prompt,
            hit_tokens=self.device + self.host + self.storage,
            device_hit_tokens=self.device,
            host_hit_tokens=self.host,
            storage_hit_tokens=self.storage,
            ideal_hit_tokens=self.ideal,
            evicted_tokens=evicted[0],
            load_back_tokens=evicted[1],
            load_backs=evicted[2],
            seconds=seconds,
            per_turn=frozen(self.turn),
            ttft_ms=_percentiles(ttft),
            per_position=frozen(self.position),
            cached_per_request=self.cached,
            per_class=frozen(self.cls),
            ttft_ms_by_class={k: _percentiles(v) for k, v in sorted(self.cls_ttft.items())},
            **kw,
        )


def _percentiles(ttft: list[float]) -> dict[str, float]:
    import numpy as np

    q = np.percentile(np.asarray(ttft), [50, 90, 99]) * 1000 if ttft else [0.0, 0.0, 0.0]
    return {"p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2])}


def replay(
    trace: Trace, cfg: Config, ideal: list[int] | None = None, card: str | CardProfile | None = None
) -> Result:
    """One configuration over the whole trace, in virtual time: through the scheduler when the input has
    a concurrency (specs, captures), else one request at a time."""
    if trace.concurrency is not None or cfg.storage:  # L3 lives in the engine
        return replay_engine(trace, cfg, ideal, card)
    return replay_sequential(trace, cfg, ideal, card)


def tier_tokens(trace: Trace, r: TraceRequest, dk: int, hk: int, lk: int) -> tuple[int, int, int]:
    """The engine counts key elements (blocks on a block trace): each tier's hit in tokens, device, host,
    storage, the last block at its real length, as replay_sequential counts."""
    dt = trace.hit_tokens(r, dk)
    ht = trace.hit_tokens(r, dk + hk) - dt
    return dt, ht, trace.hit_tokens(r, dk + hk + lk) - dt - ht


def replay_sequential(
    trace: Trace, cfg: Config, ideal: list[int] | None = None, card: str | CardProfile | None = None
) -> Result:
    """Requests one at a time in trace order (a counter clock), through serve_request."""
    cache = new_cache(cfg)
    ideal = ideal if ideal is not None else ideal_hits(trace, cfg.page_size)
    # a whole profile: advise's card x model
    profile = card if isinstance(card, CardProfile) else get_profile(card or DEFAULT_PROFILE)
    prefill, overhead, load_time = profile.prefill_time, profile.prefill_overhead_s, profile.load_back_time
    tally = _Tally()
    ttft: list[float] = []
    unit = trace.unit
    # token traces: the scheduler matches all but the last prompt token; block traces match whole keys
    limit = (lambda r: len(r.key) - 1) if trace.kind == "tokens" else (lambda r: None)
    t0 = time.perf_counter()
    for r, ideal_units in zip(trace.requests, ideal, strict=True):
        d, h = serve_request(cache, r.key, cfg.pool, limit(r))
        if r.output_key:
            # the last generated token has no KV yet when the request finishes
            _cache_answer(cache, r.key, r.output_key[:-1], cfg.pool)
        dt = trace.hit_tokens(r, d)
        ht = trace.hit_tokens(r, d + h) - dt
        tally.add(r, dt, ht, trace.hit_tokens(r, ideal_units))
        cached = dt + ht
        ttft.append(overhead + prefill(r.tokens - cached, cached) + load_time(ht))
        tally.ttft(r, ttft[-1])
    seconds = time.perf_counter() - t0
    st = cache.stats
    evicted = (st.evicted_tokens * unit, st.load_back_tokens * unit, st.load_back_calls)
    return tally.result(cfg, trace, evicted, seconds, ttft, host_written_tokens=st.host_written_tokens * unit)


def engine_config(cfg: Config, card: str | CardProfile | None = None) -> EngineConfig:
    """The serve-sim engine a live run of this configuration would use (the card's other defaults)."""
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
        return SimRequest(
            rid=str(i),
            input_ids=list(r.key),
            output_ids=list(r.output_key),
            arrival=arrival,
            order=r.index,
            priority=r.priority,
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


def replay_engine(
    trace: Trace,
    cfg: Config,
    ideal: list[int] | None = None,
    card: str | CardProfile | None = None,
    econf: EngineConfig | None = None,
) -> Result:
    """The trace through the sim's scheduler in virtual time, at the input's concurrency (closed loop).

    econf: a whole EngineConfig (a live server's own, e.g. rebuilt from its server_info) instead of
    cfg's cache settings on `card`'s defaults."""
    from harness.sim.simulate import simulate

    ideal = ideal if ideal is not None else ideal_hits(trace, cfg.page_size)
    econf = econf or engine_config(cfg, card)
    scratch = None
    if econf.storage_backend and econf.storage_dir is None:  # an empty L3 of its own for this replay
        scratch = tempfile.TemporaryDirectory(prefix="whatif-l3-")
        econf = dataclasses.replace(econf, storage_dir=scratch.name)
    first, on_finish = closed_loop(trace)
    seen: dict[str, Engine] = {}

    def on_step(e: Engine) -> None:
        seen.setdefault("engine", e)

    t0 = time.perf_counter()
    try:
        done = simulate(first, econf, on_finish=on_finish, on_step=on_step)
    finally:
        if scratch is not None:
            scratch.cleanup()
    seconds = time.perf_counter() - t0
    by_index = {int(d.rid): d for d in done}
    tally = _Tally()
    ttft: list[float] = []
    for i, (r, ideal_units) in enumerate(zip(trace.requests, ideal, strict=True)):
        d = by_index.get(i)
        dk, hk, lk = (d.cached_device, d.cached_host, d.cached_storage) if d is not None else (0, 0, 0)
        dt, ht, lt = tier_tokens(trace, r, dk, hk, lk)
        tally.add(r, dt, ht, trace.hit_tokens(r, ideal_units), lt)
        if d is not None and d.first_token_time is not None:
            ttft.append(d.first_token_time - d.arrival)
            tally.ttft(r, d.first_token_time - d.arrival)
    engine = seen.get("engine")
    st = engine.tree.stats if engine is not None else None  # None: nothing was replayed
    unit = trace.unit
    evicted = (st.evicted_tokens * unit, st.load_back_tokens * unit, st.load_back_calls) if st else (0, 0, 0)
    concurrency = int(trace.concurrency or 1)
    written = st.host_written_tokens * unit if st else 0
    res = tally.result(
        cfg,
        trace,
        evicted,
        seconds,
        ttft,
        replay="engine",
        concurrency=concurrency,
        host_written_tokens=written,
    )
    res.tier_seconds = tier_seconds(res, econf)
    return res


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


def _cache_answer(cache: RadixCache, key: tuple, answer: tuple, pool: int) -> None:
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


_WORK: tuple[Trace, list[int], str | CardProfile | None] | None = None


def _run_one(cfg: Config) -> Result:
    assert _WORK is not None, "sweep() sets the work before the pool forks"
    trace, ideal, card = _WORK
    return replay(trace, cfg, ideal if cfg.page_size == 1 else None, card)


def sweep(
    trace: Trace, configs: list[Config], card: str | CardProfile | None = None, workers: int | None = None
) -> list[Result]:
    """Every configuration, across a process pool (fork: the trace is shared, not pickled per task)."""
    global _WORK
    ideal = ideal_hits(trace, 1)
    _WORK = (trace, ideal, card)
    workers = min(workers or os.cpu_count() or 1, len(configs))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [_run_one(c) for c in configs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as ex:
        return list(ex.map(_run_one, configs))


def diagnose(trace: Trace, ideal: list[int], threshold: float = 0.2) -> list[str]:
    """Why the ceiling is low: later turns that stop matching their own session's previous request."""
    notes: list[str] = []
    total = sum(r.tokens for r in trace.requests)
    ceiling = sum(trace.hit_tokens(r, i) for r, i in zip(trace.requests, ideal, strict=True)) / max(total, 1)
    last: dict[int, tuple[int, int]] = {}
    at_answer, inside = [], []
    for r, i in zip(trace.requests, ideal, strict=True):
        if r.session is None:
            continue
        prev = last.get(r.session)
        if prev is not None:
            plen, alen = prev
            if i < plen:
                inside.append((r.session, r.turn, i, plen))
            elif alen and i < min(plen + alen, len(r.key)):
                at_answer.append((r.session, r.turn, i, plen))
        last[r.session] = (len(r.key), max(len(r.output_key) - 1, 0))  # the last answer token is never cached
    if at_answer:
        s, t, i, plen = at_answer[0]
        notes.append(
            f"{len(at_answer)} later turns stop matching where the previous answer starts (e.g. session {s} "
            f"turn {t} matches {i} units, the previous prompt had {plen}): the history does not carry the "
            "answer as generated, e.g. a chat template that drops the previous answer's reasoning"
        )
    if inside:
        s, t, i, plen = inside[0]
        notes.append(
            f"{len(inside)} later turns stop matching inside the previous prompt (e.g. session {s} turn {t} "
            f"matches {i} of {plen} units): the history was rewritten or truncated"
        )
    if ceiling < threshold and not (at_answer or inside):
        notes.append(f"ideal hit rate is {ceiling:.1%}: little prefix sharing in this input")
    return notes
