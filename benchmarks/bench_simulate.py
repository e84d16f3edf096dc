#!/usr/bin/env python3
"""Virtual-time speed of `harness.sim.simulate.simulate` (the engine `harness whatif` replays through).

Replays N requests (shared system prompts + a unique question, fixed answer length, Poisson arrivals)
through the scheduler on a card profile and prints requests/s and decode steps/s of wall time, plus
a digest of the results so two runs (before/after a change) can be checked for identical output.

    .venv/bin/python benchmarks/bench_simulate.py [--requests 5000] [--output 32] [--rate 20] [--pool 36000]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.sim.engine import EngineConfig, SimRequest  # noqa: E402
from harness.sim.simulate import simulate  # noqa: E402


def workload(n: int, out: int, rate: float, seed: int) -> list[SimRequest]:
    rng = random.Random(seed)
    systems = [[rng.randrange(5000) for _ in range(rng.randint(200, 800))] for _ in range(16)]
    t, reqs = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        prompt = rng.choice(systems) + [rng.randrange(5000) for _ in range(rng.randint(20, 120))]
        reqs.append(SimRequest(rid=str(i), input_ids=prompt, output_ids=list(range(out)), arrival=t))
    return reqs


def digest(done: list[SimRequest]) -> str:
    h = hashlib.sha256()
    for r in sorted(done, key=lambda r: int(r.rid)):
        h.update(repr((r.rid, r.first_token_time, r.finish_time, r.cached_device, r.retractions)).encode())
    return h.hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--output", type=int, default=32, help="answer tokens per request")
    ap.add_argument("--rate", type=float, default=20.0, help="arrivals per (virtual) second")
    ap.add_argument("--pool", type=int, default=36_000)
    ap.add_argument("--card", default="l4-8b")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs (CPU time)")
    ap.add_argument("--no-jump", action="store_true", help="step every decode (the old path)")
    a = ap.parse_args()
    cfg = EngineConfig(pool_tokens=a.pool, card=a.card)
    best = float("inf")
    for _ in range(a.repeat):
        reqs = workload(a.requests, a.output, a.rate, a.seed)
        steps: list = []
        t0 = time.process_time()
        done = simulate(reqs, cfg, jump=not a.no_jump, on_step=steps.append)
        best = min(best, time.process_time() - t0)
    last = max(r.finish_time or 0.0 for r in done)
    print(
        f"{len(done)} requests x {a.output} tokens, pool {a.pool}, card {a.card}, rate {a.rate}/s, "
        f"jump {'off' if a.no_jump else 'on'}: {best:.2f} s CPU, {len(done) / best:,.0f} req/s, "
        f"{len(steps):,} engine steps, {last:,.0f} s virtual ({last / best:,.0f}x real time), "
        f"digest {digest(done)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
