"""The routing replay (`harness whatif --replicas`): one replica is today's replay, round robin over
sessions that never return is N independent trees, and smg's choices as its source makes them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.whatif.char_tree import CharTree
from harness.whatif.fleet import replay_fleet
from harness.whatif.grid import Config
from harness.whatif.inputs import Trace, TraceRequest, read_mooncake, read_spec
from harness.whatif.replay import replay
from harness.whatif.routing import POLICIES, Request, RouterConfig, make_router, routing_text
from tests.helpers.cli import harness
from tests.helpers.specs import multi_turn, shared_prefix, write_spec

MOONCAKE = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def _spec(tmp_path: Path, kind: str, concurrency: int) -> Trace:
    wl = (
        shared_prefix(groups=6, prompts_per_group=4, system_prompt_tokens=384, question_tokens=16)
        if kind == "shared"
        else multi_turn(sessions=5, turns=4, system_prompt_tokens=64, question_tokens=40, answer_tokens=24)
    )
    p = write_spec(tmp_path, kind, wl, api="openai-completions", tokenizer="word", concurrency=concurrency)
    return read_spec(p)


def _same(a, b) -> None:
    assert a.cached_per_request == b.cached_per_request
    assert (a.device_hit_tokens, a.host_hit_tokens, a.storage_hit_tokens) == (
        b.device_hit_tokens,
        b.host_hit_tokens,
        b.storage_hit_tokens,
    )
    assert a.ttft_ms == b.ttft_ms
    assert a.evicted_tokens == b.evicted_tokens
    # every figure, host_written_tokens included; only the wall seconds differ
    da, db = a.to_dict(), b.to_dict()
    da.pop("seconds"), db.pop("seconds")
    assert da == db


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("kind", "concurrency"), [("shared", 4), ("multi", 3)])
def test_one_replica_is_todays_engine_replay(
    tmp_path: Path, policy: str, kind: str, concurrency: int
) -> None:
    trace = _spec(tmp_path, kind, concurrency)
    cfg = Config("lru", 1200)
    fleet = replay_fleet(trace, cfg, 1, RouterConfig(policy))
    _same(fleet.aggregate, replay(trace, cfg))
    assert fleet.workers[0].requests == len(trace.requests) and fleet.load_skew == 1.0


def test_one_replica_with_host_tier_and_l3_is_todays_replay(tmp_path: Path) -> None:
    trace = _spec(tmp_path, "shared", 2)
    cfg = Config("lru", 900, host_ratio=2.0, storage="file")
    one = replay_fleet(trace, cfg, 1, RouterConfig("cache_aware"), shared_l3=True)
    today = replay(trace, cfg)
    _same(one.aggregate, today)
    assert today.storage_hit_tokens + today.host_hit_tokens > 0  # the tiers were exercised


def test_one_replica_is_todays_sequential_replay_on_mooncake() -> None:
    trace = read_mooncake(MOONCAKE)
    trace.requests = trace.requests[:600]
    for pool in (300, 3000):
        cfg = Config("lru", pool)
        _same(replay_fleet(trace, cfg, 1, RouterConfig("cache_aware")).aggregate, replay(trace, cfg))


@pytest.mark.parametrize("write_policy", ["write_back", "write_through"])
def test_one_replica_copies_to_host_as_todays_replay(tmp_path: Path, write_policy: str) -> None:
    """The host tier's copies (write_back: at eviction) are counted in the fleet as in today's replay."""
    trace = _spec(tmp_path, "multi", 3)
    cfg = Config("lru", 500, host_ratio=2.0, write_policy=write_policy)
    today = replay(trace, cfg)
    _same(replay_fleet(trace, cfg, 1, RouterConfig("round_robin")).aggregate, today)
    assert today.host_written_tokens > 0
    seq = read_mooncake(MOONCAKE)
    seq.requests = seq.requests[:600]
    cfg = Config("lru", 300, host_ratio=2.0, write_policy=write_policy)
    today = replay(seq, cfg)
    _same(replay_fleet(seq, cfg, 1, RouterConfig("cache_aware")).aggregate, today)
    assert today.host_written_tokens > 0


def test_l3_rows_are_timed_in_tokens_on_a_block_trace() -> None:
    """An L3 replay of a block trace runs through the engine: each block is timed as the tokens it
    stands for, so the L3 row's TTFT sits near the host tier's it is behind (not 1/512 of it)."""
    trace = read_mooncake(MOONCAKE)
    trace.requests = trace.requests[:300]
    host = Config("lru", 300, host_ratio=2.0)
    l3 = dataclasses.replace(host, storage="file")
    a = replay_fleet(trace, host, 2, RouterConfig("round_robin"), "h100")
    b = replay_fleet(trace, l3, 2, RouterConfig("round_robin"), "h100")
    ta, tb = a.aggregate.ttft_ms["p50"], b.aggregate.ttft_ms["p50"]
    assert b.aggregate.hit_rate >= a.aggregate.hit_rate - 0.01
    assert 0.5 * ta < tb < 2.0 * ta, (ta, tb)


def _one_shot_trace(concurrency: int | None) -> Trace:
    """12 sessions of one request each (none returns), in 2 groups sharing a 40-token prefix."""
    reqs = []
    for i in range(12):
        key = tuple(range(1000 * (i % 2), 1000 * (i % 2) + 40)) + tuple(
            range(50_000 + 100 * i, 50_000 + 100 * i + 8)
        )
        reqs.append(
            TraceRequest(
                key,
                len(key),
                float(i),
                4,
                session=i,
                turn=0,
                output_key=(7, 8, 9, 10),
                index=i,
                conversation=i,
            )
        )
    return Trace("one-shot", reqs, concurrency=concurrency)


@pytest.mark.parametrize("concurrency", [None, 1])
@pytest.mark.parametrize("n", [2, 3, 4])
def test_round_robin_over_sessions_that_never_return_is_n_independent_trees(
    concurrency: int | None, n: int
) -> None:
    trace = _one_shot_trace(concurrency)
    cfg = Config("lru", 110)  # both prefixes but few tails fit: eviction is part of what must match
    fleet = replay_fleet(trace, cfg, n, RouterConfig("round_robin"))
    assert fleet.worker_of == [i % n for i in range(len(trace.requests))]
    for k in range(n):
        alone = replay(dataclasses.replace(trace, requests=trace.requests[k::n]), cfg)
        assert fleet.aggregate.cached_per_request[k::n] == alone.cached_per_request
        assert fleet.workers[k].hit_tokens == alone.hit_tokens
    assert sum(fleet.aggregate.cached_per_request) > 0


def test_char_tree_matches_chars_and_names_every_holder_of_the_node() -> None:
    tree = CharTree(2)
    tree.insert("hello world", 0)
    m = tree.match("hello there")
    assert (m.tenants, m.matched_chars, m.input_chars) == ((0,), 6, 11)  # "hello " then into "world"
    tree.insert("hello there", 1)
    # the edge split at "hello ": both hold it; "there" is worker 1's alone
    assert tree.match("hello").tenants == (0, 1) and tree.match("hello").matched_chars == 5
    m = tree.match("hello th")
    assert (m.tenants, m.matched_chars) == ((1,), 8)
    assert tree.chars == {0: 11, 1: 11}
    assert tree.match("zzz").matched_chars == 0


def test_char_tree_eviction_drops_the_oldest_leaves_to_the_size() -> None:
    tree = CharTree(1)
    for text in ("aaaa-one", "bbbb-two", "cccc-three"):
        tree.insert(text, 0)
    tree.evict(12)
    assert tree.chars[0] <= 12
    assert tree.match("cccc-three").matched_chars == 10  # the newest stays
    assert tree.match("aaaa-one").matched_chars == 0  # the oldest went


def test_cache_aware_keeps_holders_until_the_spill_gate_and_draws_ties() -> None:
    cfg = RouterConfig("cache_aware", balance_abs_threshold=2, balance_rel_threshold=1.5)
    router = make_router(3, cfg)
    text = "system prompt " * 20
    assert router.options(Request(text + "q1", (), 0.0), [0, 0, 0]) == [0, 1, 2]  # a miss: every idle worker
    router.commit(Request(text + "q1", (), 0.0), 1, [0, 0, 0])
    # match > 0.3: its holder, 3 in flight, but not past the mean (1) + 2
    assert router.options(Request(text + "q2", (), 0.0), [0, 3, 0]) == [1]
    router.commit(Request(text + "q2", (), 0.0), 1, [0, 3, 0])
    # 6 in flight on the holder: over 1.5 x the mean (2.33) and over the mean + 2: spill to the idlest others
    assert router.options(Request(text + "q3", (), 0.0), [1, 6, 0]) == [2]
    assert router.branches == {"expected_wait_fallback": 1, "tree_match": 1}
    assert router.branch == "spill"
    assert router.options(Request("other " * 9, (), 0.0), [1, 0, 0]) == [1, 2]  # fewest in flight, a tie


def test_prefix_hash_keys_on_the_text_head_over_http_and_tokens_over_grpc() -> None:
    http = make_router(4, RouterConfig("prefix_hash"))
    head = "x" * 1024
    assert len({http.select(Request(head + f"tail {i}", (), 0.0), [0] * 4) for i in range(20)}) == 1
    spread = {http.select(Request(f"{i} " + head, (), 0.0), [0] * 4) for i in range(40)}
    assert len(spread) > 1  # other heads land elsewhere on the ring
    grpc = make_router(4, RouterConfig("prefix_hash", transport="grpc"))
    toks = tuple(range(300))
    assert len({grpc.select(Request(f"text {i}", toks + (i,), 0.0), [0] * 4) for i in range(20)}) == 1
    target = grpc.select(Request("", toks, 0.0), [0] * 4)
    loads = [0] * 4
    loads[target] = 30  # past both margins (1.25 x and + 10 over the mean): the least loaded instead
    assert grpc.options(Request("", toks, 0.0), loads) != [target] and grpc.branch == "load_balance_walk"


def test_following_a_run_counts_the_choices_the_model_could_not_make(tmp_path: Path) -> None:
    trace = _spec(tmp_path, "shared", 1)
    cfg = Config("lru", 1200)
    drawn = replay_fleet(trace, cfg, 2, RouterConfig("cache_aware", seed=3))
    again = replay_fleet(trace, cfg, 2, RouterConfig("cache_aware"), follow=drawn.worker_of)
    assert again.off_model == [] and again.aggregate.cached_per_request == drawn.aggregate.cached_per_request
    flipped = [1 - w for w in drawn.worker_of]  # the same partition under the other names is still the model
    assert replay_fleet(trace, cfg, 2, RouterConfig("cache_aware"), follow=flipped).off_model == []
    broken = list(drawn.worker_of)
    later = next(i for i in range(1, len(broken)) if drawn.branches and trace.requests[i].position)
    broken[later] = 1 - broken[later]  # a group's later prompt sent away from its holder
    assert later in replay_fleet(trace, cfg, 2, RouterConfig("cache_aware"), follow=broken).off_model
    rr = replay_fleet(trace, cfg, 2, RouterConfig("round_robin"), follow=[0] * len(trace.requests))
    assert rr.off_model == list(range(1, len(trace.requests), 2))


def test_routing_text_is_what_smg_extracts() -> None:
    assert routing_text("a prompt") == "a prompt"
    assert routing_text([5, 6, 7]) == "5 6 7"
    msgs = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": ""},
        {"role": "user", "content": "hi"},
    ]
    assert routing_text(msgs) == "sys hi"


def test_bad_router_settings_are_one_line_errors() -> None:
    with pytest.raises(HarnessError, match="--router: unknown policy 'fastest'"):
        RouterConfig("fastest")
    with pytest.raises(HarnessError, match="--replicas: 0"):
        make_router(0, RouterConfig())


@pytest.mark.slow
def test_whatif_replicas_grid_in_one_command(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "sp",
        shared_prefix(groups=4, prompts_per_group=3, system_prompt_tokens=200, question_tokens=8),
        api="openai-completions",
        tokenizer="word",
        concurrency=2,
    )
    r = harness(
        "whatif", str(spec), "--policy", "lru", "--pool", "600", "--host-ratio", "0,2", "--storage-backend", "file",
        "--replicas", "1,2,4", "--router", "round_robin,cache_aware", "--slo", "500", "--json", "-o", str(tmp_path / "o"),
        "--workers", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)[0]["routing"]
    # pool 600 without a host tier, with a host tier, with host + shared L3: x 2 policies x 3 replica counts
    assert len(out) == 3 * 2 * 3
    keys = {
        (c["router"]["policy"], c["replicas"], c["aggregate"]["config"]["host_ratio"], c["shared_l3"])
        for c in out
    }
    assert ("cache_aware", 4, 2.0, True) in keys and ("round_robin", 1, 0.0, False) in keys
    for c in out:
        assert len(c["workers"]) == c["replicas"]
        assert sum(w["requests"] for w in c["workers"]) == 12
        assert 0.0 <= c["slo_met"] <= 1.0 and c["load_skew"] >= 1.0
    ones = [c["hit_rate"] for c in out if c["replicas"] == 1 and c["aggregate"]["config"]["host_ratio"] == 0]
    assert len(set(ones)) == 1  # one replica: the policy cannot matter
    assert (tmp_path / "o" / "whatif-routing-sp.png").is_file()
    bad = harness("whatif", str(spec), "--pool", "600", "--replicas", "2", "--router", "sticky")
    assert (
        bad.returncode == 2
        and "--router: unknown policy 'sticky'" in bad.stderr
        and "Traceback" not in bad.stderr
    )
