"""L3 storage rules (harness.sim.storage): page keys, the prefetch policies and timeout, the page store."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.sim.memory_store import MemoryStore, memory_shelf
from harness.sim.storage import (
    BACKENDS,
    FileStore,
    PageMemo,
    page_keys,
    prefetch_outcome,
    prefetch_threshold,
    prefetch_timeout_s,
)

KV = 131_072  # Llama-3.1-8B bf16, bytes per token
FILE = BACKENDS["file"]


def test_page_keys_chain_over_the_prefix():
    a = page_keys(list(range(100)), 16)
    b = page_keys(list(range(100)) + [7, 8, 9], 16)
    assert len(a) == 6  # whole pages only: the 4-token tail has no key
    assert a == b[:6]  # an equal prefix gives equal keys, on any server
    c = page_keys([999] + list(range(1, 100)), 16)
    assert all(x != y for x, y in zip(a, c, strict=True))  # the chain carries the first page's change
    assert len(set(page_keys([5] * 8, 1))) == 8  # equal pages at different depths differ


def test_page_keys_with_a_memo_are_the_same_keys():
    memo = PageMemo()
    for tokens, page in [
        (list(range(100)), 16),
        (list(range(100)) + [7, 8, 9], 16),
        ([5] * 8, 1),
        ([5] * 9, 1),
    ]:
        assert page_keys(tokens, page, memo) == page_keys(tokens, page)
    assert len(memo) == 6 + 9  # pages of 16 shared by the first two; single ids down one chain of 5s


def test_timeout_is_the_codes_base_plus_per_ki_token_term():
    assert prefetch_timeout_s(0) == 1.0
    assert prefetch_timeout_s(1024) == pytest.approx(1.25)
    assert prefetch_timeout_s(8192, page_size=64) == pytest.approx(1.0 + 8 * 0.25)
    assert prefetch_timeout_s(100, page_size=64) == pytest.approx(1.0 + 64 / 1024 * 0.25)  # whole pages


def test_below_threshold_is_not_fetched():
    assert prefetch_threshold(1) == 256 and prefetch_threshold(512) == 512
    out = prefetch_outcome("wait_complete", FILE, 255, 10.0, KV)
    assert (out.fulfilled, out.unfulfilled, out.reason) == (0, 255, "below_threshold")


def test_policies_at_admission():
    hit = 4096
    read = FILE.read_time(hit, KV)
    assert read > 0.3  # 4,096 x 128 KiB at 1.2 GB/s
    # admitted at once: best_effort takes what landed (nothing yet), the rest is storage_transfer
    be = prefetch_outcome("best_effort", FILE, hit, 0.0, KV)
    assert (be.fulfilled, be.wait_s, be.unfulfilled, be.reason) == (0, 0.0, hit, "storage_transfer")
    half = prefetch_outcome("best_effort", FILE, hit, read / 2, KV)
    assert 0 < half.fulfilled < hit and half.fulfilled + half.unfulfilled == hit
    # wait_complete waits for the rest of the read, whatever it takes
    wc = prefetch_outcome("wait_complete", FILE, hit, 0.1, KV)
    assert wc.fulfilled == hit and wc.wait_s == pytest.approx(read - 0.1) and wc.reason is None
    # timeout: within its budget it waits like wait_complete
    to = prefetch_outcome("timeout", FILE, hit, 0.0, KV)
    assert to.fulfilled == hit and to.wait_s == pytest.approx(read)
    # landed before admission: every policy takes it all without waiting
    for policy in ("best_effort", "wait_complete", "timeout"):
        done = prefetch_outcome(policy, FILE, hit, read + 0.01, KV)
        assert (done.fulfilled, done.wait_s, done.reason) == (hit, 0.0, None)


def test_timeout_cuts_a_slow_read_at_its_deadline():
    hit = 64 * 1024  # 8.6 GB: at 0.2 GB/s 43 s, past the 1 + 16 s budget
    slow = dataclasses.replace(FILE, read_gb_s=0.2)
    budget = prefetch_timeout_s(hit)
    assert slow.read_time(hit, KV) > budget
    out = prefetch_outcome("timeout", slow, hit, 0.0, KV)
    assert out.reason == "deadline" and out.wait_s == pytest.approx(budget)
    assert 0 < out.fulfilled < hit and out.fulfilled + out.unfulfilled == hit
    assert out.fulfilled == slow.landed(budget, hit, KV)


def test_backends_carry_speed_capacity_and_source():
    assert set(BACKENDS) == {"file", "mooncake", "hf3fs", "nixl"}
    for b in BACKENDS.values():
        assert b.read_gb_s > 0 and b.capacity_gb > 0 and b.source
    assert BACKENDS["file"].class_name == "HiCacheFile"
    # the fast backends read faster than the file backend
    assert all(
        BACKENDS[n].read_time(8192, KV) < FILE.read_time(8192, KV) for n in ("mooncake", "hf3fs", "nixl")
    )


def test_file_store_is_shared_through_its_directory(tmp_path: Path):
    keys = page_keys(list(range(40)), 4)
    a = FileStore(tmp_path, "_m_0_1")
    assert a.hit_pages(keys) == 0
    assert a.put(keys[:6]) == 6 and a.put(keys[:6]) == 0  # written once
    b = FileStore(tmp_path, "_m_0_1")  # a second server on the same directory
    assert b.hit_pages(keys) == 6 and b.pages() == 6
    assert b.hit_pages(keys, start=2) == 4
    a.put([keys[8]])  # a gap: the run stops at the first missing page
    assert b.hit_pages(keys) == 6 and b.pages() == 7
    b.put(keys[6:8])  # what b writes, a sees
    assert a.hit_pages(keys) == 9
    assert FileStore(tmp_path, "_other_0_1").hit_pages(keys) == 0  # another model's pages are not its own
    assert FileStore(tmp_path / "empty", "_m_0_1").hit_pages(keys) == 0
    capped = FileStore(tmp_path / "capped", "_m_0_1", capacity_pages=3)
    assert capped.put(keys) == 3 and capped.hit_pages(keys) == 3


def _store_story(make: Callable[[str, int | None], FileStore]) -> list[object]:
    """Two servers sharing a store, a third model's, a capped one: every answer, in order."""
    keys = page_keys(list(range(40)), 4)
    a, b, other = make("_m_0_1", None), make("_m_0_1", None), make("_other_0_1", None)
    out: list[object] = [a.hit_pages(keys), a.put(keys[:6]), a.put(keys[:6]), b.holds(keys[:6])]
    out += [b.hit_pages(keys), b.put(keys[:6]), b.written_pages, b.pages(), b.hit_pages(keys, start=2)]
    a.put([keys[8]])
    out += [b.hit_pages(keys), b.pages(), b.put(keys[6:8]), a.holds(keys[6:8]), a.hit_pages(keys)]
    out += [other.hit_pages(keys), other.put(keys[:2]), a.pages(), a.exists(keys[0])]
    a.clear_cache()  # a flush forgets what was read; the pages stay, read again at the next lookup
    out += [a.exists(keys[0]), a.holds(keys[:1]), a.hit_pages(keys), a.pages()]
    capped = make("_m_0_1", 3)
    out += [capped.put(keys[10:]), capped.refused, capped.written_pages, capped.put(keys[:2]), capped.refused]
    return out


def test_memory_store_answers_as_the_file_store(tmp_path: Path):
    # a replay's in-memory store must answer every call as the sim's file store does, sharing included
    on_disk = _store_story(lambda suffix, cap: FileStore(tmp_path, suffix, capacity_pages=cap))
    with memory_shelf() as shelf:
        in_memory = _store_story(lambda suffix, cap: MemoryStore(shelf, suffix, capacity_pages=cap))
    assert in_memory == on_disk
    assert on_disk[:5] == [0, 6, 0, False, 6]  # b knows a's pages only after a lookup reads them
    with pytest.raises(OSError, match="no shelf"):
        MemoryStore(shelf, "_m_0_1")  # the shelf went with its replay
