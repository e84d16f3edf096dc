"""advise's L3 step (grid.run_storage): a backend copied from its twin's replay is that replay, field by
field, as replaying it gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.advise import grid
from harness.advise.advice import Options, profile_for
from harness.whatif.inputs import read_input

TRACE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def test_backends_copied_from_a_twin_equal_their_own_replays():
    profile = profile_for(Options(card="h100", model="llama-3.1-8b-instruct"))
    whole = read_input(TRACE, 512)
    trace = dataclasses.replace(whole, requests=whole.requests[:1500])
    stored = grid.storage_configs(trace, 200, profile, 256.0, ("mooncake", "hf3fs", "nixl"))
    assert len(stored) == 3
    replayed = grid.run(trace, stored, profile, None, 1)
    got = grid.run_storage(trace, stored, profile, None, 2)
    copied = [c for c in got if c.result.seconds == 0.0]
    # the largest store refused nothing and no prefetch reached the threshold: its replay alone answers
    # for the other two backends (the first round is that one replay, whatever the workers)
    assert len(copied) == 2
    skip = {"seconds", "backend_free_pages"}  # wall time; the proof rides along with the copy
    for want, have in zip(replayed, got, strict=True):
        assert have.config == want.config and have.modelled == want.modelled
        for f in dataclasses.fields(want.result):
            if f.name not in skip:
                assert getattr(have.result, f.name) == getattr(want.result, f.name), f.name
