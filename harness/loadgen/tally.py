"""What a run is and what it did: the identity copied into every record, and the run's tally."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from harness.loadgen.client_load import ClientLoad


@dataclass
class RunIds:
    """Identity fields copied into every record."""

    experiment: str
    server: str
    point: str
    seed: int


@dataclass
class StallEvidence:
    """Requests in flight and no token since `since_mono` (the run's clock): what `stalled` reports."""

    since_mono: float
    detected_mono: float
    in_flight: int
    limit_s: float

    def reason(self) -> str:
        return (
            f"stalled: {self.in_flight} requests in flight and no token for "
            f"{self.detected_mono - self.since_mono:.1f} s (timeouts.stall {self.limit_s:g} s)"
        )

    def to_dict(self) -> dict[str, float | int]:
        return {
            "since_mono": self.since_mono,
            "detected_mono": self.detected_mono,
            "in_flight": self.in_flight,
            "limit_s": self.limit_s,
        }


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
    stall: StallEvidence | None = None  # set by the stall watchdog: the run was cut, the point fails
    # each load-generator process's CPU share and loop lag (one; one per worker of a split run)
    processes: list[ClientLoad] = field(default_factory=list)
