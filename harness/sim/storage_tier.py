"""The engine's L3 tier: look a request up when it is received, apply the prefetch policy when it is
admitted, and write what the host tier backed up (harness.sim.storage holds the rules and speeds)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import Any

from harness.errors import HarnessError
from harness.sim.memory_store import MemoryStore, is_memory
from harness.sim.sched_records import Batch, EngineConfig, EngineStats, PrefillBudget, PrefillPlan, SimRequest
from harness.sim.storage import (
    BACKENDS,
    DEFAULT_STORAGE_DIR,
    PREFETCH_POLICIES,
    STORAGE_DIR_ENV,
    FileStore,
    PageMemo,
    PrefetchOutcome,
    extend_keys,
    iter_page_keys,
    prefetch_outcome,
    prefetch_threshold,
)

PREFETCHING = object()  # Engine._admit_one: the request waits for its L3 prefetch; later ones may pass
PREFETCH_POLL_S = 0.001  # an idle scheduler's loop polls a landing prefetch this often (modelled seconds)


def prefetch_poll(waiting: Iterable[SimRequest], now: float) -> Batch | None:
    """Nothing to run but a queued request whose L3 prefetch is still landing: an empty forward up to the
    idle loop's next poll (PREFETCH_POLL_S, or the moment it lands); None when no prefetch is landing."""
    later = [t for r in waiting if (t := r.prefetch_ready_at) is not None and t > now]
    return Batch("prefill", now, min(min(later) - now, PREFETCH_POLL_S)) if later else None


def storage_directory(config: EngineConfig) -> str:
    return config.storage_dir or os.environ.get(STORAGE_DIR_ENV) or DEFAULT_STORAGE_DIR


