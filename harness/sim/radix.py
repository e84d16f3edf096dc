"""SGLang 0.5.23's radix cache (mem_cache/radix_cache.py and unified_radix_cache.py), rebuilt for speed.

Public API (the sim engine and `harness whatif` rely on it; keep it stable):

    cache = RadixCache(page_size=1, policy="lru", policy_config=None, clock=time.monotonic,
                       host=None, mode="sglang", flavor="unified")
    m = cache.match_prefix(tokens)      # MatchResult: device_len, host_len, last_device_node, last_host_node
    cache.insert(tokens, priority=0, inserted_len=0) -> tokens already present
    cache.inc_lock_ref(node); cache.dec_lock_ref(node)
    cache.evict(n) -> device tokens freed   (whole nodes, may overshoot; mode="exact" frees exactly n)
    cache.load_back(m) -> tokens moved host -> device (only when m.host_len >= 10)
    cache.evictable_size(), cache.protected_size(), cache.device_size(), cache.host_size()
    cache.reset(); cache.stats (CacheStats counters)

Semantics kept from SGLang, because they move real hit rates:
- match stamps last_access_time on the path; a partial match splits the node and the unmatched tail
  keeps the fresh stamp. The split's new parent copies hit_count, lock_ref, priority (and host state).
- hit_count rises on insert only, on nodes past `inserted_len` (what this request inserted before, by
  its chunked-prefill checkpoints: each of those counts too, so a request counts each node once); new
  leaves start at 1; matching alone counts nothing.
- keys are cut to whole pages on match and insert.
- evict pops the smallest policy key among unlocked device leaves, frees the whole node and lets the
  parent join when it becomes a leaf. The scheduler asks `max(shortfall, page_size)`.
Two flavors differ in stamping details (docs/sglang-tree-notes.md):
- "unified" (default): UnifiedRadixCache, the tree a 0.5.23 server builds for every policy
  (registry.default_radix_cache_factory -> create_unified_radix_cache) and the only one with tlru. Stamps
  come from a logical counter (unified_cache/components/base.get_and_increase_time_counter), not a clock;
  a match stamps its path once at the end, deepest node newest; a split parent keeps the child's creation
  time and the split-off tail gets a fresh stamp.
- "radix": the plain RadixCache servers up to 0.5.15 built: `clock()` per operation, the whole matched
  path (the partly matched node included) shares one stamp, a split parent gets a fresh creation time.

Speed: SGLang rebuilds its heap from every evictable leaf on each evict call. Here a heap persists
across calls and entries are invalidated lazily (each node carries a version); a node is re-pushed
whenever its key changes while it is an evictable leaf, so the pop order equals a fresh heapify.

Why one file (over 500 lines): it is one data structure. The device and host paths (match, insert,
evict, load_back, write-through, evict_host) update the same size counters, leaf flags, versions and
heaps, whose joint invariants verify() checks; splitting the host-tier methods off would scatter one set
of invariants over modules. The records (radix_nodes.py) and the checker (radix_verify.py) live apart.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable, Sequence

from harness.sim.hicache import HostTier
from harness.sim.policies import key_function
from harness.sim.radix_nodes import CacheStats, MatchResult, Node
from harness.sim.radix_verify import verify_tree

MODES = ("sglang", "exact")
FLAVORS = ("radix", "unified")


def _common_prefix(a: tuple, b: tuple) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _parent(node: Node) -> Node:
    """The parent of a node below the root: every walk up stops at the root, the one node without one."""
    parent = node.parent
    if parent is None:
        raise AssertionError(f"{node!r} is the root or detached: walked past the root")
    return parent


class RadixCache:
    """A radix tree over token ids that caches, matches, locks and evicts like SGLang 0.5.23."""

    def __init__(
        self,
        *,
        page_size: int = 1,
        policy: str = "lru",
        policy_config: dict | None = None,
        clock: Callable[[], float] = time.monotonic,
        host: HostTier | None = None,
        mode: str = "sglang",
        flavor: str = "unified",
    ) -> None:
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.policy = policy.lower()
        self._key = key_function(self.policy, policy_config)  # validates, raises ValueError
        self.policy_config = dict(policy_config or {})
        self.flavor = flavor
        if self.flavor not in FLAVORS:
            raise ValueError(f"flavor must be one of {FLAVORS}, got {flavor!r}")
        if self.flavor == "radix" and self.policy == "tlru":
            raise ValueError(
                "tlru needs the unified tree (SGLang's plain RadixCache keeps no T-LRU bookkeeping); "
                "use the unified flavor"
            )
        self.page_size = page_size
        if self.flavor == "unified":
            # UnifiedRadixCache stamps from a logical counter that steps by 1.0 per call, so the
            # 1e-5-per-level stamps of a matched path never cross an earlier stamp, whatever the clock.
            # (a float counter: 1.0, 2.0, ... exactly as float(n) of an int one, without a Python frame a tick)
            clock = itertools.count(1.0).__next__
        self.clock = clock
        self.host = host
        self.mode = mode
        self._tlru = self.policy == "tlru"
        self._lru = self.policy == "lru"  # its key is (last_access_time,): _push builds the entry directly
        self._hit_keyed = self.policy in ("lfu", "slru")
        self.stats = CacheStats()
        self.evict_log: list[tuple] | None = None  # set to [] to record each evicted node's key, in order
        # set backup_log to [] to record each node backed up to host (the engine's L3 writes)
        self.backup_log: list[Node] | None = None
        self.reset()

    # --- public API ------------------------------------------------------------------------------
    def reset(self) -> None:
        """Flush: an empty tree (SGLang's /flush_cache). Stats are kept; the host pool is emptied."""
        c = self.clock
        self.root = Node((), None, c(), c(), priority=-(2**63))
        self.root.lock_ref = 1
        self._evictable = 0
        self._protected = 0
        self._heap: list = []
        self._dirty: list[Node] = []
        self._hheap: list = []
        self._seq = 0
        self._n_leaves = 0
        self._host_leaves: set[Node] = set()
        self._host_size = 0
        self._nids = itertools.count(1)
        self._acks = itertools.count(1)
        self._pending_backups: list[tuple[int, Node]] = []  # (ack id, node locked until the ack)
        self._pending_loads: list[tuple[Node, bool]] = []  # (anchor, host-locked) until the load ack
        self._dups: dict[int, Node] = {}  # SGLang's full_host_duplicates, in its insertion order
        if self.host is not None:
            self.host.used = 0

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def device_size(self) -> int:
        return self._evictable + self._protected

    def host_size(self) -> int:
        return self._host_size

    def total_size(self) -> int:
        """Tokens in the tree on either tier (a node on both counts once)."""
        total, stack = 0, [self.root]
        while stack:
            n = stack.pop()
            total += len(n.key)
            stack.extend(n.children.values())
        return total

    def _child_key(self, key: tuple, off: int = 0):
        return key[off] if self.page_size == 1 else key[off : off + self.page_size]

    def match_prefix(self, key: Sequence[int]) -> MatchResult:
        """Longest cached prefix of `key`; stamps access times and splits a partly matched node."""
        p = self.page_size
        if p == 1:
            if type(key) is not tuple:
                key = tuple(key)
        else:
            key = tuple(key[: len(key) // p * p])
        root = self.root
        if not key:
            return MatchResult(0, 0, root, root)
        unified = self.flavor == "unified"
        if not unified:
            t = self.clock()
            root.last_access_time = t
        node, off, n = root, 0, len(key)
        dev_len, last_dev = 0, root
        children = root.children
        ck = key[0] if p == 1 else key[0:p]
        child = children.get(ck)  # one lookup a level (a child is never None)
        while child is not None:
            if not (child.dev or child.host):
                break
            if not unified:
                child.last_access_time = t
                if (child.evl or child.hleaf) and not child.dirty:
                    child.dirty = True
                    self._dirty.append(child)
            ckey = child.key
            ln = len(ckey)
            seg = key[off : off + ln]
            if seg == ckey:
                plen = ln
            else:
                plen = _common_prefix(ckey, seg)
                if p != 1:
                    plen = plen // p * p
                node = self._split(child, plen)
                if node.dev:
                    dev_len += plen
                    last_dev = node
                off += plen
                break
            node = child
            if child.dev:
                dev_len += plen
                last_dev = child
            off += plen
            if off >= n:
                break
            children = child.children
            ck = key[off] if p == 1 else key[off : off + p]
            child = children.get(ck)
        if unified:
            t = self.clock()
            dirty = self._dirty
            x: Node | None = node
            while x is not None:
                x.last_access_time = t
                if (x.evl or x.hleaf) and not x.dirty:
                    x.dirty = True
                    dirty.append(x)
                t -= 0.00001
                x = x.parent
        return MatchResult(dev_len, off - dev_len, last_dev, node)

    def insert(self, key: Sequence[int], *, priority: int = 0, inserted_len: int = 0) -> int:
        """Cache `key`; returns how many of its tokens were already in the tree (either tier).

        `inserted_len`: tokens this request inserted before (its chunked-prefill checkpoints), which were
        counted as hits then (SGLang's InsertParams.inserted_len, req.kv.cache_inserted_len).
        """
        p = self.page_size
        if p == 1:
            if type(key) is not tuple:
                key = tuple(key)
        else:
            key = tuple(key[: len(key) // p * p])
        priority = priority or 0
        unified = self.flavor == "unified"
        host = self.host
        count_hits = host is None or not host.write_back
        root = self.root
        clock = self.clock
        dirty = self._dirty
        t = clock()
        root.last_access_time = t
        if root.priority < priority:
            root.priority = priority
        if not key:
            return 0
        node, off, n = root, 0, len(key)
        ck = key[0] if p == 1 else key[0:p]
        children = root.children
        child = children.get(ck)  # one lookup a level (a child is never None)
        while child is not None:
            child.last_access_time = clock() if unified else t
            if (child.evl or child.hleaf) and not child.dirty:
                child.dirty = True
                dirty.append(child)
            ckey = child.key
            ln = len(ckey)
            seg = key[off : off + ln]
            if seg == ckey:
                plen = ln
            else:
                plen = _common_prefix(ckey, seg)
                if p != 1:
                    plen = plen // p * p
                if plen < ln:
                    child = self._split(child, plen)
            if child.priority < priority:
                child.priority = priority
                if (child.evl or child.hleaf) and not child.dirty:
                    child.dirty = True
                    dirty.append(child)
            if not child.dev:
                self._unevict(child)
                self._update_dup(child)  # a backed-up node restored from fresh KV is a duplicate
            off += plen
            node = child
            if count_hits and off > inserted_len:
                self._hit(node)
            if off >= n:
                break
            children = node.children
            ck = key[off] if p == 1 else key[off : off + p]
            child = children.get(ck)
        prefix = off
        if off < n:
            leaf = self._new_leaf(node, key[off:], priority, ck)
            if count_hits and n > inserted_len:
                self._hit(leaf)
        return prefix

    def inc_lock_ref(self, node: Node) -> int:
        """Pin `node` and its ancestors (a running request); returns the change in evictable tokens."""
        delta = 0
        root = self.root
        while node is not root:
            if node.lock_ref == 0 and node.dev:
                ln = len(node.key)
                self._evictable -= ln
                self._protected += ln
                delta -= ln
            node.lock_ref += 1
            self._update_leaf(node)
            if node.hleaf:
                self._update_host_leaf(node)
            node = _parent(node)
        return delta

    def dec_lock_ref(self, node: Node) -> int:
        delta = 0
        root = self.root
        while node is not root:
            if node.lock_ref == 1 and node.dev:
                ln = len(node.key)
                self._evictable += ln
                self._protected -= ln
                delta += ln
            node.lock_ref -= 1
            self._update_leaf(node)
            self._update_host_leaf(node)
            node = _parent(node)
        return delta

    def evict(self, num_tokens: int) -> int:
        """Free at least `num_tokens` device tokens from unlocked leaves, smallest policy key first."""
        self.stats.evict_calls += 1
        freed = 0
        heap = self._heap
        exact = self.mode == "exact"
        declined: list[Node] = []
        skip: set[Node] = set()
        self._flush()
        pop, evict_leaf, dirty = heapq.heappop, self._evict_leaf, self._dirty
        while freed < num_tokens and heap:
            entry = pop(heap)
            x = entry[-1]
            if entry[-2] != x.ver or not x.evl or x in skip:
                continue
            if exact and freed + len(x.key) > num_tokens:
                keep = len(x.key) - self._round_up(num_tokens - freed)
                if keep > 0:
                    self._split_raw(x, keep)
            key = x.key
            n = evict_leaf(x)
            if n == 0 and x.evl:
                # a write-back drop declined: the leaf stays on the device, and this walk moves on
                skip.add(x)
                declined.append(x)
            elif self.evict_log is not None:
                self.evict_log.append(key)
            freed += n
            if dirty:
                self._flush()
        for x in declined:
            if x.evl:
                self._push(x)
        self.stats.evicted_tokens += freed
        if len(heap) > 4 * self._n_leaves + 1024:
            self._compact()
        return freed

    def load_back(
        self,
        match: MatchResult,
        *,
        mem_quota: int | None = None,
        available: Callable[[], int] | None = None,
    ) -> int:
        """Move the host-only part of `match` back to device slots, as UnifiedRadixCache.load_back does.

        The anchor's host copy and its whole path are locked first; the load is refused when it is under
        the threshold (10 tokens) or when its tokens plus the device tokens the lock newly protects exceed
        `mem_quota`. With `available` (free device slots, read live) the tree evicts the shortfall itself,
        path locked, and refuses when the room still is not there; without it the caller made room. The
        path stays locked until `ack_transfers()` (SGLang's loading_check).
        """
        host = self.host
        if host is None or match.host_len < max(1, host.load_back_threshold):
            return 0
        anchor = match.last_host_node
        path = []
        x: Node | None = anchor
        while x is not None and not x.dev:
            if not (x.host and self._attached(x)):
                return 0  # the match went stale: host eviction removed part of its path since
            path.append(x)
            x = x.parent
        if x is None or not self._attached(x):
            return 0
        tokens = sum(len(n.key) for n in path)
        if tokens < max(1, host.load_back_threshold):
            return 0
        hlocked = self.inc_host_lock_ref(anchor)
        delta = -self.inc_lock_ref(anchor)

        def refuse() -> int:
            self.dec_lock_ref(anchor)
            if hlocked:
                self.dec_host_lock_ref(anchor)
            self.stats.load_back_refused += 1
            return 0

        if mem_quota is not None and tokens + delta > mem_quota:
            return refuse()
        if available is not None:
            free = available()
            if free < tokens:
                self.evict(tokens - free)
                if available() < tokens:
                    return refuse()
        # the match may have gone stale while making room (write-back evictions make host room)
        if not all(n.host and not n.dev and self._attached(n) for n in path):
            return refuse()
        for node in reversed(path):
            self._unevict(node)
            if host.write_back:
                node.lbp = anchor.nid  # pinned against duplicate reclaim until the ack
        self.stats.load_back_calls += 1
        self.stats.load_back_tokens += tokens
        self._pending_loads.append((anchor, hlocked))  # keeps its lock until the ack
        return tokens

    def ack_transfers(self, backups_upto: int | None = None) -> tuple[int, int]:
        """Acknowledge the device->host backups in flight (those with ack id <= `backups_upto`: the copies
        that landed; None: all) and every host->device load (SGLang's check_hicache_events: writing_check,
        then loading_check); returns (backups, loads) acknowledged."""
        backups = self._pending_backups
        if not backups and not self._pending_loads:
            return 0, 0
        root = self.root
        if backups_upto is None:
            self._pending_backups = []
        else:
            # ack ids are issued in increasing order (_backup_chain appends them so): the landed ones lead
            landed, n = 0, len(backups)
            while landed < n and backups[landed][0] <= backups_upto:
                landed += 1
            self._pending_backups = backups[landed:]
            backups = backups[:landed]
        for ack, node in backups:
            frags = []
            x = node
            while x is not root and x.wtp == ack:  # the node and the prefixes split off it since
                frags.append(x)
                x = _parent(x)
            for frag in reversed(frags):
                frag.wtp = 0
                self._update_dup(frag)
            self.dec_lock_ref(node)
        loads = self._pending_loads
        self._pending_loads = []
        wb = self.host is not None and self.host.write_back
        for anchor, hlocked in loads:
            self.dec_lock_ref(anchor)
            if hlocked:
                self.dec_host_lock_ref(anchor)
            y: Node | None = anchor
            while y is not None and y is not root:
                if wb:
                    if y.lbp != anchor.nid:
                        y = y.parent
                        continue
                    y.lbp = 0
                self._update_dup(y)
                y = y.parent
        return len(backups), len(loads)

    def pending_backups(self) -> list[tuple[int, Node]]:
        """(ack id, node) of the backups waiting for their acknowledgement, in issue order."""
        return self._pending_backups

    def pending_transfers(self) -> tuple[int, int]:
        """(backups, loads) still waiting for their acknowledgement."""
        return len(self._pending_backups), len(self._pending_loads)

    def inc_host_lock_ref(self, node: Node) -> bool:
        """Pin `node`'s host copy (SGLang's inc_host_lock_ref): it stops being a host leaf and is neither
        host-evicted nor reclaimed. Under write-through a node without a host copy is not pinned (False)."""
        if node is self.root or self.host is None or (not node.host and not self.host.write_back):
            return False
        node.hlock += 1
        node.hbound += 1
        self._update_host_leaf(node)
        return True

    def dec_host_lock_ref(self, node: Node) -> None:
        """Release a host pin; a prefix split off the pinned node since is released with it."""
        root = self.root
        while node is not root:
            node.hlock -= 1
            self._update_host_leaf(node)
            if node.hbound > 0:
                node.hbound -= 1
                return
            node = _parent(node)

    def evict_host(self, num_tokens: int) -> int:
        """Free host slots from host leaves (off device, childless, unlocked) by the policy key.

        Under write-back, host copies of nodes also on the device go first (`_reclaim_dups`), as SGLang's
        drive_host_eviction does unless SGLANG_HICACHE_SKIP_HOST_DUPLICATE_RECLAIM=1.
        """
        freed = 0
        if self.host is not None and self.host.write_back and self.host.reclaim_duplicates:
            freed = self._reclaim_dups(num_tokens)
        reclaimed = freed
        self._flush()
        heap = self._hheap
        pop, drop, remove, dirty = heapq.heappop, self._drop_host, self._remove_child, self._dirty
        while freed < num_tokens and heap:
            entry = pop(heap)
            x = entry[-1]
            if entry[-2] != x.hver or not x.hleaf:
                continue
            freed += len(x.key)
            drop(x)
            remove(x)
            if dirty:
                self._flush()
        self.stats.host_evicted_tokens += freed - reclaimed
        if len(heap) > 4 * len(self._host_leaves) + 1024:
            self._hheap = []
            for n in self._host_leaves:
                self._push_host(n)
        return freed

    def verify(self) -> None:
        """Check every structural invariant (tests and debugging): raises AssertionError on the first broken one."""
        verify_tree(self)

    # --- internals -------------------------------------------------------------------------------
    def _attached(self, x: Node) -> bool:
        """`x` is still in the tree (a removed node keeps its parent pointer but its parent forgot it)."""
        root = self.root
        while x is not root:
            p = x.parent
            if p is None or p.children.get(self._child_key(x.key, 0)) is not x:
                return False
            x = p
        return True

    def _round_up(self, n: int) -> int:
        p = self.page_size
        return -(-n // p) * p

    def _flush(self) -> None:
        """Push the current key of every evictable leaf whose key changed: one entry per node per evict."""
        dirty = self._dirty
        if not dirty:
            return
        push, push_host = self._push, self._push_host
        for node in dirty:
            node.dirty = False
            if node.evl:
                push(node)
            elif node.hleaf:
                push_host(node)
        dirty.clear()

    def _push_host(self, node: Node) -> None:
        node.hver += 1
        self._seq += 1
        if self._lru:
            heapq.heappush(self._hheap, (node.last_access_time, self._seq, node.hver, node))
        else:
            heapq.heappush(self._hheap, (*self._key(node), self._seq, node.hver, node))

    def _push(self, node: Node) -> None:
        node.ver += 1
        self._seq += 1
        if self._lru:
            heapq.heappush(self._heap, (node.last_access_time, self._seq, node.ver, node))
        else:
            heapq.heappush(self._heap, (*self._key(node), self._seq, node.ver, node))

    def _compact(self) -> None:
        heap = []
        stack = [self.root]
        while stack:
            n = stack.pop()
            if n.evl:
                self._seq += 1
                heap.append((*self._key(n), self._seq, n.ver, n))
            stack.extend(n.children.values())
        heapq.heapify(heap)
        self._heap = heap

    def _update_leaf(self, node: Node) -> None:
        new = node.dev and node.lock_ref == 0 and node.ndc == 0 and node is not self.root
        if new:
            if not node.evl:
                node.evl = True
                self._n_leaves += 1
                if not node.dirty:
                    node.dirty = True
                    self._dirty.append(node)
        elif node.evl:
            node.evl = False
            node.ver += 1
            self._n_leaves -= 1

    def _is_host_leaf(self, node: Node) -> bool:
        return not node.dev and node.host and not node.children and node.lock_ref == 0 and node.hlock == 0

    def _update_dup(self, node: Node) -> None:
        """SGLang's _update_duplicate_tracking: a settled copy on both tiers joins the ordered set."""
        if node is not self.root and node.dev and node.host and not node.wtp and not node.lbp:
            self._dups.setdefault(node.nid, node)
        else:
            self._dups.pop(node.nid, None)

    def _reclaim_dups(self, num_tokens: int) -> int:
        """SGLang's _reclaim_full_host_duplicates: free host copies of device-resident nodes in tracking
        order; pass 1 spares evictable device leaves (their next eviction demotes them for free)."""
        freed = 0
        swept: list[int] = []
        for spare_leaves in (True, False):
            if freed >= num_tokens:
                break
            for nid, node in self._dups.items():
                if freed >= num_tokens:
                    break
                if not (node.dev and node.host):
                    swept.append(nid)  # stale entry
                    continue
                if spare_leaves and node.evl:
                    continue
                if node is self.root or node.wtp or node.lbp or node.hlock:
                    continue
                freed += len(node.key)
                self._drop_host(node)
                swept.append(nid)
        for nid in swept:
            self._dups.pop(nid, None)
        self.stats.reclaimed_tokens += freed
        return freed

    def _update_host_leaf(self, node: Node) -> None:
        if self.host is None:
            return
        new = self._is_host_leaf(node)
        if new != node.hleaf:
            node.hleaf = new
            if new:
                self._host_leaves.add(node)
                if not node.dirty:
                    node.dirty = True
                    self._dirty.append(node)
            else:
                node.hver += 1
                self._host_leaves.discard(node)

    def _new_node(self, key: tuple, parent: Node, priority: int) -> Node:
        c = self.clock
        now = c()
        node = Node(key, parent, now, c(), priority)
        node.nid = next(self._nids)
        return node

    def _new_leaf(self, parent: Node, key: tuple, priority: int, ck) -> Node:
        leaf = self._new_node(key, parent, priority)
        if self._tlru:
            leaf.tlru_prefix_len = parent.tlru_prefix_len + len(key)
            leaf.tlru_history_len = max(leaf.tlru_history_len, leaf.tlru_prefix_len)
            cur: Node | None = parent
            while cur is not None and cur.tlru_history_len < leaf.tlru_prefix_len:
                cur.tlru_history_len = leaf.tlru_prefix_len
                cur = cur.parent
        parent.children[ck] = leaf
        parent.ndc += 1
        self._evictable += len(key)
        self._update_leaf(parent)
        self._update_leaf(leaf)
        self._update_host_leaf(parent)
        return leaf

    def _split_raw(self, child: Node, split_len: int) -> Node:
        """Cut `child` after `split_len` tokens; the new parent copies the child's state."""
        parent = _parent(child)
        ck_old = self._child_key(child.key, 0)
        new = Node(child.key[:split_len], parent, child.last_access_time, child.creation_time, child.priority)
        new.nid = next(self._nids)
        new.hit_count = child.hit_count
        new.lock_ref = child.lock_ref
        new.hlock, new.hbound, child.hbound = child.hlock, child.hbound, 0  # the pin's edge moves up
        new.wtp, new.lbp = child.wtp, child.lbp
        new.dev, new.host = child.dev, child.host
        new.tlru_prefix_len = parent.tlru_prefix_len + split_len
        new.tlru_history_len = child.tlru_history_len
        child.key = child.key[split_len:]
        new.children[self._child_key(child.key, 0)] = child
        new.ndc = 1 if child.dev else 0
        child.parent = new
        parent.children[ck_old] = new
        return new

    def _split(self, child: Node, split_len: int) -> Node:
        """The split a match or insert makes, with the flavor's time stamps."""
        c = self.clock
        now = c()
        created = c()
        new = self._split_raw(child, split_len)
        new.last_access_time = now
        if self.flavor == "unified":
            child.last_access_time = c()
            if (child.evl or child.hleaf) and not child.dirty:
                child.dirty = True
                self._dirty.append(child)
        else:
            new.creation_time = created
        self._update_dup(new)
        return new

    def _hit(self, node: Node) -> None:
        if not node.dev:
            return
        node.hit_count += 1
        if node.evl and self._hit_keyed and not node.dirty:
            node.dirty = True
            self._dirty.append(node)
        host = self.host
        if (
            host is not None
            and not node.host
            and not host.write_back
            and node.hit_count >= host.hit_threshold
        ):
            self._backup_chain(node)

    def _backup_chain(self, node: Node) -> None:
        """Write-through: back up the node's unbacked ancestors first, then the node, stopping at the first
        copy that finds no host room (unified_tree_core._build_backup_kv_action,
        UnifiedRadixCache._execute_and_commit_kv_backup). Each copy locks its path until its ack."""
        chain = [node]
        a = _parent(node)
        while a is not self.root and not a.host:
            chain.append(a)
            a = _parent(a)
        for x in reversed(chain):
            if x.host:
                continue
            if not self._backup(x):
                return
            x.wtp = next(self._acks)
            self.inc_lock_ref(x)
            self._pending_backups.append((x.wtp, x))

    def _backup(self, node: Node) -> bool:
        host = self.host
        assert host is not None, "a backup needs the host tier"  # callers check it first
        need = len(node.key)
        if host.capacity - host.used < need:
            self.evict_host(need - (host.capacity - host.used))
            if host.capacity - host.used < need:
                return False
        node.host = True
        host.used += need
        self._host_size += need
        self.stats.host_written_tokens += need
        self.stats.backup_calls += 1
        if self.backup_log is not None:
            self.backup_log.append(node)
        if node.hleaf or not node.dev:  # else (on the device, not a host leaf) nothing to update
            self._update_host_leaf(node)
        return True

    def _drop_host(self, node: Node) -> None:
        if node.host:
            assert self.host is not None, "a node with a host copy implies the host tier"
            node.host = False
            self.host.used -= len(node.key)
            self._host_size -= len(node.key)
        self._update_host_leaf(node)

    def _unevict(self, node: Node) -> None:
        """Device slots again for a host-only node (load-back, or an insert that recomputed it)."""
        node.dev = True
        ln = len(node.key)
        if node.lock_ref:
            self._protected += ln
        else:
            self._evictable += ln
        parent = _parent(node)
        parent.ndc += 1
        self._update_leaf(parent)
        self._update_leaf(node)
        self._update_host_leaf(node)

    def _remove_child(self, node: Node) -> None:
        parent = _parent(node)
        del parent.children[self._child_key(node.key, 0)]
        self._dups.pop(node.nid, None)
        if node.dev:
            parent.ndc -= 1
        self._update_leaf(parent)
        self._update_host_leaf(parent)

    def _drop_subtree(self, node: Node) -> None:
        """Delete a host-only subtree below a node that leaves the tree."""
        stack = list(node.children.values())
        while stack:
            x = stack.pop()
            stack.extend(x.children.values())
            if x.host:
                self.stats.dropped_tokens += len(x.key)
                self._drop_host(x)
            self._dups.pop(x.nid, None)
            x.hleaf = False
            self._host_leaves.discard(x)
        node.children = {}
        node.ndc = 0

    def _drop_blocked(self, x: Node) -> bool:
        """drop_subtree_no_host declines while the leaf or anything below it is locked or in flight."""
        stack = [x]
        while stack:
            n = stack.pop()
            if n.lock_ref or n.hlock or n.lbp or (n is not x and n.wtp):
                return True
            stack.extend(n.children.values())
        return False

    def _evict_leaf(self, x: Node) -> int:
        """Free `x`'s device copy: demote it when backed up (or written back now), else delete it.

        Write-back copies `x` to the host first, while it is still an evictable device leaf, as SGLang does
        (UnifiedRadixCache._evict_components: evict_device_leaf returns a BackupKV that runs before
        tree_core.demote, or drop_subtree_no_host when it fails). Making host room can evict `x`'s own
        host-only children; that must not change `x`'s state between the two steps.
        """
        ln = len(x.key)
        host = self.host
        if host is not None and not x.host and host.write_back:
            if self._backup(x):
                self._update_dup(x)  # acknowledged at once (writing_check(write_back=True)), then demoted
            elif self._drop_blocked(x):
                self.stats.drop_declined += 1
                return 0
            else:
                self.stats.dropped_tokens += ln
        self._evictable -= ln
        x.evl = False
        x.ver += 1
        self._n_leaves -= 1
        if host is not None and x.host:
            x.dev = False
            parent = _parent(x)
            parent.ndc -= 1
            self._update_leaf(parent)
            self._update_host_leaf(x)
            return ln
        if x.children:
            self._drop_subtree(x)
        self._remove_child(x)
        x.dev = False
        return ln


def serve_request(cache, key: Sequence[int], capacity: int, max_prefix: int | None = None) -> tuple[int, int]:
    """Admit one request the way SGLang's scheduler does when requests run one at a time.

    Acknowledge the previous request's host transfers, match (and load back a host hit: the tree evicts
    for it with the path locked), evict `max(shortfall, page_size)` with the matched prefix locked
    when the uncached part does not fit, then insert as much of the prompt as the pool holds.
    `max_prefix`: match at most this many tokens (SGLang's scheduler matches all but the last prompt
    token, which it must compute for the logits). Returns (device hit tokens, host hit tokens). Works on any
    object with this module's cache API,
    which is how the oracle test drives SGLang's own tree through the very same steps.
    """
    page = cache.page_size
    n = len(key) // page * page
    ack = getattr(cache, "ack_transfers", None)
    if ack is not None:
        ack()  # the copies issued for the previous request have landed (one scheduler step later)
    probe = key if max_prefix is None else key[:max_prefix]
    m = cache.match_prefix(probe)
    dev, host = m.device_len, m.host_len
    if host:
        # load_back locks the host path, evicts for the shortfall and refuses when there is no room
        loaded = cache.load_back(m, available=lambda: capacity - cache.device_size())
        if loaded:
            m = type(m)(dev + loaded, 0, m.last_host_node, m.last_host_node)
        else:
            host = 0
    cached = m.device_len
    need = n - cached
    free = capacity - cache.device_size()
    if need > free:
        cache.inc_lock_ref(m.last_device_node)
        cache.evict(max(need - free, page))
        cache.dec_lock_ref(m.last_device_node)
        free = capacity - cache.device_size()
    keep = cached + max(0, min(need, free)) // page * page
    if keep > cached:
        cache.insert(key[:keep])
    return dev, host
