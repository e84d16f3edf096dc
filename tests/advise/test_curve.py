"""The one-pass curve against the exact replay it claims to equal (harness whatif --mode exact, lru,
one request at a time)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import harness.whatif.grid as whatif_grid
import harness.whatif.replay as whatif_replay
from harness.advise.curve import INF, curve_points, stack_distances
from harness.sim.radix import RadixCache
from harness.whatif.grid import Config
from harness.whatif.inputs import read_mooncake
from harness.whatif.replay import replay_sequential
from harness.whatif.trace import Trace, TraceRequest

CONVERSATION = Path(__file__).resolve().parents[1] / "data" / "mooncake" / "conversation_trace.jsonl"


def extension_trace(seed: int, sessions: int = 12, turns: int = 5, kind: str = "tokens") -> Trace:
    """Interleaved sessions whose every turn extends the previous prompt and its answer (with answers
    inserted as SGLang does for token inputs), the shape where the one pass is exact."""
    rng = random.Random(seed)
    state = {s: [1000 * s + i for i in range(rng.randint(5, 30))] for s in range(sessions)}
    left = {s: turns for s in range(sessions)}
    reqs: list[TraceRequest] = []
    tok = 10**6
    while left:
        s = rng.choice(sorted(left))
        key = list(state[s]) + [tok + i for i in range(rng.randint(1, 12))]
        tok += 100
        answer = [tok + i for i in range(rng.randint(2, 10))] if kind == "tokens" else []
        tok += 100
        unit = 1 if kind == "tokens" else 16
        n_tokens = len(key) * unit - (rng.randint(0, unit - 1) if kind == "blocks" else 0)
        reqs.append(
            TraceRequest(tuple(key), n_tokens, len(reqs) * 1.0, len(answer), s, output_key=tuple(answer))
        )
        state[s] = key + answer
        left[s] -= 1
        if not left[s]:
            del left[s]
    return Trace(f"ext{seed}", reqs, unit=1 if kind == "tokens" else 16, kind=kind)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("kind", ["tokens", "blocks"])
def test_curve_equals_exact_replay_on_extension_traces(seed, kind):
    trace = extension_trace(seed, kind=kind)
    sd = stack_distances(trace)
    assert sd.ceiling > 0.3  # reuse to decide
    sizes = sorted(
        {sd.longest_request, sd.longest_request + 7, sd.knee_pool // 3, sd.knee_pool // 2, sd.knee_pool}
    )
    checked = 0
    for pool in sizes:
        if pool < sd.longest_request:
            continue
        exact = replay_sequential(trace, Config("lru", pool, mode="exact"))
        assert sd.hit_tokens(pool) == exact.hit_tokens, (pool, sd.hit_tokens(pool), exact.hit_tokens)
        checked += 1
    assert checked >= 3
    # the pool did bind below the knee
    assert sd.hit_tokens(sd.longest_request) < sd.hit_tokens(sd.knee_pool)


class KeepTailStamp(RadixCache):
    """SGLang's tree but for one stamp: the tail a split cuts off keeps its own last-access time instead of
    a fresh one (unified_radix_cache `_split_node`). The one pass equals this tree exactly."""

    def _split(self, child, split_len):
        old = child.last_access_time
        new = super()._split(child, split_len)
        child.last_access_time = old
        return new


def shared_trace(seed: int) -> Trace:
    """Token requests behind a few shared system prompts, questions shared but for their last token,
    answers inserted: splits mid-node everywhere. (A prompt repeated whole would make the replay
    recompute a last token that is already cached: one slot the one pass does not hold; docs/advise.md.)"""
    rng = random.Random(seed)
    systems = [[100_000 * g + i for i in range(rng.randint(20, 60))] for g in range(5)]
    reqs = []
    for n in range(120):
        g = rng.randrange(5)
        q = rng.randrange(8)  # 8 questions per system prompt: repeats happen
        key = systems[g] + [10_000_000 + 1000 * g + 10 * q + i for i in range(rng.randint(3, 9))] + [-n]
        ans = [20_000_000 + 7 * n + i for i in range(rng.randint(2, 6))]
        reqs.append(TraceRequest(tuple(key), len(key), float(n), len(ans), output_key=tuple(ans)))
    return Trace(f"shared{seed}", reqs)


@pytest.mark.parametrize("seed", range(4))
def test_curve_equals_the_tree_without_the_split_tail_stamp(monkeypatch, seed):
    """Where requests leave a node mid-way, the only difference from SGLang's tree is the fresh stamp
    of the split-off tail: without it, equality at every size (and a difference with it, somewhere)."""
    trace = shared_trace(seed)
    sd = stack_distances(trace)
    sizes = range(sd.longest_request, sd.knee_pool + 1, max(1, (sd.knee_pool - sd.longest_request) // 12))
    sglang = [replay_sequential(trace, Config("lru", p, mode="exact")).hit_tokens for p in sizes]
    monkeypatch.setattr(whatif_grid, "RadixCache", KeepTailStamp)  # new_cache builds the tree
    for pool in sizes:
        kept = whatif_replay.replay_sequential(trace, Config("lru", pool, mode="exact"))
        assert sd.hit_tokens(pool) == kept.hit_tokens, pool
    assert sglang != [sd.hit_tokens(p) for p in sizes]  # the stamp matters on this trace


@pytest.fixture(scope="module")
def conversation():
    trace = read_mooncake(CONVERSATION)
    return trace, stack_distances(trace)


def test_curve_equals_the_tail_stamp_free_replay_on_the_conversation_trace(monkeypatch, conversation):
    """Where the one pass differs most from SGLang's tree (10,000-20,000 blocks), the tail's stamp is
    the whole difference."""
    trace, sd = conversation
    monkeypatch.setattr(whatif_grid, "RadixCache", KeepTailStamp)  # new_cache builds the tree
    for pool in (10_000, 20_000):
        assert (
            sd.hit_tokens(pool)
            == whatif_replay.replay_sequential(trace, Config("lru", pool, mode="exact")).hit_tokens
        )


def test_curve_within_a_tenth_of_a_point_on_the_conversation_trace(conversation):
    """Mid-node divergences re-stamp the split-off tail (docs/advise.md): the one pass is then within a
    tenth of a point at these sizes (up to 0.4 between 5,000 and 20,000 blocks: benchmarks/bench_advise.py)."""
    trace, sd = conversation
    for pool in (300, 1000, 2000, 50_000, 100_000, sd.knee_pool):
        exact = replay_sequential(trace, Config("lru", pool, mode="exact"))
        assert abs(sd.hit_rate(pool) - exact.hit_rate) <= 0.001, (pool, sd.hit_rate(pool), exact.hit_rate)
    assert sd.hit_rate(sd.knee_pool) == pytest.approx(sd.ceiling)


def test_brute_force_stack_on_a_tiny_block_trace():
    """Ranks checked by hand: a page's rank is 1 + the distinct pages touched since, root-most first."""
    reqs = [
        TraceRequest((1, 2), 2),
        TraceRequest((3,), 1),
        TraceRequest((1, 2), 2),
    ]
    sd = stack_distances(Trace("t", reqs, unit=1, kind="blocks"))
    # the stack after the second request, newest first: (3), (1), (1,2): the third request's ranks 2 and 3
    finite = sd.rank[sd.rank < INF]
    assert finite.tolist() == [2, 3]
    assert sd.hit_tokens(2) == 1 and sd.hit_tokens(3) == 2 and sd.hit_tokens(1) == 0
    assert sd.prompt_tokens == 5 and sd.distinct_pages == 3


