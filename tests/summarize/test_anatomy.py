"""The miss anatomy (harness.summarize.anatomy): classes that sum to the prompt, on hand-made requests and on
the sim's own what-if engine (one instance and N behind the modelled smg)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.summarize.anatomy import Sent, classify, replayed_sent
from harness.summary.anatomy import MISSES, Anatomy
from harness.whatif.fleet import replay_fleet
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace, read_spec
from harness.whatif.replay import replay_sequential
from harness.whatif.routing import RouterConfig
from tests.helpers.specs import multi_turn, shared_prefix, write_spec

CLASSES = ("hit", *MISSES)


def _sums(total: dict[str, int]) -> None:
    assert sum(total[c] for c in CLASSES) == total["prompt_tokens"], total


def _trace(tmp_path: Path, wl: dict) -> Trace:
    p = write_spec(tmp_path, "anat", wl, api="openai-completions", tokenizer="word", concurrency=1)
    return dataclasses.replace(read_spec(p), concurrency=None)  # one request at a time


def _shared(tmp_path: Path) -> Trace:
    return _trace(
        tmp_path, shared_prefix(groups=6, prompts_per_group=4, system_prompt_tokens=384, question_tokens=16)
    )


def test_hand_made_requests_land_in_each_class() -> None:
    a, b, c = (1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 4, 9, 9, 9, 9), (1, 2, 3, 4, 5, 6, 7, 8, 10)
    reqs = [
        Sent(
            a, (), 0, sent=0.0, prefilled=1.0, done=1.0, cached=0, prompt_tokens=8
        ),  # 7 first seen (+1 last)
        Sent(b, (), 0, sent=0.5, prefilled=2.0, done=2.0, cached=0, prompt_tokens=8),  # 4 in flight on w0
        Sent(
            a, (), 1, sent=3.0, prefilled=4.0, done=4.0, cached=0, prompt_tokens=8
        ),  # 7 held by w0: elsewhere
        Sent(c, (), 0, sent=5.0, prefilled=6.0, done=6.0, cached=2, prompt_tokens=9),  # 2 hit, 6 evicted
    ]
    total, per = classify(reqs)
    _sums(total)
    assert per[1] == {
        "prompt_tokens": 8,
        "hit": 0,
        "first_seen": 1,
        "evicted": 0,
        "elsewhere": 7,
        "in_flight": 0,
    }
    assert per[0]["evicted"] == 6 and per[0]["hit"] == 2
    assert per[0]["in_flight"] == 4
    assert total["first_seen"] == 8 + 4 + 1 + 1  # a's 7 and last token, b's other 4, a's and c's last tokens
    assert Anatomy(**per[1]).dominant() == "elsewhere"


def test_a_page_caps_what_any_cache_could_hit() -> None:
    key = tuple(range(10))
    reqs = [Sent(key, (), 0, float(i), i + 0.5, i + 0.5, 8 if i else 0, 10) for i in range(2)]
    total, _ = classify(reqs, page_size=4)
    _sums(total)
    assert total["hit"] == 8 and total["evicted"] == 0 and total["first_seen"] == 12


def test_one_server_loses_nothing_elsewhere_and_hit_is_the_replay(tmp_path: Path) -> None:
    trace = _shared(tmp_path)
    res = replay_sequential(trace, Config("lru", 1200))
    total, per = classify(replayed_sent(trace, res.cached_per_request))
    _sums(total)
    assert total["hit"] == res.hit_tokens and total["prompt_tokens"] == res.prompt_tokens
    assert total["elsewhere"] == 0 and total["in_flight"] == 0 and list(per) == [0]
    assert total["evicted"] > 0  # six 384-token groups in 1,200 tokens


def test_round_robin_loses_tokens_elsewhere_and_cache_aware_fewer(tmp_path: Path) -> None:
    trace = _shared(tmp_path)
    cfg = Config("lru", 4000)  # every worker could hold every group: only the routing loses
    lost = {}
    for policy in ("round_robin", "cache_aware"):
        fleet = replay_fleet(trace, cfg, 3, RouterConfig(policy, seed=1))
        total, per = classify(replayed_sent(trace, fleet.aggregate.cached_per_request, fleet.worker_of))
        _sums(total)
        assert total["hit"] == fleet.aggregate.hit_tokens
        assert len(per) == 3 and all(sum(w[c] for c in CLASSES) == w["prompt_tokens"] for w in per.values())
        lost[policy] = total["elsewhere"]
    assert lost["round_robin"] > 0
    assert lost["cache_aware"] < lost["round_robin"], lost


def test_multi_turn_at_a_pool_too_small_for_returning_sessions_is_mostly_evicted(tmp_path: Path) -> None:
    trace = _trace(
        tmp_path,
        multi_turn(sessions=8, turns=5, system_prompt_tokens=64, question_tokens=64, answer_tokens=32),
    )
    res = replay_sequential(trace, Config("lru", 600))
    total, _ = classify(replayed_sent(trace, res.cached_per_request))
    _sums(total)
    assert Anatomy(**total).dominant() == "evicted", total
