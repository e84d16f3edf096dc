"""HiCache's host tier as SGLang 0.5.23 runs it: a second, larger pool in host memory behind the radix tree.

The tree (`harness.sim.radix.RadixCache(host=HostTier(...))`) does the node work; this object holds
the pool's size, its write policy and the thresholds SGLang uses:

- `write_through`: a node is backed up on its first hit (hit_count >= 1), `write_through_selective`
  on its second (>= 2), `write_back` only when the device evicts it (hit counts stay 0, as in 0.5.23).
- Evicting a backed-up node from the device frees only its device copy; the node stays matchable.
- When the host pool is full, host leaves (off device, no children, unlocked) are evicted by the
  tree's own policy key; a backup that still does not fit is skipped (write-back: the node is dropped).
- A host hit is loaded back into device slots only when it is at least `load_back_threshold` tokens (10).
"""

from __future__ import annotations

from dataclasses import dataclass

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
LOAD_BACK_THRESHOLD = 10


@dataclass
class HostTier:
    """Host pool capacity (tokens) and write policy; `used` is kept by the tree."""

    capacity: int
    write_policy: str = "write_through"
    load_back_threshold: int = LOAD_BACK_THRESHOLD
    used: int = 0

    def __post_init__(self) -> None:
        if self.write_policy not in WRITE_POLICIES:
            raise ValueError(
                f"--hicache-write-policy: invalid choice {self.write_policy!r} (choose from {', '.join(WRITE_POLICIES)})"
            )
        if self.capacity < 0:
            raise ValueError(f"host tier capacity must be >= 0 tokens, got {self.capacity}")

    @classmethod
    def from_ratio(cls, device_tokens: int, ratio: float = 2.0, **kw) -> HostTier:
        """`--hicache-ratio`: host pool = ratio x device pool (SGLang's default ratio is 2.0)."""
        return cls(capacity=int(device_tokens * ratio), **kw)

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
