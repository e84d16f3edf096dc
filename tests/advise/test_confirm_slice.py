"""--confirm-requests: the slice is the trace's first N requests and each pool keeps the ratio of the
slice's working set to the trace's."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness.advise.confirm_slice import reused_units, scale_pool, slice_file
from harness.errors import HarnessError
from harness.whatif.inputs import read_mooncake

MOONCAKE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def test_the_slice_is_the_first_requests_and_the_pool_keeps_the_working_set_ratio(tmp_path: Path) -> None:
    whole = read_mooncake(MOONCAKE)
    part = read_mooncake(slice_file(MOONCAKE, 600, tmp_path))
    assert len(part.requests) == 600
    assert [r.key for r in part.requests] == [r.key for r in whole.requests[:600]]
    w, p = reused_units(whole), reused_units(part)
    assert 0 < p < w
    pool = 20_000
    # the answer sent live takes room in the pool too: shrunk as the prompt is (16 of 512 tokens a block),
    # then in 16-token blocks
    floor = (
        max(len(r.key) + math.ceil(max(1, math.ceil(r.output_tokens / 32)) / 16) for r in part.requests) + 1
    )
    assert scale_pool(pool, whole, part, 16) == max(math.ceil(pool * p / w), floor)
    assert scale_pool(10, whole, part, 16) == 10  # never above the candidate's own pool
    assert scale_pool(pool, whole, whole, 16) == pool


def test_a_slice_of_anything_but_a_trace_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "x.yaml"
    spec.write_text("name: x\n")
    with pytest.raises(HarnessError, match="--confirm-requests"):
        slice_file(spec, 10, tmp_path)


def test_a_scaled_candidate_keeps_its_unit_so_tlrus_lengths_stay_in_tokens(tmp_path: Path) -> None:
    from harness.advise.confirm_slice import scaled_candidates, slice_scale
    from harness.advise.grid import run
    from harness.sim.timing import resolve_profile
    from harness.whatif.grid import Config

    whole = read_mooncake(MOONCAKE)
    part = read_mooncake(slice_file(MOONCAKE, 200, tmp_path))
    profile = resolve_profile("h100")
    tlru = Config("tlru", 808, policy_config=(("next_prompt_estimate", 13), ("threshold", 54)))
    (c,) = scaled_candidates(run(part, [tlru], profile, None, 1), whole, part, profile, 16)
    assert c.unit_tokens == 512 and c.to_dict()["policy_config"] == {
        "next_prompt_estimate": 13 * 512,
        "threshold": 54 * 512,
    }
    s = slice_scale(whole, part, 16)
    assert (s.requests, s.of_requests) == (200, len(whole.requests))
    assert c.config.pool == max(math.ceil(808 * s.reused_slice / s.reused_trace), s.floor)
