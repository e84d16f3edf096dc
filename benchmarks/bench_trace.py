#!/usr/bin/env python3
"""Trace replay at scale (issue 14): preparing an 87,000-request Mooncake trace, and the load generator's
memory as the trace grows.

1. A synthetic 87,000-line Mooncake trace is written to a temp folder (the shipped 12,031-request
   conversation trace, repeated with fresh hash ids and later timestamps). Preparing it -- the spec read,
   every line parsed and checked, positions worked out -- is timed at the trace's own 512 tokens per
   block; so is building prompts at send time.
2. The load generator replays slices of N1 and N2 = 8 x N1 requests of it against `harness serve-sim`
   (subprocess, concurrency 8, block_tokens 16), once fed lazily from the file (as it runs) and once
   from a list made up front (as a whole-schedule replay would hold it). The peak Python memory of the
   run (tracemalloc) is printed for each, with the N2 / N1 ratios side by side.

    .venv/bin/python benchmarks/bench_trace.py [--requests 87000] [--n1 500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.loadgen.run import RunIds, run_schedule  # noqa: E402
from harness.spec import load_spec  # noqa: E402
from harness.workloads import PromptBuilder, build_schedule  # noqa: E402

TRACE = REPO / "tests" / "data" / "mooncake" / "conversation_trace.jsonl"


def synthetic_trace(out: Path, n: int) -> None:
    """n lines: the shipped trace over and over, each copy with its own ids and later timestamps."""
    lines = [json.loads(x) for x in TRACE.read_text().splitlines() if x.strip()]
    top = max(max(x["hash_ids"]) for x in lines) + 1
    span = lines[-1]["timestamp"] + 1000
    with out.open("w") as f:
        for i in range(n):
            copy, x = divmod(i, len(lines))
            obj = dict(lines[x])
            obj["hash_ids"] = [h + copy * top for h in obj["hash_ids"]]
            obj["timestamp"] = obj["timestamp"] + copy * span
            f.write(json.dumps(obj) + "\n")


def write_spec(folder: Path, trace: Path, block_tokens: int, limit: int | None, name: str) -> Path:
    wl = {"kind": "trace", "path": str(trace), "format": "mooncake", "block_tokens": block_tokens}
    wl.update({"timestamps": "ignore", "max_output_tokens": 1, **({"limit": limit} if limit else {})})
    spec = {"name": name, "model": "m", "api": "openai-completions", "concurrency": 8, "workload": wl}
    p = folder / f"{name}.yaml"
    p.write_text(json.dumps(spec))  # JSON is YAML
    return p


def prepare(folder: Path, trace: Path) -> None:
    spec = load_spec(write_spec(folder, trace, 512, None, "prep"))
    t = time.perf_counter()
    sch = build_schedule(spec, None, 0)
    prep = time.perf_counter() - t
    builder = PromptBuilder(sch, spec.api)
    t, n, tokens = time.perf_counter(), 0, 0
    for conv in sch.conversations:
        for req in conv.turns:
            tokens += builder.build(conv, req, []).expected_tokens or 0
            n += 1
        if n >= 2000:
            break
    per = (time.perf_counter() - t) / n
    print(f"prepare: {len(sch):,} requests checked and ready in {prep:.2f} s (target < 10 s)")
    print(f"send time: {per * 1e3:.2f} ms per prompt built ({tokens / n:,.0f} tokens each, 512 per block)")


def start_sim(folder: Path) -> tuple[subprocess.Popen, str]:
    log = folder / "sim.log"
    cmd = [sys.executable, "-m", "harness", "serve-sim", "--port", "0", "--log-file", str(log)]
    cmd += ["--time-scale", "0.001", "--max-total-tokens", "4000000", "--enable-cache-report"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        m = re.search(r"127\.0\.0\.1:(\d+)", log.read_text()) if log.exists() else None
        if m:
            url = f"http://127.0.0.1:{m.group(1)}"
            from harness.servers.control import wait_ready

            try:
                wait_ready(url + "/health", within_s=30)
            except Exception:
                proc.kill()
                raise
            return proc, url
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("serve-sim did not start")


def peak_run(folder: Path, trace: Path, n: int, lazy: bool, url: str) -> tuple[float, float]:
    """(peak MiB of the run, seconds) for n requests, fed lazily or from a list made first."""
    spec = load_spec(write_spec(folder, trace, 16, n, f"mem{n}"))
    sch = build_schedule(spec, None, 0)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    if not lazy:  # the whole schedule in memory, as a replay that reads it all first would hold it
        sch.conversations = list(sch.conversations)
        sch.total = None
    t = time.perf_counter()
    res = asyncio.run(
        run_schedule(
            sch,
            base_url=url,
            api=spec.api,
            model="m",
            concurrency=8,
            out_path=folder / f"req-{n}-{lazy}.jsonl",
            ids=RunIds("mem", "sim", str(n), 0),
        )
    )
    took = time.perf_counter() - t
    peak = (tracemalloc.get_traced_memory()[1] - base) / 2**20
    tracemalloc.stop()
    assert res.ok == n, res
    return peak, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=87_000)
    ap.add_argument("--n1", type=int, default=500)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = folder / "trace87k.jsonl"
        t = time.perf_counter()
        synthetic_trace(trace, args.requests)
        size = trace.stat().st_size / 2**20
        print(
            f"synthetic trace: {args.requests:,} lines, {size:.1f} MiB, written in {time.perf_counter() - t:.1f} s"
        )
        prepare(folder, trace)
        proc, url = start_sim(folder)
        try:
            n1, n2 = args.n1, 8 * args.n1
            rows = {}
            for lazy in (True, False):
                rows[lazy] = [peak_run(folder, trace, n, lazy, url) for n in (n1, n2)]
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        print(f"load generator peak memory (tracemalloc), {n1:,} vs {n2:,} requests at concurrency 8:")
        for lazy, label in ((True, "fed from the file"), (False, "whole list first ")):
            (p1, s1), (p2, s2) = rows[lazy]
            print(
                f"  {label}: {p1:6.2f} MiB -> {p2:6.2f} MiB  ratio {p2 / p1:4.2f}x  ({s1:.1f} s, {s2:.1f} s)"
            )


if __name__ == "__main__":
    main()
