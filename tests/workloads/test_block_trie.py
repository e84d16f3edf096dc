"""Trace positions over the block tree in compact pages (issue 29): the same positions as a plain dict."""

from __future__ import annotations

import random

from harness.workloads.block_trie import Edges, Positions, block_positions


def dict_positions(requests: list[tuple[int, ...]]) -> list[int]:
    """The tree walked with a dict of (parent, block) -> node: what the pages must reproduce."""
    nodes: dict[tuple[int, int], int] = {}
    counts = [0]
    out = []
    for ids in requests:
        node, pos, matched = 0, 0, True
        for h in ids:
            nxt = nodes.get((node, h))
            if nxt is None:
                nxt = nodes[(node, h)] = len(counts)
                counts.append(1)
                matched = False
            else:
                if matched:
                    pos = counts[nxt]
                counts[nxt] += 1
            node = nxt
        out.append(0 if pos <= 0 else 1 << (pos.bit_length() - 1))
    return out


def random_trace(rng: random.Random, n: int) -> list[tuple[int, ...]]:
    """Requests that extend earlier ones' prefixes, with small ids, ids past 2^40 and ids past 2^63."""
    reqs: list[tuple[int, ...]] = []
    for _ in range(n):
        base = list(rng.choice(reqs)) if reqs and rng.random() < 0.7 else []
        base = base[: rng.randrange(len(base) + 1)]
        for _ in range(rng.randrange(0 if base else 1, 4)):
            kind = rng.random()
            base.append(
                rng.randrange(1 << 70) if kind < 0.05 else rng.randrange(1 << 41 if kind < 0.1 else 50)
            )
        reqs.append(tuple(base))
    return reqs


def test_positions_match_a_plain_dict_through_page_splits() -> None:
    rng = random.Random(29)
    for page in (2, 3, 16, 1024):
        reqs = random_trace(rng, 2000)
        assert list(block_positions(iter(reqs), page)) == dict_positions(reqs)


def test_pages_split_and_stay_sorted() -> None:
    edges = Edges(page=4)
    rng = random.Random(1)
    added = {}
    for node, (parent, block) in enumerate({(rng.randrange(30), rng.randrange(1000)) for _ in range(500)}, 1):
        assert edges.get(parent, block) is None
        edges.add(parent, block, node)
        added[(parent, block)] = node
    assert len(edges.keys) > 50  # split many times
    flat = [k for page in edges.keys for k in page]
    assert flat == sorted(flat) and all(len(p) <= 4 for p in edges.keys)
    assert all(edges.get(p, b) == n for (p, b), n in added.items())
    assert edges.get(31, 5) is None


def test_positions_read_back_as_powers_of_two() -> None:
    pos = Positions()
    for v in (0, 1, 2, 4, 1 << 20):
        pos.append(v)
    assert list(pos) == [0, 1, 2, 4, 1 << 20] and pos[4] == 1 << 20 and len(pos) == 5
    assert pos.exps.itemsize == 1
