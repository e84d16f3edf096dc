"""Peak memory of `harness run` against run length: shared-prefix, multi-turn and a trace replay.

Each run is the command a user types (`python -m harness run SPEC --server-url URL --quiet`) against
benchmarks/bench_client.py's zero-latency server (`--serve sglang`, pinned to one core; the client pinned
to another), with peak RSS (VmHWM, read every 50 ms) and CPU (wait4). Default sizes 10,000 and 100,000 requests;
`--sizes 10000,100000,1000000` adds the million (about 5-10 minutes per workload on a free core).
Prompts are ~64 tokens, answers 16 tokens. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_client  # noqa: E402
from bench_side_by_side import hwm_mb  # noqa: E402

OUT = bench_client.OUTPUT_TOKENS


def write_trace(path: Path, n: int) -> None:
    """n Mooncake lines of 64 tokens (one 512-token hash block: ids name 512-token blocks), each id shared
    by 4 requests in a row, 16 tokens out."""
    with path.open("w") as f:
        for i in range(n):
            ids = [i // 4]
            f.write(
                json.dumps({"timestamp": i, "input_length": 64, "output_length": OUT, "hash_ids": ids}) + "\n"
            )


def spec_text(kind: str, n: int, folder: Path) -> str:
    head = "api: openai-chat\nmodel: default\ntokenizer: word\nconcurrency: 64\nseeds: [0]\n"
    head += "timeouts: {connect: 10, first_token: 60, total: 120}\n"
    if kind == "shared-prefix":
        wl = (
            f"{{kind: shared-prefix, groups: {max(1, n // 16)}, prompts_per_group: 16,"
            f" system_prompt_tokens: 32, question_tokens: 27, output_tokens: {OUT}, shuffle: true}}"
        )
    elif kind == "multi-turn":
        wl = (
            f"{{kind: multi-turn, sessions: {max(1, n // 8)}, turns: 8, system_prompt_tokens: 32,"
            f" question_tokens: 8, answer_tokens: {OUT}}}"
        )
    else:
        trace = folder / f"trace-{n}.jsonl"
        if not trace.exists():
            write_trace(trace, n)
        wl = (
            f"{{kind: trace, path: {trace}, format: mooncake, block_tokens: 16, timestamps: ignore,"
            f" max_output_tokens: {OUT}}}"
        )
    return f"name: mem-{kind}-{n}\n{head}workload: {wl}\n"


def run_once(kind: str, n: int, url: str, cpu: int | None, folder: Path) -> dict[str, float | int | str]:
    spec = folder / f"{kind}-{n}.yaml"
    spec.write_text(spec_text(kind, n, folder))
    cap = folder / f"capture-{kind}-{n}"
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "run",
        str(spec),
        "--server-url",
        url,
        "--capture",
        str(cap),
        "--quiet",
    ]
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pre = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=pre)
        peak = float("nan")
        while True:  # VmHWM every 50 ms, the last read kept (see hwm_mb: not ru_maxrss)
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            with contextlib.suppress(OSError, ValueError):
                peak = hwm_mb(proc.pid)
            time.sleep(0.05)
        log.seek(0)
        tail = log.read()[-400:].decode(errors="replace").strip()
    rc = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    reqs = next(cap.rglob("requests.jsonl"), None)
    size = reqs.stat().st_size if reqs else 0
    lines = sum(1 for _ in reqs.open("rb")) if reqs else 0
    for p in sorted(cap.rglob("*"), reverse=True):  # a million records are ~1.2 GB: not kept
        p.unlink() if p.is_file() else p.rmdir()
    cpu_s = ru.ru_utime + ru.ru_stime
    return {
        "workload": kind,
        "requests": n,
        "records": lines,
        "rc": rc,
        "peak_rss_mb": peak,
        "cpu_ms_per_req": cpu_s / max(lines, 1) * 1e3,
        "req_s": lines / wall if wall else 0.0,
        "records_mb": size / 1e6,
        "tail": tail if rc else "",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="requests per run, comma list")
    ap.add_argument("--workloads", default="shared-prefix,multi-turn,trace", help="comma list")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and client to separate cores")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args()
    pin = not a.no_pin and len(os.sched_getaffinity(0)) >= 2
    srv_cpu, cli_cpu = sorted(os.sched_getaffinity(0))[:2] if pin else (None, None)
    proc, port = bench_client.start_server(srv_cpu, "sglang", {**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
            for kind in a.workloads.split(","):
                for n in (int(x) for x in a.sizes.split(",")):
                    row = run_once(kind, n, url, cli_cpu, Path(tmp))
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        proc.kill()
        proc.wait()
    if a.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| workload | requests | records | peak RSS MB | vs smallest | client CPU ms/req | req/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        first = next(x for x in rows if x["workload"] == r["workload"])
        ratio = float(r["peak_rss_mb"]) / float(first["peak_rss_mb"])
        print(
            f"| {r['workload']} | {r['requests']:,} | {r['records']:,} | {r['peak_rss_mb']:.1f} |"
            f" {ratio:.2f}x | {r['cpu_ms_per_req']:.3f} | {r['req_s']:,.0f} |"
        )
        if r["rc"]:
            print(f"|  exit {r['rc']}: {r['tail']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
