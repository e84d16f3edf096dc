"""The live progress bar of a run, refreshed 4x a second from a task so drawing never runs per request."""

from __future__ import annotations

import asyncio
import statistics
from collections import deque
from typing import Any


class Progress:
    def __init__(self, label: str, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed {task.fields[failed]}  TTFT p50 {task.fields[ttft]}"),
            TimeElapsedColumn(),
            auto_refresh=False,
            transient=False,
        )
        self.task = self.p.add_task(label, total=total, failed=0, ttft="-")
        self.p.start()

    def _update(self, res: Any, ttfts: deque) -> None:
        ttft = f"{statistics.median(ttfts) * 1000:.1f} ms" if ttfts else "-"
        done = res.ok + res.failed + res.skipped + res.not_sent
        self.p.update(self.task, completed=done, failed=res.failed, ttft=ttft)
        self.p.refresh()

    async def run(self, res: Any, ttfts: deque) -> None:
        while True:
            self._update(res, ttfts)
            await asyncio.sleep(0.25)

    def finish(self, res: Any, ttfts: deque) -> None:
        self._update(res, ttfts)
        self.p.stop()
