"""The sim's radix tree: SGLang 0.5.23's eviction orders, quirks and invariants."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.sim.radix import RadixCache, serve_request


def counter_clock():
    c = itertools.count(1)
    return lambda: float(next(c))


def make(policy="lru", **kw) -> RadixCache:
    return RadixCache(policy=policy, clock=counter_clock(), **kw)


SEQS = {n: [i * 100 + j for j in range(5)] for i, n in enumerate("ABCD")}


def eviction_order(c: RadixCache) -> str:
    c.evict_log = []
    while c.evictable_size():
        c.evict(1)
    names = {tuple(v): k for k, v in SEQS.items()}
    return "".join(names[k] for k in c.evict_log)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("lru", "DABC"), ("lfu", "DCBA"), ("slru", "DCAB"), ("fifo", "ABCD"), ("mru", "CBAD"), ("filo", "DCBA")],
)
@pytest.mark.parametrize("flavor", ["radix", "unified"])
def test_a_to_d_example(policy, expected, flavor):
    """docs/real-servers.md: A re-inserted 3x, B once, C matched last."""
    c = make(policy, flavor=flavor)
    for n in "ABCD":
        c.insert(SEQS[n])
    for _ in range(3):
        c.insert(SEQS["A"])
    c.insert(SEQS["B"])
    c.match_prefix(SEQS["C"])
    assert eviction_order(c) == expected


def test_priority_evicts_low_priority_first():
    c = make("priority")
    c.insert(SEQS["A"], priority=5)
    c.insert(SEQS["B"], priority=1)
    c.insert(SEQS["C"], priority=3)
    c.insert(SEQS["D"], priority=1)
    assert eviction_order(c) == "BDCA"


def test_hit_count_rises_on_insert_not_match():
    c = make("lfu")
    c.insert([1, 2, 3])
    node = c.root.children[1]
    assert node.hit_count == 1
    c.match_prefix([1, 2, 3])
    assert node.hit_count == 1
    c.insert([1, 2, 3])
    assert node.hit_count == 2
    c.insert([1, 2, 3, 4], inserted_len=3)  # only the new tail counts
    assert node.hit_count == 2


def test_a_chunked_request_counts_each_node_once_over_its_checkpoints():
    """SGLang 0.5.23 counts a checkpoint's insert (chunked prefill) as any insert, past what the request
    inserted before (req.kv.cache_inserted_len): a chunked request counts what one whole insert counts."""
    whole, chunked = make("lfu"), make("lfu")
    for c in (whole, chunked):
        c.insert([1, 2, 3, 4, 5, 6])
    whole.insert([1, 2, 3, 4, 5, 6, 7, 8])
    chunked.insert([1, 2, 3, 4], inserted_len=0)  # first chunk: the shared prefix counts here
    chunked.insert([1, 2, 3, 4, 5, 6, 7, 8], inserted_len=4)  # last: only past the first chunk
    for c in (whole, chunked):  # per token of the path: the chunk boundary splits the chunked tree's node
        assert _path_counts(c, [1, 2, 3, 4, 5, 6, 7, 8]) == [2] * 6 + [1] * 2


def _path_counts(c, seq: list[int]) -> list[int]:
    out, node = [], c.root
    while len(out) < len(seq):
        node = node.children[seq[len(out)]]
        out += [node.hit_count] * len(node.key)
    return out


def test_partial_match_splits_and_stamps_tail():
    c = make("lru", flavor="radix")
    c.insert([1, 2, 3, 4])
    leaf = c.root.children[1]
    created = leaf.creation_time
    m = c.match_prefix([1, 2, 9])
    assert m.device_len == 2
    parent = m.last_device_node
    assert parent.key == (1, 2) and leaf.parent is parent and leaf.key == (3, 4)
    # the tail got the match's stamp though it was not hit; the new parent is fresh (fifo sees it as new)
    assert leaf.last_access_time > created
    assert parent.creation_time > leaf.last_access_time
    assert parent.hit_count == leaf.hit_count


def test_unified_split_keeps_creation_time():
    c = make("lru", flavor="unified")
    c.insert([1, 2, 3, 4])
    leaf = c.root.children[1]
    created, stamped = leaf.creation_time, leaf.last_access_time
    m = c.match_prefix([1, 2, 9])
    parent = m.last_device_node
    assert parent.creation_time == leaf.creation_time == created
    # the split stamps the unmatched tail fresh; the matched path is stamped after it, at the end of the match
    assert stamped < leaf.last_access_time < parent.last_access_time


def test_default_flavor_is_unified_and_tlru_needs_it():
    assert make("lru").flavor == "unified"
    with pytest.raises(ValueError, match="tlru needs the unified tree"):
        make("tlru", flavor="radix", policy_config={"threshold": 8, "next_prompt_estimate": 2})


def test_unified_path_stamps_stay_above_earlier_stamps_whatever_the_clock():
    """UnifiedRadixCache stamps from a counter: a deep path matched now is newer than any leaf touched
    before, even when the caller's clock hands out stamps 1e-9 apart (the engine's virtual clock)."""
    t = [0.0]

    def tiny_steps() -> float:
        t[0] += 1e-9
        return t[0]

    c = RadixCache(policy="lru", clock=tiny_steps)
    deep = [[i, 100 + j] for i in range(8) for j in range(2)]
    path = []
    for pair in deep[:8]:
        path += pair
        c.insert(list(path))  # an 8-level chain of 2-token nodes
    c.insert([99, 1, 2])
    c.match_prefix([99, 1, 2])  # the other leaf is touched first, then the chain
    m = c.match_prefix(path)
    other = c.root.children[99]
    stamps, x = [], m.last_device_node
    while x is not c.root:
        stamps.append(x.last_access_time)
        x = x.parent
    assert len(stamps) == 8 and stamps == sorted(stamps, reverse=True)  # deepest newest
    # with a 1e-9 clock and 1e-5 per level, the chain's upper nodes would look older than `other`; in
    # SGLang (and here) every node of the later match is newer: lfu/slru/priority ties break this way
    assert min(stamps) > other.last_access_time


def test_page_size_truncates_match_and_insert():
    c = make("lru", page_size=4)
    assert c.insert(list(range(10))) == 0
    assert c.device_size() == 8
    assert c.match_prefix(list(range(7))).device_len == 4
    assert c.match_prefix([0, 1, 2, 3, 4, 5, 99, 7]).device_len == 4


def test_whole_node_overshoot_and_exact_mode():
    for mode, expected in (("sglang", 10), ("exact", 3)):
        c = make("lru", mode=mode)
        c.insert(list(range(10)))
        assert c.evict(3) == expected
        assert c.device_size() == 10 - expected


def test_parent_rejoins_heap_when_leaf():
    c = make("lru")
    c.insert([1, 2, 3])
    c.insert([1, 2, 4])  # splits: (1,2) -> (3), (4)
    assert c.evict(1) == 1
    assert c.evict(1) == 1
    assert c.evict(1) == 2  # the parent became a leaf
    assert c.device_size() == 0


def test_locked_nodes_never_evicted():
    c = make("lru")
    c.insert([1, 2, 3])
    c.insert([5, 6])
    m = c.match_prefix([1, 2, 3])
    c.inc_lock_ref(m.last_device_node)
    assert c.protected_size() == 3 and c.evictable_size() == 2
    assert c.evict(100) == 2
    assert c.match_prefix([1, 2, 3]).device_len == 3
    c.dec_lock_ref(m.last_device_node)
    assert c.evict(100) == 3


@pytest.mark.parametrize(
    ("policy", "config", "message"),
    [
        ("slru", {"bogus": 1}, "unexpected keyword argument 'bogus'"),
        ("lru", {"protected_threshold": 2}, "unexpected keyword argument"),
        ("tlru", {"threshold": 4, "next_prompt_estimate": 8}, "greater than 'next_prompt_estimate'"),
        ("tlru", {}, "greater than"),
        ("lfru", None, "Unknown eviction policy: lfru"),
    ],
)
def test_bad_policy_config(policy, config, message):
    with pytest.raises(ValueError, match=message):
        RadixCache(policy=policy, policy_config=config)


def test_tlru_drains_tel_safe_tail_first():
    # threshold 6, estimate 0: each branch may lose 6 tokens of its tail before plain LRU resumes
    c = make("tlru", policy_config={"threshold": 6, "next_prompt_estimate": 0})
    long_ = [1, *range(10, 20)]
    short = [2, *range(30, 37)]
    c.insert(long_)
    c.insert(short)  # 8 tokens in one node: nothing of it is TEL-safe
    c.insert([1, *range(10, 15), 99, 98, 97])  # the long branch forks after 6 tokens
    c.evict_log = []
    while c.evictable_size():
        c.evict(1)
    assert c.evict_log == [tuple(range(15, 20)), (99, 98, 97), tuple(short), (1, *range(10, 15))]
    lru = make("lru")
    for k in (long_, short, [1, *range(10, 15), 99, 98, 97]):
        lru.insert(k)
    lru.evict_log = []
    lru.evict(1)
    assert lru.evict_log == [tuple(short)]


def test_serve_request_counts_hits_and_fits_pool():
    c = make("lru")
    assert serve_request(c, list(range(8)), capacity=10) == (0, 0)
    assert serve_request(c, list(range(8)) + [50, 51], capacity=10) == (8, 0)
    assert c.device_size() <= 10
    serve_request(c, [70, 71, 72, 73, 74], capacity=10)
    assert c.device_size() <= 10


ops = st.lists(
    st.tuples(
        st.sampled_from(["insert", "match", "lock", "unlock", "evict"]),
        st.lists(st.integers(0, 5), min_size=0, max_size=12),
        st.integers(1, 15),
    ),
    max_size=60,
)


def _walk(c: RadixCache):
    stack = [c.root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children.values())


@settings(max_examples=80, deadline=None)
@given(
    ops,
    st.sampled_from(["lru", "lfu", "slru", "fifo", "mru", "priority", "tlru"]),
    st.sampled_from([1, 2]),
    st.sampled_from(["sglang", "exact"]),
    st.sampled_from(["radix", "unified"]),
)
def test_invariants_under_random_operations(seq, policy, page, mode, flavor):
    if policy == "tlru":
        c = make(policy, page_size=page, mode=mode, policy_config={"threshold": 6, "next_prompt_estimate": 2})
    else:
        c = make(policy, page_size=page, mode=mode, flavor=flavor)
    locks = []
    for kind, toks, n in seq:
        if kind == "insert":
            c.insert(toks, priority=n % 3)
        elif kind == "match":
            m = c.match_prefix(toks)
            assert m.device_len % page == 0 and m.device_len <= len(toks)
        elif kind == "lock":
            m = c.match_prefix(toks)
            c.inc_lock_ref(m.last_device_node)
            locks.append((m.last_device_node, m.device_len, toks[: m.device_len]))
        elif kind == "unlock" and locks:
            node, _, _ = locks.pop(n % len(locks))
            c.dec_lock_ref(node)
        elif kind == "evict":
            before = c.evictable_size()
            freed = c.evict(n)
            assert freed <= before
            if mode == "exact":
                assert freed == min(before, -(-n // page) * page) or freed == before
        c.verify()
        nodes = list(_walk(c))
        total = sum(len(x.key) for x in nodes)
        assert c.evictable_size() + c.protected_size() == total == c.device_size()
        assert c.protected_size() == sum(len(x.key) for x in nodes if x.lock_ref > 0 and x is not c.root)
        for x in nodes:
            if x is not c.root:
                assert len(x.key) % page == 0 and len(x.key) > 0
        for _, length, prefix in locks:  # a locked prefix is never evicted
            assert c.match_prefix(prefix).device_len >= length


class NaiveEvict(RadixCache):
    """SGLang's way: rebuild the heap from every evictable leaf on each evict call."""

    def evict(self, num_tokens: int) -> int:
        import heapq

        heap = [(*self._key(n), id(n), n) for n in _walk(self) if n.evl]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            x = heapq.heappop(heap)[-1]
            if self.evict_log is not None:
                self.evict_log.append(x.key)
            parent = x.parent
            freed += self._evict_leaf(x)
            if parent.evl:
                heapq.heappush(heap, (*self._key(parent), id(parent), parent))
        return freed


