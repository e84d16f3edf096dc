"""release_free_heap: free pages held under live blocks go back to the OS (glibc), else nothing happens."""

from __future__ import annotations

import pytest

from harness.workloads.heap import release_free_heap


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def test_free_pages_between_live_blocks_are_handed_back() -> None:
    """30 MB of 6 KB blocks (C malloc, not Python's small-object arenas), one in a hundred kept: free()
    can give back only the heap's top, so the rest stays resident until the trim."""
    if not release_free_heap():
        pytest.skip("no glibc malloc_trim here")
    blocks = [bytearray(6000) for _ in range(5000)]
    kept = blocks[::100]  # live blocks scattered through the freed ones
    del blocks
    held = rss_mb()
    assert release_free_heap()
    assert held - rss_mb() > 15, "the freed pages between the kept blocks stayed resident"
    assert all(len(b) == 6000 for b in kept)  # the live blocks are untouched
