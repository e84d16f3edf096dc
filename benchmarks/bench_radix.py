#!/usr/bin/env python3
"""Speed of the sim's radix tree against SGLang 0.5.23's own, replaying the Mooncake trace by blocks.

One token per 512-token block hash id, requests one at a time through `serve_request` (match, evict
max(shortfall, page) with the prefix locked, insert), at small and large pools. SGLang's tree runs in
the oracle venv (tests/oracle/oracle_env.py) when it has been built; otherwise only ours is timed.
Prints requests/s for both and the ratio, and hit counts so agreement is visible at the same time.

    .venv/bin/python benchmarks/bench_radix.py [--pools 2000,20000,100000] [--policies lru,lfu,slru] [--limit N]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
ORACLE = REPO / "tests" / "oracle"  # run as scripts: oracle_env.py finds the venv, driver.py runs in it

from harness.sim.radix import RadixCache, serve_request  # noqa: E402

TRACE = Path(__file__).resolve().parents[1] / "tests" / "data" / "mooncake" / "conversation_trace.jsonl"


def load_keys(path: Path, limit: int | None) -> list[list[int]]:
    keys = []
    with path.open() as f:
        for line in f:
            keys.append(json.loads(line)["hash_ids"])
            if limit and len(keys) >= limit:
                break
    return keys


def ours(keys: list[list[int]], policy: str, pool: int) -> dict:
    counter = itertools.count(1)
    tree = RadixCache(policy=policy, clock=lambda: float(next(counter)))
    hits = 0
    t0 = time.perf_counter()
    for key in keys:
        hits += serve_request(tree, key, pool)[0]
    return {"seconds": time.perf_counter() - t0, "hits": hits}


def theirs(keys: list[list[int]], configs: list[tuple[str, int]]) -> list[dict] | None:
    found = subprocess.run(
        [sys.executable, str(ORACLE / "oracle_env.py"), "--if-built"], capture_output=True, text=True
    )
    if found.returncode != 0:
        print("SGLang oracle venv not built (python tests/oracle/oracle_env.py builds it): timing ours only")
        return None
    specs = [{"policy": pol, "page_size": 1, "bench": keys, "pool": pool} for pol, pool in configs]
    r = subprocess.run(
        [found.stdout.strip(), str(ORACLE / "driver.py")],
        input=json.dumps(specs),
        capture_output=True,
        text=True,
        env=dict(os.environ, HARNESS_REPO=str(REPO), PYTHONWARNINGS="ignore"),
        cwd=str(REPO),
    )
    if r.returncode != 0 or "__RESULTS__" not in r.stdout:
        print(f"SGLang run failed: {r.stderr[-2000:]}")
        return None
    return json.loads(r.stdout.rsplit("__RESULTS__", 1)[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--pools", default="2000,20000,100000", help="device pools in blocks")
    ap.add_argument("--policies", default="lru,lfu,slru")
    ap.add_argument("--limit", type=int, default=None, help="first N requests only")
    ap.add_argument("--no-sglang", action="store_true")
    a = ap.parse_args()
    keys = load_keys(a.trace, a.limit)
    configs = [(p, int(s)) for s in a.pools.split(",") for p in a.policies.split(",")]
    mine = [ours(keys, p, s) for p, s in configs]
    ref = None if a.no_sglang else theirs(keys, configs)
    n = len(keys)
    print(f"{n} requests, {sum(map(len, keys))} blocks; one core each; requests/s")
    print(
        f"{'policy':<8}{'pool':>8}{'sim req/s':>12}{'sim s':>8}{'sglang req/s':>14}{'ratio':>8}  hits sim / sglang"
    )
    for (pol, pool), m, r in zip(configs, mine, ref or [None] * len(configs), strict=True):
        line = f"{pol:<8}{pool:>8}{n / m['seconds']:>12.0f}{m['seconds']:>8.2f}"
        if r is not None:
            line += (
                f"{n / r['seconds']:>14.0f}{r['seconds'] / m['seconds']:>7.1f}x  {m['hits']} / {r['hits']}"
            )
        else:
            line += f"{'-':>14}{'-':>8}  {m['hits']}"
        print(line)
    if not a.limit:
        from harness.whatif.grid import Config
        from harness.whatif.inputs import read_mooncake
        from harness.whatif.replay import replay

        trace = read_mooncake(a.trace)
        print("\nharness whatif, one full pass per configuration (hit accounting and TTFT model included):")
        for pol, pool, ratio in (("lru", 2000, 0), ("lfu", 20000, 0), ("slru", 100000, 0), ("lru", 20000, 2)):
            r = replay(trace, Config(pol, pool, host_ratio=ratio))
            print(f"  {pol:<5} pool {pool:>6} host x{ratio}: {r.seconds:.2f} s, hit rate {r.hit_rate:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
