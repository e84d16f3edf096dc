"""The report's cached tokens by tier: shares of the prompt, whether each split adds up, the cold start."""

from __future__ import annotations

from typing import Any

from harness.report.tiers import tier_lines, tier_table


def _point(server: str, groups: int, figures: dict[str, Any]) -> dict[str, Any]:
    return {
        "experiment": "x",
        "server": server,
        "sweep": {"groups": groups},
        "point_key": f"groups={groups}",
        "status": "ok",
        "median": figures,
        "seeds": {"0": {"status": "ok", "figures": figures}},
    }


def test_rows_only_for_points_with_a_split():
    split = {
        "prompt_tokens": 1000,
        "cached_tokens": 700,
        "cached_device_tokens": 400,
        "cached_host_tokens": 200,
        "cached_storage_tokens": 100,
        "tiers_add_up_usage": True,
        "tiers_add_up_counters": False,
        "cold_start": "fresh server, empty storage directory",
        "host_tier_seconds": 0.0123,
    }
    pts = [_point("l3", 2, split), _point("plain", 2, {"prompt_tokens": 1000, "cached_tokens": 500})]
    t = tier_table(pts)
    assert t is not None and t.row_keys == ["l3|groups=2"]
    assert t.texts()[0] == [
        "l3",
        "groups=2",
        "40.0%",
        "20.0%",
        "10.0%",
        "0.0123 / -",
        "yes / NO",
        "fresh server, empty storage directory",
        "usage",
    ]
    lines = tier_lines(pts)
    assert lines[0].startswith("| server | point | device %") and len(lines) == 3
    assert tier_table([pts[1]]) is None and tier_lines([pts[1]]) == []


def test_an_openai_usage_without_a_split_takes_the_counters_and_says_so():
    fig = {"prompt_tokens": 1000, "cached_tokens": 600, "counter_cached_tokens": 600,
           "counter_cached_device_tokens": 200, "counter_cached_host_tokens": 400, "tiers_add_up_counters": True}  # fmt: skip
    t = tier_table([_point("hicache", 16, fig)])
    assert t is not None
    assert t.texts()[0][2:5] == ["20.0%", "40.0%", "-"] and t.texts()[0][-1] == "counters (cache_source)"
