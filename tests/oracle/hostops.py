"""Host-tier oracle scenarios: one op list, replayed on SGLang's UnifiedRadixCache (driver.py) and the sim.

Ops: ["insert", toks, priority], ["match", toks] -> [device, host], ["lock", toks] (match + lock the device
node), ["unlock", i], ["evict", n] -> freed, ["evict_host", n] -> freed, ["serve", toks, capacity] ->
[device hit, host hit] (serve_request: ack, match, load back, evict, insert), ["ack"] (every copy lands).
After each op both sides report [result, evictable, protected, host tokens used, device tokens evicted so
far, backups so far, load-backs so far].
"""

from __future__ import annotations

import random


def run_host_ops(tree, ops: list, counters) -> list:
    from harness.sim.radix import serve_request

    out: list = []
    locks: list = []
    for op in ops:
        kind = op[0]
        if kind == "insert":
            res = tree.insert(op[1], priority=op[2])
        elif kind == "match":
            m = tree.match_prefix(op[1])
            res = [m.device_len, m.host_len]
        elif kind == "lock":
            m = tree.match_prefix(op[1])
            tree.inc_lock_ref(m.last_device_node)
            locks.append(m.last_device_node)
            res = m.device_len
        elif kind == "unlock":
            tree.dec_lock_ref(locks[op[1]])
            res = None
        elif kind == "evict":
            res = tree.evict(op[1])
        elif kind == "evict_host":
            res = tree.evict_host(op[1])
        elif kind == "serve":
            res = list(serve_request(tree, op[1], op[2]))
        elif kind == "ack":
            tree.ack_transfers()
            res = None
        else:
            raise ValueError(f"unknown op {kind!r}")
        out.append([res, tree.evictable_size(), tree.protected_size(), *counters(tree)])
    return out


def random_host_ops(seed: int, n_ops: int = 300, capacity: int = 64) -> list:
    """Growing sessions over shared prefixes, served into a small device pool so nodes move between tiers."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1000) for _ in range(rng.randrange(8, 24))] for _ in range(3)]
    seqs: list[list[int]] = []
    ops: list = []
    locks = 0
    unlocked: list[int] = []
    for _ in range(n_ops):
        r = rng.random()
        if r < 0.40 or not seqs:
            if seqs and rng.random() < 0.6:
                base = rng.choice(seqs)
                base = base[: rng.randrange(len(base) + 1)]
            else:
                base = list(rng.choice(prefixes))
            s = base + [rng.randrange(1000) for _ in range(rng.randrange(1, 14))]
            s = s[:capacity]
            seqs.append(s)
            if rng.random() < 0.8:
                ops.append(["serve", s, capacity])
            else:
                ops.append(["insert", s, rng.randrange(3)])
        elif r < 0.55:
            s = rng.choice(seqs)
            ops.append(["serve", s[: rng.randrange(1, len(s) + 1)], capacity])
        elif r < 0.65:
            s = rng.choice(seqs)
            tail = [rng.randrange(1000)] if rng.random() < 0.5 else []
            ops.append(["match", s[: rng.randrange(1, len(s) + 1)] + tail])
        elif r < 0.70 and locks < 4:
            ops.append(["lock", rng.choice(seqs)])
            unlocked.append(locks)
            locks += 1
        elif r < 0.75 and unlocked:
            ops.append(["unlock", unlocked.pop(rng.randrange(len(unlocked)))])
        elif r < 0.85:
            ops.append(["evict", rng.randrange(1, 24)])
        elif r < 0.88:
            ops.append(["evict_host", rng.randrange(1, 16)])
        else:
            ops.append(["ack"])
    ops.append(["ack"])
    return ops
