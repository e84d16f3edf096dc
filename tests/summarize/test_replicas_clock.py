"""Each worker of a replicas point gets the clock verdict of its own GPUs: a card throttled under one
replica is named on that worker, not folded into the point's governing-GPU figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.summarize.read import SeedCapture
from harness.summarize.replicas import worker_clocks


def _samples(gpu: int, uuid: str, mhz: float, n: int = 20) -> list[dict[str, Any]]:
    return [{"kind": "sample", "t_mono": float(i), "gpu": gpu, "uuid": uuid, "sm_clock_mhz": mhz, "gpu_util": 95,
             "max_sm_clock_mhz": 1980, "reasons": 0} for i in range(n)]  # fmt: skip


def _capture(rows: list[dict[str, Any]]) -> SeedCapture:
    header = {"kind": "header", "status": "ok: 3 GPUs", "gpus": []}
    return SeedCapture(Path("p"), "s", 0, {}, {}, [], [header, *rows], None, None)


def test_the_throttled_gpu_is_named_on_its_own_worker() -> None:
    rows = _samples(0, "GPU-a", 1980) + _samples(1, "GPU-b", 700) + _samples(2, "GPU-c", 1900)
    workers: dict[str, dict[str, Any]] = {"w0": {}, "w1": {}}
    worker_clocks(workers, _capture(rows), {"w0": "0", "w1": "GPU-b,2"})  # by index, or by UUID
    assert workers["w0"]["clock_verdict"] == "ok" and workers["w0"]["busy_median_sm_clock_mhz"] == 1980
    assert workers["w0"]["gpus"] == "0" and workers["w1"]["gpus"] == "2,GPU-b"
    assert workers["w1"]["clock_verdict"] == "below-floor"
    assert workers["w1"]["busy_median_sm_clock_mhz"] == 700  # the slower of its two GPUs governs
    assert "busy-median SM clock 700 MHz" in workers["w1"]["clock_reasons"][0]


def test_workers_without_gpus_get_no_clock_figures() -> None:
    workers: dict[str, dict[str, Any]] = {"w0": {}, "w1": {}}
    worker_clocks(workers, _capture([]), {"w0": None, "w1": ""})
    assert workers == {"w0": {}, "w1": {}}
    worker_clocks(workers, _capture([]), {"w0": "0"})  # a GPU named, no sample of it: said, not judged ok
    assert workers["w0"]["clock_verdict"] == "no-telemetry" and workers["w1"] == {}


def test_over_seeds_a_worker_keeps_its_worst_clock_verdict_and_the_table_says_so() -> None:
    from harness.report.workers import worker_lines
    from harness.summarize.replicas import replicas_median
    from harness.summarize.summary import merge_seeds

    def seed(verdict: str, mhz: float) -> dict[str, Any]:
        w1 = {
            "requests": 4,
            "gpus": "1",
            "clock_verdict": verdict,
            "clock_reasons": [],
            "busy_median_sm_clock_mhz": mhz,
        }
        return {"workers": {"w0": {"requests": 4, "gpus": "0", "clock_verdict": "ok"}, "w1": w1}}

    seeds = [seed("ok", 1900), seed("below-floor", 700), seed("ok", 1950)]
    median, _ = merge_seeds(seeds)
    replicas_median(median, seeds)
    assert median["workers"]["w1"]["clock_verdict"] == "below-floor"
    assert median["workers"]["w1"]["busy_median_sm_clock_mhz"] == 1900  # the figure is the median
    assert median["workers"]["w0"]["clock_verdict"] == "ok"
    lines = worker_lines([{"experiment": "e", "server": "s", "point_key": "default", "median": median}])
    assert any("| w1 |" in ln and "clock below-floor on GPUs 1" in ln for ln in lines), lines
    assert not any("| w0 |" in ln and "clock" in ln for ln in lines)