def test_curve_points_keep_the_asked_sizes_and_rise():
    trace = extension_trace(1)
    sd = stack_distances(trace)
    pts = curve_points(sd, [5, 123, 10**9])
    pools = [p.pool for p in pts]
    assert {5, 123, 10**9} <= set(pools)
    assert pools == sorted(pools)
    rates = np.array([p.hit_rate for p in pts])
    assert (np.diff(rates) >= 0).all()
    assert rates[-1] == pytest.approx(sd.ceiling)


def test_any_integer_ids_page_alike():
    """Ids outside [0, 2^64) (negative, huge) take the trie's other key shape and rank the same."""
    plain = extension_trace(3, kind="blocks")
    odd_of = {}

    def odd(e: int) -> int:
        return odd_of.setdefault(e, (-1 - e) if e % 2 else e + 2**70)

    odd_trace = Trace(
        "odd",
        [TraceRequest(tuple(odd(e) for e in r.key), r.tokens, r.arrival) for r in plain.requests],
        16,
        "blocks",
    )
    a, b = stack_distances(plain), stack_distances(odd_trace)
    assert a.rank.tolist() == b.rank.tolist() and a.distinct_pages == b.distinct_pages


@pytest.mark.parametrize("kind", ["tokens", "blocks"])
def test_the_one_pass_finds_each_requests_unbounded_hit_as_ideal_hits_does(kind, conversation):
    """advise takes the replays' ideal hits from the curve's pass (replay.remember_ideal): they must be
    ideal_hits' own, on token inputs (the last prompt token never hits) and on block traces."""
    traces = [extension_trace(3, kind=kind)] + ([shared_trace(1)] if kind == "tokens" else [conversation[0]])
    for trace in traces:
        got = stack_distances(trace).request_hits
        assert got == whatif_replay._ideal_hits(trace, 1) and sum(got) > 0
    trace = extension_trace(4, kind=kind)
    hits = stack_distances(trace).request_hits
    whatif_replay.remember_ideal(trace, 1, hits)
    assert whatif_replay.ideal_hits(trace, 1) is hits  # the replays read it, nothing rebuilt
    with pytest.raises(ValueError, match="3 ideal hits for"):
        whatif_replay.remember_ideal(trace, 1, [0, 0, 0])


def test_page_weights_are_each_pages_tokens_the_last_at_its_real_length():
    from harness.advise.curve import _weights

    for unit, tokens, limit in [
        (16, 40, 3),
        (16, 48, 3),
        (16, 40, 5),
        (16, 0, 2),
        (512, 7000, 14),
        (1, 9, 8),
    ]:
        want = [min((i + 1) * unit, tokens) - min(i * unit, tokens) for i in range(limit)]
        assert _weights(limit, unit, tokens) == want, (unit, tokens, limit)
