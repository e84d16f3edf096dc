"""Break-even per tier from the sim's own tier timing (harness.sim.tier_time): host and storage vs recompute."""

from __future__ import annotations

from dataclasses import replace

from harness.advise.breakeven import all_tiers, host_tier, slower_than_recompute, storage_tier
from harness.sim import tier_time
from harness.sim.storage import BACKENDS
from harness.sim.timing import resolve_profile


def test_host_loads_beat_recompute_for_an_8b_on_an_l4_and_the_gap_grows():
    prof = resolve_profile("l4")
    rows = host_tier(prof)
    assert [r.tokens for r in rows] == [256, 1024, 4096, 16384, 65536]
    assert all(r.pays for r in rows)
    ratios = [r.recompute_ms / r.load_ms for r in rows]
    assert ratios[1:] == sorted(ratios[1:])  # attention makes long recomputes superlinear; the copy is linear
    assert rows[0].load_ms * 4 == rows[1].load_ms
    # the sim's own functions, not a copy of them
    assert rows[2].recompute_ms == tier_time.recompute_s(4096, prof) * 1e3
    assert rows[2].load_ms == tier_time.host_hit_s(4096, prof) * 1e3


def test_a_link_slower_than_recompute_is_named():
    slow_link = replace(resolve_profile("h200"), h2d_gb_per_s=0.01)
    rows = host_tier(slow_link, (1024,))
    assert not rows[0].pays and rows[0].to_dict()["load_pays"] is False
    lines = slower_than_recompute({"host": rows})
    assert lines == ["host is slower than recomputing at every size: loading from it does not pay there"]


def test_storage_rows_for_every_backend_from_the_sims_storage_timing():
    prof = resolve_profile("l4")
    rows = storage_tier(prof)
    assert {r.backend for r in rows} == set(BACKENDS) == {"file", "mooncake", "hf3fs", "nixl"}
    assert len(rows) == 4 * 5
    for r in rows:
        assert r.load_ms == tier_time.storage_hit_s(r.tokens, prof, r.backend) * 1e3
        assert r.load_ms > host_tier(prof, (r.tokens,))[0].load_ms  # storage lands in host memory first
    assert all_tiers(prof)["storage"] == rows


def test_a_storage_backend_slower_than_recompute_is_named_with_its_sizes():
    # an H200 recomputes an 8B prefix fast; the 1.2 GB/s file backend reads short ones back slower than that
    tiers = all_tiers(resolve_profile("h200"))
    file_rows = [r for r in tiers["storage"] if r.backend == "file"]
    lost = [r.tokens for r in file_rows if not r.pays]
    assert lost and len(lost) < len(file_rows)
    assert slower_than_recompute(tiers) == [
        "storage (file) is slower than recomputing at "
        + ", ".join(f"{n:,}" for n in lost)
        + " tokens: loading from it does not pay there"
    ]


def test_the_table_has_one_row_per_size_and_marks_the_losing_tier():
    from harness.advise.breakeven import table

    head, rows = table(all_tiers(resolve_profile("h200")))
    assert head == [
        "tokens",
        "recompute ms",
        "host ms",
        "storage (file) ms",
        "storage (mooncake) ms",
        "storage (hf3fs) ms",
        "storage (nixl) ms",
    ]
    assert [r[0] for r in rows] == ["256", "1,024", "4,096", "16,384", "65,536"]
    assert rows[1][3].endswith(" (slower)") and not rows[1][2].endswith(" (slower)")
    assert not rows[4][3].endswith(" (slower)")  # at 65,536 tokens the file backend wins again
