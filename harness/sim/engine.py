"""The scheduler and timing model: SGLang's continuous batching over the radix cache and a card profile.

The engine never reads a clock itself. `schedule(now)` picks the next forward (a prefill batch or a
decode step) and says how long it takes on the card; `complete(batch, end)` applies its results.
Both clocks are virtual: the live server (live.py) adds the duration to its clock and paces it to
--time-scale in wall time; `simulate()` just adds it, so the same code replays traces offline far
faster than real time, with the same results as a live run driven in lockstep.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.sim.timing import DEFAULT_PROFILE, CardProfile, get_profile

CLIP_MAX_NEW_TOKENS = 4096  # SGLang clips the per-request output reservation at admission
MIN_LOAD_BACK = 10  # host hits shorter than this are recomputed, not loaded back
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.7 * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600


class SchedulerStuck(RuntimeError):
    """The scheduler cannot make progress although requests are pending: an accounting bug, never a wait.

    SGLang raises in the same spot ("Prefill out of memory"); the server logs it as SGLang's scheduler
    does and exits, so a bug shows up as a crashed server instead of a silent hang.
    """


class EngineLog(Protocol):
    """Where the engine reports batches (logfmt.SimLogger in the server; nothing offline)."""

    def prefill(self, **fields: Any) -> None: ...

    def decode(self, **fields: Any) -> None: ...


@dataclass
class EngineConfig:
    """Everything the scheduler needs; `from_args` maps serve-sim's SGLang flags onto it."""

    pool_tokens: int | None = None  # None: the card's default pool
    page_size: int = 1
    policy: str = "lru"
    policy_config: dict[str, Any] = field(default_factory=dict)
    disable_radix_cache: bool = False
    hicache: bool = False
    hicache_ratio: float | None = None  # None: SGLang's default 2.0, shrunk to fit the host memory
    hicache_size_gb: float = 0.0
    hicache_write_policy: str = "write_through"
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None  # None: the card's; <= 0 disables chunking
    max_prefill_tokens: int = 16384
    decode_log_interval: int = 40
    card: CardProfile | str = DEFAULT_PROFILE
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    radix_tree: str = "unified"  # --sim-radix-tree: "unified" (0.5.23's tree) or "radix" (plain RadixCache)
    radix_mode: str = "sglang"  # harness whatif --mode: "exact" evicts exactly the shortfall

    def __post_init__(self) -> None:
        if isinstance(self.card, str):
            self.card = get_profile(self.card)
        card = self.card
        if self.pool_tokens is None:
            self.pool_tokens = card.default_pool_tokens
        if self.max_running_requests is None:
            self.max_running_requests = card.max_running_requests
        if self.chunked_prefill_size is None:
            self.chunked_prefill_size = card.chunked_prefill_size
        if self.context_length is None:
            self.context_length = card.context_length

    @property
    def profile(self) -> CardProfile:
        assert isinstance(self.card, CardProfile)
        return self.card

    @property
    def kv_bytes_per_token(self) -> int:
        per = self.profile.kv_bytes_per_token
        return per // 2 if self.kv_cache_dtype.startswith("fp8") else per

    @property
    def host_pool_tokens(self) -> int:
        if not self.hicache:
            return 0
        from harness.errors import HarnessError
        from harness.sim.hicache import host_pool_tokens

        pool = int(self.pool_tokens or 0)
        try:
            return host_pool_tokens(
                pool,
                page_size=self.page_size,
                ratio=self.hicache_ratio,
                size_gb=self.hicache_size_gb,
                kv_bytes_per_token=self.kv_bytes_per_token,
                host_memory_bytes=self.profile.host_memory_bytes(pool),
            )[0]
        except ValueError as e:
            raise HarnessError(f"--enable-hierarchical-cache: {e}") from None

    @classmethod
    def from_args(cls, ns: Any) -> EngineConfig:
        return cls(
            pool_tokens=ns.max_total_tokens,
            page_size=ns.page_size,
            policy=ns.radix_eviction_policy,
            policy_config=dict(getattr(ns, "policy_config", {}) or {}),
            disable_radix_cache=ns.disable_radix_cache,
            hicache=ns.enable_hierarchical_cache,
            hicache_ratio=ns.hicache_ratio,
            hicache_size_gb=ns.hicache_size,
            hicache_write_policy=ns.hicache_write_policy,
            max_running_requests=ns.max_running_requests,
            chunked_prefill_size=ns.chunked_prefill_size,
            max_prefill_tokens=ns.max_prefill_tokens,
            decode_log_interval=ns.decode_log_interval,
            card=getattr(ns, "sim_profile", None) or ns.card_profile,
            kv_cache_dtype=ns.kv_cache_dtype,
            context_length=ns.context_length,
            radix_tree=getattr(ns, "sim_radix_tree", "unified"),
        )


