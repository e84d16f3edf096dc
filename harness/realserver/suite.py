"""Run the llama-real specs through the harness's own bench path, then hold the run to the real-server checks.

Prepare (build or reuse) → for each spec: plan, manifest, one llama-server up for its points, the
harness's load generator → summarize + report (summaries/<node>.json) → checks of issue 7 per point,
added to the summary under `real_server` and to the report as a section of their own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capture import REQUESTS, write_json_atomic
from harness.errors import HarnessError
from harness.realserver.checks import RealChecks, check_records
from harness.realserver.specs import load_real_spec

Log = Callable[[str], None]
DEFAULT_SPECS = ("workloads/llama-real.yaml", "workloads/llama-real-chat.yaml")
DEFAULT_NODE = "llama-cpu"


@dataclass
class RealRun:
    """What a run did: where its files are, its checks per point, and how long it took."""

    summary_path: Path | None
    report_path: Path | None
    checks: dict[str, RealChecks] = field(default_factory=dict)  # "<exp>/<server>/<point>" -> checks
    statuses: dict[str, str] = field(default_factory=dict)
    server_failures: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def problems(self) -> list[str]:
        out = list(self.server_failures)
        out += [f"{k}: status {s}" for k, s in self.statuses.items() if s != "ok"]
        out += [f"{k}: {p}" for k, c in self.checks.items() for p in c.problems()]
        return out


def prompt_maker_for(tokenizer: str) -> Any:
    """The harness's prompt maker; with only `tokenizers` installed, backed by the tokenizer.json adapter."""
    from harness.workloads import PromptMaker, load_prompt_maker

    try:
        return load_prompt_maker(tokenizer)
    except HarnessError as e:
        if "transformers" not in str(e):
            raise
    from harness.realserver.tokenizer import TokenizerJson

    return PromptMaker(tokenizer, TokenizerJson(tokenizer))  # type: ignore[arg-type]


def _read_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue
    return rows


def point_checks(capture: Path, node: str) -> dict[str, RealChecks]:
    """Checks for every point folder under capture/<node> (experiment/server/point → requests.jsonl)."""
    out: dict[str, RealChecks] = {}
    for req in sorted((Path(capture) / node).glob(f"*/*/*/{REQUESTS}")):
        pdir = req.parent
        out[f"{pdir.parent.parent.name}/{pdir.parent.name}/{pdir.name}"] = check_records(_read_rows(req))
    return out


def _summary_hit(summary: dict[str, Any], key: str) -> float | None:
    """The summarizer's own usage hit rate for one "<exp>/<server>/<point>" (seed folder)."""
    exp, server, pname = key.split("/", 2)
    for p in summary.get("points", []):
        if p.get("experiment") != exp or p.get("server") != server:
            continue
        for seed in (p.get("seeds") or {}).values():
            if Path(str(seed.get("path", ""))).name == pname:
                return (seed.get("figures") or {}).get("hit_rate_usage")
    return None


def checks_markdown(checks: dict[str, RealChecks], summary: dict[str, Any], seconds: dict[str, float]) -> str:
    """The report section: client vs server TTFT, cached-token agreement, hit rates side by side."""
    lines = [
        "",
        "## Real server checks (llama.cpp llama-server)",
        "",
        "| point | ok | TTFT < prompt_ms | client TTFT median ms | server prompt_ms median | gap median ms "
        "| gap p90 ms | cached != cache_n | hit usage (summary) | hit timings | first / later |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    for key, c in checks.items():
        lines.append(
            f"| {key} | {c.ok}/{c.requests} | {len(c.ttft_below_prompt_ms)} | {ms(c.ttft_sent_ms_median)} "
            f"| {ms(c.prompt_ms_median)} | {ms(c.gap_ms_median)} | {ms(c.gap_ms_p90)} "
            f"| {len(c.cached_mismatch)} | {pct(_summary_hit(summary, key))} | {pct(c.hit_rate_timings)} "
            f"| {pct(c.hit_rate_usage_first)} / {pct(c.hit_rate_usage_later)} |"
        )
    lines += [
        "",
        "client TTFT is measured from send to the first content event; gap = client TTFT - the server's own "
        "prompt_ms (server queueing before a slot starts the prompt, transport, client). hit usage = Σ "
        "usage.cached_tokens / Σ prompt_tokens as summarized above; hit timings = Σ timings.cache_n / "
        "Σ (cache_n + prompt_n). first = a group's first prompt or a session's first turn; later = the rest.",
    ]
    if seconds:
        lines += ["", "Times: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items())]
    return "\n".join(lines) + "\n"


def run_real(
    specs: Sequence[str | Path] = DEFAULT_SPECS,
    *,
    node: str = DEFAULT_NODE,
    capture: Path = Path("capture"),
    summaries: Path = Path("summaries"),
    log: Log = print,
    quiet: bool = True,
) -> RealRun:
    """Prepare, run every spec on its llama-server, summarize, report, check; raises HarnessError on bad input."""
    from harness import bench
    from harness.realserver.model import make_model
    from harness.realserver.prepare import prepare_server

    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    server = prepare_server(log=log)
    seconds["build (cached)" if server.reused else "build"] = (
        server.build_seconds or 0.0 if server.reused else time.monotonic() - t0
    )
    t1 = time.monotonic()
    make_model(log=log)
    seconds["model"] = time.monotonic() - t1
    opts = bench.BenchOptions(
        node=node, capture=Path(capture), summaries=Path(summaries), server_kind="sglang", quiet=quiet
    )
    loaded = [load_real_spec(p) for p in specs]
    plans = [bench.plan_experiment(s, opts) for s in loaded]
    redactor = bench.build_redactor(loaded)
    outcome = bench.Outcome()
    bench.check_writable(opts.capture, "capture", opts.min_free_mb)
    bench.check_writable(opts.summaries, "summaries", opts.min_free_mb)
    for plan in plans:
        bench.check_capture_matches(plan, opts, redactor)
    t2 = time.monotonic()
    for plan in plans:
        bench.write_manifest(plan, opts, redactor, {"real_server": "llama.cpp"})
        maker = prompt_maker_for(plan.spec.tokenizer)
        for sp in plan.servers:
            outcome.skipped_ok += len(sp.done)
            if sp.todo:
                bench.run_server_points(plan, sp, opts, redactor, maker, outcome, log)
    seconds["run"] = time.monotonic() - t2
    t3 = time.monotonic()
    bench.run_stages(opts, log)
    seconds["summarize+report"] = time.monotonic() - t3
    summary_path = Path(summaries) / f"{node}.json"
    report_path = Path(summaries) / f"{node}.md"
    checks = point_checks(Path(capture), node)
    run = RealRun(
        summary_path if summary_path.exists() else None,
        report_path if report_path.exists() else None,
        checks,
        dict(outcome.statuses),
        list(outcome.server_failures),
        seconds,
    )
    if run.summary_path is not None:
        summary = json.loads(run.summary_path.read_text(encoding="utf-8"))
        summary["real_server"] = {
            "engine": "llama.cpp llama-server",
            "binary": str(server.binary),
            "build_seconds": server.build_seconds,
            "build_reused": server.reused,
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "checks": {
                k: {**c.to_dict(), "hit_rate_usage_summary": _summary_hit(summary, k)}
                for k, c in checks.items()
            },
        }
        write_json_atomic(run.summary_path, summary)
        if run.report_path is not None:
            with open(run.report_path, "a", encoding="utf-8") as fh:
                fh.write(checks_markdown(checks, summary, seconds))
    return run
