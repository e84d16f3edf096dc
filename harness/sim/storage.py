"""HiCache's L3 storage tier as SGLang 0.5.23 runs it: page keys, the backends' speeds, the prefetch rules.

What the code does (sglang/srt, 0.5.23):
- A request's prefix past what the device and host trees hold is looked up in storage when the scheduler
  receives it (managers/scheduler.py `_prefetch_kvcache` -> UnifiedRadixCache.prefetch_from_storage);
  pages are keyed by a SHA-256 chain over the page's token ids and the previous page's key
  (mem_cache/utils.py `get_hash_str`), so equal prefixes get equal keys on every server.
- A storage hit under `prefetch_threshold` tokens (256, at least one page: managers/cache_controller.py
  HiCacheController.attach_storage_backend) is not fetched: reason `below_threshold`.
- When the request reaches the head of the queue, `check_prefetch_progress` asks the policy
  (`_can_terminate_prefetch`): best_effort stops the prefetch at once with what has landed;
  wait_complete keeps the request waiting until it all has; timeout waits until `prefetch_timeout_base`
  (1.0 s) + pages x page_size / 1024 x `prefetch_timeout_per_ki_token` (0.25 s), counted from the first
  blocked admission poll (`_start_storage_prefetch_wait`), then stops with what landed. Tokens not
  landed are unfulfilled with reason `storage_transfer`, or `deadline` when the timeout cut them
  (`_handle_prefetch_result`).
- Pages are written to storage when their device->host copy is acknowledged
  (`_finish_write_through_ack` -> `write_backup_storage`), so storage holds what the host tier backed up.
- The file backend (HiCacheFile, mem_cache/hicache_storage.py) keeps one `<key>_<model>_<tp rank>_<tp
  size>.bin` file per page under SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR (default /tmp/hicache) and
  reads them one after another; two servers pointed at one directory share each other's pages.

The sim keeps the page keys of every backend in that directory (FileStore: a keys file per server, as
the sim has no KV bytes to store); the backend's class only sets how long a read takes. Sources of each
figure: docs/hicache-tiers.md.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import math
import os
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

STORAGE_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
DEFAULT_STORAGE_DIR = "/tmp/hicache"  # HiCacheFile's default file_path
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
PREFETCH_THRESHOLD = 256  # HiCacheController(prefetch_threshold=256), raised to one page
TIMEOUT_BASE_S = 1.0  # prefetch_timeout_base (hybrid_cache_controller.parse_storage_backend_extra_config)
TIMEOUT_PER_KI_TOKEN_S = 0.25  # prefetch_timeout_per_ki_token (same place)
UNFULFILLED_REASONS = ("below_threshold", "host_capacity", "device_covered", "storage_transfer", "deadline")


@dataclass(frozen=True)
class StorageBackend:
    """One `--hicache-storage-backend`: its SGLang class name and the speeds a read is timed with."""

    name: str  # the CLI choice
    class_name: str  # what cached_tokens_details.storage_backend says
    read_gb_s: float  # achieved read bandwidth into host memory, GB/s (1e9)
    per_page_s: float  # fixed cost per page read (a file open and read, a lookup), serial
    latency_s: float  # one batch round trip before the first page lands
    capacity_gb: float  # what one instance may store (GB); pages past it are not written
    source: str

    def read_time(self, tokens: int, kv_bytes_per_token: int, page_size: int = 1) -> float:
        """Seconds to bring `tokens` of KV from this backend into the host pool."""
        if tokens <= 0:
            return 0.0
        pages = math.ceil(tokens / max(1, page_size))
        return self.latency_s + pages * self.per_page_s + tokens * kv_bytes_per_token / (self.read_gb_s * 1e9)

    def landed(self, elapsed_s: float, tokens: int, kv_bytes_per_token: int, page_size: int = 1) -> int:
        """Tokens (whole pages) landed `elapsed_s` after the prefetch started."""
        page = max(1, page_size)
        pages = math.ceil(tokens / page)
        if pages == 0 or elapsed_s <= self.latency_s:
            return 0
        per_page = self.per_page_s + page * kv_bytes_per_token / (self.read_gb_s * 1e9)
        done = min(pages, int((elapsed_s - self.latency_s) / per_page)) if per_page > 0 else pages
        return min(tokens, done * page)


# Each figure's source is in docs/hicache-tiers.md; the short form is kept beside it.
BACKENDS: dict[str, StorageBackend] = {
    "file": StorageBackend(
        "file",
        "HiCacheFile",
        read_gb_s=1.2,
        per_page_s=0.0,
        latency_s=0.0,
        capacity_gb=1000.0,
        source="sgl-project/sglang#26886 (iostat: HiCacheFile reads reach ~1,200 MB/s on local NVMe, Llama-3.1-8B);"
        " #39880 (HiCacheFile reads pages serially through a staging tensor); 1 TB local NVMe",
    ),
    "mooncake": StorageBackend(
        "mooncake",
        "MooncakeStore",
        read_gb_s=87.0,
        per_page_s=0.0,
        latency_s=100e-6,
        capacity_gb=4000.0,
        source="kvcache-ai/Mooncake README: Transfer Engine up to 87 GB/s over 4x200 Gbps RoCE;"
        " capacity = the DRAM/SSD pool the cluster gives it (here 4 TB)",
    ),
    "hf3fs": StorageBackend(
        "hf3fs",
        "HiCacheHF3FS",
        read_gb_s=40.0 * 1.073741824,
        per_page_s=0.0,
        latency_s=200e-6,
        capacity_gb=100_000.0,
        source="deepseek-ai/3FS README: KVCache lookups peak at 40 GiB/s read per client node",
    ),
    "nixl": StorageBackend(
        "nixl",
        "HiCacheNixl",
        read_gb_s=7.45,
        per_page_s=0.0,
        latency_s=100e-6,
        capacity_gb=1000.0,
        source="ai-dynamo/nixl GDS/POSIX plugins reading local NVMe at its datasheet rate (Samsung 990 PRO:"
        " 7,450 MB/s sequential read)",
    ),
}


def prefetch_timeout_s(tokens: int, page_size: int = 1) -> float:
    """The timeout policy's wait budget for a prefetch of `tokens` (0.5.23's code, not its docs)."""
    page = max(1, page_size)
    pages = tokens // page
    return TIMEOUT_BASE_S + pages * (page / 1024 * TIMEOUT_PER_KI_TOKEN_S)


def prefetch_threshold(page_size: int = 1) -> int:
    return max(PREFETCH_THRESHOLD, page_size)


@dataclass(frozen=True)
class PrefetchOutcome:
    """What a prefetch gave the request when the scheduler admitted it."""

    fulfilled: int  # tokens the request takes from storage
    wait_s: float  # how long admission waited for it (wait_complete / timeout)
    unfulfilled: int  # hit tokens not used
    reason: str | None  # why some were not (one of UNFULFILLED_REASONS), None when all were


def prefetch_outcome(
    policy: str,
    backend: StorageBackend,
    hit_tokens: int,
    since_start_s: float,
    kv_bytes_per_token: int,
    page_size: int = 1,
) -> PrefetchOutcome:
    """Apply the prefetch stop policy at admission, `since_start_s` after the prefetch was issued."""
    if hit_tokens <= 0:
        return PrefetchOutcome(0, 0.0, 0, None)
    if hit_tokens < prefetch_threshold(page_size):
        return PrefetchOutcome(0, 0.0, hit_tokens, "below_threshold")
    total = backend.read_time(hit_tokens, kv_bytes_per_token, page_size)
    left = max(0.0, total - since_start_s)
    if left <= 0.0:
        return PrefetchOutcome(hit_tokens, 0.0, 0, None)
    if policy == "wait_complete":
        return PrefetchOutcome(hit_tokens, left, 0, None)
    if policy == "timeout":
        budget = prefetch_timeout_s(hit_tokens, page_size)
        if left <= budget:
            return PrefetchOutcome(hit_tokens, left, 0, None)
        got = backend.landed(since_start_s + budget, hit_tokens, kv_bytes_per_token, page_size)
        return PrefetchOutcome(got, budget, hit_tokens - got, "deadline")
    got = backend.landed(since_start_s, hit_tokens, kv_bytes_per_token, page_size)  # best_effort
    return PrefetchOutcome(got, 0.0, hit_tokens - got, "storage_transfer" if got < hit_tokens else None)


PAGE_MEMO_MAX = 1 << 18  # a memo past this many pages starts again empty (~100 MB at most)


class PageMemo:
    """Pages already hashed (one server's), as a trie over page ids: a prefix hashed again costs one dict
    lookup a page, with no key tuples built (page_keys runs for every request and every backup)."""

    __slots__ = ("root", "size")

    def __init__(self) -> None:
        self.root: dict = {}  # page ids -> (digest, hex key, the pages after it)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def clear(self) -> None:
        self.root = {}
        self.size = 0


_PACK_ID = struct.Struct("<I").pack  # one token id as a 4-byte little-endian unsigned int


def page_keys(
    tokens: list[int] | tuple[int, ...], page_size: int = 1, memo: PageMemo | None = None
) -> list[str]:
    """SHA-256 chain over whole pages: key_i = sha256(key_{i-1} bytes + page i's ids as 4-byte LE ints).

    memo: pages already hashed (the caller's, e.g. one server's): a prefix hashed again costs lookups."""
    return list(iter_page_keys(tokens, page_size, memo))


def iter_page_keys(
    tokens: list[int] | tuple[int, ...], page_size: int = 1, memo: PageMemo | None = None
) -> Iterator[str]:
    """page_keys one page at a time: a lookup that stops at the first page storage lacks hashes no more."""
    page = max(1, page_size)
    if memo is None:
        memo = PageMemo()
    elif memo.size >= PAGE_MEMO_MAX:
        memo.clear()
    level = memo.root
    prior = b""
    for i in range(0, len(tokens) // page * page, page):
        ids: int | tuple[int, ...]  # a page of one id is keyed by the id itself: no tuple built
        if page == 1:
            ids = tokens[i]
            got = level.get(ids)
            data = b"" if got is not None else int(ids).to_bytes(4, "little", signed=False)
        else:
            ids = tuple(tokens[i : i + page])
            got = level.get(ids)
            data = (
                b"" if got is not None else b"".join(int(t).to_bytes(4, "little", signed=False) for t in ids)
            )
        if got is None:
            digest = hashlib.sha256(prior + data).digest()
            got = (digest, digest.hex(), {})
            level[ids] = got
            memo.size += 1
        prior = got[0]
        yield got[1]
        level = got[2]


def extend_keys(prior: bytes, tokens: Sequence[int], page: int, out: list[str]) -> bytes:
    """page_keys past a stored prefix: the keys of `tokens`' whole pages chained on from `prior` (the
    prefix's last digest, b"" at the root), appended to `out`; returns the last digest."""
    sha = hashlib.sha256
    if page == 1:
        append = out.append
        for t in tokens:
            try:
                data = _PACK_ID(t)  # the same 4 bytes as int(t).to_bytes(4, "little"), one call cheaper
            except struct.error:  # not an index in range: the original conversion (and its error)
                data = int(t).to_bytes(4, "little", signed=False)
            prior = sha(prior + data).digest()
            append(prior.hex())
        return prior
    for i in range(0, len(tokens) // page * page, page):
        data = b"".join(int(t).to_bytes(4, "little", signed=False) for t in tokens[i : i + page])
        prior = sha(prior + data).digest()
        out.append(prior.hex())
    return prior


class FileStore:
    """The pages a storage backend holds, shared through a directory as HiCacheFile's pages are.

    HiCacheFile writes one file per page; the sim has no KV bytes to write, so each server appends the
    keys of the pages it stores to its own `sim-pages-<pid><suffix>.keys` file there, and a lookup reads
    every such file in the directory (again only when one grew). Servers on one directory share pages.
    """

    def __init__(self, directory: str | os.PathLike[str], suffix: str, capacity_pages: int | None = None):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.suffix = suffix
        self.capacity_pages = capacity_pages
        self.own = self.dir / f"sim-pages-{os.getpid()}-{id(self):x}{suffix}.keys"
        self._own_path = os.path.join(os.fspath(self.dir), self.own.name)  # as _refresh's scandir names it
        self._keys_file = re.compile(fnmatch.translate(f"sim-pages-*{suffix}.keys")).fullmatch
        self._known: set[str] = set()
        self._read: dict[str, int] = {}  # keys file -> bytes already read
        self.written_pages = 0
        self.refused = 0  # pages the capacity turned away

    def _refresh(self) -> None:
        # Path.glob's own matching (fnmatch), on one scandir: a lookup per request made pathlib's glob a
        # tenth of an L3 replay
        try:
            with os.scandir(self.dir) as entries:
                found = [e for e in entries if self._keys_file(e.name)]
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            return  # as glob: a directory gone or unreadable holds no keys files
        for entry in found:
            path = entry.path
            size = entry.stat().st_size
            done = self._read.get(path, 0)
            if size <= done:
                continue
            with open(path, "rb") as f:
                f.seek(done)
                chunk = f.read(size - done)
            end = chunk.rfind(b"\n") + 1  # a line still being written is read next time
            self._known.update(chunk[:end].decode().split())
            self._read[path] = done + end

    def exists(self, key: str) -> bool:
        return key in self._known

    def hit_pages(self, keys: Iterable[str], start: int = 0) -> int:
        """Pages present from `keys[start]` on, stopping at the first missing one (batch_exists)."""
        self._refresh()
        n = 0
        for key in itertools.islice(keys, start, None):
            if key not in self._known:
                break
            n += 1
        return n

    def put(self, keys: list[str]) -> int:
        """Store the pages not stored yet; returns how many were written."""
        known = self._known
        new = [k for k in dict.fromkeys(keys) if k not in known]
        if self.capacity_pages is not None:
            room = max(0, self.capacity_pages - self.written_pages)
            self.refused += max(0, len(new) - room)
            new = new[:room]
        if not new:
            return 0
        self._write(new)
        self._known.update(new)
        self.written_pages += len(new)
        return len(new)

    def _write(self, new: list[str]) -> None:
        """Append this server's new page keys where the other servers on the directory read them."""
        data = ("\n".join(new) + "\n").encode()
        with open(self.own, "ab") as f:
            start = f.tell()  # the file's end before this write
            f.write(data)
        if self._read.get(self._own_path, 0) == start:
            # everything before was read already and these keys are known now: no lookup reads them back
            self._read[self._own_path] = start + len(data)

    def holds(self, keys: list[str]) -> bool:
        """Every one of these pages is stored (a write the capacity refused is not)."""
        return all(k in self._known for k in keys)

    def pages(self) -> int:
        """Pages every server on this directory stored."""
        self._refresh()
        return len(self._known)

    def clear_cache(self) -> None:
        """Forget what was read (the directory stays: flushing the device cache keeps L3)."""
        self._known.clear()
        self._read.clear()
