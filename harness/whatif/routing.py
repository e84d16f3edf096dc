"""Where SGLang's gateway (smg 1.13.0) sends each request, for the routing replay (harness.whatif.fleet).

Each policy decides on what smg sees of a plain HTTP request: its text (the prompt, or the input ids
joined by spaces, as smg's extract_text_for_routing gives it) and the requests in flight per worker
(its load counter: up at selection, down when the answer has gone out). The replay takes the fleet as
reporting no load (smg polls it every 10 s of wall time, which a virtual clock cannot follow; without a
report smg's expected-wait score is the in-flight count), and smg breaks every tie at random, so most
policies are a draw: a router gives the set it draws from (`options`) and
records its choice (`commit`); `select` draws with the replay's seeded generator. Facts and their
sources: docs/smg-routing.md. Workers are 0..n-1 in smg's own order; they start identical, so a
permutation of them changes nothing but the names.
"""

from __future__ import annotations

import hashlib
import random
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
from harness.spec.router_policies import ROUTER_POLICIES
from harness.whatif.char_tree import CharTree

POLICIES = ROUTER_POLICIES  # harness.spec.router_policies: each name has a class registered below
CHARS_PER_TOKEN = 4  # prefix_hash over HTTP hashes prefix_token_count x 4 characters of the text


@dataclass(frozen=True)
class RouterConfig:
    """smg's routing flags (its CLI defaults) and what the replay assumes of the transport."""

    policy: str = "cache_aware"
    seed: int = 0  # the replay's draws for smg's unseeded random choices (ties, random, ring placement)
    cache_threshold: float = 0.3
    balance_abs_threshold: int = 64
    balance_rel_threshold: float = 1.5
    eviction_interval_s: float = 60.0  # `smg launch`'s default (--eviction-interval-secs)
    max_tree_size: int = 67_108_864
    prefix_token_count: int = 256
    prefix_hash_load_factor: float = 1.25
    prefix_hash_abs_threshold: int = 10
    transport: str = "http"  # http: what smg sees of the harness's requests; grpc: token ids

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


class Router:
    """One policy's state over n workers: `options` is what it draws from, `commit` what it remembers."""

    def __init__(self, n: int, cfg: RouterConfig) -> None:
        self.n = n
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.branches: dict[str, int] = {}
        self.branch = ""  # the branch of the last `options` call

    def follow_live(self) -> None:
        """Before a replay that follows a live run's choices: a policy whose placement the replay cannot
        know (prefix_hash's ring, placed by worker URLs) learns it from those choices instead."""

    def options(self, req: Request, loads: Sequence[int]) -> list[int]:
        return list(range(self.n))

    def commit(self, req: Request, w: int, loads: Sequence[int]) -> None:
        self.branches[self.branch] = self.branches.get(self.branch, 0) + 1

    def draw(self, opts: list[int], loads: Sequence[int]) -> int:
        return opts[0] if len(opts) == 1 else self.rng.choice(opts)

    def select(self, req: Request, loads: Sequence[int]) -> int:
        w = self.draw(self.options(req, loads), loads)
        self.commit(req, w, loads)
        return w


_CLASSES: dict[str, type[Router]] = {}


def replays(*names: str) -> Callable[[type[Router]], type[Router]]:
    """Register a Router class as the replay of these smg policies (names from harness.spec.router_policies)."""

    def register(cls: type[Router]) -> type[Router]:
        for name in names:
            if name not in ROUTER_POLICIES:
                raise ValueError(f"{cls.__name__}: {name!r} is not in harness.spec.router_policies")
            _CLASSES[name] = cls
        return cls

    return register


def _least(cands: Sequence[int], loads: Sequence[int]) -> list[int]:
    """smg's expected wait on a dark fleet: the fewest in flight; every tie is drawn from."""
    low = min(loads[i] for i in cands)
    return [i for i in cands if loads[i] == low]


@replays("round_robin")
class RoundRobin(Router):
    def __init__(self, n: int, cfg: RouterConfig) -> None:
        super().__init__(n, cfg)
        self.count = 0

    def options(self, req: Request, loads: Sequence[int]) -> list[int]:
        self.branch = "round_robin"
        return [self.count % self.n]

    def commit(self, req: Request, w: int, loads: Sequence[int]) -> None:
        super().commit(req, w, loads)
        self.count += 1


@replays("random", "consistent_hashing")
class Random(Router):
    """`random`, and `consistent_hashing` on a request with no routing key, authorization,
    forwarded-for or cookie header (a harness request): a uniform draw."""

    def options(self, req: Request, loads: Sequence[int]) -> list[int]:
        self.branch = "random" if self.cfg.policy == "random" else "random_fallback"
        return list(range(self.n))


@replays("least_load")
class LeastLoad(Router):
    def options(self, req: Request, loads: Sequence[int]) -> list[int]:
        self.branch = "least_load"
        return _least(range(self.n), loads)


