"""What a person sees while `--confirm` runs, on stderr: a one-line estimate first, then one bar per
candidate (requests done of total, elapsed, time left) under a line per finished candidate.

The bars are the load generator's own (harness.loadgen.progress), joined to a display drawn on stderr so
stdout keeps the result (Markdown or --json). `--quiet` shows neither.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harness.engines.confirm import CONFIRM_TARGETS
from harness.sweep.progress import fmt_duration


@dataclass(frozen=True)
class Estimate:
    """About how long the confirm takes, and what the figure rests on (None: no model for that server)."""

    seconds: float | None
    basis: str

    def line(self) -> str:
        if self.seconds is None:
            return f"no estimate ({self.basis})"
        return f"about {fmt_duration(self.seconds)} ({self.basis})"

    def to_dict(self) -> dict[str, Any]:
        s = None if self.seconds is None else round(self.seconds, 1)
        return {"seconds": s, "basis": self.basis}


def estimate(
    server_kind: str, candidates: int, requests: int | None, answer_tokens: int, modelled_s: float
) -> Estimate:
    """The kind's pace (harness.engines.confirm) a candidate: the sim's measured wall time a request and an
    answer token plus a start; SGLang on a GPU's start plus the card's modelled service time (`modelled_s`,
    one candidate); CPU servers have none."""
    if not requests:
        return Estimate(None, "the number of requests is known only for a trace")
    target = CONFIRM_TARGETS.get(server_kind)
    pace = target.pace if target is not None else None
    if pace is None:
        return Estimate(None, f"{server_kind}: a CPU server's speed is not modelled")
    per = pace.start_s + requests * pace.request_s + answer_tokens * pace.token_s
    if pace.modelled:
        per += modelled_s
    return Estimate(candidates * per, pace.basis)


class Display:
    """A rich display on stderr that the candidates' point bars join (harness.loadgen.progress)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = Console(stderr=True)
        self.p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            console=self.console,
            auto_refresh=True,
            refresh_per_second=2,
            transient=False,
        )

    def log(self, msg: str) -> None:
        self.console.print(msg, markup=False, highlight=False, soft_wrap=True)


@contextlib.contextmanager
def display(quiet: bool) -> Iterator[Display | None]:
    """The stderr display while the candidates run (None under --quiet); the point bars join it and the
    sweep's own overall bar stays out (harness.sweep.progress)."""
    from harness.loadgen import progress as point_bars

    if quiet:
        yield None
        return
    d = Display()
    d.p.start()
    point_bars.join_outer(lambda: d.p)
    try:
        yield d
    finally:
        point_bars.join_outer(None)
        d.p.stop()
