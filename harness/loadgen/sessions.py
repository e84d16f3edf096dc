"""Per-conversation state during a run: history for the next prompt, think time, and what a failure ends.

A session's next turn is sent only after its previous turn finished; after a failed turn the session's
remaining turns are never sent (their prompts would hold a partial or empty answer no clean run sends):
they are recorded as skipped, with the reason.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

from harness.capture.records import RequestRecord
from harness.spec.load import ThinkTime
from harness.workloads.prompts import Turnout
from harness.workloads.schedule import Conversation, Request
from harness.workloads.session_turns import Answers


def draw_think(think: ThinkTime | None, rng: random.Random) -> float:
    """One think time in seconds (0 without a think time)."""
    if think is None or think.mean_s <= 0:
        return 0.0
    if think.distribution == "exponential":
        return rng.expovariate(1.0 / think.mean_s)
    if think.distribution == "lognormal":
        return rng.lognormvariate(math.log(think.mean_s) - think.sigma**2 / 2, think.sigma)
    return think.mean_s


class Session:
    """One conversation's progress: the turns answered so far and its own seeded think-time draws."""

    __slots__ = ("conv", "history", "rng", "think_s", "due", "offset", "next_offset")

    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.history = Answers()  # packed: a round-robin run holds every session's answers at once
        self.rng: random.Random | None = None
        self.think_s: float | None = None  # drawn before the next turn (recorded on it)
        self.due: float | None = None  # when the next turn is due (time.monotonic); None: when taken
        self.offset: float | None = None  # open loop: the first turn's arrival offset from the run start
        self.next_offset: float | None = None  # and the next conversation's (the sim's lockstep hint)

    def next_turn(self) -> Request | None:
        n = len(self.history)
        return self.conv.turns[n] if n < len(self.conv.turns) else None

    def answered(self, rec: RequestRecord, output_ids: list[int] | None) -> None:
        self.history.append(
            Turnout(
                answer=rec.answer or "",
                answer_ids=tuple(output_ids) if output_ids is not None else None,
                completion_tokens=rec.completion_tokens,
            )
        )

    def remaining(self) -> Sequence[Request]:
        """Turns not yet sent (after the answered ones)."""
        return self.conv.turns[len(self.history) :]

    def think(self, think: ThinkTime | None, seed: int) -> float:
        """Draw the think time before the next turn, seeded by (seed, conversation) in turn order."""
        if think is None:
            self.think_s = None
            return 0.0
        if self.rng is None:
            self.rng = random.Random(f"think:{seed}:{self.conv.id}")
        self.think_s = draw_think(think, self.rng)
        return self.think_s


def trace_due(req: Request, t0: float, due: float | None, answered: float | None) -> float | None:
    """A replayed trace's own send time (timestamps: honor): a session trace's later turn its recorded
    gap after the previous answer was received; else its time from the run start `t0`, never before the
    previous turn allows (`due`)."""
    if req.gap is not None and answered is not None:
        return answered + req.gap
    if req.arrival is None:
        return due
    return max(t0 + req.arrival, due if due is not None else 0.0)
