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
    assert c.evict(20) == 0  # the backup holds its lock until the copy is acknowledged
    assert c.ack_transfers() == (1, 0)
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
    c.ack_transfers()
    c.evict(5)
    m = c.match_prefix(C)
    assert m.host_len == 5
    assert c.load_back(m) == 0 and c.device_size() == 0


def test_partial_host_match_splits_host_node():
    c = make("write_through")
    c.insert(A)
    c.ack_transfers()
    c.evict(20)
    m = c.match_prefix(A[:12] + [9])
    assert (m.device_len, m.host_len) == (0, 12)
    assert c.host_size() == 20  # a split moves host tokens, it does not add any
    assert c.load_back(m) == 12 and c.device_size() == 12


def test_host_eviction_by_policy_when_host_full():
    c = make("write_through", capacity=35)
    c.insert(A)
    c.insert(B)
    c.ack_transfers()
    c.evict(32)  # both demoted to host only: 32 of 35 host tokens used
    c.match_prefix(A)  # A is now the more recently used
    c.insert(C)  # needs 5: B (lru host leaf) goes
    assert c.host.host_used() == 25 and c.stats.host_evicted_tokens == 12
    assert c.match_prefix(B).total_len == 0
    assert c.match_prefix(A).host_len == 20


def test_insert_over_host_only_node_restores_device_copy():
    c = make("write_through")
    c.insert(A)
    c.ack_transfers()
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
    assert HostTier.from_ratio(1000, 2.0).host_capacity == 2001  # + one padding page
    assert HostTier.from_ratio(1000, 2.0, page_size=16).host_capacity == 2000 // 16 * 16 + 16


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
            + ["evict", "evict", "evict", "evict_host", "serve", "serve", "load", "ack", "pin", "unpin"]
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
    locks, pins, seen = [], [], [[]]
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
            loaded = c.load_back(m, available=lambda n=n: 30 + n - c.device_size())
            assert loaded in (0, m.host_len)
        elif kind == "ack":
            c.ack_transfers()
        elif kind == "pin":
            node = c.match_prefix(toks).last_host_node
            if c.inc_host_lock_ref(node):
                pins.append(node)
        elif kind == "unpin" and pins:
            c.dec_host_lock_ref(pins.pop(n % len(pins)))
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


# --- the host tier as SGLang 0.5.23 runs it (issue 15): one test per behaviour --------------------------
P = list(range(500, 510))  # 10 tokens


def _node(c, toks):
    return c.match_prefix(toks).last_host_node


def test_write_through_backs_up_unbacked_ancestors_first():
    """unified_tree_core._build_backup_kv_action: the chain of unbacked ancestors, parents first."""
    c = make("write_through", capacity=12)
    c.insert(B)  # backed up: the host pool is full
    c.insert(P)  # its backup finds no room (B is still on the device): P stays unbacked
    c.ack_transfers()
    assert not _node(c, P).host
    c.evict(12)  # B (least recent) goes to host-only: now a host leaf
    c.insert(P + C, inserted_len=len(P))  # the new leaf C is hit: back up P first, then C
    assert _node(c, P).host  # P took B's host slots
    assert not _node(c, P + C).host  # then C found no room: the chain stopped there
    assert c.match_prefix(B).total_len == 0
    c.verify()


def test_write_through_chain_stops_at_first_failure():
    """_execute_and_commit_kv_backup returns at the first failed copy: the child is not backed up even
    though it alone would fit, so the host tier never holds a child without its parent."""
    c = make("write_through", capacity=17)
    c.insert(B)  # 12 of 17
    c.insert(P)  # needs 10, 5 free, nothing host-evictable: unbacked
    c.insert(P + C, inserted_len=len(P))  # chain [P, C]: P fails, C (5, would fit) is not tried
    assert not _node(c, P).host and not _node(c, P + C).host
    assert c.host.host_used() == 12


def test_backup_locks_path_until_acknowledged():
    c = make("write_through")
    c.insert(P + A)
    assert c.protected_size() == 30 and c.evictable_size() == 0
    assert c.pending_transfers() == (1, 0)
    assert c.evict(30) == 0  # the device->host copy is still reading these slots
    m = c.match_prefix(P + [1])  # a split of the in-flight node keeps both halves pending
    assert m.device_len == 10
    assert c.ack_transfers() == (1, 0)
    assert c.protected_size() == 0 and c.evictable_size() == 30
    c.verify()
    assert c.evict(30) == 30 and c.host_size() == 30


def test_load_back_refused_beyond_mem_quota():
    c = make("write_through")
    c.insert(A)
    c.ack_transfers()
    c.evict(20)
    m = c.match_prefix(A)
    assert c.load_back(m, mem_quota=19) == 0 and c.stats.load_back_refused == 1
    assert c.protected_size() == 0 and c.device_size() == 0  # the refused load released its locks
    assert c.load_back(m, mem_quota=20) == 20


