"""The scheduler's records: its config (from serve-sim's SGLang flags), a request, a forward, its counters.

Apart from engine.py so the server, the responses and what-if read and build these without the scheduler
loop; engine.py re-exports them (`from harness.sim.engine import SimRequest` keeps working).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.sim.timing import DEFAULT_PROFILE, CardProfile, get_profile

CLIP_MAX_NEW_TOKENS = 4096  # SGLang clips the per-request output reservation at admission
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = 0.7 * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
# Virtual seconds of tokenizer-manager work per request before the scheduler can receive it (ingest.py):
# HTTP parse, GenerateReqInput normalisation, request state, tokenization, pickling, the ZMQ send, all
# in one Python asyncio loop. 1 ms is an estimate of that Python work on a server CPU, not a
# measurement; what matters for batching is that it exceeds an idle scheduler's poll and that a
# burst's requests after the first reach the scheduler within its prefill (~140 ms for 277 tokens of
# an 8B model on an L4). Fit it to a real server with serve-sim's
# --sim-ingest-latency-ms (docs/sglang-scheduling.md).
INGEST_LATENCY_S = 0.001


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
    # L3 (harness.sim.storage): --hicache-storage-backend, its directory and --hicache-storage-prefetch-policy
    storage_backend: str | None = None
    storage_dir: str | None = None  # None: SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR or /tmp/hicache
    storage_prefetch_policy: str = "timeout"  # SGLang 0.5.23's default
    # the host tier's time mechanisms the engine models (harness.sim.tier_time.HICACHE_MECHANISMS)
    hicache_mechanisms: tuple[str, ...] = (
        "layer_overlap",
        "timed_write_acks",
        "blocking_write_back",
        "copy_sm_share",
    )
    max_running_requests: int | None = None
    chunked_prefill_size: int | None = None  # None: the card's; <= 0 disables chunking
    max_prefill_tokens: int = 16384
    decode_log_interval: int = 40
    card: CardProfile | str = DEFAULT_PROFILE
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    radix_tree: str = "unified"  # --sim-radix-tree: "unified" (0.5.23's tree) or "radix" (plain RadixCache)
    radix_mode: str = "sglang"  # harness whatif --mode: "exact" evicts exactly the shortfall
    # --sim-ingest-latency-ms / 1000: the tokenizer manager's work per request (ingest.py); None: its default
    ingest_latency_s: float | None = None
    # --enable-priority-scheduling / --schedule-low-priority-values-first (managers/schedule_policy.py)
    priority_scheduling: bool = False
    low_priority_values_first: bool = False
    # not --disable-priority-preemption, --priority-scheduling-preemption-threshold, --max-queued-requests
    # (arg_groups/fields/schedule.py defaults; harness/sim/priority.py)
    priority_preemption: bool = True
    preemption_threshold: int = 10
    max_queued_requests: int | None = None
    # tokens one key element stands for (what-if on a block trace: the block size); the engine times its
    # forwards, its host copies and its chunk budget in tokens, its pool stays in key elements
    key_tokens: int = 1
    idle_poll_s: float = (
        0.0  # --sim-idle-poll-ms / 1000: an idle scheduler's spin (0: it sees a request at once)
    )

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
        if self.ingest_latency_s is None:
            self.ingest_latency_s = INGEST_LATENCY_S

    @property
    def profile(self) -> CardProfile:
        assert isinstance(self.card, CardProfile)
        return self.card

    @property
    def kv_bytes_per_token(self) -> int:
        per = self.profile.kv_bytes_per_token
        return (per // 2 if self.kv_cache_dtype.startswith("fp8") else per) * max(1, self.key_tokens)

    @property
    def load_back_units(self) -> int:
        """Host hits shorter than this (key elements) are recomputed, not loaded back: SGLang's 10 tokens."""
        from harness.sim.hicache import load_back_units

        return load_back_units(self.key_tokens)

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
            pool_tokens=ns.max_total_tokens if ns.max_total_tokens is not None else _fraction_pool(ns),
            page_size=ns.page_size,
            policy=ns.radix_eviction_policy,
            policy_config=dict(getattr(ns, "policy_config", {}) or {}),
            disable_radix_cache=ns.disable_radix_cache,
            hicache=ns.enable_hierarchical_cache,
            hicache_ratio=ns.hicache_ratio,
            hicache_size_gb=ns.hicache_size,
            hicache_write_policy=ns.hicache_write_policy,
            storage_backend=getattr(ns, "hicache_storage_backend", None),
            storage_dir=getattr(ns, "hicache_storage_dir", None),
            storage_prefetch_policy=getattr(ns, "hicache_storage_prefetch_policy", None) or "timeout",
            max_running_requests=ns.max_running_requests,
            chunked_prefill_size=ns.chunked_prefill_size,
            max_prefill_tokens=ns.max_prefill_tokens,
            decode_log_interval=ns.decode_log_interval,
            card=getattr(ns, "sim_profile", None) or ns.card_profile,
            kv_cache_dtype=ns.kv_cache_dtype,
            context_length=ns.context_length,
            radix_tree=getattr(ns, "sim_radix_tree", "unified"),
            ingest_latency_s=_ms(getattr(ns, "sim_ingest_latency_ms", None)),
            idle_poll_s=_ms(getattr(ns, "sim_idle_poll_ms", None)) or 0.0,
            priority_scheduling=bool(getattr(ns, "enable_priority_scheduling", False)),
            low_priority_values_first=bool(getattr(ns, "schedule_low_priority_values_first", False)),
            priority_preemption=not getattr(ns, "disable_priority_preemption", False),
            preemption_threshold=int(getattr(ns, "priority_scheduling_preemption_threshold", 10)),
            max_queued_requests=getattr(ns, "max_queued_requests", None),
        )


