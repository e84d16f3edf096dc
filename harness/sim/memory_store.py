"""The page store of an in-process replay: FileStore's rules (what each server knows of the others' pages
and when it learns it) with its key lists in memory, not in files under a directory.

A what-if replay's L3 lives only as long as the replay, in one process; the file store's appends and the
directory scan it makes before every lookup were a tenth of an L3 replay's time, and all system time."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager

from harness.sim.storage import FileStore

MEMORY_PREFIX = "memory:"  # a storage_dir naming a shelf here, not a directory

# shelf name -> the key lists of the stores on it, (suffix, keys in the order written): a directory's
# keys files, in memory
_SHELVES: dict[str, list[tuple[str, list[str]]]] = {}
_NAMES = itertools.count()


@contextmanager
def memory_shelf() -> Iterator[str]:
    """A fresh empty shelf for the stores of one replay (shared by its servers with shared L3); gone after."""
    name = f"{MEMORY_PREFIX}{os.getpid()}-{next(_NAMES)}"
    _SHELVES[name] = []
    try:
        yield name
    finally:
        _SHELVES.pop(name, None)


def is_memory(directory: str) -> bool:
    return directory.startswith(MEMORY_PREFIX)


class MemoryStore(FileStore):
    """FileStore on a shelf: a server's writes go to its own list, and a lookup reads what the other lists
    gained since (as FileStore reads the other servers' keys files when they grew)."""

    def __init__(self, shelf: str, suffix: str, capacity_pages: int | None = None) -> None:
        lists = _SHELVES.get(shelf)
        if lists is None:
            raise OSError(f"no shelf {shelf!r} in this process (a shelf lives as long as its replay)")
        self.suffix = suffix
        self.capacity_pages = capacity_pages
        self._lists = lists
        self._mine: list[str] = []
        self._listed = False  # FileStore's own file appears with its first write
        self._known: set[str] = set()
        self._seen: dict[int, int] = {}  # list object -> keys already read
        self.written_pages = 0
        self.refused = 0

    def _refresh(self) -> None:
        suffix = self.suffix
        for other, keys in self._lists:
            if not other.endswith(suffix):  # the keys-file pattern sim-pages-*<suffix>.keys
                continue
            done = self._seen.get(id(keys), 0)
            if len(keys) > done:
                self._known.update(keys[done:])
                self._seen[id(keys)] = len(keys)

    def _write(self, new: list[str]) -> None:
        if not self._listed:
            self._lists.append((self.suffix, self._mine))
            self._listed = True
        self._mine.extend(new)

    def clear_cache(self) -> None:
        self._known.clear()
        self._seen.clear()
