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
        self.capacity = 0  # device pool (host-tier scenarios): available = capacity - tree tokens
        self.tree = None
        self.muted = False  # an insert frees the request's duplicate slots: not an eviction
        self.freed = 0

    def free(self, idx) -> None:
        pass

    def free_segment(self, idx, start_pos: int = 0) -> None:
        if self.muted:
            return
        self.freed += len(idx)
        self.log.append(tuple(int(v) for v in idx.tolist()))

    def available_size(self) -> int:
        return self.capacity - self.tree.evictable_size() - self.tree.protected_size()

    def mamba_full_cache_donor(self):
        return None


class _Event:
    def synchronize(self) -> None:
        pass

    def query(self) -> bool:
        return True


class _Ack:
    """One finished transfer as the cache controller reports it (every copy lands at once here)."""

    def __init__(self, node_ids: list) -> None:
        self.node_ids = list(node_ids)
        self.finish_event = _Event()
        self.num_tokens_by_pool: dict = {}
        self.num_bytes = 0
        self.timing_enabled = False


class _HostPool:
    """A host KV pool of `size` token slots (SGLang's HostKVCache allocator, without the buffers)."""

    def __init__(self, size: int) -> None:
        import torch

        self.torch = torch
        self.size = size
        self.clear()
        entry = type("Entry", (), {})()
        entry.host_pool = type("Pool", (), {"shared_allocation_domain": None})()
        entry.host_evict_fn = None
        self.anchor_entry = entry

    def clear(self) -> None:
        self.free_slots = list(range(self.size))

    def available_size(self) -> int:
        return len(self.free_slots)

    def alloc(self, n: int):
        if n > len(self.free_slots):
            return None
        out, self.free_slots = self.free_slots[:n], self.free_slots[n:]
        return self.torch.tensor(out, dtype=self.torch.int64)

    def free(self, idx) -> int:
        self.free_slots.extend(int(v) for v in idx.tolist())
        return len(idx)


class _HostGroup:
    def __init__(self, pool: _HostPool) -> None:
        self.pool = pool

    def free(self, host_value, pool=None) -> None:
        self.pool.free(host_value)

    def get_pool(self, name):
        return None


class _Controller:
    """HybridCacheController's surface the tree uses, with copies that finish when they are polled."""

    def __init__(self, write_policy: str, host: _HostPool) -> None:
        self.write_policy = write_policy
        self.mem_pool_host = host
        self.enable_storage = False
        self.ack_write_queue: list = []
        self.ack_load_queue: list = []
        self._pending: list = []

    def write(self, device_value, node_id, extra_pools=None, flush=True, **kw):
        idx = self.mem_pool_host.alloc(len(device_value))
        if idx is not None:
            self._pending.append(node_id)
        return idx

    def start_writing(self) -> None:
        if self._pending:
            self.ack_write_queue.append(_Ack(self._pending))
            self._pending = []

    def load(self, host_indices, node_id, extra_pools=None, **kw):
        self.ack_load_queue.append(_Ack([node_id]))
        return host_indices.clone() + (1 << 40)

    def start_loading(self) -> int:
        return 0

    def reset(self) -> None:
        self.ack_write_queue.clear()
        self.ack_load_queue.clear()
        self._pending = []


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

            if spec.get("tree_core"):  # "python" or "rust" (0.5.23's default when the extension imports)
                kw["tree_core_backend"] = spec["tree_core"]
            self.tree = unified.UnifiedRadixCache(
                CacheInitParams(**kw, tree_components=(ComponentType.FULL,))
            )
            self.tree_core_name = type(self.tree.tree_core).__name__
            kw["token_to_kv_pool_allocator"].tree = self.tree
            if spec.get("host") is not None:
                self._attach_host(spec["host"], spec.get("write_policy", "write_through"), ComponentType)
        else:
            radix_cache.time = _FakeTime()
            self.tree = radix_cache.RadixCache(CacheInitParams(**kw))

    def _attach_host(self, capacity: int, write_policy: str, ComponentType) -> None:
        """HiCache as init_hicache wires it, with a host pool of `capacity` tokens and a fake copy engine."""
        tree = self.tree
        self.host_pool = _HostPool(capacity)
        tree.cache_controller = _Controller(write_policy, self.host_pool)
        tree.host_pool_group = _HostGroup(self.host_pool)
        tree.components[ComponentType.FULL]._full_kv_pool_host = self.host_pool
        tree.tree_core.set_hicache_enabled()
        tree.write_through_threshold = 1 if write_policy == "write_through" else 2
        tree.is_write_back = write_policy == "write_back"
        tree.load_back_threshold = 10
        tree.enable_storage = False
        self.allocator = tree.token_to_kv_pool_allocator

    def host_used(self) -> int:
        return self.host_pool.size - self.host_pool.available_size()

    def ack_transfers(self) -> None:
        """check_hicache_events: submit the queued backups, then reap every write and load ack."""
        cc = self.tree.cache_controller
        if cc is None:
            return
        self.tree.flush_pending_backups()
        self.tree.writing_check(finish_count=len(cc.ack_write_queue))
        self.tree.loading_check(finish_count=len(cc.ack_load_queue))

    def evict_host(self, n: int) -> int:
        return self.tree.evict_host(n)

    def _key(self, toks):
        return self.RadixKey(self.array("q", toks))

    def match_prefix(self, toks):
        r = self.tree.match_prefix(self.bpc.MatchPrefixParams(key=self._key(toks)))
        if self.tree.cache_controller is not None:
            return _M(r.device_prefix_len, r.host_hit_length, r.last_device_node, r.best_match_node)
        node = r.last_device_node
        return _M(r.device_prefix_len, 0, node, node)

    def insert(self, toks, priority: int = 0, inserted_len: int = 0):
        alloc = self.tree.token_to_kv_pool_allocator
        alloc.muted = True
        try:
            params = self.bpc.InsertParams(key=self._key(toks), priority=priority, inserted_len=inserted_len)
            r = self.tree.insert(params)
        finally:
            alloc.muted = False
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

    def load_back(self, m, available=None, mem_quota=None) -> int:
        if self.tree.cache_controller is None or m.host_len <= 0:
            return 0
        if available is not None:
            self.allocator.capacity = available() + self.device_size()
        ok = self.tree.load_back(m.last_host_node, mem_quota)
        return m.host_len if ok else 0


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


def run_host_scenario(spec: dict) -> list:
    """A host-tier scenario (hostops.py) through UnifiedRadixCache with a host pool."""
    from hostops import run_host_ops

    tree = _LockingAdapter(spec)
    writes = loads = 0
    cc = tree.tree.cache_controller
    write, load = cc.write, cc.load

    def counted_write(*a, **k):
        nonlocal writes
        idx = write(*a, **k)
        writes += idx is not None
        return idx

    def counted_load(*a, **k):
        nonlocal loads
        loads += 1
        return load(*a, **k)

    cc.write, cc.load = counted_write, counted_load
    return run_host_ops(tree, spec["ops"], lambda t: [t.host_used(), t.allocator.freed, writes, loads])


def run_scenario(spec: dict) -> list:
    """Apply spec["ops"]; one result per op (see tests/oracle/test_oracle.py for the op list)."""
    if spec.get("host") is not None:
        return run_host_scenario(spec)
    tree = _LockingAdapter(spec)
    out: list = []
    locks: list = []
    for op in spec["ops"]:
        kind = op[0]
        if kind == "insert":
            out.append(tree.insert(op[1], op[2] if len(op) > 2 else 0, op[3] if len(op) > 3 else 0))
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