@dataclass(eq=False)
class SimRequest:
    """One generation request: its tokens, the answer the sim will give, and what happened to it."""

    rid: str
    input_ids: list[int] = field(repr=False)
    output_ids: list[int] = field(repr=False)  # the whole answer the sim produces, decided up front
    finish_reason: str = "length"  # "length" (max_tokens reached) or "stop"
    arrival: float = 0.0
    priority: int = 0
    order: int = 0  # among arrivals at the same virtual time, the lower order is queued first
    on_event: Callable[[SimRequest], None] | None = field(default=None, repr=False)
    # results
    cached_device: int = 0
    cached_host: int = 0
    first_token_time: float | None = None
    finish_time: float | None = None
    generated: int = 0
    aborted: bool = False
    retractions: int = 0
    # scheduler state
    kv_len: int = 0  # tokens whose KV is on the device for this request
    tree_len: int = 0  # of those, the prefix held (locked) in the tree
    locked: Any = field(default=None, repr=False)  # the tree node this request holds a lock on
    counted: bool = False  # cached tokens are counted on first admission only
    inserted_len: int = 0  # tokens this request already inserted (hits are not counted twice)

    @property
    def fill_ids(self) -> list[int]:
        return self.input_ids + self.output_ids[: self.generated]

    @property
    def private(self) -> int:
        return self.kv_len - self.tree_len

    @property
    def finished(self) -> bool:
        return self.finish_time is not None

    @property
    def cached_tokens(self) -> int:
        return self.cached_device + self.cached_host

    def result(self) -> dict[str, Any]:
        return {
            "rid": self.rid,
            "arrival": self.arrival,
            "first_token": self.first_token_time,
            "finish": self.finish_time,
            "prompt_tokens": len(self.input_ids),
            "completion_tokens": self.generated,
            "cached_device": self.cached_device,
            "cached_host": self.cached_host,
            "retractions": self.retractions,
        }


@dataclass
class Batch:
    """One forward: a prefill over (request, new tokens) parts, or a decode step."""

    kind: str  # "prefill" | "decode"
    start: float
    duration: float
    parts: list[tuple[SimRequest, int]] = field(default_factory=list)  # prefill: (req, new tokens)
    reqs: list[SimRequest] = field(default_factory=list)  # decode
    new_tokens: int = 0
    cached_tokens: int = 0
    load_back_tokens: int = 0


