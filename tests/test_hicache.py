"""The host tier (HiCache): write policies, demotion on device eviction, load-back threshold, host eviction."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim.hicache import HostTier
from harness.sim.radix import RadixCache, serve_request


def make(write_policy="write_through", capacity=1000, policy="lru", **kw) -> RadixCache:
    c = itertools.count(1)
    host = HostTier(capacity, write_policy=write_policy)
    return RadixCache(policy=policy, clock=lambda: float(next(c)), host=host, **kw)


A = list(range(100, 120))  # 20 tokens
B = list(range(200, 212))  # 12 tokens
C = list(range(300, 305))  # 5 tokens


def test_write_through_backs_up_on_first_hit():
    c = make("write_through")
    c.insert(A)
    assert c.host.host_used() == 20 and c.stats.host_written_tokens == 20


def test_write_through_selective_waits_for_second_hit():
    c = make("write_through_selective")
    c.insert(A)
    assert c.host.host_used() == 0
    c.insert(A)
    assert c.host.host_used() == 20


def test_write_back_writes_on_device_eviction_only():
    c = make("write_back")
    c.insert(A)
    c.insert(A)
    assert c.host.host_used() == 0
    assert c.root.children[A[0]].hit_count == 0  # 0.5.23 counts no hits under write_back
    assert c.evict(1) == 20
    assert c.host.host_used() == 20 and c.device_size() == 0
    m = c.match_prefix(A)
    assert (m.device_len, m.host_len) == (0, 20)


def test_device_eviction_keeps_host_copy_and_load_back():
    c = make("write_through")
    c.insert(A)
    c.evict(20)
    assert c.device_size() == 0 and c.host_size() == 20
    m = c.match_prefix(A + [1, 2])
    assert (m.device_len, m.host_len) == (0, 20)
    assert c.load_back(m) == 20
    assert c.device_size() == 20 and c.stats.load_back_tokens == 20
    assert c.match_prefix(A).device_len == 20


def test_short_host_hits_are_not_loaded_back():
    c = make("write_through")
    c.insert(C)
    c.evict(5)
    m = c.match_prefix(C)
    assert m.host_len == 5
    assert c.load_back(m) == 0 and c.device_size() == 0


def test_partial_host_match_splits_host_node():
    c = make("write_through")
    c.insert(A)
    c.evict(20)
    m = c.match_prefix(A[:12] + [9])
    assert (m.device_len, m.host_len) == (0, 12)
    assert c.host_size() == 20  # a split moves host tokens, it does not add any
    assert c.load_back(m) == 12 and c.device_size() == 12


def test_host_eviction_by_policy_when_host_full():
    c = make("write_through", capacity=35)
    c.insert(A)
    c.insert(B)
    c.evict(32)  # both demoted to host only: 32 of 35 host tokens used
    c.match_prefix(A)  # A is now the more recently used
    c.insert(C)  # needs 5: B (lru host leaf) goes
    assert c.host.host_used() == 25 and c.stats.host_evicted_tokens == 12
    assert c.match_prefix(B).total_len == 0
    assert c.match_prefix(A).host_len == 20


def test_insert_over_host_only_node_restores_device_copy():
    c = make("write_through")
    c.insert(A)
    c.evict(20)
    assert c.insert(A) == 20
    assert c.device_size() == 20 and c.match_prefix(A).device_len == 20


def test_serve_request_counts_host_hits():
    c = make("write_through")
    serve_request(c, A, capacity=25)
    serve_request(c, B, capacity=25)  # evicts A to host
    dev, host = serve_request(c, A + [1], capacity=25)
    assert (dev, host) == (0, 20)
    assert c.device_size() <= 25


def test_bad_write_policy():
    with pytest.raises(ValueError, match="write_through"):
        HostTier(10, write_policy="write_around")


def test_from_ratio():
    assert HostTier.from_ratio(1000, 2.0).host_capacity == 2000


def _walk(c):
    stack = [c.root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children.values())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["serve", "evict", "match"]), st.lists(st.integers(0, 4), max_size=30)),
        max_size=40,
    ),
    st.sampled_from(["write_through", "write_through_selective", "write_back"]),
    st.integers(0, 40),
)
def test_host_invariants(seq, write_policy, host_cap):
    c = make(write_policy, capacity=host_cap)
    for kind, toks in seq:
        if kind == "serve":
            serve_request(c, toks, capacity=30)
        elif kind == "evict":
            c.evict(len(toks) + 1)
        else:
            m = c.match_prefix(toks)
            assert m.device_len + m.host_len <= len(toks)
        nodes = [n for n in _walk(c) if n is not c.root]
        assert c.device_size() == sum(len(n.key) for n in nodes if n.dev) <= 30
        assert c.host.host_used() == sum(len(n.key) for n in nodes if n.host) <= host_cap
        assert all(n.dev or n.host for n in nodes)
        for n in nodes:  # device copies form a prefix of every path
            if n.dev:
                assert n.parent is c.root or n.parent.dev
