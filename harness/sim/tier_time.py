"""What a cache hit costs in time, tier by tier, and the host link's copy queue, as SGLang 0.5.23 moves KV.

One function per tier answers "seconds to bring `tokens` of KV from tier T onto the device of card C
running model M" (`device_hit_s`, `host_hit_s`, `storage_hit_s`), beside `recompute_s`, what the same
tokens cost computed again; `harness advise` and the break-even test use these. The engine uses
`HostLink` for the device->host copies and these mechanisms (HICACHE_MECHANISMS, each switchable so
benchmarks/hicache_time.py can show what it contributes):

- `layer_overlap`: a load-back is issued with its prefill batch (scheduler.get_new_batch_prefill ->
  ready_to_load_host_cache -> HiCacheController.start_loading) on its own host->device stream and the
  forward waits layer by layer (LayerDoneCounter.wait_until): the batch takes the longer stream plus one
  layer of the other. Off: the forward waits for the whole load first.
- `timed_write_acks`: write-through copies go on one device->host stream (mem_cache/l2_transfer.py
  L2TransferEngine.device_to_host_stream) after the forward that computed them (write_fence_stream),
  in order; the scheduler acknowledges a copy only at its first step after it landed
  (UnifiedRadixCache.writing_check counts ready acks), and the node stays locked until then. Off: every
  copy is acknowledged at the next step, as if it took no time.
- `blocking_write_back`: under write_back, evicting a device node copies it to host and the scheduler
  waits for the copy (writing_check(write_back=True) synchronizes every ack). Off: free.
- `copy_sm_share`: the default `--hicache-io-backend kernel` moves KV with a GPU kernel, not the copy
  engine, on a grid capped at DEFAULT_BLOCK_QUOTA = 2 thread blocks on CUDA (kernels/ops/kvcache/
  hicache.py); while a load or a write-through copy runs beside a forward, those blocks hold SMs the
  forward would use, so the forward is slower by the copy's overlap x 2 / the card's SMs. Off: free.

The two streams are separate and PCIe is full duplex, so loads never queue behind write-through copies.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from harness.sim.storage import BACKENDS, StorageBackend
from harness.sim.timing import CardProfile

HICACHE_MECHANISMS = ("layer_overlap", "timed_write_acks", "blocking_write_back", "copy_sm_share")

# --hicache-io-backend kernel's grid on CUDA (kernels/ops/kvcache/hicache.py DEFAULT_BLOCK_QUOTA; the TMA
# kernel's 4 applies on sm_90+ only to pages a multiple of its chunk, never at the default page size 1)
COPY_BLOCK_QUOTA = 2
# SMs per card (NVIDIA datasheets / architecture whitepapers: L4 58 (7,424 CUDA cores, 232 Tensor Cores),
# H100 SXM5 and H200 132, A100 108, GB10 48 (6,144 CUDA cores)); unknown cards steal nothing
SM_COUNT = {"l4": 58, "h100": 132, "h200": 132, "a100-80g": 108, "gb10": 48}


def device_hit_s(tokens: int, profile: CardProfile) -> float:
    """A device hit is already in place: no copy, no compute."""
    return 0.0


def host_hit_s(tokens: int, profile: CardProfile, kv_bytes_per_token: int | None = None) -> float:
    """Host pool -> device over the card's host link (not counting the overlap with a forward)."""
    return profile.load_back_time(tokens, kv_bytes_per_token)


def storage_hit_s(
    tokens: int,
    profile: CardProfile,
    backend: StorageBackend | str = "file",
    page_size: int = 1,
    kv_bytes_per_token: int | None = None,
) -> float:
    """L3 -> host pool (the backend's read) -> device (the host link), one after the other."""
    b = BACKENDS[backend] if isinstance(backend, str) else backend
    kv = kv_bytes_per_token or profile.kv_bytes_per_token
    return b.read_time(tokens, kv, page_size) + host_hit_s(tokens, profile, kv)


def recompute_s(tokens: int, profile: CardProfile) -> float:
    """The same prefix computed again: one prefill forward of `tokens` new tokens."""
    return profile.batch_prefill_time([(tokens, 0)])


def copy_sm_share(profile: CardProfile) -> float:
    """The share of the card's SMs a HiCache copy kernel holds while it runs (0: card unknown)."""
    hw = getattr(profile, "hw", None)
    sms = SM_COUNT.get(hw.name) if hw is not None else None
    return COPY_BLOCK_QUOTA / sms if sms else 0.0


def copy_steal_s(copy_s: float, forward_s: float, share: float) -> float:
    """What a forward loses to a copy kernel holding `share` of the SMs for the part of it they overlap."""
    if share <= 0.0 or copy_s <= 0.0 or forward_s <= 0.0:
        return 0.0
    return min(copy_s, forward_s) * share


