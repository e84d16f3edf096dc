"""A trace's request positions over its prefix tree of block ids, in a few bytes a block.

Preparing a replayed trace walks every request's block ids through a tree of distinct block prefixes
(see harness.workloads.traces). A dict of Python ints costs ~130 bytes a distinct block, which made a
million-request trace's peak RSS 1.55x a 10,000-request one's; here the tree's edges live in sorted
pages of arrays (12 bytes an edge, 4 more for its count) and each position is kept as one byte (its
power of two).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

_KEY_SPAN = 1 << 40  # an edge's key: parent node x 2^40 + block id
_KEY_MAX = (1 << 63) - 1  # what array('q') holds; larger keys (huge ids or trees) stay in a dict
PAGE = 1024  # edges a page holds before it splits in two (a smaller page: less to move, more pages)


class Edges:
    """(parent node, block id) -> child node in sorted pages of two arrays (keys, nodes).

    An insert moves at most a page (C memmove), so nothing is ever copied whole and the only slack is
    the pages' free room (half a page at worst, after a split)."""

    def __init__(self, page: int = PAGE) -> None:
        self.page = page
        self.firsts = array("q", [-1])  # each page's smallest key (page 0 takes everything below)
        self.keys = [array("q")]
        self.nodes = [array("I")]
        self.wide: dict[tuple[int, int], int] = {}  # keys past int64: kept as they come

    def get(self, parent: int, block: int) -> int | None:
        if block >= _KEY_SPAN or parent > _KEY_MAX >> 40:
            return self.wide.get((parent, block))
        key = parent * _KEY_SPAN + block
        p = bisect_right(self.firsts, key) - 1
        keys = self.keys[p]
        i = bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            return self.nodes[p][i]
        return None

    def child(self, parent: int, block: int, node: int) -> int | None:
        """The child under (parent, block), or None after making it `node` (one search for both)."""
        if block >= _KEY_SPAN or parent > _KEY_MAX >> 40:
            hit = self.wide.get((parent, block))
            if hit is None:
                self.wide[(parent, block)] = node
            return hit
        key = parent * _KEY_SPAN + block
        p = bisect_right(self.firsts, key) - 1
        keys = self.keys[p]
        i = bisect_left(keys, key)
        if i < len(keys) and keys[i] == key:
            return self.nodes[p][i]
        nodes = self.nodes[p]
        keys.insert(i, key)
        nodes.insert(i, node)
        if len(keys) > self.page:
            self._split(p)
        return None

    def add(self, parent: int, block: int, node: int) -> None:
        """A new edge (get returned None for it)."""
        if block >= _KEY_SPAN or parent > _KEY_MAX >> 40:
            self.wide[(parent, block)] = node
            return
        key = parent * _KEY_SPAN + block
        p = bisect_right(self.firsts, key) - 1
        keys, nodes = self.keys[p], self.nodes[p]
        i = bisect_left(keys, key)
        keys.insert(i, key)
        nodes.insert(i, node)
        if len(keys) > self.page:
            self._split(p)

    def _split(self, p: int) -> None:
        keys, nodes = self.keys[p], self.nodes[p]
        half = len(keys) // 2
        self.keys.insert(p + 1, keys[half:])
        self.nodes.insert(p + 1, nodes[half:])
        self.firsts.insert(p + 1, keys[half])
        del keys[half:], nodes[half:]


class Positions:
    """One position per request, stored as its bucket's exponent in a byte (0, 1, 2, 4, ... read back)."""

    def __init__(self) -> None:
        self.exps = array("B")

    def append(self, pos: int) -> None:
        self.exps.append(pos.bit_length())  # pos is 0 or a power of two

    def __getitem__(self, i: int) -> int:
        e = self.exps[i]
        return 1 << (e - 1) if e else 0

    def __len__(self) -> int:
        return len(self.exps)

    def __iter__(self) -> Iterator[int]:
        return (1 << (e - 1) if e else 0 for e in self.exps)


def block_positions(requests: Iterable[tuple[int, ...]], page: int = PAGE) -> Positions:
    """Each request's position: earlier requests through the deepest block prefix it shares, bucketed to
    the largest power of two <= that count (harness.workloads.traces explains why)."""
    edges = Edges(page)
    child = edges.child
    counts = array("I", [0])  # requests through each node so far; node 0 is the root
    out = Positions()
    for ids in requests:
        node, pos, matched = 0, 0, True
        for h in ids:
            nxt = child(node, h, len(counts))
            if nxt is None:
                nxt = len(counts)
                counts.append(1)
                matched = False
            else:
                if matched:
                    pos = counts[nxt]
                counts[nxt] += 1
            node = nxt
        out.append(0 if pos <= 0 else 1 << (pos.bit_length() - 1))
    return out
