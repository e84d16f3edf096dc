"""Arrival processes: when each session (or single request) of a schedule starts, as offsets from the run start.

Seeded and on absolute times (offsets from one start), so a busy client never drifts the schedule.
`poisson`: exponential gaps (mean 1 / rate); `constant`: exactly 1 / rate apart; `gamma`: vLLM's
convention, gaps drawn from a gamma distribution with shape = burstiness and mean 1 / rate (burstiness
1 is Poisson-like, below 1 burstier, above 1 more regular).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from harness.spec.load import ARRIVALS


def arrival_offsets(
    n: int, rate: float, seed: int, process: str = "poisson", burstiness: float = 1.0
) -> list[float]:
    """Arrival times (seconds after start) of n arrivals at `rate` per second; the first is at 0."""
    return list(itertools.islice(iter_arrival_offsets(rate, seed, process, burstiness), n))


def iter_arrival_offsets(
    rate: float, seed: int, process: str = "poisson", burstiness: float = 1.0
) -> Iterator[float]:
    """The same arrival times, produced one at a time (a long run never holds them all)."""
    if process not in ARRIVALS:
        raise ValueError(f"unknown arrival process {process!r} (expected one of {', '.join(ARRIVALS)})")
    if rate <= 0 or burstiness <= 0:
        raise ValueError(f"rate and burstiness must be positive (got {rate}, {burstiness})")
    return _offsets(rate, seed, process, burstiness)


def _offsets(rate: float, seed: int, process: str, burstiness: float) -> Iterator[float]:
    if process == "constant":
        k = 0
        while True:
            yield k / rate
            k += 1
    rng = random.Random(f"arrivals:{seed}")
    if process == "poisson":
        gap = lambda: rng.expovariate(rate)  # noqa: E731 - the same draws as before gamma existed
    else:
        scale = 1.0 / (rate * burstiness)
        gap = lambda: rng.gammavariate(burstiness, scale)  # noqa: E731
    t = 0.0
    while True:
        yield t
        t += gap()
