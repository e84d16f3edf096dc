"""The recommendation's order and thresholds on hand-made candidates (the end-to-end cases are in
test_advice.py)."""

from __future__ import annotations

import pytest

from harness.advise.grid import Candidate
from harness.advise.physics import Modelled
from harness.advise.recommend import recommend
from harness.advise.working_set import WorkingSet
from harness.whatif.grid import Config
from harness.whatif.replay import Result

PROMPT = 10_000


def cand(
    policy: str,
    pool: int,
    hit: float,
    ttft: float,
    ratio: float = 0.0,
    write: str = "write_through",
    storage: str = "",
) -> Candidate:
    cfg = Config(policy, pool, ratio, write, storage=storage)
    res = Result(cfg, 10, PROMPT, int(hit * PROMPT), int(hit * PROMPT), 0, PROMPT, 0, 0, 0, 0.0)
    return Candidate(cfg, res, Modelled({"mean": ttft, "p50": ttft, "p99": ttft}, 1.0, 10.0, None, None))


def ws(unstable: int = 0, w5: int = 500) -> WorkingSet:
    return WorkingSet(1, {"1m": w5, "5m": w5, "15m": w5}, w5, 2 * w5, {"p90": 800}, 0.1, 0.1, 10, unstable)


def test_no_change_pays_when_every_gain_is_under_a_point():
    cands = [cand("lru", 1000, 0.50, 100), cand("lru", 2000, 0.505, 99), cand("lfu", 1000, 0.508, 98)]
    cands.append(cand("lru", 1000, 0.50, 101, ratio=2.0))
    r = recommend(cands, 1000, ws(), "tokens")
    assert not r.steps and not r.hicache
    assert r.notes[0].startswith("no change pays")
    assert r.headline.startswith("HiCache adds nothing")


def test_steps_come_in_the_operators_order():
    cands = [
        cand("lru", 1000, 0.30, 300),
        cand("lru", 2000, 0.40, 200),  # grow the pool first
        cand("lru", 2000, 0.55, 150, ratio=2.0),  # then HiCache
        cand("lru", 2000, 0.548, 150, ratio=2.0, write="write_through_selective"),
        cand("slru", 2000, 0.60, 140, ratio=2.0),  # the policy last
        cand("slru", 1000, 0.70, 100),  # better, but a policy change on the small pool is not how one goes
    ]
    r = recommend(cands, 1000, ws(unstable=3, w5=5000), "tokens")
    actions = [s.action.split(" ")[0] for s in r.steps]
    assert actions == ["make", "grow", "enable", "if", "eviction"]
    assert (
        r.hicache and r.headline == "HiCache pays: hit rate 40.0% -> 55.0%, modelled TTFT mean 200 -> 150 ms"
    )
    assert r.chosen.config == Config("slru", 2000, 2.0, "write_through")
    assert r.to_dict()["steps"][1]["after"]["hit_rate"] == 0.4


def test_a_gain_that_slows_the_first_token_is_not_taken():
    cands = [cand("lru", 1000, 0.30, 100), cand("lru", 1000, 0.45, 130, ratio=2.0)]
    r = recommend(cands, 1000, ws(w5=5000), "tokens")
    assert not r.hicache and not r.steps


def test_a_storage_tier_that_pays_is_its_own_step_after_the_host_tier_and_before_the_policy():
    cands = [
        cand("lru", 1000, 0.30, 300),
        cand("lru", 1000, 0.50, 200, ratio=2.0),
        cand("lru", 1000, 0.58, 180, ratio=2.0, storage="mooncake"),
        cand("lru", 1000, 0.57, 185, ratio=2.0, storage="nixl"),
        cand("slru", 1000, 0.70, 100, ratio=2.0),  # at the host tier without L3: not comparable, not taken
    ]
    r = recommend(cands, 1000, ws(w5=5000), "tokens", slow_storage=("file",), typical_tokens=2048)
    assert [s.action.split(" ")[0] for s in r.steps] == ["enable", "storage"]
    assert "mooncake" in r.steps[1].action and r.chosen.config.storage == "mooncake"
    assert r.to_dict()["storage_backend"] == "mooncake"
    assert r.notes[0] == (
        "storage backends slower than recomputing a typical prompt (2,048 tokens) on this card: file; not tried"
    )


