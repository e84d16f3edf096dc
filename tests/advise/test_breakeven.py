"""Break-even per tier from the sim's physics: loading from host vs recomputing."""

from __future__ import annotations

from dataclasses import replace

from harness.advise.breakeven import all_tiers, host_tier
from harness.sim.timing import resolve_profile


def test_host_loads_beat_recompute_for_an_8b_on_an_l4_and_the_gap_grows():
    rows = host_tier(resolve_profile("l4"))
    assert [r.tokens for r in rows] == [256, 1024, 4096, 16384, 65536]
    assert all(r.pays for r in rows)
    ratios = [r.recompute_ms / r.load_ms for r in rows]
    assert ratios == sorted(ratios)  # attention makes recompute superlinear; the copy is linear
    assert rows[0].load_ms * 4 == rows[1].load_ms


def test_a_link_slower_than_recompute_is_named():
    slow_link = replace(resolve_profile("h200"), h2d_gb_per_s=0.01)
    rows = host_tier(slow_link, (1024,))
    assert not rows[0].pays and rows[0].to_dict()["load_pays"] is False


def test_storage_has_no_rows_until_the_sim_models_it():
    assert all_tiers(resolve_profile("l4"))["storage"] == []
