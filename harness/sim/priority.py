"""SGLang 0.5.23's priority scheduling, as the sim's scheduler applies it.

- `Scheduler._set_or_validate_priority` (managers/scheduler.py): with --enable-priority-scheduling a request
  sent without `priority` gets the least-preferred value, sys.maxsize when low values go first
  (--schedule-low-priority-values-first), else -sys.maxsize - 1; that value also goes into the radix tree.
- `SchedulePolicy._sort_by_priority_and_fcfs` (managers/schedule_policy.py, from `calc_priority` under the
  default fcfs policy): before each prefill the waiting queue is sorted by priority x sign, then by the time
  it entered the queue; sign -1 (larger values first) unless low values go first.

- `PrefillAdder.preempt_to_schedule` (managers/schedule_policy.py), called from
  `Scheduler.get_new_batch_prefill` (managers/scheduler.py) when the running batch is full and preemption is
  on (priority scheduling without --disable-priority-preemption): the running requests are taken least
  preferred first (then the latest queued), each only while the arrival beats it by more than
  --priority-scheduling-preemption-threshold (default 10, strictly more); each frees its output reservation
  (`_get_running_request_total_token_offset`), and preemption happens only once that covers the arrival's
  new tokens + its output reservation - the room left. Those taken give back their KV (`release_req`: the
  tree keeps their prefix; `reset_for_retract` counts them, `num_retractions` in meta_info) and go back to
  the waiting queue after the batch is built (`_add_request_to_queue`, queue entry time now), then prefill
  their prompt and the tokens generated so far again.
- `Scheduler._abort_on_queued_limit` (managers/scheduler.py): with --max-queued-requests, a request arriving
  at a full waiting queue is aborted ("The request queue is full.", 503), unless priority scheduling is on
  and the least preferred queued request (the newest among equals) is strictly worse: that one is aborted
  instead ("The request is aborted by a higher priority request.").

Not modelled: `release_req`'s immediate eviction of `SGLANG_RETRACT_DECODE_STEPS` tokens per request still
running after the released one (the sim's decode retraction leaves it out too).
"""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

from harness.sim.sched_records import PrefillBudget, SimRequest

QUEUE_FULL = "The request queue is full."
DISPLACED = "The request is aborted by a higher priority request."


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


def _entry(r: SimRequest) -> float:
    """When the request entered the waiting queue (time_stats.wait_queue_entry_time)."""
    return r.received if r.received is not None else r.arrival


def _reserve(eng: Any, r: SimRequest) -> float:
    """_get_running_request_total_token_offset: the output tokens still reserved for a running request."""
    return r.out_reserve() * eng.new_token_ratio


def preempt_for(eng: Any, req: SimRequest, budget: PrefillBudget, plan: Any) -> bool:
    """PrefillAdder.preempt_to_schedule, for `req` at a full running batch: True when running requests of
    a low enough priority were released (into plan.preempted) and `req` may be admitted."""
    cfg = eng.config
    if not (cfg.priority_scheduling and cfg.priority_preemption):
        return False
    sign = 1 if cfg.low_priority_values_first else -1
    candidates = sorted(
        (r for r in eng.running if not r.finished),
        key=lambda r: ((r.priority or 0) * -sign, -_entry(r)),
    )
    fill = req.fill_ids
    prefix = eng.tree.match_prefix(fill[: len(fill) - 1]).device_len if eng.caching else 0
    out = req.out_reserve()
    short = len(fill) - prefix + out - (eng._room() - budget.offset)
    taken: list[SimRequest] = []
    for r in candidates:
        if ((req.priority or 0) - (r.priority or 0)) * -sign <= cfg.preemption_threshold:
            break
        taken.append(r)
        short -= _reserve(eng, r)
        if short <= 0:
            break
    if not taken or short > 0:
        return False
    for r in taken:
        budget.offset -= _reserve(eng, r)
        eng.running.remove(r)
        eng._release(r)
    plan.running_bs -= len(taken)
    plan.preempted.extend(taken)
    return True


def requeue(eng: Any, preempted: list[SimRequest]) -> None:
    """_add_request_to_queue for the preempted: the queue limit applies, the entry time is now."""
    for r in preempted:
        if queue_full(eng, r):
            continue
        r.received = eng.now
        eng.waiting.append(r)
        if eng.l3 is not None:
            eng.l3.lookup(r)


def queue_full(eng: Any, req: SimRequest) -> bool:
    """Scheduler._abort_on_queued_limit: True when `req` itself is aborted (the queue is full and nothing
    queued is worse); a worse queued request aborted instead leaves room for it."""
    cfg = eng.config
    limit = cfg.max_queued_requests
    if limit is None or len(eng.waiting) + 1 <= limit:
        return False
    victim, why = req, QUEUE_FULL
    if cfg.priority_scheduling and eng.waiting:
        direction = 1 if cfg.low_priority_values_first else -1
        worst = max(eng.waiting, key=lambda r: (direction * (r.priority or 0), _entry(r)))
        if direction * (req.priority or 0) < direction * (worst.priority or 0):
            eng.waiting.remove(worst)
            victim, why = worst, DISPLACED
    victim.abort_message = why
    victim.finish_reason, victim.finish_time = "abort", eng.now
    if victim.on_event is not None:
        victim.on_event(victim)
    if eng.on_finish is not None:
        eng.on_finish(victim)
    return victim is req
