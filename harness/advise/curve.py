"""The hit rate at every pool size in one pass: LRU stack distances over the pages of SGLang's radix tree.

Why one pass is exact: replayed one request at a time, LRU on the tree evicts leaves oldest stamp first
(SGLang 0.5.23 mem_cache/radix_cache.py `RadixCache.evict`, a heap of `evictable_leaves`). A page's
parent is touched by every request that touches the page, so the eviction order of pages is by the last
request that touched them, the deepest first among one request's pages. With `--mode exact` (evict
exactly the shortfall, splitting the last leaf) the device pool of C pages therefore always holds the
top C pages of one stack, whatever C is (Mattson's inclusion property), and a request hits every prompt
page whose stack rank is at most C. The rank is counted with a Fenwick tree over last-touch stamps:
O(N log N) over N touched pages. See docs/advise.md for what else the exact replay does that this pass
does not (the split-off tail of a partly matched node is re-stamped).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from harness.whatif.trace import Trace, TraceRequest

_SPAN = 1 << 64
INF = np.iinfo(np.int64).max  # the rank of a page never seen before: a miss at every size


def cached_key(r: TraceRequest) -> tuple[int, ...]:
    """What a finished request leaves in the tree: its prompt and its answer but the last token."""
    return r.key + r.output_key[:-1] if r.output_key else r.key


def page_path(ids: dict, key: tuple[int, ...]) -> list[int]:
    """A key's pages as ids of the prefix they end (a page is its whole prefix, as a tree node is).

    The trie's edges are keyed by one int, (parent id + 1) x 2^64 + element, cheaper than a tuple; an
    element outside [0, 2^64) gets a tuple key, which no int equals."""
    path: list[int] = []
    parent = 0
    get = ids.get
    for e in key:
        k: int | tuple[int, int] = parent + e if 0 <= e < _SPAN else (parent, e)
        pid = get(k)
        if pid is None:
            pid = ids[k] = len(ids)
        path.append(pid)
        parent = (pid + 1) * _SPAN
    return path


@dataclass(frozen=True)
class StackDistances:
    """Per prompt page that could hit: its stack rank before the request, and the tokens it is worth."""

    rank: np.ndarray  # int64, sorted ascending; INF for cold pages
    cum_tokens: np.ndarray  # int64, tokens of all pages with rank <= rank[i]
    prompt_tokens: int
    distinct_pages: int  # pages ever cached (prompts and answers)
    longest_request: int  # the most pages one request holds at once (prompt + cached answer)
    # per request, the prompt pages an unbounded pool hits: harness.whatif.replay.ideal_hits at page size 1
    # (a page is in the unbounded stack once any earlier request cached its whole prefix)
    request_hits: list[int] = field(default_factory=list, repr=False)
    # every request's pages (page_path ids) end to end, and where each request's end: the working set
    # walks the same paths, and 8 bytes a page is cheaper than building them again
    pages: array = field(default_factory=lambda: array("q"), repr=False)
    page_ends: array = field(default_factory=lambda: array("q"), repr=False)

    def hit_tokens(self, pool: int) -> int:
        """Tokens an exact-mode LRU pool of `pool` units hits over the whole input."""
        i = int(np.searchsorted(self.rank, pool, side="right"))
        return int(self.cum_tokens[i - 1]) if i else 0

    def hit_rate(self, pool: int) -> float:
        return self.hit_tokens(pool) / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def ceiling(self) -> float:
        """The hit rate of an unbounded pool."""
        return self.hit_rate(int(INF) - 1)

    def pool_for(self, rate: float) -> int:
        """The smallest pool whose hit rate reaches `rate` (0 when nothing does)."""
        need = rate * self.prompt_tokens
        i = int(np.searchsorted(self.cum_tokens, need, side="left"))
        return int(self.rank[i]) if i < self.rank.size and self.rank[i] < INF else 0

    @property
    def knee_pool(self) -> int:
        """The smallest pool that reaches the ceiling (every reuse fits)."""
        finite = self.rank[self.rank < INF]
        return int(finite[-1]) if finite.size else 0


class _Stack:
    """The LRU stack of pages, kept per toucher rather than per page.

    The pages a request (or a re-stamped tail, below) was the last to touch lie together in the stack,
    root-most first, and are always the deepest part of its path: a later request that touches one
    touches its ancestors too. So a toucher needs one count (its pages still in the stack) and one offset
    (how many of its root-most path pages later touchers took); a Fenwick tree over touchers, in time
    order, sums the counts above one. A page's rank is that sum plus its place in its toucher's run.
    """

    def __init__(self, slots: int) -> None:
        self.owner: list[int] = []  # page -> its last toucher (-1: never touched)
        self.taken = [0] * slots
        self.tree = [0] * (slots + 1)
        self.slots = slots
        self.size = 0  # pages in the stack
        self.next_slot = 0

    def _add(self, slot: int, delta: int) -> None:
        tree, x, n = self.tree, slot + 1, self.slots
        while x <= n:
            tree[x] += delta
            x += x & -x

    def runs(self, path: list[int]) -> list[tuple[int, int, int]]:
        """(owner, first index, end index) along the path's known pages (owners only get older deeper)."""
        owner = self.owner
        out = []
        i, k = 0, len(path)
        while i < k:
            q = owner[path[i]]
            if q < 0:
                break
            j = i + 1
            while j < k and owner[path[j]] == q:
                j += 1
            out.append((q, i, j))
            i = j
        return out

    def ranks(self, runs: list[tuple[int, int, int]], limit: int, out: array) -> int:
        """Append the ranks of the path's first `limit` pages that are in the stack; returns how many."""
        tree, size, taken = self.tree, self.size, self.taken
        got = 0
        for q, i, j in runs:
            if i >= limit:
                break
            below = 0  # pages of touchers up to q
            x = q + 1
            while x > 0:
                below += tree[x]
                x &= x - 1
            base = size - below + 1 - taken[q]  # the rank q's index-0 page would have
            stop = min(j, limit)
            out.extend(range(base + i, base + stop))
            got = stop
        return got

    def touch(self, path: list[int], runs: list[tuple[int, int, int]]) -> None:
        """The path moves to the top, root-most page first."""
        for q, i, j in runs:
            self._add(q, i - j)
            self.size -= j - i
            self.taken[q] = j
        slot = self.next_slot
        self.next_slot += 1
        owner = self.owner
        for pid in path:
            owner[pid] = slot
        self._add(slot, len(path))
        self.size += len(path)


