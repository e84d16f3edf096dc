"""The routing policies of SGLang's gateway (smg 1.13.0), named once: the spec check (`router.policy`),
the routing what-if (its replay classes register under these names), advise and `harness whatif`'s help
all read this list, so a new policy is one entry here and one replay class (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RouterPolicy:
    """One smg `--policy` choice that routes plain (not prefill/decode-split) workers by request."""

    name: str
    advised: bool = False  # `advise --replicas` compares it (the others draw as one of these does)


# in the order the routing what-if prints them (`--router all`)
REGISTRY: tuple[RouterPolicy, ...] = (
    RouterPolicy("round_robin", advised=True),
    RouterPolicy("random"),
    RouterPolicy("cache_aware", advised=True),
    RouterPolicy("prefix_hash", advised=True),
    RouterPolicy("consistent_hashing"),
    RouterPolicy("power_of_two"),
    RouterPolicy("least_load", advised=True),
)
ROUTER_POLICIES: tuple[str, ...] = tuple(p.name for p in REGISTRY)
ADVISED_POLICIES: tuple[str, ...] = tuple(p.name for p in REGISTRY if p.advised)
DEFAULT_POLICY = "cache_aware"  # smg's own default


def policy_list() -> str:
    """The names for a help text or an error message."""
    return ", ".join(ROUTER_POLICIES)
