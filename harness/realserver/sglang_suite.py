"""`make bench-sglang`: SGLang 0.5.23's own server on this CPU, through the very profiles a GPU node runs.

1. Prepare: the pinned SGLang CPU venv (harness.servers.sglang_cpu.venv) and a tiny random-weight HF Llama
   whose locally trained tokenizer covers every id `tokenizer: server` sends (vocabulary 8,192).
2. Bench workloads/sglang-cpu/*.yaml as `harness bench --server-kind sglang-cpu` does (node sglang-cpu):
   `launch: sglang` profiles with the CPU flags added, the cache flushed before every point; then
   summarize, report and validate into summaries/sglang-cpu.{json,md,html}.
3. Hold the run to what it must show: every point ok and cold, the hit rate from usage, SGLang's counters
   and its log within 1 point of each other, and host hits on every HiCache point that outgrows the pool.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.realserver.model import ModelShape
from harness.sweep.pipeline import after_sweep, run_specs, timed

Log = Callable[[str], None]
DEFAULT_SPECS = (
    "workloads/sglang-cpu/working-set.yaml",
    "workloads/sglang-cpu/eviction-multiturn.yaml",
    "workloads/sglang-cpu/trace-conversation.yaml",
    "workloads/sglang-cpu/replicas.yaml",  # two SGLang servers behind smg: round_robin vs cache_aware
)
DEFAULT_NODE = "sglang-cpu"
# small enough that SGLang's CPU path prefills ~10k tokens/s on 2 cores; 8,192 ids cover `tokenizer: server`
SGLANG_SHAPE = ModelShape(hidden=64, layers=2, heads=4, ffn=256, vocab=8192, context=8192)
SOURCES_WITHIN = 0.01  # usage, counters and log must agree to a point


@dataclass
class SglangRun:
    """Where the summary is, per-point figures that prove the run, and what each stage cost."""

    summary_path: Path | None
    points: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    prepared: dict[str, Any] = field(default_factory=dict)
    verdict_lines: list[str] = field(default_factory=list)
    server_failures: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        out = list(self.server_failures)
        if self.summary_path is None:
            out.append("no summary was written")
        for p in self.points:
            key = f"{p['experiment']}/{p['server']}/{p['point']}"
            if p["status"] != "ok":
                out.append(f"{key}: status {p['status']}")
            if p["cache_state"] != "cold":
                out.append(f"{key}: {p['cache_state']} after a flush: {p['cache_flags']}")
            rates = {k: p[k] for k in ("hit_rate_usage", "hit_rate_counters", "hit_rate_log")}
            if any(v is None for v in rates.values()):
                out.append(f"{key}: a hit-rate source is missing: {rates}")
            elif max(rates.values()) - min(rates.values()) > SOURCES_WITHIN:
                out.append(f"{key}: hit-rate sources differ by more than 1 point: {rates}")
            if p["expects_host_hits"] and not p["cached_host_tokens"]:
                out.append(f"{key}: a HiCache point past the device pool with no host hits")
        return out


def point_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures the run is held to, per point (median over seeds)."""
    rows = []
    for p in summary.get("points", []):
        m = p.get("median") or {}
        seeds = list((p.get("seeds") or {}).values())
        host = [((s.get("figures") or {}).get("cached_host_tokens") or 0) for s in seeds]
        server = str(p.get("server"))
        rows.append(
            {
                "experiment": p.get("experiment"),
                "server": server,
                "point": p.get("point_key"),
                "status": p.get("status"),
                "cache_state": p.get("cache_state"),
                "cache_flags": p.get("cache_flags") or {},
                "hit_rate_usage": m.get("hit_rate_usage"),
                "hit_rate_counters": m.get("hit_rate_counters"),
                "hit_rate_log": m.get("hit_rate_log"),
                "predicted_hit_rate": p.get("predicted_hit_rate"),
                "cached_host_tokens": min(host) if host else None,
                # the working set's 8 groups (2,176 tokens) outgrow the 1,200-token pool: hits come from host
                "expects_host_hits": server.startswith("hicache") and "groups=8" in str(p.get("point_key")),
                "ttft_median_s": m.get("ttft_median_s"),
            }
        )
    return rows


def run_sglang(
    specs: Sequence[str | Path] = DEFAULT_SPECS,
    *,
    node: str = DEFAULT_NODE,
    capture: Path = Path("capture"),
    summaries: Path = Path("summaries"),
    log: Log = print,
    quiet: bool = True,
) -> SglangRun:
    """Prepare, bench every spec on SGLang on CPU, summarize, hold to the checks; HarnessError on bad input."""
    from harness.realserver.hf_model import make_hf_model
    from harness.servers.kind import choose_kind
    from harness.servers.sglang_cpu.venv import ensure_sglang
    from harness.sweep import plan

    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    env = ensure_sglang(log=log)
    seconds["sglang venv (reused)" if env.reused else "sglang venv (installed)"] = time.monotonic() - t0
    with timed(seconds, "model"):
        model = make_hf_model(env.python, SGLANG_SHAPE, log=log)
    kind, why = choose_kind("sglang-cpu", str(env.python))
    log(
        f"server kind: SGLang {env.sglang_version} (torch {env.torch_version}) for `launch: sglang` profiles: {why}"
    )
    opts = plan.BenchOptions(
        node=node,
        capture=Path(capture),
        summaries=Path(summaries),
        server_kind=kind,
        kind_reason=why,
        sglang_python=str(env.python),
        model=str(model.folder),
        quiet=quiet,
    )
    with timed(seconds, "bench"):
        outcome = run_specs(specs, opts, log).outcome
    with timed(seconds, "summarize+report"):
        verdicts = after_sweep(opts, log).verdict_lines
    summary_path = Path(summaries) / f"{node}.json"
    run = SglangRun(
        summary_path if summary_path.exists() else None,
        seconds=seconds,
        verdict_lines=verdicts,
        server_failures=list(outcome.server_failures),
    )
    run.prepared = {
        "venv": str(env.root),
        "sglang": env.sglang_version,
        "torch": env.torch_version,
        "install_seconds": env.build_seconds,
        "venv_reused": env.reused,
        "model": str(model.folder),
    }
    if run.summary_path is not None:
        run.points = point_rows(json.loads(run.summary_path.read_text(encoding="utf-8")))
    return run
