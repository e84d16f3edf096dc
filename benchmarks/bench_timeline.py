"""What the /metrics timeline costs the client: CPU of the same point with the scraper off and on, side by side.

Starts one `harness serve-sim` (HiCache, metrics on) on 127.0.0.1, runs the same one-point spec through
the real runner with --metrics-interval-s 0 (off), 0.5 (the default) and 0.1, alternating, and prints the
client's CPU seconds per run (time.process_time: the load generator and the scraper thread together), the
scrapes taken, and the parse cost of one /metrics page. Not a test: figures depend on the machine.

Usage: .venv/bin/python benchmarks/bench_timeline.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.engines import TIMELINE_WATCH  # noqa: E402
from harness.spec import load_spec  # noqa: E402
from harness.sweep.bench import run_points  # noqa: E402
from harness.telemetry.timeline import METRICS_TIMELINE, read_timeline, watched_values  # noqa: E402
from tests.helpers import specs  # noqa: E402
from tests.helpers.procs import SimProc  # noqa: E402

SIM = ("--card-profile", "tiny-test", "--time-scale", "1.0", "--enable-metrics", "--max-total-tokens", "3000",
       "--enable-hierarchical-cache", "--hicache-ratio", "2")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "sim").mkdir()
        sim = SimProc(t / "sim", *SIM)
        try:
            wl = specs.multi_turn(
                sessions=16, turns=6, system_prompt_tokens=128, question_tokens=32, answer_tokens=32
            )
            spec = load_spec(specs.write_spec(t, "tl", wl, concurrency=8, seeds=[0]))
            page = httpx.get(sim.url + "/metrics").text
            n = 2000
            parse_us = timeit.timeit(lambda: watched_values(page, TIMELINE_WATCH), number=n) / n * 1e6
            cpu: dict[float, list[float]] = {0.0: [], 0.5: [], 0.1: []}
            wall: dict[float, list[float]] = {k: [] for k in cpu}
            ticks: dict[float, list[int]] = {k: [] for k in cpu}
            k = 0
            for _ in range(args.rounds):
                for interval in cpu:
                    k += 1
                    cap = t / f"cap{k}"
                    c0, w0 = time.process_time(), time.monotonic()
                    run_points(spec, base_url=sim.url, server_name="sim", node="n", capture_root=cap,
                               metrics_interval_s=interval)  # fmt: skip
                    cpu[interval].append(time.process_time() - c0)
                    wall[interval].append(time.monotonic() - w0)
                    _, samples = read_timeline(cap / "n" / "tl" / "sim" / "seed=0" / METRICS_TIMELINE)
                    ticks[interval].append(len(samples))
        finally:
            sim.stop()
    print(f"one /metrics page of the sim ({len(page.splitlines())} lines): watched_values {parse_us:.0f} us")
    print(
        f"{'interval':>10} {'client CPU s (median)':>22} {'runs':>20} {'wall s':>8} {'scrapes':>8} {'CPU/scrape ms':>14}"
    )
    base = statistics.median(cpu[0.0])
    for interval, cs in cpu.items():
        med = statistics.median(cs)
        sc = statistics.median(ticks[interval])
        per = (med - base) / sc * 1000 if sc else 0.0
        label = "off" if not interval else f"{interval:g} s"
        runs = ", ".join(f"{c:.2f}" for c in cs)
        print(
            f"{label:>10} {med:>22.3f} {runs:>20} {statistics.median(wall[interval]):>8.2f} {sc:>8.0f} {per:>14.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
