"""One way to run a function over items across a fork pool: the replays share their inputs through the
caller's module globals, set before the fork, so nothing large is pickled per task."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def fork_map(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """fn over items in order: inline with one worker (or where fork is missing), else a fork pool of
    min(workers or the cores, items) processes."""
    n = min(workers or os.cpu_count() or 1, len(items))
    if n <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(x) for x in items]
    with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as ex:
        return list(ex.map(fn, items))
