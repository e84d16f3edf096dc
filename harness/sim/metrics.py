"""Prometheus text with SGLang's metric names, so `harness.metrics` reads the sim like SGLang.

Counters follow prometheus_client's exposition (`# TYPE name counter`, sample `name_total`); a
labelled counter has no sample until its first increment, as in SGLang (`cached_tokens_total`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# SGLang's histogram bucket bounds (seconds): e2e adds an 800 s bucket to TTFT's
TTFT_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
)
E2E_BUCKETS = (*TTFT_BUCKETS, 800.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, v: float) -> None:
        i = bisect.bisect_left(self.buckets, v)
        if i < len(self.counts):
            self.counts[i] += 1
        self.total += v
        self.n += 1


@dataclass
class Snapshot:
    """Everything /metrics shows, read from the engine at request time."""

    prompt_tokens: int
    generation_tokens: int
    cached_device: int
    cached_host: int
    num_requests: int
    evicted_tokens: int
    load_back_tokens: int
    num_running_reqs: int
    num_queue_reqs: int
    token_usage: float
    cache_hit_rate: float
    gen_throughput: float
    kv_used_tokens: int
    kv_evictable_tokens: int
    max_total_num_tokens: int
    hicache_host_used_tokens: int | None  # None without HiCache
    hicache_host_total_tokens: int | None
    num_retracted: int = 0
    cached_storage: int = 0
    storage_unfulfilled: dict[str, int] | None = None  # None without an L3 backend
    prefetched_tokens: int = 0
    storage_backend: str = ""  # the --hicache-storage-backend name, SGLang's label on the L3 counters
    backup_tokens: int = 0  # device -> host copies (sglang:hicache_backup_tokens_total)
    dropped_tokens: int = 0  # device KV destroyed with no host copy (sglang:hicache_dropped_tokens_total)
    storage_backuped_tokens: int = 0  # host -> L3 writes (sglang:backuped_tokens_total)


def _fmt(v: float) -> str:
    return repr(float(v))


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def render(s: Snapshot, ttft: Histogram, e2e: Histogram, model_name: str) -> str:
    """The whole /metrics page."""
    base = {"model_name": model_name}
    sched = {"engine_type": "unified", "model_name": model_name, "pp_rank": "0", "tp_rank": "0"}
    out: list[str] = []

    def counter(name: str, help_: str, samples: Sequence[tuple[dict[str, str], float]]) -> None:
        out.append(f"# HELP sglang:{name}_total {help_}")
        out.append(f"# TYPE sglang:{name}_total counter")
        for labels, v in samples:
            out.append(f"sglang:{name}_total{_labels(labels)} {_fmt(v)}")

    def gauge(name: str, help_: str, v: float) -> None:
        out.append(f"# HELP sglang:{name} {help_}")
        out.append(f"# TYPE sglang:{name} gauge")
        out.append(f"sglang:{name}{_labels(sched)} {_fmt(v)}")

    def histogram(name: str, help_: str, h: Histogram) -> None:
        out.append(f"# HELP sglang:{name} {help_}")
        out.append(f"# TYPE sglang:{name} histogram")
        cum = 0
        for b, c in zip(h.buckets, h.counts, strict=True):
            cum += c
            out.append(f"sglang:{name}_bucket{_labels({**base, 'le': _fmt(b)})} {_fmt(cum)}")
        out.append(f"sglang:{name}_bucket{_labels({**base, 'le': '+Inf'})} {_fmt(h.n)}")
        out.append(f"sglang:{name}_count{_labels(base)} {_fmt(h.n)}")
        out.append(f"sglang:{name}_sum{_labels(base)} {_fmt(h.total)}")

    counter("prompt_tokens", "Number of prefill tokens processed.", [(base, s.prompt_tokens)])
    counter("generation_tokens", "Number of generation tokens processed.", [(base, s.generation_tokens)])
    cached = []
    if s.cached_device:
        cached.append(({"cache_source": "device", **base}, s.cached_device))
    if s.cached_host:
        cached.append(({"cache_source": "host", **base}, s.cached_host))
    if s.cached_storage:
        cached.append(({"cache_source": "storage", **base}, s.cached_storage))
    counter("cached_tokens", "Number of cached prompt tokens.", cached)
    counter("num_requests", "Number of requests processed.", [(base, s.num_requests)])
    counter(
        "evicted_tokens", "Number of tokens evicted from the device radix cache.", [(sched, s.evicted_tokens)]
    )
    counter(
        "load_back_tokens", "Number of tokens loaded back from the host pool.", [(sched, s.load_back_tokens)]
    )
    if s.hicache_host_total_tokens is not None:  # HiCache's counters, registered with the host tier
        counter("hicache_backup_tokens", "Tokens backed up from device to host.", [(sched, s.backup_tokens)])
        dropped = [({**sched, "reason": "host_pressure"}, s.dropped_tokens)] if s.dropped_tokens else []
        counter("hicache_dropped_tokens", "Device KV tokens destroyed without a host backup.", dropped)
    counter("num_retracted_requests", "Number of retracted requests.", [(sched, s.num_retracted)])
    if s.storage_unfulfilled is not None:
        storage_counters(counter, s, sched)
    gauge("num_running_reqs", "The number of running requests.", s.num_running_reqs)
    gauge("num_queue_reqs", "The number of requests in the waiting queue.", s.num_queue_reqs)
    gauge("num_used_tokens", "The number of used tokens.", s.kv_used_tokens)
    gauge("token_usage", "The token usage.", s.token_usage)
    gauge("gen_throughput", "The generation throughput (token/s).", s.gen_throughput)
    gauge("cache_hit_rate", "The prefix cache hit rate of the last prefill batch.", s.cache_hit_rate)
    gauge("kv_used_tokens", "KV tokens in use (pool - available - evictable).", s.kv_used_tokens)
    gauge("kv_evictable_tokens", "Evictable KV tokens in the radix cache.", s.kv_evictable_tokens)
    gauge("max_total_num_tokens", "Size of the device KV pool in tokens.", s.max_total_num_tokens)
    if s.hicache_host_total_tokens is not None:
        gauge(
            "hicache_host_used_tokens",
            "Tokens held in the HiCache host pool.",
            s.hicache_host_used_tokens or 0,
        )
        gauge(
            "hicache_host_total_tokens",
            "Size of the HiCache host pool in tokens.",
            s.hicache_host_total_tokens,
        )
    histogram("time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft)
    histogram("e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", e2e)
    return "\n".join(out) + "\n"


def storage_counters(counter: Callable[..., None], s: Snapshot, labels: dict[str, str]) -> None:
    """L3's counters as 0.5.23 names them (observability/metrics_collector.py StorageMetricsCollector):
    every unfulfilled reason pre-seeded at 0, prefetched and backed-up (written) tokens, and the effective prefill tokens by mode."""
    from harness.sim.storage import UNFULFILLED_REASONS

    unfulfilled = s.storage_unfulfilled or {}
    l3 = {**labels, "storage_backend": s.storage_backend}
    reasons = list(UNFULFILLED_REASONS) + sorted(set(unfulfilled) - set(UNFULFILLED_REASONS))
    counter(
        "storage_prefetch_unfulfilled_tokens",
        "Attempt-level storage-hit tokens that did not become a usable prefetch result, by reason.",
        [({**l3, "reason": r}, unfulfilled.get(r, 0)) for r in reasons],
    )
    counter(
        "prefetched_tokens",
        "Prompt tokens successfully transferred from L3 storage into host memory.",
        [(l3, s.prefetched_tokens)],
    )
    counter("backuped_tokens", "Number of backuped tokens.", [(l3, s.storage_backuped_tokens)])
    counter(
        "prefill_effective_tokens",
        "Effective prefill tokens by mode: input, device_hit, host_hit, storage_hit.",
        [
            ({**labels, "mode": "input"}, s.prompt_tokens),
            ({**labels, "mode": "device_hit"}, s.cached_device),
            ({**labels, "mode": "host_hit"}, s.cached_host),
            ({**labels, "mode": "storage_hit"}, s.cached_storage),
        ],
    )
