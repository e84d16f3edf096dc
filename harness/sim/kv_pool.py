"""The device pool's books under the scheduler: free slots, the tree it caches in, locks, private KV.

Engine inherits these: what is free, used or evictable, and how a request's tokens enter the tree and
hold a lock there (SGLang's token_to_kv_pool + cache_(un)finished_req). The scheduling decisions (what
runs next, how long it takes) stay in engine.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.sim.sched_records import EngineConfig, SimRequest


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


class KvPool:
    """Pool accounting for Engine: `pool` slots shared by the tree's device nodes and requests' private KV."""

    config: EngineConfig
    pool: int
    page: int
    now: float
    private_total: int
    tree: Any
    _clock: Callable[[], float]
    _last_stamp: float

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
                HostTier(
                    cfg.host_pool_tokens,
                    write_policy=cfg.hicache_write_policy,
                    load_back_threshold=cfg.load_back_units,
                )
                if cfg.hicache
                else None
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

    def _release(self, req: SimRequest) -> None:
        """release_req (managers/schedule_batch.py): a running request gives back its KV (the tree keeps
        the prefix it inserted) and will prefill again; reset_for_retract counts it (num_retractions)."""
        self._set_kv(req, req.tree_len)
        self._unlock(req)
        req.kv_len = 0
        req.inserted_len = 0
        req.retractions += 1

    def _set_kv(self, req: SimRequest, kv_len: int) -> None:
        # req.private (kv_len - tree_len) moves by the change in kv_len alone
        self.private_total += kv_len - req.kv_len
        req.kv_len = kv_len

    def _cache_tokens(self, req: SimRequest, tokens: list[int]) -> None:
        """checkpoint_kv_cache / release_kv_cache: insert the page-aligned computed tokens (a chunk's too:
        its nodes count one hit, as the request's later inserts do not recount them) and hold the prefix."""
        n = len(tokens) // self.page * self.page
        if n <= req.tree_len:
            return
        before = req.private
        key = tuple(tokens) if n == len(tokens) else tuple(tokens[:n])  # one key for the insert and the match
        tree = self.tree
        tree.insert(key, priority=req.priority or 0, inserted_len=req.inserted_len)
        req.inserted_len = max(req.inserted_len, n)
        m = tree.match_prefix(key)
        self._lock(req, m.last_device_node, m.device_len)
        self.private_total += req.private - before
