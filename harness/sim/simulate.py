"""The offline driver: the engine's scheduler run in virtual time as fast as the CPU goes (what-if, tests).

The live server drives the same Engine from live.py at --time-scale; this loop just adds each forward's
duration to its clock, so both give the same results for the same arrivals. `Worker` is one scheduler
with its tokenizer manager and clock; `simulate` steps one, the routing replay (harness.whatif.fleet)
steps N in one virtual time, so both share one stepper.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable

from harness.sim.engine import Engine, EngineConfig, EngineLog, SimRequest
from harness.sim.ingest import Ingest, idle_poll

Arrival = tuple[float, int, int, SimRequest]  # (arrival, order, sequence, request): the heap's entries


class Worker:
    """One scheduler (engine, tokenizer manager, virtual clock), stepped one pass of the loop at a time."""

    def __init__(self, config: EngineConfig, log: EngineLog | None = None) -> None:
        self.engine = Engine(config, log=log)
        self.ingest = Ingest(float(config.ingest_latency_s or 0.0))
        self.poll_s = float(config.idle_poll_s or 0.0)
        self.idle_since = 0.0  # when the last forward ended (an idle scheduler's spins start then)
        self.t = 0.0
        self.arrivals: list[Arrival] = []
        self.done: list[SimRequest] = []
        self.seen = 0  # finished requests already handed on
        self.engine.on_finish = self.done.append

    def busy(self) -> bool:
        return bool(self.arrivals or self.ingest or self.engine.busy())

    def step(
        self,
        outside: float = float("inf"),
        jump: bool = True,
        on_step: Callable[[Engine], None] | None = None,
    ) -> bool:
        """One pass of the loop; `outside`: the next arrival not queued here yet (it may come here).
        False after a decode fast-forward (finished requests are handed on after the next pass)."""
        e, t, inf = self.engine, self.t, float("inf")
        # the tokenizer manager takes arrivals in order; the scheduler receives what reached it by t
        while self.arrivals and self.arrivals[0][0] <= t:
            r = heapq.heappop(self.arrivals)[3]
            self.ingest.send(r, r.arrival)
        for r in self.ingest.receive(t):
            e.add(r)
        reach = self.ingest.next_at()
        horizon = min(inf if reach is None else reach, self.arrivals[0][0] if self.arrivals else inf, outside)
        if jump and e.running and not e.waiting:
            t2 = e.fast_forward(t, horizon)
            if t2 != t:
                self.t = t2
                if on_step is not None:
                    on_step(e)
                return False
        batch = e.schedule(t)
        if batch is not None:
            t += batch.duration
            e.complete(batch, t)
            self.idle_since = t
            if on_step is not None:
                on_step(e)
        elif horizon < inf:  # idle until the next arrival, or the spin that sees the next request
            if reach is not None and reach == horizon:
                t = max(t, idle_poll(reach, self.idle_since, self.poll_s))
            else:
                t = max(t, horizon)
        self.t = t
        return True

    def finished(self) -> list[SimRequest]:
        """The requests finished since the last call, in finish order."""
        out = self.done[self.seen :]
        self.seen = len(self.done)
        return out


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
    w = Worker(config, log)
    seq = itertools.count()
    w.arrivals = [(r.arrival, r.order, next(seq), r) for r in requests]
    heapq.heapify(w.arrivals)
    while w.busy():
        if not w.step(jump=jump, on_step=on_step) or on_finish is None:
            continue
        for done in w.finished():
            for nxt in on_finish(done, w.t):
                nxt.arrival = max(nxt.arrival, w.t)
                heapq.heappush(w.arrivals, (nxt.arrival, nxt.order, next(seq), nxt))
    return w.done
