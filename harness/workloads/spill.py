"""An anonymous append-only temp file: bytes kept off the heap, read back by offset.

A long multi-turn run holds text for every session at once (its schedule, each session's history);
kept in Python objects that is hundreds of bytes a request. Here it lives in an unlinked file in
$TMPDIR (gone when closed or when the process dies): writes are buffered and appended, reads are
`os.pread` (no mmap: mapped pages would count in the process's RSS).
"""

from __future__ import annotations

import os
import tempfile
from array import array

from harness.errors import HarnessError

FLUSH_AT = 1 << 16  # bytes buffered before one write


class SpillFile:
    """Append bytes, get their offset; read any written range back (the buffer is flushed first)."""

    def __init__(self, folder: str | None = None) -> None:
        """folder: where the file goes (default: $TMPDIR, else the system's temp folder)."""
        self.folder = folder or tempfile.gettempdir()
        try:
            self._file = tempfile.TemporaryFile(prefix="harness-spill-", dir=self.folder)  # noqa: SIM115
        except OSError as e:
            raise self._error(e) from None
        self._fd = self._file.fileno()
        self._buf = bytearray()
        self._written = 0  # bytes on disk; the buffer follows them
        self.size = 0  # bytes appended so far (disk + buffer)

    def append(self, data: bytes) -> int:
        """Append data; returns the offset it starts at."""
        at = self.size
        self._buf += data
        self.size += len(data)
        if len(self._buf) >= FLUSH_AT:
            self.flush()
        return at

    def flush(self) -> None:
        view = memoryview(self._buf)
        try:
            while view:
                n = os.write(self._fd, view)
                view = view[n:]
        except OSError as e:
            raise self._error(e) from None
        finally:
            view.release()
        self._written += len(self._buf)
        self._buf.clear()

    def read(self, offset: int, n: int) -> bytes:
        """Up to n bytes from offset (fewer at the end of the file)."""
        if offset + n > self._written and self._buf:
            self.flush()
        return os.pread(self._fd, n, offset)

    def _error(self, e: OSError) -> HarnessError:
        return HarnessError(
            f"spill file in {self.folder}: {e.strerror or e} (a multi-turn run keeps its text there;"
            " set TMPDIR to a writable folder with room)"
        )

    def close(self) -> None:
        self._buf.clear()
        self._file.close()


def pack_ids(ids: tuple[int, ...] | list[int]) -> bytes:
    """Token ids as spilled bytes (int64, native order)."""
    return array("q", ids).tobytes()


def unpack_ids(data: bytes | bytearray) -> tuple[int, ...]:
    """pack_ids's bytes back as token ids."""
    a = array("q")
    a.frombytes(data)
    return tuple(a)
