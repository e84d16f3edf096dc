"""Capacity at an SLO: the highest load one replica of a candidate serves, and the replicas a load needs.

Both are found by replays at load through the sim's scheduler (harness.whatif.serve.engine), never by
dividing: a host tier changes the hit rate with the load, and the queue is not linear in it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Tried:
    """One replay of the search: the offered load, whether it met the SLO, and what it measured."""

    rps: float  # offered requests/s
    scale: float  # the load knob: a trace's speedup, or requests in flight, or a Poisson rate
    replicas: int
    meets: bool
    overloaded: bool
    attainment: float  # share of requests within every per-request bound
    figures: dict[str, float]  # each SLO bound's percentile, ms
    hit_rate: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Capacity:
    """The highest offered load one replica meets the SLO at (None: not even the lowest tried)."""

    rps: float | None
    input_tokens_per_s: float | None
    hit_rate: float | None
    tried: tuple[Tried, ...] = field(default=())
    low_rps: float | None = None  # the card physics' error band around rps (docs/advise.md#physics)
    high_rps: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "rps": self.rps,
            "input_tokens_per_s": self.input_tokens_per_s,
            "hit_rate": self.hit_rate,
            "range_rps": None if self.low_rps is None else [self.low_rps, self.high_rps],
            "tried": [t.to_dict() for t in self.tried],
        }
