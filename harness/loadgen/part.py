"""Which conversations one worker process of a split run sends (harness.loadgen.split)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from harness.workloads import Schedule
from harness.workloads.schedule import Conversation


@dataclass(frozen=True)
class Part:
    """Worker `i` of `n` sends the conversations whose group (else session, else id) is i modulo n."""

    i: int
    n: int

    def mine(self, c: Conversation) -> bool:
        if self.n == 1:
            return True
        return self.has(c.group if c.group is not None else c.session if c.session is not None else c.id)

    def has(self, key: int) -> bool:
        """This worker sends the conversations of `key` (a group, session or id)."""
        return self.n == 1 or key % self.n == self.i

    def count(self, schedule: Schedule) -> int:
        """Requests of this part (a lazy shared-prefix schedule counts them without making any)."""
        if self.n == 1:
            return len(schedule)
        counted = getattr(schedule.conversations, "count_part", None)
        if counted is not None:
            return counted(self.i, self.n)
        return sum(len(c.turns) for c in schedule.conversations if self.mine(c))

    def feed(self, schedule: Schedule) -> Iterator[Conversation]:
        """A lazy schedule's conversations for this part: others' may be stubs (a shared-prefix schedule
        skips making their prompts), still in order, so arrival times are drawn for all of them."""
        for_part = getattr(schedule.conversations, "for_part", None)
        if self.n > 1 and for_part is not None:
            return for_part(self.i, self.n)
        return iter(schedule.conversations)
