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

from dataclasses import dataclass

import numpy as np

from harness.whatif.trace import Trace, TraceRequest

INF = np.iinfo(np.int64).max  # the rank of a page never seen before: a miss at every size


def cached_key(r: TraceRequest) -> tuple[int, ...]:
    """What a finished request leaves in the tree: its prompt and its answer but the last token."""
    return r.key + r.output_key[:-1] if r.output_key else r.key


def page_path(ids: dict[tuple[int, int], int], key: tuple[int, ...]) -> list[int]:
    """A key's pages as ids of the prefix they end (a page is its whole prefix, as a tree node is)."""
    path: list[int] = []
    parent = -1
    for e in key:
        k = (parent, e)
        pid = ids.get(k)
        if pid is None:
            pid = ids[k] = len(ids)
        path.append(pid)
        parent = pid
    return path


@dataclass(frozen=True)
class StackDistances:
    """Per prompt page that could hit: its stack rank before the request, and the tokens it is worth."""

    rank: np.ndarray  # int64, sorted ascending; INF for cold pages
    cum_tokens: np.ndarray  # int64, tokens of all pages with rank <= rank[i]
    prompt_tokens: int
    distinct_pages: int  # pages ever cached (prompts and answers)
    longest_request: int  # the most pages one request holds at once (prompt + cached answer)

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

    @property
    def knee_pool(self) -> int:
        """The smallest pool that reaches the ceiling (every reuse fits)."""
        finite = self.rank[self.rank < INF]
        return int(finite[-1]) if finite.size else 0


def stack_distances(trace: Trace) -> StackDistances:
    """One pass over the trace: each request's prompt pages ranked, then its prompt and answer touched."""
    tokens_kind = trace.kind == "tokens"
    unit = trace.unit
    ids: dict[tuple[int, int], int] = {}
    last: list[int] = []  # page id -> its latest stamp (1-based Fenwick index)
    total_pages = sum(len(r.key) + max(len(r.output_key) - 1, 0) for r in trace.requests)
    size = total_pages + 1
    tree = [0] * (size + 1)
    markers = 0
    stamp = 0
    ranks: list[int] = []
    weights: list[int] = []
    longest = 0
    prompt_tokens = 0
    for r in trace.requests:
        prompt_tokens += r.tokens
        path = page_path(ids, cached_key(r))
        longest = max(longest, len(path))
        while len(last) < len(ids):
            last.append(0)
        # rank the pages that can hit: all but the last prompt token for token inputs (the scheduler
        # computes it for the logits), every block for block traces
        limit = len(r.key) - 1 if tokens_kind else len(r.key)
        for i in range(max(limit, 0)):
            s = last[path[i]]
            w = min((i + 1) * unit, r.tokens) - min(i * unit, r.tokens)
            if s == 0:
                ranks.append(int(INF))
                weights.append(w)
                for j in range(i + 1, limit):
                    ranks.append(int(INF))
                    weights.append(min((j + 1) * unit, r.tokens) - min(j * unit, r.tokens))
                break
            below = 0  # markers at stamps <= s
            x = s
            while x > 0:
                below += tree[x]
                x &= x - 1
            ranks.append(markers - below + 1)
            weights.append(w)
        # touch deepest first, so the root-most page ends newest (it is evicted last)
        for pid in reversed(path):
            s = last[pid]
            if s:
                x = s
                while x <= size:
                    tree[x] -= 1
                    x += x & -x
                markers -= 1
            stamp += 1
            last[pid] = stamp
            x = stamp
            while x <= size:
                tree[x] += 1
                x += x & -x
            markers += 1
    rank = np.asarray(ranks, dtype=np.int64)
    w_arr = np.asarray(weights, dtype=np.int64)
    order = np.argsort(rank, kind="stable")
    rank = rank[order]
    cum = np.cumsum(w_arr[order])
    cum = np.where(rank < INF, cum, cum[rank < INF][-1] if (rank < INF).any() else 0)
    return StackDistances(rank, cum, prompt_tokens, len(last), longest)


@dataclass(frozen=True)
class CurvePoint:
    pool: int
    hit_rate: float


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
