"""Scripted /metrics pages for tests/helpers/fakeserver.py `--metrics-script`: the counters of a server that
fails (or does not) the way each health verdict describes, one page per request received.

Used by tests/verdicts/test_health_independent.py and the fault report's over-eviction row (make faults).
"""

from __future__ import annotations

import json
from pathlib import Path

POOL = 1000  # the scripted server's device pool (sglang:max_total_num_tokens)

# per request: tokens evicted, free at the page (kv_available_tokens), backed up to host (0: no host tier),
# host hits and load-backs
SCRIPTS: dict[str | None, dict[str, int]] = {
    # backed up and evicted, prompts return off the device, and no host hit ever
    "host-tier-inert": {"evicted": 150, "free": 50, "backup": 200},
    # every load-back evicts 1,000 tokens and 800 of them are still free after the tick
    "evict-storm": {"evicted": 1000, "free": 800, "backup": 200, "host_hits": 200, "load_back": 200},
    # a device-only server: three quarters of each eviction still free after it, 30 % of the pool
    "over-eviction": {"evicted": 400, "free": 300, "backup": 0},
    # the host serves what returns; eviction matches what the allocations needed
    None: {"evicted": 150, "free": 20, "backup": 200, "host_hits": 100, "load_back": 100},
}


def page(k: int, *, evicted: int, free: int, backup: int, host_hits: int = 0, load_back: int = 0) -> dict:
    """The page after k requests."""
    m: dict[str, float] = {
        "sglang:max_total_num_tokens": POOL,
        "sglang:num_requests_total": k,
        "sglang:evicted_tokens_total": evicted * k,
        "sglang:load_back_tokens_total": load_back * k,
        "sglang:kv_available_tokens": free if k else POOL,
        'sglang:cached_tokens_total{cache_source="device"}': 8 * k,
    }
    if backup:  # a host tier
        m["sglang:hicache_host_total_tokens"] = 8000
        m["sglang:hicache_backup_tokens_total"] = backup * k
        m["sglang:hicache_host_used_tokens"] = backup * k
    if host_hits:
        m['sglang:cached_tokens_total{cache_source="host"}'] = host_hits * k
    return {"after_requests": k, "metrics": m}


def write_script(path: Path, verdict: str | None, requests: int) -> Path:
    """The --metrics-script file of `verdict`'s server (None: a healthy one), pages 0..requests."""
    path.write_text(json.dumps({"pages": [page(k, **SCRIPTS[verdict]) for k in range(requests + 1)]}))
    return path