def prefill_s(
    clock: HostTierClock | None,
    card: CardProfile,
    parts: list[tuple[int, int]],
    load_tokens: int,
    kv_bytes_per_token: int,
) -> float:
    """A prefill forward with its load-back, under the host-tier mechanisms `clock` has on (None: HiCache off)."""
    if load_tokens <= 0:  # nothing loaded back: the forward alone (no load to overlap, no copy to steal SMs)
        return card.batch_prefill_time(parts)
    if clock is None:
        return card.prefill_with_load_back(parts, load_tokens, kv_bytes_per_token)
    t = card.prefill_with_load_back(parts, load_tokens, kv_bytes_per_token, overlap=clock.overlap)
    if "copy_sm_share" in clock.mechanisms:
        load_s = card.load_back_time(load_tokens, kv_bytes_per_token)
        t += copy_steal_s(load_s, card.batch_prefill_time(parts), clock.sm_share)
    return t


class HostLink:
    """The device->host copy stream: write-through copies queue here; acks wait until theirs landed."""

    def __init__(self, gb_per_s: float, kv_bytes_per_token: int) -> None:
        self.bytes_per_s = gb_per_s * 1e9
        self.kv = kv_bytes_per_token
        self.free_at = 0.0  # when the stream finishes what it was given
        self._writes: deque[tuple[int, float]] = deque()  # (last ack id of a copy, when it lands)
        self._issued = 0  # highest ack id given to the stream
        self._landed = 0  # highest ack id known to have landed
        self.written_tokens = 0

    def copy_time(self, tokens: int) -> float:
        return tokens * self.kv / self.bytes_per_s

    def issue(self, pending: list[tuple[int, Any]], start: float) -> None:
        """Queue the copies of backups not queued yet (`pending`: the tree's (ack id, node) list)."""
        issued = self._issued
        top = issued  # the highest new ack id (every new one is above `issued`)
        tokens = 0
        for ack, node in pending:
            if ack > issued:
                tokens += len(node.key)
                if ack > top:
                    top = ack
        if top == issued:  # nothing new
            return
        self.free_at = max(start, self.free_at) + self.copy_time(tokens)
        self._issued = top
        self._writes.append((self._issued, self.free_at))
        self.written_tokens += tokens

    def landed_upto(self, now: float) -> int:
        """The highest ack id whose copy has landed by `now` (copies land in order)."""
        while self._writes and self._writes[0][1] <= now:
            self._landed = self._writes.popleft()[0]
        return self._landed

    def reset(self) -> None:
        self._writes.clear()
        self.free_at = 0.0
        self._issued = self._landed = 0


class HostTierClock:
    """The engine's hooks for the mechanisms above: which acks have landed, the copies a forward issued,
    and the scheduler's wait for write-back copies."""

    def __init__(
        self, mechanisms: tuple[str, ...], gb_per_s: float, kv_bytes_per_token: int, write_back: bool
    ):
        unknown = set(mechanisms) - set(HICACHE_MECHANISMS)
        if unknown:
            raise ValueError(
                f"unknown HiCache mechanisms {sorted(unknown)} (known: {', '.join(HICACHE_MECHANISMS)})"
            )
        self.mechanisms = mechanisms
        self.link = HostLink(gb_per_s, kv_bytes_per_token)
        self.write_back = write_back
        self._written_before = 0
        self.sm_share = 0.0  # copy_sm_share(profile), set by `of`

    @classmethod
    def of(cls, config: Any) -> HostTierClock:
        """The clock an EngineConfig with HiCache on asks for."""
        clock = cls(
            tuple(config.hicache_mechanisms),
            config.profile.h2d_gb_per_s,
            config.kv_bytes_per_token,
            config.hicache_write_policy == "write_back",
        )
        clock.sm_share = copy_sm_share(config.profile)
        return clock

    def after_copies(self, tree: Any, now: float, schedule: Any) -> Any:
        """Nothing fits while copies in flight hold their nodes: wait until they land, then schedule."""
        wait = max(0.0, self.link.free_at - now)
        tree.ack_transfers()
        batch = schedule(now)
        if batch is not None:
            batch.duration += wait
        return batch

    @property
    def overlap(self) -> bool:
        return "layer_overlap" in self.mechanisms

    def step(self, tree: Any, now: float) -> int | None:
        """A scheduler step starts: the last backup ack it may take at `now` (None: all of them)."""
        self._written_before = tree.stats.host_written_tokens
        return self.link.landed_upto(now) if "timed_write_acks" in self.mechanisms else None

    def after_forward(self, tree: Any, end: float) -> None:
        """The write-through copies the forward's results issued start when it ends."""
        if "timed_write_acks" in self.mechanisms or "copy_sm_share" in self.mechanisms:
            self.link.issue(tree.pending_backups(), end)

    def write_steal_s(self, now: float, duration: float) -> float:
        """What a forward starting at `now` loses to the write-through copies still running beside it."""
        if "copy_sm_share" not in self.mechanisms:
            return 0.0
        return copy_steal_s(self.link.free_at - now, duration, self.sm_share)

    def blocked_s(self, tree: Any) -> float:
        """Under write_back, the step waits for the copies its evictions made."""
        if not (self.write_back and "blocking_write_back" in self.mechanisms):
            return 0.0
        return self.link.copy_time(tree.stats.host_written_tokens - self._written_before)

    def reset(self) -> None:
        self.link.reset()
