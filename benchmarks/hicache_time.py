"""The working-set suite's modelled HiCache TTFT with each host-tier time mechanism on and off.

Replays workloads/working-set.yaml (2,048-token system prompts, 4/16/32/64 groups, L4 + Llama-3.1-8B,
device pool 24,094 tokens, --hicache-ratio 4) in virtual time through the sim's engine, as the load
generator sends it, and prints one Markdown row per configuration: the median over seeds of the median
TTFT (ms) at each group count, and the host-hit share. `before` is the model before issue 26 (layer-wise
overlap only: copies acknowledged at once, write_back evictions free); `after` is every mechanism of
harness.sim.tier_time; the rows between switch one mechanism off, so each one's contribution is the
difference to `after`; `--sensitivity` adds `after` at a half, a quarter, ... of the card's host link
(a what-if). Usage: .venv/bin/python benchmarks/hicache_time.py [--seeds 0,1,2] [--sensitivity]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np

from harness.sim.args import build_parser
from harness.sim.engine import EngineConfig
from harness.sim.simulate import simulate
from harness.sim.tier_time import HICACHE_MECHANISMS
from harness.whatif.inputs import read_spec
from harness.whatif.replay import closed_loop

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "workloads" / "working-set.yaml"
GROUPS = (4, 16, 32, 64)
BASE = ["--port", "0", "--max-total-tokens", "24094", "--card", "l4-8b"]
HICACHE = ["--enable-hierarchical-cache", "--hicache-ratio", "4"]


def configs() -> list[tuple[str, EngineConfig]]:
    def cfg(extra: list[str], mechanisms: tuple[str, ...] = HICACHE_MECHANISMS) -> EngineConfig:
        c = EngineConfig.from_args(build_parser().parse_args(BASE + extra))
        return dataclasses.replace(c, hicache_mechanisms=mechanisms)

    out = [
        ("gpu-only", cfg([])),
        ("hicache before (layer overlap only)", cfg(HICACHE, ("layer_overlap",))),
        ("hicache after (all mechanisms)", cfg(HICACHE)),
    ]
    for m in HICACHE_MECHANISMS:
        rest = tuple(x for x in HICACHE_MECHANISMS if x != m)
        out.append((f"hicache after, without {m}", cfg(HICACHE, rest)))
    wb = [*HICACHE, "--hicache-write-policy", "write_back"]
    out.append(("hicache write_back, after", cfg(wb)))
    no_block = tuple(m for m in HICACHE_MECHANISMS if m != "blocking_write_back")
    out.append(("hicache write_back, without blocking_write_back", cfg(wb, no_block)))
    return out


def sensitivity() -> list[tuple[str, EngineConfig]]:
    """`after` with the host link slower than the card's (an assumption, no source: how slow the achieved
    host->device rate would have to be for the copies alone to make TTFT grow with groups)."""
    base = dict(configs())["hicache after (all mechanisms)"]
    rate = base.profile.h2d_gb_per_s
    out = []
    for div in (2, 4, 8, 16):
        prof = dataclasses.replace(base.profile, h2d_gb_per_s=rate / div)
        out.append(
            (f"hicache after, host link {rate / div:g} GB/s (what-if)", dataclasses.replace(base, card=prof))
        )
    return out


def point(cfg: EngineConfig, index: int, seed: int) -> tuple[float, float]:
    """(median TTFT ms, host-hit share of prompt tokens) of one point and seed."""
    trace = read_spec(SPEC, seed=seed, answer_seed=0, point_index=index)
    first, on_finish = closed_loop(trace)
    done = simulate(first, dataclasses.replace(cfg), on_finish=on_finish)
    ttft = [(d.first_token_time - d.arrival) * 1000 for d in done if d.first_token_time is not None]
    prompt = sum(len(d.input_ids) for d in done)
    return float(np.percentile(ttft, 50)), sum(d.cached_host for d in done) / prompt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2: the spec's)")
    ap.add_argument(
        "--sensitivity",
        action="store_true",
        help="also the rows with a slower host link (what-if, no source)",
    )
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    t0 = time.monotonic()
    cols = " | ".join(f"{g} groups" for g in GROUPS)
    print(f"| configuration | {cols} | host-hit share at {' / '.join(map(str, GROUPS))} |")
    print("|---|" + "---|" * (len(GROUPS) + 1))
    for name, cfg in configs() + (sensitivity() if args.sensitivity else []):
        ttfts, hosts = [], []
        for i, _ in enumerate(GROUPS):
            runs = [point(cfg, i, s) for s in seeds]
            ttfts.append(float(np.median([r[0] for r in runs])))
            hosts.append(float(np.median([r[1] for r in runs])))
        cells = " | ".join(f"{t:,.0f} ms" for t in ttfts)
        print(f"| {name} | {cells} | {' / '.join(f'{h:.0%}' for h in hosts)} |", flush=True)
    print(f"\nseeds {seeds}; median over seeds of each point's median TTFT; {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
