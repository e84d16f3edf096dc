"""`--fault-hicache prefetch-host-limit` yields `prefetch-declined`; the same L3 run healthy yields none.

Sessions of 560-token system prompts outgrow a host tier half again the device pool (ratio 1.5: 2,250 host
tokens beside 1,500 on the device), so returning prompts find their pages in L3 only; healthy, every such
prefetch lands. The fault's limit, 0.8 x (2,250 - 1,500) = 600 tokens, is under each prefetch (592-688
tokens): every one is refused with reason host_capacity, and the sessions recompute.
"""

from __future__ import annotations

import pytest

from harness.summary.funnel import HicacheFunnel
from harness.verdicts.prefetch import prefetch_declined
from tests.helpers import specs
from tests.helpers.health_point import health_point as _health

L3_SIM = (
    "--card-profile", "tiny-test", "--time-scale", "1.0", "--enable-metrics",
    "--max-total-tokens", "1500", "--enable-hierarchical-cache", "--hicache-ratio", "1.5",
    "--hicache-storage-backend", "file",
)  # fmt: skip
LONG_SESSIONS = specs.multi_turn(
    sessions=8, turns=3, system_prompt_tokens=560, question_tokens=32, answer_tokens=16
)


def _run(tmp_path, monkeypatch, *fault: str) -> tuple[list[dict], dict]:
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(tmp_path / "l3"))  # the sim inherits it
    return _health(tmp_path, *fault, wl=LONG_SESSIONS, sim=L3_SIM)


@pytest.mark.slow
def test_a_healthy_l3_run_prefetches_and_has_no_verdict(tmp_path, monkeypatch):
    health, f = _run(tmp_path, monkeypatch)
    print("healthy", f)
    assert health == [], health
    assert f["storage_prefetched_tokens"] > 0 and f["storage_hit_tokens"] > 0, f
    assert not f.get("storage_unfulfilled_by_reason"), f


@pytest.mark.slow
def test_the_host_limit_fault_is_prefetch_declined_with_its_reason(tmp_path, monkeypatch):
    health, f = _run(tmp_path, monkeypatch, "--fault-hicache", "prefetch-host-limit")
    print("fault", f, health)
    assert [v["verdict"] for v in health] == ["prefetch-declined"], health
    (v,) = health
    assert v["figures"]["declined_by_reason"]["host_capacity"] >= 256 and "host_capacity" in v["reason"]
    assert f["storage_unfulfilled_by_reason"]["host_capacity"] == v["figures"]["declined_tokens"], f
    assert f["storage_prefetched_tokens"] == 0, f  # nothing landed: not host-tier-inert on top (named once)


@pytest.mark.parametrize(
    ("by_reason", "prefetched", "verdict"),
    [
        ({"host_capacity": 300.0}, 0.0, True),
        ({"host_capacity": 255.0}, 0.0, False),  # under one prefetch threshold's worth
        ({"host_capacity": 300.0}, 1300.0, False),  # under a fifth of the hits past the threshold
        ({"below_threshold": 5000.0, "storage_transfer": 900.0, "deadline": 900.0}, 0.0, False),  # policy
        ({"some_new_reason": 400.0}, 100.0, True),  # a reason 0.5.23 lacks counts as declined
    ],
)
def test_declined_thresholds(by_reason: dict, prefetched: float, verdict: bool) -> None:
    f = HicacheFunnel(storage_unfulfilled_by_reason=by_reason, storage_prefetched_tokens=prefetched)
    assert (prefetch_declined("0", f, [0.0, 1.0]) is not None) is verdict
