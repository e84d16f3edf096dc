"""Run the llama-real specs through the harness's own bench path, then hold the run to the real-server checks.

Prepare (build or reuse) → `harness bench`'s own plan and run over the specs (one llama-server up for
its points, the harness's load generator) → summarize + report (summaries/<node>.json) → checks of
issue 7 per point, added to the summary under `real_server` and to the report as a section of their own.
The hit rates (usage, server timings) are the summary's; the checks add the per-request promises.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.capture import REQUESTS, write_json_atomic
from harness.realserver.checks import RealChecks, check_records
from harness.sweep.pipeline import after_sweep, run_specs, timed

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
    verdict_lines: list[str] = field(default_factory=list)  # validate's line per node

    @property
    def problems(self) -> list[str]:
        out = list(self.server_failures)
        out += [f"{k}: status {s}" for k, s in self.statuses.items() if s != "ok"]
        out += [f"{k}: {p}" for k, c in self.checks.items() for p in c.problems()]
        return out


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


def _summary_figures(summary: dict[str, Any], key: str) -> dict[str, Any]:
    """The summarizer's figures for one "<exp>/<server>/<point>" (seed folder); {} when it has none."""
    exp, server, pname = key.split("/", 2)
    for p in summary.get("points", []):
        if p.get("experiment") != exp or p.get("server") != server:
            continue
        for seed in (p.get("seeds") or {}).values():
            if Path(str(seed.get("path", ""))).name == pname:
                return dict(seed.get("figures") or {})
    return {}


SUMMARY_HIT_RATES = ("hit_rate_usage", "hit_rate_timings", "hit_rate_by_position")  # in the point's figures


def _section(c: RealChecks, figures: dict[str, Any]) -> dict[str, Any]:
    """One point's checks for the summary; the hit rates the summary already holds are not repeated."""
    d = {k: v for k, v in c.to_dict().items() if k not in SUMMARY_HIT_RATES}
    d["hit_rate_usage_summary"] = figures.get("hit_rate_usage")
    return d


def checks_markdown(checks: dict[str, RealChecks], summary: dict[str, Any], seconds: dict[str, float]) -> str:
    """The report section: client vs server TTFT, cached-token agreement, hit rates side by side."""
    lines = [
        "",
        "## Real server checks (llama.cpp llama-server)",
        "",
        "| point | ok | TTFT < prompt_ms | client TTFT median ms | server prompt_ms median | gap median ms "
        "| gap p90 ms | cached != cache_n | hit usage | hit timings | first / later |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    for key, c in checks.items():
        fig = _summary_figures(summary, key)
        lines.append(
            f"| {key} | {c.ok}/{c.requests} | {len(c.ttft_below_prompt_ms)} | {ms(c.ttft_sent_ms_median)} "
            f"| {ms(c.prompt_ms_median)} | {ms(c.gap_ms_median)} | {ms(c.gap_ms_p90)} "
            f"| {len(c.cached_mismatch)} | {pct(fig.get('hit_rate_usage'))} | {pct(fig.get('hit_rate_timings'))} "
            f"| {pct(c.hit_rate_usage_first)} / {pct(c.hit_rate_usage_later)} |"
        )
    lines += [
        "",
        "client TTFT is measured from send to the first content event; gap = client TTFT - the server's own "
        "prompt_ms (server queueing before a slot starts the prompt, transport, client). hit usage and hit "
        "timings are the summary's hit_rate_usage and hit_rate_timings (see the hit-rate table above). "
        "first = a group's first prompt or a session's first turn; later = the rest.",
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
    from harness.realserver.model import make_model
    from harness.realserver.prepare import prepare_server
    from harness.sweep import plan

    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    server = prepare_server(log=log)
    seconds["build (cached)" if server.reused else "build"] = (
        server.build_seconds or 0.0 if server.reused else time.monotonic() - t0
    )
    with timed(seconds, "model"):
        make_model(log=log)
    opts = plan.BenchOptions(
        node=node, capture=Path(capture), summaries=Path(summaries), server_kind="sglang", quiet=quiet
    )
    with timed(seconds, "run"):
        outcome = run_specs(specs, opts, log).outcome
    with timed(seconds, "summarize+report"):
        stages = after_sweep(opts, log)
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
        stages.verdict_lines,
    )
    if run.summary_path is not None:
        summary = json.loads(run.summary_path.read_text(encoding="utf-8"))
        summary["real_server"] = {
            "engine": "llama.cpp llama-server",
            "binary": str(server.binary),
            "build_seconds": server.build_seconds,
            "build_reused": server.reused,
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "checks": {k: _section(c, _summary_figures(summary, k)) for k, c in checks.items()},
        }
        write_json_atomic(run.summary_path, summary)
        if run.report_path is not None:
            with open(run.report_path, "a", encoding="utf-8") as fh:
                fh.write(checks_markdown(checks, summary, seconds))
    return run
