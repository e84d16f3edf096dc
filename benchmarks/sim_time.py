"""Issue 15 acceptance: the live sim's figures against the same workload run purely in virtual time.

Runs workloads/working-set.yaml and workloads/eviction-multiturn.yaml (seed 0 unless --seeds says
otherwise) through `harness bench --server-kind sim` at the specs' own suite time scale, twice: on a
quiet machine and beside a CPU-bound process. Then replays every server x point x seed in virtual time
(the sim's engine through what-if's closed loop, configured from the argv the live run used) and prints
one Markdown row per point: hit rate, modelled median TTFT and modelled output tok/s of the live run,
the run beside the CPU hog, and the virtual-time replay, and whether both live runs are within 1 point
(hit rate) and 10 % (TTFT, tok/s) of the replay. Exit 0 when every row is, 1 otherwise.
Usage: .venv/bin/python benchmarks/sim_time.py [--out DIR] [--seeds 0] [--no-hog] [--spec NAME]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from harness.sim.args import build_parser
from harness.sim.engine import EngineConfig
from harness.sim.simulate import simulate
from harness.spec import load_spec
from harness.whatif.inputs import read_spec
from harness.whatif.replay import closed_loop

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("working-set.yaml", "eviction-multiturn.yaml")
HIT_POINTS = 0.01
REL = 0.10


def run_bench(specs: list[Path], out: Path, node: str, hog: bool) -> float:
    """`harness bench` on the sim into out/; with hog, beside a busy-looping process (stopped by pid)."""
    cmd = [sys.executable, "-m", "harness", "bench", "--node", node, "--server-kind", "sim",
           "--capture", str(out / "capture"), "--summaries", str(out / "summaries"), "--quiet",
           "--spec", *map(str, specs)]  # fmt: skip
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if hog else None
    t0 = time.monotonic()
    try:
        rc = subprocess.run(cmd, cwd=ROOT).returncode
    finally:
        if burner is not None:
            burner.kill()
            burner.wait(10)
    took = time.monotonic() - t0
    print(
        f"{node}: harness bench exit {rc}, {took:.0f} s wall{' (beside a CPU hog)' if hog else ''}",
        flush=True,
    )
    return took


def live_points(out: Path, node: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(experiment, server, sweep as JSON) -> hit rate, modelled TTFT p50 (ms) and output tok/s."""
    summary = json.loads((out / "summaries" / f"{node}.json").read_text())
    table = {}
    for p in summary["points"]:
        m = p.get("modelled") or {}
        table[(p["experiment"], p["server"], json.dumps(p["sweep"], sort_keys=True))] = {
            "hit": p["median"].get("hit_rate_usage"),
            "ttft": (m.get("ttft_ms") or {}).get("p50"),
            "tok_s": m.get("output_tok_s"),
            "source": m.get("source"),
        }
    return table


def engine_config(argv: list[str]) -> tuple[EngineConfig, int]:
    """The engine a live serve-sim with this argv ran, and its --random-seed (the answers' seed)."""
    args = [a for a in argv[argv.index("serve-sim") + 1 :]]
    args = ["0" if a == "{port}" else a for a in args]
    ns = build_parser().parse_args(args)
    return EngineConfig.from_args(ns), int(ns.random_seed)


def virtual_point(spec_path: Path, index: int, seed: int, argv: list[str]) -> dict[str, float | None]:
    """One server x point x seed through the engine in virtual time, as the load generator sends it."""
    econf, answer_seed = engine_config(argv)
    trace = read_spec(spec_path, seed=seed, answer_seed=answer_seed, point_index=index)
    first, on_finish = closed_loop(trace)
    done = simulate(first, econf, on_finish=on_finish)
    prompt = sum(len(d.input_ids) for d in done)
    ttft = [(d.first_token_time - d.arrival) * 1000 for d in done if d.first_token_time is not None]
    span = max(d.finish_time for d in done) - min(d.arrival for d in done)
    return {
        "hit": sum(d.cached_tokens for d in done) / prompt if prompt else None,
        "ttft": float(np.percentile(ttft, 50)) if ttft else None,
        "tok_s": sum(d.generated for d in done) / span if span > 0 else None,
    }


def virtual_points(spec_path: Path, capture: Path, node: str, seeds: list[int]) -> dict:
    spec = load_spec(spec_path)
    manifest = json.loads((capture / node / spec.name / "manifest.json").read_text())
    table = {}
    for server, entry in manifest["servers"].items():
        for i, point in enumerate(spec.points()):
            per_seed = [virtual_point(spec_path, i, s, entry["argv"]) for s in seeds]
            table[(spec.name, server, json.dumps(point.sweep, sort_keys=True))] = {
                k: float(np.median([v[k] for v in per_seed if v[k] is not None]))
                for k in ("hit", "ttft", "tok_s")
            }
    return table


def _close(live: float | None, virt: float | None, kind: str) -> bool:
    if live is None or virt is None:
        return False
    return abs(live - virt) <= HIT_POINTS if kind == "hit" else abs(live - virt) <= REL * abs(virt)


def _fmt(v: float | None, kind: str) -> str:
    if v is None:
        return "n/a"
    return f"{v:.1%}" if kind == "hit" else (f"{v:.0f}" if kind == "ttft" else f"{v:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    ap.add_argument("--no-hog", action="store_true", help="skip the run beside a CPU-bound process")
    ap.add_argument(
        "--spec", action="append", default=None, help=f"spec file names (default {', '.join(SPECS)})"
    )
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="sim-time-acceptance-"))
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    specs = []
    for name in args.spec or SPECS:
        spec = yaml.safe_load((ROOT / "workloads" / name).read_text())
        spec["seeds"] = seeds
        path = out / name
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        specs.append(path)
    runs = [("live", False)] + ([] if args.no_hog else [("hog", True)])
    live = {}
    for name, hog in runs:
        run_bench(specs, out / name, name, hog)
        live[name] = live_points(out / name, name)
    t0 = time.monotonic()
    virt: dict = {}
    for path in specs:
        virt.update(virtual_points(path, out / "live" / "capture", "live", seeds))
    print(f"virtual time: {len(virt)} server x point replays in {time.monotonic() - t0:.0f} s", flush=True)
    names = [n for n, _ in runs]
    cols = " / ".join([*names, "virtual"])
    print(f"\n| experiment | server | point | hit rate ({cols}) | modelled median TTFT ms ({cols}) "
          f"| modelled output tok/s ({cols}) | within 1 pt / 10 % |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    all_ok = True
    for key in sorted(virt, key=lambda k: (k[0], k[1], k[2])):
        exp, server, sweep = key
        v = virt[key]
        row_ok = True
        cells = []
        for kind in ("hit", "ttft", "tok_s"):
            vals = [live[n].get(key, {}).get(kind) for n in names]
            row_ok &= all(_close(x, v[kind], kind) for x in vals)
            cells.append(" / ".join(_fmt(x, kind) for x in [*vals, v[kind]]))
        all_ok &= row_ok
        point = ",".join(f"{k}={val}" for k, val in json.loads(sweep).items()) or "-"
        print(f"| {exp} | {server} | {point} | {' | '.join(cells)} | {'yes' if row_ok else 'NO'} |")
    sources = {r.get("source") for n in names for r in live[n].values()}
    print(f"\nmodelled figures' source in the summaries: {', '.join(sorted(map(str, sources)))}")
    print(f"captures and summaries under {out}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