@settings(max_examples=60, deadline=None)
@given(
    ops, st.sampled_from(["lru", "lfu", "slru", "fifo", "mru", "filo", "priority"]), st.sampled_from([1, 2])
)
def test_lazy_heap_evicts_in_the_same_order_as_a_rebuilt_heap(seq, policy, page):
    fast, slow = (
        make(policy, page_size=page),
        NaiveEvict(policy=policy, page_size=page, clock=counter_clock()),
    )
    fast.evict_log, slow.evict_log = [], []
    locks = []
    for kind, toks, n in seq:
        for c in (fast, slow):
            if kind == "insert":
                c.insert(toks, priority=n % 3)
            elif kind == "match":
                c.match_prefix(toks)
            elif kind == "lock":
                m = c.match_prefix(toks)
                c.inc_lock_ref(m.last_device_node)
                locks.append((c, m.last_device_node))
            elif kind == "unlock":
                mine = [i for i, (owner, _) in enumerate(locks) if owner is c]
                if mine:
                    c.dec_lock_ref(locks.pop(mine[n % len(mine)])[1])
            elif kind == "evict":
                c.evict(n)
        assert fast.evict_log == slow.evict_log
        assert fast.device_size() == slow.device_size()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=20), max_size=40),
    st.sampled_from(["lru", "lfu", "slru", "fifo", "mru", "priority"]),
    st.sampled_from(["write_through", "write_through_selective", "write_back"]),
    st.integers(0, 8) | st.integers(9, 30),
    st.sampled_from(["radix", "unified"]),
)
def test_lazy_heap_matches_rebuilt_heap_with_a_host_tier(keys, policy, write_policy, host_cap, flavor):
    from harness.sim.hicache import HostTier

    fast = make(policy, host=HostTier(host_cap, write_policy=write_policy), flavor=flavor)
    slow = NaiveEvict(
        policy=policy,
        clock=counter_clock(),
        host=HostTier(host_cap, write_policy=write_policy),
        flavor=flavor,
    )
    fast.evict_log, slow.evict_log = [], []
    for k in keys:
        assert serve_request(fast, k, 25) == serve_request(slow, k, 25)
        assert fast.evict_log == slow.evict_log
        assert fast.host.host_used() == slow.host.host_used()
        fast.verify()
