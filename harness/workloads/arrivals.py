"""Arrival processes: when each request of a schedule is due, as offsets from the start of a run."""

from __future__ import annotations

import random


def arrival_offsets(n: int, rate: float, seed: int) -> list[float]:
    """Seeded Poisson arrival times (seconds after start) for n requests at `rate` per second."""
    rng = random.Random(f"arrivals:{seed}")
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out
