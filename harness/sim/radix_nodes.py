"""The radix tree's records: a node (one edge of tokens), a match result and the cache's counters.

Kept apart from the tree's algorithms in radix.py so readers of a MatchResult or CacheStats (the engine,
what-if, tests) find the fields without the eviction code around them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


class Node:
    """One edge of the tree: a run of tokens with its KV residency and eviction metadata."""

    __slots__ = (
        "children",
        "parent",
        "key",
        "lock_ref",
        "last_access_time",
        "creation_time",
        "hit_count",
        "priority",
        "dev",
        "host",
        "ndc",
        "evl",
        "hleaf",
        "ver",
        "hver",
        "dirty",
        "tlru_prefix_len",
        "tlru_history_len",
        "hlock",
        "hbound",
        "wtp",
        "lbp",
        "nid",
        "l3",
    )

    def __init__(self, key: tuple, parent: Node | None, now: float, created: float, priority: int = 0):
        self.children: dict = {}
        self.parent = parent
        self.key = key
        self.lock_ref = 0
        self.last_access_time = now
        self.creation_time = created
        self.hit_count = 0
        self.priority = priority
        self.dev = True  # KV on device
        self.host = False  # KV backed up on host
        self.ndc = 0  # children with KV on device
        self.evl = False  # evictable device leaf
        self.hleaf = False  # evictable host leaf
        self.ver = 0
        self.hver = 0
        self.dirty = False  # key changed (or became a leaf) since its last heap entry
        self.tlru_prefix_len = 0
        self.tlru_history_len = 0
        self.hlock = 0  # host lock refs (SGLang's host_lock_ref): pins the host copy
        self.hbound = 0  # host locks whose release stops at this node (the lock's older edge)
        self.wtp = 0  # write-through ack id while the device->host copy is in flight (0: none)
        self.lbp = 0  # nid of the load-back anchor while a write-back load is in flight (0: none)
        self.nid = 0
        self.l3: tuple[int, bytes] | None = None  # (store generation, last page's digest): path stored in L3

    def __len__(self) -> int:
        return len(self.key)

    def __repr__(self) -> str:
        return f"Node(len={len(self.key)}, key={self.key[:4]}..., lock={self.lock_ref}, dev={self.dev}, host={self.host})"


@dataclass
class MatchResult:
    """Longest cached prefix: the device part first, then the part only the host tier holds."""

    device_len: int
    host_len: int
    last_device_node: Node
    last_host_node: Node

    @property
    def total_len(self) -> int:
        return self.device_len + self.host_len


@dataclass
class CacheStats:
    """Counters over the cache's life (reset() keeps them; the caller diffs them)."""

    evict_calls: int = 0
    evicted_tokens: int = 0
    load_back_calls: int = 0
    load_back_tokens: int = 0
    host_written_tokens: int = 0
    host_evicted_tokens: int = 0
    dropped_tokens: int = 0  # write-back nodes dropped because the host pool was full
    drop_declined: int = 0  # write-back drops declined: something in the subtree locked or in flight
    backup_calls: int = 0  # device->host copies issued (one per node)
    reclaimed_tokens: int = 0  # host copies of device-resident nodes freed (_reclaim_full_host_duplicates)
    load_back_refused: int = 0  # load-backs refused: over mem_quota, or no device room after evicting

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
