"""What the three outputs say about how a confirm ran: the block size sent and why, how a slice scaled the
pools, the estimate beside the time it took, and whether it is partial (stopped early) and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.advise.confirm_progress import Estimate
from harness.advise.confirm_stop import Stop
from harness.advise.live_spec import LiveBlock
from harness.sweep.progress import fmt_duration


@dataclass(frozen=True)
class SliceScale:
    """A slice's pools scaled by its reused units over the whole trace's (harness.advise.confirm_slice)."""

    requests: int
    of_requests: int
    reused_slice: int  # distinct blocks two or more of the slice's requests carry
    reused_trace: int
    floor: int  # the slice's longest request (prompt + answer sent live) + 1, in blocks

    @property
    def ratio(self) -> float:
        return self.reused_slice / self.reused_trace if self.reused_trace else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "of_requests": self.of_requests,
            "reused_blocks_slice": self.reused_slice,
            "reused_blocks_trace": self.reused_trace,
            "pool_ratio": round(self.ratio, 6),
            "pool_floor": self.floor,
            "rule": "pool x reused_blocks_slice / reused_blocks_trace, not below pool_floor nor above the pool",
        }

    def sentence(self) -> str:
        return (
            f"Slice: the trace's first {self.requests:,} of {self.of_requests:,} requests; each pool scaled "
            f"by the slice's reused blocks over the trace's ({self.reused_slice:,} / {self.reused_trace:,} = "
            f"{self.ratio:.3g}), not below {self.floor:,} blocks (the longest request sent live + 1) nor above "
            "the candidate's own pool."
        )


@dataclass
class ConfirmInfo:
    server_kind: str
    estimate: Estimate
    block: LiveBlock | None = None  # a Mooncake trace: the block sent live
    slice: SliceScale | None = None
    time_limit_s: float | None = None
    elapsed_s: float = 0.0
    stop: Stop | None = None  # set when the confirm ended early
    notes: list[str] = field(default_factory=list)
    capacity: Any = None  # --confirm-capacity: harness.advise.confirm_capacity.CapacityCheck

    @property
    def partial(self) -> bool:
        return self.stop is not None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "server_kind": self.server_kind,
            "partial": self.partial,
            "partial_reason": None if self.stop is None else self.stop.reason,
            "exit_code": 0 if self.stop is None else self.stop.exit_code,
            "time_limit_s": self.time_limit_s,
            "elapsed_s": round(self.elapsed_s, 1),
            "estimate": self.estimate.to_dict(),
        }
        if self.block is not None:
            d["block"] = {
                "block_tokens": self.block.tokens,
                "trace_block_tokens": self.block.trace_block,
                "reason": self.block.reason,
                "answers_scaled": self.block.shrunk,
            }
        if self.slice is not None:
            d["slice"] = self.slice.to_dict()
        if self.notes:
            d["notes"] = self.notes
        return d

    def sentences(self) -> list[str]:
        """The lines under "Confirmed live" (Markdown and page alike)."""
        out = []
        if self.stop is not None:
            out.append(
                f"Partial confirm: {self.stop.reason} after {fmt_duration(self.elapsed_s)}; the candidates that "
                "finished are kept, the running one over the requests it finished (exit "
                f"{self.stop.exit_code})."
            )
        est = self.estimate.line()
        said = f"estimated {est}" if self.estimate.seconds is not None else est
        out.append(f"Took {fmt_duration(self.elapsed_s)}; {said}.")
        if self.block is not None:
            b = self.block
            answers = f"; answers scaled by {b.tokens}/{b.trace_block} as well" if b.shrunk else ""
            out.append(
                f"Live blocks: {b.tokens} tokens a hash id ({b.reason}){answers}; each pool and tlru's lengths "
                f"launched as blocks x {b.tokens} tokens."
            )
        if self.slice is not None:
            out.append(self.slice.sentence())
        return out + self.notes

    def capacity_markdown(self) -> list[str]:
        """--confirm-capacity's line and probe table under "Confirmed live" (none without it)."""
        c = self.capacity
        if c is None:
            return []
        head, rows = c.table()
        return ["", c.sentence(), "", f"| {' | '.join(head)} |", "|" + "---|" * len(head)] + [
            f"| {' | '.join(r)} |" for r in rows
        ]
