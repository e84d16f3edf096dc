"""Where SGLang's gateway (smg 1.13.0) sends each request, for the routing replay (harness.whatif.fleet).

Each policy decides on what smg sees of a plain HTTP request: its text (the prompt, or the input ids
joined by spaces, as smg's extract_text_for_routing gives it) and the requests in flight per worker
(its load counter: up at selection, down when the answer ends). Facts and their sources:
docs/smg-routing.md. Workers are 0..n-1 in smg's own order; they start identical, so a permutation of
them changes nothing but the names.
"""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness.errors import HarnessError
from harness.whatif.char_tree import CharTree, Match

POLICIES = (
    "round_robin",
    "random",
    "cache_aware",
    "prefix_hash",
    "consistent_hashing",
    "power_of_two",
    "least_load",
)
# smg over HTTP: these two find no key in a harness request (no tokens, no routing header) and pick at
# random; measured on smg 1.13.0, see docs/smg-routing.md
RANDOM_OVER_HTTP = ("random", "prefix_hash", "consistent_hashing")


@dataclass(frozen=True)
class RouterConfig:
    """smg's routing flags (its CLI defaults) and what the replay assumes of the transport."""

    policy: str = "cache_aware"
    seed: int = 0  # the replay's draws for smg's unseeded random choices
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_s: float = 120.0
    max_tree_size: int = 67_108_864
    prefix_token_count: int = 256
    prefix_hash_load_factor: float = 1.25
    transport: str = "http"  # http: what smg sees of the harness's requests; grpc: token ids (prefix_hash)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise HarnessError(f"--router: unknown policy {self.policy!r} (one of {', '.join(POLICIES)})")
        if not 0.0 <= self.cache_threshold <= 1.0:
            raise HarnessError(f"--cache-threshold: {self.cache_threshold} must be within 0..1")
        if self.transport not in ("http", "grpc"):
            raise HarnessError(f"--router-transport: {self.transport!r} must be http or grpc")


@dataclass(frozen=True)
class Request:
    """What the gateway sees of one request."""

    text: str
    tokens: Sequence[int]
    at: float  # arrival, seconds (the engine's virtual clock; the trace's time when replayed one by one)


class Router(Protocol):
    def select(self, req: Request, loads: Sequence[int]) -> int: ...

    # how the decision went (cache_aware's tree match, min-load spill, ...), counted per replay
    branches: dict[str, int]


def routing_text(payload: Any) -> str:
    """The text smg routes a request by: a prompt as is, ids (and prompt arrays) joined by spaces,
    chat messages' text contents joined by spaces."""
    if isinstance(payload, str):
        return payload
    if isinstance(payload, list | tuple):
        if payload and isinstance(payload[0], dict):
            parts = []
            for m in payload:
                c = m.get("content")
                if isinstance(c, list):
                    c = " ".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("text"))
                if isinstance(c, str) and c:
                    parts.append(c)
            return " ".join(parts)
        return " ".join(str(x) for x in payload)
    return ""


class _Base:
    def __init__(self, n: int, cfg: RouterConfig) -> None:
        self.n = n
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.branches: dict[str, int] = {}
        self.processed = [0] * n  # smg's per-worker processed counter (min-load tie-break)

    def _took(self, branch: str, w: int) -> int:
        self.branches[branch] = self.branches.get(branch, 0) + 1
        return w


class RoundRobin(_Base):
    def __init__(self, n: int, cfg: RouterConfig) -> None:
        super().__init__(n, cfg)
        self.count = 0

    def select(self, req: Request, loads: Sequence[int]) -> int:
        w = self.count % self.n
        self.count += 1
        return self._took("round_robin", w)


class Random(_Base):
    def select(self, req: Request, loads: Sequence[int]) -> int:
        return self._took("random", self.rng.randrange(self.n))


class PowerOfTwo(_Base):
    """Two distinct workers at random; the one with fewer requests in flight (the first on a tie)."""

    def select(self, req: Request, loads: Sequence[int]) -> int:
        if self.n == 1:
            return self._took("single", 0)
        a = self.rng.randrange(self.n)
        b = (a + 1 + self.rng.randrange(self.n - 1)) % self.n
        return self._took("request_count", a if loads[a] <= loads[b] else b)


