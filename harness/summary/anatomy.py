"""The miss anatomy of a point: where every prompt token went, in tokens (harness.summarize.anatomy).

A hit rate alone does not say which lever would raise it; the classes do: `first_seen` no cache could
catch, `evicted` a bigger pool or host tier could, `elsewhere` a router that sends a prefix where it is
held could, `in_flight` only fewer requests in flight (or holding a prefix's later requests until its
first finishes) could. The classes sum to `prompt_tokens` exactly; `hit` is the usage hit rate's numerator.
"""

from __future__ import annotations

from pydantic import Field, StrictInt, StrictStr

from harness.summary.record import Num, Record

CLASSES = ("hit", "first_seen", "evicted", "elsewhere", "in_flight")
MISSES = CLASSES[1:]
WORDS = {  # a class in a sentence: "58 % of the misses were <words>"
    "first_seen": "first-seen prefixes (no earlier request had them)",
    "evicted": "evicted prefixes (the server had held them)",
    "elsewhere": "prefixes held by another worker (the routing lost them)",
    "in_flight": "prefixes still in flight in an earlier request (concurrency lost them)",
}


class Lever(Record):
    """What the what-if engine says one change would have recovered of the evicted tokens."""

    change: StrictStr = Field(description="the configuration replayed, e.g. `a host tier of 2x the pool`")
    held_share: Num = Field(description="of the evicted tokens, the share that configuration hit (0–1)")
    hit_rate: Num = Field(description="the replayed hit rate under that configuration")
    base_hit_rate: Num = Field(description="the replayed hit rate on the server's own configuration")


class Anatomy(Record):
    """Prompt tokens of the ok requests by what became of them; the classes sum to `prompt_tokens`."""

    prompt_tokens: StrictInt = 0
    hit: StrictInt = Field(
        0, description="tokens the server reported cached (usage): the hit rate's numerator"
    )
    first_seen: StrictInt = Field(
        0,
        description="no earlier request of the point had that prefix anywhere (with the last prompt token "
        "and a partial last page: no cache catches them)",
    )
    evicted: StrictInt = Field(
        0,
        description="the server that got the request had held that prefix (its prefill had finished "
        "before this request was sent) and no longer had it in any tier",
    )
    elsewhere: StrictInt = Field(
        0, description="behind a gateway: another worker held that prefix, so routing lost it"
    )
    in_flight: StrictInt = Field(
        0,
        description="an earlier request with that prefix was sent but not yet prefilled (its prompt) or "
        "finished (its answer) when this one was sent: concurrency lost it",
    )

    def misses(self) -> int:
        return self.prompt_tokens - self.hit

    def tokens(self, cls: str) -> int:
        return int(getattr(self, cls))

    def dominant(self) -> str | None:
        """The largest miss class (None without misses)."""
        if self.misses() <= 0:
            return None
        return max(MISSES, key=lambda c: (self.tokens(c), -MISSES.index(c)))


class MissAnatomy(Anatomy):
    """A point x seed's anatomy (the median: the seed at the median hit rate, so it still sums exactly)."""

    evicted_from: StrictStr = Field(
        "device",
        description="the deepest tier configured, which `evicted` tokens fell out of: device, host, storage",
    )
    hit_tiers: dict[str, StrictInt] | None = Field(
        None,
        description="`hit` split by tier (device, host, storage) where the server's usage or counters split it",
    )
    hit_tiers_source: StrictStr | None = Field(
        None, description="`usage` or `counters`: where `hit_tiers` came from"
    )
    workers: dict[str, Anatomy] = Field(
        default_factory=dict, description="behind a gateway: each worker's own anatomy (`{w0: …}`)"
    )
    lever: Lever | None = Field(
        None, description="the what-if replay of a bigger tier (one instance, when tokens were evicted)"
    )
    seed: StrictStr | None = Field(None, description="the median: which seed it is")
    basis: StrictStr = Field(
        "exact token trees of the requests as sent, in send order and by worker (harness.summarize.anatomy)"
    )
