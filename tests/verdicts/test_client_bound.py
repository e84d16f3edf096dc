"""`client-bound`'s thresholds and advice on point.json figures (the live run: tests/loadgen/test_client_bound.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.loadgen.client_load import ClientLoad
from harness.verdicts.client import client_bound, lag_bound, suggested_workers


def _proc(lag_p50_s: float, cpu_s: float = 0.95, wait_s: float = 0.0, wall_s: float = 1.0) -> dict[str, Any]:
    return ClientLoad(
        cpu_s=cpu_s,
        wall_s=wall_s,
        requests=1000,
        wait_s=wait_s,
        lag_p50_s=lag_p50_s,
        lag_p99_s=lag_p50_s * 2,
        lag_max_s=lag_p50_s * 3,
        lag_samples=80,
    ).to_dict()


def test_the_bound_is_5_ms_or_a_tenth_of_the_ttft() -> None:
    assert lag_bound(None) == 0.005 and lag_bound(0.04) == 0.005 and lag_bound(0.3) == pytest.approx(0.03)


def test_a_busy_lagging_loop_is_client_bound_with_its_figures_and_workers_advice() -> None:
    v = client_bound("0", {"client": [_proc(0.040)]}, ttft_p50_s=0.016, client_late_p99_s=0.002)
    assert v is not None and v.verdict == "client-bound" and v.seed == "0"
    f = v.figures
    assert f["loop_lag_p50_s"] == 0.040 and f["lag_bound_s"] == 0.005 and f["cpu_ms_per_request"] == 0.95
    assert f["suggested_workers"] == 8 and f["client_late_p99_s"] == 0.002 and f["own_lag_p50_s"] == 0.040
    assert "`workers: 8`" in v.reason and "40.0 ms late" in v.reason


@pytest.mark.parametrize(
    ("proc", "ttft", "why"),
    [
        (_proc(0.0049), 0.016, "lag under the 5 ms floor"),
        (_proc(0.020, cpu_s=0.1, wait_s=0.9), 0.016, "lag from waiting for a core: 2 ms its own"),
        (_proc(0.040), 0.5, "lag under a tenth of the TTFT"),
        (_proc(0.040, cpu_s=0.5, wall_s=1.0), 0.016, "idle half the run: the server was the limit"),
    ],
)
def test_not_client_bound(proc: dict[str, Any], ttft: float, why: str) -> None:
    assert client_bound("0", {"client": [proc]}, ttft_p50_s=ttft) is None, why


def test_no_client_figures_no_verdict() -> None:
    assert client_bound("0", {}, 0.01) is None and client_bound("0", None, 0.01) is None


def test_a_client_waiting_for_a_core_is_told_to_free_one_not_to_add_workers() -> None:
    v = client_bound("0", {"client": [_proc(0.080, cpu_s=0.3, wait_s=0.7)]}, ttft_p50_s=0.05)
    assert v is not None and "give the client a free core" in v.reason and "workers:" not in v.reason
    # its own share of the lag (0.3 of it) is what more processes would spread
    assert suggested_workers([_proc(0.080, cpu_s=0.3, wait_s=0.7)], 0.010) == 3
