"""Over seeds, a replicas point keeps its skew note (a string has no median) and its attribution verdict
is all seeds', not any seed's."""

from __future__ import annotations

from typing import Any

from harness.summarize.replicas import replicas_median
from harness.summarize.summary import merge_seeds


def _seed(skew: float, shares: tuple[float, float], agrees: bool, note: str | None) -> dict[str, Any]:
    workers = {"w0": {"prefill_share": shares[0]}, "w1": {"prefill_share": shares[1]}}
    return {"load_skew": skew, "load_skew_note": note, "attribution_agrees": agrees, "workers": workers}


def test_the_median_skew_past_the_threshold_names_the_busiest_worker() -> None:
    seeds = [_seed(1.89, (0.05, 0.95), True, "load-skew: w1 ..."), _seed(1.48, (0.26, 0.74), True, None),
             _seed(1.7, (0.15, 0.85), True, "load-skew: w1 ...")]  # fmt: skip
    median, _ = merge_seeds(seeds)
    replicas_median(median, seeds)
    assert median["load_skew"] == 1.7
    assert (
        median["load_skew_note"]
        == "load-skew: w1 took 1.70x the mean prefill work (85% of it; median over seeds)"
    )
    assert median["attribution_agrees"] is True


def test_no_note_under_the_threshold_and_one_disagreeing_seed_fails_attribution() -> None:
    seeds = [_seed(1.9, (0.05, 0.95), True, "load-skew: w1 ..."), _seed(1.2, (0.4, 0.6), False, None),
             _seed(1.3, (0.35, 0.65), True, None)]  # fmt: skip
    median, _ = merge_seeds(seeds)
    replicas_median(median, seeds)
    assert median.get("load_skew_note") is None  # the median skew, 1.3, is under 1.5
    assert median["attribution_agrees"] is False


def test_a_single_server_point_is_left_as_it_was() -> None:
    seeds = [{"hit_rate_usage": 0.5}, {"hit_rate_usage": 0.7}]
    median, _ = merge_seeds(seeds)
    replicas_median(median, seeds)
    assert median == {"hit_rate_usage": 0.6}
