"""A stream's chunks whatever the handler's wakeups (harness.sim.token_chunks, in process, the engine run
ahead of it): --fault-stall stalls mid-answer, and an answer that ends while a chunk is written still sends
its last tokens. And a stalled answer's finish frees the lockstep client's slot only once delivered."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from harness.protocol.lockstep import ClientHint
from harness.sim.engine import Engine, EngineConfig
from harness.sim.faults import RequestFaults
from harness.sim.live import LiveEngine
from harness.sim.sched_records import SimRequest
from harness.sim.token_chunks import token_chunks


def _chunks(ahead: int, total: int, stall: bool = True) -> list[tuple[int, bool]]:
    """The (token count, finished) chunks of a stream whose engine made `ahead` tokens before the handler
    first woke (a busy event loop), then the rest, finishing while the `ahead` chunk was being written."""
    req = SimRequest(rid="r", input_ids=[1, 2, 3], output_ids=list(range(total)))

    held_flags: list[bool] = []
    delivered: list[bool] = []

    def submit(r: SimRequest, _hint: object, held: bool = False) -> None:
        held_flags.append(held)
        r.generated = ahead
        assert r.on_event is not None
        r.on_event(r)

    def deliver(r: SimRequest, whole: bool) -> None:
        delivered.append(whole)

    live = SimpleNamespace(submit=submit, abort=lambda r: None, delivered=deliver)

    async def collect() -> list[tuple[int, bool]]:
        out: list[tuple[int, bool]] = []
        async for n, fin in token_chunks(live, req, RequestFaults(stall=stall), 0.0):  # type: ignore[arg-type]
            out.append((n, fin))
            if n == ahead:  # the rest of the answer, and its end
                req.generated, req.finish_time = total, 1.0
                assert req.on_event is not None
                req.on_event(req)
        return out

    out = asyncio.run(collect())
    assert held_flags == [stall] and delivered == [True]  # submitted as held when stalled; delivered whole
    return out


def test_a_handler_woken_late_sends_the_tokens_before_half_way_then_stalls() -> None:
    # 6 of 8 tokens made before the first wakeup: tokens 1-3 go out, the stall, then the rest
    assert _chunks(6, 8) == [(3, False), (6, False), (8, True)]


def test_a_two_token_answer_still_stalls_before_its_first_token() -> None:
    assert _chunks(1, 2) == [(1, False), (2, True)]  # half-way is the first token: nothing before it


def test_an_answer_that_ends_while_a_chunk_is_written_still_sends_its_last_tokens() -> None:
    assert _chunks(6, 8, stall=False) == [(6, False), (8, True)]  # it had ended the stream at 6 of 8


def test_a_stalled_answer_frees_its_lockstep_slot_only_when_delivered() -> None:
    """Closed loop, concurrency 2, two more requests ready: both answers end in the engine, but the
    stalled one's client has not seen its end, so the clock waits for one follow-up, not two (it used to
    wait for both, standing still for the whole stall while other requests' first tokens timed out).
    Once the stalled answer is delivered, its follow-up is owed too."""

    async def go() -> tuple[int, int]:
        cfg = EngineConfig(pool_tokens=4000, card="tiny-test")
        live = LiveEngine(Engine(cfg), time_scale=0.0002, hold_wait_s=5.0, log_info=lambda _s: None)
        task = asyncio.create_task(live.run())
        reqs = [SimRequest(rid=str(i), input_ids=[10 * i + 1, 2, 3], output_ids=[5, 6, 7, 8]) for i in (0, 1)]
        ends = [asyncio.Event(), asyncio.Event()]
        for i, r in enumerate(reqs):
            r.on_event = lambda q, e=ends[i]: e.set() if q.finished else None
            live.submit(r, ClientHint(2, i + 1, 2, run="r"), held=i == 0)
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ends)), 5)
        before = live.lockstep.owed(live.vnow)
        live.delivered(reqs[0], True)
        after = live.lockstep.owed(live.vnow)
        task.cancel()
        return before, after

    assert asyncio.run(go()) == (1, 2)
