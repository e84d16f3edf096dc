"""A worker the router sent nothing did no prefill work: its share is 0 and the skew counts it (2.0 for
two workers), where an unknown share used to hide the worst imbalance as load_skew None."""

from __future__ import annotations

from harness.summarize.replicas import _prefill_work, _skew


def test_an_idle_worker_counts_as_zero_work_in_the_skew() -> None:
    workers = {
        "w0": {"requests": 0, "prompt_tokens": None, "counter_prompt_tokens": None},
        "w1": {"requests": 24, "prompt_tokens": 1000, "cached_tokens": 200},
    }
    for w in workers.values():
        w["prefill_tokens"] = _prefill_work(w)
    assert workers["w0"]["prefill_tokens"] == 0.0 and workers["w1"]["prefill_tokens"] == 800.0
    out = _skew(workers)
    assert out["load_skew"] == 2.0 and out["load_skew_worker"] == "w1"
    assert workers["w0"]["prefill_share"] == 0.0 and workers["w1"]["prefill_share"] == 1.0
    assert "w1 took 2.00x the mean prefill work (100% of it)" in out["load_skew_note"]
