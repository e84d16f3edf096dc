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


# what one request's record says of its answer, whatever engine or event loop carried it
ANSWER_FACTS = (
    "ok",
    "answer",
    "prompt_sha",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "finish_reason",
)


def answer_facts(rows: list[dict[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """index -> the ANSWER_FACTS of its record and how many token stamps it has."""
    return {r["index"]: tuple(r[k] for k in ANSWER_FACTS) + (len(r["token_mono"]),) for r in rows}
