"""smg's approximate routing tree for HTTP workers: one character radix tree, every worker a tenant.

The cache_aware policy of SGLang's gateway (smg 1.13.0, crates/kv_index string_tree.rs) never sees the
workers' caches: it remembers which workers each request text was sent to, in characters, and routes a
new text among the workers holding the node where its longest match ends. This is that tree, with the
same observable choices (docs/smg-routing.md): edges split where texts part, access times are a global
epoch counter (a match refreshes one only on every 8th epoch), and eviction trims each tenant's
leaves, oldest first, to `max_size` characters.
"""

from __future__ import annotations

import heapq
import itertools
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Match:
    tenants: tuple[int, ...]  # the workers holding the node where the match ends
    matched_chars: int
    input_chars: int

    @property
    def rate(self) -> float:
        return self.matched_chars / self.input_chars if self.input_chars else 0.0


class _Node:
    __slots__ = ("children", "last_tenant", "parent", "tenants", "text")

    def __init__(self, text: str, parent: _Node | None, last_tenant: int | None) -> None:
        self.text = text
        self.parent = parent
        self.children: dict[str, _Node] = {}
        self.tenants: dict[int, int] = {}  # tenant -> last access epoch
        self.last_tenant = last_tenant


def _shared(text: str, pos: int, edge: str) -> int:
    """Characters `text[pos:]` and `edge` share from their start."""
    return len(os.path.commonprefix([text[pos : pos + len(edge)], edge]))


class CharTree:
    """The gateway's per-model string tree: match-and-insert in one descent, per-tenant char counts."""

    def __init__(self, tenants: int) -> None:
        self.root = _Node("", None, None)
        self.chars: dict[int, int] = {}
        self._epoch = itertools.count()
        for t in range(tenants):  # init_workers: insert_text("", url) per worker
            self.root.tenants.setdefault(t, 0)
            self.chars.setdefault(t, 0)
            self.root.tenants[t] = next(self._epoch)

    def _resolve(self, node: _Node) -> tuple[int | None, bool]:
        if node.last_tenant is not None and node.last_tenant in node.tenants:
            return node.last_tenant, False
        return next(iter(node.tenants), None), True

    def match(self, text: str) -> Match:
        """The longest match of `text`, and the workers holding the node where it ends."""
        pos = matched = 0
        current = match_node = self.root
        while pos < len(text):
            child = current.children.get(text[pos])
            if child is None:
                break
            shared = _shared(text, pos, child.text)
            matched += shared
            match_node = child
            if shared < len(child.text):
                break
            pos += shared
            current = child
        tenant, slow = self._resolve(match_node)
        if slow:
            match_node.last_tenant = tenant
        epoch = next(self._epoch)
        if epoch & 0x7 == 0 and tenant is not None:  # a match refreshes its tenant on every 8th epoch
            match_node.tenants[tenant] = epoch
        return Match(tuple(match_node.tenants), matched, len(text))

    def insert(self, text: str, tenant: int) -> None:
        """Record that `text` went to `tenant` (match_and_insert's insert half: the same nodes, split
        where the text leaves an edge, the tenant added along the path)."""
        self.root.tenants.setdefault(tenant, 0)
        self.chars.setdefault(tenant, 0)
        self._insert_from(self.root, text, 0, tenant)

    def _insert_from(self, prev: _Node, text: str, pos: int, tenant: int) -> None:
        while pos < len(text):
            c = text[pos]
            child = prev.children.get(c)
            if child is None:
                epoch = next(self._epoch)
                node = _Node(text[pos:], prev, tenant)
                self.chars[tenant] = self.chars.get(tenant, 0) + len(node.text)
                node.tenants[tenant] = epoch
                prev.children[c] = node
                return
            shared = _shared(text, pos, child.text)
            if shared < len(child.text):  # split the edge: the shared part becomes a new parent
                mid = _Node(child.text[:shared], prev, child.last_tenant)
                mid.tenants = dict(child.tenants)
                child.text = child.text[shared:]
                child.parent = mid
                mid.children[child.text[0]] = child
                prev.children[c] = mid
                if tenant not in mid.tenants:
                    self.chars[tenant] = self.chars.get(tenant, 0) + shared
                    mid.tenants[tenant] = 0
                prev = mid
            else:
                if tenant not in child.tenants:
                    self.chars[tenant] = self.chars.get(tenant, 0) + len(child.text)
                    child.tenants[tenant] = 0
                prev = child
            pos += shared
        prev.tenants[tenant] = next(self._epoch)

    def evict(self, max_size: int) -> None:
        """evict_tenant_by_size: each tenant's least recently used leaves go until it holds max_size chars."""
        if all(c <= max_size for c in self.chars.values()):
            return  # no tenant over the size: the walk below would remove nothing
        seq = itertools.count()
        heap: list[tuple[int, int, int, _Node]] = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            below = {t for ch in node.children.values() for t in ch.tenants}
            for t, ts in node.tenants.items():
                if t not in below:
                    heap.append((ts, next(seq), t, node))
        heapq.heapify(heap)
        while heap:
            _, _, t, node = heapq.heappop(heap)
            if self.chars.get(t, 0) <= max_size:
                continue
            if t not in node.tenants or any(t in ch.tenants for ch in node.children.values()):
                continue
            self.chars[t] = max(0, self.chars.get(t, 0) - len(node.text))
            del node.tenants[t]
            parent = node.parent
            if parent is not None and not node.children and not node.tenants and node.text:
                parent.children.pop(node.text[0], None)
            if (
                parent is not None
                and t in parent.tenants
                and not any(t in ch.tenants for ch in parent.children.values())
            ):
                heapq.heappush(heap, (parent.tenants[t], next(seq), t, parent))
