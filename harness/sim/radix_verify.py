"""The radix tree's invariant checker: recount a tree from its nodes and compare with its books.

One function over a RadixCache's internals (sizes, leaf flags, heap entries, host-tier sets), apart from
the tree's operations so radix.py holds only what the cache does; tests call it through
RadixCache.verify().
"""

from __future__ import annotations


def verify_tree(t) -> None:
    """Raise AssertionError on the first broken invariant of the RadixCache `t` (tests and debugging)."""
    evictable = protected = host_used = leaves = 0
    host_leaves = set()
    t._flush()
    valid = {}
    for entry in t._heap:
        n = entry[-1]
        if entry[-2] == n.ver:
            valid[id(n)] = entry[:-3]
    stack = [t.root]
    while stack:
        n = stack.pop()
        ndc = 0
        for ck, ch in n.children.items():
            assert ch.parent is n and ck == t._child_key(ch.key, 0), f"bad child link {ch!r}"
            assert ch.lock_ref <= n.lock_ref or n is t.root, f"child locked more than parent {ch!r}"
            ndc += ch.dev
            stack.append(ch)
        assert n.ndc == ndc, f"ndc {n.ndc} != {ndc} at {n!r}"
        if n is t.root:
            continue
        ln = len(n.key)
        assert ln > 0 and ln % t.page_size == 0, f"bad key length {n!r}"
        assert n.dev or n.host, f"node on neither tier {n!r}"
        assert not n.dev or n.parent is t.root or n.parent.dev, f"device node under host-only {n!r}"
        if n.dev:
            if n.lock_ref:
                protected += ln
            else:
                evictable += ln
        host_used += ln if n.host else 0
        evl = n.dev and n.lock_ref == 0 and n.ndc == 0
        assert n.evl == evl, f"evl={n.evl} but should be {evl}: {n!r}"
        if evl:
            leaves += 1
            assert valid.get(id(n)) == t._key(n), f"evictable leaf without a current heap entry {n!r}"
        if t.host is not None:
            assert n.hleaf == t._is_host_leaf(n), f"hleaf={n.hleaf} wrong: {n!r}"
            if n.hleaf:
                host_leaves.add(n)
    assert (evictable, protected) == (t._evictable, t._protected), (
        f"sizes {(t._evictable, t._protected)} != tree {(evictable, protected)}"
    )
    assert leaves == t._n_leaves, f"leaf count {t._n_leaves} != {leaves}"
    assert host_used == t._host_size, f"host size {t._host_size} != tree {host_used}"
    if t.host is not None:
        assert t.host.used == host_used <= t.host.capacity, "host pool accounting"
        assert host_leaves == t._host_leaves, "host leaf set out of date"
