"""A request's answer as its handler streams it: (tokens so far, finished) each time the engine moves on.

Apart from server.py so the chunking rules (a stall is mid-answer; an answer never ends short of its last
tokens) hold whatever the handler's wakeups, and are tested in process with the engine run ahead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from harness.protocol.lockstep import ClientHint
from harness.sim.faults import RequestFaults
from harness.sim.sched_records import SimRequest


class Engine(Protocol):
    """What the chunks need of the live engine (harness.sim.live.LiveEngine)."""

    def submit(self, req: SimRequest, hint: ClientHint | None, held: bool = False) -> None: ...

    def abort(self, req: SimRequest) -> None: ...

    def delivered(self, req: SimRequest, whole: bool) -> None: ...


class _Wake:
    """The request's on_event: an Event set whenever the engine produced something."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __call__(self, _req: SimRequest) -> None:
        self.event.set()


async def token_chunks(
    live: Engine, req: SimRequest, faults: RequestFaults, stall_s: float, hint: ClientHint | None = None
) -> AsyncIterator[tuple[int, bool]]:
    """Submit req and yield (token count so far, finished) as the engine produces tokens; abort it if
    the handler goes away first."""
    wake = _Wake()
    req.on_event = wake
    live.submit(req, hint, held=faults.stall)
    sent = 0
    stalled = False
    whole = False
    try:
        while True:
            await wake.event.wait()
            wake.event.clear()
            if req.generated > sent or req.finished:
                half = max(1, len(req.output_ids) // 2)
                if faults.stall and req.generated >= half and not stalled and not req.finished:
                    stalled = True
                    if half - 1 > sent:  # a handler woken late: the tokens before the half-way one go out
                        sent = half - 1  # first, so the stall is mid-answer whatever the wakeups
                        yield sent, False
                    await asyncio.sleep(stall_s)
                sent, finished = req.generated, req.finished
                whole = finished  # the last chunk is the handler's to write
                yield sent, finished
                if finished:  # as yielded: a request that finished while the chunk was written has more
                    return  # tokens to send (the loop comes round again: the event is set)
    finally:
        if not req.finished:
            live.abort(req)
        live.delivered(req, whole)
