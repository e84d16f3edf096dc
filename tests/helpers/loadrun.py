"""run_schedule driven to its end from a test: the identity and model every loadgen test uses."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from harness.loadgen.run import LoadResult, RunIds, run_schedule
from harness.workloads.schedule import Schedule


def run_sync(
    schedule: Schedule, url: str, out: Path, concurrency: int = 4, api: str = "openai-chat", **kw: Any
) -> LoadResult:
    """Send the whole schedule to url (model "m", ids t/fake/p/0), records into out; the run's tally."""
    return asyncio.run(
        run_schedule(
            schedule,
            base_url=url,
            api=api,
            model="m",
            concurrency=concurrency,
            out_path=out,
            ids=RunIds("t", "fake", "p", 0),
            **kw,
        )
    )
