"""The offline driver: the engine's scheduler run in virtual time as fast as the CPU goes (what-if, tests).

The live server drives the same Engine from live.py at --time-scale; this loop just adds each forward's
duration to its clock, so both give the same results for the same arrivals.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable

from harness.sim.engine import Engine, EngineConfig, EngineLog, SimRequest
from harness.sim.ingest import Ingest, idle_poll


def simulate(
    requests: Iterable[SimRequest],
    config: EngineConfig,
    *,
    on_finish: Callable[[SimRequest, float], Iterable[SimRequest]] | None = None,
    log: EngineLog | None = None,
    on_step: Callable[[Engine], None] | None = None,
    jump: bool = True,
) -> list[SimRequest]:
    """Replay requests in virtual time; `on_finish` may return follow-up requests (closed loops).

    Arrivals at the same virtual time are queued by `SimRequest.order` (what-if's closed loop: the
    schedule index), as the live sim queues a lockstep client's requests (harness.sim.live); each
    reaches the scheduler through the tokenizer manager (ingest.py: `config.ingest_latency_s` apart,
    in that order), which takes in what reached it by the start of each of its iterations.
    Returns every request (follow-ups included) in finish order, with arrival, first_token_time,
    finish_time and cached_device/cached_host filled in (`SimRequest.result()` gives a dict).
    `on_step(engine)` runs after every forward (tests check invariants there); `jump=False` runs
    every decode step one by one (the same results, slower).
    """
    engine = Engine(config, log=log)
    ingest = Ingest(float(config.ingest_latency_s or 0.0))
    poll_s = float(config.idle_poll_s or 0.0)
    idle_since = 0.0  # when the last forward ended (an idle scheduler's spins start then)
    seq = itertools.count()
    arrivals: list[tuple[float, int, int, SimRequest]] = [
        (r.arrival, r.order, next(seq), r) for r in requests
    ]
    heapq.heapify(arrivals)
    done: list[SimRequest] = []
    engine.on_finish = done.append
    seen = 0
    t = 0.0
    inf = float("inf")
    while arrivals or ingest or engine.busy():
        # the tokenizer manager takes arrivals in order; the scheduler receives what reached it by t
        while arrivals and arrivals[0][0] <= t:
            r = heapq.heappop(arrivals)[3]
            ingest.send(r, r.arrival)
        for r in ingest.receive(t):
            engine.add(r)
        reach = ingest.next_at()
        horizon = min(inf if reach is None else reach, arrivals[0][0] if arrivals else inf)
        if jump and engine.running and not engine.waiting:
            t2 = engine.fast_forward(t, horizon)
            if t2 != t:
                t = t2
                if on_step is not None:
                    on_step(engine)
                continue
        batch = engine.schedule(t)
        if batch is not None:
            t += batch.duration
            engine.complete(batch, t)
            idle_since = t
            if on_step is not None:
                on_step(engine)
        elif horizon < inf:  # idle until the next arrival, or the spin that sees the next request
            if reach is not None and reach == horizon:
                t = max(t, idle_poll(reach, idle_since, poll_s))
            else:
                t = max(t, horizon)
        if on_finish is not None:
            while seen < len(done):
                for nxt in on_finish(done[seen], t):
                    nxt.arrival = max(nxt.arrival, t)
                    heapq.heappush(arrivals, (nxt.arrival, nxt.order, next(seq), nxt))
                seen += 1
    return done
