"""Runs inside the oracle venv: replays JSON operations through SGLang 0.5.23's own RadixCache."""

from __future__ import annotations

import sys
import types


class _Anything(types.ModuleType):
    """A stub module whose every attribute is a harmless placeholder class."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda self, *a, **k: None})


def load_sglang():
    """Import SGLang's mem_cache modules, stubbing torchvision (the PyPI build does not load beside CPU torch)."""
    import transformers  # noqa: F401

    for name in (
        "torchvision",
        "torchvision.transforms",
        "torchvision.transforms.functional",
        "torchvision.io",
    ):
        sys.modules.setdefault(name, _Anything(name))
    from sglang.srt.mem_cache import radix_cache, unified_radix_cache  # noqa: F401

    return radix_cache, unified_radix_cache


class _FakeTime:
    """Replaces `time` inside radix_cache so both trees see the same strictly increasing stamps."""

    def __init__(self) -> None:
        self.t = 0.0

    def monotonic(self) -> float:
        self.t += 1.0
        return self.t

    @staticmethod
    def perf_counter() -> float:
        import time

        return time.perf_counter()


class _Allocator:
    device = "cpu"

    def __init__(self, log: list) -> None:
        self.log = log

    def free(self, idx) -> None:
        pass

    def free_segment(self, idx, start_pos: int = 0) -> None:
        self.log.append(tuple(int(v) for v in idx.tolist()))


class _Node:
    def __init__(self, handle, result):
        self.handle, self.result = handle, result


class Adapter:
    """SGLang's tree behind the sim tree's API (match_prefix/insert/inc_lock_ref/evict/...)."""

    def __init__(self, spec: dict) -> None:
        from array import array

        radix_cache, unified = load_sglang()  # first: it stubs torchvision
        from sglang.srt.mem_cache import base_prefix_cache as bpc
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams

        self.bpc, self.array = bpc, array
        self.RadixKey = radix_cache.RadixKey
        self.page_size = spec.get("page_size", 1)
        self.flavor = spec.get("flavor", "radix")
        self.evicted: list = []
        self.evicted_total = 0
        kw = dict(
            disable=False,
            req_to_token_pool=None,
            token_to_kv_pool_allocator=_Allocator(self.evicted),
            page_size=self.page_size,
            eviction_policy=spec["policy"],
            eviction_policy_config=spec.get("policy_config") or None,
        )
        if self.flavor == "unified":
            from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

            self.tree = unified.UnifiedRadixCache(
                CacheInitParams(**kw, tree_components=(ComponentType.FULL,))
            )
        else:
            radix_cache.time = _FakeTime()
            self.tree = radix_cache.RadixCache(CacheInitParams(**kw))

    def _key(self, toks):
        return self.RadixKey(self.array("q", toks))

    def match_prefix(self, toks):
        r = self.tree.match_prefix(self.bpc.MatchPrefixParams(key=self._key(toks)))
        node = r.last_device_node
        return _M(r.device_prefix_len, 0, node, node)

    def insert(self, toks, priority: int = 0):
        r = self.tree.insert(self.bpc.InsertParams(key=self._key(toks), priority=priority))
        return r.prefix_len

    def inc_lock_ref(self, node):
        return self.tree.inc_lock_ref(node)

    def dec_lock_ref(self, node, receipt=None):
        if self.flavor == "unified":
            return self.tree.dec_lock_ref(node, receipt.to_dec_params())
        return self.tree.dec_lock_ref(node)

    def evict(self, n: int) -> int:
        freed = self.tree.evict(self.bpc.EvictParams(num_tokens=n)).num_tokens_evicted
        self.evicted_total += freed
        return freed

    def evictable_size(self) -> int:
        return self.tree.evictable_size()

    def protected_size(self) -> int:
        return self.tree.protected_size()

    def device_size(self) -> int:
        return self.tree.evictable_size() + self.tree.protected_size()

    def load_back(self, m) -> int:
        return 0


class _M:
    def __init__(self, device_len, host_len, last_device_node, last_host_node):
        self.device_len, self.host_len = device_len, host_len
        self.last_device_node, self.last_host_node = last_device_node, last_host_node


class _LockingAdapter(Adapter):
    """Unified trees need the lock receipt back on release; keep it per node."""

    def __init__(self, spec):
        super().__init__(spec)
        self._receipts: dict = {}

    def inc_lock_ref(self, node):
        r = self.tree.inc_lock_ref(node)
        self._receipts.setdefault(node, []).append(r)
        return r

    def dec_lock_ref(self, node):
        r = self._receipts[node].pop()
        if self.flavor == "unified":
            return self.tree.dec_lock_ref(node, r.to_dec_params())
        return self.tree.dec_lock_ref(node)


def run_scenario(spec: dict) -> list:
    """Apply spec["ops"]; one result per op (see tests/oracle/test_oracle.py for the op list)."""
    tree = _LockingAdapter(spec)
    out: list = []
    locks: list = []
    for op in spec["ops"]:
        kind = op[0]
        if kind == "insert":
            out.append(tree.insert(op[1], op[2] if len(op) > 2 else 0))
        elif kind == "match":
            out.append(tree.match_prefix(op[1]).device_len)
        elif kind == "lock":
            m = tree.match_prefix(op[1])
            tree.inc_lock_ref(m.last_device_node)
            locks.append(m.last_device_node)
            out.append(m.device_len)
        elif kind == "unlock":
            tree.dec_lock_ref(locks[op[1]])
            out.append(None)
        elif kind == "evict":
            del tree.evicted[:]
            freed = tree.evict(op[1])
            out.append([freed, [list(k) for k in tree.evicted]])
        elif kind == "sizes":
            out.append([tree.evictable_size(), tree.protected_size()])
        elif kind == "serve":
            from harness.sim.radix import serve_request

            out.append(list(serve_request(tree, op[1], op[2])))
        elif kind == "trace":  # op = ["trace", [keys...], capacity]: total device hits, evicted tokens
            from harness.sim.radix import serve_request

            hits = 0
            before = tree.evicted_total
            for key in op[1]:
                hits += serve_request(tree, key, op[2])[0]
            out.append([hits, tree.evicted_total - before, tree.device_size()])
        else:
            raise ValueError(f"unknown op {kind!r}")
    return out


def bench(spec: dict) -> dict:
    """Time a block-granularity trace replay through SGLang's tree: {"seconds", "hits", "evicted"}."""
    import time

    from harness.sim.radix import serve_request

    tree = _LockingAdapter(spec)
    keys, pool = spec["bench"], spec["pool"]
    hits = 0
    t0 = time.perf_counter()
    for key in keys:
        hits += serve_request(tree, key, pool)[0]
    return {"seconds": time.perf_counter() - t0, "hits": hits}


def main() -> None:
    import json
    import os
    import warnings

    warnings.filterwarnings("ignore")
    sys.path.insert(0, os.environ.get("HARNESS_REPO", "."))
    specs = json.load(sys.stdin)
    results = [bench(s) if "bench" in s else run_scenario(s) for s in specs]
    sys.stdout.write("\n__RESULTS__" + json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