def test_a_storage_tier_that_adds_nothing_on_one_instance_is_a_note_not_a_step():
    cands = [
        cand("lru", 1000, 0.30, 300),
        cand("lru", 1000, 0.50, 200, ratio=2.0),
        cand("lru", 1000, 0.503, 200, ratio=2.0, storage="file"),
    ]
    r = recommend(cands, 1000, ws(w5=5000), "tokens")
    assert [s.action.split(" ")[0] for s in r.steps] == ["enable"]
    assert r.chosen.config.storage == ""
    (note,) = [n for n in r.notes if n.startswith("storage tier")]
    assert "50.0% -> 50.3%" in note and "instances should share" in note


def test_when_only_l3_behind_the_host_tier_pays_the_headline_says_so():
    cands = [
        cand("lru", 1000, 0.30, 300),
        cand("lru", 1000, 0.305, 300, ratio=2.0),  # the host tier alone: half a point
        cand("lru", 1000, 0.45, 250, ratio=2.0, storage="hf3fs"),
    ]
    r = recommend(cands, 1000, ws(w5=5000), "tokens")
    assert r.hicache and [s.action.split(" ")[0] for s in r.steps] == ["storage"]
    assert (
        r.headline
        == "HiCache pays with a storage tier: hit rate 30.0% -> 45.0%, modelled TTFT mean 300 -> 250 ms"
    )


def test_a_better_candidate_the_steps_did_not_take_is_named_with_its_costs():
    from dataclasses import replace

    from harness.advise.levers import Levers
    from harness.sim.timing import resolve_profile

    wb = cand("lru", 2000, 0.50, 240, ratio=2.0, write="write_back")
    wb = replace(wb, result=replace(wb.result, host_written_tokens=8_000))
    cands = [
        cand("lru", 1000, 0.30, 300),
        cand("lru", 1000, 0.40, 250, ratio=2.0),  # the host tier step: write_through
        wb,  # a bigger pool and write_back at once: no single step reaches it
        cand("lfu", 1000, 0.49, 260, ratio=2.0),  # a point behind the best (over half a point): not named
    ]
    levers = Levers(resolve_profile("l4", "Qwen3-0.6B"), 1)
    r = recommend(cands, 1000, ws(w5=5000), "tokens", levers=levers, host_memory_gb=64)
    assert [s.action.split(" ")[0] for s in r.steps] == ["enable"]
    assert r.steps[0].action.endswith("(--hicache-ratio 2: 0.2 GB of the 64 GB host memory)")
    assert r.chosen.config == Config("lru", 1000, 2.0, "write_through")
    b = r.better
    assert b is not None and b.candidate is wb and b.gain_points == pytest.approx(10.0)
    why = " ".join(b.why)
    assert "differs in device pool and write policy" in why
    assert (
        "Memory: a device pool of 2,000 tokens, against 1,000 tokens now, takes the card's default pool"
        in why
    )
    per_request = 8_000 * levers.profile.kv_bytes_per_token / (levers.profile.h2d_gb_per_s * 1e9) * 1e3 / 10
    assert f"{per_request:.1f} ms a request" in why and "write_back" in why
    assert "Latency" not in why  # its TTFT mean is lower
    d = r.to_dict()["better_candidate"]
    assert d["config"] == "lru, pool 2,000, host 2x write_back" and d["hit_rate"] == 0.5 and d["why"] == b.why
    assert b.line().startswith("better by the candidates' own measure: lru, pool 2,000, host 2x write_back")


def test_no_better_candidate_when_none_beats_the_choice_by_a_point():
    cands = [
        cand("lru", 1000, 0.30, 300),
        cand("lru", 1000, 0.40, 250, ratio=2.0),
        cand("lru", 1000, 0.409, 200, ratio=2.0, write="write_back"),  # 0.9 point: not named
    ]
    r = recommend(cands, 1000, ws(w5=5000), "tokens")
    assert r.better is None and r.to_dict()["better_candidate"] is None


def test_a_slower_better_candidate_names_its_latency_and_no_step_pays_alone():
    cands = [cand("lru", 1000, 0.30, 300), cand("lru", 1000, 0.45, 330, ratio=2.0)]
    r = recommend(cands, 1000, ws(w5=5000), "tokens")
    assert not r.steps and r.notes[0].startswith("no step pays on its own")
    assert r.better is not None and any(
        w.startswith("Latency: its modelled TTFT mean is higher") for w in r.better.why
    )
    assert any(w.startswith("Host bandwidth") for w in r.better.why)
