"""A block trace's answers in the scheduler replay: `output_tokens` decode steps each, KV in whole blocks,
the tree caching the prompt alone as the one-at-a-time replay does (issue 58: decode competes with prefill)."""

from __future__ import annotations

import dataclasses

from harness.sim.timing import get_profile
from harness.whatif import serve
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace, TraceRequest
from harness.whatif.replay import ideal_hits

K = 512


def _sessions(out_tokens: int) -> Trace:
    """Two conversations of three turns, each turn's prompt extending the previous one by two blocks."""
    reqs = []
    for conv in range(2):
        base = 100 * (conv + 1)
        for turn in range(3):
            key = tuple(range(base, base + 4 + 2 * turn))
            reqs.append(
                TraceRequest(
                    key, K * len(key), output_tokens=out_tokens, index=2 * turn + conv, conversation=conv
                )
            )
    return Trace("sessions", reqs, unit=K, kind="blocks", concurrency=1)


def test_closed_loop_gives_a_block_request_its_answer_in_tokens_and_fresh_blocks() -> None:
    first, _ = serve.closed_loop(dataclasses.replace(_sessions(700), concurrency=2))
    assert [r.output_tokens for r in first] == [700, 700] and [r.out_unit for r in first] == [K, K]
    assert [len(r.output_ids) for r in first] == [2, 2]  # ceil(700 / 512) blocks
    ids = [i for r in first for i in r.output_ids]
    assert len(set(ids)) == 4 and all(i < 0 for i in ids)  # trace keys are >= 0: they match nothing
    token, _ = serve.closed_loop(Trace("t", [TraceRequest((1, 2), 2, output_tokens=3, output_key=(5, 6, 7))]))
    assert token[0].output_ids == [5, 6, 7] and token[0].output_tokens is None and token[0].out_unit == 1


def test_the_engine_decodes_block_answers_and_caches_what_the_sequential_replay_does() -> None:
    cfg = Config("lru", 200)
    card = get_profile("h100")
    got: dict[int, serve.Served] = {}
    for out in (1, 700):
        trace = _sessions(out)
        ideal = ideal_hits(trace, 1)
        got[out] = serve.engine(trace, cfg, ideal, card)
        seq = serve.sequential(trace, cfg, ideal, card)
        # one request at a time: the same hits per request (each turn hits its previous prompt, no answer)
        assert got[out].hits == seq.hits
        assert [h[0] for h in seq.hits] == [0, 4 * K, 6 * K] * 2
    # six answers of 699 decode steps each, one after the other, at batch 1 over >= 4 blocks of context
    step = card.decode_time(1, 4 * K)
    assert got[700].makespan_s - got[1].makespan_s >= 6 * 699 * step
    assert got[700].makespan_s - got[1].makespan_s < 6 * 699 * card.decode_time(1, 10 * K + 700)
