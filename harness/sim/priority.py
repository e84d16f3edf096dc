"""SGLang 0.5.23's priority scheduling, as the sim's scheduler applies it.

- `Scheduler._set_or_validate_priority` (managers/scheduler.py): with --enable-priority-scheduling a request
  sent without `priority` gets the least-preferred value, sys.maxsize when low values go first
  (--schedule-low-priority-values-first), else -sys.maxsize - 1; that value also goes into the radix tree.
- `SchedulePolicy._sort_by_priority_and_fcfs` (managers/schedule_policy.py, from `calc_priority` under the
  default fcfs policy): before each prefill the waiting queue is sorted by priority x sign, then by the time
  it entered the queue; sign -1 (larger values first) unless low values go first.

Not modelled: priority preemption of running requests (`PrefillAdder.preempt_to_schedule`, on by default
with priority scheduling, when the gap exceeds --priority-scheduling-preemption-threshold) and the queue
limit's priority abort (`_abort_on_queued_limit`, only with --max-queued-requests).
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

from harness.sim.sched_records import SimRequest


class PriorityError(ValueError):
    """A `priority` that is not an integer: SGLang's request types declare `priority: Optional[int]`."""


def request_priority(body: dict[str, Any]) -> int | None:
    """The request's `priority` field; None when not sent (a 400 otherwise, as SGLang's validation)."""
    v = body.get("priority")
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise PriorityError(f"priority must be an integer, got {v!r}.")
    return v


def unset_priority(low_values_first: bool) -> int:
    """The priority a request sent without one is given under priority scheduling."""
    return sys.maxsize if low_values_first else -sys.maxsize - 1


def by_priority(waiting: deque[SimRequest], low_values_first: bool) -> deque[SimRequest]:
    """The waiting queue in SGLang's order: preferred priority first, then first queued (a stable sort)."""
    sign = 1 if low_values_first else -1
    return deque(
        sorted(
            waiting,
            key=lambda r: ((r.priority or 0) * sign, r.received if r.received is not None else r.arrival),
        )
    )
