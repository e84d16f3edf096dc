"""The engine's decode steps' KV and context, one step or a run of them at once (Engine.fast_forward).

Apart from engine.py (its 500-line limit) and shared by its one-step path and its fast path, so both grow
the KV and time the context alike. A token request takes one KV slot per step; a block trace's request
(what-if: `SimRequest.out_unit` tokens per key element) takes a new key element only when a step starts
one, while its context grows by one token per step: decode stays one step per token, the pool stays in
key elements.
"""

from __future__ import annotations

from typing import Any

from harness.sim.sched_records import MIN_NEW_TOKEN_RATIO, NEW_TOKEN_RATIO_DECAY, SimRequest


def new_slots(running: list[SimRequest]) -> int:
    """KV slots the next decode step takes: one per token request, one per block request starting a block."""
    return sum(1 for r in running if r.out_unit == 1 or (r.generated - 1) % r.out_unit == 0)


def step_kv(running: list[SimRequest], k: int) -> tuple[int, int]:
    """One decode step's KV: (the context it attends over in tokens, the slots it took)."""
    ctx = 0
    if k == 1:
        for req in running:  # one more KV slot each (private to the request until it is cached)
            req.kv_len += 1
            ctx += req.kv_len
        return ctx, len(running)
    added = 0
    for req in running:
        if req.out_unit == 1:
            req.kv_len += 1
            ctx += req.kv_len * k
            added += 1
            continue
        if (req.generated - 1) % req.out_unit == 0:  # this step's token starts a new key element
            req.kv_len += 1
            added += 1
        ctx += len(req.input_ids) * k + req.generated
    return ctx, added


def _slots_over(run: list[SimRequest], n: int) -> int:
    """Slots the next `n` decode steps take together."""
    return sum(
        n if r.out_unit == 1 else r.out_units(r.generated + n - 1) - r.out_units(r.generated - 1) for r in run
    )


def _fit(run: list[SimRequest], steps: int, available: int) -> int:
    """The most steps (<= `steps`) whose slots fit in `available` (none may evict or retract)."""
    lo, hi = 0, steps
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _slots_over(run, mid) <= available:
            lo = mid
        else:
            hi = mid - 1
    return lo


VECTOR_FROM = 32  # steps from which numpy times a run: the same floats as the loop, fewer Python calls


def _advance(
    card: Any, bs: int, ctx: int, grow: int, steps: int, t: float, horizon: float, ratio: float
) -> tuple[int, float, float]:
    """Up to `steps` decode steps from `t`, each starting before `horizon`, the i-th (from 0) over
    ctx + i * grow tokens: (steps run, the time after them, new_token_ratio after their decays)."""
    decode_times = getattr(card, "decode_times", None)
    n = 0  # the first steps one by one: a run an arrival ends soon costs no array
    while n < steps and t < horizon and (n < VECTOR_FROM or decode_times is None):
        t += card.decode_time(bs, ctx)
        ctx += grow
        ratio = max(MIN_NEW_TOKEN_RATIO, ratio - NEW_TOKEN_RATIO_DECAY)
        n += 1
    if n == steps or t >= horizon or decode_times is None:
        return n, t, ratio
    import numpy as np

    m = steps - n  # the rest at once; accumulate adds left to right as `t +=` does (times[i]: step i starts)
    times = np.add.accumulate(
        np.concatenate(([t], decode_times(bs, ctx + grow * np.arange(m, dtype=np.int64))))
    )
    late = np.flatnonzero(times[:m] >= horizon)
    j = int(late[0]) if late.size else m
    # the ratio's decays, clamped: the unclamped sequence's last value, or the floor once it crossed it
    decayed = np.subtract.accumulate(np.concatenate(([ratio], np.full(j, NEW_TOKEN_RATIO_DECAY))))
    return n + j, float(times[j]), max(MIN_NEW_TOKEN_RATIO, float(decayed[-1]))


def fast_forward(eng: Any, t: float, horizon: float) -> float:
    """Run the decode steps that `schedule`/`complete` would run, at once, while nothing can change.

    Virtual time only: with an empty queue, no chunked prefill, no finish, no eviction, no log line
    and no arrival before `horizon`, consecutive decode steps differ only in their context length,
    so they are applied in one go (same floats, same order). Returns the new time (t if none ran).
    `eng`: the Engine (typed Any as priority.py's helpers are: engine.py imports this module).
    """
    run = eng.running
    if eng.waiting or eng.chunked is not None or not run:
        return t
    bs = len(run)
    k = max(1, eng.config.key_tokens)
    steps = min(r.answer_tokens - r.generated for r in run) - 1  # the finishing step runs normally
    if k == 1:
        steps = min(steps, eng.available() // bs)  # no step may need an eviction or a retraction
    if eng.log is not None:
        interval = eng.config.decode_log_interval
        steps = min(steps, interval - 1 - eng.decode_steps % interval)  # stop before a log line
    if steps <= 0 or any(r.aborted or r.on_event is not None for r in run):
        return t
    if k > 1:
        steps = _fit(run, steps, eng.available())
    if k == 1:  # the first step's context in tokens, then what each step adds (step_kv's sums)
        ctx, grow = sum(r.kv_len for r in run) + bs, bs
    else:
        ctx = sum((r.kv_len + 1) * k if r.out_unit == 1 else len(r.input_ids) * k + r.generated for r in run)
        grow = sum(k if r.out_unit == 1 else 1 for r in run)
    n, t, ratio = _advance(eng.card, bs, ctx, grow, steps, t, horizon, eng.new_token_ratio)
    if n == 0:
        return t
    added = 0
    for r in run:
        new = n if r.out_unit == 1 else r.out_units(r.generated + n - 1) - r.out_units(r.generated - 1)
        r.kv_len += new
        r.generated += n
        added += new
    eng.private_total += added
    eng.stats.generation_tokens += n * bs
    eng._decode_tokens_since_log += n * bs
    eng.decode_steps += n
    eng.new_token_ratio = ratio
    eng.now = t
    return t
