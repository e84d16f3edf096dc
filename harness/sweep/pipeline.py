"""Specs in, a validated summary out: the two steps every bench entry point shares, in one module.

`harness bench`, the real-server make targets (harness.realserver), the SGLang suite and the fleet all
run the sweep (`run_specs`: plan every spec, then bench.run_plans) and then the stages after it
(`after_sweep`: summarize → report → validate over capture/<node>). What differs between them is only
what comes before (preparing a server) and after (their own checks).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.capture.redact import Redactor, spec_redactor
from harness.spec import ExperimentSpec, load_spec
from harness.sweep.bench import Outcome, run_plans
from harness.sweep.plan import BenchOptions, ExperimentPlan, plan_experiment
from harness.sweep.progress import HEARTBEAT_S, phase

Log = Callable[[str], None]


@dataclass
class SpecsRun:
    """The plans and redactor a sweep used (a re-run needs them again) and what it did."""

    plans: list[ExperimentPlan]
    redactor: Redactor
    outcome: Outcome


@dataclass
class StageResult:
    """What the stages after a sweep wrote, and validate's word on it."""

    summaries: list[Path] = field(default_factory=list)  # summaries/<node>.json
    reports: list[Path] = field(default_factory=list)  # every report file, all nodes
    flagged: int = 0  # points or pairs validate flagged
    verdict_lines: list[str] = field(default_factory=list)  # "validate <node>: ...", one per node


def run_specs(specs: Sequence[ExperimentSpec | str | Path], opts: BenchOptions, log: Log) -> SpecsRun:
    """Plan every spec under `opts` and run the sweep (checks first, nothing launched before they pass)."""
    loaded = [s if isinstance(s, ExperimentSpec) else load_spec(s) for s in specs]
    plans = [plan_experiment(s, opts) for s in loaded]
    redactor = spec_redactor(loaded)
    return SpecsRun(plans, redactor, run_plans(plans, opts, redactor, log))


def after_sweep(opts: BenchOptions, log: Log) -> StageResult:
    """summarize → report → validate over capture/<node>; logs what it wrote.

    The verdict lines are returned, not logged, so each caller prints them where its output ends
    (bench and the real-server suites: last of all, or right away as each asks; the fleet: right away).
    """
    from harness import verdicts
    from harness.report import write_report
    from harness.report.glance import glance, glance_text
    from harness.summarize.summary import summarize, write_summaries  # pandas: loaded only after a sweep

    every = None if opts.quiet else HEARTBEAT_S  # --quiet: the start and end lines, no heartbeat
    with phase(f"summarizing {Path(opts.capture) / opts.node}", log, every):
        summaries = summarize([Path(opts.capture) / opts.node])
        result = StageResult(summaries=write_summaries(summaries, opts.summaries))
    for p in result.summaries:
        log(f"summary: {p}")
    for node, summary in summaries.items():
        with phase(f"report {node} (charts, .md, .html, CSVs)", log, every):
            written = write_report(summary, opts.summaries, stem=node)
        result.reports += written
        pages = [p for p in written if p.suffix == ".html"]
        n_png = sum(p.suffix == ".png" for p in written)
        n_csv = sum(p.suffix == ".csv" for p in written)
        log(
            f"report: {written[0]}, {', '.join(map(str, pages)) or 'no page'} (+{n_png} charts, {n_csv} CSVs)"
        )
        for line in [f"at a glance ({node}):", *glance_text(glance(summary))]:  # as the .md and page open
            log(line)
        verdict = verdicts.stored_verdict(summary)  # judged once, by summarize: the line the summary holds
        result.flagged += verdict.flagged
        result.verdict_lines.append(f"validate {node}: {verdict.line}")
    return result


@contextmanager
def timed(seconds: dict[str, float], label: str) -> Iterator[None]:
    """Add the block's wall time to `seconds[label]` (the suites report how long each stage took)."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        seconds[label] = time.monotonic() - t0
