"""What a run is and what it did: the identity copied into every record, and the run's tally."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class RunIds:
    """Identity fields copied into every record."""

    experiment: str
    server: str
    point: str
    seed: int


@dataclass
class LoadResult:
    """The run's tally: scheduled = ok + failed + skipped + not_sent once it ended (not interrupted)."""

    scheduled: int
    sent: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0  # turns after a failed turn of their session
    not_sent: int = 0  # left when duration_s ran out
    errors: Counter = field(default_factory=Counter)
    max_in_flight: int = 0
    start_mono: float = 0.0
    end_mono: float = 0.0
    start_wall: float = 0.0
    end_wall: float = 0.0
    interrupted: bool = False
    time_limited: bool = False
    client_cpu_s: float = 0.0  # this process's CPU time over the run (summed over the workers of a split run)
