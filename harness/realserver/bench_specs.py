"""Bench a list of specs on a real server through `harness bench`'s own path, timing each stage.

The llama.cpp suite and the vLLM suite share this: plan every spec, run the plans, then
summarize → report → validate; only their preparation and their checks differ.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.spec import load_spec

Log = Callable[[str], None]


@contextmanager
def timed(seconds: dict[str, float], label: str) -> Iterator[None]:
    """Add the block's wall time to `seconds[label]`."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        seconds[label] = time.monotonic() - t0


@dataclass
class SpecsRun:
    """The plans and redactor used (for a re-run) and the bench outcome (statuses, server failures)."""

    plans: list[Any]
    redact: Any
    outcome: Any


def bench_specs(
    specs: Sequence[str | Path],
    opts: Any,
    log: Log,
    seconds: dict[str, float],
    run_label: str = "run",
    verdict_lines: list[str] | None = None,
) -> SpecsRun:
    """Plan and run every spec under `opts` (sweep.plan.BenchOptions), then summarize, report, validate.

    `verdict_lines` collects validate's verdict lines instead of logging them (bench.run_stages).
    """
    from harness.capture.redact import spec_redactor
    from harness.sweep import bench, plan

    loaded = [load_spec(p) for p in specs]
    plans = [plan.plan_experiment(s, opts) for s in loaded]
    redact = spec_redactor(loaded)
    with timed(seconds, run_label):
        outcome = bench.run_plans(plans, opts, redact, log)
    run = SpecsRun(plans, redact, outcome)
    with timed(seconds, "summarize+report"):
        bench.run_stages(opts, log, verdict_lines)
    return run
