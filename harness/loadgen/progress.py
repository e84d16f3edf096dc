"""The live progress bar of a run, refreshed 4x a second from a task so drawing never runs per request."""

from __future__ import annotations

import asyncio
import statistics
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

# how a point bar joins an outer display (the sweep's bar, harness.sweep.progress, registers it while
# it runs); None: each point draws its own bar. Registered from above so the load generator imports
# nothing of the sweep.
_outer: Callable[[], Any] | None = None


def join_outer(get: Callable[[], Any] | None) -> None:
    """Point bars from now on join the rich Progress `get()` returns (None: they draw their own)."""
    global _outer
    _outer = get


def joined() -> bool:
    """Whether point bars join a display someone above registered (harness.advise.confirm_progress)."""
    return _outer is not None


class RecentTtft(deque[float]):
    """The latest TTFTs (s) a point's bar shows. A sim's answers carry its virtual stamps (`sim_time`):
    then the bar shows the modelled card's TTFT, the figure the point is reported and a confirm compared
    by, not the sim's wall time (milliseconds at --time-scale against predictions of hundreds)."""

    modelled = False

    def add(self, rec: Any) -> None:
        st = getattr(rec, "sim_time", None)
        arrival, first = (
            (st.get("arrival_s"), st.get("first_token_s")) if isinstance(st, dict) else (None, None)
        )
        if isinstance(arrival, int | float) and isinstance(first, int | float):
            if not self.modelled:  # the first stamped answer: from here on, the modelled clock only
                self.clear()
                self.modelled = True
            self.append(first - arrival)
        elif not self.modelled and rec.ttft_s is not None:
            self.append(rec.ttft_s)


class Progress:
    def __init__(self, label: str, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.shared = _outer() if _outer is not None else None  # inside a sweep: under the overall bar
        self.p = self.shared or Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            auto_refresh=False,
            transient=False,
        )
        self.task = self.p.add_task(label, total=total, info=self._info(0, "-"))
        if self.shared is None:
            self.p.start()

    @staticmethod
    def _info(failed: int, ttft: str, modelled: bool = False) -> str:
        return f"failed {failed}  {'modelled ' if modelled else ''}TTFT p50 {ttft}"

    def _update(self, res: Any, ttfts: Sequence[float]) -> None:
        ttft = f"{statistics.median(ttfts) * 1000:.1f} ms" if ttfts else "-"
        done = res.ok + res.failed + res.skipped + res.not_sent
        info = self._info(res.failed, ttft, bool(getattr(ttfts, "modelled", False)))
        self.p.update(self.task, completed=done, info=info)
        self.p.refresh()

    async def run(self, res: Any, ttfts: Sequence[float]) -> None:
        while True:
            self._update(res, ttfts)
            await asyncio.sleep(0.25)

    def finish(self, res: Any, ttfts: Sequence[float]) -> None:
        self._update(res, ttfts)
        if self.shared is None:
            self.p.stop()
        else:  # the finished point's bar leaves the sweep's display; its result line follows in the log
            self.p.remove_task(self.task)
