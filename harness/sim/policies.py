"""Eviction policy keys of SGLang 0.5.23 (mem_cache/evict_policy.py): the smallest key is evicted first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

POLICIES = ("lru", "lfu", "fifo", "mru", "filo", "priority", "slru", "tlru")
# Parameters each policy's strategy accepts, with SGLang's defaults.
_PARAMS: dict[str, dict[str, int]] = {
    "slru": {"protected_threshold": 2},
    "tlru": {"threshold": 0, "next_prompt_estimate": 0},
}
_CLASS = {
    "lru": "LRUStrategy",
    "lfu": "LFUStrategy",
    "fifo": "FIFOStrategy",
    "mru": "MRUStrategy",
    "filo": "FILOStrategy",
    "priority": "PriorityStrategy",
    "slru": "SLRUStrategy",
    "tlru": "TLRUStrategy",
}

KeyFn = Callable[[Any], Any]


def validate(policy: str, config: dict | None) -> dict[str, int]:
    """Return the policy's effective parameters; raise ValueError as SGLang would at startup."""
    name = policy.lower()
    if name not in POLICIES:
        supported = "', '".join(POLICIES)
        raise ValueError(f"Unknown eviction policy: {name}. Supported policies: '{supported}'.")
    params = dict(_PARAMS.get(name, {}))
    for k, v in (config or {}).items():
        if k not in params:
            raise ValueError(f"{_CLASS[name]}.__init__() got an unexpected keyword argument '{k}'")
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"--radix-eviction-policy-config: '{k}' must be an integer, got {v!r}")
        params[k] = v
    if name == "tlru":
        t, q = params["threshold"], params["next_prompt_estimate"]
        if t < 0 or q < 0:
            raise ValueError(
                "--radix-eviction-policy tlru requires non-negative 'threshold' and "
                f"'next_prompt_estimate' in --radix-eviction-policy-config, got {t} and {q}."
            )
        if t <= q:
            raise ValueError(
                "--radix-eviction-policy tlru needs 'threshold' greater than "
                f"'next_prompt_estimate' in --radix-eviction-policy-config, got {t} <= {q}; "
                "otherwise no tokens are ever TEL-safe and T-LRU is exactly LRU."
            )
    return params


def key_function(policy: str, config: dict | None = None) -> KeyFn:
    """The heap key of a node for `policy` (validated), as a tuple whose ties fall back to last_access_time
    as SGLang's TreeNode.__lt__ does; reads the node's fields at call time."""
    name = policy.lower()
    p = validate(name, config)
    if name == "lru":
        return lambda n: (n.last_access_time,)
    if name == "lfu":
        return lambda n: (n.hit_count, n.last_access_time)
    if name == "fifo":
        return lambda n: (n.creation_time, n.last_access_time)
    if name == "mru":
        return lambda n: (-n.last_access_time,)
    if name == "filo":
        return lambda n: (-n.creation_time, n.last_access_time)
    if name == "priority":
        return lambda n: (n.priority, n.last_access_time)
    if name == "slru":
        th = p["protected_threshold"]
        return lambda n: (1 if n.hit_count >= th else 0, n.last_access_time)
    threshold, estimate = p["threshold"], p["next_prompt_estimate"]

    def tlru(n: Any) -> tuple[int, float]:
        budget = max(n.tlru_history_len + estimate - threshold, 0)
        safe = (n.tlru_prefix_len - len(n.key)) >= budget
        return (-1 if safe else 0, n.last_access_time)

    return tlru
