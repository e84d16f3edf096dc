"""`harness fleet FLEET.yaml`: the same suite on every node group of a Ray cluster, comparable summaries back.

Ray is an optional extra (`pip install 'harness[fleet]'`), imported only here.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from harness.errors import HarnessError


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run `harness bench` on every node group of a Ray cluster (one task per group x server "
        "profile), stream each capture back, then summarize per node and compare the nodes.",
    )
    p.add_argument("fleet", type=Path, help="fleet file (YAML; see docs/fleet.md)")
    p.add_argument("--dry-run", action="store_true", help="print the units and what is already back; no Ray")
    p.add_argument("--json", action="store_true", help="print the fleet record (fleet.json) at the end")
    p.add_argument("--quiet", action="store_true", help="only the final line")
    return p


def run(args: argparse.Namespace) -> int:
    from harness.fleet.config import load_fleet
    from harness.fleet.units import plan_units, progress_text

    fleet = load_fleet(args.fleet)
    units = plan_units(fleet)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, flush=True)

    for u in units:
        ok = u.ok_points(fleet.capture)
        owed = f"{len(u.points)} points" + (f" and {len(u.searches)} searches" if u.searches else "")
        back = f"{ok} already ok" + (f", search: {u.searches_done(fleet.capture)} done" if u.searches else "")
        log(f"unit {u.key}: {owed} in {len(u.specs)} specs, {back}")
    if args.dry_run:
        return 0
    try:
        import ray  # noqa: F401
    except ImportError:
        raise HarnessError("harness fleet needs Ray: pip install 'harness[fleet]'") from None

    from harness.fleet.driver import FleetRun, connect
    from harness.fleet.stages import fleet_compare, node_stages

    t0 = time.monotonic()
    address = connect(fleet)
    log(f"fleet: {len(units)} units on the Ray cluster at {address}")
    results = FleetRun(fleet, units, log).run()
    unit_s = time.monotonic() - t0
    summaries, flagged = node_stages(fleet, log)
    compared = fleet_compare(summaries, fleet.summaries, log)
    wall = time.monotonic() - t0
    record = {
        "fleet_file": str(args.fleet),
        "ray_address": address,
        "wall_s": round(wall, 1),
        "units_s": round(unit_s, 1),
        "units": [r.as_dict() for r in results],
        "summaries": [str(p) for p in summaries],
        "compare": [str(p) for p in compared],
        "flagged": flagged,
    }
    fleet.summaries.mkdir(parents=True, exist_ok=True)
    (fleet.summaries / "fleet.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    bad = [r for r in results if r.status in ("failed", "incomplete")]
    for r in results:
        tries = ", ".join(
            f"{a.host or '?'}{' lost' if a.error and a.exit_code is None else ''}" for a in r.attempts
        )
        log(
            f"unit {r.node}/{r.server}: {r.status}, "
            + progress_text(r.points_ok, r.points_total, r.searches_done, r.searches_total)
            + (f", attempts: {tries}" if tries else "")
            + (f" ({r.reason})" if r.reason else "")
        )
    print(
        f"fleet: {len(results) - len(bad)}/{len(results)} units ok, {len(summaries)} node summaries, "
        f"{flagged} flagged, {wall:.1f}s; record {fleet.summaries / 'fleet.json'}",
        flush=True,
    )
    if args.json:
        print(json.dumps(record, indent=2))
    return 1 if bad or flagged else 0
