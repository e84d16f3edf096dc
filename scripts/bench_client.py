"""Client-ceiling benchmark: how fast the harness's own client goes against a zero-delay server.

Starts tests/fakeserver.py (zero delay, stamping its send time into the first token) pinned to one
core, pins this client to another, and measures requests/s and SSE events/s at concurrency 1, 64 and
256, client CPU seconds per request, client-added TTFT at half the best rate, and RSS over a long run.
Prints a table and writes it to docs/client-ceiling.md. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.capture import read_jsonl  # noqa: E402
from harness.loadgen import RunIds, run_schedule  # noqa: E402
from harness.spec import parse_spec  # noqa: E402
from harness.workloads import build_schedule  # noqa: E402

OUTPUT_TOKENS = 16
EVENTS_PER_REQUEST = OUTPUT_TOKENS + 3  # role prelude + 16 tokens + usage frame + [DONE]


def start_server(cpu: int | None) -> tuple[subprocess.Popen, int]:
    cmd = [sys.executable, str(ROOT / "tests" / "fakeserver.py"), "--port", "0", "--stamp", "--no-cache"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise SystemExit(f"fake server did not start: {line!r}")
    if cpu is not None:
        os.sched_setaffinity(proc.pid, {cpu})
    return proc, int(line.split()[1])


def make_schedule(n: int, seed: int = 0):
    # 64-token prompts: a 48-token system prompt + a 16-token question (content tokens, word tokenizer)
    spec = parse_spec(
        {
            "name": "client-ceiling",
            "api": "openai-chat",
            "model": "fake",
            "workload": {
                "kind": "shared-prefix",
                "groups": n,
                "prompts_per_group": 1,
                "system_prompt_tokens": 48,
                "question_tokens": 16,
                "output_tokens": OUTPUT_TOKENS,
            },
        }
    )
    return build_schedule(spec, None, seed)


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def _run(schedule, port: int, concurrency: int, out: Path, rate: float | None, rss_trace: list | None):
    async def sample() -> None:
        while True:
            rss_trace.append((time.monotonic(), rss_mb()))
            await asyncio.sleep(0.5)

    sampler = asyncio.get_running_loop().create_task(sample()) if rss_trace is not None else None
    try:
        return await run_schedule(
            schedule,
            base_url=f"http://127.0.0.1:{port}",
            api="openai-chat",
            model="fake",
            concurrency=concurrency,
            out_path=out,
            ids=RunIds("bench", "fake", "p", 0),
            request_rate=rate,
            quiet=True,
        )
    finally:
        if sampler:
            sampler.cancel()


def measure(
    port: int,
    concurrency: int,
    n: int,
    tmp: Path,
    rate: float | None = None,
    rss_trace: list | None = None,
    schedule=None,
):
    schedule = schedule or make_schedule(n)
    out = tmp / f"c{concurrency}-{n}-{rate}.jsonl"
    out.unlink(missing_ok=True)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    res = asyncio.run(_run(schedule, port, concurrency, out, rate, rss_trace))
    wall = time.perf_counter() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return res, wall, cpu, out


def client_ttft_overhead(path: Path) -> list[float]:
    rows, _ = read_jsonl(path)
    out = []
    for r in rows:
        ans, ft = r.get("answer") or "", r.get("first_token_mono")
        if r.get("ok") and ans.startswith("t") and ft is not None:
            out.append(ft - float(ans.split()[0][1:]))
    return out


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--requests", type=int, default=5000, help="requests per concurrency level (c=1 uses a fifth)"
    )
    ap.add_argument(
        "--long", type=int, default=20_000, help="requests in the long (memory) run, e.g. 100000; 0 skips it"
    )
    ap.add_argument("--profile", action="store_true", help="cProfile one c=64 run and add its top functions")
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and client to separate cores")
    ap.add_argument(
        "--write", default=str(ROOT / "docs" / "client-ceiling.md"), help="Markdown output ('' to skip)"
    )
    a = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    pin = not a.no_pin and len(cpus) >= 2
    srv_cpu, cli_cpu = (cpus[0], cpus[1]) if pin else (None, None)
    proc, port = start_server(srv_cpu)
    if pin:
        os.sched_setaffinity(0, {cli_cpu})
    rows = []
    notes = []
    load_start = os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory() as td:
            tmp = Path(td)
            measure(port, 16, 500, tmp)  # warm-up: imports, connection pool, JIT-free but cache-warm
            best = 0.0
            for c in (1, 64, 256):
                n = max(200, a.requests // 5) if c == 1 else a.requests
                res, wall, cpu, _ = measure(port, c, n, tmp)
                rps = res.ok / wall
                best = max(best, rps)
                rows.append(
                    (
                        f"closed loop, c={c}",
                        n,
                        res.ok,
                        res.failed,
                        rps,
                        rps * EVENTS_PER_REQUEST,
                        cpu / max(res.ok, 1) * 1e6,
                        None,
                        None,
                    )
                )
            rate = best / 2
            res, wall, cpu, out = measure(port, 256, a.requests, tmp, rate=rate)
            ov = client_ttft_overhead(out)
            rows.append(
                (
                    f"Poisson {rate:.0f} req/s, c=256",
                    a.requests,
                    res.ok,
                    res.failed,
                    res.ok / wall,
                    res.ok / wall * EVENTS_PER_REQUEST,
                    cpu / max(res.ok, 1) * 1e6,
                    statistics.median(ov) * 1e3 if ov else None,
                    pct(ov, 0.99) * 1e3 if ov else None,
                )
            )
            long_line = None
            if a.long:
                trace: list = []
                rss_before = rss_mb()
                long_schedule = make_schedule(a.long, seed=1)
                rss_built = rss_mb()
                res, wall, cpu, out = measure(port, 64, a.long, tmp, rss_trace=trace, schedule=long_schedule)
                peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                during = [r for _, r in trace]
                half = len(during) // 2
                first_half = max(during[:half]) if half else float("nan")
                second_half = max(during[half:]) if during else float("nan")
                long_line = (
                    rss_built,
                    a.long,
                    res.ok,
                    res.ok / wall,
                    rss_before,
                    first_half,
                    second_half,
                    peak,
                    out.stat().st_size / 1e6,
                )
                rows.append(
                    (
                        "long run, c=64",
                        a.long,
                        res.ok,
                        res.failed,
                        res.ok / wall,
                        res.ok / wall * EVENTS_PER_REQUEST,
                        cpu / max(res.ok, 1) * 1e6,
                        None,
                        None,
                    )
                )
            if a.profile:
                notes += profile_run(port, min(a.requests, 3000), tmp)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    load_end = os.getloadavg()[0]
    table = _table(rows)
    lines = [
        "# Client ceiling",
        "",
        "Written by `scripts/bench_client.py` (re-run it to refresh). Server: `tests/fakeserver.py`, zero delay,",
        f"whole stream in one write, stamping its send time into the first token. {EVENTS_PER_REQUEST} SSE events per",
        f"request (role prelude, {OUTPUT_TOKENS} tokens, usage frame, [DONE]); prompts are 64 content tokens.",
        f"Host: {platform.node()}, {platform.processor() or platform.machine()}, Python {platform.python_version()},"
        f" {len(cpus)} usable cores; "
        + (f"server pinned to core {srv_cpu}, client to core {cli_cpu}." if pin else "no pinning."),
        f"Load average (1 min) {load_start:.1f} at start, {load_end:.1f} at end: above ~2 on a 2-core machine other"
        " work shared the client's core, and every figure here is a floor, not the client's ceiling.",
        "",
        table,
        "",
        "Targets (issue 2): >= 2,500 req/s at c=64 and c=256; client-added TTFT median < 0.5 ms, p99 < 2 ms at half"
        " the best rate; < 300 MB RSS over 100,000 requests (`--long 100000`).",
        "",
    ]
    if long_line:
        built, n, ok, rps, before, h1, h2, peak, size = long_line
        lines += [
            f"Memory, long run of {n:,} requests at c=64 ({rps:,.0f} req/s): RSS {before:.0f} MB before building the"
            f" schedule, {built:.0f} MB after it, max {h1:.0f} MB in the first half of the run and {h2:.0f} MB in the second half; peak RSS"
            f" (ru_maxrss) {peak:.0f} MB; requests.jsonl {size:.0f} MB on disk. The schedule (all prompts, built"
            " before the run) is the only part that grows with run length; records stream to disk.",
            "",
        ]
    lines += notes
    text = "\n".join(lines)
    print(text)
    if a.write:
        Path(a.write).parent.mkdir(parents=True, exist_ok=True)
        Path(a.write).write_text(text, encoding="utf-8")
        print(f"written to {a.write}")
    return 0


def profile_run(port: int, n: int, tmp: Path) -> list[str]:
    """Where the client's time goes at c=64: top functions by own time under cProfile."""
    import cProfile
    import io
    import pstats

    pr = cProfile.Profile()
    pr.enable()
    measure(port, 64, n, tmp)
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(15)
    body = buf.getvalue().strip().splitlines()
    start = next((i for i, ln in enumerate(body) if ln.lstrip().startswith("ncalls")), 0)
    return [
        f"## Where the time goes (cProfile, c=64, {n} requests; profiler overhead inflates totals)",
        "",
        "```",
        *body[start:],
        "```",
        "",
    ]


def _table(rows: list) -> str:
    head = (
        "run",
        "requests",
        "ok",
        "failed",
        "req/s",
        "events/s",
        "client CPU µs/req",
        "client TTFT add p50 ms",
        "p99 ms",
    )
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        name, n, ok, failed, rps, eps, cpu_us, p50, p99 = r
        cells = [
            name,
            f"{n:,}",
            f"{ok:,}",
            f"{failed:,}",
            f"{rps:,.0f}",
            f"{eps:,.0f}",
            f"{cpu_us:,.0f}",
            "-" if p50 is None else f"{p50:.3f}",
            "-" if p99 is None else f"{p99:.3f}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
