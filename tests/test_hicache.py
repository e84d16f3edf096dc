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


def test_write_back_eviction_that_host_evicts_own_child():
    """Regression: backing up a device leaf under write-back made host room by evicting that leaf's own
    host-only child, which marked the leaf evictable again; the dropped leaf stayed in the heap and the
    next evict raised KeyError. SGLang runs the D->H copy while the leaf is still a device leaf."""
    c = make("write_back", capacity=4)
    c.insert([2, 1, 2, 1, 2])
    c.insert([1, 0, 2, 0, 0])
    c.insert([2, 1, 2, 1, 2, 0, 2, 0])
    assert c.evict(2) == 5  # [1,0,2,0,0] does not fit the 4-token host pool: dropped
    assert c.evict(6) == 8  # [0,2,0] written back, then its parent host-evicts it and is dropped too
    c.verify()
    assert c.evict(4) == 0
    assert c.device_size() == c.host_size() == 0
    assert c.stats.dropped_tokens == 10 and c.stats.host_evicted_tokens == 3


def test_load_back_of_a_stale_match_loads_nothing():
    """A match whose host path was host-evicted since (e.g. by a write-back eviction) must not be loaded."""
    c = make("write_back", capacity=12)
    c.insert(B)
    c.evict(12)  # B written back, host-only now
    m = c.match_prefix(B)
    assert m.host_len == 12
    c.insert(C)
    c.evict_host(12)  # B leaves the host tier
    assert c.load_back(m) == 0
    c.verify()


HOST_OPS = st.lists(
    st.tuples(
        # weighted: sessions that grow and evictions are what put host-only nodes under device leaves
        st.sampled_from(
            ["insert", "grow", "grow", "grow", "match", "lock", "lock_host", "unlock"]
            + ["evict", "evict", "evict", "evict_host", "serve", "serve", "load"]
        ),
        st.lists(st.integers(0, 3), max_size=10),
        st.integers(1, 12),
    ),
    min_size=4,
    max_size=50,
)


@settings(max_examples=150, deadline=None)
@given(
    HOST_OPS,
    st.sampled_from(["write_through", "write_through_selective", "write_back"]),
    st.integers(0, 8) | st.integers(9, 40),
    st.sampled_from(["lru", "lfu", "slru", "fifo", "mru", "priority"]),
    st.sampled_from([1, 2]),
    st.sampled_from(["radix", "unified"]),
)
def test_host_tier_invariants_every_write_policy_tiny_pools(
    seq, write_policy, host_cap, policy, page, flavor
):
    """Every structural invariant (RadixCache.verify) after each operation, with host pools down to 0 tokens."""
    c = make(write_policy, capacity=host_cap, policy=policy, page_size=page, flavor=flavor)
    locks, seen = [], [[]]
    for kind, toks, n in seq:
        if kind == "grow":  # the next turn of an earlier sequence: children under cached nodes
            toks = seen[n % len(seen)] + toks
            kind = "insert"
        if kind in ("insert", "serve"):
            seen.append(toks)
        if kind == "insert":
            c.insert(toks, priority=n % 3)
        elif kind == "match":
            m = c.match_prefix(toks)
            assert m.total_len <= len(toks) and m.total_len % page == 0
        elif kind in ("lock", "lock_host"):
            m = c.match_prefix(toks)
            node = m.last_device_node if kind == "lock" else m.last_host_node
            c.inc_lock_ref(node)
            locks.append((node, m.device_len, toks[: m.device_len]))
        elif kind == "unlock" and locks:
            c.dec_lock_ref(locks.pop(n % len(locks))[0])
        elif kind == "evict":
            before = c.evictable_size()
            assert c.evict(n) <= before
        elif kind == "evict_host":
            c.evict_host(n)
        elif kind == "serve":
            serve_request(c, toks, capacity=30)
        elif kind == "load":
            m = c.match_prefix(toks)
            c.inc_lock_ref(m.last_host_node)
            c.evict(n)
            loaded = c.load_back(m)
            c.dec_lock_ref(m.last_host_node)
            assert loaded in (0, m.host_len)
        c.verify()
        for _, length, prefix in locks:  # a locked prefix is never evicted from the device
            assert c.match_prefix(prefix).device_len >= length


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["insert", "grow", "grow", "evict", "evict", "match"]),
            st.lists(st.integers(0, 3), max_size=8),
            st.integers(1, 12),
        ),
        min_size=3,
        max_size=30,
    ),
    st.integers(0, 10),
    st.sampled_from(["lru", "lfu", "slru", "fifo", "mru", "priority"]),
    st.sampled_from(["radix", "unified"]),
)
def test_write_back_evictions_with_tiny_host_pools(seq, host_cap, policy, flavor):
    """Write-back with a host pool smaller than the nodes it backs up: the eviction that writes a node back
    host-evicts older host nodes (its own children included) or drops the node, never corrupting the tree."""
    c = make("write_back", capacity=host_cap, policy=policy, flavor=flavor)
    seen = [[]]
    for kind, toks, n in seq:
        if kind == "grow":
            toks = seen[n % len(seen)] + toks
        if kind in ("insert", "grow"):
            c.insert(toks, priority=n % 3)
            seen.append(toks)
        elif kind == "evict":
            c.evict(n)
        else:
            c.match_prefix(toks)
        c.verify()
