"""Issue 3 acceptance against `harness serve-sim`: multi-turn eviction policies and the HiCache working set.

Runs workloads/eviction-multiturn.yaml and workloads/working-set.yaml through `harness bench
--server-kind sim` (one seed each unless --seeds says otherwise) into a scratch folder and prints the
report's tables. Usage: .venv/bin/python scripts/acceptance_sim.py [--out DIR] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SPECS = ("eviction-multiturn.yaml", "working-set.yaml")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="scratch folder (default: a new temporary one)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (default 0)")
    ap.add_argument("--time-scale", default=None, help="override the specs' sim time scale")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="acceptance-sim-"))
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    specs = []
    for name in SPECS:
        spec = yaml.safe_load((ROOT / "workloads" / name).read_text())
        spec["seeds"] = seeds
        path = out / name
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        specs.append(str(path))
    cmd = [sys.executable, "-m", "harness", "bench", "--node", "acceptance", "--server-kind", "sim",
           "--capture", str(out / "capture"), "--summaries", str(out / "summaries"), "--quiet", "--spec", *specs]  # fmt: skip
    if args.time_scale:
        cmd += ["--time-scale", args.time_scale]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    report = out / "summaries" / "acceptance.md"
    if report.exists():
        text = report.read_text()
        # the per-experiment tables (header row + separator + rows), without the verbatim log excerpts
        for block in re.findall(r"^## .*?(?=^## |\Z)", text, re.S | re.M):
            lines = [ln for ln in block.splitlines() if ln.startswith(("## ", "### ", "|"))]
            print("\n".join(lines), "\n")
    print(f"capture and summaries under {out}")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
