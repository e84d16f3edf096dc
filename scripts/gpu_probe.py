"""Probe a real GPU: sampler on, torch matrix products for 60 s, idle 10 s; telemetry + verdicts to $OUT.

Meant for a machine with an NVIDIA GPU, torch and nvidia-ml-py. Elsewhere it says plainly that there
is no GPU (and why), writes that status, and exits 0. Output (in --out, default $OUT or ./gpu-probe):
telemetry.jsonl, summary.json, validate.txt, validate.json, probe.json.

    .venv/bin/python scripts/gpu_probe.py [--busy-s 60] [--idle-s 10] [--size 8192] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.capture import TELEMETRY, read_jsonl, write_json_atomic  # noqa: E402
from harness.telemetry.gpus import sampling_plan, snapshot  # noqa: E402
from harness.telemetry.nvml import decode_reasons  # noqa: E402
from harness.telemetry.sampler import open_sampler  # noqa: E402
from harness.telemetry.stats import point_stats  # noqa: E402


def _drive(busy_s: float, size: int) -> dict[str, Any]:
    """Back-to-back bf16 matmuls on cuda:0 for busy_s seconds; returns the achieved TFLOP/s."""
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    n, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < busy_s:
        for _ in range(10):
            a @ b  # noqa: B018 - the product is the load
        torch.cuda.synchronize()
        n += 10
    dt = time.monotonic() - t0
    return {
        "matmuls": n,
        "seconds": dt,
        "tflops": 2 * size**3 * n / dt / 1e12,
        "device": torch.cuda.get_device_name(0),
    }


def _window(rows: list[dict[str, Any]], t0: float, t1: float) -> list[dict[str, Any]]:
    return [
        r
        for r in rows
        if r.get("kind") == "header" or (r.get("t_mono") is not None and t0 <= r["t_mono"] <= t1)
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy-s", type=float, default=60.0)
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--interval-s", type=float, default=0.2)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "gpu-probe"))
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    probe: dict[str, Any] = {"nvml": snapshot()}
    try:
        import torch

        has_cuda = torch.cuda.is_available()
        probe["torch"] = torch.__version__
    except ImportError as e:
        has_cuda, probe["torch"] = False, f"not installed ({e})"
    if not probe["nvml"]["gpus"] or not has_cuda:
        why = (
            probe["nvml"]["status"]
            if not probe["nvml"]["gpus"]
            else f"torch cannot use CUDA (torch: {probe['torch']})"
        )
        with open_sampler(out, gpus=[], null_reason=f"no GPU: {why}") as s:
            probe["telemetry_status"] = s.status
        write_json_atomic(out / "probe.json", probe)
        print(f"no GPU: {why}. Nothing to probe; wrote the status to {out}/probe.json and {out}/{TELEMETRY}.")
        return 0

    gpus, _ = sampling_plan(None, None)
    with open_sampler(out, gpus=gpus, interval_s=args.interval_s) as s:
        probe["telemetry_status"] = s.status
        print(
            f"sampler: {s.status}; driving {args.busy_s:.0f} s of {args.size}x{args.size} bf16 matmuls",
            flush=True,
        )
        t_busy = time.monotonic()
        probe["load"] = _drive(args.busy_s, args.size)
        t_idle = time.monotonic()
        print(
            f"load: {probe['load']['tflops']:.0f} TFLOP/s on {probe['load']['device']}; idling {args.idle_s:.0f} s",
            flush=True,
        )
        time.sleep(args.idle_s)
        t_end = time.monotonic()
    rows, _ = read_jsonl(out / TELEMETRY)
    busy, idle = point_stats(_window(rows, t_busy, t_idle)), point_stats(_window(rows, t_idle, t_end))
    probe.update({"busy": busy, "idle": idle, "all": point_stats(rows)})
    write_json_atomic(out / "probe.json", probe)
    points = [
        {"experiment": "gpu-probe", "server": "torch-matmul", "sweep": {"phase": "busy"}, "telemetry": busy},
        {"experiment": "gpu-probe", "server": "torch-matmul", "sweep": {"phase": "idle"}, "telemetry": idle},
    ]
    write_json_atomic(out / "summary.json", {"schema_version": 1, "node": "gpu-probe", "points": points})
    cmd = [sys.executable, "-m", "harness", "validate", str(out / "summary.json")]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)  # keep a wheel folder's
    env = {**os.environ, "COLUMNS": "160", "NO_COLOR": "1", "PYTHONPATH": path}
    table = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    js = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    (out / "validate.txt").write_text(table.stdout + table.stderr + f"exit {table.returncode}\n")
    (out / "validate.json").write_text(js.stdout)
    print(table.stdout)
    seen = probe["all"].get("reasons_seen")
    print(
        json.dumps(
            {
                "busy_median_sm_clock_mhz": busy["busy_median_sm_clock_mhz"],
                "max_sm_clock_mhz": busy["max_sm_clock_mhz"],
                "temp_max_c": probe["all"]["temp_max_c"],
                "reasons_seen": decode_reasons(seen),
                "thermal_fraction_busy": busy["thermal_fraction"],
                "power_cap_fraction_busy": busy["power_cap_fraction"],
                "energy_j_busy": busy["energy_j"],
                "validate_exit": table.returncode,
                "unsupported": rows[0].get("unsupported"),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