def stack_distances(trace: Trace) -> StackDistances:
    """One pass over the trace: each request's prompt pages ranked, then its prompt and answer touched."""
    tokens_kind = trace.kind == "tokens"
    unit = trace.unit
    stack = _Stack(len(trace.requests))
    ids: dict = {}
    ranks = array("q")  # 8 bytes a page, not a Python int's 36: a million requests' pages fit
    weights = array("q")
    longest = 0
    prompt_tokens = 0
    hits: list[int] = []
    pages, ends = array("q"), array("q")
    for r in trace.requests:
        prompt_tokens += r.tokens
        path = page_path(ids, cached_key(r))
        pages.extend(path)
        ends.append(len(pages))
        k = len(path)
        longest = max(longest, k)
        if len(stack.owner) < len(ids):
            stack.owner.extend([-1] * (len(ids) - len(stack.owner)))
        # all but the last prompt token can hit for token inputs (the scheduler computes it for the
        # logits); every block for block traces
        limit = max(len(r.key) - 1 if tokens_kind else len(r.key), 0)
        runs = stack.runs(path)
        hit = stack.ranks(runs, limit, ranks)
        hits.append(hit)
        if limit > hit:
            ranks.extend([int(INF)] * (limit - hit))
        weights.extend(_weights(limit, unit, r.tokens))
        stack.touch(path, runs)
    rank = np.frombuffer(ranks, dtype=np.int64) if ranks else np.zeros(0, np.int64)
    w_arr = np.frombuffer(weights, dtype=np.int64) if weights else np.zeros(0, np.int64)
    order = np.argsort(rank, kind="stable")
    rank = rank[order]
    cum = np.cumsum(w_arr[order])
    finite = rank < INF
    cum = np.where(finite, cum, cum[finite][-1] if finite.any() else 0)
    return StackDistances(rank, cum, prompt_tokens, len(ids), longest, hits, pages, ends)


def _weights(limit: int, unit: int, tokens: int) -> list[int]:
    """Tokens each of the first `limit` pages is worth: a block's, the last one its real length (0 past
    the prompt's end)."""
    if unit == 1:
        return [1] * limit
    full = min(tokens // unit, limit)
    if full == limit:
        return [unit] * limit
    return [unit] * full + [tokens - full * unit] + [0] * (limit - full - 1)


@dataclass(frozen=True)
class CurvePoint:
    pool: int
    hit_rate: float
    replayed: float | None = None  # the exact replay's (lru, --mode exact, one at a time) at a named size


def curve_points(
    sd: StackDistances, must: list[int], step: float = 0.002, max_points: int = 400
) -> list[CurvePoint]:
    """The sizes where the hit rate moves by at least `step` (enough to draw), plus every size in `must`."""
    finite = sd.rank < INF
    rank = sd.rank[finite]
    cum = sd.cum_tokens[finite]
    pools: set[int] = {int(p) for p in must if p > 0}
    if rank.size and sd.prompt_tokens:
        # the last index of each distinct rank: the curve's value just at that size
        ends = np.flatnonzero(np.r_[rank[1:] != rank[:-1], True])
        rates = cum[ends] / sd.prompt_tokens
        kept, level = [], -1.0
        for i, rate in zip(ends, rates, strict=True):
            if rate - level >= step:
                kept.append(int(rank[i]))
                level = float(rate)
        if len(kept) > max_points:
            kept = kept[:: len(kept) // max_points + 1]
        pools.update(kept)
        pools.add(int(rank[-1]))
    return [CurvePoint(p, sd.hit_rate(p)) for p in sorted(pools)]