def test_load_back_evicts_for_itself_with_its_path_locked():
    """UnifiedRadixCache._load_back_transfers: evict_for_alloc(shortfall) while the path is locked;
    refused when the room is still not there."""
    c = make("write_through")
    c.insert(P)
    c.insert(P + A)  # P then A under it
    c.ack_transfers()
    c.evict(20)  # A goes host-only; P stays on the device
    c.insert(B)
    c.ack_transfers()
    pool = 24  # P (10) + B (12) on device, 2 free: A needs 18 more
    m = c.match_prefix(P + A)
    assert (m.device_len, m.host_len) == (10, 20)
    assert c.load_back(m, available=lambda: pool - c.device_size()) == 0  # B alone cannot make room
    assert c.match_prefix(P).device_len == 10  # P (on the locked path) was not evicted
    assert c.stats.load_back_refused == 1
    pool = 34
    m = c.match_prefix(P + A)
    assert c.load_back(m, available=lambda: pool - c.device_size()) == 20
    assert c.match_prefix(B).device_len == 0 and c.match_prefix(P + A).device_len == 30
    assert c.protected_size() == 30  # held until the load is acknowledged
    c.ack_transfers()
    assert c.protected_size() == 0
    c.verify()


def test_load_back_overlaps_the_forward_layer_by_layer():
    from harness.sim.timing import get_profile

    card = get_profile("l4-8b")
    parts = [(2048, 0)]
    fwd = card.batch_prefill_time(parts)
    load = card.load_back_time(4096)
    both = card.prefill_with_load_back(parts, 4096)
    assert max(fwd, load) < both < fwd + load
    assert both == pytest.approx(max(fwd + load / card.num_layers, load + fwd / card.num_layers))
    assert card.prefill_with_load_back(parts, 0) == fwd


def _pinned_child_setup():
    c = make("write_back", capacity=5)
    c.insert(P + C)
    c.insert(P + B[:5])  # P, then two 5-token leaves
    assert c.evict(5) == 5  # the least recent leaf is written back (5 of 5 host slots)
    host_child = next(n for n in c.root.children[P[0]].children.values() if not n.dev)
    return c, host_child


def test_write_back_drop_declines_while_subtree_locked():
    """drop_subtree_no_host declines while anything in the subtree is locked or in flight: the leaf stays."""
    c, x = _pinned_child_setup()
    assert c.inc_host_lock_ref(x)
    assert c.evict(100) == 5  # the other leaf is dropped (no room); P's drop is declined
    assert c.stats.drop_declined == 1
    assert c.match_prefix(P).device_len == 10 and x.host
    c.verify()
    c.dec_host_lock_ref(x)
    assert c.evict(100) == 10  # now P and its host-only child go
    assert c.device_size() == 0 and c.host_size() == 0
    c.verify()


def test_write_back_reclaims_host_duplicates_first():
    """_reclaim_full_host_duplicates: under write-back, host copies of device-resident nodes go first."""
    for reclaim in (True, False):
        c = make("write_back", capacity=20)
        c.host.reclaim_duplicates = reclaim
        c.insert(A)
        c.evict(20)  # A written back: the host pool is full
        c.insert(B)
        m = c.match_prefix(A)
        assert c.load_back(m) == 20
        c.ack_transfers()  # A is now on both tiers: a duplicate
        assert c.evict(12) == 12  # B is least recent: its copy needs host room
        if reclaim:
            assert c.stats.reclaimed_tokens == 20 and c.match_prefix(B).host_len == 12
            assert not _node(c, A).host and c.match_prefix(A).device_len == 20
        else:
            assert c.stats.dropped_tokens == 12 and c.match_prefix(B).total_len == 0
            assert _node(c, A).host
        c.verify()


def test_host_pool_size_as_sglang_sizes_it():
    from harness.sim.hicache import host_pool_tokens

    kv = 131_072
    assert host_pool_tokens(1000, ratio=2.0) == (2001, 2.0)  # whole pages + one padding page
    assert host_pool_tokens(1000, ratio=2.0, page_size=64)[0] == 2000 // 64 * 64 + 64
    assert host_pool_tokens(1000, size_gb=1.0, kv_bytes_per_token=kv)[0] == int(1e9 // kv) + 1
    # default ratio with plenty of host memory: 2.0
    assert host_pool_tokens(100_000, kv_bytes_per_token=kv, host_memory_bytes=512 * 2**30)[1] == 2.0
    # 64 GiB host, 12.2 GiB device pool: (64 - 10) GiB x 0.8 x 0.95 / 12.2 GiB = 3.36 -> 2.0; 32 GiB: 1.37
    tokens, ratio = host_pool_tokens(100_000, kv_bytes_per_token=kv, host_memory_bytes=32 * 2**30)
    assert ratio == pytest.approx(22 * 2**30 * 0.8 * 0.95 / (100_000 * kv))
    assert tokens == int(100_000 * ratio) + 1
    # an explicit ratio is honoured even when it does not fit
    assert host_pool_tokens(100_000, ratio=4.0, kv_bytes_per_token=kv, host_memory_bytes=32 * 2**30)[1] == 4.0
    with pytest.raises(ValueError, match="10 GiB reserve"):
        host_pool_tokens(1000, kv_bytes_per_token=kv, host_memory_bytes=8 * 2**30)
