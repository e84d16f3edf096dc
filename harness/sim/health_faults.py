"""`--fault-hicache MODE`: the HiCache failures SGLang users report, reproduced on demand.

Why: each health verdict (harness.verdicts.health) needs a server that fails the way the report says, so
the verdict is proven against the failure and not only against numbers made up for a test. Each mode
wraps one step of the engine's tree or pool; nothing else changes, so every other figure stays SGLang's.

- `host-never-matches` (sglang#33713): prefixes are backed up to host and evicted from the device, but a
  returning prompt never matches its host copy: it is recomputed, `cached_tokens{cache_source="host"}`
  never appears.
- `load-back-evicts-others` (sglang#35129): a load-back first evicts every unlocked device prefix, other
  sessions' included, instead of its shortfall.
- `evict-whole-allocation` (sglang PR #40748, #32016): an allocation that finds too little room evicts the
  whole allocation instead of the shortfall. What it evicts on top is the free space found at the shortfall,
  less than one allocation, so a pool kept full shows little of it (docs/faults.md#health-verdicts).
- `prefetch-host-limit` (sglang#33984, Mooncake#3317): an L3 prefetch is refused when its tokens exceed
  0.8 x (host pool - device pool), whatever the host has free; SGLang counts it unfulfilled with reason
  `host_capacity`. Needs `--hicache-storage-backend`; bites when the host tier is not much larger than the
  device pool (`--hicache-ratio` near 1).
- `prefetch-hang` (sglang#30760, #42465): once `--fault-hang-after` requests have arrived, every later
  request waits forever, as a rank stuck in a prefetch check: no token, no error.
"""

from __future__ import annotations

import asyncio
from typing import Any

MODES = (
    "host-never-matches",
    "load-back-evicts-others",
    "evict-whole-allocation",
    "prefetch-host-limit",
    "prefetch-hang",
)
HOST_LIMIT_SHARE = 0.8  # prefetch-host-limit: the share of (host - device) a prefetch may take


def install(engine: Any, mode: str | None) -> None:
    """Wrap the engine's tree or pool for `mode` (None: nothing)."""
    if mode is None or mode == "prefetch-hang":
        return
    tree = engine.tree
    if mode == "host-never-matches":
        match = tree.match_prefix

        def no_host(key: Any, *a: Any, **kw: Any) -> Any:
            m = match(key, *a, **kw)
            if getattr(m, "host_len", 0):  # the host copy is there; the match does not see it
                m = type(m)(m.device_len, 0, m.last_device_node, m.last_device_node)
            return m

        tree.match_prefix = no_host
    elif mode == "load-back-evicts-others":
        load_back = tree.load_back

        def evict_all_first(match: Any, **kw: Any) -> Any:
            tree.evict(tree.evictable_size())  # every unlocked device prefix, not the shortfall
            return load_back(match, **kw)

        tree.load_back = evict_all_first
    elif mode == "evict-whole-allocation":

        def ensure_free(tokens: int) -> bool:
            if tokens > engine.available() and engine.caching:
                tree.evict(max(tokens, engine.page))  # the whole allocation, not tokens - available
            return bool(engine.available() >= tokens)

        engine._ensure_free = ensure_free
    elif mode == "prefetch-host-limit":
        l3 = engine.l3
        if l3 is None:
            raise ValueError("--fault-hicache prefetch-host-limit: needs --hicache-storage-backend")
        host_room = l3._host_room
        limit = HOST_LIMIT_SHARE * (tree.host.capacity - engine.pool)

        def limited(tokens: int) -> bool:
            return tokens <= limit and bool(host_room(tokens))

        l3._host_room = limited
    else:
        raise ValueError(f"--fault-hicache: unknown mode {mode!r} (choose from {', '.join(MODES)})")


class Hang:
    """prefetch-hang: the requests after the first `after` never reach the scheduler."""

    def __init__(self, mode: str | None, after: int) -> None:
        self.on = mode == "prefetch-hang"
        self.after = after
        self.seen = 0

    async def gate(self) -> None:
        """Return at once, or never (until the client goes away and the handler is cancelled)."""
        if not self.on:
            return
        self.seen += 1
        if self.seen > self.after:
            await asyncio.Event().wait()
