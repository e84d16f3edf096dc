"""HiCache's host tier as SGLang 0.5.23 runs it: a second, larger pool in host memory behind the radix tree.

The tree (`harness.sim.radix.RadixCache(host=HostTier(...))`) does the node work; this object holds
the pool's size, its write policy and the thresholds SGLang uses:

- `write_through`: a node is backed up on its first hit (hit_count >= 1), `write_through_selective`
  on its second (>= 2), `write_back` only when the device evicts it (hit counts stay 0, as in 0.5.23).
  Write-through backs up the chain of unbacked ancestors first and stops at the first copy that finds
  no room; each copy keeps the node's path locked until its ack (`RadixCache.ack_transfers`).
- Evicting a backed-up node from the device frees only its device copy; the node stays matchable.
- When the host pool is full, host leaves (off device, no children, unlocked) are evicted by the
  tree's own policy key; under write-back, host copies of device-resident nodes are reclaimed first.
  A write-back node whose copy still does not fit is dropped with its host-only subtree, unless
  something in that subtree is locked or in flight (then it stays on the device).
- A host hit is loaded back into device slots only when it is at least `load_back_threshold` tokens (10);
  on a block trace, whose key elements stand for `key_tokens` tokens each, that is one element
  (`load_back_units`), not 10 (10 x 512 tokens).
- Pool size (`host_pool_tokens`): device x ratio rounded down to whole pages plus one padding page; with
  no explicit ratio or size, the default 2.0 shrinks until the pool fits 80 % of the host memory left after
  a 10 GiB reserve (sglang/srt/mem_cache/pool_host/base.py, hicache_auto_size.py, hicache_hook.py).
"""

from __future__ import annotations

from dataclasses import dataclass

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
LOAD_BACK_THRESHOLD = 10


def load_back_units(key_tokens: int = 1) -> int:
    """SGLang's load-back threshold (10 tokens) in key elements of `key_tokens` tokens each."""
    return max(1, -(-LOAD_BACK_THRESHOLD // max(1, key_tokens)))


DEFAULT_RATIO = 2.0
HOST_MEMORY_FRACTION = 0.8  # --hicache-host-memory-fraction's default
HOST_MEMORY_RESERVE_BYTES = 10 * 1024**3  # HICACHE_HOST_MEMORY_RESERVE_BYTES
ALLOCATION_SLACK = 0.05  # hicache_auto_size._ALLOCATION_SLACK_FRACTION


def host_pool_tokens(
    device_tokens: int,
    *,
    page_size: int = 1,
    ratio: float | None = None,
    size_gb: float = 0.0,
    kv_bytes_per_token: int = 0,
    host_memory_bytes: float | None = None,
) -> tuple[int, float]:
    """(host pool tokens, the ratio used) as a 0.5.23 server sizes it.

    `--hicache-size` (GB) wins; an explicit `--hicache-ratio` is used as given; with neither, the default
    2.0 is cut to what fits 80 % of `host_memory_bytes` after the 10 GiB reserve (less 5 % slack), when
    the host memory is known. The pool then gets one padding page on top of its whole pages.
    """
    page = max(1, page_size)
    if size_gb > 0:
        if kv_bytes_per_token <= 0:
            raise ValueError("--hicache-size needs the KV bytes per token")
        size = int(size_gb * 1e9 // kv_bytes_per_token)
        used_ratio = size / device_tokens if device_tokens else 0.0
    else:
        used_ratio = DEFAULT_RATIO if ratio is None else ratio
        if ratio is None and host_memory_bytes is not None and kv_bytes_per_token > 0 and device_tokens > 0:
            budget = (host_memory_bytes - HOST_MEMORY_RESERVE_BYTES) * HOST_MEMORY_FRACTION
            fit = budget * (1 - ALLOCATION_SLACK) / (device_tokens * kv_bytes_per_token)
            if fit <= 0:
                raise ValueError(
                    "no host memory is left for HiCache after the 10 GiB reserve; set --hicache-ratio or"
                    " --hicache-size"
                )
            used_ratio = min(DEFAULT_RATIO, fit)
        size = int(device_tokens * used_ratio)
    return (size // page + 1) * page, used_ratio


@dataclass
class HostTier:
    """Host pool capacity (tokens) and write policy; `used` is kept by the tree."""

    capacity: int
    write_policy: str = "write_through"
    load_back_threshold: int = LOAD_BACK_THRESHOLD
    used: int = 0
    reclaim_duplicates: bool = True  # False: SGLANG_HICACHE_SKIP_HOST_DUPLICATE_RECLAIM=1

    def __post_init__(self) -> None:
        if self.write_policy not in WRITE_POLICIES:
            raise ValueError(
                f"--hicache-write-policy: invalid choice {self.write_policy!r} (choose from {', '.join(WRITE_POLICIES)})"
            )
        if self.capacity < 0:
            raise ValueError(f"host tier capacity must be >= 0 tokens, got {self.capacity}")

    @classmethod
    def from_ratio(cls, device_tokens: int, ratio: float = 2.0, page_size: int = 1, **kw) -> HostTier:
        """`--hicache-ratio`: host pool = ratio x device pool in whole pages, plus one padding page."""
        return cls(capacity=host_pool_tokens(device_tokens, page_size=page_size, ratio=ratio)[0], **kw)

    @property
    def host_capacity(self) -> int:
        return self.capacity

    def host_used(self) -> int:
        return self.used

    def used_tokens(self) -> int:
        return self.used

    def host_free(self) -> int:
        return self.capacity - self.used

    @property
    def write_back(self) -> bool:
        return self.write_policy == "write_back"

    @property
    def hit_threshold(self) -> int:
        """Hits after which write-through backs a node up (never reached under write_back)."""
        return 2 if self.write_policy == "write_through_selective" else 1
