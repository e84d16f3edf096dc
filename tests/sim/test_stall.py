"""A stream's chunks whatever the handler's wakeups (harness.sim.token_chunks, in process, the engine run
ahead of it): --fault-stall stalls mid-answer, and an answer that ends while a chunk is written still sends
its last tokens."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from harness.sim.faults import RequestFaults
from harness.sim.sched_records import SimRequest
from harness.sim.token_chunks import token_chunks


def _chunks(ahead: int, total: int, stall: bool = True) -> list[tuple[int, bool]]:
    """The (token count, finished) chunks of a stream whose engine made `ahead` tokens before the handler
    first woke (a busy event loop), then the rest, finishing while the `ahead` chunk was being written."""
    req = SimRequest(rid="r", input_ids=[1, 2, 3], output_ids=list(range(total)))

    def submit(r: SimRequest, _hint: object) -> None:
        r.generated = ahead
        assert r.on_event is not None
        r.on_event(r)

    live = SimpleNamespace(submit=submit, abort=lambda r: None)

    async def collect() -> list[tuple[int, bool]]:
        out: list[tuple[int, bool]] = []
        async for n, fin in token_chunks(live, req, RequestFaults(stall=stall), 0.0):  # type: ignore[arg-type]
            out.append((n, fin))
            if n == ahead:  # the rest of the answer, and its end
                req.generated, req.finish_time = total, 1.0
                assert req.on_event is not None
                req.on_event(req)
        return out

    return asyncio.run(collect())


def test_a_handler_woken_late_sends_the_tokens_before_half_way_then_stalls() -> None:
    # 6 of 8 tokens made before the first wakeup: tokens 1-3 go out, the stall, then the rest
    assert _chunks(6, 8) == [(3, False), (6, False), (8, True)]


def test_a_two_token_answer_still_stalls_before_its_first_token() -> None:
    assert _chunks(1, 2) == [(1, False), (2, True)]  # half-way is the first token: nothing before it


def test_an_answer_that_ends_while_a_chunk_is_written_still_sends_its_last_tokens() -> None:
    assert _chunks(6, 8, stall=False) == [(6, False), (8, True)]  # it had ended the stream at 6 of 8
