"""What-if per priority class: a spec's classes replayed through the sim's engine give the hit rate and
modelled TTFT of each class, and `priority` keeps the high class where `lru` does not, as the live sim."""

from __future__ import annotations

from pathlib import Path

from harness.whatif.grid import Config
from harness.whatif.inputs import read_input
from harness.whatif.replay import replay
from tests.helpers.specs import multi_turn, spec, write_yaml

CLASSES = [{"name": "high", "share": 1, "value": 10}, {"name": "low", "share": 1, "value": 0}]


def test_per_class_hit_rate_and_ttft(tmp_path: Path) -> None:
    wl = multi_turn(sessions=8, turns=4, system_prompt_tokens=100, question_tokens=30, answer_tokens=20)
    path = write_yaml(tmp_path / "p.yaml", spec("p", wl, concurrency=2, priorities=CLASSES))
    trace = read_input(path)
    assert {r.priority for r in trace.requests} == {10, 0}
    rates = {}
    for policy in ("priority", "lru"):
        res = replay(trace, Config(policy=policy, pool=1600), card="tiny-test")
        assert set(res.ttft_ms_by_class) == {"high", "low"} and res.ttft_ms_by_class["high"]["p99"] > 0
        rates[policy] = {k: h / p for k, (h, _i, p) in res.per_class.items()}
        assert res.to_dict()["per_class"]["high"]["prompt_tokens"] == res.per_class["high"][2]
    # the live sim run of the same spec (tests/workloads/test_traffic.py): 65.1 / 23.1 and 18.9 / 23.1 %
    assert round(rates["priority"]["high"], 3) == 0.651 and round(rates["priority"]["low"], 3) == 0.231
    assert round(rates["lru"]["high"], 3) == 0.189 and round(rates["lru"]["low"], 3) == 0.231
