"""The oracle scenarios run through the sim's own tree, op for op as driver.py runs them through SGLang's."""

from __future__ import annotations

import itertools

from harness.sim.hicache import HostTier
from harness.sim.radix import RadixCache, serve_request


def run_local_host(spec: dict) -> list:
    """A host-tier scenario (hostops.py) through the sim's tree with a HostTier of the same size."""
    from .hostops import run_host_ops

    tree = RadixCache(
        page_size=spec.get("page_size", 1),
        policy=spec["policy"],
        policy_config=spec.get("policy_config") or None,
        host=HostTier(spec["host"], write_policy=spec["write_policy"]),
        flavor="unified",
    )
    st = tree.stats
    return run_host_ops(
        tree,
        spec["ops"],
        lambda t: [t.host_size(), st.evicted_tokens, st.backup_calls, st.load_back_calls],
    )


def run_local(spec: dict, mode: str = "sglang") -> list:
    if spec.get("host") is not None:
        return run_local_host(spec)
    counter = itertools.count(1)
    tree = RadixCache(
        page_size=spec.get("page_size", 1),
        policy=spec["policy"],
        policy_config=spec.get("policy_config") or None,
        clock=lambda: float(next(counter)),
        flavor=spec.get("flavor", "radix"),
        mode=mode,
    )
    tree.evict_log = []
    out: list = []
    locks: list = []
    for op in spec["ops"]:
        kind = op[0]
        if kind == "insert":
            out.append(
                tree.insert(
                    op[1], priority=op[2] if len(op) > 2 else 0, inserted_len=op[3] if len(op) > 3 else 0
                )
            )
        elif kind == "match":
            out.append(tree.match_prefix(op[1]).device_len)
        elif kind == "lock":
            m = tree.match_prefix(op[1])
            tree.inc_lock_ref(m.last_device_node)
            locks.append(m.last_device_node)
            out.append(m.device_len)
        elif kind == "unlock":
            tree.dec_lock_ref(locks[op[1]])
            out.append(None)
        elif kind == "evict":
            del tree.evict_log[:]
            freed = tree.evict(op[1])
            out.append([freed, [list(k) for k in tree.evict_log]])
        elif kind == "sizes":
            out.append([tree.evictable_size(), tree.protected_size()])
        elif kind == "serve":
            out.append(list(serve_request(tree, op[1], op[2])))
        elif kind == "trace":
            hits = 0
            before = tree.stats.evicted_tokens
            for key in op[1]:
                hits += serve_request(tree, key, op[2])[0]
            out.append([hits, tree.stats.evicted_tokens - before, tree.device_size()])
        else:
            raise ValueError(f"unknown op {kind!r}")
    return out