def _fraction_pool(ns: Any) -> int | None:
    """--mem-fraction-static without --max-total-tokens: the pool SGLang 0.5.23 sizes from it
    (harness.sim.gpu_memory); None leaves the card's default."""
    from harness.errors import HarnessError
    from harness.sim.gpu_memory import pool_tokens

    frac = getattr(ns, "mem_fraction_static", None)
    if frac is None:
        return None
    if not 0 < frac < 1:
        raise HarnessError(f"--mem-fraction-static: {frac:g} must be between 0 and 1")
    prof = getattr(ns, "sim_profile", None)
    hw, shape = getattr(prof, "hw", None), getattr(prof, "shape", None)
    return None if hw is None or shape is None else pool_tokens(hw, shape, frac)


def _ms(value: float | None) -> float | None:
    return None if value is None else float(value) / 1000.0


@dataclass(eq=False)
class SimRequest:
    """One generation request: its tokens, the answer the sim will give, and what happened to it."""

    rid: str
    input_ids: list[int] = field(repr=False)
    output_ids: list[int] = field(repr=False)  # the whole answer the sim produces, decided up front
    finish_reason: str = "length"  # "length" (max_tokens reached) or "stop"
    arrival: float = 0.0  # reached the server (the client's send)
    received: float | None = None  # reached the scheduler (after the tokenizer manager, ingest.py)
    priority: int | None = None  # the request's `priority` field (None: not sent)
    order: int = 0  # among arrivals at the same virtual time, the lower order is queued first
    on_event: Callable[[SimRequest], None] | None = field(default=None, repr=False)
    # results
    cached_device: int = 0
    cached_host: int = 0
    cached_storage: int = 0  # tokens prefetched from L3 (cached_tokens_details.storage)
    storage_end: int = 0  # L3 holds this request's prefix up to here (looked up when it is received)
    storage_wait_s: float = 0.0  # what admission waited for its prefetch
    # wait_complete / timeout: when its prefetch lets it go (set at the first blocked poll; later requests
    # pass it meanwhile, as SGLang's scheduler skips a request whose prefetch is still landing)
    prefetch_ready_at: float | None = None
    prefetch_landed: tuple[int, str | None] = (0, None)  # what it takes then: tokens, the shortfall's reason
    first_token_time: float | None = None
    finish_time: float | None = None
    generated: int = 0
    aborted: bool = False
    retractions: int = 0
    abort_message: str | None = None  # an abort the scheduler decided (a 503 with this message)
    # scheduler state
    kv_len: int = 0  # tokens whose KV is on the device for this request
    tree_len: int = 0  # of those, the prefix held (locked) in the tree
    locked: Any = field(default=None, repr=False)  # the tree node this request holds a lock on
    counted: bool = False  # cached tokens are counted on first admission only
    inserted_len: int = 0  # tokens this request already inserted (hits are not counted twice)
    # a block trace's answer (what-if): `output_tokens` decode steps, one per token, while output_ids holds
    # its KV as ceil(output_tokens / out_unit) key elements that match nothing; the tree caches only the
    # prompt, as the one-at-a-time replay does for blocks. None: one token per output id.
    output_tokens: int | None = None
    out_unit: int = 1  # tokens per output key element (the block size; 1 for token requests)

    @property
    def answer_tokens(self) -> int:
        """Tokens the request generates in all (the first at prefill, one per decode step after it)."""
        return len(self.output_ids) if self.output_tokens is None else self.output_tokens

    def out_units(self, tokens: int) -> int:
        """Key elements that `tokens` generated tokens' KV takes (a partial block takes a whole one)."""
        u = self.out_unit
        return tokens if u == 1 else -(-tokens // u)

    def out_reserve(self) -> int:
        """The admission's output reservation (CLIP_MAX_NEW_TOKENS clipped), in key elements."""
        n = (len(self.output_ids) if self.output_tokens is None else self.output_tokens) - self.generated
        n, u = min(n, CLIP_MAX_NEW_TOKENS), self.out_unit
        return n if u == 1 else -(-n // u)  # out_units, inlined: admission calls it per running request

    @property
    def fill_ids(self) -> list[int]:
        return self.input_ids + self.output_ids[: self.out_units(self.generated)]

    @property
    def computed(self) -> list[int]:
        """What the tree may cache: fill_ids[: kv_len] (without building fill_ids when the prompt alone
        covers it, every prefill); a block answer's fresh elements never (prompt only)."""
        ids = self.input_ids
        if self.kv_len <= len(ids) or self.out_unit > 1:
            return ids[: self.kv_len]
        return self.fill_ids[: self.kv_len]

    @property
    def private(self) -> int:
        return self.kv_len - self.tree_len

    @property
    def finished(self) -> bool:
        return self.finish_time is not None

    @property
    def cached_tokens(self) -> int:
        return self.cached_device + self.cached_host + self.cached_storage

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
            "cached_storage": self.cached_storage,
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
    cached_storage: int = 0
    num_requests: int = 0
    num_retracted: int = 0
    prefetched_tokens: int = 0  # landed from L3 into host memory
    storage_hit_tokens: int = 0  # returned by L3 lookups
    storage_unfulfilled: dict[str, int] = field(default_factory=dict)  # by reason
    storage_written_pages: int = 0
    storage_backuped_tokens: int = 0  # host -> L3 writes acknowledged (sglang:backuped_tokens_total)
    last_cache_hit_rate: float = 0.0
    gen_throughput: float = 0.0


@dataclass
class PrefillBudget:
    """What one prefill batch may still take: chunk tokens, input tokens, and the pool reservation offset."""

    chunk: int
    input: int
    offset: float

    def spend(self, tokens: int, reserve: int) -> None:
        self.chunk -= tokens
        self.input -= tokens
        self.offset += reserve


@dataclass
class PrefillPlan:
    """The prefill batch being built: (request, new tokens, cached before) parts and what they hit."""

    running_bs: int
    parts: list[tuple[SimRequest, int, int]] = field(default_factory=list)
    cached_hits: int = 0
    load_back: int = 0
    storage: dict[int, int] = field(default_factory=dict)  # id(request) -> tokens it takes from L3
    storage_wait_s: float = 0.0  # the longest prefetch wait among the batch's requests
    preempted: list[SimRequest] = field(default_factory=list)  # running ones a higher priority displaced


def stuck_message(eng: Any) -> str:
    """What a stuck scheduler (an engine) holds, for SchedulerStuck."""
    head = eng.waiting[0] if eng.waiting else None
    what = (
        f"head of queue rid={head.rid} needs {len(head.fill_ids) - head.kv_len} + "
        f"{head.out_units(head.answer_tokens - head.generated)} tokens"
        if head is not None
        else "no request is schedulable"
    )
    return (
        f"scheduler stuck: {what}; #queue-req: {len(eng.waiting)}, #running-req: {len(eng.running)}, "
        f"chunked: {eng.chunked is not None}, pool: {eng.pool}, available: {eng.available()}, "
        f"evictable: {eng.tree.evictable_size()}, protected: {eng.tree.protected_size()}, "
        f"private: {eng.private_total}"
    )
