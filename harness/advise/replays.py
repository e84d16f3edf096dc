"""One process pool for every replay one advise runs: the grid, the curve's named pools, the L3 rounds and
the candidates at load.

Each step used to fork its own pool and wait for its slowest replay, leaving a core idle while the next
step waited (on a 100,000-request trace the L3 round's shorter replay idled a core for 8 s, and the
at-load step's third replay another 8). Here the steps queue jobs on one pool, longest kind first, and
a job another step will need (today's configuration at load, known before the L3 round) runs in the gaps.
The workers fork once, after every input a job reads is set (`Work`), so a job is just (kind, config).
"""

from __future__ import annotations

import heapq
import itertools
import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any

from harness.advise.physics import model
from harness.advise.slo import Slo
from harness.sim.timing import CardProfile
from harness.whatif.grid import Config
from harness.whatif.replay import ideal_hits, replay
from harness.whatif.serve import engine
from harness.whatif.trace import Trace

# what a job replays, and the order the queue takes kinds in: an L3 replay runs the whole engine and
# the at-load replays the scheduler (each tens of tree replays), so they start first
KINDS = ("storage", "load", "grid", "curve")


@dataclass(frozen=True)
class Work:
    """What the jobs read, set before the workers fork (they share it, nothing is pickled per job)."""

    trace: Trace
    profile: CardProfile
    slo: Slo | None = None
    loaded: Trace | None = None  # the trace at the load (harness.advise.load.at_load); None: no load jobs


_WORK: Work | None = None


def _ideal(trace: Trace, page_size: int) -> list[int] | None:
    """The unbounded cache's hits: one per trace in each process (replay computes other page sizes)."""
    return ideal_hits(trace, 1) if page_size == 1 else None


def run_job(kind: str, cfg: Config) -> Any:
    """One job: grid and storage -> (Result, Modelled); curve -> Result (one request at a time, exact);
    load -> (Result, TTFT per request, makespan) through the scheduler at the load."""
    w = _WORK
    assert w is not None, "Replays sets the work before the pool forks"
    if kind in ("grid", "storage"):
        res = replay(w.trace, cfg, _ideal(w.trace, cfg.page_size), w.profile)
        return res, model(w.trace, res, w.profile, w.slo)
    if kind == "curve":
        one_at_a_time = replace(w.trace, concurrency=None)
        return replay(one_at_a_time, cfg, _ideal(w.trace, cfg.page_size), w.profile)
    if kind == "load":
        assert w.loaded is not None, "load jobs need Work.loaded"
        # the loaded trace has the same keys in the same order: the same ideal, read from the memo
        got = engine(w.loaded, cfg, ideal_hits(w.trace, cfg.page_size), w.profile)
        return got.result, got.ttft_s, got.makespan_s
    raise ValueError(f"unknown replay kind {kind!r}; expected one of {KINDS}")


def _run(job: tuple[str, Config]) -> Any:
    return run_job(*job)


class Replays:
    """A queue of replay jobs over a fork pool of `workers` (inline, in submission order, with one).

    Jobs start by kind (KINDS' order), then in submission order; the queue is fed from the caller's
    thread whenever it waits (`gather`), keeping one job beyond the workers queued so no worker idles
    while the caller reads results."""

    def __init__(self, work: Work, workers: int | None = None) -> None:
        global _WORK
        _WORK = work
        self._n = max(1, workers or os.cpu_count() or 1)
        forks = "fork" in multiprocessing.get_all_start_methods()
        self._ex = (
            ProcessPoolExecutor(self._n, mp_context=multiprocessing.get_context("fork"))
            if self._n > 1 and forks
            else None
        )
        self._queue: list[tuple[int, int, tuple[str, Config], Future]] = []
        self._seq = itertools.count()
        self._running: dict[Future, Future] = {}  # the executor's future -> the caller's

    def __enter__(self) -> Replays:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        global _WORK
        self._queue.clear()
        if self._ex is not None:
            self._ex.shutdown(wait=True, cancel_futures=True)
            self._ex = None
        _WORK = None

    def submit(self, kind: str, cfg: Config) -> Future:
        """Queue one job; its future is done once a `gather` (or `result`) has waited for it."""
        if kind not in KINDS:
            raise ValueError(f"unknown replay kind {kind!r}; expected one of {KINDS}")
        fut: Future = Future()
        if self._ex is None:
            fut.set_result(run_job(kind, cfg))
            return fut
        heapq.heappush(self._queue, (KINDS.index(kind), next(self._seq), (kind, cfg), fut))
        return fut

    def drop(self, futures: list[Future]) -> None:
        """Forget jobs nobody needs any more that have not started (a guess the L3 round overturned)."""
        gone = set(map(id, futures))
        kept = [q for q in self._queue if id(q[3]) not in gone]
        if len(kept) != len(self._queue):
            self._queue = kept
            heapq.heapify(self._queue)
            for f in futures:
                f.cancel()

    def gather(self, futures: list[Future]) -> list[Any]:
        """Wait for these jobs (feeding the pool meanwhile); their results in the same order."""
        while not all(f.done() for f in futures):
            self._feed()
            done, _ = wait(list(self._running), return_when=FIRST_COMPLETED)
            for inner in done:
                outer = self._running.pop(inner)
                err = inner.exception()
                if err is not None:
                    outer.set_exception(err)
                else:
                    outer.set_result(inner.result())
        self._feed()
        return [f.result() for f in futures]

    @property
    def workers(self) -> int:
        return self._n

    def _feed(self) -> None:
        if self._ex is None:
            return
        while self._queue and len(self._running) <= self._n:
            _, _, job, outer = heapq.heappop(self._queue)
            self._running[self._ex.submit(_run, job)] = outer