@replays("power_of_two")
class PowerOfTwo(Router):
    """Two distinct workers drawn; the fewer in flight of the two (a tie drawn)."""

    def options(self, req: Request, loads: Sequence[int]) -> list[int]:
        self.branch = "power_of_two"
        if self.n == 1:
            return [0]
        top = max(loads)  # any worker can win but one that every other beats
        beaten = [
            i for i in range(self.n) if loads[i] == top and sum(1 for x in loads if x < top) == self.n - 1
        ]
        return [i for i in range(self.n) if i not in beaten]

    def draw(self, opts: list[int], loads: Sequence[int]) -> int:
        if self.n == 1:
            return 0
        a = self.rng.randrange(self.n)
        b = (a + 1 + self.rng.randrange(self.n - 1)) % self.n
        return self.rng.choice(_least((a, b), loads))


def _position(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "little")


@replays("prefix_hash")
class PrefixHash(Router):
    """The head of the request (prefix_token_count tokens over gRPC, 4x as many characters of text over
    HTTP) hashed onto a ring of 150 virtual nodes per worker; a target past both load margins over the
    mean gives way to the least loaded acceptable worker. smg places workers on the ring by their URLs,
    which a replay cannot know: the ring here is placed by the seed, so the seeds spread over placements.
    A replay that follows a live run's choices (`known`) learns each head's worker from it instead."""

    VNODES = 150

    def __init__(self, n: int, cfg: RouterConfig) -> None:
        super().__init__(n, cfg)
        ring = sorted((_position(f"{cfg.seed}/w{i}#{v}"), i) for i in range(n) for v in range(self.VNODES))
        self.pos = [p for p, _ in ring]
        self.owner = [w for _, w in ring]
        self.known: dict[str, int] | None = None  # head -> worker, when learning from a live run
        self._head = ""

    def follow_live(self) -> None:
        self.known = {}

    def head(self, req: Request) -> str:
        if self.cfg.transport == "grpc" and req.tokens:
            return ",".join(str(t) for t in req.tokens[: self.cfg.prefix_token_count])
        return req.text[: self.cfg.prefix_token_count * CHARS_PER_TOKEN]

    def _ok(self, load: int, loads: Sequence[int]) -> bool:
        total = sum(loads)
        if total == 0:
            return True
        avg = (total + 1) / self.n
        return load <= max(avg * self.cfg.prefix_hash_load_factor, avg + self.cfg.prefix_hash_abs_threshold)

    def options(self, req: Request, loads: Sequence[int]) -> list[int]:
        self._head = h = self.head(req)
        if self.known is not None:
            if h not in self.known:
                self.branch = "ring_hit"
                return list(range(self.n))  # where the live ring put it is learned at commit
            target = self.known[h]
        else:
            target = self.owner[bisect_left(self.pos, _position(h)) % len(self.pos)]
        if self._ok(loads[target], loads):
            self.branch = "ring_hit"
            return [target]
        self.branch = "load_balance_walk"
        ok = [i for i in range(self.n) if self._ok(loads[i], loads)]
        return [min(ok, key=lambda i: loads[i])] if ok else [target]

    def commit(self, req: Request, w: int, loads: Sequence[int]) -> None:
        super().commit(req, w, loads)
        if self.known is not None and self.branch == "ring_hit":
            self.known.setdefault(self._head, w)


@replays("cache_aware")
class CacheAware(Router):
    """The approximate tree (harness.whatif.char_tree): past `cache_threshold` of the text matched, the
    workers holding the matched node, less any past both load margins over the mean (then every worker
    not past them: a spill); else every worker; the fewest in flight among those, a tie drawn."""

    def __init__(self, n: int, cfg: RouterConfig) -> None:
        super().__init__(n, cfg)
        self.tree = CharTree(n)
        self.next_eviction = cfg.eviction_interval_s if cfg.eviction_interval_s > 0 else float("inf")

    def _gated(self, w: int, loads: Sequence[int]) -> bool:
        avg = sum(loads) / self.n
        return (
            loads[w] > avg * self.cfg.balance_rel_threshold
            and loads[w] > avg + self.cfg.balance_abs_threshold
        )

    def options(self, req: Request, loads: Sequence[int]) -> list[int]:
        while req.at >= self.next_eviction:  # smg's eviction thread, on the replay's clock
            self.tree.evict(self.cfg.max_tree_size)
            self.next_eviction += self.cfg.eviction_interval_s
        m = self.tree.match(req.text)
        self._holders = [t for t in m.tenants if t < self.n] if m.rate > self.cfg.cache_threshold else []
        if not self._holders:
            self.branch = "expected_wait_fallback"
            return _least(range(self.n), loads)
        safe = [w for w in self._holders if not self._gated(w, loads)]
        if safe:
            self.branch = "tree_match"
            return _least(safe, loads)
        self.branch = "spill"
        spill = [w for w in range(self.n) if not self._gated(w, loads)] or list(range(self.n))
        return _least(spill, loads)

    def commit(self, req: Request, w: int, loads: Sequence[int]) -> None:
        super().commit(req, w, loads)
        self.tree.insert(req.text, w)


_MISSING = set(ROUTER_POLICIES) - set(_CLASSES)
if _MISSING:  # a policy named in the registry without a replay: caught at import, not mid-replay
    raise ImportError(f"harness.whatif.routing: no replay class for {', '.join(sorted(_MISSING))}")


def make_router(n: int, cfg: RouterConfig) -> Router:
    """A fresh router over n workers (its own tree, counters and draws)."""
    if n < 1:
        raise HarnessError(f"--replicas: {n} must be >= 1")
    return _CLASSES[cfg.policy](n, cfg)
