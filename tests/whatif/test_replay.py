"""What-if replays: the L3 side (a storage backend in the grid, hits split by tier) and per priority class (a
spec's classes give each class's hit rate and modelled TTFT, and `priority` keeps the high class where `lru`
does not, as the live sim)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.whatif.grid import Config, build_grid
from harness.whatif.inputs import Trace, TraceRequest, read_input
from harness.whatif.replay import replay
from tests.helpers.specs import multi_turn, spec, write_yaml


def _churn_trace() -> Trace:
    """Four 1,500-token prefixes sent round-robin three times: more than device + host hold, at concurrency 1."""
    rng = random.Random(3)
    prefixes = [tuple(rng.randrange(1000, 30000) for _ in range(1500)) for _ in range(4)]
    reqs = []
    for rnd in range(3):
        for g, p in enumerate(prefixes):
            i = rnd * 4 + g
            key = p + tuple(rng.randrange(1000, 30000) for _ in range(20))
            reqs.append(
                TraceRequest(key, len(key), session=i, turn=0, output_key=(7, 8, 9), index=i, conversation=i)
            )
    return Trace("churn", reqs, concurrency=1)


def test_an_l3_backend_turns_misses_into_storage_hits():
    trace = _churn_trace()
    base = Config("lru", 2000, host_ratio=2.0)
    without = replay(trace, base, card="tiny-test")
    with_l3 = replay(
        trace, Config("lru", 2000, 2.0, storage="file", storage_policy="wait_complete"), card="tiny-test"
    )
    assert without.storage_hit_tokens == 0
    assert with_l3.storage_hit_tokens >= 4 * 1500  # rounds 2 and 3 find what device and host lost
    for r in (without, with_l3):
        assert r.hit_tokens == r.device_hit_tokens + r.host_hit_tokens + r.storage_hit_tokens
    assert with_l3.hit_rate > without.hit_rate
    # what each tier's hits cost to bring onto the device
    assert with_l3.tier_seconds["device"] == 0.0 and with_l3.tier_seconds["storage"] > 0
    assert "storage" not in without.tier_seconds and without.tier_seconds["host"] >= 0
    # each replay starts from an empty L3 of its own: the same result twice
    again = replay(
        trace, Config("lru", 2000, 2.0, storage="file", storage_policy="wait_complete"), card="tiny-test"
    )
    assert again.storage_hit_tokens == with_l3.storage_hit_tokens


def _block_churn_file(tmp_path: Path) -> Path:
    """The churn above as a Mooncake block trace (16 tokens a block): four 300-block prefixes and 20 blocks
    of each request's own, round-robin three times (the engine's thresholds, such as SGLang's 256-token
    prefetch threshold, count key elements, so the prefixes are long in blocks)."""
    import json

    lines = []
    for rnd in range(3):
        for g in range(4):
            i = rnd * 4 + g
            ids = [g * 1000 + b for b in range(300)] + [100_000 + i * 100 + b for b in range(20)]
            lines.append(json.dumps({"hash_ids": ids, "input_length": 320 * 16 - 5, "output_length": 3}))
    path = tmp_path / "churn.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_l3_hits_on_a_block_trace_are_counted_in_tokens(tmp_path):
    trace = read_input(_block_churn_file(tmp_path), block_size=16)
    assert trace.kind == "blocks" and trace.unit == 16
    l3 = Config("lru", 400, 2.0, storage="file", storage_policy="wait_complete")
    res = replay(trace, l3, card="tiny-test")
    # rounds 2 and 3 find in L3 the 300-block prefixes device (400 blocks) and host (800) lost: 16 tokens a
    # block, not one
    assert res.storage_hit_tokens >= 4 * 300 * 16 and res.storage_hit_tokens % 16 == 0
    assert res.hit_tokens == res.device_hit_tokens + res.host_hit_tokens + res.storage_hit_tokens
    assert sum(res.cached_per_request) == res.hit_tokens <= res.prompt_tokens
    assert res.tier_seconds["storage"] > 0
    # sent in trace order (a Mooncake trace has no schedule index): round 1 finds nothing
    assert res.cached_per_request[:4] == [0, 0, 0, 0] and all(res.cached_per_request[4:])


def test_the_grid_adds_l3_only_where_there_is_a_host_tier():
    grid = build_grid(["lru"], [1000], [0.0, 2.0], ["write_through"], storages=["", "file"])
    assert [(c.host_ratio, c.storage) for c in grid] == [(0.0, ""), (2.0, ""), (2.0, "file")]
    with pytest.raises(HarnessError, match="--storage-backend: 'tape'"):
        build_grid(["lru"], [1000], [2.0], ["write_through"], storages=["tape"])
    with pytest.raises(HarnessError, match="--storage-prefetch-policy: 'eager'"):
        build_grid(["lru"], [1000], [2.0], ["write_through"], storage_policy="eager")


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


def _block_host_trace() -> Trace:
    """A block trace (512 tokens a block): A, then B pushes A's last two blocks off a 6-block device pool
    (or all of A) into the host tier, then A again with one more block. No answers: the engine counts an
    answer in whole blocks, and 5 prompt blocks + 1 answer block exceed what a 6-block pool takes."""
    a, b = (1, 2, 3, 4), (5, 6, 7, 8)
    keys = [a, b, (*a, 9)]
    reqs = [
        TraceRequest(k, 512 * len(k), output_tokens=0, index=i, conversation=i) for i, k in enumerate(keys)
    ]
    return Trace("block-host", reqs, unit=512, kind="blocks")


def test_a_host_hit_of_two_blocks_is_loaded_back_in_both_replays():
    """SGLang loads a host hit back from 10 tokens on; a block of a block trace is 512 of them, so two blocks
    come back (the threshold was once read as 10 blocks, 5,120 tokens: both replays recomputed them)."""
    cfg = Config("lru", 6, 4.0)
    trace = _block_host_trace()
    seq = replay(trace, cfg)
    eng = replay(dataclasses.replace(trace, concurrency=1), cfg)
    for res in (seq, eng):
        assert res.cached_per_request == [0, 0, 4 * 512], res.cached_per_request
        # the sequential tree keeps A's first two blocks on the device; the engine's output reservation
        # pushed all four off: from the host either way
        assert res.host_hit_tokens >= 2 * 512, res
        assert res.host_hit_tokens + res.device_hit_tokens == 4 * 512