class LeastLoad(_Base):
    """No load reports from the workers: the fewest requests in flight, the lowest index on a tie."""

    def select(self, req: Request, loads: Sequence[int]) -> int:
        return self._took("least_load", min(range(self.n), key=lambda i: (loads[i], i)))


def _ring_position(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")


class PrefixHash(_Base):
    """Over gRPC: the first `prefix_token_count` tokens hashed onto a ring of 150 virtual nodes per
    worker, walking to the least-loaded acceptable worker past `load_factor` x the mean load. Over HTTP
    smg has no tokens and the choice is random (measured)."""

    VNODES = 150

    def __init__(self, n: int, cfg: RouterConfig) -> None:
        super().__init__(n, cfg)
        ring = sorted((_ring_position(f"w{i}#{v}"), i) for i in range(n) for v in range(self.VNODES))
        self.pos = [p for p, _ in ring]
        self.owner = [w for _, w in ring]

    def select(self, req: Request, loads: Sequence[int]) -> int:
        if self.cfg.transport == "http":
            return self._took("random_no_tokens", self.rng.randrange(self.n))
        head = ",".join(str(t) for t in req.tokens[: self.cfg.prefix_token_count])
        i = bisect_left(self.pos, _ring_position(head)) % len(self.pos)
        w = self.owner[i]
        total = sum(loads)
        if total == 0:
            return self._took("ring_hit", w)
        limit = (total + 1) / self.n * self.cfg.prefix_hash_load_factor
        if loads[w] <= limit:
            return self._took("ring_hit", w)
        ok = [j for j in range(self.n) if loads[j] <= limit]
        return self._took("load_balance_walk", min(ok, key=lambda j: (loads[j], j)) if ok else w)


class ConsistentHashing(_Base):
    """No routing key, authorization, forwarded-for or cookie header on a harness request: random."""

    def select(self, req: Request, loads: Sequence[int]) -> int:
        return self._took("random_fallback", self.rng.randrange(self.n))


class CacheAware(_Base):
    """The approximate tree (harness.whatif.char_tree) with smg's count-spread gate to the shortest queue."""

    def __init__(self, n: int, cfg: RouterConfig) -> None:
        super().__init__(n, cfg)
        self.tree = CharTree(n)
        self.next_eviction = cfg.eviction_interval_s if cfg.eviction_interval_s > 0 else float("inf")

    def _min_load(self, loads: Sequence[int]) -> int:
        return min(range(self.n), key=lambda i: (loads[i], self.processed[i], i))

    def select(self, req: Request, loads: Sequence[int]) -> int:
        cfg = self.cfg
        while req.at >= self.next_eviction:  # smg's eviction thread, on the replay's clock
            self.tree.evict(cfg.max_tree_size)
            self.next_eviction += cfg.eviction_interval_s
        lo, hi = min(loads), max(loads)
        if hi - lo > cfg.balance_abs_threshold and hi > lo * cfg.balance_rel_threshold:
            w = self._min_load(loads)
            self.tree.insert(req.text, w)
            self.processed[w] += 1
            return self._took("min_load", w)
        picked: list[int] = []

        def choose(m: Match) -> int:
            if m.rate > cfg.cache_threshold and m.tenant is not None:
                picked.append(m.tenant)
                return m.tenant
            w = self._min_load(loads)
            picked.append(-1 - w)
            return w

        self.tree.match_and_insert(req.text, choose)
        w = picked[0]
        branch = "tree_match" if w >= 0 else "tree_miss_min_load"
        w = w if w >= 0 else -1 - w
        self.processed[w] += 1
        return self._took(branch, w)


_CLASSES: dict[str, type[_Base]] = {
    "round_robin": RoundRobin,
    "random": Random,
    "cache_aware": CacheAware,
    "prefix_hash": PrefixHash,
    "consistent_hashing": ConsistentHashing,
    "power_of_two": PowerOfTwo,
    "least_load": LeastLoad,
}


def make_router(n: int, cfg: RouterConfig) -> Router:
    """A fresh router over n workers (its own tree, counters and draws)."""
    if n < 1:
        raise HarnessError(f"--replicas: {n} must be >= 1")
    router: Router = _CLASSES[cfg.policy](n, cfg)  # type: ignore[assignment]
    return router
