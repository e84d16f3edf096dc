"""Per-class and per-length-bucket figures of one point x seed, from hand-made records."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.summarize.classes import class_figures, length_bucket
from harness.summarize.figures import request_figures


def rec(cls: str | None, prompt: int, cached: int, ttft: float) -> dict:
    return {
        "ok": True,
        "priority_class": cls,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "ttft_s": ttft,
    }


def test_length_buckets_are_powers_of_two() -> None:
    assert [length_bucket(n) for n in (0, 1, 2, 3, 1023, 1024, 2047, 2048)] == [
        0,
        1,
        2,
        2,
        512,
        1024,
        1024,
        2048,
    ]


def test_hit_rate_and_ttft_per_class_and_per_length() -> None:
    rows = [
        rec("high", 100, 90, 0.01),
        rec("high", 300, 270, 0.02),
        rec("low", 100, 0, 0.1),
        rec("low", 300, 30, 0.5),
    ]
    fig = request_figures(rows)
    assert fig["hit_rate_usage_by_class"] == {"high": pytest.approx(0.9), "low": pytest.approx(0.075)}
    assert fig["requests_by_class"] == {"high": 2, "low": 2}
    assert fig["ttft_median_s_by_class"]["low"] == pytest.approx(0.3)
    assert fig["ttft_p99_s_by_class"]["low"] == pytest.approx(0.1 + 0.99 * 0.4)
    assert fig["hit_rate_usage_by_length"] == {"64": pytest.approx(0.45), "256": pytest.approx(0.5)}
    assert fig["ttft_p99_s_by_length"]["256"] == pytest.approx(0.02 + 0.99 * 0.48)


def test_no_class_and_one_length_give_no_split() -> None:
    ok = pd.DataFrame([rec(None, 100, 0, 0.1), rec(None, 110, 50, 0.2)])
    assert class_figures(ok, ok["cached_tokens"].astype(float)) == {}