class StorageTier:
    """One server's view of its L3 backend: the shared page store and this server's counters."""

    def __init__(self, config: EngineConfig, stats: EngineStats, tree: Any = None) -> None:
        name = config.storage_backend or ""
        if name not in BACKENDS:
            raise HarnessError(
                f"--hicache-storage-backend: invalid choice {name!r} (choose from {', '.join(BACKENDS)})"
            )
        if config.storage_prefetch_policy not in PREFETCH_POLICIES:
            raise HarnessError(
                f"--hicache-storage-prefetch-policy: invalid choice {config.storage_prefetch_policy!r}"
                f" (choose from {', '.join(PREFETCH_POLICIES)})"
            )
        if not config.hicache:
            raise HarnessError("--hicache-storage-backend: needs --enable-hierarchical-cache (as in SGLang)")
        self.backend = BACKENDS[name]
        self.policy = config.storage_prefetch_policy
        self.page = max(1, config.page_size)
        self.kv_bytes = config.kv_bytes_per_token
        self.stats = stats
        self.tree = tree  # the host pool a prefetch lands in (None: unbounded)
        self.memo = PageMemo()  # this server's pages already hashed (page_keys)
        self._gen = 0  # Node.l3 marks from an earlier generation (before a reset) mean nothing
        model = config.profile.model.replace("/", "-")
        capacity = capacity_pages(config)
        # a prefetch went past the threshold: the backend's speed was asked (_outcome)
        self.consulted = False
        try:
            where = storage_directory(config)
            medium = MemoryStore if is_memory(where) else FileStore
            self.store = medium(where, f"_{model}_0_1", capacity_pages=capacity)
        except OSError as e:
            raise HarnessError(f"{STORAGE_DIR_ENV}: cannot use {storage_directory(config)!r}: {e}") from None

    def _outcome(self, hit: int, since: float) -> PrefetchOutcome:
        """prefetch_outcome under this server's policy and backend; a hit past the prefetch threshold is
        the first choice that turns on the backend's speed (below it: `below_threshold` on any)."""
        if hit >= prefetch_threshold(self.page):
            self.consulted = True
        return prefetch_outcome(self.policy, self.backend, hit, since, self.kv_bytes, self.page)

    def backend_free(self) -> float | None:
        """The largest store (pages) on which this server's run would be the very same, whatever the
        backend; None when a prefetch reached the threshold (its speed mattered). Below it every fetch is
        `below_threshold`: nothing taken, no wait, whatever the store holds. A smaller store holds a subset
        of the same pages (the first ones written), so its hits are no longer; a larger one too while this
        one refused nothing (inf), else it might hold more: up to this one's capacity."""
        if self.consulted:
            return None
        cap = self.store.capacity_pages
        return math.inf if not self.store.refused or cap is None else float(cap)

    @property
    def class_name(self) -> str:
        return self.backend.class_name

    def lookup(self, req: SimRequest) -> None:
        """At receipt: how far L3 holds the prompt (whole pages, never the last token)."""
        keys = iter_page_keys(req.input_ids[: len(req.input_ids) - 1], self.page, self.memo)
        req.storage_end = self.store.hit_pages(keys) * self.page

    def _since(self, req: SimRequest, now: float) -> float:
        return max(0.0, now - (req.received if req.received is not None else req.arrival))

    def pending(self, req: SimRequest, matched: int, now: float) -> float | None:
        """Scheduler.check_prefetch_progress before admission: the time the request's prefetch lets it
        go when that is later than `now` (the scheduler skips it and admits later requests meanwhile),
        else None. wait_complete waits for the whole read; timeout for at most its budget from this first
        blocked poll (`_start_storage_prefetch_wait`); best_effort never waits."""
        hit = req.storage_end - matched
        if hit <= 0 or req.counted or self.policy == "best_effort":
            return None
        if req.prefetch_ready_at is None:
            out = self._outcome(hit, self._since(req, now))
            if out.wait_s <= 0.0:
                return None
            req.prefetch_ready_at = now + out.wait_s
            req.prefetch_landed = (out.fulfilled, out.reason)
            req.storage_wait_s = out.wait_s
        return req.prefetch_ready_at if now < req.prefetch_ready_at else None

    def admit(self, req: SimRequest, matched: int, now: float) -> PrefetchOutcome:
        """At admission, after the device match and any load-back: the L3 tokens past `matched` the
        request takes under the prefetch policy; counts the outcome. A request that waited in the queue
        for its prefetch (`pending`) takes what had landed when it was let go (timeout: the rest `deadline`)."""
        hit = req.storage_end - matched
        if hit <= 0 or req.counted:
            return PrefetchOutcome(0, 0.0, 0, None)
        since = self._since(req, now)
        if req.prefetch_ready_at is not None:  # what landed by the time `pending` let it go
            landed, reason = req.prefetch_landed
            got = min(landed, hit)
            out = PrefetchOutcome(got, 0.0, hit - got, reason if got < hit else None)
        else:
            out = self._outcome(hit, since)
        if out.fulfilled and not self._host_room(out.fulfilled):
            out = PrefetchOutcome(0, 0.0, hit, "host_capacity")
        st = self.stats
        st.storage_hit_tokens += hit
        if out.reason != "below_threshold":
            st.prefetched_tokens += out.fulfilled
        if out.reason is not None and out.unfulfilled:
            st.storage_unfulfilled[out.reason] = st.storage_unfulfilled.get(out.reason, 0) + out.unfulfilled
        if req.prefetch_ready_at is None:
            req.storage_wait_s = out.wait_s
        return out

    def _host_room(self, tokens: int) -> bool:
        """A prefetch lands in the host pool first: evict host leaves for it, as the allocation does;
        False when that still leaves no room (reason host_capacity)."""
        host = getattr(self.tree, "host", None)
        if host is None:
            return True
        short = tokens - (host.capacity - host.used)
        if short > 0:
            self.tree.evict_host(short)
        return host.capacity - host.used >= tokens

    def take(self, req: SimRequest, matched: int, now: float, plan: PrefillPlan) -> int:
        """L3 tokens past the device prefix `matched` the request takes into the batch `plan`."""
        out = self.admit(req, matched, now)
        if out.fulfilled:
            plan.storage[id(req)] = out.fulfilled
            plan.storage_wait_s = max(plan.storage_wait_s, out.wait_s)
        return out.fulfilled

    def write_backups(self, tree: Any) -> None:
        """Write the pages of every node the host tier backed up since the last call (write_backup_storage).

        Each node's path is put whole (what the store lacks of it), but only its part below the nearest
        ancestor whose whole path the store already holds (Node.l3) is keyed: the rest would add nothing."""
        log = getattr(tree, "backup_log", None)
        if not log:
            return
        nodes = list(log)
        log.clear()
        gen = self._gen
        store = self.store
        held = store.holds
        stats = self.stats
        page = self.page
        for node in nodes:
            walk = _unstored_path(tree, node, gen)
            if walk is None:
                continue
            path, prior = walk
            keys: list[str] = []
            ends: list[tuple[Any, int, bytes]] = []
            for x in reversed(path):
                prior = extend_keys(prior, x.key, page, keys)
                ends.append((x, len(keys), prior))
            refused = store.refused
            stats.storage_written_pages += store.put(keys)
            # a put the capacity refused nothing of left every one of `keys` stored: no holds() to ask
            every = store.refused == refused
            # SGLang counts each acknowledged backup op's own whole pages (the node's key, not its ancestors'),
            # pages the backend already held included (cache_controller._page_backup: completed_tokens);
            # a node whose path was stored before (no path left to key) holds its own pages
            own = len(node.key) // page
            if own and (not path or every or held(keys[-own:])):
                stats.storage_backuped_tokens += own * page
            start = 0
            for x, end, digest in ends:  # the nodes whose whole path is now stored: a later walk stops there
                if not every and not held(keys[start:end]):
                    break
                x.l3 = (gen, digest)
                start = end

    def reset(self) -> None:
        self.store.clear_cache()
        self._gen += 1  # what the nodes say was stored is forgotten with the store's cache


def capacity_pages(config: EngineConfig) -> int:
    """The pages one server may store on its backend (its capacity over a page's KV bytes)."""
    backend = BACKENDS[config.storage_backend or ""]
    return int(backend.capacity_gb * 1e9 // (config.kv_bytes_per_token * max(1, config.page_size)))


def chunk_part(compute: int, budget: PrefillBudget, page: int) -> int:
    """Of `compute` tokens to compute, what this batch's chunk budget takes (whole pages when cut)."""
    part = min(compute, budget.chunk)
    return part if part == compute else max(page, part // page * page)


def _unstored_path(tree: Any, node: Any, gen: int) -> tuple[list[Any], bytes] | None:
    """The nodes from `node` up to (not including) the nearest one whose whole path this generation's
    store holds, and that one's last digest (b"" at the root); None when `node` left the tree."""
    path: list[Any] = []
    x = node
    root = tree.root
    while x is not root:
        parent = x.parent
        if parent is None or parent.children.get(tree._child_key(x.key)) is not x:
            return None
        l3 = x.l3
        if l3 is not None and l3[0] == gen:
            return path, l3[1]
        path.append(x)
        x = parent
    return path, b""
