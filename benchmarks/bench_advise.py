#!/usr/bin/env python3
"""Speed of `harness advise`, side by side in one run (issue 24's targets).

1. The one-pass curve on the Mooncake conversation trace (12,031 requests) beside the exact replay
   (`harness whatif --mode exact`, lru) of one pool: seconds, the ratio, and the curve's deviation from
   the replay at every pool in --pools (the exactness figure).
2. The whole advise on the same trace (curve, working set, the exact grid): seconds and grid points.
3. With --million: a 1,000,000-request synthetic block trace's curve in a child process: seconds and
   the child's peak RSS.
4. With --command: `harness advise` as a user runs it (issue 45's targets: the 12k trace under 60 s, a
   1M-request trace under 10 min, on 2 cores): wall seconds on the conversation trace with and without
   `--replicas 2`, and on the trace copied to --large requests (bench_trace.py's synthetic_trace).

    .venv/bin/python benchmarks/bench_advise.py [--pools 300,1000,2000,5000,20000,50000,100000] [--pool 20000]
        [--workers 2] [--million] [--command [--large 100000]]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.advise.advice import Options, advise, check  # noqa: E402
from harness.advise.curve import stack_distances  # noqa: E402
from harness.whatif.grid import Config  # noqa: E402
from harness.whatif.inputs import read_mooncake  # noqa: E402
from harness.whatif.replay import replay_sequential  # noqa: E402
from harness.whatif.trace import Trace, TraceRequest  # noqa: E402

TRACE = REPO / "tests" / "data" / "mooncake" / "conversation_trace.jsonl"


def synthetic(n: int, seed: int = 0) -> Trace:
    """n requests over 20,000 sessions: each turn extends its session's prefix by 1-4 blocks, sessions
    restart after 8 turns, and 1 in 20 requests is a one-off; about 12 blocks per request."""
    rng = random.Random(seed)
    prefix: dict[int, list[int]] = {}
    turns: dict[int, int] = {}
    nxt = 0
    reqs = []
    for i in range(n):
        if rng.random() < 0.05:
            key = list(range(nxt, nxt + rng.randint(4, 16)))
            nxt += len(key)
        else:
            s = rng.randrange(20_000)
            if turns.get(s, 0) >= 8:
                prefix.pop(s, None)
                turns[s] = 0
            key = prefix.get(s, []) + list(range(nxt, nxt + rng.randint(1, 4)))
            nxt += 4
            prefix[s] = key
            turns[s] = turns.get(s, 0) + 1
        reqs.append(TraceRequest(tuple(key), len(key) * 512, i * 0.01))
    return Trace("synthetic", reqs, unit=512, kind="blocks")


def million() -> None:
    t0 = time.perf_counter()
    trace = synthetic(1_000_000)
    t1 = time.perf_counter()
    sd = stack_distances(trace)
    t2 = time.perf_counter()
    pages = sum(len(r.key) for r in trace.requests)
    print(
        f"1M synthetic: {len(trace.requests):,} requests, {pages:,} pages, {sd.distinct_pages:,} distinct; "
        f"built in {t1 - t0:.1f} s, curve in {t2 - t1:.1f} s; ceiling {sd.ceiling:.1%} at {sd.knee_pool:,} blocks"
    )


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the grid's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


COMMAND = ["--card", "h100", "--model", "llama-3.1-8b-instruct", "--host-memory", "256", "--json"]


def command(large: int, workers: int) -> None:
    """`harness advise` in a child process, wall seconds each (the load average says how shared the cores were)."""
    import tempfile

    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_trace import synthetic_trace

    def timed(trace: Path, *extra: str) -> float:
        argv = [sys.executable, "-m", "harness", "advise", str(trace), *COMMAND, "--workers", str(workers)]
        t0 = time.perf_counter()
        subprocess.run([*argv, *extra], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        return time.perf_counter() - t0

    for extra in ((), ("--replicas", "2")):
        s = timed(TRACE, *extra)
        print(f"advise {' '.join(extra) or '(one replica)'} on the 12,031-request trace: {s:.1f} s wall "
              f"(load average {os.getloadavg()[0]:.1f})")  # fmt: skip
    if large:
        with tempfile.TemporaryDirectory() as d:
            big = Path(d) / f"trace-{large}.jsonl"
            synthetic_trace(big, large)
            s = timed(big)
            print(f"advise on a {large:,}-request trace: {s:.1f} s wall, {s / large * 1e6:.0f} us a request "
                  f"(load average {os.getloadavg()[0]:.1f})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pools", default="300,1000,2000,5000,10000,20000,50000,100000")
    ap.add_argument("--pool", type=int, default=20_000, help="the pool the exact replay is timed at")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--million", action="store_true", help="also the 1,000,000-request trace (minutes)")
    ap.add_argument("--child-million", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--command", action="store_true", help="only `harness advise` end to end (issue 45)")
    ap.add_argument("--large", type=int, default=0, help="with --command: also a trace of this many requests")
    a = ap.parse_args()
    if a.command:
        command(a.large, a.workers)
        return
    if a.child_million:
        million()
        return
    trace = read_mooncake(TRACE)
    t0, c0 = time.perf_counter(), time.process_time()
    sd = stack_distances(trace)
    curve_s, curve_cpu = time.perf_counter() - t0, time.process_time() - c0
    c0 = time.process_time()
    exact = replay_sequential(trace, Config("lru", a.pool, mode="exact"))
    exact_cpu = time.process_time() - c0
    print(
        f"conversation trace ({len(trace.requests):,} requests): one-pass curve {curve_s:.2f} s wall, "
        f"{curve_cpu:.2f} CPU s (every pool); one exact replay at {a.pool:,} blocks {exact.seconds:.2f} s wall, "
        f"{exact_cpu:.2f} CPU s; curve / replay = {curve_cpu / exact_cpu:.2f} (CPU)"
    )
    worst = 0.0
    for pool in (int(p) for p in a.pools.split(",")):
        r = exact if pool == a.pool else replay_sequential(trace, Config("lru", pool, mode="exact"))
        d = (sd.hit_rate(pool) - r.hit_rate) * 100
        worst = max(worst, abs(d))
        print(
            f"  pool {pool:>7,}: curve {sd.hit_rate(pool):.4%}  exact replay {r.hit_rate:.4%}  ({d:+.3f} pt)"
        )
    print(f"  largest deviation {worst:.3f} points")
    # blocks of 512 tokens: 20,000 of them are 1.3 TB of 8B KV, so the host memory is set to fit the ratios
    opts = Options(card="h200", pool=a.pool, host_memory_gb=100_000, workers=a.workers)
    t0 = time.perf_counter()
    cpu0 = _cpu()
    adv = advise(TRACE, opts, check([TRACE], opts))
    total = time.perf_counter() - t0
    cpu = _cpu() - cpu0
    print(
        f"whole advise: {total:.1f} s wall, {cpu:.1f} CPU s (/{a.workers} = {cpu / a.workers:.1f} s on idle cores; "
        f"load average {os.getloadavg()[0]:.1f}) with {a.workers} workers ({len(adv.candidates)} exact grid points; "
        f"curve {adv.seconds['curve']:.2f} s, working set {adv.seconds['working_set']:.2f} s, "
        f"grid {adv.seconds['grid']:.1f} s)"
    )
    if a.million:
        subprocess.run([sys.executable, __file__, "--child-million"], check=True)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"1M synthetic: peak RSS {peak:,.0f} MiB")


if __name__ == "__main__":
    main()
