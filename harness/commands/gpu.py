"""`harness gpu`: what NVML sees now (name, UUID, driver, clocks, temperature, reasons), or why nothing.

Informational: exit 0 whether or not there is a GPU.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


def build_parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="What NVML sees now, or why it sees nothing.")
    p.add_argument("--json", action="store_true", help="print as JSON")
    return p


def _cell(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, dict) and "error" in v:
        return str(v["error"]).split(":", 1)[0]
    if isinstance(v, float):
        return f"{v:.0f}{unit}"
    return f"{v}{unit}"


def run(args: argparse.Namespace) -> int:
    from harness.telemetry.gpus import snapshot

    snap = snapshot()
    if args.json:
        print(json.dumps(snap, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not snap["gpus"]:
        console.print(f"NVML: {snap['status']}")
        return 0
    console.print(f"NVML: {snap['status']}, driver {_cell(snap.get('driver'))}")
    for g in snap["gpus"]:
        r = g["reasons"]
        reasons = (
            (", ".join(g["reasons_decoded"]) or "none") + f" ({hex(r)})" if isinstance(r, int) else _cell(r)
        )
        t = Table(title=f"GPU {g['gpu']}: {g['name']}", title_justify="left", show_header=False)
        t.add_column("field", style="bold")
        t.add_column("value", overflow="fold")
        for label, value in (
            ("uuid", g["uuid"]),
            ("pci bus id", g["pci_bus_id"]),
            ("SM clock", f"{_cell(g['sm_clock_mhz'])} / max {_cell(g['max_sm_clock_mhz'], ' MHz')}"),
            ("memory clock", _cell(g["mem_clock_mhz"], " MHz")),
            ("temperature", _cell(g["temp_c"], " °C")),
            ("power", f"{_cell(g['power_w'])} / limit {_cell(g['power_limit_w'], ' W')}"),
            ("utilization", _cell(g["gpu_util"], "%")),
            ("clock event reasons", reasons),
        ):
            t.add_row(label, value)
        console.print(t)
    return 0
