"""Confidence intervals over seeds: the Student-t table, the interval of the mean, the figures it covers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.summarize.intervals import mean_interval, overlap, seed_intervals, t_quantile


def test_the_t_table_against_known_quantiles() -> None:
    # t(0.975, df) from any statistics table: 12.706 (1), 4.303 (2), 2.228 (10), 2.042 (30); 1.96 past it
    assert t_quantile(1) == 12.706 and t_quantile(2) == 4.303 and t_quantile(10) == 2.228
    assert t_quantile(30) == 2.042 and t_quantile(31) == 1.96
    with pytest.raises(ValueError):
        t_quantile(0)


def test_the_interval_of_the_mean_by_hand() -> None:
    lo, hi = mean_interval([1.0, 2.0, 3.0])  # mean 2, s 1, n 3: 2 ± 4.303 / √3
    half = 4.303 / math.sqrt(3)
    assert lo == pytest.approx(2 - half) and hi == pytest.approx(2 + half)
    assert mean_interval([5.0]) is None and mean_interval([]) is None
    assert mean_interval([4.0, 4.0, 4.0]) == (4.0, 4.0)  # seeds that agree: no width


def test_covers_about_95_percent_of_normal_samples() -> None:
    rng = np.random.default_rng(7)
    hits = sum(
        1
        for _ in range(4000)
        if (ci := mean_interval(list(rng.normal(10.0, 2.0, 3)))) and ci[0] <= 10.0 <= ci[1]
    )
    assert 0.93 < hits / 4000 < 0.97


def test_seed_intervals_name_the_figures_every_seed_has() -> None:
    figs = [
        {
            "latency": {"ttft_s": {"p50": 0.1 + i / 100, "p99": 0.3}, "tpot_s": {"p50": 0.02}},
            "throughput": {"requests_per_s": 5.0 + i},
            "output_tok_s": 100.0,
            "goodput": {"fraction": 0.9},
            "hit_rate_usage": None,
            "hit_rate_log": 0.5 + i / 10,
        }
        for i in range(3)
    ]
    iv = seed_intervals(figs)
    assert set(iv) == {
        "latency.ttft_s.p50",
        "latency.ttft_s.p99",
        "latency.tpot_s.p50",
        "throughput.requests_per_s",
        "output_tok_s",
        "goodput.fraction",
        "hit_rate_log",  # usage is missing, so the hit rate comes from the log
    }
    assert iv["throughput.requests_per_s"] == pytest.approx(
        [6 - 4.303 / math.sqrt(3), 6 + 4.303 / math.sqrt(3)]
    )
    assert seed_intervals(figs[:1]) == {}


def test_overlap() -> None:
    assert overlap([1, 2], [2, 3]) is True and overlap([1, 2], [2.5, 3]) is False
    assert overlap(None, [1, 2]) is None and overlap([1], [1, 2]) is None


def test_an_interval_never_leaves_what_the_figure_can_be() -> None:
    figs = [
        {"latency": {"ttft_s": {"p99": v}}, "goodput": {"fraction": g}}
        for v, g in ((0.03, 0.9), (0.1, 1.0), (0.04, 1.0))
    ]
    iv = seed_intervals(figs)
    raw_ttft, raw_good = mean_interval([0.03, 0.1, 0.04]), mean_interval([0.9, 1.0, 1.0])
    assert raw_ttft is not None and raw_ttft[0] < 0 and iv["latency.ttft_s.p99"][0] == 0.0
    assert raw_good is not None and raw_good[1] > 1 and iv["goodput.fraction"][1] == 1.0


def test_a_sim_points_modelled_figures_get_their_interval_too() -> None:
    figs = [{"modelled": {"ttft_ms": {"p50": v}, "output_tok_s": 50.0}} for v in (140.0, 141.0, 142.0)]
    iv = seed_intervals(figs)
    assert iv["modelled.ttft_ms.p50"] == pytest.approx(
        [141 - 4.303 / math.sqrt(3), 141 + 4.303 / math.sqrt(3)]
    )
    assert iv["modelled.output_tok_s"] == [50.0, 50.0]


def test_a_sims_modelled_goodput_has_its_interval_clipped_to_one() -> None:
    figs = [{"modelled": {"goodput": {"fraction": f}}} for f in (1.0, 1.0, 0.7)]
    iv = seed_intervals(figs)
    assert set(iv) == {"modelled.goodput.fraction"}
    low = 0.9 - 4.303 * float(np.std([1.0, 1.0, 0.7], ddof=1)) / math.sqrt(3)
    assert iv["modelled.goodput.fraction"] == pytest.approx([low, 1.0])  # the mean + half-width is past 1
