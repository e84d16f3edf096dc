"""The configurations a what-if run replays: every policy x pool x host ratio x write policy asked for, and
the empty cache a configuration starts from (`new_cache`: one instance, or each replica of a routed fleet).

Checked here, before any replay, with the same one-line errors `harness whatif` has always given
(they name the flag a value came from).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.errors import HarnessError
from harness.sim.hicache import WRITE_POLICIES, HostTier, host_pool_tokens, load_back_units
from harness.sim.policies import validate
from harness.sim.radix import RadixCache


@dataclass(frozen=True)
class Config:
    policy: str
    pool: int  # in key units (tokens, or blocks for block traces)
    host_ratio: float = 0.0
    write_policy: str = "write_through"
    page_size: int = 1
    mode: str = "sglang"
    policy_config: tuple = ()  # sorted (key, value) pairs
    tree: str = "unified"  # SGLang tree flavor: "unified" (0.5.23's server) or "radix" (plain RadixCache)
    storage: str = (
        ""  # L3 backend (harness.sim.storage.BACKENDS); "" = none. Needs a host tier and the engine
    )
    storage_policy: str = "timeout"  # --storage-prefetch-policy (SGLang 0.5.23's default)


def _own_config(policy: str, tree: str, policy_config: dict[str, Any]) -> dict[str, Any]:
    """The part of --policy-config this policy takes (slru, tlru), checked as SGLang would."""
    own = {k: v for k, v in policy_config.items() if policy in ("slru", "tlru")}
    if policy == "tlru" and tree == "radix":
        raise HarnessError(
            "--tree radix: --policy tlru needs the unified tree (SGLang's plain RadixCache has no "
            "T-LRU bookkeeping); drop tlru or use --tree unified"
        )
    if policy == "tlru" and not own:
        raise HarnessError(
            '--policy tlru needs --policy-config \'{"threshold": T, "next_prompt_estimate": Q}\''
        )
    if policy == "slru":
        own = {k: v for k, v in own.items() if k == "protected_threshold"}
    if policy == "tlru":
        own = {k: v for k, v in own.items() if k in ("threshold", "next_prompt_estimate")}
    try:
        validate(policy, own)
    except ValueError as e:
        raise HarnessError(f"--policy {policy}: {e}") from None
    return own


def build_grid(
    policies: Sequence[str],
    pools: Sequence[int],
    host_ratios: Sequence[float],
    write_policies: Sequence[str],
    policy_config: dict[str, Any] | None = None,
    page_size: int = 1,
    mode: str = "sglang",
    tree: str = "unified",
    storages: Sequence[str] = ("",),
    storage_policy: str = "timeout",
) -> list[Config]:
    """Every configuration, policy-major; a write policy and an L3 backend vary only where there is a host
    tier."""
    from harness.sim.storage import BACKENDS, PREFETCH_POLICIES

    for b in storages:
        if b and b not in BACKENDS:
            raise HarnessError(f"--storage-backend: {b!r} is not one of {', '.join(BACKENDS)}")
    if storage_policy not in PREFETCH_POLICIES:
        raise HarnessError(
            f"--storage-prefetch-policy: {storage_policy!r} is not one of {', '.join(PREFETCH_POLICIES)}"
        )
    for w in write_policies:
        if w not in WRITE_POLICIES:
            raise HarnessError(f"--write-policy: {w!r} is not one of {', '.join(WRITE_POLICIES)}")
    for n in pools:
        if n <= 0:
            raise HarnessError(f"--pool: {n} must be positive")
    if page_size < 1:
        raise HarnessError(f"--page-size: {page_size} must be >= 1")
    out = []
    for pol in policies:
        own = tuple(sorted(_own_config(pol, tree, policy_config or {}).items()))
        for pool in pools:
            for ratio in host_ratios:
                for w in write_policies if ratio > 0 else write_policies[:1]:
                    for b in storages if ratio > 0 else ("",):
                        out.append(Config(pol, pool, ratio, w, page_size, mode, own, tree, b, storage_policy))
    return out


def new_cache(cfg: Config, key_tokens: int = 1) -> RadixCache:
    """One configuration's empty tree and host tier on a counter clock (one per replica when routed);
    key_tokens: the tokens a key element stands for (a block trace's block)."""
    counter = itertools.count(1)
    host = (
        HostTier(
            host_pool_tokens(cfg.pool, page_size=cfg.page_size, ratio=cfg.host_ratio)[
                0
            ],  # as SGLang sizes it
            write_policy=cfg.write_policy,
            load_back_threshold=load_back_units(key_tokens),
        )
        if cfg.host_ratio > 0
        else None
    )
    return RadixCache(
        page_size=cfg.page_size,
        policy=cfg.policy,
        policy_config=dict(cfg.policy_config) or None,
        clock=lambda: float(next(counter)),
        host=host,
        mode=cfg.mode,
        flavor=cfg.tree,
    )