@dataclass
class EngineStats:
    """Cumulative counters behind SGLang's Prometheus metrics."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    cached_device: int = 0
    cached_host: int = 0
    num_requests: int = 0
    num_retracted: int = 0
    last_cache_hit_rate: float = 0.0
    gen_throughput: float = 0.0


@dataclass
class _PrefillBudget:
    """What one prefill batch may still take: chunk tokens, input tokens, and the pool reservation offset."""

    chunk: int
    input: int
    offset: float

    def spend(self, tokens: int, reserve: int) -> None:
        self.chunk -= tokens
        self.input -= tokens
        self.offset += reserve


@dataclass
class _PrefillPlan:
    """The prefill batch being built: (request, new tokens, cached before) parts and what they hit."""

    running_bs: int
    parts: list[tuple[SimRequest, int, int]] = field(default_factory=list)
    cached_hits: int = 0
    load_back: int = 0


class _NoCache:
    """Stand-in for --disable-radix-cache: nothing is ever cached."""

    def device_size(self) -> int:
        return 0

    def protected_size(self) -> int:
        return 0

    def evictable_size(self) -> int:
        return 0

    def evict(self, num_tokens: int) -> int:
        return 0

    def reset(self) -> None:
        pass


class Engine:
    """SGLang's scheduler loop over a device pool of `pool_tokens` KV slots."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        clock: Callable[[], float] | None = None,
        log: EngineLog | None = None,
    ) -> None:
        self.config = config
        self.card = config.profile
        self.pool = int(config.pool_tokens or 0)
        self.page = max(1, config.page_size)
        self.log = log
        self.now = 0.0
        self._last_stamp = 0.0
        self._clock = clock or self._virtual_clock
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.chunked: SimRequest | None = None
        self.private_total = 0
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.stats = EngineStats()
        self.decode_steps = 0
        self._decode_tokens_since_log = 0
        self._last_decode_log = 0.0
        self._last_prefill_log = 0.0
        self._last_prefill_tokens = 0
        self.tree: Any = self._make_tree()
        self.on_finish: Callable[[SimRequest], None] | None = None

    # --- cache plumbing -------------------------------------------------------------------
    def _virtual_clock(self) -> float:
        """Strictly increasing stamps for the tree, so equal virtual times keep their order."""
        self._last_stamp = max(self.now, self._last_stamp + 1e-9)
        return self._last_stamp

    def _make_tree(self) -> Any:
        cfg = self.config
        if cfg.disable_radix_cache:
            return _NoCache()
        from harness.errors import HarnessError
        from harness.sim.hicache import HostTier
        from harness.sim.radix import RadixCache

        try:
            host = (
                HostTier(cfg.host_pool_tokens, write_policy=cfg.hicache_write_policy) if cfg.hicache else None
            )
            return RadixCache(
                page_size=self.page,
                policy=cfg.policy,
                policy_config=dict(cfg.policy_config) or None,
                clock=self._clock,
                host=host,
                flavor=cfg.radix_tree,
                mode=cfg.radix_mode,
            )
        except ValueError as e:
            if cfg.radix_tree == "radix" and cfg.policy == "tlru":
                raise HarnessError(f"--sim-radix-tree radix: {e}") from None
            raise HarnessError(f"--radix-eviction-policy-config: {e}") from None

    @property
    def caching(self) -> bool:
        return not self.config.disable_radix_cache

    def available(self) -> int:
        """Free device slots: neither in the tree nor held by a request."""
        return self.pool - self.private_total - self.tree.device_size()

    def used_tokens(self) -> int:
        """SGLang's #token: pool - available - evictable."""
        return self.pool - self.available() - self.tree.evictable_size()

    def token_usage(self) -> float:
        return self.used_tokens() / self.pool if self.pool else 0.0

    def host_used_tokens(self) -> int:
        host = getattr(self.tree, "host", None)
        if host is None:
            return 0
        for name in ("used_tokens", "used_size", "size"):
            v = getattr(host, name, None)
            if v is not None:
                return int(v() if callable(v) else v)
        return 0

    def busy(self) -> bool:
        return bool(self.waiting or self.running or self.chunked)

    def pending_counts(self) -> tuple[int, int]:
        """(#queue-req, #running-req) as the flush refusal reports them."""
        return len(self.waiting), len(self.running) + (1 if self.chunked else 0)

    def _ensure_free(self, tokens: int) -> bool:
        """Evict unlocked leaves until `tokens` slots are free; False if even that is not enough."""
        short = tokens - self.available()
        if short > 0 and self.caching:
            self.tree.evict(max(short, self.page))
        return self.available() >= tokens

    def _lock(self, req: SimRequest, node: Any, tree_len: int) -> None:
        if not self.caching:
            return
        if node is not None:
            self.tree.inc_lock_ref(node)
        if req.locked is not None:
            self.tree.dec_lock_ref(req.locked)
        req.locked, req.tree_len = node, tree_len

    def _unlock(self, req: SimRequest) -> None:
        if self.caching and req.locked is not None:
            self.tree.dec_lock_ref(req.locked)
        req.locked, req.tree_len = None, 0

    def _set_kv(self, req: SimRequest, kv_len: int) -> None:
        before = req.private
        req.kv_len = kv_len
        self.private_total += req.private - before

    def _cache_tokens(self, req: SimRequest, tokens: list[int], *, chunked: bool) -> None:
        """cache_(un)finished_req: insert the page-aligned computed tokens and hold the new prefix."""
        n = len(tokens) // self.page * self.page
        if n <= req.tree_len:
            return
        before = req.private
        self.tree.insert(tokens[:n], priority=req.priority, chunked=chunked, inserted_len=req.inserted_len)
        req.inserted_len = max(req.inserted_len, n)
        m = self.tree.match_prefix(tokens[:n])
        self._lock(req, m.last_device_node, m.device_len)
        self.private_total += req.private - before

    # --- requests ---------------------------------------------------------------------------
    def max_input_len(self) -> int:
        """Longest prompt the server takes (SGLang rejects longer ones before scheduling)."""
        return min(int(self.config.context_length or 0), self.pool) - 1

    def add(self, req: SimRequest) -> None:
        self.stats.num_requests += 1
        if len(req.input_ids) + len(req.output_ids) > self.max_input_len():
            req.finish_reason = "abort"
            req.finish_time = self.now
            if req.on_event is not None:
                req.on_event(req)
            if self.on_finish is not None:
                self.on_finish(req)
            return
        self.waiting.append(req)

    def abort(self, req: SimRequest) -> None:
        """A client went away: drop it from the queue now, or finish it at its next step."""
        req.aborted = True
        if req in self.waiting:
            self.waiting.remove(req)
            req.finish_time = self.now
            req.finish_reason = "abort"

    def flush(self) -> bool:
        if self.busy():
            return False
        self.tree.reset()
        self.private_total = 0
        return True

    # --- scheduling -------------------------------------------------------------------------
    def schedule(self, now: float) -> Batch | None:
        """Pick the next forward at time `now`; None when there is nothing to do."""
        self.now = now
        # aborted requests leave first, so they neither hold batch slots nor block admission
        # (iterate over a copy: _finish removes from self.running)
        for req in [r for r in self.running if r.aborted and not r.finished]:
            self._finish(req, now, reason="abort")
        while self.waiting and self.waiting[0].aborted:
            self._drop_waiting(self.waiting.popleft(), now)
        if self.config.hicache and self.caching:
            self.tree.ack_transfers()  # check_hicache_events: last step's host copies have landed
        batch = self._schedule_prefill(now)
        if batch is None and self.running:
            batch = self._schedule_decode(now)
            if batch is None:  # decode retracted every running request: their prefill goes next
                batch = self._schedule_prefill(now)
        if batch is None and self.busy():
            raise SchedulerStuck(self._stuck_message())
        return batch

    def _drop_waiting(self, req: SimRequest, now: float) -> None:
        if not req.finished:
            req.finish_reason, req.finish_time = "abort", now
            if self.on_finish is not None:
                self.on_finish(req)

    def _stuck_message(self) -> str:
        head = self.waiting[0] if self.waiting else None
        what = (
            f"head of queue rid={head.rid} needs {len(head.fill_ids) - head.kv_len} + "
            f"{len(head.output_ids) - head.generated} tokens"
            if head is not None
            else "no request is schedulable"
        )
        return (
            f"scheduler stuck: {what}; #queue-req: {len(self.waiting)}, #running-req: {len(self.running)}, "
            f"chunked: {self.chunked is not None}, pool: {self.pool}, available: {self.available()}, "
            f"evictable: {self.tree.evictable_size()}, protected: {self.tree.protected_size()}, "
            f"private: {self.private_total}"
        )

    def _room(self) -> int:
        """available + evictable (SGLang's rem_total_tokens before reservations)."""
        return self.pool - self.private_total - self.tree.protected_size()

    def _reserved(self) -> float:
        return sum(
            min(len(r.output_ids) - r.generated, CLIP_MAX_NEW_TOKENS) * self.new_token_ratio
            for r in self.running
        )

    def _chunk_budget(self) -> int:
        """Tokens one prefill may compute: --chunked-prefill-size in whole pages (unbounded when off)."""
        cap = self.config.chunked_prefill_size
        if not cap or cap <= 0:
            return 1 << 62
        return max(self.page, cap // self.page * self.page)

    def _schedule_prefill(self, now: float) -> Batch | None:
        """SGLang's get_new_batch_prefill: the chunked request's next chunk, then admit from the queue."""
        if not self.waiting and self.chunked is None:
            return None
        budget = _PrefillBudget(
            chunk=self._chunk_budget(),
            input=self.config.max_prefill_tokens,
            offset=self._reserved(),  # SGLang's rem_total_token_offset; room itself is read live
        )
        plan = _PrefillPlan(running_bs=len(self.running))
        self._continue_chunked(now, budget, plan)
        self._admit_waiting(budget, plan)
        if not plan.parts:
            return None
        return self._launch_prefill(now, plan)

    def _continue_chunked(self, now: float, budget: _PrefillBudget, plan: _PrefillPlan) -> None:
        """The chunked request goes first: its next chunk, or it leaves if it was aborted."""
        req = self.chunked
        if req is None:
            return
        if req.aborted:
            self.chunked = None
            self._finish(req, now, reason="abort")
            return
        left = len(req.fill_ids) - req.kv_len
        take = min(left, budget.chunk)
        if take < left:
            take = take // self.page * self.page
        if take > 0:
            plan.parts.append((req, take, req.kv_len))
            budget.spend(take, take)
        self.chunked = None if take == left else req

    def _admit_waiting(self, budget: _PrefillBudget, plan: _PrefillPlan) -> None:
        """Admit from the head of the queue while batch slots, the chunk and the pool allow."""
        limit = int(self.config.max_running_requests or 1)
        while self.waiting and self.chunked is None:
            if plan.running_bs + len(plan.parts) >= limit:
                break
            req = self.waiting[0]
            if req.aborted:
                self.waiting.popleft()
                continue
            if not self._admit_one(req, budget, plan):
                break
            if self.chunked is not None or budget.chunk <= 0 or budget.input <= 0:
                break

    def _admit_one(self, req: SimRequest, budget: _PrefillBudget, plan: _PrefillPlan) -> bool:
        """Match the head request's prefix, check it fits (prefix + new tokens + output reservation),
        load its host hit back and add it to the batch; False (and unlocked) when it does not fit."""
        fill = req.fill_ids
        dev_len, host_len, match = 0, 0, None
        if self.caching:
            match = self.tree.match_prefix(fill[: len(fill) - 1])
            dev_len = match.device_len
            host_len = match.host_len if self.config.hicache else 0
            self._lock(req, match.last_device_node, dev_len)
        load = host_len if host_len >= MIN_LOAD_BACK else 0
        extend = len(fill) - dev_len - load
        out_reserve = min(len(req.output_ids) - req.generated, CLIP_MAX_NEW_TOKENS)
        fits_total = extend + load + out_reserve < self._room() - budget.offset
        take = min(extend, budget.chunk)
        if take < extend:
            take = take // self.page * self.page
        if not fits_total or take <= 0 or (budget.input <= 0 and plan.parts):
            self._unlock(req)
            return False
        self.waiting.popleft()  # the request is admitted
        host_hit = 0
        if load:
            dev_len, host_hit = self._load_back(req, match, dev_len)
            plan.load_back += host_hit
            extend = len(fill) - dev_len
            take = min(extend, budget.chunk)
            if take < extend:
                take = max(self.page, take // self.page * self.page)
        req.kv_len = req.tree_len  # the prefix's KV lives in the tree
        self._count_hits(req, dev_len, host_hit)
        plan.cached_hits += dev_len
        plan.parts.append((req, take, req.kv_len))
        budget.spend(take, take + load + out_reserve)
        if take < extend:
            self.chunked = req
        return True

    def _load_back(self, req: SimRequest, match: Any, dev_len: int) -> tuple[int, int]:
        """Copy a host hit back to the device; (device prefix length after it, tokens loaded back)."""
        # load_back locks the host path, evicts for its shortfall and refuses without room
        loaded = self.tree.load_back(match, available=self.available)
        if not loaded:
            return dev_len, 0
        fill = req.fill_ids
        m2 = self.tree.match_prefix(fill[: len(fill) - 1])
        self._lock(req, m2.last_device_node, m2.device_len)
        return m2.device_len, loaded

    def _count_hits(self, req: SimRequest, dev_len: int, host_hit: int) -> None:
        """A request's cached tokens are counted on its first admission only (not after a retraction)."""
        if req.counted:
            return
        req.counted = True
        req.cached_host = host_hit
        req.cached_device = dev_len - host_hit
        self.stats.prompt_tokens += len(req.input_ids)
        self.stats.cached_device += req.cached_device
        self.stats.cached_host += req.cached_host

    def _launch_prefill(self, now: float, plan: _PrefillPlan) -> Batch:
        """Take the batch's slots (evicting as needed), time it on the card and log it."""
        parts = plan.parts
        need = sum(p[1] for p in parts)
        if not self._ensure_free(need):
            # admission counted room as available + evictable, so this is an accounting bug
            raise SchedulerStuck(f"prefill out of memory: {need} tokens admitted; " + self._stuck_message())
        for req, take, _ in parts:
            self._set_kv(req, req.kv_len + take)
        new_tokens = sum(-(-take // self.page) * self.page for _, take, _ in parts)
        duration = self.card.prefill_with_load_back(
            [(t, c) for _, t, c in parts], plan.load_back, self.config.kv_bytes_per_token
        )
        total = new_tokens + plan.cached_hits
        self.stats.last_cache_hit_rate = plan.cached_hits / total if total else 0.0
        if self.log is not None:
            self._log_prefill(now, len(parts), new_tokens, plan)
        return Batch(
            "prefill",
            now,
            duration,
            parts=[(r, t) for r, t, _ in parts],
            new_tokens=new_tokens,
            cached_tokens=plan.cached_hits,
            load_back_tokens=plan.load_back,
        )

    def _log_prefill(self, now: float, new_seq: int, new_tokens: int, plan: _PrefillPlan) -> None:
        assert self.log is not None
        gap = max(now - self._last_prefill_log, 1e-9)
        throughput = self._last_prefill_tokens / gap if self._last_prefill_log else 0.0
        self._last_prefill_log, self._last_prefill_tokens = now, new_tokens
        pending = sum(len(r.fill_ids) for r in self.waiting)
        if self.chunked is not None:
            pending += len(self.chunked.fill_ids) - self.chunked.kv_len
        self.log.prefill(
            new_seq=new_seq,
            new_token=new_tokens,
            cached_token=plan.cached_hits,
            token_usage=self.token_usage(),
            running_req=plan.running_bs,
            queue_req=len(self.waiting),
            pending_token=pending,
            input_throughput=throughput,
        )

    def _schedule_decode(self, now: float) -> Batch | None:
        # every running request needs one more slot; retract the least advanced ones if it cannot fit
        retracted, ratio_before = 0, self.new_token_ratio
        while self.running and not self._ensure_free(len(self.running)):
            self._retract_one()
            retracted += 1
        if retracted and self.log is not None and hasattr(self.log, "warning"):
            self.log.warning(
                f"KV cache pool is full. Retract requests. #retracted_reqs: {retracted}, "
                f"#new_token_ratio: {ratio_before:.4f} -> {self.new_token_ratio:.4f}"
            )
        if not self.running:
            return None
        ctx = 0
        for req in self.running:  # one more KV slot each (private to the request until it is cached)
            req.kv_len += 1
            ctx += req.kv_len
        self.private_total += len(self.running)
        duration = self.card.decode_time(len(self.running), ctx)
        self.decode_steps += 1
        if self.log is not None and self.decode_steps % self.config.decode_log_interval == 0:
            # SGLang logs the decode batch as it launches it, with the throughput since the last line
            gap = max(now - self._last_decode_log, 1e-9)
            self.stats.gen_throughput = self._decode_tokens_since_log / gap
            self._decode_tokens_since_log = 0
            self._last_decode_log = now
            self.log.decode(
                running_req=len(self.running),
                token=self.used_tokens(),
                token_usage=self.token_usage(),
                gen_throughput=self.stats.gen_throughput,
                queue_req=len(self.waiting),
            )
        return Batch("decode", now, duration, reqs=list(self.running))

    def _retract_one(self) -> None:
        """SGLang's retract_decode: give back the request with the fewest outputs (longest input)."""
        victim = min(self.running, key=lambda r: (r.generated, -len(r.input_ids)))
        self.running.remove(victim)
        self._set_kv(victim, victim.tree_len)
        self._unlock(victim)
        victim.kv_len = 0
        victim.inserted_len = 0
        victim.retractions += 1
        self.stats.num_retracted += 1
        self.new_token_ratio = min(1.0, self.new_token_ratio + 0.1)
        self.waiting.appendleft(victim)

    def fast_forward(self, t: float, horizon: float) -> float:
        """Run the decode steps that `schedule`/`complete` would run, at once, while nothing can change.

        Virtual time only: with an empty queue, no chunked prefill, no finish, no eviction, no log line
        and no arrival before `horizon`, consecutive decode steps differ only in their context length,
        so they are applied in one go (same floats, same order). Returns the new time (t if none ran).
        """
        run = self.running
        if self.waiting or self.chunked is not None or not run:
            return t
        bs = len(run)
        steps = min(len(r.output_ids) - r.generated for r in run) - 1  # the finishing step runs normally
        steps = min(steps, self.available() // bs)  # no step may need an eviction or a retraction
        if self.log is not None:
            interval = self.config.decode_log_interval
            steps = min(steps, interval - 1 - self.decode_steps % interval)  # stop before a log line
        if steps <= 0 or any(r.aborted or r.on_event is not None for r in run):
            return t
        ctx = sum(r.kv_len for r in run)
        ratio = self.new_token_ratio
        decode_time = self.card.decode_time
        n = 0
        while n < steps and t < horizon:
            ctx += bs
            t += decode_time(bs, ctx)
            ratio = max(MIN_NEW_TOKEN_RATIO, ratio - NEW_TOKEN_RATIO_DECAY)
            n += 1
        if n == 0:
            return t
        for r in run:
            r.kv_len += n
            r.generated += n
        self.private_total += n * bs
        self.stats.generation_tokens += n * bs
        self._decode_tokens_since_log += n * bs
        self.decode_steps += n
        self.new_token_ratio = ratio
        self.now = t
        return t

    # --- results ----------------------------------------------------------------------------
    def complete(self, batch: Batch, end: float) -> None:
        """Apply a forward's results at time `end`: first tokens, decoded tokens, finished requests."""
        self.now = end
        if batch.kind == "prefill":
            for req, _take in batch.parts:
                if req is self.chunked:
                    if self.caching:
                        self._cache_tokens(req, req.fill_ids[: req.kv_len], chunked=True)
                    continue
                if req.aborted:
                    self._finish(req, end, reason="abort")
                    continue
                if req.generated == 0 or req.first_token_time is None:
                    req.first_token_time = end if req.first_token_time is None else req.first_token_time
                self._emit_token(req, end)
                if not req.finished:
                    if self.caching:
                        self._cache_tokens(req, req.fill_ids[: req.kv_len], chunked=False)
                    self.running.append(req)
        else:
            self.new_token_ratio = max(MIN_NEW_TOKEN_RATIO, self.new_token_ratio - NEW_TOKEN_RATIO_DECAY)
            live = set(self.running)  # a set: batches of hundreds made this loop quadratic
            for req in batch.reqs:
                if req.finished or req not in live:
                    continue
                if req.aborted:
                    self._finish(req, end, reason="abort")
                    continue
                self._emit_token(req, end)
            self.running = [r for r in self.running if not r.finished]

    def _emit_token(self, req: SimRequest, t: float) -> None:
        req.generated += 1
        self.stats.generation_tokens += 1
        self._decode_tokens_since_log += 1
        if req.generated >= len(req.output_ids):
            self._finish(req, t, reason=None)
        elif req.on_event is not None:
            req.on_event(req)

    def _finish(self, req: SimRequest, t: float, *, reason: str | None) -> None:
        """cache_finished_req: insert prompt + output (all but the last token) and release the rest."""
        if reason is not None:
            req.finish_reason = reason
        if self.caching and req.kv_len > 0:
            toks = (req.input_ids + req.output_ids[: req.generated])[: req.kv_len]
            self._cache_tokens(req, toks, chunked=False)
        self._set_kv(req, req.tree_len)
        self._unlock(req)
        req.kv_len = 0
        req.finish_time = t
        if req in self.running:
            self.running.remove(req)
        if req.on_event is not None:
            req.on_event(req)
        if self.on_finish is not None:
            self.on_finish(req)


def simulate(
    requests: Iterable[SimRequest],
    config: EngineConfig,
    *,
    on_finish: Callable[[SimRequest, float], Iterable[SimRequest]] | None = None,
    log: EngineLog | None = None,
    on_step: Callable[[Engine], None] | None = None,
    jump: bool = True,
) -> list[SimRequest]:
    """Replay requests in virtual time; `on_finish` may return follow-up requests (closed loops).

    Arrivals at the same virtual time are queued by `SimRequest.order` (what-if's closed loop: the
    schedule index), as the live sim queues a lockstep client's requests (harness.sim.live).
    Returns every request (follow-ups included) in finish order, with arrival, first_token_time,
    finish_time and cached_device/cached_host filled in (`SimRequest.result()` gives a dict).
    `on_step(engine)` runs after every forward (tests check invariants there); `jump=False` runs
    every decode step one by one (the same results, slower).
    """
    engine = Engine(config, log=log)
    seq = itertools.count()
    arrivals: list[tuple[float, int, int, SimRequest]] = [
        (r.arrival, r.order, next(seq), r) for r in requests
    ]
    heapq.heapify(arrivals)
    done: list[SimRequest] = []
    engine.on_finish = done.append
    seen = 0
    t = 0.0
    inf = float("inf")
    while arrivals or engine.busy():
        while arrivals and arrivals[0][0] <= t:
            engine.add(heapq.heappop(arrivals)[3])
        if jump and engine.running and not engine.waiting:
            t2 = engine.fast_forward(t, arrivals[0][0] if arrivals else inf)
            if t2 != t:
                t = t2
                if on_step is not None:
                    on_step(engine)
                continue
        batch = engine.schedule(t)
        if batch is not None:
            t += batch.duration
            engine.complete(batch, t)
            if on_step is not None:
                on_step(engine)
        elif arrivals:  # idle (schedule raises SchedulerStuck rather than idle with work pending)
            t = max(t, arrivals[0][0])
        if on_finish is not None:
            while seen < len(done):
                for nxt in on_finish(done[seen], t):
                    nxt.arrival = max(nxt.arrival, t)
                    heapq.heappush(arrivals, (nxt.arrival, nxt.order, next(seq), nxt))
                seen += 1
    return done
