"""Hand the C allocator's free heap pages back to the OS once a trace is prepared (glibc's malloc_trim).

Preparing a Mooncake trace frees megabytes of small arrays (block_trie's pages and counts) that lie below
blocks still in use (the positions array, grown last); glibc returns heap memory only from the top, so
those pages stayed resident for the whole run: a 1,000,000-request trace's run held ~7.6 MB more than a
10,000-request one's. Without glibc (musl, macOS) this does nothing.
"""

from __future__ import annotations

import ctypes
import sys


def release_free_heap() -> bool:
    """Return whole free pages inside the heap to the OS (malloc_trim(0)); False without glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)  # 1 if it released memory, 0 if there was none to release
    return True
