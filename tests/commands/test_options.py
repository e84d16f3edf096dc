"""Shared CLI options: their checks refuse what would fail later, and their defaults match the code's."""

from __future__ import annotations

import math

import pytest

from harness.commands.options import DEFAULT_METRICS_INTERVAL_S, check_metrics_interval
from harness.errors import HarnessError
from harness.telemetry.timeline import DEFAULT_INTERVAL_S


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
def test_metrics_interval_refuses_what_the_scraper_cannot_wait(bad: float) -> None:
    with pytest.raises(HarnessError, match="--metrics-interval-s"):
        check_metrics_interval(bad)


def test_metrics_interval_takes_zero_and_the_default_is_the_scrapers() -> None:
    assert check_metrics_interval(0.0) == 0.0
    assert DEFAULT_METRICS_INTERVAL_S == DEFAULT_INTERVAL_S  # --help shows what a sweep uses
